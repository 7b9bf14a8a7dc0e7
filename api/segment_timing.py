"""The timing events of one spoken segment, shared by ``/tts/sse`` and the WebSocket.

``add_timestamps`` gives a ``timestamps`` event (words), ``add_phoneme_timestamps`` a
``phoneme_timestamps`` event (IPA phonemes, api/text/phonemes.py); both come after the segment's
audio, estimated from it in one pass, with times from the start of the context's audio. A segment
with nothing spoken (a pause, emoji) gets neither. ``timing_events`` costs a few milliseconds
(voice activity over the segment's PCM, eSpeak's process for words not read before), so the routes call
``segment_timing_events``, which runs it on one thread of its own: off the event loop, and not in
the default executor, whose pool grows a thread (and a malloc arena, tens of MB of RSS) whenever
every thread is busy.
"""

from __future__ import annotations

import asyncio
import logging
from concurrent.futures import ThreadPoolExecutor
from typing import Optional, Protocol

import numpy as np

from api.protocol.events import PhonemeTimestampsEvent, ServerEvent, TimestampsEvent
from api.synthesis import DEFAULT_LANGUAGE, Segment
from api.text.errors import PhonemesUnavailableError
from api.text.normalization import reading_language
from api.text.phonemes import phoneme_timestamps, phonemizer, phonemizer_started
from api.text.timestamps import spoken_word_timestamps, tokens_timestamps

__all__ = [
    "TimingRequest",
    "check_timing_request",
    "load_phonemizer",
    "segment_timing_events",
    "timing_events",
    "wants_timing",
    "warm_up_timing",
]

logger = logging.getLogger(__name__)

_TIMING_THREAD = ThreadPoolExecutor(max_workers=1, thread_name_prefix="gepard-timing")


class TimingRequest(Protocol):
    """The fields of an SSE request or a WebSocket context's first message that timing reads."""

    add_timestamps: Optional[bool]
    add_phoneme_timestamps: Optional[bool]
    use_normalized_timestamps: Optional[bool]
    normalization: Optional[str]


def wants_timing(req: TimingRequest) -> bool:
    """Whether the segment's audio must be kept for timing events."""
    return bool(req.add_timestamps or req.add_phoneme_timestamps)


async def warm_up_timing() -> None:
    """Start the timing thread and load eSpeak NG on it (the gateway's warm-up), so neither waits
    for the first request that asks for timing."""
    await asyncio.get_running_loop().run_in_executor(_TIMING_THREAD, load_phonemizer)


def load_phonemizer() -> None:
    """Load eSpeak NG now, so the first request asking for phonemes does not wait for it; a
    WARNING when it cannot be loaded (those requests get 501)."""
    try:
        phonemizer().check(DEFAULT_LANGUAGE)
    except PhonemesUnavailableError as exc:
        logger.warning("phoneme timestamps unavailable (add_phoneme_timestamps gets 501 phonemes_unavailable): %s", exc)


async def check_timing_request(req: TimingRequest, language: Optional[str]) -> None:
    """Before any audio: phonemes need eSpeak NG (501 ``phonemes_unavailable``) and a voice of it for
    the language the text is read in (400 ``unsupported_language``): the request's normalization
    locale, else ``language``, what it is spoken in (api/synthesis.py ``speaking_language``). Once
    eSpeak's process has started (the warm-up starts it) or failed to, this is a lookup on the
    event loop; before, the start (~50 ms, a Python process) runs on the timing thread."""
    if not req.add_phoneme_timestamps:
        return
    read_in = reading_language(language or DEFAULT_LANGUAGE, req.normalization)
    if phonemizer_started():
        phonemizer().check(read_in)
    else:
        await asyncio.get_running_loop().run_in_executor(_TIMING_THREAD, lambda: phonemizer().check(read_in))


def timing_events(
    segment: Segment,
    pieces: list[np.ndarray],
    sample_rate_hz: int,
    offset_s: float,
    req: TimingRequest,
    context_id: Optional[str],
    flush_id: Optional[int] = None,
) -> list[ServerEvent]:
    """The events ``req`` asked for, for ``segment`` whose audio ``speak`` yielded as ``pieces`` and
    which starts ``offset_s`` into the context's audio."""
    if not (wants_timing(req) and segment.has_speech and pieces):
        return []
    spoken = spoken_word_timestamps(segment.normalized, segment.speech_pcm(pieces, sample_rate_hz), offset_s,
                                    sample_rate_hz)
    events: list[ServerEvent] = []
    if req.add_timestamps:
        words = spoken if req.use_normalized_timestamps else tokens_timestamps(segment.normalized, spoken, offset_s)
        if words.words:
            events.append(TimestampsEvent(words=list(words.words), start_s=list(words.start), end_s=list(words.end),
                                          context_id=context_id, flush_id=flush_id))
    if req.add_phoneme_timestamps:
        try:
            said = phoneme_timestamps(spoken, segment.normalized.language or DEFAULT_LANGUAGE, phonemizer())
        except PhonemesUnavailableError as exc:
            # eSpeak's process died and no new one starts: the audio already accepted goes on, only
            # this segment's phonemes are missing (new requests asking for them get 501)
            logger.warning("phonemes: none for a segment of context %s: %s", context_id, exc)
            return events
        if said.phonemes:
            events.append(PhonemeTimestampsEvent(phonemes=list(said.phonemes), start_s=list(said.start),
                                                 end_s=list(said.end), context_id=context_id, flush_id=flush_id))
    return events


async def segment_timing_events(
    segment: Segment,
    pieces: list[np.ndarray],
    sample_rate_hz: int,
    offset_s: float,
    req: TimingRequest,
    context_id: Optional[str],
    flush_id: Optional[int] = None,
) -> list[ServerEvent]:
    """``timing_events`` on the timing thread; no thread hop when ``req`` asked for none."""
    if not wants_timing(req):
        return []
    return await asyncio.get_running_loop().run_in_executor(
        _TIMING_THREAD, timing_events, segment, pieces, sample_rate_hz, offset_s, req, context_id, flush_id)
