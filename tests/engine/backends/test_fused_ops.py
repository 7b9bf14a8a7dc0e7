"""The fast path's fused kernels (engine.backends.fused_ops, GEPARD_TORCH_FUSED_KERNELS).

Run on CPU tensors by Triton's interpreter, each kernel equals the eager ops it replaces within
float32 rounding, on the strided views the decoder layer hands it, and the sampling kernel draws
engine.sampling's codes; the fast path with them gives the reference loop's frames on the tiny
checkpoint, a decode step's inputs take 5 launches instead of 18, a decode layer 10 instead of 52
and the step's end 5 instead of 146. On CPU without the interpreter, with a compiled step, and for
a kernel that computes something else, the layers keep their eager ops, with a log line. The
kernels also compile for sm_90 (the H200 of the GPU sessions) here, with Triton's own ptxas; a
CUDA-only test checks them on the device (part 0 of bench/gpu_session.sh).
"""

from __future__ import annotations

import json
import logging
import warnings

import pytest
import torch

from codec_worker.triton_support import FP_FUSION
from engine.backends import fused_ops
from engine.backends.layer_ops import EagerLayerOps, FusedLayerOps, fuses_by_default
from engine.backends.torch_fast import FastGenerator
from engine.backends.torch_generator import BatchGenerator
from engine.model.backbone import RotaryEmbedding, ZeroCenteredRMSNorm
from engine.requests import SamplingParams
from tests.engine.backends.test_torch_fast import KNOBS, TEXTS, assert_same, drive, prepare, preparer  # noqa: F401 (a fixture)
from tests.triton_aot import assert_compiles_for_h200

ATOL = RTOL = 2e-6


def _random(*shape: int, seed: int) -> torch.Tensor:
    return 3 * torch.randn(*shape, generator=torch.Generator().manual_seed(seed))


def _norm(dim: int, seed: int) -> ZeroCenteredRMSNorm:
    norm = ZeroCenteredRMSNorm(dim, eps=1e-6)
    with torch.no_grad():
        norm.weight.copy_(torch.randn(dim, generator=torch.Generator().manual_seed(seed)) * 0.5)
    return norm


def _fused() -> FusedLayerOps:
    """Fused ops for the kernels that take no rotary (its tables: 2 positions)."""
    return FusedLayerOps(RotaryEmbedding(2, 10_000.0), 2, torch.device("cpu"))


# ---- each kernel against the eager ops --------------------------------------------------------------


@pytest.mark.parametrize("cols", [96, 1000, 1])
def test_rms_norm_and_its_residual_add_equal_the_eager_norm(interpreted_fused_ops, cols: int) -> None:
    norm = _norm(cols, seed=cols)
    x, h = _random(2, 3, cols, seed=1), _random(2, 3, cols, seed=2)
    eager, fused = EagerLayerOps(RotaryEmbedding(2, 10_000.0)), _fused()
    with torch.no_grad():
        got = fused.norm(norm, x)
        assert got.shape == x.shape and got.is_contiguous()
        torch.testing.assert_close(got, eager.norm(norm, x), atol=ATOL, rtol=RTOL)
        total, normed = fused.add_norm(norm, x, h)
        want_total, want_normed = eager.add_norm(norm, x, h)
        assert torch.equal(total, want_total)  # one float32 add, rounded once either way
        torch.testing.assert_close(normed, want_normed, atol=ATOL, rtol=RTOL)


def _attention_case(tokens: int, head_dim: int, heads: int, kv_heads: int, seed: int):
    """Queries, keys and values as a decoder layer hands them over: slices of one projection's
    output (queries interleaved with their gates per head, keys and values after them)."""
    rows = 3
    width = heads * 2 * head_dim + 2 * kv_heads * head_dim
    projected = _random(rows, tokens, width, seed=seed)
    qg, k, v = projected.split((heads * 2 * head_dim, kv_heads * head_dim, kv_heads * head_dim), dim=-1)
    q = qg.view(rows, tokens, heads, 2 * head_dim)[..., :head_dim]
    return q, k.view(rows, tokens, kv_heads, head_dim), v.view(rows, tokens, kv_heads, head_dim).transpose(1, 2)


class _Attention(torch.nn.Module):
    def __init__(self, head_dim: int) -> None:
        super().__init__()
        self.q_norm, self.k_norm = _norm(head_dim, seed=1), _norm(head_dim, seed=2)


