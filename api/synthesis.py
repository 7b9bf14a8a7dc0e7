"""SynthesisService: transcript + voice -> engine frames -> codec PCM, shared by the three TTS routes.

    service.check_request(req)                       # model id, transcript length (raises ApiError)
    prompt = await service.voice_prompt(voice_id)    # for this checkpoint; VoiceNotFoundError names the id
    language = speaking_language(req.effective_language, prompt.language)
    for segment in service.plan(text, language, normalization):
        async for pcm in service.speak(segment, prompt.prefix, sampling, request_id):   # [N] float32 @ 22050 Hz
            ...

Gepard needs a segment's whole text before it starts (R and SOS depend on it), so a transcript
is cut into sentence segments; each segment is one engine request (several in a row when its
text reads as more words than one request can finish: api/text/speech_pieces.py). Text is normalised per
segment (numbers, dates... spoken as words) and the alignment is kept for word timestamps.
Closing a ``speak`` iterator early (client gone, cancel) aborts the engine request and frees
the codec stream.

Transcript tags (Cartesia's ``<break>``, ``<spell>``, ``<speed>``, ``<volume>``, ``<emotion>``;
api/text/markup.py). ``segment()`` reads them: a segment's breaks become its ``pause_after_s``,
spell spans are spoken character by character, and ``<speed>``/``<volume>`` set the segment's own
speed and volume through a ``MarkupState`` that ``plan()`` keeps for one request and a WebSocket
context keeps for its life, so a tag holds until the next of its kind. A bad value is
InvalidMarkupError (400 ``invalid_markup``): before the response on HTTP, in band on a WebSocket.

Language. A request is read in its own ``language`` (else ``locale``). When it names none (LiveKit
sends ``"language": null``) or only the voice's language without a region, it is read in the
voice's (``Voice.reading_locale``: its language, made regional by its accent or locales), as
Gepard's hosted API, where language is a property of the voice: an "es" request to a Mexican voice
reads "$" as pesos (``speaking_language``). A WebSocket context settles its language at its first text.

Pronunciation dictionaries. A request's dictionary is read from the store once (a WebSocket
context re-reads it for each segment through its ``ContextDictionary``, so an update applies to the
next segment). The text after the dictionary must fit GEPARD_MAX_TRANSCRIPT_CHARS as the text sent
does: a whole HTTP transcript, each segment of a WebSocket context (PronouncedTextTooLongError,
400 ``transcript_too_long``), so a long alias cannot make one request many times longer for the
engine. The last copy read of each dictionary is kept (``dictionary_memory``): while the store
cannot be reached, requests and contexts speak with it (a WARNING once per outage), as voices speak
from their cached prompts; a context whose dictionary is deleted after it was accepted goes on with
its last copy (an INFO line), so the text it accepted is still spoken.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import time
from dataclasses import dataclass
from typing import AsyncIterator, Optional

import numpy as np
import torch

from api.admission import Admission, LoadMeter, StreamTicket
from api.audio.tempo import TimeStretch
from api.errors import PronouncedTextTooLongError, RateLimitedError, TranscriptTooLongError
from api.protocol.errors import EmptyTranscriptError
from api.settings import Settings
from api.stream_timing import StreamObserver, StreamTiming
from api.text import NormalizedText, TextBuffer, has_speech
from api.text.markup import MarkupState
from api.text.markup import parse as parse_markup
from api.text.markup_reading import read_markup
from api.text.pronunciation import (
    Pronunciations, SizedLru, apply_pronunciations, compile_pronunciations, entry_chars,
)
from api.text.speech_pieces import speech_pieces
from codec_worker.interface import CodecDecoder
from engine.interface import TtsEngine
from engine.requests import SamplingParams, SynthesisRequest
from voices.errors import PronunciationDictNotFoundError, VoiceStoreUnavailableError
from voices.models import VoicePrompt, language_of
from voices.recompute import PrefixRecomputer
from voices.store import VoiceStore

logger = logging.getLogger(__name__)

DEFAULT_LANGUAGE = "en"
#: A ``<break>`` shorter than this is no pause (under a sample at the lowest output rate, 8 kHz).
MIN_PAUSE_S = 0.001
#: A pause is yielded in pieces of at most this many codec samples (0.32 s, a later codec chunk's size
#: at the GPU schedule), like speech.
PAUSE_PIECE_SAMPLES = 7056
#: Characters of entries (keys and aliases) of the last copies kept of dictionaries read, about as
#: much as the compiled dictionaries' cache holds (api/text/pronunciation.py), so mostly the same objects.
DICTIONARY_MEMORY_CHARS = 4_000_000


def speaking_language(requested: Optional[str], voice_language: Optional[str]) -> Optional[str]:
    """The language a request's text is read in: ``requested`` (its ``language``, else its
    ``locale``); the voice's reading locale (``VoicePrompt.language``) when it names none, or names
    the voice's language with no region ("es" to an "es-MX" voice); None (DEFAULT_LANGUAGE) when
    neither is known. A region or another language asked for always wins ("en" to a Spanish voice)."""
    if not requested:
        return voice_language
    regional = "-" in requested.replace("_", "-")
    if voice_language and not regional and language_of(requested) == language_of(voice_language):
        return voice_language
    return requested


@dataclass(frozen=True)
class PreparedRequest:
    """A checked HTTP request, ready to speak: everything resolved before the response starts."""

    prefix: torch.Tensor
    segments: list["Segment"]
    sampling: SamplingParams
    volume: float
    speed: float = 1.0  # the request's speech rate factor (``speak``'s ``speed``)
    language: Optional[str] = None  # what the text was read in (``speaking_language``); None: the default


@dataclass(frozen=True)
class Segment:
    """One sentence's worth of text (one engine request, or a few for very long readings), and
    how its audio is delivered.

    ``speed`` and ``volume`` override the request's (``generation_config``) for this segment when
    set (the transcript's own ``<speed>``/``<volume>`` tags); ``pause_after_s`` is silence sent after
    the segment's speech (a ``<break>`` tag). A segment with a pause and nothing to read is silence
    only: it gets no engine request."""

    original: str  # as the client sent it (spaces and punctuation kept)
    normalized: NormalizedText  # what the model speaks, with the word alignment
    speed: Optional[float] = None
    volume: Optional[float] = None
    pause_after_s: float = 0.0

    @property
    def speech_text(self) -> str:
        return self.normalized.text

    @property
    def has_speech(self) -> bool:
        """Whether the model has anything to read here (a letter or digit; api/text/speech.py)."""
        return has_speech(self.speech_text)

    @property
    def pause_s(self) -> float:
        """The pause sent after the speech: ``pause_after_s``, or none under ``MIN_PAUSE_S`` (less
        than a sample at 8 kHz would be no audio at all, and an HTTP body with no byte)."""
        return self.pause_after_s if self.pause_after_s >= MIN_PAUSE_S else 0.0

    @property
    def has_audio(self) -> bool:
        """Whether the segment sends any audio: speech, or a pause."""
        return self.has_speech or self.pause_s > 0

    def speech_pcm(self, pieces: list[np.ndarray], sample_rate_hz: int) -> np.ndarray:
        """The speech of the pieces ``speak`` yielded for this segment at ``sample_rate_hz`` (its
        pause, which comes last, left out): word timestamps are estimated on the speech alone, since
        a pause many times longer than the speech would make silence the level the estimator takes
        for speech."""
        keep = max(0, sum(p.size for p in pieces) - round(self.pause_s * sample_rate_hz))
        speech, taken = [], 0
        for piece in pieces:
            if taken >= keep:
                break
            speech.append(piece[: keep - taken])
            taken += speech[-1].size
        return np.concatenate(speech) if speech else np.zeros(0, np.float32)


class ContextDictionary:
    """A WebSocket context's pronunciation dictionary, re-read for each segment (an update applies
    to the next one) with its last copy kept: while the store cannot be reached the context speaks
    with it, and once the dictionary is deleted too (it was there when the context was accepted, so
    the text the context accepted is still spoken, as an HTTP request that read it once is)."""

    def __init__(self, service: "SynthesisService", dict_id: Optional[str], request_id: str) -> None:
        self._service = service
        self.dict_id = dict_id or None
        self.request_id = request_id
        self._copy: Optional[Pronunciations] = None
        self._gone = False

    async def current(self) -> Optional[Pronunciations]:
        if self.dict_id is None:
            return None
        try:
            self._copy = await self._service.pronunciations(self.dict_id)
            self._gone = False
        except PronunciationDictNotFoundError:
            last = self._copy or self._service.dictionary_memory.get(self.dict_id)
            if last is None:
                raise
            if not self._gone:
                self._gone = True
                logger.info("context %s: pronunciation dictionary %s was deleted after the context was accepted; "
                            "its last copy is used until the context ends", self.request_id, self.dict_id)
            self._copy = last
        except VoiceStoreUnavailableError as exc:
            if self._copy is None:  # the service had no copy either
                raise
            self._service.note_stale_dictionary(self.dict_id, exc)
        return self._copy


class SynthesisService:
    def __init__(self, engine: TtsEngine, decoder: CodecDecoder, voices: VoiceStore, settings: Settings) -> None:
        self.engine = engine
        self.decoder = decoder
        self.voices = voices
        # stored voices made by another checkpoint get this one's prefix at first use
        self._prompts = PrefixRecomputer(voices, engine.compress_reference, engine.model_info.fingerprint)
        self.settings = settings
        self.sample_rate_hz = decoder.sample_rate_hz
        self.defaults = settings.default_sampling
        self._in_flight = 0
        self.meter = LoadMeter()
        self.admission = Admission(settings.admission_limits, self.meter)
        #: told about each stream's underruns and real-time factor (api.metrics wires Prometheus in)
        self.stream_observer: Optional[StreamObserver] = None
        self._interrupted: Optional[Exception] = None
        # the last copy read of each dictionary, by id (module docstring)
        self.dictionary_memory: SizedLru[str, Pronunciations] = SizedLru(DICTIONARY_MEMORY_CHARS)
        self._dictionaries_stale = False  # serving remembered dictionaries: the store is unreachable

    def interrupt(self, error: Exception) -> None:
        """End every ``speak`` running now (and any later) with ``error`` at its next frames: the
        drain timeout's cut (api/lifecycle.py)."""
        self._interrupted = error

    # -- admission ----------------------------------------------------------------------------
    def admit(self, key: str) -> StreamTicket:
        """A place for one new stream (context or HTTP request) of API key ``key``; raises
        StreamRefusedError (429 concurrency_limited) past a stream limit or the load limit."""
        return self.admission.admit(key)

    def stream_timing(self, route: str, continuous: bool = False) -> StreamTiming:
        """A playback model for one new stream (api.stream_timing), to pass to every ``speak`` of it
        and ``close`` when it ends. ``continuous``: an HTTP request (owes audio until it ends)."""
        return StreamTiming(route, self.stream_observer, continuous=continuous)

    # -- validation ---------------------------------------------------------------------------
    def check_model(self, model_id: str) -> None:
        self.settings.check_model_id(model_id)

    def check_request(self, req, *, model_checked: bool = False) -> None:
        """Checks shared by every route (``req`` is any wire request with the synthesis fields).
        ``model_checked``: the route judged the model itself (the OpenAI route: OpenAI's ids need
        no match in GEPARD_MODEL_IDS)."""
        if not model_checked:
            self.check_model(req.model_id)
        if len(req.transcript) > self.settings.max_transcript_chars:
            raise TranscriptTooLongError(len(req.transcript), self.settings.max_transcript_chars)
        # the speech rate needs no check here: the wire model bounds it (0.6-1.5) and speak() stretches to it

    def sampling(self, req) -> SamplingParams:
        return req.to_sampling_params(self.defaults)

    @staticmethod
    def volume(req) -> float:
        cfg = getattr(req, "generation_config", None)
        return float(cfg.volume) if cfg is not None and cfg.volume is not None else 1.0

    @staticmethod
    def speed(req) -> float:
        """The request's speech rate factor: ``generation_config.speed``, else the deprecated
        ``speed`` ("slow" 0.8, "fast" 1.25), else 1.0 (the voice's own rate)."""
        factor = req.speed_factor
        return float(factor) if factor is not None else 1.0

    async def prepare(self, req, *, model_checked: bool = False, speed: Optional[float] = None) -> PreparedRequest:
        """Check a /tts/bytes or /tts/sse request and resolve its voice and segments (errors are 4xx).
        ``model_checked``: as for ``check_request``. ``speed``: the route's own speech rate over the
        request's (the OpenAI route: its 0.25-4.0 does not fit Cartesia's ``generation_config``)."""
        self.check_request(req, model_checked=model_checked)
        prompt = await self.voice_prompt(req.voice_id)
        language = speaking_language(req.effective_language, prompt.language)
        prons = await self.pronunciations(req.pronunciation_dict_id)
        segments = self.plan(req.transcript, language, req.normalization, prons, dict_id=req.pronunciation_dict_id)
        if not segments:
            raise EmptyTranscriptError("transcript: nothing to speak after normalisation")
        return PreparedRequest(prompt.prefix, segments, self.sampling(req), self.volume(req),
                               self.speed(req) if speed is None else float(speed), language)

    async def voice_prompt(self, voice_id: str) -> VoicePrompt:
        """The prompt of ``voice_id`` for the loaded checkpoint: its speaker prefix [K, H], the stored
        one (cached in process by the store), recomputed from the voice's reference codes at its
        first use if another checkpoint made it (voices/recompute.py), and its reading locale.
        VoiceNotFoundError (404) names the id; VoiceIncompatibleError (409) is a voice of another
        checkpoint that has no codes."""
        return await self._prompts.get_prompt(voice_id)

    # -- text -----------------------------------------------------------------------------------
    async def pronunciations(self, dict_id: Optional[str]) -> Optional[Pronunciations]:
        """The compiled pronunciation dictionary ``dict_id`` (None: none); read from the store on
        every call, so an update or delete through any replica applies to the next request.
        PronunciationDictNotFoundError (404) names an unknown id; "" counts as none. While the store
        cannot be reached, the last copy this process read (a WARNING once per outage), else
        VoiceStoreUnavailableError (503)."""
        if not dict_id:
            return None
        try:
            dictionary = await self.voices.dictionaries.get(dict_id)
        except VoiceStoreUnavailableError as exc:
            last = self.dictionary_memory.get(dict_id)
            if last is None:
                raise
            self.note_stale_dictionary(dict_id, exc)
            return last
        if self._dictionaries_stale:
            self._dictionaries_stale = False
            logger.info("pronunciation dictionaries are read from the store again")
        prons = compile_pronunciations(dictionary.items)
        self.dictionary_memory.put(dict_id, prons, entry_chars(prons))
        return prons

    def note_stale_dictionary(self, dict_id: str, exc: Exception) -> None:
        """A dictionary is served from its last copy because the store cannot be reached: one
        WARNING per outage (the next successful read says it is over)."""
        if not self._dictionaries_stale:
            self._dictionaries_stale = True
            logger.warning("pronunciation dictionary %s: store unavailable, speaking with the last copy read of each "
                           "dictionary until it is back: %s", dict_id, exc)

    def context_dictionary(self, dict_id: Optional[str], request_id: str) -> ContextDictionary:
        """What a WebSocket context reads its dictionary through, segment after segment."""
        return ContextDictionary(self, dict_id, request_id)

    def check_pronounced(self, texts: list[str], pronunciations: Optional[Pronunciations], dict_id: Optional[str],
                         what: str = "transcript") -> None:
        """PronouncedTextTooLongError (400 ``transcript_too_long``) when ``texts`` together are
        longer than GEPARD_MAX_TRANSCRIPT_CHARS after the dictionary (``what`` names them in the
        message: "transcript", "sentence"). Matching is linear in the text, so this costs little."""
        if pronunciations is None or pronunciations.empty:
            return
        limit = self.settings.max_transcript_chars
        pronounced = sum(len(apply_pronunciations(t, pronunciations).text) for t in texts)
        if pronounced > limit:
            raise PronouncedTextTooLongError(what, sum(len(t) for t in texts), pronounced, limit, dict_id or "")

    def segment(self, text: str, language: Optional[str], normalization: Optional[str] = None,
                pronunciations: Optional[Pronunciations] = None, markup: Optional[MarkupState] = None) -> Segment:
        """One segment: its transcript tags read (api/text/markup.py; InvalidMarkupError, 400
        ``invalid_markup``, for a bad value), then the dictionary's sounds-like entries and
        normalisation outside tags and spell spans; the alignment maps the spoken words back to the
        client's own tokens (api/text/markup_reading.py, api/text/pronunciation.py).

        Its breaks, added up, are ``pause_after_s`` (the segmenter puts them at its end); with the
        breaks before them in ``markup`` they may pause GEPARD_MAX_PAUSE_S at most (InvalidMarkupError
        quoting the break past it). Its ``<speed>``/``<volume>`` tags move ``markup``, the request's
        or context's state, on, and the segment gets the speed and volume in force after them (None
        until a tag set one): the segmenter starts a segment at each such tag, so they apply from
        where they stand; a tag inside a segment made otherwise sets the whole segment. A segment of
        tags only still moves the state (it has no audio unless it has a break)."""
        mode = normalization or "auto"
        lang = language or DEFAULT_LANGUAGE
        marked = parse_markup(text)
        state = markup if markup is not None else MarkupState()
        state.pause(marked, self.settings.max_pause_s)
        marked.apply(state)
        return Segment(text, read_markup(marked, lang, mode, pronunciations),
                       speed=state.speed, volume=state.volume, pause_after_s=marked.pause_s)

    def plan(self, transcript: str, language: Optional[str], normalization: Optional[str] = None,
             pronunciations: Optional[Pronunciations] = None, *, dict_id: Optional[str] = None,
             markup: Optional[MarkupState] = None) -> list[Segment]:
        """Cut a whole transcript into sentence segments, leaving out those with nothing to speak
        (punctuation or emoji only): none at all for a transcript like "..." or ":)". With a
        dictionary, the text after it must fit GEPARD_MAX_TRANSCRIPT_CHARS (``check_pronounced``;
        ``dict_id`` names the dictionary in the error). Every segment is read before any is
        returned, so a bad tag anywhere is a 400 before the response starts; ``<speed>`` and
        ``<volume>`` carry from segment to segment through ``markup`` (a fresh state by default).
        The transcript is complete: an unfinished tag at its end is dropped, an unclosed
        ``<spell>`` spells to its end. A break at its start is a pause-only segment first."""
        buf = TextBuffer(clause_min_chars=None, max_chars=400)
        buf.append(transcript)
        parts = buf.take_ready(force=True)
        self.check_pronounced(parts, pronunciations, dict_id)
        state = markup if markup is not None else MarkupState()
        segments = [self.segment(p, language, normalization, pronunciations, markup=state) for p in parts]
        return [s for s in segments if s.has_audio]

    # -- audio ----------------------------------------------------------------------------------
    async def speak(
        self, segment: Segment, prefix: Optional[torch.Tensor], sampling: SamplingParams, request_id: str,
        volume: float = 1.0, timing: Optional[StreamTiming] = None, speed: float = 1.0,
    ) -> AsyncIterator[np.ndarray]:
        """Generate one segment: yields PCM chunks [N] float32 @ 22050 Hz as the codec produces them,
        time-stretched to ``speed`` (generation_config.speed: a rate factor, same pitch; the
        segment's own, when it has one), scaled by ``volume`` (generation_config.volume; the
        segment's own, when it has one) and clipped to [-1, 1], then the segment's pause as silence
        (not stretched). What is yielded is what is delivered: the load meter, ``timing``, the
        sinks and the word timestamps all see the stretched audio. ``timing`` (the stream's playback
        model) owes audio from the engine submission to the segment's end."""
        if segment.volume is not None:
            volume = segment.volume
        if segment.speed is not None:
            speed = segment.speed
        if segment.has_speech:
            # one engine request a piece: a segment that reads as more words than one request can
            # finish goes as several in a row (api/text/speech_pieces.py)
            for k, text in enumerate(speech_pieces(segment.speech_text)):
                piece_id = request_id if k == 0 else f"{request_id}.{k}"
                async with contextlib.aclosing(self._speech(text, prefix, sampling, piece_id, volume, timing,
                                                            speed)) as audio:
                    async for pcm in audio:
                        yield pcm
        pause = round(segment.pause_s * self.sample_rate_hz)
        if pause:
            if timing is not None:  # silence is ready at once: it is audio, never an underrun
                now = time.perf_counter()
                timing.owe(now)
                timing.audio(now, pause / self.sample_rate_hz)
                timing.settle(now)
            # in pieces of a codec chunk's size at most: breaks in a row add up to any length, and
            # one array of it would be gigabytes through the sinks and one giant chunk event
            piece = np.zeros(min(pause, PAUSE_PIECE_SAMPLES), np.float32)
            piece.flags.writeable = False  # the same silence each time: nobody may write into it
            for start in range(0, pause, piece.size):
                yield piece[: pause - start]

    async def _speech(
        self, text: str, prefix: Optional[torch.Tensor], sampling: SamplingParams, request_id: str,
        volume: float, timing: Optional[StreamTiming], speed: float = 1.0,
    ) -> AsyncIterator[np.ndarray]:
        """Speech for ``text`` (a segment's, or a piece of it): one engine request and one codec
        stream, stretched to ``speed``."""
        stretch = TimeStretch(speed, self.sample_rate_hz)  # 1.0: a pass-through without a filter graph
        if self._in_flight >= self.settings.max_concurrent_generations:
            raise RateLimitedError(
                f"too many concurrent generations ({self.settings.max_concurrent_generations}); retry shortly",
                error_code="concurrency_limited",
            )
        stream = self.decoder.open_stream()  # may refuse (the codec is closing): before anything is counted
        self._in_flight += 1
        # frames are taken a codec chunk at a time: the engine need not wake this task for each one
        request = SynthesisRequest(request_id, text, prefix, sampling, delivery=self.decoder.schedule.sizes)
        if timing is not None:
            timing.owe(time.perf_counter())
        # The load meter sees this stream as busy from its first audio to its last, except while
        # it waits for its consumer at a yield (a client reading at its own pace, a player at real
        # time, is not load: counted, it read as saturation and refused other streams). The first
        # chunk's audio is not counted, so the busy time covers exactly the audio counted: each
        # later piece brings the busy time since the stream's previous piece (or since its consumer
        # asked for more), so a piece still being generated is not counted as load without audio.
        busy_since: Optional[float] = None  # the meter's clock when this stream last became busy
        try:
            async with contextlib.aclosing(self.engine.generate(request)) as frames:
                async for chunk in frames:
                    if self._interrupted is not None:  # the drain timeout cut the streams left
                        raise self._interrupted
                    decodes = []  # in order, each piece handed over before the next is decoded; last: the tail
                    if chunk.num_frames:
                        decodes.append((functools.partial(stream.push, chunk.codes), False))
                    if chunk.finished:
                        decodes.append((stream.finish, True))
                    for decode, last in decodes:
                        pcm = await decode()
                        if not stretch.identity:  # CPU work (~6 ms a second of audio): off the event loop
                            pcm = await asyncio.to_thread(stretch.push, pcm, last=last)
                        if not pcm.size:
                            continue
                        self._measure(pcm, busy_since, timing)
                        self.meter.stream_busy(-1)  # the consumer's time, until it asks for more
                        try:
                            yield _gain(pcm, volume)
                        finally:
                            self.meter.stream_busy(+1)
                            busy_since = self.meter.now()
        finally:
            if timing is not None:
                timing.settle(time.perf_counter())
            self._in_flight -= 1
            if busy_since is not None:
                self.meter.stream_busy(-1)
            await stream.aclose()

    def _measure(self, pcm: np.ndarray, busy_since: Optional[float], timing: Optional[StreamTiming] = None) -> None:
        """Feed the load meter (and the stream's playback model) with one piece of a stream's
        audio; ``busy_since``: when the stream last became busy (None: this is its first piece)."""
        if timing is not None:
            timing.audio(time.perf_counter(), pcm.size / self.sample_rate_hz)
        if busy_since is not None:
            self.meter.audio(pcm.size / self.sample_rate_hz, self.meter.now() - busy_since)
        else:
            self.meter.stream_busy(+1)

    @property
    def in_flight(self) -> int:
        return self._in_flight


def _gain(pcm: np.ndarray, volume: float) -> np.ndarray:
    return pcm if volume == 1.0 else np.clip(pcm * volume, -1.0, 1.0)
