"""POST /voices/clone against hostile and careless clients, on a real uvicorn server with the real
tiny codec: abandoned clones keep their place until their thread ends and never use the default
executor, slow uploads take no clone place, an upload has a deadline and a shared memory budget,
and a truncated body, a malformed language or a misplaced part gets a 400 that says so."""

from __future__ import annotations

import dataclasses
import json
import socket
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from typing import Iterator, Optional

import httpx
import pytest

from api.app import DEFAULT_VOICE_ID
from api.routes import voices as voices_routes
from tests.api.conftest import gateway_settings
from tests.api.live import LiveServer
from tests.api.routes._voices_support import CLIP_22K, clone, error_of, tts_bytes

BOUNDARY = "gepardguards"


@pytest.fixture(scope="module")
def server(tiny_ckpt_dir, tmp_path_factory) -> Iterator[LiveServer]:
    # 2 clone places (GEPARD_MAX_CONCURRENT_CLONES), not the default 4: the limits below are the setting's
    settings = gateway_settings(tiny_ckpt_dir, tmp_path_factory.mktemp("voices-guards"), max_concurrent_clones=2)
    with LiveServer(settings) as live:
        yield live


def form(*parts: tuple[str, bytes, Optional[str]], close: bool = True) -> bytes:
    """A multipart body of (name, value, filename) parts; ``close=False`` leaves out the closing boundary."""
    out = b""
    for name, value, filename in parts:
        disposition = f'form-data; name="{name}"' + (f'; filename="{filename}"' if filename else "")
        ctype = "Content-Type: audio/wav\r\n" if filename else ""
        out += f"--{BOUNDARY}\r\nContent-Disposition: {disposition}\r\n{ctype}\r\n".encode() + value + b"\r\n"
    return out + (f"--{BOUNDARY}--\r\n".encode() if close else b"")


def clone_form(name: str, clip: bytes, language: str = "en", close: bool = True) -> bytes:
    return form(("name", name.encode(), None), ("language", language.encode(), None), ("clip", clip, "a.wav"),
                close=close)


def head(content_length: int) -> bytes:
    return (f"POST /voices/clone HTTP/1.1\r\nHost: x\r\nContent-Type: multipart/form-data; boundary={BOUNDARY}\r\n"
            f"Content-Length: {content_length}\r\n\r\n").encode()


def post(server: LiveServer, body: bytes, timeout: float = 60) -> httpx.Response:
    return httpx.post(server.url + "/voices/clone", content=body, timeout=timeout,
                      headers={"content-type": f"multipart/form-data; boundary={BOUNDARY}"})


def read_response(sock: socket.socket) -> tuple[int, dict]:
    """(status, JSON body) of one HTTP response on ``sock``."""
    data = b""
    while b"\r\n\r\n" not in data:
        piece = sock.recv(65536)
        assert piece, f"connection closed after {data!r}"
        data += piece
    head_bytes, body = data.split(b"\r\n\r\n", 1)
    lines = head_bytes.decode("latin-1").split("\r\n")
    headers = {k.lower(): v.strip() for k, v in (line.split(":", 1) for line in lines[1:])}
    while len(body) < int(headers["content-length"]):
        body += sock.recv(65536)
    return int(lines[0].split()[1]), json.loads(body)


