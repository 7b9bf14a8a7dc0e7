"""libsndfile's decode of an uploaded reference clip, run as a child process of the gateway.

An upload is bytes from a client, and libsndfile (with the mpg123, FLAC, Ogg and Vorbis code it
carries) is C that parses them: a crash there, on a malformed or hostile file, would end the
gateway and every stream on it. So the gateway never opens an upload itself:
voices/audio_input.py starts ``python -P voices/clip_decoder.py`` for each clip, and a crash costs
that clip a 400. This module imports only the standard library, numpy and soundfile (the voices
package would pull in torch: seconds and hundreds of MB for each clip).

The exchange, on the child's stdin and stdout:

    parent -> child   8-byte big-endian length, then the clip's bytes
    child -> parent   one JSON line: {"rate": Hz, "channels": n, "frames": declared (0: unknown)}
                      or {"error": libsndfile's reason}
    parent -> child   one line: the number of frames to read (the parent checks the header
                      against its decode bounds first); or stdin closes: nothing is read
    child -> parent   one JSON line {"frames": read} then that many frames x channels float32
                      samples (native byte order), or {"error": reason}
"""

from __future__ import annotations

import io
import json
import signal
import sys
from typing import Any, BinaryIO

import soundfile as sf

__all__ = ["LENGTH_BYTES"]

LENGTH_BYTES = 8
# what soundfile raises on data it cannot read (LibsndfileError is a RuntimeError)
_DECODE_ERRORS = (sf.LibsndfileError, RuntimeError, ValueError, TypeError, EOFError)


def _reply(out: BinaryIO, message: dict[str, Any], payload: bytes = b"") -> None:
    out.write(json.dumps(message).encode() + b"\n" + payload)
    out.flush()


def _reason(exc: BaseException) -> str:
    return getattr(exc, "error_string", None) or str(exc)  # without "Error opening <BytesIO...>"


def main() -> int:
    # a signal to the whole process group (Ctrl-C, systemd's KillMode=control-group) is the gateway's:
    # it drains, and lets the clones in flight finish; this process ends with its clip (or is killed)
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, signal.SIG_IGN)
    requests, replies = sys.stdin.buffer, sys.stdout.buffer
    size = int.from_bytes(requests.read(LENGTH_BYTES), "big")
    data = requests.read(size)
    try:
        clip = sf.SoundFile(io.BytesIO(data))
    except _DECODE_ERRORS as exc:
        _reply(replies, {"error": _reason(exc)})
        return 1
    with clip:
        _reply(replies, {"rate": int(clip.samplerate), "channels": int(clip.channels), "frames": int(clip.frames)})
        wanted = requests.readline()
        if not wanted.strip():
            return 0  # the parent refused the header
        try:
            pcm = clip.read(frames=int(wanted), dtype="float32", always_2d=True)
        except _DECODE_ERRORS as exc:
            _reply(replies, {"error": _reason(exc)})
            return 1
    _reply(replies, {"frames": int(pcm.shape[0])}, pcm.tobytes())
    return 0


if __name__ == "__main__":
    sys.exit(main())
