"""vLLM plugin entry point (``vllm.general_plugins``: ``gepard = engine.backends.vllm_plugin:register``).

vLLM calls ``register()`` in every process it starts (API, engine core, worker) when
``VLLM_PLUGINS`` allows ``gepard`` (or is unset). vLLM only logs a plugin's exception, and a broken
plugin then shows up later as "architecture not supported", so this stays trivially safe: it
registers the architecture by a lazy ``module:Class`` string and imports nothing heavy.
"""

from __future__ import annotations

from engine.backends.vllm_layout import ARCHITECTURE

MODEL_CLASS = "engine.backends.vllm_model:GepardForTTS"


def register() -> None:
    from vllm import ModelRegistry

    if ARCHITECTURE not in ModelRegistry.get_supported_archs():
        ModelRegistry.register_model(ARCHITECTURE, MODEL_CLASS)