@pytest.mark.parametrize("tokens", [1, 5])
@pytest.mark.parametrize("head_dim,rotary_dim,heads,kv_heads", [(32, 32, 4, 2), (64, 16, 2, 2), (24, 24, 3, 1)])
def test_attention_inputs_equal_the_norms_rotary_and_cache_writes(
        interpreted_fused_ops, tokens: int, head_dim: int, rotary_dim: int, heads: int, kv_heads: int) -> None:
    """A decode step (one token a row: slots and positions [B]) and a prefill (expanded [B, T]
    views), partial rotary, grouped and plain heads: the same queries and keys back, and the same
    caches after, every other cell untouched; the rotary read from tables by position, up to the
    table's last row."""
    q, k, v = _attention_case(tokens, head_dim, heads, kv_heads, seed=head_dim + tokens)
    rows, capacity, slots_total = 3, 40, 6
    rope = RotaryEmbedding(rotary_dim, 10_000.0)
    slots = torch.tensor([4, 0, 2])
    if tokens == 1:
        positions = torch.tensor([7, 0, capacity - 1])
    else:
        slots = slots.view(rows, 1).expand(rows, tokens)
        positions = torch.arange(tokens).view(1, tokens) + torch.tensor([[0], [11], [capacity - tokens]])
    attn = _Attention(head_dim)
    caches = {name: [_random(slots_total, kv_heads, capacity, head_dim, seed=i) for i in (5, 6)]
              for name in ("eager", "fused")}
    eager, fused = EagerLayerOps(rope), FusedLayerOps(rope, capacity, torch.device("cpu"))
    with torch.no_grad():
        want = eager.attention_inputs(attn, q, k, v, eager.rotary(positions.view(rows, -1)), *caches["eager"], slots,
                                      positions)
        got = fused.attention_inputs(attn, q, k, v, fused.rotary(positions), *caches["fused"], slots, positions)
    for g, w, n in zip(got, want, (heads, kv_heads)):
        assert g.shape == (rows, n, tokens, head_dim) and g.is_contiguous()
        torch.testing.assert_close(g, w, atol=ATOL, rtol=RTOL)
    torch.testing.assert_close(caches["fused"][0], caches["eager"][0], atol=ATOL, rtol=RTOL)
    assert torch.equal(caches["fused"][1], caches["eager"][1])  # the values: copied


def test_the_rotary_tables_hold_the_values_the_eager_rotary_computes(interpreted_fused_ops) -> None:
    """Made once from RotaryEmbedding.cos_sin of every position, read by position: on CUDA one
    float32 op per element either way, so the same bits; on this CPU within an ulp (vectorised and
    scalar sin round alike only mostly)."""
    rope = RotaryEmbedding(16, 10_000.0)
    fused = FusedLayerOps(rope, 4096, torch.device("cpu"))
    positions = torch.tensor([[0], [1], [700], [4095]])
    cos, sin = rope.cos_sin(positions)
    torch.testing.assert_close(fused.cos_table[positions.view(-1)], cos.view(4, 16), atol=1e-7, rtol=0)
    torch.testing.assert_close(fused.sin_table[positions.view(-1)], sin.view(4, 16), atol=1e-7, rtol=0)
    assert fused.rotary(positions) == (fused.cos_table, fused.sin_table)


def _inputs_generator(tiny_model, max_positions: int, seed: int) -> tuple[FastGenerator, object]:
    """A fused fast path with random last frames and cache lengths, and the row tables of 4 rows:
    requests in slots 0 and 2, a CFG row of the first (fed its frame), a padding row."""
    from engine.backends.cuda_graphs import TableUpload
    from engine.backends.fast_step import HostRows

    gen = FastGenerator(tiny_model, max_batch=4, max_positions=max_positions, fused_kernels=True)
    step = gen.device_step
    assert gen.fused_kernels
    g = torch.Generator().manual_seed(seed)
    levels = torch.tensor(tiny_model.config.audio_heads)
    step.state.last_codes.copy_((torch.rand(step.state.last_codes.shape, generator=g) * levels).long())
    step.cache.lengths.copy_(torch.randint(0, max_positions, step.cache.lengths.shape, generator=g))
    host = HostRows.padding(4, step.cache.scratch)
    host.slot[:3], host.feed[:3], host.real[:3], host.commit[:3] = [0, 1, 2], [0, 0, 2], [True] * 3, [True, False, True]
    tables = gen.tables(4)
    TableUpload(4, tiny_model.device)(tables, host)
    return gen, tables


@pytest.mark.parametrize("span", [64, 1500])
def test_fused_decode_inputs_equal_the_eager_ones(interpreted_fused_ops, tiny_model, span: int) -> None:
    """The frame lookup, the embedder's LayerNorm and scale, the positions and the additive mask
    (span 1500: two mask blocks, the last partial): frames within float32 rounding, positions and
    mask exactly; the rotary is the tables, read by position in each layer."""
    gen, tables = _inputs_generator(tiny_model, max_positions=2048, seed=span)
    step = gen.device_step
    with torch.no_grad():
        want_x, want_pos, _, want_mask = step.eager_start_decode(tables, span)
        got_x, got_pos, got_rope, got_mask = step.start_decode(tables, span)  # the fused form: the ops are
    assert got_x.shape == want_x.shape and got_x.is_contiguous()
    torch.testing.assert_close(got_x, want_x, atol=1e-5, rtol=1e-5)
    assert torch.equal(got_pos, want_pos) and torch.equal(got_mask, want_mask)
    assert got_rope[0] is step.ops.cos_table and got_rope[1] is step.ops.sin_table


