"""Speaker prefixes for the running checkpoint: a voice stored under another one is recomputed.

    prompts = PrefixRecomputer(store, engine.compress_reference, engine.model_info.fingerprint)
    prompt = await prompts.get_prompt(voice_id)    # a VoicePrompt whose prefix fits this checkpoint

A stored prefix [K, hidden] is one checkpoint's compressor output for the voice's reference codes;
other weights read it as a different speaker, and another hidden size cannot read it at all. Each
voice records the fingerprint of the weights that computed its prefix (``Voice.model_fingerprint``):

- same fingerprint: the store's prompt as it is (the hot path: one string comparison, no extra
  round trip);
- another fingerprint, reference codes stored (every clone keeps them): the prefix is recomputed
  from the codes with this checkpoint's compressor and written back with
  ``VoiceStore.replace_prefix``, so other replicas and later restarts read the new one. Concurrent
  first uses in one process share one recompute;
- another fingerprint, no codes: VoiceIncompatibleError (409 ``voice_incompatible``), with a
  WARNING for the operator once per voice and process.

Why at first use, not at start-up: start-up would read every stored voice's tensors (all of Redis,
on every replica, before ready) for voices that may never be used again; at first use one request
pays one compressor pass. Preloaded voices are the exception: the preload reads them at start-up
anyway, so it recomputes them there (voices/preload.py).

Replicas on different checkpoints sharing one store (a rolling checkpoint change) recompute a voice
used on both sides back and forth, one compressor pass per switch, until the old replicas are gone.
"""

from __future__ import annotations

import asyncio
import functools
import logging
from typing import Awaitable, Callable, Optional

import torch

from voices.errors import VoiceCloningError, VoiceIncompatibleError, VoiceStoreError
from voices.models import VoicePrompt, VoiceRecord
from voices.store import VoiceStore

logger = logging.getLogger(__name__)

CompressFn = Callable[[torch.Tensor], torch.Tensor]  # ref_codes [T, 32] int -> prefix [K, hidden]


async def compress_codes(compress: CompressFn, voice_id: str, ref_codes: torch.Tensor, *,
                         run: Optional[Callable[..., Awaitable[torch.Tensor]]] = None) -> torch.Tensor:
    """ref_codes [T, 32] -> prefix [K, hidden] float on CPU, in a worker thread (``compress`` blocks):
    ``run(compress, ref_codes)`` when given (a clone's steps on the clone executor, voices/cloning.py),
    else ``asyncio.to_thread``.

    Raises VoiceCloningError if ``compress`` fails or returns anything but a finite float [K, hidden].
    """
    try:
        prefix = await (run or asyncio.to_thread)(compress, ref_codes)
    except (VoiceStoreError, asyncio.CancelledError):
        raise
    except Exception as exc:
        raise VoiceCloningError(f"voice {voice_id}: compressing the reference codes failed: {exc}") from exc
    if not isinstance(prefix, torch.Tensor) or prefix.dim() != 2 or not prefix.is_floating_point() \
            or prefix.numel() == 0:
        got = (tuple(prefix.shape), prefix.dtype) if isinstance(prefix, torch.Tensor) else type(prefix).__name__
        raise VoiceCloningError(f"voice {voice_id}: compressor returned {got}; expected a float prefix [K, hidden]")
    prefix = prefix.detach().to("cpu")
    if not torch.isfinite(prefix).all():
        raise VoiceCloningError(f"voice {voice_id}: compressor returned non-finite values")
    return prefix


class PrefixRecomputer:
    """Serves stored voices' prompts for the checkpoint that owns ``compress`` and
    ``model_fingerprint`` (``ModelInfo.fingerprint``). Borrows ``store``; closes nothing."""

    def __init__(self, store: VoiceStore, compress: CompressFn, model_fingerprint: str) -> None:
        self.store = store
        self.compress = compress
        self.model_fingerprint = model_fingerprint
        self._running: dict[str, asyncio.Task[VoiceRecord]] = {}  # voice_id -> its recompute
        self._reported: set[str] = set()  # incompatible voices already logged (once each, not per request)

    async def get_prompt(self, voice_id: str) -> VoicePrompt:
        """The voice's prompt for this checkpoint (see the module docstring). Raises what
        ``store.get_prompt`` raises, VoiceIncompatibleError, or VoiceCloningError."""
        prompt = await self.store.get_prompt(voice_id)
        if prompt.model_fingerprint == self.model_fingerprint:
            return prompt
        task = self._running.get(voice_id)
        if task is None:
            task = asyncio.create_task(self.recompute(voice_id), name=f"recompute-voice-{voice_id}")
            self._running[voice_id] = task
            task.add_done_callback(functools.partial(self._finished, voice_id))
        # shielded: a caller that goes away (client hung up) must not cancel the others' recompute
        record = await asyncio.shield(task)
        return record.prompt()

    async def recompute(self, voice_id: str) -> VoiceRecord:
        """Recompute and store the voice's prefix from its reference codes unless it already has
        this checkpoint's; returns the record as stored. VoiceIncompatibleError without codes."""
        record = await self.store.get_record(voice_id)  # the codes are not in the prompt cache
        stored_fingerprint = record.voice.model_fingerprint
        if stored_fingerprint == self.model_fingerprint:  # another replica (or call) was first
            return record
        if record.ref_codes is None:
            error = VoiceIncompatibleError(voice_id, stored_fingerprint, self.model_fingerprint,
                                           tuple(record.prefix.shape))
            if voice_id not in self._reported:
                self._reported.add(voice_id)
                logger.warning("%s", error)
            raise error
        prefix = await compress_codes(self.compress, voice_id, record.ref_codes.long())
        voice = await self.store.replace_prefix(voice_id, prefix, self.model_fingerprint)
        logger.info("voice %s: prefix from model %s recomputed for this model %s: %s -> %s", voice_id,
                    stored_fingerprint or "(unrecorded)", self.model_fingerprint,
                    list(record.prefix.shape), list(prefix.shape))
        return VoiceRecord(voice=voice, prefix=prefix, ref_codes=record.ref_codes)

    def _finished(self, voice_id: str, task: "asyncio.Task[VoiceRecord]") -> None:
        if self._running.get(voice_id) is task:
            del self._running[voice_id]
        if not task.cancelled():
            task.exception()  # marks it retrieved: every waiter may have gone before it ended
