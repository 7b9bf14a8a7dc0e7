"""On CPU, vLLM's engine processes start with oneDNN's primitive cache capped (CPU_ONEDNN_CACHE_CAPACITY),
unless the operator set the variable under either of oneDNN's names; this process keeps its own.

Here the environment while the processes spawn (_engine_process_env); that a started engine's worker
really has the cap: test_vllm_backend, on the engine that module starts anyway (a start costs ~40 s).
"""

import os

import pytest

pytest.importorskip("vllm")

from engine.backends.vllm_backend import (  # noqa: E402
    CPU_ONEDNN_CACHE_CAPACITY,
    ONEDNN_CACHE_VARS,
    _engine_process_env,
)

NEW, OLD = ONEDNN_CACHE_VARS


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
