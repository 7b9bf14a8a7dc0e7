"""One /tts/websocket connection: its contexts, their generation tasks, cleanup in ``finally``.

Contexts multiplex freely on one socket; each keeps its own order. A context is a ``WsContext``
(api/ws_context.py: its state machine, text buffer and the worker task that speaks its jobs); this
module is the socket: its reader loop, which feeds the contexts, its sends, its limits and its close.

A client close cancels every context (LiveKit closes the socket instead of sending cancel). The
socket closes with 1000 after ``ws_idle_timeout_s`` with no client traffic and no context busy
(``WsContext.busy``: text buffered, segments or flushes queued, or one being spoken, i.e. audio
owed). Contexts left open with nothing to say do not hold it off: the close cancels them and frees
their stream places (Cartesia, too, closes a socket idle for 5 minutes).

Limits that keep one client from holding the server (each answered in band, naming its setting):

- admission: a context takes a stream place (``SynthesisService.admit``) with its first text: at
  once when its first message has text, else when the first message that has text arrives (a
  context opened empty, as agents open their next turn early, holds no place until then, and an
  empty close never needs one). Past a stream limit or the load limit it gets 429
  ``concurrency_limited`` with retry advice (while the server drains, 503) and never speaks (its
  id is then closed: later input on it gets ``context_closed``; a retry takes a new context id).
  A context with nothing left to say gives its place back after ``context_hold_s`` and takes one
  again with its next text (refused the same way), so open contexts on a socket still in use hold
  no places others need. Open contexts, empty or not, are bounded per socket by ``max_contexts`` (429
  ``too_many_contexts``);
- text: a context may hold ``max_context_text_chars`` characters not yet spoken, a socket
  ``max_socket_text_chars`` over all its contexts; the message that would go past fails its
  context (413 ``text_buffer_full``);
- reading: every send must complete within ``send_timeout_s``. A client that stops reading blocks
  the socket (sends wait for the socket's small write buffer to drain, so at most ~64 KiB of
  audio waits per socket), so after the timeout every context of the socket is cancelled, their
  engine slots are freed, and the socket is closed with 1008;
- one terminal event per context, and it is the last: input that arrives while a context is
  closing (after its ``continue: false``) is not spoken, and the context then ends with one
  ``context_closed`` error instead of ``done``, after all its audio.

Credentials: the socket keeps the Principal its upgrade authenticated, and every new context, and
every message that brings an open context more text, re-checks it (``Authenticator.recheck``:
token expiry, key still live, through the key cache), so a removed key or an expired token starts
nothing new on a socket that outlived it, however long a context stays open with ``continue``.
The refused context gets its 401 in band (token_expired, token_revoked, invalid_credentials, as a
new request would), later ones get the same, contexts already speaking finish what they were
given (an empty closing message is not new work), and the socket closes with 1008 as soon as none
is working (open or closing; the idle close still applies). A 503 (the key store cannot be
reached) refuses only a new context (the key may well be valid) and lets an open one go on.

Drain (api/lifecycle.py): once the server drains, a new context gets 503 ``service_unavailable``
in band (an empty close aside), and so does the first text of a context opened empty and not yet
admitted; admitted contexts run to their end, and the socket closes with 1012 (service restart) as
soon as none is admitted or closing (``WsContext.holds_drain``; an empty one left open is cancelled
by the close). At the drain timeout each working context gets one in-band ``service_unavailable``
error and the socket closes with 1012.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import uuid
from collections import OrderedDict
from dataclasses import dataclass
from typing import Optional

from starlette.websockets import WebSocket, WebSocketDisconnect, WebSocketState

from api.admission import StreamTicket
from api.auth import Authenticator, Principal
from api.errors import (
    AuthenticationError, ContextClosedError, RateLimitedError, RequestTooLargeError, ServiceUnavailableError,
    TooManyContextsError, error_event, ws_close_code,
)
from api.lifecycle import Lifecycle
from api.metrics import Metrics
from api.protocol.events import ServerEvent
from api.protocol.errors import ProtocolError
from api.protocol.requests import WsCancelRequest, WsGenerationRequest, parse_ws_message
from api.segment_timing import check_timing_request
from api.synthesis import SynthesisService, speaking_language
from api.ws_context import ContextState, WsContext
from voices.models import VoicePrompt

logger = logging.getLogger(__name__)

_CLOSED_IDS_REMEMBERED = 1024  # finished context ids kept to answer late inputs with "context closed"


class TextBufferFullError(RequestTooLargeError):
    """413 ``text_buffer_full``: a context or socket holds too much text not yet spoken."""

    default_error_code = "text_buffer_full"
    title = "Too much text buffered"


class ClientNotReadingError(WebSocketDisconnect):
    """A send did not complete within the send timeout: the client stopped reading."""

    def __init__(self, timeout_s: float) -> None:
        super().__init__(1008, f"client read nothing for {timeout_s:g} s")


_MAX_QUEUED_JOBS = 4096  # flushes are jobs too: bound them like the text


@dataclass(frozen=True)
class WsLimits:
    """Per-socket limits (from Settings; see the module docstring)."""

    idle_timeout_s: float = 300.0
    max_contexts: int = 64
    send_timeout_s: float = 10.0
    max_context_text_chars: int = 50_000
    max_socket_text_chars: int = 200_000
    context_hold_s: float = 10.0

    @classmethod
    def from_settings(cls, settings) -> "WsLimits":
        return cls(settings.ws_idle_timeout_s, settings.max_contexts_per_socket, settings.ws_send_timeout_s,
                   settings.max_context_text_chars, settings.max_socket_text_chars, settings.ws_context_hold_s)


class WsConnection:
    def __init__(self, websocket: WebSocket, service: SynthesisService, limits: WsLimits,
                 metrics: Optional[Metrics] = None, client_key: str = "anonymous",
                 lifecycle: Optional[Lifecycle] = None, *, principal: Optional[Principal] = None,
                 auth: Optional[Authenticator] = None, connection_id: Optional[str] = None) -> None:
        """principal, auth: who the upgrade authenticated, and the Authenticator that re-checks it
        at each new context (both or neither; neither: no re-check). connection_id: the upgrade's
        request id, so its access log line and this socket's lines share one id."""
        self.ws = websocket
        self.principal = principal
        self.auth = auth
        # set once the credential failed its re-check: no new context opens, and the socket closes
        # (1008) once none works
        self._credentials_lapsed: Optional[AuthenticationError] = None
        self._closed_for_credentials = False
        self.lifecycle = lifecycle
        self._draining = False  # the server drains: close (1012) once no context works
        self._cutting = False  # the drain timeout is failing this socket's contexts
        self._closed_for_restart = False
        self.service = service
        self.metrics = metrics
        self.limits = limits
        self.idle_timeout_s = limits.idle_timeout_s
        self.max_contexts = limits.max_contexts
        self.client_key = client_key  # the API key's id: per-key stream limits
        self._stalled = False
        self._stall_task: Optional[asyncio.Task] = None
        self.connection_id = connection_id or str(uuid.uuid4())
        self.contexts: dict[str, WsContext] = {}
        self._closed_ids: OrderedDict[str, ContextState] = OrderedDict()
        self._send_lock = asyncio.Lock()
        self._last_activity = time.monotonic()
        self._prefixes: dict[str, object] = {}

    async def run(self) -> None:
        await self.ws.accept()
        logger.info("ws %s opened", self.connection_id)
        try:
            if self.lifecycle is not None:
                self.lifecycle.subscribe(self)
            await self._read_loop()
        except WebSocketDisconnect as exc:
            logger.info("ws %s closed by client (code %s)", self.connection_id, exc.code)
        finally:
            if self.lifecycle is not None:
                self.lifecycle.unsubscribe(self)
            await self._cleanup()

    async def _read_loop(self) -> None:
        while not self._stalled:  # a client that stopped reading gets no new work started
            timeout = self._last_activity + self.idle_timeout_s - time.monotonic()
            try:
                async with asyncio.timeout(max(timeout, 0.001)):
                    message = await self.ws.receive()
            except TimeoutError:
                # only work in progress holds the socket open: contexts left open with nothing to
                # say (no text, no audio owed) are cancelled by the close, and their places freed
                if any(ctx.busy for ctx in self.contexts.values()):
                    self._last_activity = time.monotonic()
                    continue
                if time.monotonic() - self._last_activity >= self.idle_timeout_s:
                    logger.info("ws %s idle for %g s: closing (%d idle context(s) open)", self.connection_id,
                                self.idle_timeout_s, len(self.contexts))
                    await self.ws.close(code=1000, reason="idle timeout")
                    return
                continue
            if message["type"] == "websocket.disconnect":
                raise WebSocketDisconnect(message.get("code", 1000), message.get("reason"))
            # JSON arrives in text frames; a binary frame is read as UTF-8 JSON too, so its
            # context gets an answer (parse_ws_message names the problem if it is not JSON)
            raw = message["text"] if message.get("text") is not None else message.get("bytes") or b""
            self._last_activity = time.monotonic()
            await self._dispatch(raw)

    async def _dispatch(self, raw: str | bytes) -> None:
        if self._stalled:
            raise ClientNotReadingError(self.limits.send_timeout_s)
        try:
            msg = parse_ws_message(raw)
        except ProtocolError as exc:
            ctx = self.contexts.get(exc.context_id) if exc.context_id else None
            if exc.context_id and self._closed_ids.get(exc.context_id) is ContextState.CANCELLED:
                return
            if ctx is not None:
                await ctx.fail(exc)
            else:
                await self.send_error(exc, f"{self.connection_id}:{exc.context_id}", exc.context_id)
                if exc.context_id and exc.context_id not in self._closed_ids:
                    # a context's first message was unreadable: its id is closed like a refused one,
                    # so the rest of that utterance never opens a context that starts mid-sentence
                    self._remember(exc.context_id, ContextState.FAILED)
            return
        if isinstance(msg, WsCancelRequest):
            ctx = self.contexts.pop(msg.context_id, None)
            if ctx is not None:
                await ctx.cancel()
                logger.info("context %s cancelled", ctx.request_id)
            # whatever the id was (open, finished, refused, never seen): nothing more for it. The SDKs
            # stop routing a cancelled id's events, and hand strays to whichever context is reading
            self._remember(msg.context_id, ContextState.CANCELLED)
            return
        cid = msg.context_id
        ctx = self.contexts.get(cid)
        if ctx is None:
            previous = self._closed_ids.get(cid)
            if previous is ContextState.CANCELLED:
                return  # nothing at all after a cancel
            if previous is not None:
                await self.send_error(ContextClosedError(cid, refused=previous is ContextState.FAILED),
                                      f"{self.connection_id}:{cid}", cid)
                return
            if not await self._credentials_still_good(cid):
                return
            if sum(c.working for c in self.contexts.values()) >= self.max_contexts:
                await self.send_error(TooManyContextsError(self.max_contexts), f"{self.connection_id}:{cid}", cid)
                self._remember(cid, ContextState.FAILED)  # as below: the rest of it is context_closed
                return
            try:
                self.service.check_request(msg)
                self._check_text(None, msg)
                language = msg.effective_language
                if msg.has_text:
                    # an unknown voice is reported now, not when the first segment is cut (which may
                    # be max_buffer_delay_ms later); an empty close needs no voice at all
                    language = await self._speaking_language(msg)
                    await self.service.pronunciations(msg.pronunciation_dict_id)  # 404 names an unknown id
                await check_timing_request(msg, language)  # fixed with the context, as its language is
            except Exception as exc:
                await self.send_error(exc, f"{self.connection_id}:{cid}", cid)
                self._remember(cid, ContextState.FAILED)
                return
            ticket: Optional[StreamTicket] = None
            # A stream place is taken with the context's first text: a context opened empty (an agent
            # opening its next turn early) holds none until then, and an empty close never needs one.
            # While draining, a new context is refused at once, text or not (it could speak nothing).
            if msg.has_text or (self._draining and msg.continue_):
                try:
                    ticket = self.service.admit(self.client_key)
                except (RateLimitedError, ServiceUnavailableError) as exc:  # over a limit, or draining
                    # Refused before it started. The id is closed like a failed one, so the rest of an
                    # utterance already on its way is answered context_closed, never admitted later as a
                    # context that starts mid-sentence; a retry uses a new context id.
                    await self.send_error(exc, f"{self.connection_id}:{cid}", cid)
                    self._remember(cid, ContextState.FAILED)
                    return
            ctx = WsContext(self, msg, ticket)
            self.contexts[cid] = ctx
            if self.metrics is not None:
                self.metrics.requests.labels("ws").inc()
                self.metrics.ws_contexts.inc()
            logger.info("context %s opened (voice %s, %s)", ctx.request_id, msg.voice_id, msg.output_format)
        elif ctx.state is ContextState.OPEN:
            if msg.has_text:  # new text is new work: not on a credential that lapsed
                try:
                    lapsed = await self._lapsed_credential(ctx.request_id)
                except ServiceUnavailableError:
                    lapsed = None  # the key store is down: a context already speaking goes on
                if lapsed is not None:
                    await ctx.fail(lapsed)
                    return
            try:
                self.service.check_request(msg)  # every message: transcript length, model
                self._check_text(ctx, msg)
            except Exception as exc:
                await ctx.fail(exc)
                return
            if msg.has_text and ctx.ticket is None and not await self._admit_late(ctx):
                return
        try:
            ctx.on_input(msg)
        except ContextClosedError as exc:
            await self.send_error(exc, ctx.request_id, cid)

    async def _admit_late(self, ctx: WsContext) -> bool:
        """The first text of a context opened empty (or of one that gave its place back while idle):
        check its voice and take its stream place now, as for a new context with text. On a refusal (429 over a limit, 503 while draining) or an
        unknown voice, the context fails with that error in band and its id is closed (later input
        gets ``context_closed``); False then, and the text is not taken."""
        try:
            # the voice's language may ask for phonemes eSpeak lacks (the context opened without one)
            await check_timing_request(ctx.config, await self._speaking_language(ctx.config))
            if ctx._dictionary is None:  # one that spoke keeps its dictionary's last copy (api/synthesis.py)
                await self.service.pronunciations(ctx.config.pronunciation_dict_id)
        except Exception as exc:
            await ctx.fail(exc)
            return False
        if ctx.state is not ContextState.OPEN:  # stopped meanwhile (the socket stalled, the drain cut it)
            return False
        try:
            ctx.ticket = self.service.admit(self.client_key)
        except (RateLimitedError, ServiceUnavailableError) as exc:
            await ctx.fail(exc)
            return False
        return True

    async def _credentials_still_good(self, cid: str) -> bool:
        """Re-check the upgrade's credential before context ``cid`` opens (module docstring); on a
        failure, answer ``cid`` in band, close its id, and say False."""
        request_id = f"{self.connection_id}:{cid}"
        try:
            error = await self._lapsed_credential(request_id)
        except ServiceUnavailableError as exc:  # the key store is down: this context only, retryable
            error = exc
        if error is None:
            return True
        await self.send_error(error, request_id, cid)
        self._remember(cid, ContextState.FAILED)
        if self._credentials_lapsed is not None:
            self._close_if_idle()
        return False

    async def _lapsed_credential(self, request_id: str) -> Optional[AuthenticationError]:
        """The error the upgrade's credential lapsed with (re-checked now, once it has not yet), or
        None; ServiceUnavailableError when only the unreachable key store could tell (the caller
        decides: a new context is refused, an open one goes on)."""
        if self._credentials_lapsed is None and self.auth is not None and self.principal is not None:
            try:
                await self.auth.recheck(self.principal)
            except AuthenticationError as exc:
                self._credentials_lapsed = exc
                logger.info("context %s refused: credential %s no longer valid (%s); the socket takes no new work "
                            "and closes once none works", request_id, self.principal.credential_id, exc.error_code)
        return self._credentials_lapsed

    def _check_text(self, ctx: Optional[WsContext], msg: WsGenerationRequest) -> None:
        """TextBufferFullError when ``msg`` would take a context or the socket past its text limit
        (flushes are queued work too: a context holds at most _MAX_QUEUED_JOBS segments and flushes)."""
        if ctx is not None and ctx.jobs.qsize() >= _MAX_QUEUED_JOBS:
            raise TextBufferFullError(f"context {msg.context_id} has {_MAX_QUEUED_JOBS} segments and flushes "
                                      "waiting; read its audio before sending more")
        size = len(msg.transcript)
        if not size:
            return
        held = ctx.unspoken_chars if ctx is not None else 0
        if held + size > self.limits.max_context_text_chars:
            raise TextBufferFullError(
                f"context {msg.context_id} would hold {held + size} characters not yet spoken, over the limit of "
                f"{self.limits.max_context_text_chars} (GEPARD_MAX_CONTEXT_TEXT_CHARS); read its audio before "
                "sending more text")
        total = sum(c.unspoken_chars for c in self.contexts.values()) + size
        if total > self.limits.max_socket_text_chars:
            raise TextBufferFullError(
                f"this socket's contexts would hold {total} characters not yet spoken, over the limit of "
                f"{self.limits.max_socket_text_chars} (GEPARD_MAX_SOCKET_TEXT_CHARS); read their audio before "
                "sending more text")

    def context_finished(self, ctx: WsContext) -> None:
        """Called once per context (idempotent): from its worker's ``finally`` or from ``cancel``."""
        if ctx._finished:
            return
        ctx._finished = True
        ctx._stop_hold_timer()
        ctx._section = None  # an Opus section left open (cancelled, failed): its encoder goes now
        if ctx.ticket is not None:
            ctx.ticket.release()
        ctx.timing.close(time.perf_counter())
        if self.contexts.get(ctx.context_id) is ctx:
            del self.contexts[ctx.context_id]
        if self.metrics is not None:
            self.metrics.ws_contexts.dec()
        self._remember(ctx.context_id, ctx.state)
        self._last_activity = time.monotonic()
        if self._draining or self._credentials_lapsed is not None:
            self._close_if_idle()

    def place_given_back(self) -> None:
        """A context gave its stream place back while idle: a draining socket may now close."""
        if self._draining:
            self._close_if_idle()

    # -- drain (api.lifecycle.DrainListener) -------------------------------------------------------
    def on_drain(self) -> None:
        self._draining = True
        self._close_if_idle()

    async def on_cut(self, error: ServiceUnavailableError) -> None:
        self._cutting = True  # the contexts' endings go out before the close
        for ctx in [c for c in self.contexts.values() if c.working]:
            with contextlib.suppress(Exception):
                await ctx.fail(error)
        await self._close_for_restart()

    def _close_if_idle(self) -> None:
        """Close a socket whose credential lapsed (1008) once no context is working, or a draining one
        (1012) once none is admitted or closing: an open context never admitted could only be refused
        its first text here, so its client is better off reconnecting to a ready replica."""
        if self._cutting or self._closed_for_restart or self._closed_for_credentials:
            return
        if self._credentials_lapsed is not None:  # a client with no valid credential has no reason to reconnect
            if not any(c.working for c in self.contexts.values()):
                asyncio.get_running_loop().create_task(self._close_for_credentials(),
                                                       name=f"ws-auth-{self.connection_id}")
            return
        if self._draining and not any(c.holds_drain for c in self.contexts.values()):
            asyncio.get_running_loop().create_task(self._close_for_restart(), name=f"ws-drain-{self.connection_id}")

    async def _close_for_credentials(self) -> None:
        """Close with what api.errors gives an auth error (1008, policy violation), after any event
        being sent: the refused context's error goes out first."""
        if self._closed_for_credentials or self._closed_for_restart or self._credentials_lapsed is None:
            return
        self._closed_for_credentials = True
        code = ws_close_code(self._credentials_lapsed)
        logger.info("ws %s: closing with %d: %s", self.connection_id, code, self._credentials_lapsed.error_code)
        try:
            async with self._send_lock:
                await self.ws.close(code=code, reason=self._credentials_lapsed.error_code)
        except Exception:  # already closing or gone
            pass

    async def _close_for_restart(self) -> None:
        """Close with 1012 (service restart): clients reconnect, to a replica that is ready."""
        if self._closed_for_restart:
            return
        self._closed_for_restart = True
        logger.info("ws %s: server draining, closing with 1012", self.connection_id)
        try:
            async with self._send_lock:  # after any event being sent
                await self.ws.close(code=1012, reason="server restarting")
        except Exception:  # already closing or gone
            pass

    def _remember(self, context_id: str, state: ContextState) -> None:
        self._closed_ids[context_id] = state
        self._closed_ids.move_to_end(context_id)
        while len(self._closed_ids) > _CLOSED_IDS_REMEMBERED:
            self._closed_ids.popitem(last=False)

    async def prompt_for(self, voice_id: str) -> VoicePrompt:
        # resolved per segment through the store's in-process cache (which revalidates deletes)
        return await self.service.voice_prompt(voice_id)

    async def _speaking_language(self, msg: WsGenerationRequest) -> Optional[str]:
        """What a context of ``msg`` is read in (api/synthesis.py ``speaking_language``); looking its
        voice up, so an unknown one is VoiceNotFoundError (404) now."""
        prompt = await self.prompt_for(msg.voice_id)
        return speaking_language(msg.effective_language, prompt.language)

    async def send_error(self, exc: BaseException, request_id: str, context_id: Optional[str]) -> None:
        """One in-band error event (``done: true``) for ``context_id``, counted in the metrics."""
        event = error_event(exc, request_id, context_id)
        if self.metrics is not None:
            self.metrics.errors.labels("ws", event.error_code or "unknown").inc()
        await self.send(event)

    async def send(self, event: ServerEvent) -> None:
        """Send one event; ClientNotReadingError when it cannot go out within the send timeout
        (waiting for the socket counts: sends block while the client's unread data fills the
        socket's write buffer), and then the whole socket is shut down (``_shut_stalled``)."""
        if self._stalled:
            raise ClientNotReadingError(self.limits.send_timeout_s)
        text = event.to_json()
        # asyncio.timeout, not asyncio.wait_for: on Python 3.11, wait_for swallows a cancel that lands
        # in the step where the send completes, and a cancelled context then spoke to its end.
        try:
            async with asyncio.timeout(self.limits.send_timeout_s):
                await self._send_text(text)
        except TimeoutError:
            self._stall()
            raise ClientNotReadingError(self.limits.send_timeout_s) from None
        self._last_activity = time.monotonic()

    async def _send_text(self, text: str) -> None:
        async with self._send_lock:
            if self.ws.client_state is not WebSocketState.CONNECTED or self._stalled:
                raise WebSocketDisconnect(1006)
            if self.ws.application_state is not WebSocketState.CONNECTED:  # we closed it (drain)
                raise WebSocketDisconnect(1012)
            await self.ws.send_text(text)

    def _stall(self) -> None:
        if self._stalled:
            return
        self._stalled = True
        logger.info("ws %s: client read nothing for %.0f s: cancelling %d context(s) and closing",
                    self.connection_id, self.limits.send_timeout_s, len(self.contexts))
        if self.metrics is not None:
            self.metrics.errors.labels("ws", "client_not_reading").inc()
        self._stall_task = asyncio.create_task(self._shut_stalled(), name=f"ws-stalled-{self.connection_id}")

    async def _shut_stalled(self) -> None:
        """Free the engine slots of a socket whose client stopped reading, then close it (1008).

        The close frame cannot get past unread data either; the WebSocket library gives up on the
        close handshake after its close timeout and drops the connection, which ends the reader."""
        await asyncio.gather(*(ctx.cancel() for ctx in list(self.contexts.values())))
        try:
            await self.ws.close(code=1008, reason="client stopped reading")
        except Exception:  # already closing or gone: the reader loop ends either way
            pass

    async def _cleanup(self) -> None:
        if self._stall_task is not None:
            await asyncio.gather(self._stall_task, return_exceptions=True)
        contexts = list(self.contexts.values())
        self.contexts.clear()
        await asyncio.gather(*(ctx.cancel() for ctx in contexts))  # at once: each may wait up to CANCEL_WAIT_S
        if contexts:
            logger.info("ws %s: cancelled %d open context(s) on close", self.connection_id, len(contexts))
        logger.info("ws %s closed", self.connection_id)
