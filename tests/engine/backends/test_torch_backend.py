import asyncio
import logging
import shutil
import threading

import pytest
import torch
from safetensors.torch import load_file, save_file

from engine.backends.torch_backend import TorchEngine, TorchEngineConfig
from engine.errors import InvalidRequestError, OverloadedError
from engine.model.gepard import GepardModel
from engine.requests import FinishReason, SamplingParams, SynthesisRequest

GREEDY = SamplingParams(temperature=0.0)
TEXTS = ["Hello there.", "The quick brown fox jumps over the lazy dog.", "One.", "Hola, ¿cómo estás?"]


@pytest.fixture(scope="module")
def never_stop_dir(tmp_path_factory):
    from engine.tiny import write_tiny_checkpoint

    return write_tiny_checkpoint(tmp_path_factory.mktemp("never-stop"), stop_after=0, with_codec=False)


@pytest.fixture(scope="module")
def always_stop_dir(tiny_gepard_dir, tmp_path_factory):
    d = tmp_path_factory.mktemp("always-stop") / "ckpt"
    shutil.copytree(tiny_gepard_dir, d)
    tensors = load_file(str(d / "model.safetensors"))
    tensors["stop_head.weight"] = torch.zeros_like(tensors["stop_head.weight"])
    tensors["stop_head.bias"] = torch.tensor([30.0])  # stop probability ~1 at every position
    save_file(tensors, str(d / "model.safetensors"))
    return d


async def collect(engine, rid, text, sampling=GREEDY, prefix=None):
    chunks = [c async for c in engine.generate(SynthesisRequest(rid, text, prefix, sampling))]
    assert chunks and chunks[-1].finish_reason is not None
    assert all(c.finish_reason is None for c in chunks[:-1])
    starts = [c.start_frame for c in chunks]
    assert starts == sorted(starts)
    return torch.cat([c.codes for c in chunks], dim=1), chunks[-1].finish_reason


@pytest.fixture
async def engine(tiny_model):
    eng = TorchEngine(tiny_model, TorchEngineConfig(max_batch=8))
    yield eng
    await eng.aclose()


async def test_stop_head_ends_after_the_planned_frames(engine):
    codes, reason = await collect(engine, "r1", TEXTS[0])
    assert reason is FinishReason.STOP
    assert codes.shape == (32, 24)  # the tiny checkpoint's counter stops after 24 frames
    # the counter channels walk the states up to the final one; the frame at the stop step is not emitted
    assert codes[0, -1] == 7 and codes[1, -1] == 6


async def test_stop_is_never_evaluated_at_sos(always_stop_dir):
    eng = TorchEngine(GepardModel.from_pretrained(always_stop_dir))
    try:
        codes, reason = await collect(eng, "r", TEXTS[0])
    finally:
        await eng.aclose()
    assert reason is FinishReason.STOP and codes.shape == (32, 1)  # frame 0 comes from SOS unconditionally


def wakes(delivery, frames, finish_at_end=True):
    """The frame counts at which a mailbox with this cadence wakes its caller (who takes all)."""
    from engine.backends.torch_backend import _Mailbox
    from engine.backends.torch_generator import StepOutput

    box = _Mailbox(asyncio.new_event_loop(), delivery=delivery)
    seen = []
    for i in range(1, frames + 1):
        last = finish_at_end and i == frames
        box.put(StepOutput("r", torch.zeros(32, dtype=torch.long), FinishReason.STOP if last else None))
        if box.event.is_set():
            seen.append(i)
            box.event.clear()
            box.frames = []
    box.loop.close()
    return seen


@pytest.mark.parametrize(
    ("delivery", "frames", "expected"),
    [
        ((), 5, [1, 2, 3, 4, 5]),  # no cadence: every frame
        ((2, 3), 12, [2, 5, 8, 11, 12]),  # the boundaries of 2, then 3 repeating, then the end
        ((2, 4, 8, 32), 20, [2, 6, 14, 20]),  # the GPU cadence: chunks end at 2, 6, 14, 46...
        ((4, 16), 4, [4]),  # ending on a boundary wakes once
        ((4, 16), 2, [2]),  # shorter than the first chunk: woken by the end
    ],
)
def test_a_mailbox_wakes_its_caller_at_the_delivery_boundaries_and_the_end(delivery, frames, expected):
    assert wakes(delivery, frames) == expected


