"""Aborts, caps and shutdown of VllmEngine on a checkpoint whose stop head never fires.

One engine for the module; the last test closes it while a request is running.
"""

import asyncio

import pytest
import pytest_asyncio
import torch

pytest.importorskip("vllm")

from engine.backends.vllm_backend import VllmEngine, VllmEngineConfig  # noqa: E402
from engine.errors import EngineDeadError, InvalidRequestError  # noqa: E402
from engine.requests import FinishReason, SamplingParams, SynthesisRequest  # noqa: E402

pytestmark = [pytest.mark.vllm, pytest.mark.asyncio(loop_scope="module")]

TEXTS = ["Hello there.", "The quick brown fox jumps over the lazy dog.", "One.", "Hola, ¿cómo estás?",
         "Good morning, and welcome to the show.", "It costs twenty five dollars.", "Bom dia.", "De kat slaapt."]
FRAMES = 40


def engine_pids() -> set[int]:
    import psutil

    return {p.pid for p in psutil.Process().children(recursive=True)
            if p.status() != psutil.STATUS_ZOMBIE and p.name().startswith("VLLM")}


@pytest.fixture(scope="module")
def never_stop_dir(tmp_path_factory):
    from engine.tiny import write_tiny_checkpoint

    return write_tiny_checkpoint(tmp_path_factory.mktemp("never-stop"), stop_after=0, with_codec=False)


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def engine(never_stop_dir):
    before = engine_pids()
    eng = await VllmEngine.start(VllmEngineConfig(model=never_stop_dir, max_batch=8, max_model_len=512))
    started = engine_pids() - before
    yield eng
    await eng.aclose()
    for _ in range(150):
        if not started & engine_pids():
            break
        await asyncio.sleep(0.1)
    assert not started & engine_pids(), "engine processes left behind after aclose()"


def request(i: int, max_frames: int = FRAMES) -> SynthesisRequest:
    return SynthesisRequest(f"r{i}", TEXTS[i], None, SamplingParams(temperature=0.0, max_frames=max_frames))


async def collect(engine, req):
    chunks = [c async for c in engine.generate(req)]
    return torch.cat([c.codes for c in chunks], dim=1), chunks[-1].finish_reason


async def consuming(engine, req) -> asyncio.Task:
    """A task reading ``req``'s stream to its end, returned once the first chunk has come."""
    started = asyncio.Event()

    async def consume():
        async for _ in engine.generate(req):
            started.set()

    task = asyncio.create_task(consume())
    await started.wait()
    return task


async def wait_until_idle(engine):
    for _ in range(100):
        load = engine.load()
        if load.running == 0 and load.kv_cache_usage == 0.0 and load.unfinished == 0:
            return load
        await asyncio.sleep(0.05)
    return engine.load()


async def cancelled_with_a_slow_abort(engine, monkeypatch, req) -> tuple["asyncio.Task", asyncio.Event]:
    """A consuming task for ``req``, cancelled once, its cleanup now in an abort that takes 0.3 s;
    the event is set when that abort is through."""
    abort, aborting, aborted = engine.abort, asyncio.Event(), asyncio.Event()

    async def slow_abort(request_id):
        aborting.set()
        await asyncio.sleep(0.3)
        await abort(request_id)
        aborted.set()

    monkeypatch.setattr(engine, "abort", slow_abort)
    task = await consuming(engine, req)
    task.cancel()
    await aborting.wait()
    return task, aborted


async def test_a_second_cancel_during_the_abort_still_frees_the_request(engine, monkeypatch):
    """A consumer cancelled twice (say, its context and then its socket): the second cancel lands
    while the stream's cleanup awaits the abort. The request must still be aborted and stop counting
    against the engine's capacity."""
    task, aborted = await cancelled_with_a_slow_abort(engine, monkeypatch, request(3, max_frames=400))
    task.cancel()  # the second cancel, while the first one's cleanup awaits the abort
    with pytest.raises(asyncio.CancelledError):
        await task
    # the shielded abort outlives the cancelled task; the id stays registered until it is through
    # (the test below: a request reusing it meanwhile is refused, not killed by that abort)
    await asyncio.wait_for(aborted.wait(), 10)
    assert await id_released(engine, request(3).request_id)
    load = await wait_until_idle(engine)
    assert (load.unfinished, load.running, load.kv_cache_usage) == (0, 0, 0.0)


