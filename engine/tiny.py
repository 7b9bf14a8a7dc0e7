"""Write random Gepard checkpoints in exactly the published layout, for tests, demos and benchmarks.

    python -m engine.tiny OUT_DIR [--size tiny|full] [--seed N] [--stop-after N] [--no-codec]

writes ``config.json``, ``gepard_config.json``, ``model.safetensors``, ``tokenizer.json``,
``tokenizer_config.json``, ``chat_template.jinja`` and a random NanoCodec ``nanocodec.nemo``
(named by ``codec.codec_id``). ``--size full`` has the real 556M shapes (written in bf16, like the
published file) so benchmarks pay the real compute cost; ``tiny`` is small enough for unit tests.

Predictable stopping (``--stop-after N``): random weights never learn when to stop, so the writer
builds a small counter into the weights. The first few channels' embeddings are one-hot, the
frame-embedding MLP's first units are AND gates over those one-hots (one unit per counter state),
and its second layer writes the *next* state's digits into a few reserved hidden dims that no
attention or MLP output touches. The heads of the counter channels read those dims, and the stop
head reads a flag set by the last state. With the SOS embedding encoding the start state, every
request produces exactly N frames (greedy or sampled: the counter heads' logit gaps are ~40) and the
remaining channels stay random functions of the text and context. ``--stop-after 0`` never stops.
"""

from __future__ import annotations

import argparse
import json
import math
import shutil
from dataclasses import dataclass
from pathlib import Path

import torch

from engine.config import GEPARD_CONFIG_FILE, GepardConfig

CODEC_FILE = "nanocodec.nemo"
CHANNEL_LEVELS = [8, 7, 6, 6] * 8
SPECIAL_NAMES = [
    "<|audio_start|>",  # start_of_speech  (tokeniser_length - 7)
    "<|audio_end|>",  # end_of_speech
    "<tts_pad>",
    "<tts_text_bos>",  # start_of_text    (tokeniser_length - 4)
    "<tts_text_eod>",  # end_of_text
    "<tts_text_bos_single>",
    "<|audio_pad|>",  # tts_pad          (tokeniser_length - 1)
]
_CORPUS = """
Hello there. The quick brown fox jumps over the lazy dog. How are you today? I am fine, thank you.
Good morning, and welcome to the show. Please hold while I transfer your call to the next agent.
The weather will be sunny with a chance of rain in the afternoon. It costs twenty five dollars.
Hola, ¿cómo estás? Muy bien, gracias. El perro come una manzana en la casa de mi madre.
Olá, tudo bem? Obrigado pela sua ajuda. Bom dia, a reunião começa às três horas.
Hallo, hoe gaat het met je? Dank je wel. De kat slaapt op de bank in het huis.
One, two, three, four, five, six, seven, eight, nine, ten. Numbers and dates: March fifth.
"""


@dataclass(frozen=True)
class Shapes:
    hidden: int
    layers: int
    heads: int
    kv_heads: int
    head_dim: int
    intermediate: int
    vocab: int | None  # None: just enough rows for the tokenizer (+ 8 placeholders), rounded up
    audio_embed_dim: int
    compressor_layers: int
    compressor_heads: int
    dtype: torch.dtype
    default_stop_after: int


SIZES = {
    "tiny": Shapes(96, 2, 4, 2, 32, 192, None, 8, 2, 4, torch.float32, 24),
    "full": Shapes(1024, 14, 8, 2, 256, 3584, 248_320, 32, 2, 8, torch.bfloat16, 200),
}