@pytest.mark.parametrize("tokens", [1, 4])
def test_sigmoid_gate_equals_the_eager_gate_on_the_gate_view(interpreted_fused_ops, tokens: int) -> None:
    rows, heads, head_dim = 3, 4, 40  # 3 * 4 * 160 values: several flat blocks, the last one partial
    qg = _random(rows, tokens, heads, 2 * head_dim, seed=tokens)
    gate = qg[..., head_dim:]
    out = _random(rows, tokens, heads * head_dim, seed=9)
    want = EagerLayerOps(RotaryEmbedding(2, 10_000.0)).sigmoid_gate(out, gate)
    got = _fused().sigmoid_gate(out, gate)
    assert got.shape == out.shape
    torch.testing.assert_close(got, want, atol=ATOL, rtol=RTOL)


@pytest.mark.parametrize("width", [192, 1500, 1])
def test_silu_mul_equals_swiglus_activation(interpreted_fused_ops, width: int) -> None:
    gate_up = _random(2, 3, 2 * width, seed=width)
    want = EagerLayerOps(RotaryEmbedding(2, 10_000.0)).silu_mul(gate_up)
    got = _fused().silu_mul(gate_up)
    assert got.shape == (2, 3, width)
    torch.testing.assert_close(got, want, atol=ATOL, rtol=RTOL)


def _sampling_case(rows: int, seed: int) -> dict:
    """Inputs of sample_heads for ``rows`` rows over 5 channels of 8, 6, 5, 8 and 3 codes: the knobs
    of every kind, rows reading other slots, two rows each other's CFG branch."""
    gen = torch.Generator().manual_seed(seed)
    levels = [8, 6, 5, 8, 3]
    grid, valid = torch.zeros(5, 8, dtype=torch.long), torch.zeros(5, 8, dtype=torch.bool)
    offset = 0
    for c, n in enumerate(levels):
        grid[c, :n], valid[c, :n] = torch.arange(offset, offset + n), True
        offset += n
    slots_total = rows + 3
    knobs = torch.tensor([[0.0, 1.0, 0], [1.0, 2.0, 3], [0.7, 1.0, 1], [1.3, 1.5, 8], [0.0, 3.0, 2], [0.9, 1.0, 0]])
    knobs = knobs[torch.arange(slots_total) % len(knobs)]
    uncond = torch.arange(rows)
    uncond[:2] = uncond[:2].flip(0)
    return dict(head=3 * torch.randn(rows, offset, generator=gen), grid_index=grid, grid_valid=valid, uncond=uncond,
                cfg_scale=torch.where(torch.arange(rows) < 2, 2.5, 1.0), slots=torch.randperm(slots_total, generator=gen)[:rows],
                counts=torch.randint(0, 3, (slots_total, 5, 8), generator=gen), penalty=knobs[:, 1],  # strided views
                temperature=knobs[:, 0], top_k=knobs[:, 2].long(),
                seeds=torch.randint(0, 2**63 - 1, (slots_total,), generator=gen),
                frames=torch.randint(0, 3000, (slots_total,), generator=gen))


def _eager_sampling(case: dict) -> torch.Tensor:
    from engine.sampling import cfg_combine, repetition_penalty, sample_codes

    slots = case["slots"]
    logits = case["head"][:, case["grid_index"]].masked_fill(~case["grid_valid"], float("-inf"))
    logits = cfg_combine(logits, logits[case["uncond"]], case["cfg_scale"])
    logits = repetition_penalty(logits, case["counts"][slots] > 0, case["penalty"][slots])
    return sample_codes(logits, case["temperature"][slots], case["top_k"][slots], case["seeds"][slots], case["frames"][slots])


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_sample_heads_draws_the_codes_engine_sampling_draws(interpreted_fused_ops, seed: int) -> None:
    """Greedy and sampled, top-k of 1, 2, 3 and all, repetition penalties, CFG: the same codes,
    noise included (the same splitmix64 of seed, frame, channel and code). The lanes past a
    channel's levels do no arithmetic on -inf (the interpreter would warn: under -W error the
    fast path's check refused the kernels)."""
    case = _sampling_case(rows=9, seed=seed)
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        got = interpreted_fused_ops.sample_heads(**case)
    assert got.dtype == torch.int64 and got.shape == (9, 5)
    assert torch.equal(got, _eager_sampling(case))


def test_sample_heads_gives_minus_one_to_a_head_with_no_finite_logit(interpreted_fused_ops) -> None:
    case = _sampling_case(rows=3, seed=4)
    case["head"][1, :8] = float("nan")  # channel 0 of row 1 (and, through CFG, of row 0)
    got = interpreted_fused_ops.sample_heads(**case)
    assert torch.equal(got, _eager_sampling(case)) and got[1, 0] == -1


