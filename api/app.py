"""Assembly: ``build_app(settings)`` -> a Starlette app whose lifespan owns every long-lived part.

Start-up order (closed in reverse): engine -> codec (decoder + encoder) -> voice store (with the
built-in default voice) -> voice preload (``GEPARD_PRELOAD_DIR``; idempotent, a store outage fails
start-up) -> synthesis service. Concrete backends are picked here and nowhere else.

Once the server listens, a warm-up task makes it ready (api/lifecycle.py: ``GET /ready`` is 503
until then); ``Runtime.drain()`` (SIGTERM, api/server.py) drains it.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import AsyncIterator, Callable, Optional

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route, WebSocketRoute

from api.access_log import AccessLogMiddleware
from api.auth import Authenticator
from api.disconnects import DisconnectMiddleware
from api.key_store import RedisKeyStore
from api.drain_gate import DrainGate
from api.late_errors import LateErrorMiddleware
from api.lifecycle import Lifecycle, warm_up
from api.audio.errors import AudioFormatError
from api.errors import ApiError, MethodNotAllowedError, NotFoundError, ProtocolError, error_response, new_request_id
from api.metrics import Metrics, route_label
from api.routes import access_token, health, tts_bytes, tts_sse, tts_ws, voices as voice_routes
from api.routes import not_served, pronunciation_dicts
from api.routes import openai_speech
from api.routes import playground
from api.runtime import codec_source
from api.settings import Settings, SettingsError
from api.synthesis import SynthesisService
from api.text.errors import TextError
from codec_worker.errors import CodecError, CodecLoadError
from codec_worker.batching import BatchingCodecDecoder, NanoCodecEncoder
from codec_worker.nanocodec import (
    NanoCodec,
    capture_decoder_graphs,
    compile_decoder,
    fuse_decoder_activations,
    load_codec,
    stream_decoding_codec,
)
from codec_worker.schedule import default_schedule
from codec_worker.torchcodec import TorchNanoCodec
from engine.device import pick_device, pick_dtype
from engine.errors import EngineError
from engine.factory import EngineOptions, create_engine
from engine.interface import TtsEngine
from voices.backends import open_voice_store
from voices.cloning import ClipLimits, VoiceCloner
from voices.errors import VoiceStoreError
from voices.models import Voice, VoiceRecord
from voices.preload import preload_voices
from voices.store import VoiceStore

logger = logging.getLogger(__name__)

#: Roots of every error ``api.errors`` describes on purpose (see the handler note in build_app).
EXPECTED_ERRORS: tuple[type[Exception], ...] = (
    ApiError, ProtocolError, VoiceStoreError, EngineError, CodecError, AudioFormatError, TextError,
)

#: The model's learned null_prefix, listed as a voice with a stable id (the default voice).
DEFAULT_VOICE_ID = str(uuid.uuid5(uuid.NAMESPACE_URL, "https://github.com/gepard-server/voices/default"))
#: Fixed, so every replica and restart lists the default voice at the same place (lists sort by it).
DEFAULT_VOICE_CREATED_AT = "2025-01-01T00:00:00.000000Z"
#: One second later, so lists (ordered by creation) show the default voice first, then this one.
UNCONDITIONED_VOICE_CREATED_AT = "2025-01-01T00:00:01.000000Z"
#: No speaker prefix at all (an empty [0, H] prefix): the prompt is the text alone, as the upstream
#: reference runner speaks without a reference; the speaker follows the text and the seed.
UNCONDITIONED_VOICE_ID = str(uuid.uuid5(uuid.NAMESPACE_URL, "https://github.com/gepard-server/voices/unconditioned"))


@dataclass
class Runtime:
    settings: Settings
    engine: TtsEngine
    codec: NanoCodec | TorchNanoCodec  # the torch decoder decodes identically but cannot clone
    decoder: BatchingCodecDecoder
    encoder: NanoCodecEncoder
    voices: VoiceStore
    cloner: VoiceCloner
    service: SynthesisService
    auth: Authenticator
    metrics: Metrics
    lifecycle: Lifecycle
    key_store: Optional[RedisKeyStore] = None
    #: Voice clones in flight (api/routes/voices.py, from when one asks for its place): work the
    #: drain waits for, as it waits for open streams.
    clones_in_flight: int = 0

    def drain(self) -> "asyncio.Task[bool]":
        """Start (once) the drain of this gateway (api/lifecycle.py); the task's result is True
        when every open stream and voice clone finished before the drain timeout."""
        return self.lifecycle.drain(lambda: self.service.admission.open_streams, lambda: self.clones_in_flight)

    async def aclose(self) -> None:
        closers = [("voices", self.voices.aclose), ("codec", self.decoder.aclose), ("engine", self.engine.aclose)]
        if self.key_store is not None:
            closers.insert(0, ("api keys", self.key_store.aclose))
        for name, closer in closers:
            try:
                await asyncio.shield(closer())
            except Exception:
                logger.exception("closing %s failed", name)
        self.cloner.close()


async def _start_engine(options: EngineOptions) -> TtsEngine:
    """``create_engine(options)``. Cancelled meanwhile (a signal during start-up), it still waits for
    the engine, whose load runs in a thread nothing can stop, and closes it: nothing it started
    (vLLM's engine processes) outlives the start-up."""
    starting = asyncio.ensure_future(create_engine(options))
    try:
        return await asyncio.shield(starting)
    except asyncio.CancelledError:
        with contextlib.suppress(Exception):  # a load that failed left nothing open
            await (await starting).aclose()
        raise


async def open_runtime(settings: Settings) -> Runtime:
    """Open every long-lived part (module docstring). Cancelled, it closes what it has opened (an
    engine that was loading is closed once loaded) and re-raises."""
    engine = await _start_engine(EngineOptions(model=settings.model, backend=settings.backend, device=settings.device,
                                               dtype=settings.dtype, max_batch=settings.max_concurrent_generations,
                                               vllm_runner=settings.vllm_runner,
                                               stall_timeout_s=settings.engine_stall_timeout_s,
                                               torch_path=settings.torch_path,
                                               torch_compile=settings.torch_compile,
                                               torch_overlap=settings.torch_overlap,
                                               torch_prefill_graphs=settings.torch_prefill_graphs,
                                               torch_prefill_batch=settings.torch_prefill_batch,
                                               torch_fused_kernels=settings.torch_fused_kernels,
                                               torch_stream_priority=settings.torch_stream_priority))
    about = engine.description
    logger.info("engine: %s backend (%s) on %s in %s, CUDA graphs %s (prefills %s), fused kernels %s "
                "(GEPARD_BACKEND=%s)", about.backend, about.loop, about.device, about.dtype,
                *("on" if on else "off" for on in (about.cuda_graphs, about.prefill_graphs, about.fused_kernels)),
                settings.backend)
    try:
        cfg_unavailable = engine.cfg_unavailable
        if settings.default_sampling.uses_cfg and cfg_unavailable:  # every request would get a 400
            raise SettingsError([
                f"GEPARD_CFG_SCALE={settings.cfg_scale:g} makes every request use classifier-free guidance, but "
                f"{cfg_unavailable}: every request would be refused; set GEPARD_CFG_SCALE to 1, or run guidance "
                "on GEPARD_BACKEND=torch with GEPARD_MAX_CONCURRENT_GENERATIONS of 2 or more"])
        info = engine.model_info
        device = pick_device(settings.device)
        model_dir = Path(info.name) if Path(info.name).is_dir() else None
        source = codec_source(model_dir, settings.codec)
        loop = asyncio.get_running_loop()
        codec = await loop.run_in_executor(None, lambda: load_codec(source, device=device, dtype=pick_dtype(device, settings.dtype),
                                                                    impl=settings.codec_impl))
        if settings.preload_dir is not None and not codec.can_encode:
            raise CodecLoadError(f"GEPARD_PRELOAD_DIR clones voices at start, but the codec is the torch decoder "
                                 f"({codec.impl}), which cannot encode; install NeMo or unset GEPARD_PRELOAD_DIR")
        # NeMo's codec still encodes (cloning); where the torch decoder of the same checkpoint can
        # replay graphs or carry state, it decodes, with one state slot per generation the service
        # runs at once (more streams decode windowed)
        decoding, _ = await loop.run_in_executor(None, functools.partial(
            stream_decoding_codec, codec, source, settings.codec_impl, graphs=settings.codec_cuda_graphs,
            carry_state=settings.codec_carry_state, compiled=settings.codec_compile,
            slots=settings.max_concurrent_generations))
        if decoding is not codec:  # the torch decoder decodes: NeMo's codec only encodes (cloning) from now on
            assert isinstance(codec, NanoCodec)
            codec.release_decoder()
            logger.info("codec: NeMo's codec encodes only; its decoder is released (the torch decoder of the same "
                        "checkpoint decodes)")
        decoder = BatchingCodecDecoder(decoding, schedule=settings.chunk_schedule or default_schedule(device))
        # before compiling and capturing: the graphs then hold one kernel per activation
        await loop.run_in_executor(None, fuse_decoder_activations, decoding, settings.codec_fused_activations,
                                   settings.codec_compile)
        if settings.codec_compile:  # for every decode the batching decoder makes, before the first request
            await loop.run_in_executor(None, compile_decoder, decoding, decoder.max_batch, decoder.max_window_frames)
        if settings.codec_cuda_graphs:  # likewise (a no-op on CPU); after compiling: the graphs replay the compiled code
            await loop.run_in_executor(None, capture_decoder_graphs, decoding, decoder.max_batch, decoder.max_window_frames,
                                       decoder.max_chunk_frames if decoder.carries_state else 0)
        made = decoder.description
        logger.info("codec: the %s decoder on %s in %s decodes; carrying conv state %s, fused activations %s, compiled "
                    "%s, CUDA graphs %s", made.impl, made.device, made.dtype, *("on" if on else "off" for on in (
                        made.carry_state, made.fused_activations, made.compiled, made.cuda_graphs)))
        encoder = NanoCodecEncoder(codec)
        voices = open_voice_store(settings.redis_url, settings.data_dir)
        voices.register_builtin(VoiceRecord(
            voice=Voice(id=DEFAULT_VOICE_ID, name="Gepard", language="en", description="Gepard's default voice",
                        created_at=DEFAULT_VOICE_CREATED_AT,
                        access="public", visibility="all", is_owner=False, model_fingerprint=info.fingerprint),
            prefix=engine.default_prefix(),
        ))
        voices.register_builtin(VoiceRecord(
            voice=Voice(id=UNCONDITIONED_VOICE_ID, name="Gepard (unconditioned)", language="en",
                        description="No speaker prefix: the model's own output without a voice prompt; the "
                                    "speaker varies with the text and seed (pin seed for a stable one)",
                        created_at=UNCONDITIONED_VOICE_CREATED_AT,
                        access="public", visibility="all", is_owner=False, model_fingerprint=info.fingerprint),
            prefix=engine.default_prefix()[:0],  # [0, H]: no rows before the text
        ))
        cloner = VoiceCloner(encoder, engine.compress_reference, info.fingerprint, voices,
                             limits=ClipLimits(max_bytes=settings.max_clip_bytes, max_ref_seconds=settings.max_ref_seconds),
                             max_concurrent=settings.max_concurrent_clones)
    except BaseException:
        await engine.aclose()
        raise
    try:
        if settings.preload_dir is not None:
            await preload_voices(settings.preload_dir, cloner)
    except BaseException:  # e.g. the store is unreachable: start-up fails, nothing stays open
        for closer in (voices.aclose, decoder.aclose, engine.aclose):
            await asyncio.shield(closer())
        raise
    service = SynthesisService(engine, decoder, voices, settings)
    # keys from the configuration, plus (with Redis) keys every replica shares: `gepard keys add`
    key_store = RedisKeyStore.from_url(settings.redis_url) if settings.redis_url else None
    auth = Authenticator(settings.api_keys, settings.token_secret, require_auth=bool(settings.require_auth),
                         key_lookup=key_store.contains_digest if key_store else None,
                         key_cache_ttl_s=settings.key_cache_ttl_s)
    logger.info("runtime ready: model %s, codec %s (%s%s%s), voices %s", info.name, source, codec.impl,
                "" if decoding is codec else f", decoding with the {decoding.impl} decoder",
                "" if codec.can_encode else ", decode only: cloning disabled", type(voices).__name__)
    metrics = Metrics()
    metrics.observe(engine, decoder, voices, service)  # engine steps, codec batches, store calls, streams
    service.admission.on_refused = lambda reason: metrics.streams_refused.labels(reason).inc()
    lifecycle = Lifecycle(settings.drain_timeout_s)
    lifecycle.on_drain(lambda: service.admission.close(lifecycle.refusal))
    lifecycle.on_cut(service.interrupt)
    return Runtime(settings, engine, codec, decoder, encoder, voices, cloner, service, auth, metrics, lifecycle,
                   key_store)


def build_app(settings: Settings, runtime: Optional[Runtime] = None) -> Starlette:
    """The ASGI app. With ``runtime`` given, the caller owns it; otherwise the lifespan opens one."""

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        owned = runtime is None
        rt = await open_runtime(settings) if owned else runtime
        app.state.runtime = rt
        # runs once the server listens, so /ready can say "starting" meanwhile
        warming = asyncio.create_task(warm_up(rt, rt.lifecycle), name="gateway-warm-up")
        try:
            yield
        finally:
            warming.cancel()
            await asyncio.gather(warming, return_exceptions=True)
            if owned:
                await rt.aclose()

    def answer(request: Request, error: Exception,
               render: Callable[[Exception, str], Response] = error_response) -> Response:
        """The error response to ``request`` (in the shape ``render`` gives), counted in
        gepard_errors_total under the label of the route that raised it. An unexpected error after
        the response started comes here too: it is counted (as ``internal_error``) though the
        response cannot be sent."""
        rt: Optional[Runtime] = getattr(request.app.state, "runtime", None)
        if rt is not None:
            rt.metrics.error(route_label(request.scope), error)
        return render(error, getattr(request.state, "request_id", None) or new_request_id())

    async def on_error(request: Request, exc: Exception) -> Response:
        return answer(request, exc)

    async def on_no_route(request: Request, exc: HTTPException) -> Response:
        # Starlette's router answers an unknown path (404) or a known path with another method
        # (405) in plain text; clients parse Cartesia's JSON error body, so answer in that instead
        where = f"{request.method} {request.url.path}"
        if exc.status_code == 405:
            allow = (exc.headers or {}).get("Allow", "")
            error: ApiError = MethodNotAllowedError(f"{where}: this path does not take {request.method}"
                                                    + (f"; it takes {allow}" if allow else ""), allow=allow)
        elif exc.status_code == 404:
            error = NotFoundError(f"{where}: no such endpoint")
        else:  # no route of ours raises HTTPException; keep Starlette's status if one ever does
            error = ApiError(f"{where}: {exc.detail}")
            error.status_code = exc.status_code  # type: ignore[misc]
        if request.url.path.startswith("/v1/"):  # OpenAI clients read OpenAI's error shape (as DrainGate does)
            return answer(request, error, render=openai_speech.openai_error_response)
        return answer(request, error)

    routes = [
        Route("/", health.status, methods=["GET"]),
        Route("/health", health.health, methods=["GET"]),
        Route("/ready", health.ready, methods=["GET"]),
        Route("/metrics", health.metrics, methods=["GET"]),
        Route("/tts/bytes", tts_bytes.endpoint, methods=["POST"]),
        Route("/tts/sse", tts_sse.endpoint, methods=["POST"]),
        WebSocketRoute("/tts/websocket", tts_ws.endpoint),
        Route("/access-token", access_token.endpoint, methods=["POST"]),
        *voice_routes.routes(),
        *pronunciation_dicts.routes(),
        *not_served.routes(),
        *openai_speech.routes(),
        *playground.routes(),
    ]
    # Expected errors go through Starlette's ExceptionMiddleware, which answers and is done. Only
    # unexpected ones reach the catch-all (ServerErrorMiddleware), which re-raises after answering,
    # so uvicorn logs the traceback and closes the connection; expected 4xx/5xx answers must not
    # close keep-alive connections the SDKs reuse from their pools.
    handlers = {cls: on_error for cls in EXPECTED_ERRORS} | {HTTPException: on_no_route}
    # a client that hangs up is one INFO line, not an unexpected error (api/disconnects.py); it
    # sits inside the catch-all, so a disconnect never reaches it. While draining, DrainGate
    # answers new requests and upgrades 503 before any route runs. The access log is outermost,
    # so its one line per request sees those refusals too (api/access_log.py). An expected error
    # after a response started (a /tts/bytes body) is one WARNING line and a dropped connection
    # (api/late_errors.py), outside the disconnect check: a client gone is not an error.
    return Starlette(routes=routes, lifespan=lifespan, exception_handlers={**handlers, Exception: on_error},
                     middleware=[Middleware(AccessLogMiddleware), Middleware(DrainGate),
                                 Middleware(LateErrorMiddleware), Middleware(DisconnectMiddleware)])
