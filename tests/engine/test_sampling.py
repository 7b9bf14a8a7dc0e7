import torch

from engine.sampling import cfg_combine, repetition_penalty, sample_codes, seen_mask, stop_decision, top_k_mask, uniform_noise

NEG = float("-inf")


def _rows(n, value):
    return torch.full((n,), value)


def test_noise_is_a_function_of_seed_step_channel_code():
    a = uniform_noise(torch.tensor([7, 7, 8]), torch.tensor([3, 3, 3]), 32, 8)
    assert torch.equal(a[0], a[1]) and not torch.equal(a[0], a[2])
    b = uniform_noise(torch.tensor([7]), torch.tensor([4]), 32, 8)
    assert not torch.equal(a[0], b[0])
    assert float(a.min()) > 0.0 and float(a.max()) < 1.0


def test_sampling_matches_softmax_distribution():
    n = 40_000
    logits = torch.tensor([[2.0, 1.0, 0.0, NEG]]).expand(n, 1, 4)
    codes = sample_codes(logits, _rows(n, 1.0), torch.zeros(n, dtype=torch.long), torch.arange(n), torch.zeros(n, dtype=torch.long))
    freq = torch.bincount(codes.flatten(), minlength=4).float() / n
    want = torch.softmax(torch.tensor([2.0, 1.0, 0.0, NEG]), -1)
    assert (freq - want).abs().max() < 0.01
    assert freq[3] == 0


def test_temperature_sharpens_and_zero_is_greedy():
    n = 20_000
    logits = torch.tensor([[1.0, 0.0]]).expand(n, 1, 2)
    seeds, steps, k = torch.arange(n), torch.zeros(n, dtype=torch.long), torch.zeros(n, dtype=torch.long)
    hot = sample_codes(logits, _rows(n, 2.0), k, seeds, steps).float().mean()
    cold = sample_codes(logits, _rows(n, 0.5), k, seeds, steps).float().mean()
    assert cold < hot
    assert sample_codes(logits, _rows(n, 0.0), k, seeds, steps).sum() == 0


def test_top_k_keeps_only_the_best_codes():
    logits = torch.tensor([[[3.0, 1.0, 2.0, 0.0]]])
    masked = top_k_mask(logits, torch.tensor([2]))
    assert torch.isinf(masked[0, 0, 1]) and torch.isinf(masked[0, 0, 3])
    assert torch.equal(top_k_mask(logits, torch.tensor([0])), logits)
    n = 5000
    codes = sample_codes(logits.expand(n, 1, 4), _rows(n, 5.0), torch.full((n,), 2), torch.arange(n), torch.zeros(n, dtype=torch.long))
    assert set(codes.flatten().tolist()) == {0, 2}


def test_repetition_penalty_divides_positive_and_multiplies_negative():
    logits = torch.tensor([[[2.0, -2.0, 1.0]]])
    seen = torch.tensor([[[True, True, False]]])
    out = repetition_penalty(logits, seen, torch.tensor([2.0]))
    assert out.tolist() == [[[1.0, -4.0, 1.0]]]
    assert torch.equal(repetition_penalty(logits, seen, torch.tensor([1.0])), logits)


def test_seen_mask_ignores_empty_slots():
    hist = torch.tensor([[[1, 0], [-1, -1], [3, 2]]])  # W=3, C=2
    mask = seen_mask(hist, 4)
    assert mask[0, 0].tolist() == [False, True, False, True]
    assert mask[0, 1].tolist() == [True, False, True, False]


def test_cfg_combine_and_padding():
    cond = torch.tensor([[[2.0, 0.0, NEG]]])
    uncond = torch.tensor([[[1.0, 1.0, NEG]]])
    out = cfg_combine(cond, uncond, torch.tensor([3.0]))
    assert out[0, 0, :2].tolist() == [4.0, -2.0] and torch.isinf(out[0, 0, 2])


def test_stop_decision_is_strictly_greater_than_threshold():
    logits = torch.tensor([0.0, 0.1, -0.1])
    assert stop_decision(logits, torch.full((3,), 0.5)).tolist() == [False, True, False]


# -- extreme noise values (issue 9, defect 2) ------------------------------------------------------

import pytest  # noqa: E402

from engine.sampling import (  # noqa: E402
    NOISE_MAX,
    NOISE_MIN,
    bits_to_uniform,
    describe_invalid_code,
    gumbel_argmax,
    invalid_codes,
    noise_bits,
)
from tests.engine.extreme_noise import CODEC_REJECT, ENGINE_KILLER, LEVELS, TOP, seed_for  # noqa: E402

