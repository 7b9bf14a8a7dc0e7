"""Find and read a Gepard checkpoint in the published layout (spec section 1).

A checkpoint is a directory with ``config.json``, ``gepard_config.json``, ``model.safetensors`` and
the tokenizer files; it is given as a local path or a Hugging Face repo id (default
``nineninesix/gepard-1.0``), which is resolved through the local HF cache first.

Every tensor the model needs is checked by name and shape against the config; a missing or
mis-shaped tensor is a CheckpointError naming it. Scalars stored 0-dim (``audio_embed_scale``,
``ref_compressor.output_scale``) are reshaped to [1].
"""

from __future__ import annotations

import logging
import os
import re
from pathlib import Path
from typing import Mapping

import torch

from engine.config import GEPARD_CONFIG_FILE, GepardConfig
from engine.errors import CheckpointError

logger = logging.getLogger(__name__)

DEFAULT_MODEL = "nineninesix/gepard-1.0"
MODEL_ENV = "GEPARD_MODEL"
WEIGHTS_FILE = "model.safetensors"
# Present in training exports, never used at inference.
IGNORED_PREFIXES = ("supcon_head.", "aligner.", "mtp.", "lm_head.")
_SCALARS = ("audio_embed_scale", "ref_compressor.output_scale")
_REPO_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")


def resolve_model_dir(model: str | os.PathLike[str] | None = None) -> Path:
    """A local checkpoint directory for ``model`` (path or HF repo id); None means $GEPARD_MODEL or the default."""
    spec = str(model or os.environ.get(MODEL_ENV) or DEFAULT_MODEL)
    path = Path(spec).expanduser()
    if path.exists():
        if not path.is_dir():
            raise CheckpointError(f"model path {path} is not a directory")
        if not (path / GEPARD_CONFIG_FILE).exists():
            raise CheckpointError(f"{path} is not a Gepard checkpoint: no {GEPARD_CONFIG_FILE}")
        return path
    if not _REPO_ID.match(spec):
        raise CheckpointError(f"model {spec!r} is neither an existing directory nor a Hugging Face repo id")
    return _download(spec)


def _download(repo_id: str) -> Path:
    from huggingface_hub import snapshot_download

    patterns = ["*.json", "*.safetensors", "*.jinja", "tokenizer*"]
    try:
        return Path(snapshot_download(repo_id, allow_patterns=patterns, local_files_only=True))
    except Exception:  # not in the local cache: try the network below
        pass
    try:
        return Path(snapshot_download(repo_id, allow_patterns=patterns))
    except Exception as exc:
        raise CheckpointError(
            f"cannot get model {repo_id!r} from the Hugging Face cache or hub ({type(exc).__name__}: {exc}). "
            f"Set {MODEL_ENV} (or --model) to a local checkpoint directory, e.g. one written by "
            f"`python -m engine.tiny DIR`."
        ) from None


