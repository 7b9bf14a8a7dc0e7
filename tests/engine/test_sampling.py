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
