"""The full Gepard model in plain PyTorch: backbone + audio overlay + speaker prefix + compressor.

Checkpoint names map onto modules as:
    model.*                               -> backbone.*
    audio_embeddings.*, audio_embed_*     -> frame_embedder.*
    codebook_heads.*, stop_head.*         -> heads.*
    null_prefix, ref_compressor.*         -> (same names)
"""

from __future__ import annotations

import hashlib
import logging
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import nn

from engine.checkpoint import load_tensors, resolve_model_dir
from engine.config import GepardConfig
from engine.errors import CheckpointError, InvalidRequestError
from engine.model.audio import AudioHeads, FrameEmbedder, level_offsets
from engine.model.backbone import Qwen35Backbone
from engine.model.ref_compressor import RefCompressor
from engine.tokenizer import TextTokenizer

logger = logging.getLogger(__name__)


def checkpoint_to_module_name(name: str) -> str:
    if name.startswith("model."):
        return "backbone." + name[len("model.") :]
    if name.startswith(("audio_embeddings.", "audio_embed_proj.")) or name == "audio_embed_scale":
        return "frame_embedder." + name
    if name.startswith(("codebook_heads.", "stop_head.")):
        return "heads." + name
    return name


@dataclass(frozen=True)
class LoadedCheckpoint:
    model_dir: Path
    config: GepardConfig
    tensors: dict[str, torch.Tensor]
    fingerprint: str


def read_checkpoint(model: str | Path | None) -> LoadedCheckpoint:
    model_dir = resolve_model_dir(model)
    cfg = GepardConfig.from_dir(model_dir)
    tensors = load_tensors(model_dir, cfg)
    return LoadedCheckpoint(model_dir, cfg, tensors, weights_fingerprint(tensors))


def weights_fingerprint(tensors: dict[str, torch.Tensor]) -> str:
    """A short id of the weights a speaker prefix depends on (compressor, null prefix, first layer)."""
    h = hashlib.sha256()
    for name in sorted(tensors):
        if name.startswith("ref_compressor.") or name in ("null_prefix", "model.layers.0.self_attn.q_proj.weight"):
            t = tensors[name].detach().contiguous().cpu()
            h.update(name.encode())
            h.update(str(tuple(t.shape)).encode())
            h.update(t.view(torch.uint8).numpy().tobytes() if t.dtype != torch.bfloat16 else t.view(torch.int16).numpy().tobytes())
    return h.hexdigest()[:16]


class GepardModel(nn.Module):
    def __init__(self, cfg: GepardConfig) -> None:
        super().__init__()
        self.config = cfg
        h = cfg.hidden_size
        self.backbone = Qwen35Backbone(cfg.backbone)
        self.frame_embedder = FrameEmbedder(cfg.audio_heads, cfg.audio_embed_dim, h)
        self.heads = AudioHeads(cfg.audio_heads, h)
        self.null_prefix = nn.Parameter(torch.zeros(cfg.prefix_length, h), requires_grad=False)
        self.ref_compressor = RefCompressor(cfg.compressor, cfg.num_channels) if cfg.compressor else None
        self.fingerprint = ""
        self.tokenizer: TextTokenizer | None = None
        self.model_dir: Path | None = None

    @classmethod
    def from_pretrained(
        cls, model: str | Path | None = None, device: str | torch.device = "cpu", dtype: torch.dtype = torch.float32
    ) -> "GepardModel":
        ckpt = read_checkpoint(model)
        with torch.device("meta"):
            module = cls(ckpt.config)
        module.load_checkpoint(ckpt.tensors, device=torch.device(device), dtype=dtype)
        module.fingerprint = ckpt.fingerprint
        module.model_dir = ckpt.model_dir
        module.tokenizer = TextTokenizer(ckpt.model_dir)
        logger.info("loaded Gepard from %s (%s, %s, fingerprint %s)", ckpt.model_dir, device, dtype, ckpt.fingerprint)
        return module.eval()

    def load_checkpoint(self, tensors: dict[str, torch.Tensor], device: torch.device, dtype: torch.dtype) -> None:
        state = {checkpoint_to_module_name(k): v.to(device=device, dtype=dtype) for k, v in tensors.items()}
        own = dict(self.named_parameters())
        missing = sorted(set(own) - set(state))
        if missing:
            raise CheckpointError(f"checkpoint lacks parameters for {missing[:5]}")
        self.load_state_dict(state, strict=False, assign=True)
        # Buffers built in __init__ (rotary tables, index grids) were created on the meta device.
        self.backbone.rotary = type(self.backbone.rotary)(self.config.backbone.rotary_dim, self.config.backbone.rope_theta).to(device)
        fe, hd = self.frame_embedder, self.heads
        fe._offsets = torch.tensor(level_offsets(fe.levels), dtype=torch.long, device=device)
        fresh = AudioHeads(hd.levels, 1)
        hd._grid_index, hd._grid_valid = fresh._grid_index.to(device), fresh._grid_valid.to(device)

    @property
    def device(self) -> torch.device:
        return self.null_prefix.device

    @property
    def dtype(self) -> torch.dtype:
        return self.null_prefix.dtype

    # -- prompt ---------------------------------------------------------------------------------
    def check_prefix(self, prefix: torch.Tensor) -> None:
        """A speaker prefix is [K, H], or [0, H]: no prefix at all (the unconditioned voice)."""
        k, h = self.config.prefix_length, self.config.hidden_size
        if prefix.dim() != 2 or tuple(prefix.shape) not in ((k, h), (0, h)):
            raise InvalidRequestError(f"speaker prefix must have shape [{k}, {h}], got {list(prefix.shape)} "
                                      f"([0, {h}] means no prefix)")
        if not torch.isfinite(prefix).all():
            raise InvalidRequestError("speaker prefix contains NaN or infinite values")

    def prompt_embeds(self, text_ids: list[int], prefix: torch.Tensor | None) -> torch.Tensor:
        """[prefix | embed(text_ids)] -> [K + len(text_ids), H]; prefix None means null_prefix, a
        [0, H] prefix means none: the prompt is the text alone (spec 5.4, the reference runner)."""
        rows = self.null_prefix if prefix is None else prefix.to(device=self.device, dtype=self.dtype)
        ids = torch.tensor(text_ids, dtype=torch.long, device=self.device)
        return torch.cat([rows, self.backbone.embed_tokens(ids)], dim=0)

    @torch.no_grad()
    def compress(self, ref_codes: torch.Tensor) -> torch.Tensor:
        """Reference codes [T, 32] -> speaker prefix [K, H] float32 on CPU."""
        if self.ref_compressor is None:
            raise InvalidRequestError("this checkpoint has no voice-cloning compressor")
        if ref_codes.dim() != 2 or ref_codes.shape[1] != self.config.num_channels or ref_codes.shape[0] == 0:
            raise InvalidRequestError(f"reference codes must have shape [T>0, {self.config.num_channels}], got {list(ref_codes.shape)}")
        levels = torch.tensor(self.config.audio_heads)
        if bool(((ref_codes < 0) | (ref_codes >= levels)).any()):
            raise InvalidRequestError("reference codes are outside the codec's levels")
        prefix = self.ref_compressor(ref_codes.to(self.device).long().unsqueeze(0))
        return prefix[0].float().cpu()
