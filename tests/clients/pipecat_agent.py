"""A pipecat 1.14 voice agent's TTS stage, pointed at a gateway: run by tests/api/routes/test_real_clients.py
in the clients' own virtual environment (.venv-clients, ``./run.sh test`` makes it), never imported by
the suite.

    python pipecat_agent.py SCENARIO BASE_URL API_KEY VOICE_ID

SCENARIO is one of:

    turns      four pipelines, one after another: CartesiaTTSService (WebSocket) speaking one
               TTSSpeakFrame, read until its TTSStoppedFrame; the same turn as an LLM streams it
               (LLMTextFrame tokens between LLMFullResponseStart/EndFrame: pipecat aggregates them
               into sentences, sends each with continue=true and flushes at the end); the
               TTSSpeakFrame with the voice ``missing`` (it does not exist); CartesiaHttpTTSService
               (/tts/bytes) speaking the TTSSpeakFrame
    idle       a turn, then silence until the server has closed the idle socket (its idle timeout,
               as Cartesia's after 5 minutes) and pipecat has opened another, then the next turn on
               that socket. Sent at once: a turn sent just as the server closes a socket crosses its
               close frame and is lost (pipecat reports an error frame), at Cartesia too
    interrupt  a long turn interrupted (InterruptionFrame) at its first audio, then a second turn;
               after that turn it prints a line, ``between turns``, and waits for a line on stdin
               before it ends, so the test can look at the server while the socket is still open

The WebSocket URL is BASE_URL's, as a pipecat user writes it: ``wss://host:port/tts/websocket``.
The last line printed is a JSON object, for each pipeline: what reached the end of the pipeline
(frame types, audio bytes per context, the words of the TTSTextFrames), the text of every
ErrorFrame (pipecat pushes those upstream, to its start) and how often the service connected.
"""

from __future__ import annotations

import asyncio
import json
import sys

from loguru import logger
from pipecat.frames.frames import (
    EndFrame,
    ErrorFrame,
    Frame,
    InterruptionFrame,
    LLMFullResponseEndFrame,
    LLMFullResponseStartFrame,
    LLMTextFrame,
    TTSAudioRawFrame,
    TTSSpeakFrame,
    TTSStoppedFrame,
    TTSTextFrame,
)
from pipecat.pipeline.pipeline import Pipeline
from pipecat.pipeline.worker import PipelineParams, PipelineWorker
from pipecat.processors.frame_processor import FrameDirection, FrameProcessor
from pipecat.services.cartesia.tts import CartesiaHttpTTSService, CartesiaTTSService
from pipecat.workers.runner import WorkerRunner

SAMPLE_RATE = 16000  # a telephony pipeline's rate (pipecat's own default is 24 kHz): the rate is passed through
TURN = "Hello there! I am your assistant. How can I help?"
# long enough that, were the cancel ignored, its context would still be generating when the next turn ends
LONG_TURN = " ".join(f"This is sentence number {n} of an answer that will be interrupted." for n in range(40))
NEXT_TURN = "Sure, go ahead."
WAIT_S = 60.0


class Recorder(FrameProcessor):
    """Keeps every frame that passes it in ``direction``, in order: the pipeline's last stage for
    what the TTS sends on (audio, words), its first for what it reports back (ErrorFrame goes up)."""

    def __init__(self, direction: FrameDirection) -> None:
        super().__init__()
        self.direction = direction
        self.frames: list[Frame] = []
        self.stopped: asyncio.Queue[TTSStoppedFrame] = asyncio.Queue()
        self.first_audio = asyncio.Event()

    async def process_frame(self, frame: Frame, direction: FrameDirection) -> None:
        await super().process_frame(frame, direction)
        if direction is not self.direction:
            await self.push_frame(frame, direction)
            return
        self.frames.append(frame)
        if isinstance(frame, TTSStoppedFrame):
            self.stopped.put_nowait(frame)
        if isinstance(frame, TTSAudioRawFrame):
            self.first_audio.set()
        await self.push_frame(frame, direction)


async def run(scenario: str, base_url: str, api_key: str, voice_id: str) -> dict:
    ws_url = base_url.replace("http", "ws", 1) + "/tts/websocket"
    if scenario in ("interrupt", "idle"):
        return {scenario: await pipeline(scenario, ws_url, api_key, voice_id)}
    if scenario == "turns":
        return {"turn": await pipeline("turn", ws_url, api_key, voice_id),
                "llm": await pipeline("llm", ws_url, api_key, voice_id),
                "missing_voice": await pipeline("turn", ws_url, api_key, "missing"),
                "http": await pipeline("http", base_url, api_key, voice_id)}
    raise SystemExit(f"unknown scenario {scenario!r}")