def test_kernels_refuse_shapes_they_cannot_walk(interpreted_fused_ops) -> None:
    with pytest.raises(ValueError, match="weights of shape"):
        fused_ops.rms_norm(torch.zeros(2, 8), torch.zeros(7), 1e-6)
    with pytest.raises(ValueError, match="cannot add"):
        fused_ops.add_rms_norm(torch.zeros(2, 8), torch.zeros(3, 8), torch.zeros(8), 1e-6)
    x = torch.zeros(2, 3, 4, 8)
    with pytest.raises(ValueError, match="contiguous"):
        fused_ops.sigmoid_gate(torch.zeros(6, 32), x.transpose(2, 3))
    with pytest.raises(ValueError, match="even"):
        fused_ops.silu_mul(torch.zeros(2, 7))
    with pytest.raises(ValueError, match="cannot gate"):
        fused_ops.sigmoid_gate(torch.zeros(6, 31), x)
    case = _sampling_case(rows=2, seed=0)
    case["counts"] = case["counts"][:, :, :5]
    with pytest.raises(ValueError, match="do not match a grid of 5 channels x 8 codes"):
        fused_ops.sample_heads(**case)
    values, table, caches = torch.zeros(2, 4, 3, 8), torch.zeros(16, 8), (torch.zeros(5, 4, 16, 8), torch.zeros(5, 4, 16, 8))

    def attention_inputs(q=x, k=x, v=values, cos=table, sin=table, kc=caches[0], slots=torch.zeros(2, 3).long()):
        fused_ops.attention_inputs(q, k, v, torch.zeros(8), torch.zeros(8), 1e-6, 1e-6, cos, sin, kc, caches[1], slots,
                                   slots)

    with pytest.raises(ValueError, match="queries"):
        attention_inputs(q=x.transpose(2, 3))
    with pytest.raises(ValueError, match="not evenly spaced"):
        attention_inputs(k=x.transpose(0, 1))
    with pytest.raises(ValueError, match="do not fit queries"):
        attention_inputs(k=torch.zeros(2, 3, 5, 8))
    with pytest.raises(ValueError, match=r"tables \[positions >= 16, rot\] with an even rot <= 8"):
        attention_inputs(cos=torch.zeros(15, 8), sin=torch.zeros(15, 8))
    with pytest.raises(ValueError, match="even rot"):
        attention_inputs(cos=torch.zeros(16, 5), sin=torch.zeros(16, 5))
    with pytest.raises(ValueError, match="do not fit keys"):
        attention_inputs(v=values[:, :2])
    with pytest.raises(ValueError, match="do not fit keys"):
        attention_inputs(kc=torch.zeros(5, 4, 16, 8).transpose(2, 3))
    with pytest.raises(ValueError, match=r"expected slots and positions \[2\] or \[2, 3\]"):
        attention_inputs(slots=torch.zeros(2, 2).long())
    with pytest.raises(ValueError, match=r"expected offsets \[5\]"):
        fused_ops.embed_frames(torch.zeros(3, 5).long(), torch.zeros(2).long(), torch.zeros(4).long(), torch.zeros(20, 4))
    with pytest.raises(ValueError, match="a scale of one value"):
        fused_ops.decode_inputs(torch.zeros(2, 8), 1e-5, torch.ones(2), torch.zeros(2).long(), torch.zeros(3).long(), 16)
    with pytest.raises(ValueError, match="contiguous h"):
        fused_ops.decode_inputs(torch.zeros(8, 2).t(), 1e-5, torch.ones(1), torch.zeros(2).long(), torch.zeros(3).long(), 16)
    codes = torch.zeros(2, 5, dtype=torch.long)
    state = dict(thresholds=torch.zeros(3), frames=torch.zeros(3, dtype=torch.long), windows=torch.zeros(3, dtype=torch.long),
                 last_codes=torch.zeros(3, 5, dtype=torch.long), history=torch.zeros(3, 4, 5, dtype=torch.uint8),
                 counts=torch.zeros(3, 5, 8, dtype=torch.long))
    with pytest.raises(ValueError, match=r"out must be a contiguous \[2, 7\]"):
        fused_ops.commit_frames(codes, torch.zeros(2), torch.full((5,), 8), torch.arange(2), torch.ones(2, dtype=torch.bool),
                                2, **state, out=torch.zeros(2, 6, dtype=torch.long))
    with pytest.raises(ValueError, match=r"counting the step's tokens takes contiguous lengths and real \[2\]"):
        fused_ops.commit_frames(codes, torch.zeros(2), torch.full((5,), 8), torch.arange(2), torch.ones(2, dtype=torch.bool),
                                2, **state, out=torch.zeros(2, 7, dtype=torch.long), lengths=torch.zeros(3, dtype=torch.long))


def test_without_the_interpreter_the_kernels_refuse_cpu_tensors() -> None:
    assert not fused_ops.interpreted()
    assert fused_ops.unavailable_reason(torch.device("cpu")).startswith(("Triton compiles for CUDA", "Triton does not"))
    with pytest.raises(RuntimeError, match="cannot run here"):
        fused_ops.silu_mul(torch.zeros(2, 8))


# ---- the fast path with the fused kernels -----------------------------------------------------------