def build_tokenizer(vocab_target: int = 400):
    """A small byte-level BPE with Gepard's special tokens appended (ids tokeniser_length - 7 ...)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_target, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False
    )
    tok.train_from_iterator([line for line in _CORPUS.splitlines() if line.strip()] * 4, trainer=trainer)
    tok.add_special_tokens(SPECIAL_NAMES)
    return tok


def special_tokens_for(tokeniser_length: int) -> dict[str, int]:
    n = tokeniser_length
    return {
        "tokeniser_length": n,
        "start_of_text": n - 4,
        "end_of_text": n - 3,
        "start_of_speech": n - 7,
        "end_of_speech": n - 6,
        "tts_pad": n - 1,
    }


def _hf_boilerplate() -> dict:
    # upstream writes the generic HF config keys too; loaders must accept and ignore them
    return {"return_dict": True, "output_hidden_states": False, "torchscript": False, "id2label": {"0": "LABEL_0", "1": "LABEL_1"},
            "label2id": {"LABEL_0": 0, "LABEL_1": 1}, "transformers_version": "5.3.0", "architectures": None}


def write_configs(out: Path, s: Shapes, tokeniser_length: int, vocab: int) -> GepardConfig:
    rotary_half = s.head_dim // 2
    mrope = [rotary_half - 2 * (rotary_half // 3), rotary_half // 3, rotary_half // 3]
    backbone = {
        "model_type": "qwen3_5_text",
        "hidden_size": s.hidden,
        "num_hidden_layers": s.layers,
        "num_attention_heads": s.heads,
        "num_key_value_heads": s.kv_heads,
        "head_dim": s.head_dim,
        "intermediate_size": s.intermediate,
        "vocab_size": vocab,
        "rms_norm_eps": 1e-6,
        "hidden_act": "silu",
        "max_position_embeddings": 262_144,
        "attention_bias": False,
        "attention_dropout": 0.0,
        "tie_word_embeddings": True,
        "layer_types": ["full_attention"] * s.layers,
        "full_attention_interval": 1,
        "partial_rotary_factor": 1.0,
        "rope_parameters": {
            "rope_type": "default",
            "rope_theta": 10_000_000.0,
            "partial_rotary_factor": 1.0,
            "mrope_section": mrope,
            "mrope_interleaved": True,
        },
        "torch_dtype": "bfloat16",
        "bos_token_id": None,
        "eos_token_id": special_tokens_for(tokeniser_length)["end_of_speech"],
    }
    gepard = {
        "model_type": "gepard",
        "backbone_config": {**backbone, **_hf_boilerplate()},
        "audio_heads": {f"level_audio_{k}": level for k, level in enumerate(CHANNEL_LEVELS)},
        "audio_embed_dim": s.audio_embed_dim,
        "partial_rotary_factor": 1.0,
        "special_tokens": special_tokens_for(tokeniser_length),
        "stop_loss_weight": 2.0,
        "stop_pos_weight": 25.0,
        "model_dtype": "bfloat16",
        "codec": {
            "num_layers": 8,
            "fsq_levels": [8, 7, 6, 6],
            "do_unfold": True,
            "frame_rate_hz": 21.5,
            "codec_id": CODEC_FILE,
            "sample_rate": 22050,
        },
        "text_repetition": {"enabled": True, "target_text_tokens": 16, "apply_below": 13, "max_repeats": 8,
                            "mixed_keep_prob": 0.25, "seed": 0},
        "voice_cloning": {
            "enabled": True,
            "compressor": {"num_queries": 8, "num_layers": s.compressor_layers, "num_heads": s.compressor_heads,
                           "d_model": s.hidden, "ffn_hidden_size_multiplier": 4, "dropout": 0.1},
            "training": {"cfg_dropout_prob": 0.15, "supcon": {"enabled": False}, "diversity_loss": {"enabled": False}},
        },
        **_hf_boilerplate(),
    }
    (out / "config.json").write_text(json.dumps({**backbone, "architectures": ["Qwen3_5ForCausalLM"]}, indent=2))
    # not sorted: audio_heads order must survive (spec 1.2)
    (out / GEPARD_CONFIG_FILE).write_text(json.dumps(gepard, indent=2, sort_keys=False))
    return GepardConfig.from_dir(out)


class _CounterPlan:
    """Which reserved dims and AND units implement a stop-after-N counter (see module docstring)."""

    def __init__(self, stop_after: int, hidden: int, embed_dim: int) -> None:
        self.stop_after = stop_after
        n = max(stop_after, 1)
        k, states = 0, 1
        while states < n:
            states *= CHANNEL_LEVELS[k]
            k += 1
        k = max(k, 1)
        states = math.prod(CHANNEL_LEVELS[:k])
        if states > hidden or sum(CHANNEL_LEVELS[:k]) + 1 > hidden // 2 or max(CHANNEL_LEVELS[:k]) > embed_dim:
            raise ValueError(f"--stop-after {stop_after} needs {states} counter states; this size supports at most "
                             f"{max_counter(hidden)} frames")
        self.channels = k
        self.states = states
        self.offsets = [sum(CHANNEL_LEVELS[:i]) for i in range(k)]  # reserved dim of (channel i, digit 0)
        self.stop_dim = sum(CHANNEL_LEVELS[:k])
        self.reserved = self.stop_dim + 1
        self.start = states - n

    def digits(self, index: int) -> list[int]:
        out = []
        for level in CHANNEL_LEVELS[: self.channels]:
            out.append(index % level)
            index //= level
        return out


class TinyArgumentError(ValueError):
    """An argument that no random checkpoint of this size can honour; nothing has been written."""


def check_stop_after(size: str, stop_after: int | None) -> int:
    """The frame count a ``size`` checkpoint will stop after (its default for None), or
    TinyArgumentError naming the size's limit. Pure: runs before anything is written."""
    if size not in SIZES:
        raise TinyArgumentError(f"--size {size!r} is not one of {sorted(SIZES)}")
    shapes = SIZES[size]
    stop = shapes.default_stop_after if stop_after is None else stop_after
    limit = max_counter(shapes.hidden)
    if isinstance(stop, bool) or not isinstance(stop, int) or not 0 <= stop <= limit:
        raise TinyArgumentError(f"--stop-after {stop}: the {size} size stops after at most {limit} frames "
                                f"(0 means never stop)")
    try:
        _CounterPlan(stop, shapes.hidden, shapes.audio_embed_dim)  # the same test the writer makes
    except ValueError as exc:
        raise TinyArgumentError(str(exc)) from None
    return stop


