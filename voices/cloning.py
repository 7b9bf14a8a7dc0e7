"""Voice cloning: a reference clip becomes a stored voice with a precomputed speaker prefix.

    clip bytes -> load_reference_clip -> pcm [N] float32 @ 22050 Hz
               -> encoder.encode       -> codes [32, T] int64 (unfolded NanoCodec digits)
               -> transpose            -> ref_codes [T, 32]
               -> compress             -> prefix [K, hidden] (K = 8, hidden = 1024 for Gepard)
               -> store.put(VoiceRecord(voice, prefix, ref_codes as int16))

The prefix is computed once; synthesis with the voice never touches audio again. The reference
codes are kept so the prefix can be redone for another checkpoint (``VoiceCloner.recompute``; the
synthesis path does it at a voice's first use, voices/recompute.py). Every step runs before
``store.put``, so a failure anywhere stores nothing.

The blocking steps (decode, encode, compress) run one after another on the clone executor
(``VoiceCloner.executor``: ``max_concurrent`` threads of its own), never on the event loop's
default executor, where the TTS routes encode audio: clones, however long, cannot starve synthesis.
A clone cancelled while a step runs (its client hung up: api/disconnects.py) cannot interrupt that
thread, so the cancel waits for the step to end and no further step starts; the decode also stops
at its next internal check. The caller's cancelled ``clone`` therefore returns only once no thread
works for it any more, and a clone place held around it (api/routes/voices.py) stays taken until
then.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Optional, TypeVar

import numpy as np
import torch

from voices.audio_input import (
    DEFAULT_MAX_BYTES,
    DEFAULT_MAX_REF_SECONDS,
    DEFAULT_MIN_SECONDS,
    SILENCE_THRESHOLD_DBFS,
    load_reference_clip,
)
from voices.errors import VoiceCloningError, VoiceStoreError
from voices.models import Locale, Voice, VoiceRecord, new_voice_id
from voices.recompute import CompressFn, PrefixRecomputer, compress_codes
from voices.store import VoiceStore

if TYPE_CHECKING:  # annotation only: importing codec_worker would load the codec package
    from codec_worker.interface import CodecEncoder

logger = logging.getLogger(__name__)

NUM_CODE_CHANNELS = 32
#: Voice clones one cloner runs at once by default (GEPARD_MAX_CONCURRENT_CLONES): the clone
#: executor's threads, and the clone places the route hands out (api/routes/voices.py). Cloning is
#: rare and takes seconds; more at once only queue for the same CPU.
MAX_CONCURRENT_CLONES = 4

T = TypeVar("T")


class _StepsCancelled(Exception):
    """Raised by a step's own check once its clone was cancelled (it never leaves ``_Steps``)."""


class _Steps:
    """One clone's blocking steps, each on the clone executor (see the module docstring)."""

    def __init__(self, voice_id: str, executor: ThreadPoolExecutor) -> None:
        self.voice_id = voice_id
        self._executor = executor
        self._cancelled = threading.Event()

    def check(self) -> None:
        """For a step's thread, between its own parts: stop once the clone was cancelled."""
        if self._cancelled.is_set():
            raise _StepsCancelled(self.voice_id)

    async def run(self, fn: Callable[..., T], /, *args: Any, **kwargs: Any) -> T:
        """``fn(*args, **kwargs)`` on the clone executor. Cancelled meanwhile: the thread is told
        (``check``) and waited for, then the cancellation goes on; no later step starts."""
        work = self._executor.submit(functools.partial(fn, *args, **kwargs))
        future = asyncio.wrap_future(work)
        try:
            return await asyncio.shield(future)
        except asyncio.CancelledError:
            self._cancelled.set()
            if not work.cancel():  # it runs: it cannot be stopped, only waited for
                logger.info("voice %s: clone cancelled; waiting for its %s to end", self.voice_id,
                            getattr(fn, "__name__", "step"))
                await _until_done(future)
            raise


async def _until_done(future: "asyncio.Future[Any]") -> None:
    """Wait until ``future`` (a thread's) is done, however often the waiter is cancelled meanwhile:
    the thread runs on regardless, and what it holds must not be handed on before it ends."""
    while not future.done():
        try:
            await asyncio.wait((future,))
        except asyncio.CancelledError:
            continue
    if not future.cancelled():
        future.exception()  # retrieved: a cancelled clone's result or error goes nowhere


@dataclass(frozen=True, slots=True)
class ClipLimits:
    """What an uploaded reference clip may be (see ``voices/audio_input.py``)."""

    max_bytes: int = DEFAULT_MAX_BYTES
    max_ref_seconds: float = DEFAULT_MAX_REF_SECONDS  # keep the first N seconds; 0 keeps all
    min_seconds: float = DEFAULT_MIN_SECONDS
    silence_threshold_dbfs: float = SILENCE_THRESHOLD_DBFS