def test_fast_path_with_fused_kernels_gives_the_reference_frames(interpreted_fused_ops, tiny_model, preparer) -> None:  # noqa: F811
    """Greedy, sampled with top-k and a repetition penalty, and CFG joining a running batch: on this
    checkpoint in float32 the fused kernels' roundings change no sampled code, so the frames are
    the reference loop's (10 frames each: the interpreter runs a program at a time)."""
    import dataclasses

    reqs = [prepare(preparer, tiny_model, f"{name}-fused", TEXTS[i], dataclasses.replace(KNOBS[name], max_frames=10))
            for i, name in enumerate(("greedy", "topk_penalty", "cfg_onset"))]
    gen = FastGenerator(tiny_model, max_batch=4, max_positions=512, fused_kernels=True)
    assert gen.fused_kernels and isinstance(gen.device_step.ops, FusedLayerOps)
    ref = drive(BatchGenerator(tiny_model, max_batch=4), {0: reqs[:2], 3: reqs[2:]})
    got = drive(gen, {0: reqs[:2], 3: reqs[2:]})
    for req in reqs:
        assert_same(ref, got, req.request_id)
        assert ref.codes(req.request_id).shape == (32, 10)


def test_a_fused_decode_step_launches_under_a_third_of_the_eager_kernels(interpreted_fused_ops, tiny_model) -> None:
    """float32 (bf16 adds 18 casts to the eager layer and none to the fused one): 4 matrix products
    (the last adding the residual), attention (its additive mask made once per step) and 5 fused
    kernels (the queries' and keys' one also writes both caches). The inputs are the frame
    embedder's 3 products and 2 kernels, 5 launches instead of 18; the step's end samples all heads
    in one kernel and commits every row's frame (and counts its token) in another: 5 launches
    instead of 146 (a full-size step: 150 instead of 892, bench/kernel_count.py)."""
    from bench.kernel_count import count_step

    eager = count_step(FastGenerator(tiny_model, max_batch=2, max_positions=64, fused_kernels=False))
    fused = count_step(FastGenerator(tiny_model, max_batch=2, max_positions=64, fused_kernels=True))
    assert not eager.fused and fused.fused
    assert (eager.inputs, eager.layer, eager.end) == (18, 52, 146), (eager.layer_aten, eager.end_aten)
    assert (fused.inputs, fused.layer, fused.end) == (5, 10, 5), (fused.layer_aten, fused.end_aten)
    # per layer: 3 products and one adding the residual, attention; the rest is the 5 fused kernels
    assert fused.layer_aten == {"mm": 3, "addmm": 1, "_scaled_dot_product_flash_attention_for_cpu": 1}
    # the end: the heads' and stop head's products; the rest is 3 fused kernels (norm, sampling, commit)
    assert fused.end_aten == {"addmm": 2}
    assert fused.step * 3 < eager.step


def test_the_kernel_count_bench_prints_and_writes_both_forms(interpreted_fused_ops, tiny_gepard_dir, tmp_path,
                                                            monkeypatch, capsys) -> None:
    """bench/kernel_count.py on the tiny checkpoint (in its own process it turns the interpreter on
    itself when there is no GPU; here the fixture has), and on a tiny codec: its 96 snake
    activations and 97 convs that keep a tail, as the published codec has."""
    from bench import kernel_count, torch_fast

    monkeypatch.setattr(torch_fast, "engine_checkpoint_tiny", lambda: tiny_gepard_dir)
    kernel_count.main(["--size", "tiny", "--json", str(tmp_path / "count.json")])
    out = capsys.readouterr().out
    assert "Triton interpreted" in out and "codec (tiny), one decode of one stream's frames:" in out
    written = json.loads((tmp_path / "count.json").read_text())
    counts = written["counts"]
    assert counts["eager"]["step"] == 18 + 2 * 52 + 146 and counts["fused"]["step"] == 5 + 2 * 10 + 5
    assert counts["fused"]["fused"] is True
    assert (counts["eager"]["prefill"], counts["fused"]["prefill"]) == (260, 34)  # one prompt to its first frame
    codec = written["codec"]
    assert list(codec) == [name for name, _, _ in kernel_count.CODEC_DECODES]
    assert codec["windowed, fused"]["kernels"] == {"_snake_then_leaky": 96}
    assert codec["carrying state, fused"]["kernels"] == {"_extend_with_tail": 97}  # the activations applied by it
    assert codec["windowed, eager"]["triton"] == codec["carrying state, eager"]["triton"] == 0
    totals = [codec[name]["total"] for name in ("windowed, fused", "carrying state, fused", "windowed, eager",
                                                "carrying state, eager")]
    assert totals == sorted(totals) and totals[1] * 5 < totals[2], totals
    for name in ("windowed, fused", "carrying state, fused"):  # the sums and means added by the kernels
        assert "add" not in codec[name]["aten"] and codec[name]["aten"]["div"] == 1


# ---- when the layers stay eager -----------------------------------------------------------------------


