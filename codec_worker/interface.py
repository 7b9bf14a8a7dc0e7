"""What the rest of the service sees of the codec: decode streams of frames to PCM, encode clips.

    codec = NanoCodec.load(path_or_hf_id, device="cpu")      # codec_worker/nanocodec.py
    decoder = BatchingCodecDecoder(codec, ...)               # codec_worker/batching.py
    stream = decoder.open_stream()
    pcm = await stream.push(codes)      # codes [32, T] int64 -> pcm [N] float32 @ sample_rate_hz
    pcm = await stream.finish()         # whatever is still buffered
    await stream.aclose()

PCM is mono float32 in [-1, 1] at ``sample_rate_hz`` (22050), ``samples_per_frame`` (1024)
samples per frame. Concatenating every array a stream returns equals a one-shot decode of all its
frames (max abs difference <= 1e-5 in float32) for any chunk schedule.
"""

from __future__ import annotations

import abc
from dataclasses import dataclass

import numpy as np
import torch

from codec_worker.schedule import ChunkSchedule


@dataclass(frozen=True, slots=True)
class CodecDescription:
    """The decoder that makes the audio, as start-up left it (for logs and monitoring): each speed-up
    is on only where it was asked for, applies to this decoder and passed its check at start."""

    impl: str  # "torch" (the torch decoder) | "nemo" (NeMo's)
    device: str
    dtype: str
    carry_state: bool  # streams keep the decoder's conv state between chunks (GEPARD_CODEC_CARRY_STATE)
    fused_activations: bool  # the snake activations run as Triton kernels (GEPARD_CODEC_FUSED_ACTIVATIONS)
    compiled: bool  # through torch.compile (GEPARD_CODEC_COMPILE)
    cuda_graphs: bool  # decodes replay CUDA graphs (GEPARD_CODEC_CUDA_GRAPHS)


class DecodeStream(abc.ABC):
    """Incremental decode of one utterance. Not safe to use from several tasks at once."""

    @abc.abstractmethod
    async def push(self, codes: torch.Tensor) -> np.ndarray:
        """Add frames [32, T]; return the PCM that became ready (possibly empty)."""

    @abc.abstractmethod
    async def finish(self) -> np.ndarray:
        """Decode every frame still buffered and return its PCM; the stream is then done."""

    @abc.abstractmethod
    async def aclose(self) -> None:
        """Release the stream's resources (also after an abort)."""


class CodecDecoder(abc.ABC):
    sample_rate_hz: int
    samples_per_frame: int
    schedule: ChunkSchedule  # where every stream's chunks end: a producer need not hand frames over sooner

    @abc.abstractmethod
    def open_stream(self) -> DecodeStream: ...

    @abc.abstractmethod
    async def aclose(self) -> None: ...


class CodecEncoder(abc.ABC):
    sample_rate_hz: int

    @abc.abstractmethod
    async def encode(self, audio: np.ndarray) -> torch.Tensor:
        """Mono float32 audio at ``sample_rate_hz`` -> unfolded codes [32, T] int64."""