def wait_until(condition, timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, what
        time.sleep(0.02)


def names_listed(server: LiveServer) -> list[str]:
    return [v["name"] for v in httpx.get(server.url + "/voices", params={"limit": 100}).json()["data"]]


# --- abandoned clones ---------------------------------------------------------------------------


def test_an_abandoned_clone_holds_its_place_until_its_thread_ends_off_the_default_executor(server, monkeypatch):
    """Clients that hang up mid-clone: each clone's running step cannot be interrupted, so its place
    stays taken until that thread ends (one more clone meanwhile is refused, not started beside it),
    nothing runs after that step, and the threads are the clone executor's: TTS, which encodes its
    audio on the default executor, is not held up. (8 abandoned long clones used to fill the default
    executor and hold /tts/bytes' first byte for 54 s.)"""
    rt = server.runtime
    limit = rt.cloner.max_concurrent
    assert limit == 2 and rt.cloner.executor._max_workers == 2  # GEPARD_MAX_CONCURRENT_CLONES
    monkeypatch.setattr(voices_routes, "CLONE_SLOT_WAIT_S", 0.5)
    codec = rt.encoder._codec
    real_encode, real_compress = codec.encode, rt.cloner.compress
    gate, entered, threads, compressed = threading.Event(), threading.Semaphore(0), [], []

    def gated_encode(*args, **kwargs):  # a long clip on a busy machine: the encode outlasts the client
        threads.append(threading.current_thread().name)
        entered.release()
        assert gate.wait(60), "never released"
        return real_encode(*args, **kwargs)

    def counted_compress(codes):
        compressed.append(threading.current_thread().name)
        return real_compress(codes)

    monkeypatch.setattr(codec, "encode", gated_encode)
    monkeypatch.setattr(rt.cloner, "compress", counted_compress)
    names = [f"abandoned {uuid.uuid4().hex[:8]}" for _ in range(limit)]
    clip = CLIP_22K.read_bytes()
    try:
        for name in names:  # each client sends its clip, waits until its encode runs, and hangs up
            body = clone_form(name, clip)
            with socket.create_connection(("127.0.0.1", server.port), timeout=10) as sock:
                sock.sendall(head(len(body)) + body)
                assert entered.acquire(timeout=30), f"{name} never reached the encoder"
        time.sleep(0.5)  # the server sees the hang-ups and cancels the clones
        assert all(t.startswith("voice-clone") for t in threads), threads  # not the default executor
        assert rt.clones_in_flight == limit  # cancelled, but their threads still run: places held
        t0 = time.monotonic()
        r = clone(server.url, clip, name="while abandoned ones run", timeout=10)
        assert (r.status_code, error_of(r)["error_code"]) == (429, "concurrency_limited"), r.text
        assert time.monotonic() - t0 < 5
        t0 = time.monotonic()
        assert tts_bytes(server.url, DEFAULT_VOICE_ID).status_code == 200  # synthesis is not held up by them
        assert time.monotonic() - t0 < 20
    finally:
        gate.set()
    wait_until(lambda: rt.clones_in_flight == 0, 30, "the abandoned clones' places were never given back")
    assert compressed == [] and len(threads) == limit  # no step ran after the one cut short
    assert not set(names) & set(names_listed(server))
    r = clone(server.url, clip, name="after them")
    assert r.status_code == 200, r.text
    assert httpx.delete(f"{server.url}/voices/{r.json()['id']}").status_code == 204


# --- uploads ------------------------------------------------------------------------------------


def test_slow_uploads_take_no_clone_place(server):
    """More slow uploads than there are clone places (each declares 1 MB and sends only its first
    part headers) used to hold every place: every real clone got 429 for as long as they trickled."""
    rt = server.runtime
    opening = form(("name", b"slow", None), ("language", b"en", None), close=False)
    opening += f'--{BOUNDARY}\r\nContent-Disposition: form-data; name="clip"; filename="a.wav"\r\n\r\n'.encode()
    socks = [socket.create_connection(("127.0.0.1", server.port), timeout=10)
             for _ in range(rt.cloner.max_concurrent + 1)]
    try:
        for sock in socks:
            sock.sendall(head(1_000_000) + opening)
        wait_until(lambda: rt.clones_in_flight == len(socks), 10, "the slow uploads never began")
        t0 = time.monotonic()
        r = clone(server.url, CLIP_22K.read_bytes(), name="beside slow uploads", timeout=30)
        assert r.status_code == 200, r.text
        assert time.monotonic() - t0 < 10
        assert httpx.delete(f"{server.url}/voices/{r.json()['id']}").status_code == 204
    finally:
        for sock in socks:
            sock.close()
    wait_until(lambda: rt.clones_in_flight == 0, 10, "the slow uploads were never let go")


def test_an_upload_that_does_not_arrive_within_the_deadline_gets_408(server, monkeypatch):
    """A body that trickles (a byte every 0.3 s: never idle for the 30 s that drops a connection)
    is answered 408 request_timeout at GEPARD_CLONE_UPLOAD_TIMEOUT_S, and what it held is given back."""
    rt = server.runtime
    monkeypatch.setattr(rt, "settings", dataclasses.replace(rt.settings, clone_upload_timeout_s=1.0))
    body = clone_form("late", CLIP_22K.read_bytes())
    with socket.create_connection(("127.0.0.1", server.port), timeout=10) as sock:
        t0 = time.monotonic()
        sock.sendall(head(len(body)) + body[:5000])
        stop = threading.Event()

        def trickle():
            for byte in body[5000:5100]:
                if stop.wait(0.3):
                    return
                try:
                    sock.sendall(bytes([byte]))
                except OSError:
                    return

        with ThreadPoolExecutor(1) as pool:
            pool.submit(trickle)
            try:
                status, answer = read_response(sock)
            finally:
                stop.set()
        waited = time.monotonic() - t0
    assert (status, answer["error_code"]) == (408, "request_timeout"), answer
    assert "did not arrive within 1 s" in answer["message"] and f"of the {len(body)} declared" in answer["message"]
    assert 0.9 <= waited < 5
    state = server.server.config.app.state
    wait_until(lambda: state.clone_upload_budget.used == 0, 5, "the late upload's bytes were never given back")


def test_uploads_in_progress_share_a_bounded_buffer(server, monkeypatch):
    """The bytes all clone uploads in progress hold are bounded (CLONE_UPLOAD_CLIPS_PER_PLACE full-size
    uploads per clone place): one more upload that finds the buffer full gets 429 with retry advice
    after the brief wait; once the holder is gone, uploads go through again."""
    monkeypatch.setattr(voices_routes, "CLONE_UPLOAD_CLIPS_PER_PLACE", 1 / server.runtime.cloner.max_concurrent)  # 1 clip
    monkeypatch.setattr(voices_routes, "CLONE_SLOT_WAIT_S", 0.5)
    state = server.server.config.app.state
    big = 19_900_000  # leaves less room than the clip below needs
    opening = form(("name", b"holder", None), ("language", b"en", None), close=False)
    opening += f'--{BOUNDARY}\r\nContent-Disposition: form-data; name="clip"; filename="a.wav"\r\n\r\n'.encode()
    with socket.create_connection(("127.0.0.1", server.port), timeout=10) as sock:
        sock.sendall(head(len(opening) + big + 100) + opening + b"\0" * big)  # all but its end
        wait_until(lambda: getattr(state, "clone_upload_budget", None) is not None
                   and state.clone_upload_budget.used >= big, 30, "the big upload never arrived")
        r = clone(server.url, CLIP_22K.read_bytes(), name="no room", timeout=30)
        body = error_of(r)
        assert (r.status_code, body["error_code"]) == (429, "concurrency_limited"), body
        assert "clone uploads in progress on this server already hold" in body["message"], body
        assert (r.headers["retry-after"], r.headers["retry-after-ms"]) == ("2", "2000")
    wait_until(lambda: state.clone_upload_budget.used == 0, 10, "the closed upload's bytes were never given back")
    r = clone(server.url, CLIP_22K.read_bytes(), name="room again")
    assert r.status_code == 200, r.text
    assert httpx.delete(f"{server.url}/voices/{r.json()['id']}").status_code == 204


# --- the form -----------------------------------------------------------------------------------


def test_a_body_that_ends_before_the_closing_boundary_is_invalid_multipart(server):
    clip = CLIP_22K.read_bytes()
    cases = [
        (clone_form("T", clip, close=False), "the body ended before the closing boundary"),  # every part whole
        (clone_form("T", clip, close=False)[:200_000], "the body ended before the closing boundary"),  # mid-clip
        (f"--{BOUNDARY}\r\ngarbage".encode(), "the body ended before the closing boundary"),
        (b"", "the body is empty"),
    ]
    for body, message in cases:
        r = post(server, body)
        answer = error_of(r)
        assert (r.status_code, answer["error_code"]) == (400, "invalid_multipart"), answer
        assert message in answer["message"], answer
    # a whole form, epilogue and all, is fine
    r = post(server, clone_form("whole", clip) + b"\r\nepilogue")
    assert r.status_code == 200, r.text
    assert httpx.delete(f"{server.url}/voices/{r.json()['id']}").status_code == 204


def test_language_is_a_bounded_bcp47_tag_stored_in_canonical_form(server):
    clip = CLIP_22K.read_bytes()
    r = clone(server.url, clip, name="canonical", language="EN_us")
    assert r.status_code == 200, r.text
    vid = r.json()["id"]
    assert r.json()["language"] == "en-US"
    assert httpx.get(f"{server.url}/voices/{vid}").json()["language"] == "en-US"
    assert httpx.delete(f"{server.url}/voices/{vid}").status_code == 204
    cases = [
        ("zz", "language: 'zz': 'zz' is not an ISO 639-1 language code"),
        ("en-" + "abcdefgh-" * 1500, "characters ('en-abcdefgh-'...) is over the limit of 35 for a language tag"),
        ("en-US-US", "is not a language code: 'US' is not a subtag that may stand there"),
        ("english", "must start with a 2- or 3-letter ISO 639 language code"),
    ]
    for language, message in cases:
        r = clone(server.url, clip, name="refused", language=language)
        answer = error_of(r)
        assert (r.status_code, answer["error_code"]) == (400, "invalid_request"), answer
        assert message in answer["message"] and len(answer["message"]) < 300, answer
    assert "refused" not in names_listed(server)


def test_misplaced_parts_name_the_field(server):
    clip = CLIP_22K.read_bytes()
    url = server.url + "/voices/clone"
    cases = [
        # curl -F name=@voice.wav: a text field sent as a file, beside the clip (either order)
        (dict(data={"language": "en"}, files=[("name", ("n.wav", clip, "audio/wav")), ("clip", ("a.wav", clip, "audio/wav"))]),
         "name must be a text field, got a file part"),
        (dict(data={"language": "en"}, files=[("clip", ("a.wav", clip, "audio/wav")), ("name", ("n.wav", clip, "audio/wav"))]),
         "name must be a text field, got a file part"),
        (dict(data={"language": "en"}, files=[("name", ("n.txt", b"x", "text/plain"))]), "name must be a text field"),
        # curl -F clip=<voice.wav: the clip sent as a text field, large or small
        (dict(files={"clip": (None, "x" * 20_000), "name": (None, "x"), "language": (None, "en")}), "clip must be a file part"),
        (dict(files={"clip": (None, "text"), "name": (None, "x"), "language": (None, "en")}), "clip must be a file part"),
        (dict(data={"name": "x", "language": "en"}, files=[("clip", ("a.wav", clip, "audio/wav")), ("clip", ("b.wav", clip, "audio/wav"))]),
         "more than one 'clip' file part"),
        (dict(data={"name": "x" * 20_000, "language": "en"}, files={"clip": ("a.wav", clip, "audio/wav")}),
         "name: a text field may be at most 16 KB"),
    ]
    for kwargs, message in cases:
        r = httpx.post(url, timeout=60, **kwargs)
        answer = error_of(r)
        assert (r.status_code, answer["error_code"]) == (400, "invalid_request"), answer
        assert message in answer["message"], (message, answer)
    r = post(server, f'--{BOUNDARY}\r\nContent-Disposition: form-data\r\n\r\nx\r\n--{BOUNDARY}--\r\n'.encode())
    answer = error_of(r)
    assert (r.status_code, answer["error_code"]) == (400, "invalid_multipart") and "has no name" in answer["message"]


def test_the_readme_lists_every_clone_error_with_its_status():
    """The README's clone error table (section "Voice cloning") names each error a clone can get."""
    from pathlib import Path

    text = (Path(__file__).resolve().parents[3] / "README.md").read_text(encoding="utf-8")
    table = text[text.index("### Voice cloning"):]
    table = table[:table.index("\n## ")]
    for status, code in [(400, "clip_too_short"), (400, "clip_silent"), (400, "corrupt_clip"),
                         (400, "unsupported_audio_format"), (400, "clip_too_large"), (400, "invalid_content_type"),
                         (400, "invalid_multipart"), (400, "missing_field"), (400, "invalid_request"),
                         (400, "invalid_voice"), (408, "request_timeout"), (429, "concurrency_limited"),
                         (500, "voice_cloning_failed"), (501, "cloning_unavailable"), (503, "voice_store_unavailable")]:
        assert f"| {status} | `{code}` |" in table, code
    assert "3 s" in table and "-60 dBFS" in table