def _checked_generator(tiny_model, caplog, max_batch: int = 2) -> FastGenerator:
    """A fast path asked for the fused kernels, the warnings of its start-up checks captured."""
    with caplog.at_level(logging.WARNING, logger="engine.backends.torch_fast"):
        return FastGenerator(tiny_model, max_batch=max_batch, max_positions=64, fused_kernels=True)


def test_default_is_on_for_cuda_unless_compiled() -> None:
    assert fuses_by_default(torch.device("cuda"), compiled=False)
    assert not fuses_by_default(torch.device("cuda", 1), compiled=True)  # Inductor fuses them itself
    assert not fuses_by_default(torch.device("cpu"), compiled=False)


def test_on_cpu_the_default_stays_eager_and_asking_warns(tiny_model, caplog) -> None:
    with caplog.at_level(logging.WARNING, logger="engine.backends.torch_fast"):
        assert not FastGenerator(tiny_model, max_batch=2, max_positions=64).fused_kernels
        assert "stay eager" not in caplog.text  # the default asks nothing on CPU
        gen = FastGenerator(tiny_model, max_batch=2, max_positions=64, fused_kernels=True)
    assert not gen.fused_kernels and isinstance(gen.device_step.ops, EagerLayerOps)
    assert "the layers' element-wise ops stay eager: RuntimeError: the fused kernels cannot run here: Triton " in caplog.text


def test_a_kernel_that_computes_something_else_leaves_the_layers_eager(interpreted_fused_ops, tiny_model, monkeypatch,
                                                                       caplog) -> None:
    real = interpreted_fused_ops.silu_mul
    monkeypatch.setattr(interpreted_fused_ops, "silu_mul", lambda gate_up: real(gate_up) * 1.001)
    gen = _checked_generator(tiny_model, caplog)
    assert not gen.fused_kernels
    assert "stay eager: RuntimeError: silu_mul differs from the eager op by up to" in caplog.text


def test_a_kernel_that_fails_to_compile_is_logged_by_its_first_line(interpreted_fused_ops, tiny_model, monkeypatch,
                                                                      caplog) -> None:
    def does_not_compile(gate_up):  # what Triton raises: a first line, then pages of its IR
        raise RuntimeError("PassManager::run failed\n" + "module { tt.func ... }\n" * 200)

    monkeypatch.setattr(interpreted_fused_ops, "silu_mul", does_not_compile)
    gen = _checked_generator(tiny_model, caplog)
    assert not gen.fused_kernels
    assert "stay eager: RuntimeError: PassManager::run failed" in caplog.text and "tt.func" not in caplog.text


def test_a_kernel_that_loses_the_device_stops_the_start(interpreted_fused_ops, tiny_model, monkeypatch, caplog) -> None:
    """Not a kernel to leave out: the eager ops would fail on that device too."""
    def lost(gate_up):
        raise torch.AcceleratorError("CUDA error: an illegal memory access was encountered")

    monkeypatch.setattr(interpreted_fused_ops, "silu_mul", lost)
    with pytest.raises(torch.AcceleratorError, match="illegal memory access"):
        _checked_generator(tiny_model, caplog)
    assert "stay eager" not in caplog.text


def test_a_sampling_kernel_that_draws_other_codes_leaves_the_step_eager(interpreted_fused_ops, tiny_model, monkeypatch,
                                                                        caplog) -> None:
    real = interpreted_fused_ops.sample_heads
    monkeypatch.setattr(interpreted_fused_ops, "sample_heads", lambda *args: (real(*args) + 1) % 2)
    gen = _checked_generator(tiny_model, caplog)
    assert not gen.fused_kernels
    assert "stay eager: RuntimeError: sample_heads differs from engine.sampling in " in caplog.text


def test_a_commit_kernel_that_leaves_another_state_leaves_the_step_eager(interpreted_fused_ops, tiny_model,
                                                                         monkeypatch, caplog) -> None:
    real = interpreted_fused_ops.commit_frames

    def forgets_the_window(*args, **kwargs):
        counts = args[11]
        saved = counts.clone()
        real(*args, **kwargs)
        counts.copy_(saved)

    monkeypatch.setattr(interpreted_fused_ops, "commit_frames", forgets_the_window)
    gen = _checked_generator(tiny_model, caplog, max_batch=4)
    assert not gen.fused_kernels
    assert "stay eager: RuntimeError: commit_frames leaves other counts than the eager commit" in caplog.text


def test_decode_inputs_that_give_other_positions_leave_the_step_eager(interpreted_fused_ops, tiny_model, monkeypatch,
                                                                     caplog) -> None:
    real = interpreted_fused_ops.decode_inputs

    def one_late(h, eps, scale, slots, lengths, span):
        positions, mask = real(h, eps, scale, slots, lengths, span)
        return positions + 1, mask

    monkeypatch.setattr(interpreted_fused_ops, "decode_inputs", one_late)
    gen = _checked_generator(tiny_model, caplog)
    assert not gen.fused_kernels
    assert "stay eager: RuntimeError: the fused decode inputs give other positions or another attention mask" in caplog.text
    assert not gen.device_step.cache.lengths.any() and not gen.device_step.state.last_codes.any()  # the check's randoms


