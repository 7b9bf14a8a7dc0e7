"""Prometheus metrics of one gateway (a registry per app, so several apps can live in one process)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, ProcessCollector, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST

__all__ = ["Metrics", "CONTENT_TYPE_LATEST"]

_LATENCY_BUCKETS = (0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.5, 0.75, 1.0, 1.5, 2.0, 3.0, 5.0, 10.0)


class Metrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.requests = Counter("gepard_requests_total", "TTS requests and WebSocket contexts by route", ["route"], registry=r)
        self.errors = Counter("gepard_errors_total", "Errors returned, by route and error_code", ["route", "error_code"], registry=r)
        self.first_audio = Histogram(
            "gepard_time_to_first_audio_seconds", "Request (or segment) start to its first audio bytes", ["route"],
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
                                       "them (process, key, load)", ["reason"], registry=r)

    def render(self) -> bytes:
        return generate_latest(self.registry)