def max_counter(hidden: int) -> int:
    best, states = 0, 1
    for k in range(4):
        states *= CHANNEL_LEVELS[k]
        if states <= hidden and sum(CHANNEL_LEVELS[: k + 1]) + 1 <= hidden // 2:
            best = states
    return best


def random_tensors(cfg: GepardConfig, s: Shapes, stop_after: int, seed: int) -> dict[str, torch.Tensor]:
    from engine.checkpoint import expected_shapes

    g = torch.Generator().manual_seed(seed)
    h, e, c = cfg.hidden_size, cfg.audio_embed_dim, cfg.num_channels
    plan = _CounterPlan(stop_after, h, e)
    r = plan.reserved
    scale = 0.02  # std of the text embedding table, which is what audio_embed_scale holds upstream

    def randn(*shape: int, std: float = 1.0) -> torch.Tensor:
        return torch.randn(*shape, generator=g) * std

    t: dict[str, torch.Tensor] = {}
    emb = randn(cfg.backbone.vocab_size, h, std=scale)
    emb[:, :r] = 0.0
    t["model.embed_tokens.weight"] = emb
    for i in range(cfg.backbone.num_hidden_layers):
        p = f"model.layers.{i}."
        bb = cfg.backbone
        qd, kd = bb.num_attention_heads * bb.head_dim, bb.num_key_value_heads * bb.head_dim
        t[p + "self_attn.q_proj.weight"] = randn(2 * qd, h, std=h ** -0.5)
        t[p + "self_attn.k_proj.weight"] = randn(kd, h, std=h ** -0.5)
        t[p + "self_attn.v_proj.weight"] = randn(kd, h, std=h ** -0.5)
        o = randn(h, qd, std=0.1 * scale * qd ** -0.5)
        o[:r] = 0.0  # attention never writes the counter's reserved dims
        t[p + "self_attn.o_proj.weight"] = o
        t[p + "self_attn.q_norm.weight"] = randn(bb.head_dim, std=0.1)
        t[p + "self_attn.k_norm.weight"] = randn(bb.head_dim, std=0.1)
        t[p + "mlp.gate_proj.weight"] = randn(bb.intermediate_size, h, std=h ** -0.5)
        t[p + "mlp.up_proj.weight"] = randn(bb.intermediate_size, h, std=h ** -0.5)
        d = randn(h, bb.intermediate_size, std=0.1 * scale * bb.intermediate_size ** -0.5)
        d[:r] = 0.0
        t[p + "mlp.down_proj.weight"] = d
        t[p + "input_layernorm.weight"] = randn(h, std=0.1)
        t[p + "post_attention_layernorm.weight"] = randn(h, std=0.1)
    norm = randn(h, std=0.1)
    norm[:r] = 0.0
    t["model.norm.weight"] = norm

    # frame embedding with the counter: one-hot digits of the counter channels
    one_hot_value = 4.0
    for k, level in enumerate(CHANNEL_LEVELS):
        table = randn(level, e)
        if k < plan.channels:
            table = randn(level, e, std=0.05)
            table[:, :level] = torch.eye(level) * one_hot_value
        t[f"audio_embeddings.{k}.weight"] = table
    w1 = randn(h, c * e, std=(c * e) ** -0.5)
    b1 = randn(h, std=0.1)
    gate_gain = 5.0  # AND unit: +gain per matching digit, bias so all-match -> +10, one miss -> -10
    for i in range(plan.states):
        w1[i] = 0.0
        for k, digit in enumerate(plan.digits(i)):
            w1[i, k * e + digit] = gate_gain
        b1[i] = -gate_gain * one_hot_value * (plan.channels - 0.5)
    w2 = randn(h, h, std=h ** -0.5)
    w2[:, : plan.states] = 0.0
    w2[:r] = 0.0
    for i in range(plan.states):
        for k, digit in enumerate(plan.digits((i + 1) % plan.states)):
            w2[plan.offsets[k] + digit, i] = 1.0
        if stop_after and i == plan.states - 1:
            w2[plan.stop_dim, i] = 1.0
    b2 = torch.zeros(h)
    b2[r:] = randn(h - r, std=0.1)
    t["audio_embed_proj.0.weight"], t["audio_embed_proj.0.bias"] = w1, b1
    t["audio_embed_proj.2.weight"], t["audio_embed_proj.2.bias"] = w2, b2
    t["audio_embed_scale"] = torch.tensor(scale)  # 0-dim, as in published checkpoints

    # SOS carries the start state's digits (same magnitude as a fed frame's after LayerNorm * scale)
    sos = cfg.special_tokens.start_of_speech
    for k, digit in enumerate(plan.digits(plan.start)):
        emb[sos, plan.offsets[k] + digit] = _active_level(h, plan) * scale

    # heads: counter channels read their reserved digits; the rest are random over free dims
    for k, level in enumerate(CHANNEL_LEVELS):
        w = randn(level, h, std=1.0)
        w[:, :r] = 0.0
        if k < plan.channels:
            w = torch.zeros(level, h)
            w[:, plan.offsets[k] : plan.offsets[k] + level] = torch.eye(level)
        t[f"codebook_heads.{k}.weight"] = w
        t[f"codebook_heads.{k}.bias"] = torch.zeros(level)
    t["stop_head.weight"] = torch.zeros(1, h)
    t["stop_head.bias"] = torch.tensor([-30.0])
    if stop_after:
        t["stop_head.weight"][0, plan.stop_dim] = 1.0

    null_prefix = randn(cfg.prefix_length, h, std=scale)
    null_prefix[:, :r] = 0.0
    t["null_prefix"] = null_prefix

    comp = cfg.compressor
    if comp is not None:
        dm, f = comp.d_model, comp.ffn_hidden_size_multiplier * comp.d_model
        t["ref_compressor.input_proj.weight"] = randn(dm, c, std=c ** -0.5)
        t["ref_compressor.input_proj.bias"] = randn(dm, std=0.02)
        t["ref_compressor.queries"] = randn(comp.num_queries, dm)
        fin = 1.0 + randn(dm, std=0.1)
        fin[:r] = 0.0  # speaker prefixes never touch the counter dims either
        t["ref_compressor.final_norm.weight"] = fin
        t["ref_compressor.output_scale"] = torch.tensor(scale)
        for blk in range(comp.num_layers):
            p = f"ref_compressor.blocks.{blk}."
            for norm_name in ("norm_self", "norm_cross", "norm_ffn"):
                t[p + norm_name + ".weight"] = 1.0 + randn(dm, std=0.1)
            for attn in ("self_attn", "cross_attn"):
                for proj in ("q_proj", "k_proj", "v_proj", "out_proj"):
                    t[f"{p}{attn}.{proj}.weight"] = randn(dm, dm, std=dm ** -0.5)
            t[p + "ffn.gate_proj.weight"] = randn(f, dm, std=dm ** -0.5)
            t[p + "ffn.up_proj.weight"] = randn(f, dm, std=dm ** -0.5)
            t[p + "ffn.down_proj.weight"] = randn(dm, f, std=f ** -0.5)

    expected = expected_shapes(cfg)
    for name, shape in expected.items():
        got = tuple(t[name].shape) if t[name].dim() else (1,)
        assert got == shape, (name, got, shape)
    assert set(t) == set(expected), sorted(set(expected) ^ set(t))
    return t