def test_a_frame_lookup_that_reads_other_rows_leaves_the_step_eager(interpreted_fused_ops, tiny_model, monkeypatch,
                                                                   caplog) -> None:
    real = interpreted_fused_ops.embed_frames
    monkeypatch.setattr(interpreted_fused_ops, "embed_frames",
                        lambda last_codes, feed, offsets, table: real(last_codes, feed, offsets + 1, table))
    gen = _checked_generator(tiny_model, caplog)
    assert not gen.fused_kernels
    assert "stay eager: RuntimeError: the fused decode inputs embed frames otherwise than the eager ones" in caplog.text


def test_another_frame_embedder_leaves_the_step_eager(interpreted_fused_ops, tiny_model, caplog) -> None:
    """The fused inputs compute Linear, GELU, Linear, LayerNorm: a projection of another form is refused."""
    proj = tiny_model.frame_embedder.audio_embed_proj
    gelu, proj[1] = proj[1], torch.nn.Tanh()
    try:
        gen = _checked_generator(tiny_model, caplog)
    finally:
        proj[1] = gelu
    assert not gen.fused_kernels
    assert "stay eager: RuntimeError: the frame embedder's projection is not Linear, GELU, Linear" in caplog.text


def test_a_commit_kernel_that_does_not_count_the_token_leaves_the_step_eager(interpreted_fused_ops, tiny_model,
                                                                            monkeypatch, caplog) -> None:
    commit_frames = interpreted_fused_ops.commit_frames

    def forgets_the_token(*args, lengths=None, real=None):
        commit_frames(*args)

    monkeypatch.setattr(interpreted_fused_ops, "commit_frames", forgets_the_token)
    gen = _checked_generator(tiny_model, caplog, max_batch=4)
    assert not gen.fused_kernels
    assert "stay eager: RuntimeError: commit_frames leaves other lengths than the eager commit" in caplog.text
    assert not gen.device_step.cache.lengths.any()


@pytest.mark.parametrize("slots", [1, 2, 3, 8])
def test_the_commit_check_passes_and_leaves_the_state_clear(interpreted_fused_ops, tiny_model, slots: int) -> None:
    """The start-up check runs the commit both ways from a random state (a CFG branch and a padding
    row once there are slots for them), then clears it: no request may start from its randoms."""
    gen = FastGenerator(tiny_model, max_batch=slots, max_positions=64, fused_kernels=True)
    assert gen.fused_kernels
    st = gen.device_step.state
    assert not st.frames.any() and not st.counts.any() and not st.history.any() and not st.window.any()


def test_a_compiled_step_keeps_the_eager_ops(interpreted_fused_ops, tiny_model, caplog) -> None:
    with caplog.at_level(logging.WARNING, logger="engine.backends.torch_fast"):
        gen = FastGenerator(tiny_model, max_batch=2, max_positions=64, compiled=True, fused_kernels=True)
    assert not gen.fused_kernels
    assert "torch.compile, which fuses these ops itself" in caplog.text


# ---- compiled for the H200, and on a GPU ----------------------------------------------------------------

