"""The frame step the vLLM logits processors run, against the torch reference's sampling (no vLLM needed)."""

import pytest
import torch

from engine.backends.vllm_layout import MAX_REPETITION_WINDOW, FrameParams, TokenLayout
from engine.backends.vllm_sampling import SlotState, frame_step, split_logits
from engine.sampling import repetition_penalty, sample_codes, seen_mask, stop_decision

LEVELS = torch.tensor([8, 7, 6, 6] * 8)
DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])  # the processor runs on the model's device
PADDING = torch.arange(8).view(1, 8) >= LEVELS.view(32, 1)  # [32, 8] True where code >= L_k


def head_logits(n: int, generator: torch.Generator) -> torch.Tensor:
    return (torch.randn(n, 32, 8, generator=generator) * 2).masked_fill(PADDING, float("-inf"))


class Reference:
    """One request sampled the way engine.backends.torch_generator does it (history as a list)."""

    def __init__(self, params: FrameParams) -> None:
        self.p = params
        self.history: list[torch.Tensor] = []
        self.frames = 0

    def sample(self, logits: torch.Tensor, any_penalty: bool) -> torch.Tensor:
        p, logits = self.p, logits.unsqueeze(0)
        if any_penalty:  # the generator penalises the whole batch when any row asks for it
            window = max(p.repetition_window, 1)
            hist = torch.full((1, window, 32), -1, dtype=torch.long)
            recent = self.history[-p.repetition_window:] if p.repetition_window > 0 else []
            if recent:
                hist[0, : len(recent)] = torch.stack(recent)
            logits = repetition_penalty(logits, seen_mask(hist, 8), torch.tensor([p.repetition_penalty]))
        codes = sample_codes(logits, torch.tensor([p.temperature]), torch.tensor([p.top_k]),
                             torch.tensor([p.seed]), torch.tensor([self.frames]))[0]
        self.frames += 1
        if p.repetition_penalty != 1.0:
            self.history.append(codes)
            del self.history[: -max(p.repetition_window, 1)]
        return codes