@pytest.mark.parametrize("delivery", [(0,), (2, -1), (2.5,), (True,), [2, 4]])
async def test_a_cadence_that_could_never_deliver_is_refused_before_generation(engine, delivery):
    with pytest.raises(InvalidRequestError, match=r"delivery must be a tuple of frame counts >= 1"):
        async for _ in engine.generate(SynthesisRequest("bad", TEXTS[0], None, GREEDY, delivery=delivery)):
            pass
    assert engine.num_requests == 0


async def test_frames_held_to_a_cadence_are_the_frames_delivered_one_by_one(engine):
    plain = [c async for c in engine.generate(SynthesisRequest("p", TEXTS[1], None, GREEDY))]
    held = [c async for c in engine.generate(SynthesisRequest("h", TEXTS[1], None, GREEDY, delivery=(2, 3)))]
    assert torch.equal(torch.cat([c.codes for c in plain], 1), torch.cat([c.codes for c in held], 1))
    assert held[-1].finish_reason is FinishReason.STOP and all(c.finish_reason is None for c in held[:-1])
    # the caller is only woken at a boundary (2, 5, 8, ...) and takes what is there: each chunk
    # but the last ends on or after a boundary it did not reach before
    boundaries = {2 + 3 * k for k in range(100)}
    for chunk in held[:-1]:
        end = chunk.start_frame + chunk.num_frames
        assert any(chunk.start_frame < b <= end for b in boundaries), [(c.start_frame, c.num_frames) for c in held]
    assert len(held) <= len([b for b in boundaries if b <= 24]) + 1  # 24 frames: at most 8 boundaries and the end


async def test_greedy_is_deterministic_and_depends_on_text(engine):
    a, _ = await collect(engine, "a", TEXTS[0])
    b, _ = await collect(engine, "b", TEXTS[0])
    c, _ = await collect(engine, "c", TEXTS[1])
    assert torch.equal(a, b)
    assert not torch.equal(a[2:], c[2:])  # non-counter channels follow the text


async def test_batch_of_four_equals_each_run_alone(engine):
    alone = [(await collect(engine, f"solo{i}", t))[0] for i, t in enumerate(TEXTS)]
    together = await asyncio.gather(*[collect(engine, f"batch{i}", t) for i, t in enumerate(TEXTS)])
    for solo, (batched, _) in zip(alone, together):
        assert torch.equal(solo, batched)


async def test_same_seed_same_frames_and_seeds_matter(engine):
    sp = SamplingParams(temperature=1.0, seed=1234)
    a, _ = await collect(engine, "a", TEXTS[1], sp)
    b, _ = await collect(engine, "b", TEXTS[1], sp)
    c, _ = await collect(engine, "c", TEXTS[1], SamplingParams(temperature=1.0, seed=99))
    assert torch.equal(a, b) and not torch.equal(a, c)
    # a seeded request is unaffected by what runs beside it
    d, e = await asyncio.gather(collect(engine, "d", TEXTS[1], sp), collect(engine, "e", TEXTS[0], SamplingParams(temperature=1.0, seed=5)))
    assert torch.equal(a, d[0])


async def test_max_frames_caps_generation(engine):
    codes, reason = await collect(engine, "cap", TEXTS[0], SamplingParams(temperature=0.0, max_frames=5))
    assert reason is FinishReason.LENGTH and codes.shape[1] == 5


async def test_adaptive_cap_stops_a_runaway(never_stop_dir):
    eng = TorchEngine(GepardModel.from_pretrained(never_stop_dir))
    try:
        codes, reason = await collect(eng, "runaway", "Hi.")
    finally:
        await eng.aclose()
    assert reason is FinishReason.LENGTH and codes.shape[1] == 95  # adaptive cap for one word


async def test_cancel_stops_within_one_step(never_stop_dir):
    eng = TorchEngine(GepardModel.from_pretrained(never_stop_dir))
    try:
        stream = eng.generate(SynthesisRequest("long", TEXTS[1], None, SamplingParams(temperature=0.0, max_frames=2000)))
        await stream.__anext__()
        while eng.generated_frames("long") < 10:
            await asyncio.sleep(0.005)
        at_cancel = eng.generated_frames("long")
        await stream.aclose()  # closing the iterator aborts the request
        for _ in range(200):
            if eng.num_running == 0:
                break
            await asyncio.sleep(0.01)
        assert eng.num_running == 0
        # the worker finishes at most the step in flight after the abort
        assert eng._generator.active == {} and eng.generated_frames("long") == 0
        other, reason = await collect(eng, "after", TEXTS[0], SamplingParams(temperature=0.0, max_frames=3))
        assert other.shape[1] == 3 and at_cancel >= 10
    finally:
        await eng.aclose()