SIGNATURES = {
    "_rms_norm": ({"x_ptr": "P", "h_ptr": "P", "w_ptr": "P", "sum_ptr": "P", "out_ptr": "P", "cols": "i32",
                   "eps": "fp32", "ADD": "constexpr", "BLOCK": "constexpr"}, {"ADD": True, "BLOCK": 1024}),
    "_attention_inputs": ({"q_ptr": "P", "k_ptr": "P", "v_ptr": "P", "qw_ptr": "P", "kw_ptr": "P", "cos_ptr": "*fp32",
                           "sin_ptr": "*fp32", "q_out_ptr": "P", "k_out_ptr": "P", "kc_ptr": "P", "vc_ptr": "P",
                           "slot_ptr": "*i64", "pos_ptr": "*i64", "heads": "i32", "kv_heads": "i32", "tokens": "i32",
                           "q_token": "i32", "q_head": "i32", "k_token": "i32", "k_head": "i32", "head_dim": "i32",
                           "rot": "i32", "table_rows": "i32", "q_eps": "fp32", "k_eps": "fp32", "v_row": "i32",
                           "v_head": "i32", "v_token": "i32", "slot_row": "i32", "slot_token": "i32", "pos_row": "i32",
                           "pos_token": "i32", "c_slot": "N", "c_head": "i32", "c_pos": "i32", "BLOCK": "constexpr"},
                          {"BLOCK": 256}),
    "_embed_frames": ({"last_ptr": "*i64", "feed_ptr": "*i64", "offsets_ptr": "*i64", "table_ptr": "P", "out_ptr": "P",
                       "channels": "i32", "dim": "i32", "table_rows": "i32", "BLOCK": "constexpr"}, {"BLOCK": 128}),
    "_decode_inputs": ({"h_ptr": "P", "scale_ptr": "P", "slot_ptr": "*i64", "lengths_ptr": "*i64", "pos_ptr": "*i64",
                        "mask_ptr": "P", "hidden": "i32", "span": "N", "eps": "fp32", "H_BLOCK": "constexpr",
                        "SPAN_BLOCK": "constexpr"}, {"H_BLOCK": 1024, "SPAN_BLOCK": 1024}),
    "_sigmoid_gate": ({"out_ptr": "P", "gate_ptr": "P", "y_ptr": "P", "numel": "N", "width": "i32", "head_dim": "i32",
                       "token_stride": "i32", "head_stride": "i32", "BLOCK": "constexpr"}, {"BLOCK": 1024}),
    "_silu_mul": ({"gate_up_ptr": "P", "y_ptr": "P", "numel": "N", "width": "i32", "BLOCK": "constexpr"}, {"BLOCK": 1024}),
    "_sample_heads": ({"head_ptr": "P", "head_stride": "i32", "grid_ptr": "*i64", "valid_ptr": "*i1", "uncond_ptr": "*i64",
                       "cfg_ptr": "*fp32", "slot_ptr": "*i64", "counts_ptr": "*i64", "penalty_ptr": "*fp32",
                       "temperature_ptr": "*fp32", "top_k_ptr": "*i64", "seed_ptr": "*i64", "frame_ptr": "*i64",
                       "codes_ptr": "*i64", "channels": "N", "levels": "i32", "noise_scale": "fp32", "noise_min": "fp32",
                       "noise_max": "fp32", "NOISE_SHIFT": "constexpr", "LEVELS": "constexpr"},
                      {"NOISE_SHIFT": 40, "LEVELS": 8}),
    "_commit_frames": ({"codes_ptr": "*i64", "stop_ptr": "P", "levels_ptr": "*i64", "slot_ptr": "*i64",
                        "commit_ptr": "*i1", "threshold_ptr": "*fp32", "frames_ptr": "*i64", "window_ptr": "*i64",
                        "last_ptr": "*i64", "history_ptr": "*u8", "counts_ptr": "*i64", "out_ptr": "*i64",
                        "lengths_ptr": "*i64", "real_ptr": "*i1", "channels": "N", "max_level": "i32", "ring": "i32",
                        "scratch": "i32", "CHANNELS": "constexpr", "COUNT_TOKEN": "constexpr"},
                       {"CHANNELS": 32, "COUNT_TOKEN": True}),
}


@pytest.mark.parametrize("numel", ["i32", "i64"])  # Triton types an int argument by its value
@pytest.mark.parametrize("pointer", ["*bf16", "*fp16", "*fp32"])
@pytest.mark.parametrize("name", list(SIGNATURES))
def test_kernels_compile_for_an_h200_with_no_gpu_here(name: str, pointer: str, numel: str) -> None:
    """Triton's own ptxas builds each kernel for sm_90: what the interpreter does not check (types,
    the int64 offsets, the casts of the loads and stores) is checked here."""
    types, constexprs = SIGNATURES[name]
    signature = {arg: pointer if kind == "P" else numel if kind == "N" else kind for arg, kind in types.items()}
    fp_fusion = fused_ops.SAMPLE_FP_FUSION if name == "_sample_heads" else FP_FUSION  # as each is launched
    assert_compiles_for_h200(fused_ops, name, signature, constexprs, fp_fusion)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA: part 0 of bench/gpu_session.sh runs it")
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_on_cuda_the_fast_path_fuses_by_default_and_keeps_its_frames(dtype: torch.dtype, tiny_gepard_dir) -> None:
    """On the device, the kernels as Triton compiles them pass their check in the model's dtype, and
    greedy requests through the replayed graphs end as the eager ops' do, with the same frames in
    float32 (bf16 rounds other products otherwise, so there only the finish is compared)."""
    from engine.backends.torch_backend import TorchEngine, TorchEngineConfig
    from engine.model.gepard import GepardModel
    from engine.requests import SynthesisRequest

    model = GepardModel.from_pretrained(tiny_gepard_dir, device=torch.device("cuda"), dtype=dtype)
    engine = TorchEngine(model, TorchEngineConfig(max_batch=1, path="reference"))
    try:
        reqs = [engine.prepare(SynthesisRequest(f"cuda-{i}", text, None, SamplingParams(temperature=0.0)))
                for i, text in enumerate(TEXTS[:3])]
    finally:
        import asyncio

        asyncio.run(engine.aclose())
    fused = FastGenerator(model, max_batch=4, max_positions=512)
    eager = FastGenerator(model, max_batch=4, max_positions=512, fused_kernels=False)
    assert fused.fused_kernels and not eager.fused_kernels
    want, got = drive(eager, {0: reqs[:2], 2: reqs[2:]}), drive(fused, {0: reqs[:2], 2: reqs[2:]})
    for req in reqs:
        assert got.finish[req.request_id] == want.finish[req.request_id]
        if dtype == torch.float32:
            assert torch.equal(got.codes(req.request_id), want.codes(req.request_id)), req.request_id
