"""Codec worker: NanoCodec codes <-> 22.05 kHz PCM, streaming and batched; no HTTP.

Importing this package is cheap: NeMo is imported only when a NeMo codec is built or loaded;
``load_codec(..., impl="torch")`` (codec_worker.torchcodec) decodes without NeMo at all.
"""

from codec_worker.batching import BatchedDecodeStream, BatchingCodecDecoder, NanoCodecEncoder
from codec_worker.errors import (
    CodecClosedError,
    CodecError,
    CodecFormatError,
    CodecLoadError,
    CodecNotFoundError,
    DecodeError,
    EncodeUnavailableError,
    InvalidAudioError,
    InvalidCodesError,
)
from codec_worker.interface import CodecDecoder, CodecEncoder, DecodeStream
from codec_worker.nanocodec import DEFAULT_HF_REPO, NanoCodec, decoder_left_context_frames, load_codec
from codec_worker.schedule import DEFAULT_SCHEDULE, ChunkSchedule
from codec_worker.streaming import DecodeWindow, StreamingDecoder, StreamingDecodeState, decode_windows
from codec_worker.tiny import write_random_codec
from codec_worker.torchcodec import TorchNanoCodec, load_torch_decoder

__all__ = [
    "BatchedDecodeStream",
    "BatchingCodecDecoder",
    "ChunkSchedule",
    "CodecClosedError",
    "CodecDecoder",
    "CodecEncoder",
    "CodecError",
    "CodecFormatError",
    "CodecLoadError",
    "CodecNotFoundError",
    "DEFAULT_HF_REPO",
    "DEFAULT_SCHEDULE",
    "DecodeError",
    "DecodeStream",
    "EncodeUnavailableError",
    "DecodeWindow",
    "InvalidAudioError",
    "InvalidCodesError",
    "NanoCodec",
    "NanoCodecEncoder",
    "StreamingDecodeState",
    "StreamingDecoder",
    "TorchNanoCodec",
    "decode_windows",
    "decoder_left_context_frames",
    "load_codec",
    "load_torch_decoder",
    "write_random_codec",
]
