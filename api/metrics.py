"""Prometheus metrics of one gateway (a registry per app, so several apps can live in one process).

The engine, the codec and the voice store know nothing of Prometheus: each has a small observer
hook (engine.stats, codec_worker.batching.DecodeObserver, voices.store.StoreObserver), and so has
each stream (api.stream_timing.StreamObserver). ``Metrics.observe`` plugs this registry into all of
them; ``Metrics.refresh_engine`` copies the engine's scheduler snapshot into gauges at scrape time.
Metric names and labels are a contract (dashboards, alerts and the autoscaler use them).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Mapping, Optional

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, ProcessCollector, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector
from prometheus_client.exposition import CONTENT_TYPE_LATEST

from api.errors import describe_error
from api.stream_timing import StreamReport
from api.text.phonemes import restart_counts
from codec_worker.batching import DecodeBatchEvent
from engine.stats import EngineStats, StepEvent
from voices.store import STORE_OPS

if TYPE_CHECKING:
    from api.synthesis import SynthesisService
    from codec_worker.batching import BatchingCodecDecoder
    from engine.interface import TtsEngine
    from voices.store import VoiceStore

__all__ = ["Metrics", "ServingInfo", "CONTENT_TYPE_LATEST", "ERROR_ROUTES", "ROUTES", "route_label"]

_LATENCY_BUCKETS = (0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.5, 0.75, 1.0, 1.5, 2.0, 3.0, 5.0, 10.0)
# one engine step / one codec batch: real time is ~46 ms per frame (21.5 frames/s)
_STEP_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.02, 0.03, 0.046, 0.075, 0.1, 0.15, 0.25, 0.5, 1.0, 2.5)
_BATCH_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256)
_RTF_BUCKETS = (0.05, 0.1, 0.2, 0.3, 0.5, 0.7, 0.85, 1.0, 1.25, 1.5, 2.0, 3.0, 5.0)
_UNDERRUN_BUCKETS = (0.0, 0.02, 0.05, 0.1, 0.25, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0)  # le=0: streams with no gap
_QUEUE_BUCKETS = (0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)
_STORE_BUCKETS = (0.0001, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5)

#: ``route`` label values of the TTS routes (the same everywhere: requests, errors, first audio, streams)
ROUTES = ("bytes", "sse", "ws", "openai")  # openai: POST /v1/audio/speech
#: ``route`` label values of gepard_errors_total: the TTS routes (``openai``: every ``/v1/`` route
#: here), the other endpoints, ``drain`` (refused while draining: api/drain_gate.py) and ``other``
#: (the probes, a path no route matches, a request head too large to read). A fixed set, chosen by
#: the server: the path a client sends never becomes a label value.
ERROR_ROUTES = ROUTES + ("voices", "dictionaries", "access_token", "metrics", "playground", "drain", "other")
# path template of the route that answered (its start) -> its label
_ROUTE_LABELS = {
    "/tts/bytes": "bytes", "/tts/sse": "sse", "/tts/websocket": "ws", "/v1": "openai",
    "/voices": "voices", "/accents": "voices", "/pronunciation-dicts": "dictionaries",
    "/access-token": "access_token", "/metrics": "metrics", "/playground": "playground",
}


def route_label(scope: Mapping[str, Any]) -> str:
    """The ``route`` label (one of ERROR_ROUTES) of an HTTP request or WebSocket upgrade, from the
    path template of the route Starlette's router matched (``scope["route"]``; a 405 has one too),
    never from the client's path; ``other`` when no route matched."""
    path = getattr(scope.get("route"), "path", "")
    for start, label in _ROUTE_LABELS.items():
        if path == start or path.startswith(start + "/"):
            return label
    return "other"


