"""Exact streaming decode: cut an utterance's frames into decode windows whose audio concatenates
to the one-shot decode.

    state = StreamingDecodeState(codec.receptive_field_frames, schedule="2,4,8,32")
    windows = state.push(codes)          # codes [32, T] -> windows ready to decode (maybe none)
    pcm = decode_windows(codec, windows) # one batched decoder call -> list of pcm [N] float32
    windows = state.finish()             # flush the rest

Chunk cadence (``codec_worker.schedule``): chunk ``i`` holds ``schedule.size(i)`` frames, so the
boundaries are at s0, s0 + s1, ... and then every ``schedule.steady`` frames; ``finish()`` cuts the rest.
A push that crosses several boundaries yields one window per chunk, so windows stay small and
alike in width (good for batching, bounded memory) whatever the push size.

Exactness: the decoder is causal, so the audio of frames [start, end) only depends on frames
[start - L, end) with L = ``receptive_field_frames``. A chunk therefore decodes the window
``frames[max(0, start - L) : end]`` and drops the first ``(start - window_start) * samples_per_frame``
samples. The state keeps only the last L emitted frames as history.

Carried state (``decode_carried``): a codec that keeps each stream's conv tails between calls
(codec_worker.torchcodec.state) needs no context at all. Its streams cut windows with L = 0, and each
call decodes only new frames; what the windowed decode re-decodes as context, it remembers.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING, Sequence

import numpy as np
import torch

from codec_worker import fsq
from codec_worker.errors import CodecClosedError, InvalidCodesError
from codec_worker.schedule import DEFAULT_SCHEDULE, ChunkSchedule, ScheduleLike

if TYPE_CHECKING:
    from codec_worker.nanocodec import NanoCodec
    from codec_worker.torchcodec import TorchNanoCodec

logger = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class DecodeWindow:
    """One chunk to decode: ``codes`` [32, W] int64 = ``skip_frames`` context frames + the new ones."""

    codes: torch.Tensor  # [32, W] int64, on the CPU
    skip_frames: int  # leading context frames whose audio is dropped
    start_frame: int  # index in the utterance of the first new frame

    @property
    def width(self) -> int:
        """Frames decoded (context + new)."""
        return int(self.codes.shape[1])

    @property
    def num_frames(self) -> int:
        """New frames, whose audio this window yields."""
        return self.width - self.skip_frames


_CHANNEL_LIMITS = torch.tensor(fsq.channel_levels()).unsqueeze(-1)  # [32, 1]: codes of channel c are < this


def check_stream_codes(codes: object) -> torch.Tensor:
    """Validate pushed frames [32, T] (T may be 0); return them as CPU int64."""
    if not isinstance(codes, torch.Tensor):
        raise InvalidCodesError(f"expected codes as a torch.Tensor [32, T], got {type(codes).__name__}")
    if codes.dtype.is_floating_point or codes.dtype.is_complex or codes.dtype == torch.bool:
        raise InvalidCodesError(f"expected integer codes [32, T], got dtype {codes.dtype}")
    if codes.dim() != 2 or codes.shape[0] != fsq.NUM_CHANNELS:
        raise InvalidCodesError(f"expected codes [{fsq.NUM_CHANNELS}, T], got shape {tuple(codes.shape)}")
    codes = codes.detach().to("cpu", torch.long)
    # runs on the event loop for every frame of every stream: two small ops on the good path
    if codes.numel() and (int(codes.min()) < 0 or bool((codes >= _CHANNEL_LIMITS).any())):
        bad = (codes < 0) | (codes >= _CHANNEL_LIMITS)
        channel, frame = (int(i) for i in bad.nonzero()[0])
        raise InvalidCodesError(
            f"code {int(codes[channel, frame])} out of range [0, {fsq.channel_levels()[channel]}) "
            f"at channel {channel}, frame {frame} of the push (shape {tuple(codes.shape)})"
        )
    return codes


class StreamingDecodeState:
    """Frame buffer of one utterance that cuts exact decode windows on the chunk cadence.

    Holds at most ``receptive_field_frames`` already-decoded frames plus the frames not yet cut.
    Not thread-safe; one owner at a time.
    """

    def __init__(self, receptive_field_frames: int, schedule: ScheduleLike = DEFAULT_SCHEDULE) -> None:
        if not isinstance(receptive_field_frames, int) or receptive_field_frames < 0:
            raise ValueError(f"receptive_field_frames must be an int >= 0, got {receptive_field_frames!r}")
        self.receptive_field_frames = receptive_field_frames
        self.schedule = ChunkSchedule.of(schedule)
        self._frames = torch.zeros(fsq.NUM_CHANNELS, 0, dtype=torch.long)  # [32, context + pending]
        self._context = 0  # leading frames of _frames already cut
        self._emitted = 0  # frames cut so far (utterance index of the first pending frame)
        self._chunks = 0  # chunks cut on the cadence so far (finish() does not count)
        self._finished = False

    # ---- introspection -----------------------------------------------------------------

    @property
    def emitted_frames(self) -> int:
        return self._emitted

    @property
    def pending_frames(self) -> int:
        return int(self._frames.shape[1]) - self._context

    @property
    def history_frames(self) -> int:
        return self._context

    @property
    def finished(self) -> bool:
        return self._finished

    # ---- cutting -----------------------------------------------------------------------

    def push(self, codes: torch.Tensor) -> list[DecodeWindow]:
        """Add frames [32, T]; return the windows of every chunk boundary now reached."""
        if self._finished:
            raise CodecClosedError("stream is finished; open a new one")
        codes = check_stream_codes(codes)
        if codes.shape[1]:
            self._frames = torch.cat([self._frames, codes], dim=1)
        windows = []
        total = self._emitted + self.pending_frames
        while (boundary := self._emitted + self.schedule.size(self._chunks)) <= total:
            windows.append(self._cut(boundary))
            self._chunks += 1
        return windows

    def finish(self) -> list[DecodeWindow]:
        """Cut whatever is still pending (at most one window); the state is then finished."""
        if self._finished:
            raise CodecClosedError("stream is already finished")
        windows = [self._cut(self._emitted + self.pending_frames)] if self.pending_frames else []
        self._finished = True
        self._frames = self._frames[:, :0]
        self._context = 0
        return windows

    def discard(self) -> None:
        """Drop every buffered frame and finish (used on abort)."""
        self._finished = True
        self._frames = self._frames[:, :0]
        self._context = 0

    def _cut(self, end: int) -> DecodeWindow:
        """Window for frames [emitted, end); keep the last L frames before ``end`` as history."""
        base = self._emitted - self._context  # utterance index of _frames[:, 0]
        window = DecodeWindow(
            codes=self._frames[:, : end - base].clone(),
            skip_frames=self._context,
            start_frame=self._emitted,
        )
        keep_from = max(end - self.receptive_field_frames, 0) - base
        self._frames = self._frames[:, keep_from:]
        self._context = end - base - keep_from
        self._emitted = end
        return window


def decode_windows(codec: NanoCodec, windows: Sequence[DecodeWindow]) -> list[np.ndarray]:
    """Decode windows in one decoder call; return each window's new audio [num_frames*spf] float32.

    Windows are RIGHT-padded to the widest: the decoder is causal, so padding after a window
    cannot change its samples (left padding would, since zero latents are not the convs' zero
    padding). Lengths are passed, so the padded tail is masked as well.
    """
    if not windows:
        return []
    spf = codec.samples_per_frame
    widths = [window.width for window in windows]
    codes = torch.zeros(len(windows), fsq.NUM_CHANNELS, max(widths), dtype=torch.long)
    for row, window in enumerate(windows):
        codes[row, :, : window.width] = window.codes
    # [B, 32, W] -> [B, W * spf]
    audio = codec.decode_codes(codes, lengths=widths).cpu().numpy()
    return [
        np.ascontiguousarray(audio[row, window.skip_frames * spf : window.width * spf])
        for row, window in enumerate(windows)
    ]


def decode_carried(codec: TorchNanoCodec, slots: Sequence[int],
                   runs: Sequence[Sequence[DecodeWindow]]) -> list[list[np.ndarray]]:
    """Decode each stream's next windows in one stateful decoder call; return each window's audio.

    ``runs[i]`` are consecutive windows of the stream holding state slot ``slots[i]`` (cut with no
    context, in order): they decode as one row, right-padded like ``decode_windows``. A row whose
    first window starts its utterance starts from zero state.
    """
    if not runs:
        return []
    spf = codec.samples_per_frame
    lengths = [sum(window.num_frames for window in run) for run in runs]
    codes = torch.zeros(len(runs), fsq.NUM_CHANNELS, max(lengths), dtype=torch.long)
    for row, run in enumerate(runs):
        if any(window.skip_frames for window in run):
            raise ValueError("windows decoded with carried state hold no context frames")
        codes[row, :, : lengths[row]] = torch.cat([window.codes for window in run], dim=1)
    fresh = [run[0].start_frame == 0 for run in runs]
    audio = codec.decode_stateful(codes, lengths, slots, fresh).cpu().numpy()  # [B, T * spf]
    pieces = []
    for row, run in enumerate(runs):
        offsets = np.cumsum([0] + [window.num_frames * spf for window in run])
        pieces.append([np.ascontiguousarray(audio[row, a:b]) for a, b in zip(offsets, offsets[1:])])
    return pieces


class StreamingDecoder:
    """Synchronous streaming decode of one utterance on a codec (no batching across streams).

    ``push(codes [32, T]) -> pcm [N] float32`` and ``finish() -> pcm``; the concatenation of all
    returned arrays equals ``codec.decode_codes`` of all frames.
    """

    def __init__(self, codec: NanoCodec, schedule: ScheduleLike = DEFAULT_SCHEDULE) -> None:
        self._codec = codec
        self._state = StreamingDecodeState(codec.receptive_field_frames, schedule)

    @property
    def state(self) -> StreamingDecodeState:
        return self._state

    def push(self, codes: torch.Tensor) -> np.ndarray:
        return _join(decode_windows(self._codec, self._state.push(codes)))

    def finish(self) -> np.ndarray:
        return _join(decode_windows(self._codec, self._state.finish()))


def _join(pieces: list[np.ndarray]) -> np.ndarray:
    if not pieces:
        return np.zeros(0, dtype=np.float32)
    return pieces[0] if len(pieces) == 1 else np.concatenate(pieces)


__all__ = ["DecodeWindow", "StreamingDecodeState", "StreamingDecoder", "check_stream_codes", "decode_carried",
           "decode_windows"]