def decode(out: torch.Tensor) -> torch.Tensor:
    """Codes back from the processor's logits rows [N, V] -> [N, 32] (what the API reads via logprobs)."""
    top = out.topk(33, dim=-1).indices
    codes = torch.full((out.shape[0], 32), -1, dtype=torch.long)
    for i, ids in enumerate(top.tolist()):
        for t in ids:
            if t < 256:
                codes[i, t // 8] = t % 8
    return codes


PARAMS = [
    FrameParams(0.0, 0, 1, 0.5),  # greedy
    FrameParams(1.0, 0, 1234, 0.5),  # sampled
    FrameParams(0.7, 3, 99, 0.5),  # top-k
    FrameParams(0.0, 0, 5, 0.5, repetition_penalty=1.5, repetition_window=4),
    FrameParams(0.9, 0, 7, 0.5, repetition_penalty=3.0, repetition_window=MAX_REPETITION_WINDOW),
]


@pytest.mark.parametrize("device", DEVICES)
def test_frame_step_matches_the_torch_reference_over_many_steps_and_reorders(device):
    layout = TokenLayout(num_slots=8)
    state = SlotState.allocate(layout, torch.device(device))
    slots = [3, 0, 7, 1, 4]
    for slot, params in zip(slots, PARAMS):
        state.assign(slot, params)
    refs = [Reference(p) for p in PARAMS]
    g = torch.Generator().manual_seed(0)
    for step in range(80):  # more frames than the history ring holds
        order = torch.randperm(len(slots), generator=g).tolist()  # vLLM reorders its batch rows
        logits = head_logits(len(slots), g)
        out = frame_step(state, logits.to(device), torch.full((len(slots),), -30.0, device=device),
                         torch.tensor([slots[i] for i in order], device=device),
                         torch.full((len(slots),), step, device=device), penalise=True).cpu()
        got = decode(out)
        for row, i in enumerate(order):
            want = refs[i].sample(logits[row], any_penalty=True)  # the reference runs on CPU
            assert torch.equal(got[row], want), (step, i)
            assert torch.equal(state.last_codes[slots[i]].cpu(), want)
            assert out[row].argmax() == layout.frame_base + slots[i]


def test_skipping_the_penalty_for_unpenalised_batches_changes_nothing():
    layout = TokenLayout(num_slots=4)
    a, b = SlotState.allocate(layout, torch.device("cpu")), SlotState.allocate(layout, torch.device("cpu"))
    for state in (a, b):
        for slot, params in enumerate(PARAMS[:3]):
            state.assign(slot, params)
    g = torch.Generator().manual_seed(1)
    for step in range(5):
        logits = head_logits(3, g)
        args = (logits, torch.zeros(3), torch.arange(3), torch.full((3,), step))
        assert torch.equal(frame_step(a, *args, penalise=True), frame_step(b, *args, penalise=False))


def test_a_row_does_not_depend_on_the_rest_of_the_batch():
    layout = TokenLayout(num_slots=4)
    g = torch.Generator().manual_seed(2)
    logits = head_logits(4, g)
    alone, together = SlotState.allocate(layout, torch.device("cpu")), SlotState.allocate(layout, torch.device("cpu"))
    for slot in range(4):
        together.assign(slot, PARAMS[1])
    alone.assign(2, PARAMS[1])
    solo = frame_step(alone, logits[2:3], torch.zeros(1), torch.tensor([2]), torch.tensor([3]))
    batch = frame_step(together, logits, torch.zeros(4), torch.arange(4), torch.tensor([3, 3, 3, 3]))
    assert torch.equal(solo[0], batch[2])


def test_stop_follows_the_threshold_and_is_never_taken_at_the_first_frame():
    layout = TokenLayout(num_slots=4)
    state = SlotState.allocate(layout, torch.device("cpu"))
    state.assign(0, FrameParams(0.0, 0, 1, 0.5))
    state.assign(1, FrameParams(0.0, 0, 1, 0.9))
    stop_logit = torch.tensor([1.0, 1.0, 30.0, -1.0])  # sigmoid(1) = 0.73
    slots, frames = torch.tensor([0, 1, 0, 0]), torch.tensor([5, 5, 0, 5])
    out = frame_step(state, head_logits(4, torch.Generator().manual_seed(3)), stop_logit, slots, frames)
    assert out.argmax(-1).tolist() == [layout.stop, layout.frame_base + 1, layout.frame_base + 0, layout.frame_base + 0]
    want = stop_decision(stop_logit, torch.tensor([0.5, 0.9, 0.5, 0.5])) & (frames > 0)
    assert (out.argmax(-1) == layout.stop).tolist() == want.tolist()


@pytest.mark.parametrize("device", DEVICES)
def test_blocked_rows_end_with_stop_err_and_rows_carry_all_codes(device):
    layout = TokenLayout(num_slots=2)
    state = SlotState.allocate(layout, torch.device(device))
    state.assign(0, PARAMS[0])
    state.assign(1, PARAMS[0])
    logits = head_logits(2, torch.Generator().manual_seed(4))
    on = dict(device=device)
    out = frame_step(state, logits.to(device), torch.zeros(2, **on), torch.tensor([0, 1], **on), torch.tensor([2, 2], **on),
                     blocked=torch.tensor([False, True], **on)).cpu()
    assert out.shape == (2, layout.vocab_size) and out.dtype == torch.float32
    assert out.argmax(-1).tolist() == [layout.frame_base, layout.stop_err]
    assert torch.equal(decode(out), logits.argmax(-1))  # greedy picks each head's best code
    assert (torch.isfinite(out).sum(-1) == 33).all()


def test_split_logits_reads_the_packed_model_output():
    layout = TokenLayout(num_slots=3)
    packed = torch.full((2, layout.vocab_size), float("-inf"))
    heads = head_logits(2, torch.Generator().manual_seed(5))
    packed[:, :256] = heads.reshape(2, 256)
    packed[:, 256] = torch.tensor([0.25, -4.0])
    got_heads, got_stop = split_logits(packed, layout)
    assert torch.equal(got_heads, heads) and got_stop.tolist() == [0.25, -4.0]


def test_assign_resets_the_slot_history():
    layout = TokenLayout(num_slots=1)
    state = SlotState.allocate(layout, torch.device("cpu"))
    state.assign(0, PARAMS[3])
    g = torch.Generator().manual_seed(6)
    for step in range(3):
        frame_step(state, head_logits(1, g), torch.zeros(1), torch.tensor([0]), torch.tensor([step]))
    assert (state.history_frame[0] >= 0).sum() == 3
    state.assign(0, PARAMS[0])
    assert (state.history_frame[0] == -1).all()


@pytest.mark.parametrize("params", PARAMS)
def test_frame_params_survive_slot_assignment(params):
    state = SlotState.allocate(TokenLayout(num_slots=2), torch.device("cpu"))
    state.assign(1, params)
    assert state.seed[1] == params.seed and state.top_k[1] == params.top_k and state.window[1] == params.repetition_window
    assert state.temperature[1] == torch.tensor(params.temperature)
    assert state.penalty[1] == torch.tensor(params.repetition_penalty)


# -- extreme noise and per-request failures inside the engine core (issue 9) ----------------------

from tests.engine.extreme_noise import CODEC_REJECT, ENGINE_KILLER, TOP, seed_for  # noqa: E402


def levelled_state(layout: TokenLayout, device: str = "cpu") -> SlotState:
    """A SlotState with the checkpoint's levels, as GepardForTTS sets them."""
    state = SlotState.allocate(layout, torch.device(device))
    state.levels.copy_(LEVELS)
    return state


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("value", [0, TOP])
def test_extreme_noise_on_any_cell_never_reaches_the_feedback_path(device, value):
    cells = [(c, k) for c in range(32) for k in range(8)]
    frames = [(7 * c + k) % 11 for c, k in cells]
    layout = TokenLayout(num_slots=len(cells))
    state = levelled_state(layout, device)
    for slot, (frame, (c, k)) in enumerate(zip(frames, cells)):
        state.assign(slot, FrameParams(0.4, 0, seed_for(value, frame, c, k), 0.5))  # the default knobs
    on = dict(device=device)
    logits = head_logits(len(cells), torch.Generator().manual_seed(value))
    out = frame_step(state, logits.to(device), torch.full((len(cells),), -30.0, **on), torch.arange(len(cells), **on),
                     torch.tensor(frames, **on)).cpu()
    assert (out.argmax(-1) == layout.frame_base + torch.arange(len(cells))).all()  # no row failed
    codes = decode(out)
    assert ((codes >= 0) & (codes < LEVELS)).all()
    assert torch.equal(state.last_codes.cpu(), codes)


@pytest.mark.parametrize("seed, frame, channel, code", [ENGINE_KILLER, CODEC_REJECT])
def test_the_pinned_seeds_sample_valid_frames(seed, frame, channel, code):
    layout = TokenLayout(num_slots=1)
    state = levelled_state(layout)
    state.assign(0, FrameParams(0.4, 0, seed, 0.5))
    ref = Reference(FrameParams(0.4, 0, seed, 0.5))
    g = torch.Generator().manual_seed(7)
    for step in range(frame + 1):
        logits = head_logits(1, g)
        out = frame_step(state, logits, torch.tensor([-30.0]), torch.tensor([0]), torch.tensor([step]))
        assert out.argmax(-1).item() == layout.frame_base
        assert torch.equal(decode(out)[0], ref.sample(logits[0], any_penalty=False))
        assert (state.last_codes[0] < LEVELS).all()
    assert state.last_codes[0, channel] < LEVELS[channel] <= code


def test_a_row_with_an_invalid_code_ends_with_failed_and_is_never_fed_back():
    layout = TokenLayout(num_slots=3)
    state, alone = levelled_state(layout), levelled_state(layout)
    for s in (state, alone):
        for slot in range(3):
            s.assign(slot, PARAMS[1])
    logits = head_logits(3, torch.Generator().manual_seed(8))
    logits[1, 31] = float("nan")  # a broken forward pass for row 1: channel 31 has no candidate code
    state.last_codes[1] = 5
    out = frame_step(state, logits, torch.zeros(3), torch.arange(3), torch.tensor([4, 4, 4]))
    assert out.argmax(-1).tolist() == [layout.frame_base, layout.failed, layout.frame_base + 2]
    assert (state.last_codes[1] == 0).all()  # a harmless frame, not the invalid one
    for row in (0, 2):  # the other rows are exactly what they are alone
        solo = frame_step(alone, logits[row : row + 1], torch.zeros(1), torch.tensor([row]), torch.tensor([4]))
        assert torch.equal(out[row], solo[0])


def test_a_code_past_the_levels_fails_only_its_row():
    layout = TokenLayout(num_slots=2)
    state = levelled_state(layout)
    for slot in range(2):
        state.assign(slot, PARAMS[0])  # greedy
    logits = head_logits(2, torch.Generator().manual_seed(9))
    logits[0, 31, 7] = 50.0  # a finite logit on a padding cell (a model that does not pad with -inf)
    out = frame_step(state, logits, torch.zeros(2), torch.arange(2), torch.tensor([1, 1]))
    assert out.argmax(-1).tolist() == [layout.failed, layout.frame_base + 1]
    assert (state.last_codes < LEVELS).all()


def test_a_slot_with_unusable_knobs_ends_with_failed_at_its_first_frame():
    layout = TokenLayout(num_slots=2)
    state = levelled_state(layout)
    state.assign_failed(0)
    state.assign(1, PARAMS[1])
    out = frame_step(state, head_logits(2, torch.Generator().manual_seed(10)), torch.zeros(2), torch.arange(2),
                     torch.tensor([0, 0]))
    assert out.argmax(-1).tolist() == [layout.failed, layout.frame_base + 1]
    state.assign(0, PARAMS[1])  # the slot's next request is served normally
    assert not bool(state.failed[0])