LEVELS_T = torch.tensor(LEVELS)
PADDING = torch.arange(8).view(1, 8) >= LEVELS_T.view(32, 1)  # [32, 8] True where code >= L_k


def extreme_batch(value: int) -> tuple[torch.Tensor, torch.Tensor, list[tuple[int, int]]]:
    """One row per (channel, code) cell of the [32, 8] grid whose noise is ``value`` there."""
    cells = [(c, k) for c in range(32) for k in range(8)]
    frames = [(7 * c + k) % 11 for c, k in cells]  # a spread of frame indices, not only frame 0
    seeds = [seed_for(value, f, c, k) for f, (c, k) in zip(frames, cells)]
    return torch.tensor(seeds), torch.tensor(frames), cells


def test_every_24_bit_value_maps_strictly_inside_zero_one():
    bits = torch.arange(1 << 24)
    u = bits_to_uniform(bits)
    assert float(u.min()) == NOISE_MIN > 0.0 and float(u.max()) == NOISE_MAX < 1.0
    assert torch.isfinite(-torch.log(-torch.log(u))).all()
    # only the top value moved (it used to round to exactly 1.0): every seeded frame is unchanged
    old = (bits.to(torch.float32) + 0.5) / float(1 << 24)
    assert (old != u).nonzero().flatten().tolist() == [TOP] and float(old[TOP]) == 1.0


def test_the_pinned_seeds_put_the_top_value_on_a_padding_cell():
    for seed, frame, channel, code in (ENGINE_KILLER, CODEC_REJECT):
        bits = noise_bits(torch.tensor([seed]), torch.tensor([frame]), 32, 8)
        assert int(bits[0, channel, code]) == TOP and code >= LEVELS[channel]


@pytest.mark.parametrize("value", [0, TOP])
@pytest.mark.parametrize("temperature, top_k", [(0.4, 0), (1.0, 0), (10.0, 0), (0.4, 3), (1e-30, 0), (float("inf"), 0)])
def test_extreme_noise_on_any_cell_never_yields_a_code_past_the_levels(value, temperature, top_k):
    seeds, frames, cells = extreme_batch(value)
    n = len(cells)
    bits = noise_bits(seeds, frames, 32, 8)
    assert all(int(bits[i, c, k]) == value for i, (c, k) in enumerate(cells))
    g = torch.Generator().manual_seed(value)
    logits = (torch.randn(n, 32, 8, generator=g) * 3).masked_fill(PADDING, float("-inf"))
    codes = sample_codes(logits, _rows(n, temperature), torch.full((n,), top_k), seeds, frames)
    assert not invalid_codes(codes, LEVELS_T).any()
    assert ((codes >= 0) & (codes < LEVELS_T)).all()


def test_a_masked_cell_cannot_win_even_with_infinite_noise():
    logits = torch.tensor([[[0.0, -5.0, float("-inf")]]])
    u = torch.tensor([[[0.5, 0.5, 1.0]]])  # u = 1.0: Gumbel +inf on the padding cell
    assert gumbel_argmax(logits, torch.tensor([1.0]), u).tolist() == [[0]]
    assert gumbel_argmax(logits, torch.tensor([float("inf")]), u).item() in (0, 1)


def test_a_head_without_any_finite_logit_gets_an_invalid_code():
    logits = torch.tensor([[[1.0, 2.0], [float("nan"), float("-inf")]]])
    codes = gumbel_argmax(logits, torch.tensor([0.4]), torch.full((1, 2, 2), 0.5))
    assert codes.tolist() == [[1, -1]]
    assert invalid_codes(codes, torch.tensor([2, 2])).tolist() == [True]
    assert describe_invalid_code(codes[0], [2, 2]) == "sampled code -1 on channel 1 outside [0, 2)"


def test_invalid_codes_flags_rows_past_their_channel_levels():
    codes = torch.zeros(3, 32, dtype=torch.long)
    codes[1, 31] = 6  # channel 31 has 6 levels: past its embedding table
    codes[2, 0] = 7  # channel 0 has 8 levels: fine
    assert invalid_codes(codes, LEVELS_T).tolist() == [False, True, False]
    assert describe_invalid_code(codes[1], LEVELS) == "sampled code 6 on channel 31 outside [0, 6)"
