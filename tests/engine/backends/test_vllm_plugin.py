"""The vLLM plugin entry point registers GepardForTTS lazily and idempotently."""

import importlib.metadata

import pytest

pytest.importorskip("vllm")

from vllm import ModelRegistry  # noqa: E402

from engine.backends.vllm_plugin import MODEL_CLASS, register  # noqa: E402

pytestmark = pytest.mark.vllm


def test_entry_point_is_installed_and_registration_is_idempotent():
    entry = [e for e in importlib.metadata.entry_points(group="vllm.general_plugins") if e.name == "gepard"]
    assert [e.value for e in entry] == ["engine.backends.vllm_plugin:register"]
    register()
    register()
    assert "GepardForTTS" in ModelRegistry.get_supported_archs()
    module, _, cls = MODEL_CLASS.partition(":")
    assert module == "engine.backends.vllm_model" and cls == "GepardForTTS"