class _PhonemizerRestarts(Collector):
    """eSpeak NG processes replaced, read from api.text.phonemes at scrape time (it is process-wide,
    and shared by every app in the process)."""

    def collect(self):  # type: ignore[no-untyped-def]
        family = CounterMetricFamily("gepard_phonemizer_restarts", "eSpeak NG processes (phoneme timestamps) "
                                     "replaced, by reason: crash (it died), hang (no answer in 10 s, killed), "
                                     "recycle (its leak bound)", labels=["reason"])
        for reason, count in restart_counts().items():
            family.add_metric([reason], count)
        yield family


class _CodecStateSlots(Collector):
    """The codec's state slots (GEPARD_CODEC_CARRY_STATE), read from the batching decoder at scrape
    time: streams past the free ones decode windowed, re-decoding 25 frames of context a chunk.
    Both read 0 until ``decoder`` is set (Metrics.observe)."""

    def __init__(self, decoder: Optional["BatchingCodecDecoder"] = None) -> None:
        self.decoder = decoder

    def collect(self):  # type: ignore[no-untyped-def]
        decoder = self.decoder
        free = GaugeMetricFamily("gepard_codec_state_slots_free", "Codec state slots no stream holds (0 when "
                                 "streams do not carry the decoder's conv state)")
        free.add_metric([], decoder.state_slots_free if decoder is not None else 0)
        windowed = CounterMetricFamily("gepard_codec_windowed_streams", "Codec streams that found every state slot "
                                       "taken and decoded windowed (GEPARD_CODEC_CARRY_STATE on)")
        windowed.add_metric([], decoder.windowed_streams if decoder is not None else 0)
        yield free
        yield windowed


def _flag(on: bool) -> str:
    return "true" if on else "false"


class ServingInfo(Collector):
    """gepard_engine_info and gepard_codec_info: one series each, value 1, whose labels name what
    serves and which speed-ups run: what runs, not what was asked for (a CUDA graph capture that
    failed shows as false). Read from the engine's and the decoder's descriptions at scrape time, so
    they cannot go stale. Nothing until ``engine`` and ``decoder`` are set (Metrics.observe)."""

    def __init__(self) -> None:
        self.engine: Optional["TtsEngine"] = None
        self.decoder: Optional["BatchingCodecDecoder"] = None

    def collect(self):  # type: ignore[no-untyped-def]
        engine = GaugeMetricFamily("gepard_engine_info", "The engine that serves (always 1): its backend, loop, "
                                   "device, dtype and which speed-ups run now, as labels",
                                   labels=["backend", "loop", "device", "dtype", "cuda_graphs", "prefill_graphs",
                                           "fused_kernels"])
        if self.engine is not None:
            about = self.engine.description
            engine.add_metric([about.backend, about.loop, about.device, about.dtype, *(_flag(on) for on in (
                about.cuda_graphs, about.prefill_graphs, about.fused_kernels))], 1)
        codec = GaugeMetricFamily("gepard_codec_info", "The codec decoder streams decode with (always 1): its impl, "
                                  "device, dtype and which speed-ups are on, as labels",
                                  labels=["impl", "device", "dtype", "carry_state", "fused_activations", "compiled",
                                          "cuda_graphs"])
        if self.decoder is not None:
            made = self.decoder.description
            codec.add_metric([made.impl, made.device, made.dtype, *(_flag(on) for on in (
                made.carry_state, made.fused_activations, made.compiled, made.cuda_graphs))], 1)
        yield engine
        yield codec


class Metrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.requests = Counter("gepard_requests_total", "TTS requests and WebSocket contexts by route", ["route"], registry=r)
        self.errors = Counter("gepard_errors_total", "Errors returned, by route and error_code", ["route", "error_code"], registry=r)
        self.first_audio = Histogram(
            "gepard_time_to_first_audio_seconds", "Request start (WebSocket context: its first text complete) "
            "to its first audio bytes sent", ["route"],
            buckets=_LATENCY_BUCKETS, registry=r,
        )
        self.audio_seconds = Counter("gepard_audio_seconds_total", "Seconds of audio produced", ["route"], registry=r)
        self.generations = Gauge("gepard_generations_in_flight", "Engine requests running now", registry=r)
        self.ws_connections = Gauge("gepard_websocket_connections", "Open WebSocket connections", registry=r)
        self.ws_contexts = Gauge("gepard_websocket_contexts", "Open WebSocket contexts", registry=r)
        self.voices_cloned = Counter("gepard_voices_cloned_total", "Voices cloned", registry=r)
        # Leak checks (the soak test reads these): process_resident_memory_bytes, process_open_fds, ...
        ProcessCollector(registry=r)
        self.event_loop_tasks = Gauge("gepard_event_loop_tasks", "asyncio tasks alive on the server's event loop", registry=r)
        self.engine_requests = Gauge("gepard_engine_requests", "Requests the engine holds, running or queued", registry=r)
        # Admission (api/admission.py): what an autoscaler and an operator tuning the limits watch
        self.saturation = Gauge(
            "gepard_saturation", "Average real-time factor of the streams generating now (1: just real-time; "
            "new streams are refused above GEPARD_ADMIT_MAX_SATURATION)", registry=r)
        self.capacity = Gauge("gepard_capacity_audio_seconds_per_second",
                              "Audio seconds per second measured when saturated (0: not measured yet)", registry=r)
        self.streams_open = Gauge("gepard_streams_open", "Admitted streams (WebSocket contexts and HTTP TTS requests)",
                                  registry=r)
        self.streams_refused = Counter("gepard_streams_refused_total", "New streams refused, by the limit that refused "
                                       "them (process, key, load; draining: admission closed by the drain)", ["reason"],
                                       registry=r)

        # Engine (engine.stats): per step, pushed by the engine as steps happen
        self.engine_step = Histogram("gepard_engine_step_seconds", "Wall time of one engine step (one batched "
                                     "decode step of the model, with any prefills scheduled in it)",
                                     buckets=_STEP_BUCKETS, registry=r)
        self.engine_batch = Histogram("gepard_engine_batch_size", "Requests advanced by one engine step",
                                      buckets=_BATCH_BUCKETS, registry=r)
        self.queue_wait = Histogram("gepard_queue_wait_seconds", "Engine request submission to its first "
                                    "scheduling by the engine", buckets=_QUEUE_BUCKETS, registry=r)
        self.preemptions = Counter("gepard_engine_preemptions_total", "Engine requests preempted (vLLM; a "
                                   "preempted Gepard request fails, so this should stay 0)", registry=r)
        # Engine scheduler snapshot, refreshed at scrape time
        self.engine_running = Gauge("gepard_engine_requests_running", "Engine requests being decoded now", registry=r)
        self.engine_waiting = Gauge("gepard_engine_requests_waiting", "Engine requests submitted and not "
                                    "scheduled yet", registry=r)
        self.kv_cache_usage = Gauge("gepard_engine_kv_cache_usage", "Fraction of the KV cache in use, 0-1 (vLLM: "
                                    "blocks in use; torch: cache rows in use / 2 x max batch)", registry=r)
        # Codec (codec_worker.batching)
        self.codec_decode = Histogram("gepard_codec_decode_seconds", "Wall time of one codec batch decode",
                                      buckets=_STEP_BUCKETS, registry=r)
        self.codec_batch = Histogram("gepard_codec_batch_size", "Decode windows in one codec batch",
                                     buckets=_BATCH_BUCKETS, registry=r)
        # Streams (api.stream_timing): what a listener feels
        self.stream_rtf = Histogram("gepard_stream_rtf", "Per stream: generation wall time (first engine "
                                    "submission to last audio, time owing no audio left out) / audio seconds",
                                    ["route"], buckets=_RTF_BUCKETS, registry=r)
        self.stream_underrun = Histogram("gepard_stream_underrun_seconds", "Per stream: seconds a listener "
                                         "playing from the first chunk in real time waited for audio",
                                         ["route"], buckets=_UNDERRUN_BUCKETS, registry=r)
        self.underrun_total = Counter("gepard_underrun_seconds_total", "Seconds listeners waited for audio "
                                      "(the per-stream underrun, counted as it happens)", ["route"], registry=r)
        # Voice store (voices.store)
        self.voice_store = Histogram("gepard_voice_store_seconds", "Voice store call latency by operation",
                                     ["op"], buckets=_STORE_BUCKETS, registry=r)
        self.voice_cache = Counter("gepard_voice_cache_requests_total", "Speaker-prompt cache lookups of stored "
                                   "voices, by result (hit|miss)", ["result"], registry=r)
        # Phonemes (api.text.phonemes): the eSpeak NG child process, counted by the process, read here
        r.register(_PhonemizerRestarts())
        self._codec_state = _CodecStateSlots()  # its decoder comes with observe()
        r.register(self._codec_state)
        self._serving = ServingInfo()  # likewise its engine and decoder
        r.register(self._serving)
        # every label value exists from the start (0), so dashboards and rate() see the series before traffic
        for route in ROUTES:
            for metric in (self.stream_rtf, self.stream_underrun, self.underrun_total):
                metric.labels(route)
        for op in STORE_OPS:
            self.voice_store.labels(op)
        for result in ("hit", "miss"):
            self.voice_cache.labels(result)

    # -- observers (called from engine, codec and store threads/loops: prometheus_client is thread-safe)
    def on_engine_step(self, event: StepEvent) -> None:
        if event.batch_size > 0:  # a report with only late queue waits or preemptions is not a step
            self.engine_step.observe(event.duration_s)
            self.engine_batch.observe(event.batch_size)
        for wait in event.queue_waits_s:
            self.queue_wait.observe(wait)
        if event.preempted:
            self.preemptions.inc(event.preempted)

    def on_codec_batch(self, event: DecodeBatchEvent) -> None:
        self.codec_decode.observe(event.duration_s)
        self.codec_batch.observe(event.windows)

    def store_op(self, op: str, seconds: float) -> None:
        self.voice_store.labels(op).observe(seconds)

    def prompt_cache(self, hit: bool) -> None:
        self.voice_cache.labels("hit" if hit else "miss").inc()

    def underrun(self, route: str, seconds: float) -> None:
        self.underrun_total.labels(route).inc(seconds)

    def audio(self, route: str, seconds: float) -> None:
        # chunk by chunk as the codec makes them, so a stream cut short (hang-up, cancel, failure)
        # counts the audio it did produce
        self.audio_seconds.labels(route).inc(seconds)

    def error(self, route: str, exc: BaseException) -> None:
        """Count one error told to a client (an HTTP error response, an in-band error, or a response
        cut after it started) under ``route`` (one of ERROR_ROUTES) and the error_code api.errors
        gives ``exc``: the one the client reads."""
        self.errors.labels(route, describe_error(exc, log=False).error_code).inc()

    def stream_finished(self, report: StreamReport) -> None:
        if report.audio_s <= 0:  # refused, failed or cancelled before any audio: nothing was heard
            return
        self.stream_underrun.labels(report.route).observe(report.underrun_s)
        rtf = report.rtf
        if rtf is not None and report.busy_s > 0:
            self.stream_rtf.labels(report.route).observe(rtf)

    def observe(self, engine: "TtsEngine", decoder: "BatchingCodecDecoder", voices: "VoiceStore",
                service: "SynthesisService") -> None:
        """Plug this registry into the runtime's observer hooks."""
        engine.set_step_observer(self.on_engine_step)
        decoder.observer = self.on_codec_batch
        self._codec_state.decoder = decoder
        self._serving.engine, self._serving.decoder = engine, decoder
        voices.observer = self
        service.stream_observer = self

    def refresh_engine(self, stats: EngineStats) -> None:
        """Copy the engine's scheduler snapshot into the gauges (at scrape time)."""
        self.engine_running.set(stats.running)
        self.engine_waiting.set(stats.waiting)
        self.kv_cache_usage.set(stats.kv_cache_usage)

    def render(self) -> bytes:
        return generate_latest(self.registry)