async def test_abort_reports_frames_made_after_the_abort(never_stop_dir):
    eng = TorchEngine(GepardModel.from_pretrained(never_stop_dir))
    try:
        stream = eng.generate(SynthesisRequest("x", TEXTS[1], None, SamplingParams(temperature=0.0, max_frames=2000)))
        task = asyncio.ensure_future(stream.__anext__())
        while eng.generated_frames("x") < 5:
            await asyncio.sleep(0.002)
        before = eng.generated_frames("x")
        await eng.abort("x")
        frames = [await task]
        async for chunk in stream:
            frames.append(chunk)
        assert frames[-1].finish_reason is FinishReason.ABORT
        total = frames[-1].start_frame + frames[-1].num_frames
        assert total <= before + 1
    finally:
        await eng.aclose()


async def test_invalid_requests_are_rejected_with_precise_errors(engine, tiny_model):
    with pytest.raises(InvalidRequestError, match="empty"):
        await collect(engine, "e", "   ")
    with pytest.raises(InvalidRequestError, match=r"shape \[8, 96\], got \[4, 96\]"):
        await collect(engine, "p", TEXTS[0], prefix=torch.zeros(4, 96))
    with pytest.raises(InvalidRequestError, match="NaN"):
        await collect(engine, "n", TEXTS[0], prefix=torch.full((8, 96), float("nan")))
    with pytest.raises(InvalidRequestError, match="temperature"):
        await collect(engine, "t", TEXTS[0], SamplingParams(temperature=-1))
    with pytest.raises(InvalidRequestError, match="max_frames"):
        await collect(engine, "m", TEXTS[0], SamplingParams(max_frames=0))
    assert engine.num_running == 0


async def test_speaker_prefix_changes_the_voice(engine, tiny_model):
    base, _ = await collect(engine, "base", TEXTS[0])
    prefix = tiny_model.compress(torch.randint(0, 6, (60, 32)))
    assert prefix.shape == (8, 96)
    voiced, _ = await collect(engine, "voiced", TEXTS[0], prefix=prefix)
    assert voiced.shape == base.shape and not torch.equal(voiced[2:], base[2:])


async def test_cfg_guides_only_the_requested_frames(engine):
    plain, _ = await collect(engine, "plain", TEXTS[0])
    off, _ = await collect(engine, "off", TEXTS[0], SamplingParams(temperature=0.0, cfg_scale=3.0, cfg_frames=0))
    guided, _ = await collect(engine, "guided", TEXTS[0], SamplingParams(temperature=0.0, cfg_scale=3.0))
    onset, _ = await collect(engine, "onset", TEXTS[0], SamplingParams(temperature=0.0, cfg_scale=3.0, cfg_frames=4))
    assert torch.equal(plain, off)
    assert not torch.equal(plain, guided)
    assert torch.equal(onset[:, :4], guided[:, :4])
    assert engine.num_running == 0


async def test_repetition_penalty_changes_sampling(engine):
    plain, _ = await collect(engine, "p", TEXTS[1])
    penalised, _ = await collect(engine, "q", TEXTS[1], SamplingParams(temperature=0.0, repetition_penalty=3.0, repetition_window=8))
    assert plain.shape == penalised.shape and not torch.equal(plain, penalised)


async def test_overload_is_reported(tiny_model):
    eng = TorchEngine(tiny_model, TorchEngineConfig(max_batch=1, max_queue=0))
    try:
        first = eng.generate(SynthesisRequest("one", TEXTS[0], None, GREEDY))
        await first.__anext__()
        with pytest.raises(OverloadedError):
            await collect(eng, "two", TEXTS[0])
        await first.aclose()
    finally:
        await eng.aclose()


