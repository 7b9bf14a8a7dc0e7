"""``GepardForTTS``: Gepard as an out-of-tree vLLM model, built from vLLM's own layers.

The backbone is the Qwen3.5 full-attention decoder written with vLLM building blocks
(``QKVParallelLinear``, ``Attention`` with vLLM's paged KV cache, ``get_rope``, ``GemmaRMSNorm`` for
the (1 + w) norms, ``MergedColumnParallelLinear`` + ``SiluAndMul``), compiled by vLLM on GPU
(``support_torch_compile``). The audio overlay reuses the torch reference's modules
(``engine.model.audio``), so both backends compute the same frame embedding and heads.

Token ids mean what ``vllm_layout`` says. ``embed_input_ids`` is pure tensor ops (no host sync,
no Python loop over requests): a frame handle ``FRAME_BASE + slot`` embeds the frame stored in
``last_codes[slot]`` by the logits processor at the previous step; a shifted text id embeds text;
anything else (STOP after async scheduling, MRV2's placeholder zeros) embeds harmlessly.
``compute_logits`` packs the 32 heads' logits into columns [0, 256) (grid [32, 8], -inf padded) and
the stop logit into column 256; the processor turns that into the one-hot row vLLM samples.

Checkpoint names follow the published layout; ``model.*`` is mounted as ``backbone.*`` and
``q/k/v_proj`` and ``gate/up_proj`` are loaded as shards of the fused projections. Tensors the
engine does not use here (the voice compressor, ``null_prefix``: the API process handles voices)
are skipped. Tensor parallelism is not supported (one device).
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Iterable

import torch
from torch import nn

from vllm.compilation.decorators import support_torch_compile
from vllm.config import CacheConfig, VllmConfig
from vllm.model_executor.layers.activation import SiluAndMul
from vllm.model_executor.layers.attention import Attention
from vllm.model_executor.layers.layernorm import GemmaRMSNorm
from vllm.model_executor.layers.linear import MergedColumnParallelLinear, QKVParallelLinear, RowParallelLinear
from vllm.model_executor.layers.rotary_embedding import get_rope
from vllm.model_executor.layers.vocab_parallel_embedding import VocabParallelEmbedding
from vllm.model_executor.model_loader.weight_utils import default_weight_loader

from engine.backends.vllm_layout import CODE_IDS, TokenLayout
from engine.backends.vllm_sampling import slot_state
from engine.checkpoint import IGNORED_PREFIXES
from engine.config import BackboneConfig, GepardConfig
from engine.model.audio import AudioHeads, FrameEmbedder
from engine.model.gepard import checkpoint_to_module_name

logger = logging.getLogger(__name__)

# Checkpoint projections loaded as shards of vLLM's fused ones: (fused, checkpoint part, shard id).
_STACKED = (
    ("qkv_proj", "q_proj", "q"),
    ("qkv_proj", "k_proj", "k"),
    ("qkv_proj", "v_proj", "v"),
    ("gate_up_proj", "gate_proj", 0),
    ("gate_up_proj", "up_proj", 1),
)
_NOT_IN_WORKER = IGNORED_PREFIXES + ("ref_compressor.", "null_prefix")


class GepardAttention(nn.Module):
    """Gated attention: ``q_proj`` emits [query | gate] per head; out = o_proj(attn * sigmoid(gate))."""

    def __init__(self, cfg: BackboneConfig, max_position: int, cache_config: CacheConfig | None, prefix: str) -> None:
        super().__init__()
        self.num_heads, self.num_kv_heads, self.head_dim = cfg.num_attention_heads, cfg.num_key_value_heads, cfg.head_dim
        self.q_size = self.num_heads * self.head_dim
        self.kv_size = self.num_kv_heads * self.head_dim
        # 2 * heads "query heads" keep each head's [query | gate] pair together
        self.qkv_proj = QKVParallelLinear(cfg.hidden_size, self.head_dim, 2 * self.num_heads, self.num_kv_heads,
                                          bias=False, prefix=f"{prefix}.qkv_proj")
        self.o_proj = RowParallelLinear(self.q_size, cfg.hidden_size, bias=False, prefix=f"{prefix}.o_proj")
        self.q_norm = GemmaRMSNorm(self.head_dim, eps=cfg.rms_norm_eps)
        self.k_norm = GemmaRMSNorm(self.head_dim, eps=cfg.rms_norm_eps)
        self.rotary_emb = get_rope(
            self.head_dim,
            max_position=max_position,
            is_neox_style=True,
            rope_parameters={"rope_type": "default", "rope_theta": cfg.rope_theta,
                             "partial_rotary_factor": cfg.partial_rotary_factor},
        )
        self.attn = Attention(self.num_heads, self.head_dim, self.head_dim**-0.5, num_kv_heads=self.num_kv_heads,
                              cache_config=cache_config, prefix=f"{prefix}.attn")

    def forward(self, positions: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        """positions [T], x [T, H] -> [T, H] (T tokens of any mix of requests)."""
        qkv, _ = self.qkv_proj(x)
        q_gate, k, v = qkv.split([2 * self.q_size, self.kv_size, self.kv_size], dim=-1)
        q_gate = q_gate.view(-1, self.num_heads, 2 * self.head_dim)
        q, gate = q_gate[..., : self.head_dim], q_gate[..., self.head_dim :]
        q = self.q_norm(q.contiguous()).reshape(-1, self.q_size)
        k = self.k_norm(k.reshape(-1, self.num_kv_heads, self.head_dim)).reshape(-1, self.kv_size)
        q, k = self.rotary_emb(positions, q, k)
        out = self.attn(q, k, v) * torch.sigmoid(gate.reshape(-1, self.q_size))
        out, _ = self.o_proj(out)
        return out


class GepardMLP(nn.Module):
    def __init__(self, cfg: BackboneConfig, prefix: str) -> None:
        super().__init__()
        self.gate_up_proj = MergedColumnParallelLinear(cfg.hidden_size, [cfg.intermediate_size] * 2, bias=False,
                                                       prefix=f"{prefix}.gate_up_proj")
        self.down_proj = RowParallelLinear(cfg.intermediate_size, cfg.hidden_size, bias=False, prefix=f"{prefix}.down_proj")
        self.act_fn = SiluAndMul()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        gate_up, _ = self.gate_up_proj(x)
        out, _ = self.down_proj(self.act_fn(gate_up))
        return out


class GepardDecoderLayer(nn.Module):
    def __init__(self, cfg: BackboneConfig, max_position: int, cache_config: CacheConfig | None, prefix: str) -> None:
        super().__init__()
        self.self_attn = GepardAttention(cfg, max_position, cache_config, prefix=f"{prefix}.self_attn")
        self.mlp = GepardMLP(cfg, prefix=f"{prefix}.mlp")
        self.input_layernorm = GemmaRMSNorm(cfg.hidden_size, eps=cfg.rms_norm_eps)
        self.post_attention_layernorm = GemmaRMSNorm(cfg.hidden_size, eps=cfg.rms_norm_eps)

    def forward(self, positions: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        x = x + self.self_attn(positions, self.input_layernorm(x))
        return x + self.mlp(self.post_attention_layernorm(x))


@support_torch_compile(dynamic_arg_dims={"positions": 0, "inputs_embeds": 0})
class GepardBackbone(nn.Module):
    """Text embedding + decoder layers + final norm (no LM head)."""

    def __init__(self, *, vllm_config: VllmConfig, prefix: str = "") -> None:
        super().__init__()
        cfg = _gepard_config(vllm_config).backbone
        max_position = vllm_config.model_config.max_model_len
        self.embed_tokens = VocabParallelEmbedding(cfg.vocab_size, cfg.hidden_size, prefix=f"{prefix}.embed_tokens")
        self.layers = nn.ModuleList(
            [GepardDecoderLayer(cfg, max_position, vllm_config.cache_config, prefix=f"{prefix}.layers.{i}")
             for i in range(cfg.num_hidden_layers)]
        )
        self.norm = GemmaRMSNorm(cfg.hidden_size, eps=cfg.rms_norm_eps)

    def forward(self, positions: torch.Tensor, inputs_embeds: torch.Tensor) -> torch.Tensor:
        """positions [T], inputs_embeds [T, H] -> final-normed hidden states [T, H]."""
        x = inputs_embeds
        for layer in self.layers:
            x = layer(positions, x)
        return self.norm(x)


def _gepard_config(vllm_config: VllmConfig) -> GepardConfig:
    return GepardConfig.from_dir(Path(vllm_config.model_config.model))


class GepardForTTS(nn.Module):
    """The vLLM model: backbone + frame feedback embedding + packed head logits."""

    def __init__(self, *, vllm_config: VllmConfig, prefix: str = "") -> None:
        super().__init__()
        cfg = _gepard_config(vllm_config)
        self.config = cfg
        self.layout = TokenLayout(num_slots=vllm_config.scheduler_config.max_num_seqs)
        vocab = vllm_config.model_config.hf_config.vocab_size
        if vocab != self.layout.vocab_size:
            raise ValueError(f"vLLM vocab_size is {vocab}, expected {self.layout.vocab_size} for "
                             f"{self.layout.num_slots} slots: start the engine through engine.backends.vllm_backend")
        self.backbone = GepardBackbone(vllm_config=vllm_config, prefix=_join(prefix, "backbone"))
        self.frame_embedder = FrameEmbedder(cfg.audio_heads, cfg.audio_embed_dim, cfg.hidden_size)
        self.heads = AudioHeads(cfg.audio_heads, cfg.hidden_size)
        if self.heads.max_level * cfg.num_channels != CODE_IDS:
            raise ValueError(f"Gepard heads must fill a [32, 8] grid, got {cfg.num_channels} x {self.heads.max_level}")
        # last_codes[slot] is written by the logits processor and read here (same worker process)
        self.slots = slot_state(self.layout, vllm_config.device_config.device)
        # the frame step rejects a code >= its channel's level count before it reaches last_codes
        self.slots.levels.copy_(torch.tensor(cfg.audio_heads, dtype=torch.int64))
        self.text_vocab = cfg.backbone.vocab_size

    def embed_input_ids(self, input_ids: torch.Tensor) -> torch.Tensor:
        """ids [T] (handles, shifted text ids, or anything else) -> [T, H]."""
        layout = self.layout
        ids = input_ids.long()
        is_frame = (ids >= layout.frame_base) & (ids < layout.stop)
        slot = (ids - layout.frame_base).clamp(0, layout.num_slots - 1)
        frames = self.frame_embedder(self.slots.last_codes[slot])
        text = self.backbone.embed_tokens((ids - layout.text_base).clamp(0, self.text_vocab - 1))
        return torch.where(is_frame.unsqueeze(-1), frames.to(text.dtype), text)

    def forward(
        self,
        input_ids: torch.Tensor | None,
        positions: torch.Tensor,
        intermediate_tensors: object = None,
        inputs_embeds: torch.Tensor | None = None,
        **kwargs: object,
    ) -> torch.Tensor:
        if inputs_embeds is None:
            assert input_ids is not None
            inputs_embeds = self.embed_input_ids(input_ids)
        return self.backbone(positions, inputs_embeds)

    def compute_logits(self, hidden_states: torch.Tensor) -> torch.Tensor:
        """hidden [N, H] -> [N, V] float32: head grid in [0, 256), stop logit at 256, -inf after."""
        n = hidden_states.shape[0]
        grid = self.heads.code_logits(hidden_states).reshape(n, CODE_IDS)
        stop = self.heads.stop_logit(hidden_states).unsqueeze(1)
        rest = grid.new_full((n, self.layout.vocab_size - CODE_IDS - 1), float("-inf"))
        return torch.cat([grid, stop, rest], dim=1)

    def load_weights(self, weights: Iterable[tuple[str, torch.Tensor]]) -> set[str]:
        params = dict(self.named_parameters())
        loaded: set[str] = set()
        for ckpt_name, tensor in weights:
            if ckpt_name.startswith(_NOT_IN_WORKER):
                continue
            name, shard = checkpoint_to_module_name(ckpt_name), None
            for fused, part, shard_id in _STACKED:
                if f".{part}." in name:
                    name, shard = name.replace(f".{part}.", f".{fused}."), shard_id
                    break
            param = params.get(name)
            if param is None:
                logger.warning("ignoring checkpoint tensor %s: GepardForTTS has no %s", ckpt_name, name)
                continue
            if tensor.dim() == 0:
                tensor = tensor.reshape(1)  # published scalars are 0-dim
            loader = getattr(param, "weight_loader", default_weight_loader)
            if shard is None:
                loader(param, tensor)
            else:
                loader(param, tensor, shard)
            loaded.add(name)
        missing = sorted(set(params) - loaded)
        if missing:
            raise ValueError(f"checkpoint lacks tensors for {', '.join(missing[:5])}"
                             + (f" (and {len(missing) - 5} more)" if len(missing) > 5 else ""))
        return loaded


def _join(prefix: str, name: str) -> str:
    return f"{prefix}.{name}" if prefix else name
