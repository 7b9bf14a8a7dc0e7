"""The two logits-processor adapters, driven directly with vLLM's own BatchUpdate / LogitsContext types.

The V1 adapter also runs inside the real engine (test_vllm_backend); the V2 adapter (Model Runner V2,
vLLM's GPU default) cannot run on CPU-only vLLM, so this is where its tensor logic is exercised.
"""

from types import SimpleNamespace

import numpy as np
import pytest
import torch

pytest.importorskip("vllm")

from vllm.sampling_params import SamplingParams  # noqa: E402
from vllm.v1.sample.logits_processor import BatchUpdate, MoveDirectionality  # noqa: E402
from vllm.v1.worker.gpu.sample.logits_processor import LogitsContext  # noqa: E402

from engine.backends import vllm_sampling  # noqa: E402
from engine.backends.vllm_layout import FrameParams, TokenLayout  # noqa: E402
from engine.backends.vllm_processors import GepardFrameSamplerV1, GepardFrameSamplerV2, processor_for  # noqa: E402

pytestmark = pytest.mark.vllm
SLOTS = 4
LAYOUT = TokenLayout(num_slots=SLOTS)


@pytest.fixture(autouse=True)
def fresh_slot_state():
    vllm_sampling.reset_slot_state()
    yield
    vllm_sampling.reset_slot_state()


def config(use_v2: bool = False) -> SimpleNamespace:
    return SimpleNamespace(scheduler_config=SimpleNamespace(max_num_seqs=SLOTS), use_v2_model_runner=use_v2)


def params(seed: int, **kw) -> SamplingParams:
    return SamplingParams(temperature=0.0, extra_args=FrameParams(0.0, 0, seed, 0.5, **kw).to_extra_args())


def model_logits(n: int, stop: float = -30.0) -> torch.Tensor:
    """What GepardForTTS.compute_logits returns: head grid, stop logit, -inf."""
    out = torch.full((n, LAYOUT.vocab_size), float("-inf"))
    out[:, :256] = torch.randn(n, 256)
    out[:, 256] = stop
    return out


def update(size, removed=(), added=(), moved=()):
    return BatchUpdate(batch_size=size, removed=list(removed), added=list(added), moved=list(moved))


def handles(proc, n):
    return (proc.apply(model_logits(n)).argmax(-1) - LAYOUT.frame_base).tolist()


def test_processor_choice_follows_the_model_runner():
    assert processor_for(config(False)).endswith(":GepardFrameSamplerV1")
    assert processor_for(config(True)).endswith(":GepardFrameSamplerV2")


def test_v1_slots_are_stable_while_rows_move():
    proc = GepardFrameSamplerV1(config(), torch.device("cpu"), False)
    outs = {name: [] for name in "abcd"}
    proc.update_state(update(3, added=[(0, params(1), None, outs["a"]), (1, params(2), None, outs["b"]),
                                       (2, params(3), None, outs["c"])]))
    assert handles(proc, 3) == [0, 1, 2]
    # b finishes; condense() moves c from row 2 into row 1 and reports no removal at all
    proc.update_state(update(2, moved=[(2, 1, MoveDirectionality.UNIDIRECTIONAL)]))
    assert handles(proc, 2) == [0, 2]  # c keeps slot 2
    assert sorted(proc.free) == [1, 3]  # b's slot came back
    # c finishes and d takes its row, which vLLM reports as an add only: c's slot is freed, d gets one
    proc.update_state(update(2, added=[(1, params(4), None, outs["d"])]))
    assert handles(proc, 2) == [0, 2] and sorted(proc.free) == [1, 3]
    proc.update_state(update(2, moved=[(0, 1, MoveDirectionality.SWAP)]))
    assert handles(proc, 2) == [2, 0]
    proc.update_state(update(1, removed=[1]))  # a (now on row 1) finishes
    assert handles(proc, 1) == [2] and sorted(proc.free) == [0, 1, 3]
    with pytest.raises(RuntimeError, match="out of sync"):
        proc.update_state(update(3))


def test_v1_frame_index_follows_the_live_output_list():
    proc = GepardFrameSamplerV1(config(), torch.device("cpu"), False)
    outputs: list[int] = []
    proc.update_state(update(1, added=[(0, params(1), None, outputs)]))
    assert proc.apply(model_logits(1, stop=30.0)).argmax(-1).item() != LAYOUT.stop  # never stops at frame 0
    outputs.append(LAYOUT.frame_base)  # vLLM appends the sampled token to the same list
    assert proc.apply(model_logits(1, stop=30.0)).argmax(-1).item() == LAYOUT.stop


def test_v1_request_readded_with_outputs_ends_with_stop_err():
    proc = GepardFrameSamplerV1(config(), torch.device("cpu"), False)
    proc.update_state(update(1, added=[(0, params(1), None, [LAYOUT.frame_base] * 5)]))
    assert proc.apply(model_logits(1)).argmax(-1).tolist() == [LAYOUT.stop_err]