async def test_requests_queued_in_the_generator_count_towards_max_queue(tiny_model, never_stop_dir):
    # max_batch 1 + max_queue 1: one running, one waiting for its place, a third refused. The waiting
    # one sits in the generator's own queue once the worker has taken it over, and counts there too.
    eng = TorchEngine(GepardModel.from_pretrained(never_stop_dir), TorchEngineConfig(max_batch=1, max_queue=1))
    try:
        running = eng.generate(SynthesisRequest("running", TEXTS[0], None, SamplingParams(temperature=0.0, max_frames=2000)))
        await running.__anext__()
        waiting = asyncio.create_task(anext(eng.generate(SynthesisRequest("waiting", TEXTS[0], None, GREEDY))))
        for _ in range(500):
            if len(eng._generator.pending) == 1:
                break
            await asyncio.sleep(0.01)
        assert len(eng._generator.pending) == 1 and eng.stats().waiting == 1
        with pytest.raises(OverloadedError, match=r"engine is at capacity \(1 running, 1 queued\)"):
            await collect(eng, "third", TEXTS[0])
        waiting.cancel()
        await running.aclose()
    finally:
        await eng.aclose()


# -- failures stay with their request (issue 9) ----------------------------------------------------

import dataclasses  # noqa: E402
import re  # noqa: E402

from engine.backends import torch_generator  # noqa: E402
from engine.errors import EngineDeadError, GenerationError  # noqa: E402

LEVELS = torch.tensor([8, 7, 6, 6] * 8).view(32, 1)


def valid(codes: torch.Tensor) -> bool:
    return bool(((codes >= 0) & (codes < LEVELS)).all())


def let_through(engine: TorchEngine, rid: str, **knobs) -> None:
    """Hand request ``rid`` to the worker with knobs no entry point accepts, as if a check were
    missing: it is planned (and validated) as sent, then its knobs are swapped."""
    plan = engine.plan

    def plan_poisoned(request):
        planned = plan(request)
        if request.request_id == rid:
            planned = dataclasses.replace(planned, sampling=dataclasses.replace(planned.sampling, **knobs))
        return planned

    engine.plan = plan_poisoned


@pytest.mark.parametrize("seed", [620977, 74326])
async def test_seeds_that_used_to_draw_a_padding_code_sample_valid_frames(engine, seed):
    # default knobs; 620977 drew code 7 on channel 31 at frame 4 (the next step indexed past the
    # embedding table and killed the engine), 74326 code 6 on channel 2 at frame 0 (codec rejects it)
    codes, reason = await collect(engine, f"seed{seed}", TEXTS[0], SamplingParams(seed=seed))
    assert reason is FinishReason.STOP and codes.shape == (32, 24) and valid(codes)
    await engine.check_health()


@pytest.mark.parametrize("temperature", [3.5e38, float("inf"), 1e300])
async def test_an_overflowing_temperature_cannot_pick_a_padding_code(engine, temperature):
    # 3.5e38 is inf in float32: logits / inf is NaN on the -inf padding cells, which argmax used to pick
    let_through(engine, "hot", temperature=temperature)
    codes, reason = await collect(engine, "hot", TEXTS[0], SamplingParams(seed=1))
    assert reason is FinishReason.STOP and valid(codes)
    await engine.check_health()


@pytest.mark.parametrize("knobs, message", [
    (dict(top_k=2**63), r"request bad: generation failed at prefill: \w+Error: Overflow"),
    (dict(stop_threshold="x"), r"request bad: generation failed at prefill"),  # only the batched step read it
    (dict(temperature=float("nan")), r"request bad: sampled code -1 on channel 0 outside \[0, 8\) at frame 0"),
])
async def test_a_poisoned_request_fails_alone_and_the_others_are_unaffected(engine, knobs, message):
    alone = [(await collect(engine, f"solo{i}", t))[0] for i, t in enumerate(TEXTS[:3])]
    let_through(engine, "bad", **knobs)
    results = await asyncio.gather(*[collect(engine, f"ok{i}", t) for i, t in enumerate(TEXTS[:3])],
                                   collect(engine, "bad", TEXTS[3]), return_exceptions=True)
    assert isinstance(results[3], GenerationError) and not isinstance(results[3], EngineDeadError)
    assert re.search(message, str(results[3])), str(results[3])
    for solo, (codes, reason) in zip(alone, results[:3]):
        assert torch.equal(solo, codes) and reason is FinishReason.STOP
    await engine.check_health()
    assert engine.num_running == 0
    again, _ = await collect(engine, "again", TEXTS[0])
    assert torch.equal(again, alone[0])