async def id_released(engine, rid) -> bool:
    for _ in range(100):
        if rid not in engine._streams:
            return True
        await asyncio.sleep(0.01)
    return False


async def test_an_id_reused_while_its_abort_is_pending_is_refused_not_aborted_later(engine, monkeypatch):
    """vLLM aborts by external id: every live request of that id. A request reusing the id of one
    whose (slow) abort is still pending must not be the one that abort kills: it is refused as
    "already running" (or, were it accepted, it would have to run to its end)."""
    task, aborted = await cancelled_with_a_slow_abort(engine, monkeypatch, request(5, max_frames=400))
    task.cancel()  # generate() returns while its abort is still pending
    with pytest.raises(asyncio.CancelledError):
        await task
    assert not aborted.is_set()
    try:
        codes, reason = await collect(engine, request(5, max_frames=400))
    except InvalidRequestError as exc:
        assert "already running" in str(exc)
    else:
        assert reason is FinishReason.LENGTH and codes.shape[1] == 400, (reason, codes.shape)
    await asyncio.wait_for(aborted.wait(), 10)
    assert await id_released(engine, request(5).request_id)
    codes, reason = await collect(engine, request(5))  # once the abort is through, the id is free again
    assert reason is FinishReason.LENGTH and codes.shape[1] == FRAMES
    load = await wait_until_idle(engine)
    assert (load.unfinished, load.running, load.kv_cache_usage) == (0, 0, 0.0)


async def test_aborting_one_of_eight_stops_it_within_two_steps_and_spares_the_others(engine):
    solo = [(await collect(engine, request(i)))[0] for i in range(1, 8)]
    victim = 0

    async def run_victim():
        frames, after, mark, reason = 0, 0, None, None
        async for chunk in engine.generate(request(victim, max_frames=400)):
            if mark is not None:
                after += chunk.num_frames
            frames += chunk.num_frames
            reason = chunk.finish_reason
            if mark is None and frames >= 8:
                await engine.abort(request(victim).request_id)
                mark = len(engine.running_per_step())  # engine steps reported before the abort took effect
        return reason, after, mark

    results = await asyncio.gather(run_victim(), *[collect(engine, request(i)) for i in range(1, 8)])
    reason, frames_after_abort, mark = results[0]
    assert reason is FinishReason.ABORT and frames_after_abort == 0
    steps = engine.running_per_step()
    assert max(steps[:mark]) == 8  # all eight were running together when the abort came
    # steps after the abort that still carried all eight requests: at most the one in flight and the next
    assert sum(1 for n in steps[mark:] if n == 8) <= 2, steps[mark - 3:]
    for i, (codes, finish) in enumerate(results[1:]):
        assert finish is FinishReason.LENGTH and torch.equal(codes, solo[i]), i
    load = await wait_until_idle(engine)
    assert (load.unfinished, load.running, load.waiting, load.kv_cache_usage) == (0, 0, 0, 0.0)


async def test_closing_or_cancelling_the_stream_aborts_the_request(engine):
    stream = engine.generate(request(1, max_frames=400))
    await stream.__anext__()
    await stream.aclose()
    load = await wait_until_idle(engine)
    assert (load.unfinished, load.running, load.kv_cache_usage) == (0, 0, 0.0)

    task = await consuming(engine, request(2, max_frames=400))
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    load = await wait_until_idle(engine)
    assert (load.unfinished, load.running, load.kv_cache_usage) == (0, 0, 0.0)


async def test_adaptive_cap_stops_a_runaway(engine):
    codes, reason = await collect(engine, SynthesisRequest("runaway", "Hi.", None, SamplingParams(temperature=0.0)))
    assert reason is FinishReason.LENGTH and codes.shape == (32, 95)  # as on the torch backend


async def test_aclose_ends_running_streams_and_refuses_new_ones(engine):
    stream = engine.generate(request(3, max_frames=400))
    first = await stream.__anext__()
    await engine.aclose()
    rest = [chunk async for chunk in stream]
    assert rest[-1].finish_reason is FinishReason.ABORT and first.finish_reason is None
    with pytest.raises(EngineDeadError, match="closed"):
        await engine.check_health()
    with pytest.raises(EngineDeadError, match="closed"):
        await collect(engine, request(4))