def expected_shapes(cfg: GepardConfig) -> dict[str, tuple[int, ...]]:
    """Every tensor name the model needs, with its shape (spec 1.5)."""
    b = cfg.backbone
    h, hd = b.hidden_size, b.head_dim
    shapes: dict[str, tuple[int, ...]] = {"model.embed_tokens.weight": (b.vocab_size, h), "model.norm.weight": (h,)}
    for i in range(b.num_hidden_layers):
        p = f"model.layers.{i}."
        shapes.update(
            {
                p + "self_attn.q_proj.weight": (2 * b.num_attention_heads * hd, h),
                p + "self_attn.k_proj.weight": (b.num_key_value_heads * hd, h),
                p + "self_attn.v_proj.weight": (b.num_key_value_heads * hd, h),
                p + "self_attn.o_proj.weight": (h, b.num_attention_heads * hd),
                p + "self_attn.q_norm.weight": (hd,),
                p + "self_attn.k_norm.weight": (hd,),
                p + "mlp.gate_proj.weight": (b.intermediate_size, h),
                p + "mlp.up_proj.weight": (b.intermediate_size, h),
                p + "mlp.down_proj.weight": (h, b.intermediate_size),
                p + "input_layernorm.weight": (h,),
                p + "post_attention_layernorm.weight": (h,),
            }
        )
    e = cfg.audio_embed_dim
    for k, level in enumerate(cfg.audio_heads):
        shapes[f"audio_embeddings.{k}.weight"] = (level, e)
        shapes[f"codebook_heads.{k}.weight"] = (level, h)
        shapes[f"codebook_heads.{k}.bias"] = (level,)
    shapes.update(
        {
            "audio_embed_proj.0.weight": (h, cfg.num_channels * e),
            "audio_embed_proj.0.bias": (h,),
            "audio_embed_proj.2.weight": (h, h),
            "audio_embed_proj.2.bias": (h,),
            "audio_embed_scale": (1,),
            "stop_head.weight": (1, h),
            "stop_head.bias": (1,),
            "null_prefix": (cfg.prefix_length, h),
        }
    )
    if cfg.compressor is not None:
        c = cfg.compressor
        d, f = c.d_model, c.ffn_hidden_size_multiplier * c.d_model
        shapes.update(
            {
                "ref_compressor.input_proj.weight": (d, cfg.num_channels),
                "ref_compressor.input_proj.bias": (d,),
                "ref_compressor.queries": (c.num_queries, d),
                "ref_compressor.final_norm.weight": (d,),
                "ref_compressor.output_scale": (1,),
            }
        )
        for blk in range(c.num_layers):
            p = f"ref_compressor.blocks.{blk}."
            for norm in ("norm_self", "norm_cross", "norm_ffn"):
                shapes[p + norm + ".weight"] = (d,)
            for attn in ("self_attn", "cross_attn"):
                for proj in ("q_proj", "k_proj", "v_proj", "out_proj"):
                    shapes[f"{p}{attn}.{proj}.weight"] = (d, d)
            shapes[p + "ffn.gate_proj.weight"] = (f, d)
            shapes[p + "ffn.up_proj.weight"] = (f, d)
            shapes[p + "ffn.down_proj.weight"] = (d, f)
    return shapes


def load_tensors(model_dir: Path, cfg: GepardConfig) -> dict[str, torch.Tensor]:
    """Read ``model.safetensors`` and check it against the config; returns the needed tensors."""
    from safetensors import SafetensorError
    from safetensors.torch import load_file

    path = model_dir / WEIGHTS_FILE
    if not path.exists():
        raise CheckpointError(f"missing {WEIGHTS_FILE} in {model_dir}")
    try:
        tensors = load_file(str(path))
    except (SafetensorError, OSError, ValueError) as exc:
        raise CheckpointError(f"cannot read {path}: {exc}") from None
    return validate_tensors(tensors, cfg, source=str(path))


def validate_tensors(tensors: Mapping[str, torch.Tensor], cfg: GepardConfig, source: str = "checkpoint") -> dict[str, torch.Tensor]:
    out: dict[str, torch.Tensor] = {}
    for name in _SCALARS:
        if name in tensors and tensors[name].dim() == 0:
            tensors = {**tensors, name: tensors[name].reshape(1)}
    expected = expected_shapes(cfg)
    missing = sorted(set(expected) - set(tensors))
    if missing:
        more = f" (and {len(missing) - 5} more)" if len(missing) > 5 else ""
        raise CheckpointError(f"{source}: missing tensor(s) {', '.join(missing[:5])}{more}")
    for name, shape in expected.items():
        got = tuple(tensors[name].shape)
        if got != shape:
            raise CheckpointError(f"{source}: tensor {name} has shape {list(got)}, expected {list(shape)}")
        out[name] = tensors[name]
    unknown = sorted(n for n in tensors if n not in expected and not n.startswith(IGNORED_PREFIXES))
    layer = re.compile(r"^model\.layers\.(\d+)\.")
    beyond = [n for n in unknown if (m := layer.match(n)) and int(m.group(1)) >= cfg.backbone.num_hidden_layers]
    if beyond:
        # Weights for layers the config does not have: running anyway would silently drop them.
        raise CheckpointError(f"{source}: tensor {beyond[0]} is beyond num_hidden_layers={cfg.backbone.num_hidden_layers}")
    if unknown:
        logger.warning("%s: ignoring %d tensor(s) the model does not use: %s", source, len(unknown), ", ".join(unknown[:5]))
    return out