async def pipeline(scenario: str, url: str, api_key: str, voice_id: str) -> dict:
    """One pipeline, the TTS service between two recorders, driven through ``scenario``."""
    settings = dict(api_key=api_key, sample_rate=SAMPLE_RATE)
    if scenario == "http":
        tts = CartesiaHttpTTSService(base_url=url, settings=CartesiaHttpTTSService.Settings(voice=voice_id), **settings)
    else:
        tts = CartesiaTTSService(url=url, settings=CartesiaTTSService.Settings(voice=voice_id), **settings)
    connects = 0
    reconnected = asyncio.Event()

    @tts.event_handler("on_connected")
    async def _connected(_tts) -> None:
        nonlocal connects
        connects += 1
        if connects > 1:
            reconnected.set()

    recorder, upstream = Recorder(FrameDirection.DOWNSTREAM), Recorder(FrameDirection.UPSTREAM)
    worker = PipelineWorker(Pipeline([upstream, tts, recorder]), cancel_on_idle_timeout=False,
                            params=PipelineParams(audio_out_sample_rate=SAMPLE_RATE))
    started = asyncio.Event()

    @worker.event_handler("on_pipeline_started")
    async def _started(_worker, _frame) -> None:
        started.set()

    async def drive() -> None:
        await asyncio.wait_for(started.wait(), WAIT_S)
        interrupted = None
        if scenario == "interrupt":
            await worker.queue_frame(TTSSpeakFrame(LONG_TURN))
            await asyncio.wait_for(recorder.first_audio.wait(), WAIT_S)
            interrupted = next(f.context_id for f in recorder.frames if isinstance(f, TTSAudioRawFrame))
            await worker.queue_frame(InterruptionFrame())  # a user spoke: pipecat cancels the context
            await worker.queue_frame(TTSSpeakFrame(NEXT_TURN))
        elif scenario == "idle":
            await worker.queue_frame(TTSSpeakFrame(TURN))
            await asyncio.wait_for(recorder.stopped.get(), WAIT_S)
            await asyncio.wait_for(reconnected.wait(), WAIT_S)  # the server closed the idle socket
            await worker.queue_frame(TTSSpeakFrame(NEXT_TURN))
        elif scenario == "llm":
            await worker.queue_frame(LLMFullResponseStartFrame())
            for token in llm_tokens(TURN):
                await worker.queue_frame(LLMTextFrame(token))
            await worker.queue_frame(LLMFullResponseEndFrame())
        else:
            await worker.queue_frame(TTSSpeakFrame(TURN))
        # the turn that was not interrupted ends with its TTSStoppedFrame (the interrupted one may too)
        while (await asyncio.wait_for(recorder.stopped.get(), WAIT_S)).context_id in (None, interrupted):
            pass
        if scenario == "interrupt":
            print("between turns", flush=True)
            await asyncio.get_running_loop().run_in_executor(None, sys.stdin.readline)
        await worker.queue_frame(EndFrame())

    runner = WorkerRunner()
    await runner.add_workers(worker)
    await asyncio.gather(runner.run(), drive())
    return {**report(recorder.frames, upstream.frames), "connects": connects}


def llm_tokens(text: str) -> list[str]:
    """``text`` as an LLM streams it: short pieces, a word's leading space included."""
    words = text.split(" ")
    return [words[0]] + [f" {w}" for w in words[1:]]


def report(frames: list[Frame], upstream: list[Frame]) -> dict:
    audio: dict[str, int] = {}
    for f in frames:
        if isinstance(f, TTSAudioRawFrame):
            assert f.sample_rate == SAMPLE_RATE and f.num_channels == 1
            audio[str(f.context_id)] = audio.get(str(f.context_id), 0) + len(f.audio)
    return {
        "types": [type(f).__name__ for f in frames],
        "audio_bytes": list(audio.values()),  # per context, in the order their audio began
        "words": [f.text for f in frames if isinstance(f, TTSTextFrame)],
        "errors": [str(f.error) for f in frames + upstream if isinstance(f, ErrorFrame)],
    }


if __name__ == "__main__":
    logger.remove()
    logger.add(sys.stderr, level="WARNING")
    print(json.dumps(asyncio.run(run(*sys.argv[1:]))), flush=True)
