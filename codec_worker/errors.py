"""Errors raised by the codec worker, each saying what the caller should do.

    CodecError                    root: anything that went wrong in codec_worker
    ├── CodecLoadError            the codec checkpoint cannot be used (fix the file or GEPARD_CODEC)
    │   ├── CodecNotFoundError    the path or Hugging Face repo does not resolve to a checkpoint
    │   └── CodecFormatError      the checkpoint is there but malformed: not a tar, a missing
    │                             file, a bad config, a missing or mis-shaped tensor
    ├── InvalidCodesError         codes have the wrong type, shape or range (this request only);
    │                             also a ValueError
    ├── InvalidAudioError         audio to encode has the wrong type, shape or values (this
    │                             request only); also a ValueError
    ├── DecodeError               the decoder itself failed on a batch (retry or fail the request)
    ├── EncodeUnavailableError    this codec decodes only (the torch decoder, loaded without NeMo):
    │                             encoding clips for voice cloning needs NeMo
    ├── DecodeUnavailableError    this codec encodes only: its decoder was released, since the torch
    │                             decoder of the same checkpoint decodes beside it
    └── CodecClosedError          the stream or decoder was closed; open a new one
"""

from __future__ import annotations


class CodecError(Exception):
    """Root of every error raised by codec_worker."""


class CodecLoadError(CodecError):
    """The codec checkpoint cannot be loaded."""


class CodecNotFoundError(CodecLoadError):
    """The source does not resolve to a checkpoint (missing path, offline hub, unknown repo)."""


class CodecFormatError(CodecLoadError):
    """The checkpoint exists but its contents do not match the expected NanoCodec layout."""


class InvalidCodesError(CodecError, ValueError):
    """Codes passed to a decode have the wrong type, shape or range."""


class InvalidAudioError(CodecError, ValueError):
    """Audio passed to an encode has the wrong type, shape or values."""


class DecodeError(CodecError):
    """The decoder failed while decoding a batch of windows."""


class EncodeUnavailableError(CodecError):
    """The codec was loaded decode-only (torch decoder, no NeMo): it cannot encode audio."""


class DecodeUnavailableError(CodecError):
    """The codec's decoder was released (NanoCodec.release_decoder): it only encodes now."""


class CodecClosedError(CodecError):
    """The stream or the decoder has been closed."""


__all__ = [
    "CodecClosedError",
    "CodecError",
    "CodecFormatError",
    "CodecLoadError",
    "CodecNotFoundError",
    "DecodeError",
    "EncodeUnavailableError",
    "InvalidAudioError",
    "InvalidCodesError",
]