def _active_level(h: int, plan: _CounterPlan) -> float:
    """LayerNorm output of an active reserved dim (before the scale), for a frame embedding."""
    # z has (channels) active dims at 10.0 (AND unit output 10 * weight 1) plus one stop dim at most,
    # and ~N(0, 0.1^2 + small) elsewhere: LN output ~ (10 - mean) / std.
    active = plan.channels
    mean = 10.0 * active / h
    var = (active * 100.0) / h - mean**2 + 0.05
    return (10.0 - mean) / math.sqrt(var)


def calibrate_heads(model_dir: Path, tensors: dict[str, torch.Tensor], stop_after: int, target_gap: float = 40.0) -> None:
    """Scale the heads so counter logits differ by ~target_gap and random heads have unit-ish spread.

    Runs the real torch model over one short prompt for a few frames and measures the normalised
    hidden state, which depends on all the random weights above; deterministic for a given seed.
    """
    from engine.model.gepard import GepardModel

    cfg = GepardConfig.from_dir(model_dir)
    plan = _CounterPlan(stop_after, cfg.hidden_size, cfg.audio_embed_dim)
    model = GepardModel(cfg)
    from engine.checkpoint import validate_tensors

    checked = validate_tensors({k: v.float() for k, v in tensors.items()}, cfg)
    model.load_checkpoint(checked, torch.device("cpu"), torch.float32)
    model.eval()
    hidden = _probe_hidden(model, plan)  # [N, H] normalised hidden states at SOS and after frames
    r = plan.reserved
    active = []
    for row in hidden:
        block = row[: plan.stop_dim]
        active.append(block.max().item() - block.min().item())
    gap = min(active)
    gain = target_gap / max(gap, 1e-6)
    for k in range(plan.channels):
        tensors[f"codebook_heads.{k}.weight"] *= gain
    if stop_after:
        flag = hidden[:, plan.stop_dim]
        on, off = flag.max().item(), flag.min().item()
        g = 2 * target_gap / max(on - off, 1e-6)
        tensors["stop_head.weight"] *= g
        tensors["stop_head.bias"] = torch.tensor([-g * (on + off) / 2])
    free = hidden[:, r:]
    spread = free.std().item() * math.sqrt(free.shape[1])
    for k in range(plan.channels, len(CHANNEL_LEVELS)):
        tensors[f"codebook_heads.{k}.weight"] *= 2.0 / max(spread, 1e-6)