class VoiceCloner:
    """Clones voices into ``store`` with ``encoder`` (audio -> codes) and ``compress``
    (codes -> prefix, e.g. ``engine.compress_reference``). Borrows all three; closes nothing.

    ``compress`` is a blocking call and runs on the clone executor. ``model_fingerprint`` is
    recorded on every voice (``ModelInfo.fingerprint`` of the engine that owns ``compress``).
    ``max_concurrent``: the executor's threads (the route gives out as many clone places).
    """

    def __init__(self, encoder: "CodecEncoder", compress: CompressFn, model_fingerprint: str,
                 store: VoiceStore, *, limits: ClipLimits = ClipLimits(), user_id: str = "",
                 max_concurrent: int = MAX_CONCURRENT_CLONES) -> None:
        if max_concurrent < 1:
            raise ValueError(f"max_concurrent must be at least 1, got {max_concurrent}")
        self.encoder = encoder
        self.compress = compress
        self.model_fingerprint = model_fingerprint
        self.store = store
        self.limits = limits
        self.user_id = user_id
        self.max_concurrent = max_concurrent
        # The threads every clone's blocking steps run on: apart from the event loop's default
        # executor, which the TTS routes use to encode audio, so no number of clones can hold up
        # synthesis. Threads start only when a clone needs one.
        self.executor = ThreadPoolExecutor(max_concurrent, thread_name_prefix="voice-clone")

    def close(self) -> None:
        """No new clone steps; a step still running ends on its own (its clone waits for it)."""
        self.executor.shutdown(wait=False, cancel_futures=True)

    async def clone(
        self,
        clip_bytes: bytes,
        filename: Optional[str],
        content_type: Optional[str],
        name: str,
        language: str,
        description: Optional[str] = None,
        gender: Optional[str] = None,
        accent: Optional[str] = None,
        base_voice_id: Optional[str] = None,
        *,
        voice_id: Optional[str] = None,
        builtin: bool = False,
    ) -> Voice:
        """Clone a voice from an uploaded clip and store it; returns the stored Voice.

        ``base_voice_id`` (a Cartesia option for enhancing a clone from a catalogue voice) is
        accepted and ignored. ``voice_id`` / ``builtin`` serve the start-up preload. Raises
        InvalidVoiceError (metadata), InvalidClipError subclasses (the clip),
        VoiceCloningError (encoder or compressor), VoiceExistsError, VoiceStoreUnavailableError.
        """
        # 1) metadata first: a bad name or gender fails before any audio work
        voice = Voice(
            id=voice_id or new_voice_id(),
            name=name,
            language=language,
            description=description or "",
            gender=gender,
            accent=accent,
            locales=(Locale(language, is_native=True),),
            is_owner=not builtin,
            access="public" if builtin else "private",
            visibility="all" if builtin else "owner",
            user_id=self.user_id,
            model_fingerprint=self.model_fingerprint,
            builtin=builtin,
        )
        if base_voice_id:
            logger.debug("voice %s: base_voice_id %s ignored", voice.id, base_voice_id)
        steps = _Steps(voice.id, self.executor)  # the blocking steps, on the clone executor (module docstring)
        # 2) clip -> pcm [N] float32 @ encoder rate (blocking decode + resample)
        limits = self.limits
        pcm = await steps.run(
            load_reference_clip, clip_bytes, filename=filename, content_type=content_type,
            max_bytes=limits.max_bytes, max_ref_seconds=limits.max_ref_seconds,
            min_seconds=limits.min_seconds, target_rate=self.encoder.sample_rate_hz,
            silence_threshold_dbfs=limits.silence_threshold_dbfs, check=steps.check,
        )
        # 3) pcm -> codes [32, T] -> ref_codes [T, 32]
        ref_codes = await self._encode(voice.id, pcm, steps)
        # 4) ref_codes -> prefix [K, hidden]
        prefix = await compress_codes(self.compress, voice.id, ref_codes, run=steps.run)
        # 5) store; nothing was written before this line
        record = VoiceRecord(voice=voice, prefix=prefix, ref_codes=ref_codes.to(torch.int16))
        stored = await self.store.put(record)
        logger.info("voice %s cloned: %d reference frames -> prefix %s", voice.id,
                    ref_codes.shape[0], tuple(prefix.shape))
        return stored

    async def recompute(self, voice_id: str) -> Voice:
        """Recompute a stored voice's prefix from its reference codes with this cloner's
        ``compress`` (e.g. after a checkpoint change) and store it with ``model_fingerprint``.

        Voices stored without reference codes raise VoiceIncompatibleError: clone them again.
        """
        recomputer = PrefixRecomputer(self.store, self.compress, self.model_fingerprint)
        return (await recomputer.recompute(voice_id)).voice

    async def _encode(self, voice_id: str, pcm: np.ndarray, steps: Optional[_Steps] = None) -> torch.Tensor:
        """pcm -> checked ref_codes [T, 32]. An encoder with a blocking ``encode_blocking``
        (NanoCodecEncoder) runs it as one of ``steps`` (the clone executor); any other CodecEncoder's
        ``encode`` is awaited as it is."""
        blocking = getattr(self.encoder, "encode_blocking", None)
        try:
            if steps is not None and callable(blocking):
                codes = await steps.run(blocking, pcm)
            else:
                codes = await self.encoder.encode(pcm)
        except (VoiceStoreError, asyncio.CancelledError):
            raise
        except Exception as exc:
            raise VoiceCloningError(f"voice {voice_id}: encoding the reference clip failed: {exc}") from exc
        if not isinstance(codes, torch.Tensor) or codes.dim() != 2 or codes.shape[0] != NUM_CODE_CHANNELS \
                or codes.shape[1] == 0 or codes.is_floating_point():
            got = (tuple(codes.shape), codes.dtype) if isinstance(codes, torch.Tensor) else type(codes).__name__
            raise VoiceCloningError(
                f"voice {voice_id}: encoder returned {got}; expected integer codes [{NUM_CODE_CHANNELS}, T>0]"
            )
        if int(codes.min()) < 0 or int(codes.max()) > torch.iinfo(torch.int16).max:
            raise VoiceCloningError(
                f"voice {voice_id}: encoder codes span [{int(codes.min())}, {int(codes.max())}], "
                f"outside the int16 range they are stored in"
            )
        return codes.detach().to("cpu").transpose(0, 1).contiguous()  # [32, T] -> [T, 32]