async def test_a_failed_batched_step_fails_its_batch_and_the_engine_starts_afresh(engine, monkeypatch):
    before, _ = await collect(engine, "before", TEXTS[1])
    gen = engine._generator
    decode, calls = gen._decode, []

    def decode_failing_once():  # a fault no request can be blamed for (the batched forward pass)
        calls.append(1)
        if len(calls) == 3:
            raise RuntimeError("injected batched-step fault")
        return decode()

    monkeypatch.setattr(gen, "_decode", decode_failing_once)
    results = await asyncio.gather(*[collect(engine, f"b{i}", t) for i, t in enumerate(TEXTS[:2])], return_exceptions=True)
    for rid, result in zip(("b0", "b1"), results):
        assert isinstance(result, GenerationError) and not isinstance(result, EngineDeadError)
        assert f"request {rid}: the batched decode step failed (RuntimeError: injected batched-step fault)" in str(result)
    await engine.check_health()
    after, _ = await collect(engine, "after", TEXTS[1])  # fresh cache rows: the same frames as before
    assert torch.equal(before, after) and gen.failed_steps == 0


async def test_repeated_batched_failures_make_the_engine_dead_and_health_says_why(engine, monkeypatch):
    monkeypatch.setattr(engine._generator, "_decode", lambda: (_ for _ in ()).throw(RuntimeError("stuck")))
    for i in range(torch_generator.MAX_FAILED_STEPS - 1):
        with pytest.raises(GenerationError, match="batched decode step failed"):
            await collect(engine, f"r{i}", TEXTS[0])
        await engine.check_health()
    with pytest.raises(EngineDeadError, match="3 batched decode steps failed in a row"):
        await collect(engine, "last", TEXTS[0])
    with pytest.raises(EngineDeadError, match=r"torch engine stopped: EngineDeadError: 3 batched decode steps .* stuck"):
        await engine.check_health()
    with pytest.raises(EngineDeadError):
        await collect(engine, "refused", TEXTS[0])


async def test_a_lost_device_is_fatal_at_once(engine, monkeypatch):
    lost = RuntimeError("CUDA error: an illegal memory access was encountered")
    assert torch_generator.device_lost(lost) and not torch_generator.device_lost(RuntimeError("shape mismatch"))
    monkeypatch.setattr(engine._generator, "_decode", lambda: (_ for _ in ()).throw(lost))
    with pytest.raises(EngineDeadError, match="illegal memory access"):
        await collect(engine, "r", TEXTS[0])
    with pytest.raises(EngineDeadError, match="torch engine stopped: RuntimeError: CUDA error"):
        await engine.check_health()


async def test_a_request_that_races_the_engines_death_is_told_not_left_waiting(engine, monkeypatch):
    """The worker dies after generate() checked the engine was alive and before it registered its
    mailbox: the death's notice went to the mailboxes it knew, so the request must find out itself."""
    lost = RuntimeError("CUDA error: an illegal memory access was encountered")
    plan = engine.plan

    def plan_while_the_worker_dies(request):
        planned = plan(request)
        monkeypatch.setattr(engine._generator, "step", lambda: (_ for _ in ()).throw(lost))
        with engine._lock:
            engine._aborts.append(planned)  # wakes the worker (an abort of a request it does not hold), whose next step fails
            engine._lock.notify()
        engine._thread.join(10)
        assert not engine._thread.is_alive()
        return planned

    engine.plan = plan_while_the_worker_dies
    with pytest.raises(EngineDeadError, match="illegal memory access"):
        await asyncio.wait_for(collect(engine, "late", TEXTS[0]), 10)
    assert "late" not in engine._mailboxes


@pytest.mark.parametrize("knobs, message", [
    (dict(top_k=2**63), r"top_k must be in \[0, 1024\], got 2\*\*63"),
    (dict(top_k=int(1e300)), r"top_k must be in \[0, 1024\], got 1e\+300"),
    (dict(temperature=3.4e38), r"temperature must be in \[0, 10\], got 3.4e\+38"),
    (dict(temperature=float("nan")), r"temperature must be a finite number in \[0, 10\], got nan"),
    (dict(stop_threshold=0.0), r"stop_threshold must be in \(0, 1\), got 0.0"),
    (dict(stop_threshold=1.0), r"stop_threshold must be in \(0, 1\), got 1.0"),
    (dict(repetition_penalty=11.0), r"repetition_penalty must be in \(0, 10\], got 11.0"),
    (dict(cfg_scale=25.0), r"cfg_scale must be in \(0, 20\], got 25.0"),
    (dict(cfg_frames=2001), r"cfg_frames must be in \[0, 2000\], got 2001"),
    (dict(seed=2**63), r"seed must be in \[0, 2\*\*63 - 1\], got 2\*\*63"),
    (dict(top_k=2.5), r"top_k must be an integer in \[0, 1024\], got 2.5"),
])
async def test_the_engine_api_checks_every_knob_range(engine, knobs, message):
    with pytest.raises(InvalidRequestError, match=message):
        await collect(engine, "x", TEXTS[0], dataclasses.replace(SamplingParams(), **knobs))
    assert engine.num_running == 0
    await engine.check_health()


