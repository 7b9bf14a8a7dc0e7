"""Which of vLLM's two model runners Gepard runs on, and why (``GEPARD_VLLM_RUNNER=v1|v2``).

vLLM 0.32 picks its model runner in ``VllmConfig.use_v2_model_runner``, a property read in every
vLLM process: the environment variable ``VLLM_USE_V2_MODEL_RUNNER`` decides when set, otherwise
vLLM takes Model Runner V2 wherever Triton works (its GPU default) and V1 elsewhere (CPU-only vLLM,
where Triton has no CPU backend). There is no config field for it, so the choice travels as that
variable, set in this process before vLLM's engine processes start (they inherit it).

Gepard's frame step runs in a different adapter on each runner (``vllm_processors``):

- ``v1`` (the default): ``GepardFrameSamplerV1``, the adapter every CPU test drives inside a real
  vLLM engine. Until the V2 adapter has run on a GPU, the default is the path that is tested, on
  GPU as well as CPU.
- ``v2`` (opt-in): ``GepardFrameSamplerV2`` on Model Runner V2. Its tensor logic is unit-tested
  with a fake runner state; it has never run inside vLLM. It needs Triton with a backend for the
  device, so CPU-only vLLM refuses it here, before any engine process starts.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from typing import Any, Mapping, MutableMapping, Optional

from engine.errors import EngineError

logger = logging.getLogger(__name__)

RUNNERS = ("v1", "v2")
DEFAULT_RUNNER = "v1"
VLLM_ENV = "VLLM_USE_V2_MODEL_RUNNER"  # vLLM's own switch (vllm/envs.py)
SETTING = "GEPARD_VLLM_RUNNER"
_TRUE = ("1", "true")
_FALSE = ("0", "false")
_applied: Optional[str] = None  # the value apply_runner last wrote (not a user's setting)


@dataclass(frozen=True, slots=True)
class RunnerChoice:
    """The model runner vLLM is told to use, the adapter that goes with it, and why."""

    runner: str  # "v1" | "v2"
    reason: str

    @property
    def use_v2(self) -> bool:
        return self.runner == "v2"

    @property
    def adapter(self) -> str:
        return "GepardFrameSamplerV2" if self.use_v2 else "GepardFrameSamplerV1"

    @property
    def env_value(self) -> str:
        """What ``VLLM_USE_V2_MODEL_RUNNER`` must hold for this choice."""
        return "1" if self.use_v2 else "0"


def choose_runner(requested: Optional[str], has_triton: bool, env: Mapping[str, str]) -> RunnerChoice:
    """Decide the runner for ``requested`` (None: the default); EngineError when it cannot be used.

    ``has_triton``: whether vLLM can use Triton on this machine (``vllm.triton_utils.HAS_TRITON``;
    False on CPU-only vLLM). ``env``: the process environment, for a conflicting ``VLLM_USE_V2_MODEL_RUNNER``.
    """
    runner = DEFAULT_RUNNER if requested is None else str(requested).strip().lower()
    if runner not in RUNNERS:
        raise EngineError(f"{SETTING}={requested!r} is not a vLLM model runner; expected one of {', '.join(RUNNERS)}")
    # 1) vLLM's own variable, when someone set it, must agree: silently overriding either is worse
    raw = env.get(VLLM_ENV)
    if raw is not None and raw.strip():
        value = raw.strip().lower()
        wants_v2 = True if value in _TRUE else False if value in _FALSE else None
        if wants_v2 is None or wants_v2 != (runner == "v2"):
            raise EngineError(f"{VLLM_ENV}={raw!r} conflicts with {SETTING}={runner}: Gepard sets vLLM's variable "
                              f"from {SETTING}; unset {VLLM_ENV} (or make it {'1' if runner == 'v2' else '0'})")
    # 2) V2 is built on Triton kernels: without a Triton backend for the device it cannot start
    if runner == "v2" and not has_triton:
        raise EngineError(f"{SETTING}=v2 needs vLLM's Model Runner V2, which needs Triton with a backend for this "
                          "device, and vLLM reports none here (vllm.triton_utils.HAS_TRITON is False: CPU-only "
                          f"vLLM); use {SETTING}=v1")
    if runner == "v1":
        return RunnerChoice("v1", "the V1 runner runs GepardFrameSamplerV1, the adapter the CPU tests cover; the V2 "
                                  f"adapter has not run on a GPU yet ({SETTING}=v2 opts in)")
    return RunnerChoice("v2", f"opted in by {SETTING}=v2: GepardFrameSamplerV2 is unit-tested with a fake runner "
                              "state only and has not run inside vLLM before")


def apply_runner(choice: RunnerChoice, env: MutableMapping[str, str] = os.environ) -> None:
    """Tell vLLM (this process and the engine processes it starts) which runner to use."""
    global _applied
    env[VLLM_ENV] = _applied = choice.env_value


def check_runner(choice: RunnerChoice, vllm_config: Any) -> None:
    """EngineError unless vLLM's resolved config really uses the chosen runner.

    vLLM may force V2 for features Gepard does not use (HiSparse, watermarking), and a vLLM whose
    environment cache is already frozen in this process would ignore the variable: either way the
    adapter would not match the runner, so start-up stops here instead.
    """
    if bool(vllm_config.use_v2_model_runner) != choice.use_v2:
        actual = "v2" if vllm_config.use_v2_model_runner else "v1"
        raise EngineError(f"vLLM resolved model runner {actual} but {SETTING} chose {choice.runner} "
                          f"({VLLM_ENV}={os.environ.get(VLLM_ENV)!r}); its processor adapter would not match")


def select_runner(requested: Optional[str]) -> RunnerChoice:
    """Choose, log (one line) and apply the runner for a vLLM engine about to start in this process."""
    from vllm.triton_utils import HAS_TRITON

    env = dict(os.environ)
    if env.get(VLLM_ENV) == _applied:  # written by an earlier engine of this process, not by the user
        env.pop(VLLM_ENV, None)
    choice = choose_runner(requested, bool(HAS_TRITON), env)
    apply_runner(choice)
    logger.info("vLLM model runner %s (%s): %s", choice.runner, choice.adapter, choice.reason)
    return choice


__all__ = ["DEFAULT_RUNNER", "RUNNERS", "RunnerChoice", "apply_runner", "check_runner", "choose_runner", "select_runner"]