@torch.no_grad()
def _probe_hidden(model, plan: _CounterPlan) -> torch.Tensor:
    from engine.model.backbone import KVCache

    cfg = model.config
    sp = cfg.special_tokens
    ids = [sp.start_of_text, 5, 6, 7, sp.end_of_text, sp.start_of_speech]
    embeds = model.prompt_embeds(ids, None).unsqueeze(0)
    cache = KVCache.allocate(cfg.backbone, 1, 256, torch.device("cpu"), torch.float32)
    h = model.backbone(embeds, cache, slice(0, 1), torch.zeros(1, dtype=torch.long))[:, -1]
    rows = [h[0]]
    index = plan.start
    for _ in range(plan.states - plan.start):
        digits = plan.digits(index)
        codes = torch.zeros(1, cfg.num_channels, dtype=torch.long)
        codes[0, : plan.channels] = torch.tensor(digits)
        x = model.frame_embedder(codes).unsqueeze(1)
        h = model.backbone(x, cache, slice(0, 1), cache.lengths[:1].clone())[:, -1]
        rows.append(h[0])
        index = (index + 1) % plan.states
    return torch.stack(rows)


def write_tiny_checkpoint(
    out: Path, size: str = "tiny", seed: int = 0, stop_after: int | None = None, with_codec: bool = True
) -> Path:
    """Write a random checkpoint (and codec) into ``out``; returns ``out``.

    Arguments are checked before anything is written (TinyArgumentError), and a directory this
    call created is removed again if writing fails, so no half checkpoint is ever left behind.
    """
    stop = check_stop_after(size, stop_after)
    out = Path(out)
    created = not out.exists()
    out.mkdir(parents=True, exist_ok=True)
    try:
        return _write(out, SIZES[size], size, seed, stop, with_codec)
    except BaseException:
        if created:
            shutil.rmtree(out, ignore_errors=True)
        raise


