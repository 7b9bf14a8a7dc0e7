"""vLLM plugin entry point (``vllm.general_plugins``: ``gepard = engine.backends.vllm_plugin:register``).

vLLM calls ``register()`` in every process it starts (API, engine core, worker) when
``VLLM_PLUGINS`` allows ``gepard`` (or is unset). vLLM only logs a plugin's exception, and a broken
plugin then shows up later as "architecture not supported", so this stays trivially safe: it
registers the architecture by a lazy ``module:Class`` string and imports nothing heavy.

In vLLM's own child processes (its engine core and workers, never the process that embeds vLLM)
it also starts a parent watch: a daemon thread that ends the process once its parent is gone. vLLM
stops its children when the API process exits normally, but a SIGKILLed (or OOM-killed) gateway
left them running for good, with the model's weights and KV cache (GPU memory on a GPU).
PR_SET_PDEATHSIG cannot do it: it fires when the parent *thread* exits, and vLLM spawns the core
from an executor thread.
"""

from __future__ import annotations

import multiprocessing
import os
import threading
import time

from engine.backends.vllm_layout import ARCHITECTURE

MODEL_CLASS = "engine.backends.vllm_model:GepardForTTS"
# multiprocessing names vLLM gives the processes it starts (v1/engine/utils.py, multiproc_executor.py,
# coordinator.py); anything else (the gateway, a test process, a uvicorn worker) is never watched
VLLM_CHILD_NAMES = ("EngineCore", "VllmWorker", "DPCoordinator")
PARENT_POLL_S = 1.0

_watching = False


def register() -> None:
    from vllm import ModelRegistry

    if ARCHITECTURE not in ModelRegistry.get_supported_archs():
        ModelRegistry.register_model(ARCHITECTURE, MODEL_CLASS)
    watch_parent()


def is_vllm_child() -> bool:
    """Whether this process is one vLLM started (by its multiprocessing name, and it has a parent)."""
    return multiprocessing.parent_process() is not None and \
        multiprocessing.current_process().name.startswith(VLLM_CHILD_NAMES)


def watch_parent(poll_s: float = PARENT_POLL_S) -> bool:
    """In a vLLM child process, start (once) a daemon thread that exits the process when its parent
    dies (it is reparented: ``os.getppid()`` changes). Returns whether a watch runs."""
    global _watching
    if _watching:
        return True
    if not is_vllm_child():
        return False
    parent = multiprocessing.parent_process()
    expected = parent.pid if parent is not None and parent.pid is not None else os.getppid()

    def watch() -> None:
        while os.getppid() == expected:
            time.sleep(poll_s)
        # no cleanup to wait for: the parent that would coordinate it is gone; the OS frees the rest
        os.write(2, f"[gepard] parent process {expected} is gone; vLLM child {os.getpid()} exits\n".encode())
        os._exit(1)

    threading.Thread(target=watch, name="gepard-parent-watch", daemon=True).start()
    _watching = True
    return True