def test_each_step_reaches_each_event_loop_in_one_call(tiny_model):
    """Streams read from two event loops (two threads): every stream gets its own frames, and the
    worker wakes each loop once per hand-over of a step's outputs, not once per stream and frame."""
    import threading

    from engine.backends import torch_backend

    eng = TorchEngine(tiny_model, TorchEngineConfig(max_batch=8))
    got: dict[str, list] = {}
    wakeups: dict[str, int] = {}
    # the bound is per hand-over, not per computed step: a worker iteration may deliver outputs
    # without computing a step (one that only reports endings), and that is one wake-up too
    handovers = 0
    dispatch = eng._dispatch

    def counted_dispatch(outputs):
        nonlocal handovers
        handovers += bool(outputs)
        dispatch(outputs)

    eng._dispatch = counted_dispatch

    def read(side: str) -> None:
        async def main() -> None:
            loop = asyncio.get_running_loop()
            real = loop.call_soon_threadsafe
            wakeups[side] = 0

            def counted(callback, *args, **kwargs):
                if callback is torch_backend._deliver:
                    wakeups[side] += 1
                return real(callback, *args, **kwargs)

            loop.call_soon_threadsafe = counted
            got[side] = await asyncio.gather(*(collect(eng, f"{side}{i}", TEXTS[i]) for i in range(4)))

        asyncio.run(main())

    try:
        threads = [threading.Thread(target=read, args=(side,)) for side in "ab"]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        sent = handovers
        solo = [asyncio.run(collect(eng, f"solo{i}", TEXTS[i])) for i in range(4)]
    finally:
        asyncio.run(eng.aclose())
    for side in "ab":
        for (codes, reason), (want, want_reason) in zip(got[side], solo):
            assert reason is want_reason is FinishReason.STOP and torch.equal(codes, want)
        frames = sum(codes.shape[1] for codes, _ in got[side])
        assert frames == 4 * 24 and 0 < wakeups[side] <= sent < frames


# -- the event loop does no device work ------------------------------------------------------------

@pytest.mark.parametrize("path", ["reference", "fast"])
async def test_prompts_are_embedded_by_the_worker_not_the_event_loop(tiny_model, monkeypatch, path):
    # on CUDA a blocking copy to the device from the event loop waits for the stream's queued work;
    # the loop only checks and tokenises, the engine's worker thread builds the embeddings
    embedded_on = []
    prompt_embeds = tiny_model.prompt_embeds

    def recording(*args, **kwargs):
        embedded_on.append(threading.current_thread().name)
        return prompt_embeds(*args, **kwargs)

    monkeypatch.setattr(tiny_model, "prompt_embeds", recording)
    eng = TorchEngine(tiny_model, TorchEngineConfig(max_batch=4, path=path))
    try:
        plain, _ = await collect(eng, "plain", TEXTS[0])
        guided, _ = await collect(eng, "cfg", TEXTS[1], SamplingParams(temperature=0.0, cfg_scale=1.5))
    finally:
        await eng.aclose()
    assert embedded_on == ["gepard-torch-engine"] * 3  # one prompt, then CFG's two
    monkeypatch.setattr(tiny_model, "prompt_embeds", prompt_embeds)
    reference = TorchEngine(tiny_model, TorchEngineConfig(max_batch=4, path="reference"))
    try:  # the frames are the reference loop's, as before
        assert torch.equal(plain, (await collect(reference, "plain", TEXTS[0]))[0])
        assert torch.equal(guided, (await collect(reference, "cfg", TEXTS[1], SamplingParams(temperature=0.0, cfg_scale=1.5)))[0])
    finally:
        await reference.aclose()


