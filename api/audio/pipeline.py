"""``AudioSink``: one context's audio path, codec PCM -> resample -> encode -> container bytes.

One sink per request (HTTP) or per WebSocket context; it owns a ``StreamingResampler`` and a
``ContainerWriter`` and is not shared. Usage::

    sink = AudioSink(OutputFormat.parse("raw", "pcm_s16le", 16000))
    for pcm in codec_chunks:            # pcm  # [T] float32 @ 22050 Hz
        data = sink.push(pcm)           # bytes at 16 kHz, whole samples (may be b"")
        if data: send(data)
    send(sink.finish())                 # resampler tail + container tail (mp3 flush, wav pad)

A request of several segments (sentences, each one engine request) calls ``end_segment()``
after each: it releases the resampler's look-ahead (the segment's last few ms) at once and starts
a fresh resampler for the next segment, under the same container writer (one WAV header, one MP3
or Opus stream). So a segment's audio never waits for the next segment, and every route makes the
same samples for the same segments: each segment is resampled on its own, as a WebSocket context
must (its segment's audio all goes out before the segment's flush_done, and the next text may be
a long time coming).

The resampled audio is clipped to [-1, 1] before it is encoded: the resampling filter overshoots
near full-scale peaks (a few percent at most), which every integer encoding clips anyway and a
float client would otherwise receive (``int16(x * 32767)`` wraps there).

For raw and wav every returned piece holds whole samples, so each can be sent as its own
base64 ``chunk`` event. ``push_units`` / ``finish_units`` return the same audio as a list of
pieces that must each stay whole in one chunk event (raw Opus: one packet each). Pieces are CPU
work (soxr, LAME, libopus): run them in a thread from async code.

``AudioSink.with_writer(writer, out_rate_hz)`` runs the same path into any ``ContainerWriter``
(the OpenAI route's formats, which are not Cartesia ``output_format`` values).
"""

from __future__ import annotations

import numpy as np

from api.audio.containers import ContainerWriter, make_writer
from api.audio.formats import OutputFormat
from api.audio.resampling import CODEC_SAMPLE_RATE_HZ, StreamingResampler

__all__ = ["AudioSink"]


class AudioSink:
    """Resample -> encode -> container for one context.

    num_input_samples: the total number of input (codec-rate) samples, when known before the
    first push; only WAV uses it, to write exact RIFF sizes (otherwise the 0xFFFFFFFF streaming
    convention). Exact sizes are derived as ``round(N * out / in)``, the resampler's output length;
    if the pushed audio turns out longer it is cut there, if shorter it is padded with silence.
    """

    def __init__(
        self,
        fmt: OutputFormat | None,
        in_rate_hz: int = CODEC_SAMPLE_RATE_HZ,
        num_input_samples: int | None = None,
        *,
        writer: ContainerWriter | None = None,
        out_rate_hz: int | None = None,
    ) -> None:
        self.format = fmt
        out_rate = fmt.sample_rate_hz if fmt is not None else out_rate_hz
        if out_rate is None or (fmt is None) == (writer is None):
            raise ValueError("pass an output format, or a writer with its out_rate_hz")
        self._in_rate_hz, self._out_rate_hz = in_rate_hz, out_rate
        self._resampler = StreamingResampler(out_rate, in_rate_hz=in_rate_hz)
        self._segments_in = 0  # input / output samples of the segments ended so far (end_segment)
        self._segments_out = 0
        num_out = None
        if num_input_samples is not None and fmt is not None:
            num_out = round(num_input_samples * out_rate / in_rate_hz)
        self._writer: ContainerWriter = writer if writer is not None else make_writer(fmt, num_out)
        self._declared_out = num_out  # output samples promised by a WAV header, if any
        self._written_out = 0
        self._finished = False

    @classmethod
    def with_writer(cls, writer: ContainerWriter, out_rate_hz: int, in_rate_hz: int = CODEC_SAMPLE_RATE_HZ) -> "AudioSink":
        """A sink that resamples to ``out_rate_hz`` and hands the audio to ``writer``."""
        return cls(None, in_rate_hz, writer=writer, out_rate_hz=out_rate_hz)

    @property
    def samples_in(self) -> int:
        """Input samples pushed so far (codec rate); ``samples_in / in_rate_hz`` is seconds."""
        return self._segments_in + self._resampler.samples_in

    @property
    def samples_out(self) -> int:
        """Output-rate samples produced so far."""
        return self._segments_out + self._resampler.samples_out

    def push(self, pcm: np.ndarray) -> bytes:
        """``pcm  # [T] float32 @ in_rate_hz`` -> encoded bytes ready now (possibly b"")."""
        return b"".join(self.push_units(pcm))

    def finish(self) -> bytes:
        """Everything still held back; the sink is closed afterwards."""
        return b"".join(self.finish_units())

    def push_units(self, pcm: np.ndarray) -> list[bytes]:
        """Like ``push``, as pieces that must each stay whole in one chunk event."""
        if self._finished:
            raise RuntimeError("audio sink is finished; create a new one per context")
        return self._write(self._resampler.process(pcm))

    def end_segment(self) -> bytes:
        """The end of one segment's audio: the resampler's held-back tail, encoded (see the module
        docstring); the writer stays open and the next push starts the next segment afresh."""
        return b"".join(self.end_segment_units())

    def end_segment_units(self) -> list[bytes]:
        """Like ``end_segment``, as pieces that must each stay whole in one chunk event."""
        if self._finished:
            raise RuntimeError("audio sink is finished; create a new one per context")
        if self._resampler.samples_in == 0:  # nothing since the last segment's end
            return []
        units = self._write(self._resampler.flush())
        self._segments_in += self._resampler.samples_in
        self._segments_out += self._resampler.samples_out
        self._resampler = StreamingResampler(self._out_rate_hz, in_rate_hz=self._in_rate_hz)
        return units

    def finish_units(self, end_writer: bool = True) -> list[bytes]:
        """Like ``finish``, as pieces that must each stay whole in one chunk event.

        end_writer=False releases the resampler's tail into the writer but leaves the writer open,
        for a writer that outlives this sink (raw Opus on a WebSocket: one encoder per flush
        section, fed by one sink per segment); its owner finishes it."""
        if self._finished:
            raise RuntimeError("audio sink is already finished")
        self._finished = True
        units = self._write(self._resampler.flush())
        if self._declared_out is not None and self._written_out < self._declared_out:
            # Fewer samples than announced (the caller's count was off): pad with silence so the
            # header stays true.
            units += self._write(np.zeros(self._declared_out - self._written_out, np.float32))
        return units + self._writer.finish_units() if end_writer else units

    def _write(self, out: np.ndarray) -> list[bytes]:
        # the filter overshoots near full-scale peaks: keep the nominal range (see the docstring)
        out = np.clip(out, -1.0, 1.0)
        if self._declared_out is not None:
            out = out[: max(self._declared_out - self._written_out, 0)]  # never past the header
        self._written_out += len(out)
        return self._writer.write_units(out)