def test_v1_rejects_requests_without_frame_params():
    with pytest.raises(ValueError, match="extra_args"):
        GepardFrameSamplerV1.validate_params(SamplingParams(temperature=0.0))
    GepardFrameSamplerV1.validate_params(params(1))


class UvaLike:
    def __init__(self, values):
        self.gpu = torch.tensor(values, dtype=torch.int32)


def v2_context(slots, pos):
    slots, pos = torch.tensor(slots), torch.tensor(pos)
    return LogitsContext(expanded_idx_mapping=slots, idx_mapping=slots, idx_mapping_np=slots.numpy(),
                         expanded_local_pos=torch.zeros_like(slots), input_ids=torch.zeros_like(slots), pos=pos,
                         seq_lens_upper_bound_np=np.asarray(pos + 1))


def test_v2_uses_runner_slots_positions_and_detects_resumed_requests():
    req_states = SimpleNamespace(device=torch.device("cpu"), max_num_reqs=SLOTS, vocab_size=LAYOUT.vocab_size,
                                 prompt_len=UvaLike([7, 12, 9, 5]), prefill_len=UvaLike([7, 12, 9, 40]))
    proc = GepardFrameSamplerV2(config(True), req_states)
    for slot in range(SLOTS):
        assert proc.add_request(slot, params(slot, repetition_penalty=1.5 if slot == 1 else 1.0))
    proc.apply_staged_writes()
    state = proc.state
    assert state.seed.tolist() == [0, 1, 2, 3] and state.penalty[1] == 1.5
    # rows: slot 2 at its SOS (pos 8 = prompt_len - 1), slot 0 three frames in, slot 3 resumed after preemption
    logits = model_logits(3, stop=30.0)
    out = proc.apply(logits, v2_context([2, 0, 3], [8, 9, 44]))
    assert out.argmax(-1).tolist() == [LAYOUT.frame_base + 2, LAYOUT.stop, LAYOUT.stop_err]
    heads = logits[:, :256].reshape(3, 32, 8)
    assert torch.equal(state.last_codes[2], heads[0].argmax(-1))  # greedy frame 0 of slot 2


def test_v2_rejects_more_runner_slots_than_handles():
    req_states = SimpleNamespace(device=torch.device("cpu"), max_num_reqs=SLOTS + 1)
    with pytest.raises(RuntimeError, match="handles"):
        GepardFrameSamplerV2(config(True), req_states)


# -- a request the worker cannot serve fails alone, never the engine core (issue 9) ----------------


def unusable(seed: int) -> SamplingParams:
    """Knobs FrameParams rejects (validate_params stops them in the API process): as if it had not."""
    raw = FrameParams(0.0, 0, seed, 0.5).to_extra_args()
    raw["gepard"][1] = 2**63  # top_k past int64: writing it into the slot tensor would raise
    return SamplingParams(temperature=0.0, extra_args=raw)


def test_knobs_past_int64_are_refused_in_the_api_process():
    with pytest.raises(ValueError, match=r"top_k must be in \[0, 1024\], got 2\*\*63"):
        GepardFrameSamplerV1.validate_params(unusable(1))


def test_v1_request_with_unusable_knobs_ends_with_failed_and_the_batch_goes_on():
    proc = GepardFrameSamplerV1(config(), torch.device("cpu"), False)
    proc.update_state(update(2, added=[(0, params(1), None, []), (1, unusable(2), None, [])]))  # does not raise
    assert proc.apply(model_logits(2)).argmax(-1).tolist() == [LAYOUT.frame_base + 0, LAYOUT.failed]
    proc.update_state(update(2, added=[(1, params(3), None, [])]))  # the next request in that row is served
    assert handles(proc, 2) == [0, 1]


def test_v2_request_with_unusable_knobs_ends_with_failed_and_the_batch_goes_on():
    req_states = SimpleNamespace(device=torch.device("cpu"), max_num_reqs=SLOTS, vocab_size=LAYOUT.vocab_size,
                                 prompt_len=UvaLike([7, 7, 7, 7]), prefill_len=UvaLike([7, 7, 7, 7]))
    proc = GepardFrameSamplerV2(config(True), req_states)
    assert proc.add_request(0, params(1)) and proc.add_request(1, unusable(2))
    proc.apply_staged_writes()
    out = proc.apply(model_logits(2), v2_context([0, 1], [6, 6]))
    assert out.argmax(-1).tolist() == [LAYOUT.frame_base + 0, LAYOUT.failed]
    assert proc.add_request(1, params(3))
    proc.apply_staged_writes()
    assert proc.apply(model_logits(2), v2_context([0, 1], [7, 6])).argmax(-1).tolist() == [LAYOUT.frame_base + 0,
                                                                                          LAYOUT.frame_base + 1]