def _write(out: Path, shapes: Shapes, size: str, seed: int, stop: int, with_codec: bool) -> Path:
    from safetensors.torch import save_file

    tok = build_tokenizer()
    tokeniser_length = tok.get_vocab_size(with_added_tokens=True)
    vocab = shapes.vocab or int(math.ceil((tokeniser_length + 8) / 64) * 64)
    tok.save(str(out / "tokenizer.json"))
    (out / "tokenizer_config.json").write_text(json.dumps(
        {"tokenizer_class": "TokenizersBackend", "model_max_length": 262_144, "clean_up_tokenization_spaces": False}, indent=2))
    (out / "chat_template.jinja").write_text("{% for message in messages %}{{ message['content'] }}{% endfor %}\n")
    cfg = write_configs(out, shapes, tokeniser_length, vocab)
    tensors = random_tensors(cfg, shapes, stop, seed)
    calibrate_heads(out, tensors, stop)
    save_file({k: v.to(shapes.dtype).contiguous() for k, v in tensors.items()}, str(out / "model.safetensors"),
              metadata={"format": "pt", "gepard_random": f"size={size} seed={seed} stop_after={stop}"})
    if with_codec:
        from codec_worker.tiny import write_random_codec

        write_random_codec(out / CODEC_FILE, size=size, seed=seed)
    return out


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m engine.tiny", description=__doc__.split("\n\n")[0])
    parser.add_argument("out", type=Path, help="output directory")
    parser.add_argument("--size", choices=sorted(SIZES), default="tiny")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--stop-after", type=int, default=None,
                        help="frames every request produces before the stop head fires (0: never); "
                             "default 24 (tiny) / 200 (full)")
    parser.add_argument("--no-codec", action="store_true", help="do not write the random NanoCodec")
    args = parser.parse_args(argv)
    try:
        check_stop_after(args.size, args.stop_after)
    except TinyArgumentError as exc:
        parser.error(str(exc))  # one line, exit 2
    path = write_tiny_checkpoint(args.out, args.size, args.seed, args.stop_after, with_codec=not args.no_codec)
    print(f"wrote {args.size} random Gepard checkpoint to {path}")


if __name__ == "__main__":
    main()
