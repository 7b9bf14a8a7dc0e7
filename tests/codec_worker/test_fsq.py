"""FSQ code space: fold/unfold/dequantize over every packed code, checked against NeMo's FSQ."""

from __future__ import annotations

import itertools

import pytest
import torch

from codec_worker import fsq

ALL_CODES = torch.arange(fsq.CODEBOOK_SIZE)  # [2016]


def test_unfold_gives_little_endian_mixed_radix_digits_for_every_code() -> None:
    packed = ALL_CODES.repeat(fsq.NUM_GROUPS, 1)  # [8, 2016]: every code in every group
    codes = fsq.unfold(packed)  # [32, 2016]
    assert codes.shape == (32, fsq.CODEBOOK_SIZE) and codes.dtype == torch.int64
    expected = {}
    for k in range(fsq.CODEBOOK_SIZE):
        expected[k] = (k % 8, (k // 8) % 7, (k // 56) % 6, (k // 336) % 6)
    for group in range(fsq.NUM_GROUPS):
        digits = codes[4 * group : 4 * group + 4].T.tolist()
        assert [tuple(d) for d in digits] == [expected[k] for k in range(fsq.CODEBOOK_SIZE)]


def test_fold_inverts_unfold_and_unfold_inverts_fold() -> None:
    packed = torch.stack([ALL_CODES.roll(17 * g) for g in range(fsq.NUM_GROUPS)])  # [8, 2016], groups differ
    assert torch.equal(fsq.fold(fsq.unfold(packed)), packed)
    digits = torch.tensor(list(itertools.product(range(6), range(6), range(7), range(8))))[:, [3, 2, 1, 0]]  # [2016, 4]
    codes = digits.T.repeat(fsq.NUM_GROUPS, 1)  # [32, 2016], every digit combination
    assert torch.equal(fsq.unfold(fsq.fold(codes)), codes)
    assert sorted(fsq.fold(codes)[0].tolist()) == list(range(fsq.CODEBOOK_SIZE))


def test_fold_keeps_batch_dimensions() -> None:
    packed = torch.randint(0, fsq.CODEBOOK_SIZE, (3, 8, 5))
    codes = fsq.unfold(packed)
    assert codes.shape == (3, 32, 5)
    assert torch.equal(fsq.fold(codes), packed)


@pytest.mark.parametrize(
    ("level", "values"),
    [
        (8, [-1.0, -0.75, -0.5, -0.25, 0.0, 0.25, 0.5, 0.75]),
        (7, [-1.0, -2 / 3, -1 / 3, 0.0, 1 / 3, 2 / 3, 1.0]),
        (6, [-1.0, -2 / 3, -1 / 3, 0.0, 1 / 3, 2 / 3]),
    ],
)
def test_dequantize_exact_values_per_level(level: int, values: list[float]) -> None:
    channels = [c for c, lv in enumerate(fsq.channel_levels()) if lv == level]
    codes = torch.zeros(32, level, dtype=torch.long)
    codes[channels] = torch.arange(level)
    latents = fsq.dequantize(codes)
    assert latents.dtype == torch.float32
    expected = torch.tensor(values, dtype=torch.float32)
    for channel in channels:
        assert torch.equal(latents[channel], expected)


def test_dequantize_matches_nemo_group_fsq_for_every_code() -> None:
    from nemo.collections.tts.modules.audio_codec_modules import GroupFiniteScalarQuantizer

    quantizer = GroupFiniteScalarQuantizer(num_groups=8, num_levels_per_group=list(fsq.FSQ_LEVELS))
    packed = torch.stack([ALL_CODES.roll(5 * g) for g in range(fsq.NUM_GROUPS)]).unsqueeze(1)  # [8, B=1, 2016]
    lengths = torch.tensor([fsq.CODEBOOK_SIZE])
    nemo_latents = quantizer.decode(indices=packed, input_len=lengths)  # [1, 32, 2016]
    ours = fsq.dequantize(fsq.unfold(packed.permute(1, 0, 2)))  # [1, 32, 2016]
    assert torch.equal(ours, nemo_latents.float())
    # and NeMo maps our latents back to the same packed codes
    back = quantizer.codes_to_indices(codes=ours, input_len=lengths)  # [1, 8, 2016]
    assert torch.equal(back.long(), packed.permute(1, 0, 2))


def test_validate_codes_names_the_channel() -> None:
    codes = torch.zeros(32, 4, dtype=torch.long)
    fsq.validate_codes(codes)
    codes[5, 2] = 7  # channel 5 has 7 levels
    with pytest.raises(ValueError, match="channel 5"):
        fsq.validate_codes(codes)
