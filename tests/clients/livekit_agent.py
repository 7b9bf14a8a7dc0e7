"""A LiveKit agent's TTS (livekit-plugins-cartesia 1.8.9), pointed at a gateway: run by
tests/api/routes/test_real_clients.py in the clients' own virtual environment (.venv-clients,
``./run.sh test`` makes it), never imported by the suite.

    python livekit_agent.py SCENARIO BASE_URL API_KEY VOICE_ID

SCENARIO is one of:

    turns      TTS.synthesize(): three sentences over /tts/bytes; then TTS.stream(): the same
               pushed, flushed and ended, over the WebSocket; then a second stream, which LiveKit
               runs on the same pooled socket; then, after update_options(speed=1.25,
               emotion="excited"), a third (sonic-3's generation_config)
    interrupt  a long stream closed (aclose) at its first audio, as an agent does when the user
               speaks, then the next turn's stream. LiveKit sends no cancel: its connection pool
               marks the interrupted socket and closes it when the next stream takes a connection.
               Then it prints ``between turns`` and waits for a line on stdin before it ends, so
               the test can look at the server while the process still holds its sockets

The last line printed is a JSON object: the samples and timed words of each synthesis. LiveKit
raises on an error event or a failed request, so an error ends the process with a traceback.
"""

from __future__ import annotations

import asyncio
import json
import sys

import aiohttp
from livekit.agents.types import USERDATA_TIMED_TRANSCRIPT
from livekit.plugins import cartesia

SAMPLE_RATE = 24000  # the plugin's default
SENTENCES = ["Hi, I'm Kelly. ", "It's 9:30 now - let's go! ", "How can I help?"]
FASTER = 1.25
LONG = [f"This is sentence number {n} of an answer that will be interrupted. " for n in range(40)]


async def run(scenario: str, base_url: str, api_key: str, voice_id: str) -> dict:
    async with aiohttp.ClientSession() as session:
        tts = cartesia.TTS(api_key=api_key, voice=voice_id, base_url=base_url, http_session=session,
                           sample_rate=SAMPLE_RATE)
        try:
            if scenario == "turns":
                syntheses = [await synthesize(tts, "".join(SENTENCES)), await stream(tts, SENTENCES),
                             await stream(tts, ["Second stream."])]
                tts.update_options(speed=FASTER, emotion="excited")
                return {"syntheses": syntheses + [await stream(tts, ["Faster now."])]}
            if scenario == "interrupt":
                interrupted = await stream(tts, LONG, stop_at_first_audio=True)
                answered = await stream(tts, ["Sure, go ahead."])
                print("between turns", flush=True)
                await asyncio.get_running_loop().run_in_executor(None, sys.stdin.readline)
                return {"syntheses": [interrupted, answered]}
            raise SystemExit(f"unknown scenario {scenario!r}")
        finally:
            await tts.aclose()


async def synthesize(tts: cartesia.TTS, text: str) -> dict:
    samples = 0
    async for ev in tts.synthesize(text):
        assert ev.frame.sample_rate == SAMPLE_RATE and ev.frame.num_channels == 1
        samples += ev.frame.samples_per_channel
    return {"samples": samples, "words": []}


async def stream(tts: cartesia.TTS, sentences: list[str], stop_at_first_audio: bool = False) -> dict:
    s = tts.stream()
    for sentence in sentences:
        s.push_text(sentence)
    s.flush()
    s.end_input()
    samples, words = 0, []
    try:
        async for ev in s:
            assert ev.frame.sample_rate == SAMPLE_RATE and ev.frame.num_channels == 1
            samples += ev.frame.samples_per_channel
            words += [w.strip() for w in ev.frame.userdata.get(USERDATA_TIMED_TRANSCRIPT, [])]
            if stop_at_first_audio:
                break
    finally:
        await s.aclose()
    return {"samples": samples, "words": words}


if __name__ == "__main__":
    print(json.dumps(asyncio.run(run(*sys.argv[1:]))), flush=True)
