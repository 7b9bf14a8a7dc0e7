"""The token layout and per-request knobs shared by the API process and the vLLM worker (no vLLM needed)."""

import pytest
import torch

from engine.backends.vllm_layout import CODE_IDS, MAX_REPETITION_WINDOW, FrameParams, TokenLayout, hf_overrides


class FlatLogprobs:
    """The shape of vLLM's FlatLogprobs (flat id lists with per-position ranges)."""

    def __init__(self, positions: list[list[int]]) -> None:
        self.start_indices, self.end_indices, self.token_ids = [], [], []
        for ids in positions:
            self.start_indices.append(len(self.token_ids))
            self.token_ids.extend(ids)
            self.end_indices.append(len(self.token_ids))

    def __len__(self) -> int:
        return len(self.start_indices)


def frame_entries(layout: TokenLayout, token: int, codes: list[int]) -> list[int]:
    # vLLM lists the sampled token first, then the top-k (the token again, then the 32 code ids)
    return [token, token] + [8 * k + c for k, c in enumerate(codes)]


def test_ids_do_not_overlap_and_text_is_shifted_past_the_vocabulary():
    layout = TokenLayout(num_slots=4)
    assert (layout.frame_base, layout.stop, layout.stop_err, layout.failed, layout.vocab_size) == (256, 260, 261, 262, 263)
    assert layout.stop_tokens == [260, 261, 262]
    assert layout.text_ids([0, 5, 300]) == [263, 268, 563]
    assert [layout.is_frame(t) for t in (255, 256, 259, 260, 261, 262, 263)] == [False, True, True, False, False, False, False]
    assert layout.stop_column == CODE_IDS
    with pytest.raises(ValueError, match="num_slots"):
        TokenLayout(num_slots=0)


@pytest.mark.parametrize("flat", [True, False])
def test_decode_frames_reads_codes_and_skips_stop(flat):
    layout = TokenLayout(num_slots=8)
    a = [k % 6 for k in range(32)]
    b = [(k * 5) % 6 for k in range(32)]
    tokens = [layout.frame_base + 3, layout.frame_base + 3, layout.stop]
    positions = [frame_entries(layout, tokens[0], a), frame_entries(layout, tokens[1], b),
                 frame_entries(layout, layout.stop, [0] * 32)]
    logprobs = FlatLogprobs(positions) if flat else [{t: None for t in ids} for ids in positions]
    codes = layout.decode_frames(tokens, logprobs)
    assert codes.dtype == torch.int64 and codes.shape == (32, 2)
    assert codes[:, 0].tolist() == a and codes[:, 1].tolist() == b


def test_decode_frames_rejects_incomplete_frames():
    layout = TokenLayout(num_slots=2)
    token = layout.frame_base
    with pytest.raises(ValueError, match=r"channel\(s\) \[31\]"):
        layout.decode_frames([token], [{token: None, **{8 * k: None for k in range(31)}}])
    with pytest.raises(ValueError, match="logprobs for 1 tokens"):
        layout.decode_frames([token], None)
    assert layout.decode_frames([layout.stop], None).shape == (32, 0)  # nothing to decode


def test_frame_params_round_trip_and_validation():
    fp = FrameParams(0.4, 5, 2**62 + 7, 0.5, 1.3, 16)
    assert FrameParams.from_extra_args(fp.to_extra_args()) == fp and fp.penalised
    assert not FrameParams(0.4, 0, 1, 0.5, 1.0, 999).penalised  # the window only matters with a penalty
    with pytest.raises(ValueError, match="extra_args"):
        FrameParams.from_extra_args({"other": 1})
    with pytest.raises(ValueError, match="extra_args"):
        FrameParams.from_extra_args(None)
    bad = [
        (dict(temperature=-1.0), "temperature"),
        (dict(temperature=float("nan")), "temperature"),
        (dict(top_k=-2), "top_k"),
        (dict(seed=-1), "seed"),
        (dict(stop_threshold=1.0), "stop_threshold"),
        (dict(repetition_penalty=0.0), "repetition_penalty"),
        (dict(repetition_penalty=1.2, repetition_window=MAX_REPETITION_WINDOW + 1), "repetition_window"),
        (dict(top_k=2**63), r"top_k must be in \[0, 1024\]"),  # would overflow the slot tensor in the engine core
        (dict(temperature=3.5e38), r"temperature must be in \[0, 10\]"),
        (dict(seed=2**63), "seed"),
        (dict(stop_threshold=0.0), "stop_threshold"),
    ]
    base = dict(temperature=0.4, top_k=0, seed=1, stop_threshold=0.5, repetition_penalty=1.0, repetition_window=32)
    for change, field in bad:
        with pytest.raises(ValueError, match=field):
            FrameParams(**{**base, **change})


def test_hf_overrides_replace_rope_without_mrope_keys():
    over = hf_overrides(TokenLayout(num_slots=16), 1e7)
    assert over["architectures"] == ["GepardForTTS"] and over["vocab_size"] == 256 + 16 + 3
    assert over["rope_parameters"] == {"rope_type": "default", "rope_theta": 1e7, "partial_rotary_factor": 1.0}
