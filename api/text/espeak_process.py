"""The gateway's handle on one eSpeak NG child process (api/text/espeak.py): start it, ask it for
phonemes with a deadline, and say so when it died (``crash``) or stopped answering (``hang``, and it
is killed). What to do then is api/text/phonemes.py's policy; this module only runs the process.
"""

from __future__ import annotations

import os
import select
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from typing import Any, Optional

from api.text import espeak
from api.text.espeak import EspeakUnavailable, decode_frame, encode_frame

__all__ = ["EspeakProcess", "EspeakProcessLost", "Reading"]

_CLOSE_WAIT_S = 1.0


class EspeakProcessLost(Exception):
    """The child ended (``reason`` "crash": a signal, an exit, a broken frame) or did not answer
    before the deadline (``reason`` "hang": it has been killed)."""

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(f"eSpeak NG process {detail}")
        self.reason = reason


@dataclass(frozen=True, slots=True)
class Reading:
    """One answer: each text's phonemes (None: the process has no voice for the code asked), and the
    voices it has chosen since it started (each leaks a little inside eSpeak)."""

    phonemes: Optional[list[tuple[str, ...]]]
    voice_changes: int


class EspeakProcess:
    """``python -P api/text/espeak.py`` with pipes for stdin/stdout; stderr is the gateway's."""

    def __init__(self, library_path: Optional[str] = None, piece: Optional[int] = None,
                 start_timeout_s: float = 30.0) -> None:
        argv = [sys.executable, "-P", espeak.__file__, library_path or "", str(piece) if piece else ""]
        try:
            # stderr goes to a file, kept for the log line of a loss ("*** buffer overflow detected
            # ***") rather than interleaved with the gateway's structured lines; not to a pipe:
            # eSpeak writes a line each time it chooses a voice whose dictionary it lacks ("kaa"),
            # and a pipe nobody reads fills and stalls it. The recycle bounds the file (~2 MB).
            self._errors = tempfile.TemporaryFile()
            self._proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                          stderr=self._errors, close_fds=True)
        except OSError as exc:
            raise EspeakUnavailable(f"the eSpeak NG process did not start ({argv[0]}): {exc}") from exc
        assert self._proc.stdin is not None and self._proc.stdout is not None
        self._requests = self._proc.stdin.fileno()
        self._replies = self._proc.stdout.fileno()
        os.set_blocking(self._requests, False)  # a stuck child must not block the gateway's write
        try:
            hello = self._receive(time.monotonic() + start_timeout_s)
        except EspeakProcessLost as exc:
            self.close()
            raise EspeakUnavailable(f"{exc} while starting") from exc
        if "error" in hello:
            self.close()
            raise EspeakUnavailable(str(hello["error"]))
        self.voices: frozenset[str] = frozenset(str(v) for v in hello.get("voices", ()))

    @property
    def pid(self) -> int:
        return self._proc.pid

    def read(self, voice: str, texts: list[str], timeout_s: float) -> Reading:
        """Each text's phonemes read in ``voice`` (an eSpeak language code); EspeakProcessLost if the
        process ends or does not answer within ``timeout_s``."""
        deadline = time.monotonic() + timeout_s
        self._send(encode_frame({"voice": voice, "texts": texts}), deadline)
        reply = self._receive(deadline)
        changes = int(reply.get("voice_changes", 0))
        if "error" in reply:
            return Reading(None, changes)
        return Reading([tuple(p) for p in reply["phonemes"]], changes)

    def close(self) -> None:
        """End the process: stdin closes (it exits), or it is killed after a second."""
        for stream in (self._proc.stdin, self._proc.stdout, self._errors):
            try:
                stream.close()  # type: ignore[union-attr]
            except OSError:
                pass
        try:
            self._proc.wait(_CLOSE_WAIT_S)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            self._proc.wait()

    # --- pipes ---------------------------------------------------------------------------------

    def _lost(self, reason: str, detail: str) -> EspeakProcessLost:
        if reason == "hang":
            self._proc.kill()
        try:
            code = self._proc.wait(_CLOSE_WAIT_S)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            code = self._proc.wait()
        how = f"was killed by signal {-code}" if code < 0 else f"exited with {code}"
        said = self._last_error_line()
        return EspeakProcessLost(reason, f"(pid {self._proc.pid}) {detail}; it {how}" + (f": {said}" if said else ""))

    def _last_error_line(self) -> str:
        """The last line the child wrote to stderr (libc's "*** buffer overflow detected ***")."""
        try:
            size = self._errors.seek(0, os.SEEK_END)
            self._errors.seek(max(0, size - 4096))
            said = self._errors.read()
        except (OSError, ValueError):
            return ""
        lines = said.decode("utf-8", errors="replace").strip().splitlines()
        return lines[-1].strip()[:200] if lines else ""

    def _send(self, data: bytes, deadline: float) -> None:
        view = memoryview(data)
        while view:
            if not self._wait(self._requests, deadline, writing=True):
                raise self._lost("hang", "took no request in time")
            try:
                view = view[os.write(self._requests, view):]
            except BlockingIOError:
                continue
            except OSError as exc:  # EPIPE: it has ended
                raise self._lost("crash", f"ended before taking a request ({exc.strerror})") from None

    def _receive(self, deadline: float) -> dict[str, Any]:
        (size,) = espeak.HEADER.unpack(self._receive_exactly(espeak.HEADER.size, deadline))
        if size > espeak.MAX_FRAME:
            raise self._lost("crash", f"sent a broken frame ({size} bytes)")
        try:
            return decode_frame(self._receive_exactly(size, deadline))
        except ValueError as exc:  # msgpack's errors are ValueErrors
            raise self._lost("crash", f"sent a broken frame ({exc})") from None

    def _receive_exactly(self, size: int, deadline: float) -> bytes:
        chunks: list[bytes] = []
        left = size
        while left:
            if not self._wait(self._replies, deadline, writing=False):
                raise self._lost("hang", "did not answer in time")
            chunk = os.read(self._replies, left)
            if not chunk:
                raise self._lost("crash", "ended without answering")
            chunks.append(chunk)
            left -= len(chunk)
        return b"".join(chunks)

    @staticmethod
    def _wait(fd: int, deadline: float, writing: bool) -> bool:
        left = deadline - time.monotonic()
        if left <= 0:
            return False
        poller = select.poll()  # not select(): a busy gateway holds descriptors past FD_SETSIZE
        poller.register(fd, select.POLLOUT if writing else select.POLLIN)
        return bool(poller.poll(left * 1000))
