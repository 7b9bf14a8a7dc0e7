"""voices/models.py and voices/serialization.py: validation, API shapes, msgpack round trips."""

from __future__ import annotations

import msgpack
import pytest
import torch

from voices.errors import InvalidVoiceError
from voices.models import Voice, VoicePrompt, VoiceRecord, normalize_created_at
from voices.serialization import (
    CorruptRecordError,
    decode_record,
    decode_record_blob,
    decode_voice,
    encode_record,
    encode_tensors,
    encode_voice,
    tensor_from_dict,
    tensor_to_dict,
)


def voice(**kw) -> Voice:
    return Voice(**{"id": "v1", "name": "Anna", "language": "en", "created_at": "2026-08-14T10:00:00Z", **kw})


@pytest.mark.parametrize("field, value, message", [
    ("id", "", "voice id must be a non-empty string"),
    ("id", "has space", "voice id must be a non-empty string without spaces"),
    ("name", "", "voice name must be a non-empty string"),
    ("name", "x" * 257, "voice name is 257 characters; the limit is 256"),
    ("tagline", "t" * 257, "tagline is 257 characters; the limit is 256"),
    ("language", "", "language must be a non-empty string"),
    ("gender", "male", "gender must be one of"),
    ("access", "shared", "access must be one of"),
    ("visibility", "team", "visibility must be one of"),
    ("created_at", "yesterday", "created_at='yesterday' is not an ISO-8601 timestamp"),
    ("locales", [{"lang": "en"}], "locales entries must be"),
])
def test_invalid_fields_are_named(field: str, value, message: str) -> None:
    with pytest.raises(InvalidVoiceError, match=message):
        voice(**{field: value})


def test_api_dicts_have_the_cartesia_shapes() -> None:
    v = voice(gender="feminine", locales=[{"locale": "en-US", "is_native": False}], user_id="u-1")
    api = v.to_api_dict()
    assert api == {
        "id": "v1", "name": "Anna", "description": "", "language": "en", "created_at": "2026-08-14T10:00:00Z",
        "is_owner": True, "access": "private", "visibility": "owner", "tagline": "",
        "locales": [{"locale": "en-US", "is_native": False}], "gender": "feminine", "accent": None, "country": None,
    }
    assert set(v.to_metadata_dict()) == {"id", "access", "created_at", "description", "language", "name",
                                         "tagline", "user_id", "visibility"}
    assert v.to_metadata_dict()["user_id"] == "u-1"


def test_order_key_normalises_time_zones() -> None:
    assert normalize_created_at("2026-08-14T12:00:00+02:00") == "2026-08-14T10:00:00.000000Z"
    assert normalize_created_at("2026-08-14T10:00:00") == "2026-08-14T10:00:00.000000Z"  # naive = UTC
    early = voice(id="b", created_at="2026-08-14T12:00:00+02:00")
    late = voice(id="a", created_at="2026-08-14T10:00:00.000001Z")
    assert early.order_key < late.order_key


def test_voice_round_trips_through_msgpack() -> None:
    v = voice(gender="masculine", accent="american", country="US", tagline="t", builtin=True,
              model_fingerprint="fp", locales=[{"locale": "en-US", "is_native": True}])
    assert decode_voice(encode_voice(v)) == v


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16, torch.int16, torch.int64])
def test_tensors_round_trip_bit_exactly(dtype: torch.dtype) -> None:
    t = (torch.randn(8, 24) * 100).to(dtype)
    out = tensor_from_dict(tensor_to_dict(t))
    assert out.dtype == dtype and out.shape == t.shape and torch.equal(out, t)


def test_record_round_trips_and_blobs_contain_no_pickle() -> None:
    record = VoiceRecord(voice(), torch.randn(8, 16), torch.randint(0, 8, (40, 32), dtype=torch.int16))
    blob = encode_record(record)
    raw = msgpack.unpackb(blob)
    assert raw["prefix"]["dtype"] == "float32" and raw["prefix"]["shape"] == [8, 16]
    assert raw["ref_codes"]["shape"] == [40, 32] and raw["ref_codes"]["dtype"] == "int16"
    back = decode_record_blob(blob)
    assert back.voice == record.voice
    assert torch.equal(back.prefix, record.prefix) and torch.equal(back.ref_codes, record.ref_codes)
    split = decode_record(record.voice, encode_tensors(record))
    assert torch.equal(split.prefix, record.prefix)


def test_corrupt_blobs_are_reported() -> None:
    with pytest.raises(CorruptRecordError, match="not valid msgpack"):
        decode_voice(b"\xc1")
    with pytest.raises(CorruptRecordError, match="format version 99; this build reads 1"):
        decode_voice(msgpack.packb({"v": 99, "voice": {}}))
    bad = tensor_to_dict(torch.zeros(8, 4))
    bad["data"] = bad["data"][:-4]
    with pytest.raises(CorruptRecordError, match=r"tensor float32\[8, 4\] needs 128 bytes, got 124"):
        tensor_from_dict(bad)
    with pytest.raises(CorruptRecordError, match="malformed tensor entry"):
        tensor_from_dict({"dtype": "complex64", "shape": [1], "data": b""})


def test_prompt_and_record_check_shapes() -> None:
    with pytest.raises(InvalidVoiceError, match=r"expected prefix \[K, hidden\] float32, got \(8,\)"):
        VoicePrompt("v", torch.zeros(8), "fp")
    with pytest.raises(InvalidVoiceError, match="expected a floating prefix"):
        VoiceRecord(voice(), torch.zeros(8, 4, dtype=torch.int64))
    with pytest.raises(InvalidVoiceError, match=r"expected integer ref_codes \[T, 32\]"):
        VoiceRecord(voice(), torch.zeros(8, 4), torch.zeros(3, 32))
    prompt = VoiceRecord(voice(model_fingerprint="fp"), torch.ones(8, 4, dtype=torch.bfloat16)).prompt()
    assert prompt.prefix.dtype == torch.float32 and prompt.model_fingerprint == "fp"
    assert prompt.language == "en"


@pytest.mark.parametrize("fields, locale", [
    ({"language": "en"}, "en"),
    ({"language": "es-MX"}, "es-MX"),
    ({"language": "es_MX"}, "es-MX"),
    ({"language": "es", "accent": "mexican"}, "es-MX"),  # the accent's locale (GET /accents)
    ({"language": "es", "accent": "colombian"}, "es-CO"),
    ({"language": "pt", "accent": "european-portuguese"}, "pt-PT"),
    ({"language": "EN", "accent": "british"}, "en-GB"),
    ({"language": "en", "accent": "mexican"}, "en"),  # an accent of another language says nothing
    ({"language": "en", "accent": "yorkshire"}, "en"),  # an id outside the catalogue neither
    ({"language": "es-ES", "accent": "mexican"}, "es-ES"),  # a region in the language wins
    ({"language": "pt", "locales": [{"locale": "pt-PT", "is_native": False}, {"locale": "pt-BR"}]}, "pt-BR"),
    ({"language": "pt", "locales": [{"locale": "en-US"}, {"locale": "pt-PT", "is_native": False}]}, "pt-PT"),
    ({"language": "pt", "locales": [{"locale": "pt"}]}, "pt"),
    ({"language": "pt", "locales": [{"locale": "pt_BR"}]}, "pt-BR"),
    ({"language": "English"}, None),  # no language tag: the request's or the server's default
    ({"language": "eng"}, None),
])
def test_reading_locale_is_the_voices_language_made_regional(fields, locale) -> None:
    assert voice(**fields).reading_locale == locale
    assert VoiceRecord(voice(**fields), torch.zeros(8, 4)).prompt().language == locale
