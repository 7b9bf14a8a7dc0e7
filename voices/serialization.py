"""msgpack encoding of voices and their tensors; no pickle anywhere.

A tensor is stored as ``{"dtype": "float32", "shape": [8, 1024], "data": <raw little-endian
bytes>}``. A voice is its ``Voice.to_dict()``. Backends keep the two apart so that listing voices
never moves the (tens of KiB) tensors:

    encode_voice(voice) -> bytes            decode_voice(bytes) -> Voice
    encode_tensors(record) -> bytes         decode_record(voice, bytes) -> VoiceRecord
    encode_record(record) -> bytes          (both in one blob, for export and tests)

Every blob carries a format version ``"v"``; readers reject versions they do not know.
"""

from __future__ import annotations

import math
import sys
from typing import Any, Optional

import msgpack
import torch

from voices.errors import VoiceStoreError
from voices.models import Voice, VoiceRecord

FORMAT_VERSION = 1

_DTYPES: dict[str, torch.dtype] = {
    "float32": torch.float32,
    "float16": torch.float16,
    "bfloat16": torch.bfloat16,
    "float64": torch.float64,
    "int8": torch.int8,
    "uint8": torch.uint8,
    "int16": torch.int16,
    "int32": torch.int32,
    "int64": torch.int64,
}
_DTYPE_NAMES: dict[torch.dtype, str] = {v: k for k, v in _DTYPES.items()}

if sys.byteorder != "little":  # raw tensor bytes are written in native (little-endian) order
    raise ImportError("voices.serialization assumes a little-endian machine")


class CorruptRecordError(VoiceStoreError):
    """A stored blob cannot be decoded (truncated, wrong version, bad dtype)."""


def tensor_to_dict(tensor: torch.Tensor) -> dict[str, Any]:
    """Tensor -> {"dtype", "shape", "data"} with the raw bytes of a contiguous CPU copy."""
    name = _DTYPE_NAMES.get(tensor.dtype)
    if name is None:
        raise VoiceStoreError(f"cannot store a tensor of dtype {tensor.dtype}; supported: {sorted(_DTYPES)}")
    flat = tensor.detach().to("cpu").contiguous().reshape(-1)
    data = flat.view(torch.uint8).numpy().tobytes() if flat.numel() else b""
    return {"dtype": name, "shape": list(tensor.shape), "data": data}


def tensor_from_dict(obj: Any) -> torch.Tensor:
    """Inverse of ``tensor_to_dict``; checks that the byte count matches dtype and shape."""
    try:
        dtype = _DTYPES[obj["dtype"]]
        shape = [int(n) for n in obj["shape"]]
        data = obj["data"]
    except (KeyError, TypeError, ValueError) as exc:
        raise CorruptRecordError(f"malformed tensor entry: {exc!r}") from exc
    expected = math.prod(shape) * torch.empty((), dtype=dtype).element_size()
    if not isinstance(data, (bytes, bytearray)) or len(data) != expected:
        got = len(data) if isinstance(data, (bytes, bytearray)) else type(data).__name__
        raise CorruptRecordError(f"tensor {obj['dtype']}{shape} needs {expected} bytes, got {got}")
    if expected == 0:
        return torch.empty(shape, dtype=dtype)
    return torch.frombuffer(bytearray(data), dtype=dtype).reshape(shape)


def _pack(obj: dict[str, Any]) -> bytes:
    return msgpack.packb({"v": FORMAT_VERSION, **obj}, use_bin_type=True)


def _unpack(blob: bytes, what: str) -> dict[str, Any]:
    try:
        obj = msgpack.unpackb(blob, raw=False)
    except (ValueError, msgpack.UnpackException) as exc:
        raise CorruptRecordError(f"stored {what} is not valid msgpack: {exc}") from exc
    if not isinstance(obj, dict) or obj.get("v") != FORMAT_VERSION:
        version = obj.get("v") if isinstance(obj, dict) else None
        raise CorruptRecordError(f"stored {what} has format version {version!r}; this build reads {FORMAT_VERSION}")
    return obj


def encode_voice(voice: Voice) -> bytes:
    return _pack({"voice": voice.to_dict()})


def decode_voice(blob: bytes) -> Voice:
    obj = _unpack(blob, "voice")
    try:
        return Voice.from_dict(obj["voice"])
    except (KeyError, TypeError) as exc:
        raise CorruptRecordError(f"stored voice is missing fields: {exc!r}") from exc


def encode_tensors(record: VoiceRecord) -> bytes:
    """The record's prefix and (optional) reference codes."""
    ref = None if record.ref_codes is None else tensor_to_dict(record.ref_codes)
    return _pack({"prefix": tensor_to_dict(record.prefix), "ref_codes": ref})


def decode_record(voice: Voice, tensors_blob: bytes) -> VoiceRecord:
    obj = _unpack(tensors_blob, f"tensors of voice {voice.id!r}")
    ref: Optional[dict[str, Any]] = obj.get("ref_codes")
    return VoiceRecord(
        voice=voice,
        prefix=tensor_from_dict(obj.get("prefix")),
        ref_codes=None if ref is None else tensor_from_dict(ref),
    )


def encode_record(record: VoiceRecord) -> bytes:
    ref = None if record.ref_codes is None else tensor_to_dict(record.ref_codes)
    return _pack({"voice": record.voice.to_dict(), "prefix": tensor_to_dict(record.prefix), "ref_codes": ref})


def decode_record_blob(blob: bytes) -> VoiceRecord:
    obj = _unpack(blob, "record")
    try:
        voice = Voice.from_dict(obj["voice"])
    except (KeyError, TypeError) as exc:
        raise CorruptRecordError(f"stored record is missing fields: {exc!r}") from exc
    ref = obj.get("ref_codes")
    return VoiceRecord(voice=voice, prefix=tensor_from_dict(obj.get("prefix")),
                       ref_codes=None if ref is None else tensor_from_dict(ref))
