"""Gepard's self-description: ``gepard_config.json`` (plus the backbone ``config.json``).

The published checkpoint writes ``gepard_config.json`` with the generic Hugging Face keys mixed in
(``return_dict``, ``id2label``...); only the keys below are read and everything else is ignored.
Pitfalls handled here (spec section 11): ``audio_heads`` is ordered by the numeric suffix of
``level_audio_<k>`` (not lexicographically), and ``partial_rotary_factor`` is taken from the Gepard
level (1.0) rather than a stale backbone value.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Mapping

from engine.errors import CheckpointError

if TYPE_CHECKING:
    from engine.requests import ModelInfo

GEPARD_CONFIG_FILE = "gepard_config.json"
BACKBONE_CONFIG_FILE = "config.json"
_HEAD_KEY = re.compile(r"^level_audio_(\d+)$")


@dataclass(frozen=True, slots=True)
class BackboneConfig:
    """Qwen3.5 full-attention text backbone (transformers ``qwen3_5_text``)."""

    hidden_size: int
    num_hidden_layers: int
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int
    intermediate_size: int
    vocab_size: int
    rms_norm_eps: float = 1e-6
    rope_theta: float = 10_000_000.0
    partial_rotary_factor: float = 1.0
    max_position_embeddings: int = 262_144
    hidden_act: str = "silu"

    @property
    def rotary_dim(self) -> int:
        return int(self.head_dim * self.partial_rotary_factor)


@dataclass(frozen=True, slots=True)
class SpecialTokens:
    tokeniser_length: int
    start_of_text: int
    end_of_text: int
    start_of_speech: int
    end_of_speech: int
    tts_pad: int


@dataclass(frozen=True, slots=True)
class CodecSpec:
    codec_id: str = "nvidia/nemo-nano-codec-22khz-1.89kbps-21.5fps"
    num_layers: int = 8  # FSQ groups
    fsq_levels: tuple[int, ...] = (8, 7, 6, 6)
    frame_rate_hz: float = 21.5
    sample_rate: int = 22050
    do_unfold: bool = True

    @property
    def samples_per_frame(self) -> int:
        # 22050 / 21.5 is not an integer; the codec's hop is 1024 (= 8*8*4*2*2), i.e. 21.533 fps.
        return 1024

    @property
    def exact_frame_rate_hz(self) -> float:
        return self.sample_rate / self.samples_per_frame


@dataclass(frozen=True, slots=True)
class TextRepetitionConfig:
    enabled: bool = True
    target_text_tokens: int = 16
    apply_below: int = 13
    max_repeats: int = 8


@dataclass(frozen=True, slots=True)
class CompressorConfig:
    num_queries: int = 8
    num_layers: int = 2
    num_heads: int = 8
    d_model: int = 1024
    ffn_hidden_size_multiplier: int = 4


@dataclass(frozen=True, slots=True)
class GepardConfig:
    backbone: BackboneConfig
    audio_heads: tuple[int, ...]  # codebook sizes L_k in channel order (32 entries)
    audio_embed_dim: int
    special_tokens: SpecialTokens
    codec: CodecSpec = field(default_factory=CodecSpec)
    text_repetition: TextRepetitionConfig = field(default_factory=TextRepetitionConfig)
    compressor: CompressorConfig | None = field(default_factory=CompressorConfig)

    @property
    def num_channels(self) -> int:
        return len(self.audio_heads)

    @property
    def hidden_size(self) -> int:
        return self.backbone.hidden_size

    @property
    def prefix_length(self) -> int:
        return self.compressor.num_queries if self.compressor else 8

    def model_info(self, name: str, fingerprint: str) -> "ModelInfo":
        from engine.requests import ModelInfo

        return ModelInfo(
            name=name,
            hidden_size=self.hidden_size,
            prefix_length=self.prefix_length,
            num_channels=self.num_channels,
            frame_rate_hz=self.codec.exact_frame_rate_hz,
            sample_rate_hz=self.codec.sample_rate,
            samples_per_frame=self.codec.samples_per_frame,
            fingerprint=fingerprint,
        )

    @classmethod
    def from_dir(cls, model_dir: Path) -> "GepardConfig":
        path = model_dir / GEPARD_CONFIG_FILE
        raw = _read_json(path)
        backbone_raw = raw.get("backbone_config")
        if not isinstance(backbone_raw, Mapping):
            backbone_path = model_dir / BACKBONE_CONFIG_FILE
            if not backbone_path.exists():
                raise CheckpointError(f"{path}: no 'backbone_config' and no {BACKBONE_CONFIG_FILE} beside it")
            backbone_raw = _read_json(backbone_path)
        return cls.from_dict(raw, backbone_raw, source=str(path))

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any], backbone_raw: Mapping[str, Any], source: str = "config") -> "GepardConfig":
        try:
            return _parse(raw, backbone_raw)
        except CheckpointError as exc:
            raise CheckpointError(f"{source}: {exc}") from None
        except (KeyError, TypeError, ValueError) as exc:
            raise CheckpointError(f"{source}: invalid or missing value ({type(exc).__name__}: {exc})") from exc


def _read_json(path: Path) -> dict[str, Any]:
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise CheckpointError(f"missing {path.name} in {path.parent}") from None
    except OSError as exc:
        raise CheckpointError(f"cannot read {path}: {exc}") from exc
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise CheckpointError(f"{path} is not valid JSON: {exc}") from None
    if not isinstance(value, dict):
        raise CheckpointError(f"{path} must hold a JSON object, got {type(value).__name__}")
    return value


def parse_audio_heads(heads: Mapping[str, int]) -> tuple[int, ...]:
    """``{"level_audio_<k>": L_k}`` -> (L_0, ..., L_31) ordered by the numeric suffix."""
    indexed: dict[int, int] = {}
    for key, size in heads.items():
        match = _HEAD_KEY.match(key)
        if not match:
            raise CheckpointError(f"audio_heads: unexpected key {key!r} (expected 'level_audio_<k>')")
        indexed[int(match.group(1))] = int(size)
    order = sorted(indexed)
    if order != list(range(len(order))):
        raise CheckpointError(f"audio_heads: indices must be 0..{len(order) - 1}, got {order}")
    return tuple(indexed[k] for k in order)


def _parse(raw: Mapping[str, Any], bb: Mapping[str, Any]) -> GepardConfig:
    layer_types = bb.get("layer_types")
    if layer_types and any(t != "full_attention" for t in layer_types):
        other = sorted({t for t in layer_types if t != "full_attention"})
        raise CheckpointError(f"backbone layer_types {other} are not supported (Gepard uses full_attention only)")
    rope = bb.get("rope_parameters") or {}
    rope_theta = float(rope.get("rope_theta", bb.get("rope_theta", 10_000_000.0)))
    # The Gepard-level value wins: the base repo ships a stale flat 0.25 (spec pitfall 2).
    partial = float(raw.get("partial_rotary_factor", rope.get("partial_rotary_factor", bb.get("partial_rotary_factor", 1.0))))
    hidden = int(bb["hidden_size"])
    heads = int(bb["num_attention_heads"])
    backbone = BackboneConfig(
        hidden_size=hidden,
        num_hidden_layers=int(bb["num_hidden_layers"]),
        num_attention_heads=heads,
        num_key_value_heads=int(bb.get("num_key_value_heads", heads)),
        head_dim=int(bb.get("head_dim") or hidden // heads),
        intermediate_size=int(bb["intermediate_size"]),
        vocab_size=int(bb["vocab_size"]),
        rms_norm_eps=float(bb.get("rms_norm_eps", 1e-6)),
        rope_theta=rope_theta,
        partial_rotary_factor=partial,
        max_position_embeddings=int(bb.get("max_position_embeddings", 262_144)),
        hidden_act=str(bb.get("hidden_act", "silu")),
    )
    if backbone.hidden_act != "silu":
        raise CheckpointError(f"hidden_act {backbone.hidden_act!r} is not supported (expected 'silu')")
    if backbone.num_attention_heads % backbone.num_key_value_heads:
        raise CheckpointError("num_attention_heads must be a multiple of num_key_value_heads")

    st = raw["special_tokens"]
    special = SpecialTokens(
        tokeniser_length=int(st["tokeniser_length"]),
        start_of_text=int(st["start_of_text"]),
        end_of_text=int(st["end_of_text"]),
        start_of_speech=int(st["start_of_speech"]),
        end_of_speech=int(st["end_of_speech"]),
        tts_pad=int(st["tts_pad"]),
    )
    for name in ("start_of_text", "end_of_text", "start_of_speech"):
        if not 0 <= getattr(special, name) < backbone.vocab_size:
            raise CheckpointError(f"special_tokens.{name}={getattr(special, name)} is outside the vocabulary ({backbone.vocab_size})")

    codec_raw = raw.get("codec") or {}
    codec = CodecSpec(
        codec_id=str(codec_raw.get("codec_id", CodecSpec.codec_id)),
        num_layers=int(codec_raw.get("num_layers", 8)),
        fsq_levels=tuple(int(x) for x in codec_raw.get("fsq_levels", (8, 7, 6, 6))),
        frame_rate_hz=float(codec_raw.get("frame_rate_hz", 21.5)),
        sample_rate=int(codec_raw.get("sample_rate", 22050)),
        do_unfold=bool(codec_raw.get("do_unfold", True)),
    )
    audio_heads = parse_audio_heads(raw["audio_heads"])
    expected = tuple(codec.fsq_levels) * codec.num_layers
    if audio_heads != expected:
        raise CheckpointError(f"audio_heads {list(audio_heads)} do not match the codec's unfolded levels {list(expected)}")

    rep_raw = raw.get("text_repetition") or {}
    repetition = TextRepetitionConfig(
        enabled=bool(rep_raw.get("enabled", True)),
        target_text_tokens=int(rep_raw.get("target_text_tokens", 16)),
        apply_below=int(rep_raw.get("apply_below", 13)),
        max_repeats=int(rep_raw.get("max_repeats", 8)),
    )

    compressor = None
    vc = raw.get("voice_cloning") or {}
    if vc.get("enabled", True) and vc.get("compressor") is not None:
        c = vc["compressor"]
        compressor = CompressorConfig(
            num_queries=int(c.get("num_queries", 8)),
            num_layers=int(c.get("num_layers", 2)),
            num_heads=int(c.get("num_heads", 8)),
            d_model=int(c.get("d_model", hidden)),
            ffn_hidden_size_multiplier=int(c.get("ffn_hidden_size_multiplier", 4)),
        )
        if compressor.d_model != hidden:
            raise CheckpointError(f"voice_cloning.compressor.d_model={compressor.d_model} must equal hidden_size={hidden}")

    return GepardConfig(
        backbone=backbone,
        audio_heads=audio_heads,
        audio_embed_dim=int(raw.get("audio_embed_dim", 32)),
        special_tokens=special,
        codec=codec,
        text_repetition=repetition,
        compressor=compressor,
    )