async def test_a_prompt_that_cannot_be_built_fails_its_request_alone(engine, monkeypatch):
    alone = [(await collect(engine, f"solo{i}", t))[0] for i, t in enumerate(TEXTS[:2])]
    embed = engine.embed

    def embed_failing(planned):
        if planned.request_id == "bad":
            raise RuntimeError("injected embedding fault")
        return embed(planned)

    monkeypatch.setattr(engine, "embed", embed_failing)
    results = await asyncio.gather(*[collect(engine, f"ok{i}", t) for i, t in enumerate(TEXTS[:2])],
                                   collect(engine, "bad", TEXTS[2]), return_exceptions=True)
    assert isinstance(results[2], GenerationError) and not isinstance(results[2], EngineDeadError)
    assert str(results[2]) == "request bad: building its prompt failed: RuntimeError: injected embedding fault"
    for solo, (codes, reason) in zip(alone, results[:2]):
        assert torch.equal(solo, codes) and reason is FinishReason.STOP
    await engine.check_health()
    assert engine.num_requests == 0 and engine.stats().waiting == 0


# -- closing, cancelling and reusing an id ----------------------------------------------------------

async def test_closing_the_engine_ends_open_requests_and_refuses_new_ones(never_stop_dir):
    eng = TorchEngine(GepardModel.from_pretrained(never_stop_dir))
    stream = eng.generate(SynthesisRequest("open", TEXTS[1], None, SamplingParams(temperature=0.0, max_frames=2000)))
    await stream.__anext__()
    await eng.aclose()
    with pytest.raises(EngineDeadError, match="torch engine closed while the request was open"):
        await asyncio.wait_for(stream.__anext__(), 2)  # used to wait forever
    with pytest.raises(EngineDeadError, match="torch engine is closed"):
        await asyncio.wait_for(collect(eng, "new", TEXTS[0]), 2)  # used to be accepted and wait forever
    with pytest.raises(EngineDeadError, match="torch engine is closed"):
        await eng.check_health()
    assert eng._mailboxes == {}  # no caller left waiting


@pytest.mark.parametrize("path", ["reference", "fast"])
async def test_an_id_reused_right_after_its_cancel_runs_the_new_request_normally(never_stop_dir, path):
    """The abort of the cancelled request must not hit the new one (it used to: 0 frames and ABORT),
    and none of the old request's frames may reach it."""
    eng = TorchEngine(GepardModel.from_pretrained(never_stop_dir), TorchEngineConfig(path=path, max_positions=2200))
    try:
        stream = eng.generate(SynthesisRequest("x", TEXTS[1], None, SamplingParams(temperature=0.0, max_frames=2000)))
        await stream.__anext__()
        await stream.aclose()  # aborts "x"; the worker drops it at its next step
        short = SamplingParams(temperature=0.0, max_frames=5)
        codes, reason = await asyncio.wait_for(collect(eng, "x", TEXTS[0], short), 10)
        assert reason is FinishReason.LENGTH and codes.shape[1] == 5
        fresh, _ = await collect(eng, "fresh", TEXTS[0], short)
        assert torch.equal(codes, fresh)
        assert eng.num_requests == 0
        with pytest.raises(InvalidRequestError, match="request id 'y' is already running"):  # a live id stays taken
            running = eng.generate(SynthesisRequest("y", TEXTS[1], None, SamplingParams(temperature=0.0, max_frames=2000)))
            await running.__anext__()
            await eng.generate(SynthesisRequest("y", TEXTS[0], None, short)).__anext__()
        await running.aclose()
    finally:
        await eng.aclose()


async def test_only_a_request_its_consumer_left_is_logged_as_aborted(never_stop_dir, caplog):
    caplog.set_level(logging.INFO, logger="engine.backends.torch_backend")
    eng = TorchEngine(GepardModel.from_pretrained(never_stop_dir))
    try:
        let_through(eng, "bad", temperature=float("nan"))
        with pytest.raises(GenerationError, match="request bad: sampled code"):
            await collect(eng, "bad", TEXTS[0])
        await collect(eng, "done", TEXTS[0], SamplingParams(temperature=0.0, max_frames=3))
        assert not [r for r in caplog.records if "aborted" in r.getMessage()]  # failed, finished: not aborted
        stream = eng.generate(SynthesisRequest("left", TEXTS[1], None, SamplingParams(temperature=0.0, max_frames=2000)))
        await stream.__anext__()
        await stream.aclose()
        assert [r.getMessage() for r in caplog.records if "aborted" in r.getMessage()] == ["request left aborted"]
    finally:
        await eng.aclose()
