"""/tts/websocket on a live server with a raw client: contexts multiplexed on one socket, text in
pieces, flushes, buffering, cancel, close, timestamps, every in-band error, idle close.

Audio lengths are exact: every engine request is 24 frames (tests/api/conftest.py), and each
segment (one engine request) is resampled on its own, so all of its audio goes out at once.
"""

from __future__ import annotations

import asyncio
import base64
import json
import time

import httpx
import numpy as np
import pytest
import soxr
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed

from tests.api.conftest import gateway_settings
from tests.api.live import LiveServer
from tests.api.routes.audio_checks import (
    CODEC_RATE_HZ,
    SAMPLES_PER_SEGMENT,
    expected_bytes,
    expected_samples,
    spectral_centroid_hz,
    stretched_samples,
)
from tests.api.routes.ws_helpers import (
    audio_of,
    by_context,
    engine_idle,
    gen,
    read_for,
    read_until_terminal,
    recv,
    send,
    short,
)

pytestmark = pytest.mark.timeout(120)

FMT_16K = {"container": "raw", "encoding": "pcm_s16le", "sample_rate": 16000}
FMT_22K = {"container": "raw", "encoding": "pcm_s16le", "sample_rate": 22050}
FMT_8K_MULAW = {"container": "raw", "encoding": "pcm_mulaw", "sample_rate": 8000}


def ws_url(server) -> str:
    return server.ws_url + "/tts/websocket"


def section_bytes(sections: list[int], fmt: dict) -> list[int]:
    """Expected audio bytes of each flush section (segments per section)."""
    return [n * expected_bytes(1, fmt["encoding"], fmt["sample_rate"]) for n in sections]


def check_context(msgs: list[dict], sections: list[int], fmt: dict) -> None:
    """One context's messages: chunks of flush section k (flush_id k) all arrive before
    flush_done k, flush ids count up from 1, exactly one done and it is last."""
    assert [m["type"] for m in msgs].count("done") == 1 and msgs[-1]["type"] == "done", [short(m) for m in msgs]
    assert all(m["type"] in ("chunk", "flush_done", "done") for m in msgs), [short(m) for m in msgs]
    want = section_bytes(sections, fmt)
    flushes = [m for m in msgs if m["type"] == "flush_done"]
    assert [m["flush_id"] for m in flushes] == list(range(1, len(flushes) + 1))
    assert all(m["flush_done"] is True and m["status_code"] == 206 for m in flushes)
    for k, n_bytes in enumerate(want, start=1):
        chunks = [m for m in msgs if m["type"] == "chunk" and m["flush_id"] == k]
        assert len(b"".join(base64.b64decode(m["data"]) for m in chunks)) == n_bytes, (k, n_bytes)
        if k <= len(flushes):  # that section's audio is complete when its flush_done arrives
            fd = msgs.index(flushes[k - 1])
            assert all(msgs.index(m) < fd for m in chunks), k
    assert len(audio_of(msgs)) == sum(want)


# --- contexts, pieces, flushes ------------------------------------------------------------------


async def test_three_interleaved_contexts_with_pieces_and_flushes(gateway, default_voice_id):
    v = default_voice_id
    fa, fb, fc = FMT_16K, FMT_22K, FMT_8K_MULAW
    opts = {"max_buffer_delay_ms": 5000}
    async with connect(ws_url(gateway)) as ws:
        for msg in [
            gen("A", "Hello ", v, output_format=fa, **opts),
            gen("B", "Good morning, ", v, output_format=fb, **opts),
            gen("C", "One two", v, output_format=fc, **opts),
            gen("A", "there. ", v, output_format=fa, **opts),  # A section 1: "Hello there. "
            gen("A", "", v, output_format=fa, flush=True, **opts),
            gen("B", "my friend.", v, output_format=fb, **opts),  # B section 1
            gen("C", " three", v, output_format=fc, **opts),
            gen("C", "", v, output_format=fc, flush=True, **opts),  # C section 1: "One two three"
            gen("B", "", v, output_format=fb, flush=True, **opts),
            gen("A", "How are you?", v, output_format=fa, **opts),  # A section 2
            gen("A", "", v, output_format=fa, cont=False, **opts),
            gen("B", "", v, output_format=fb, cont=False, **opts),
            gen("C", "Four five. Six seven.", v, output_format=fc, cont=False, **opts),  # C section 2: 2 segments
        ]:
            await send(ws, msg)
        msgs = await read_until_terminal(ws, "ABC")
        ctx = by_context(msgs)
        assert set(ctx) == {"A", "B", "C"}
        check_context(ctx["A"], [1, 1], fa)
        check_context(ctx["B"], [1, 0], fb)
        check_context(ctx["C"], [1, 2], fc)
        assert await read_for(ws, 0.3) == []  # nothing after the three dones


async def test_context_audio_equals_the_bytes_route_and_resamples_per_segment(gateway, default_voice_id):
    """Per-context order is kept: the chunks concatenate to the samples /tts/bytes makes with the
    same seed (up to float rounding: the codec batches concurrent streams); at another rate each
    segment equals the whole segment resampled at once; volume scales the samples."""
    text = "Hello there. How are you today?"
    f32 = {"container": "raw", "encoding": "pcm_f32le", "sample_rate": 22050}
    async with connect(ws_url(gateway)) as ws:
        await send(ws, gen("native", text, default_voice_id, cont=False, seed=77, output_format=f32))
        await send(ws, gen("48k", text, default_voice_id, cont=False, seed=77, output_format=f32 | {"sample_rate": 48000}))
        await send(ws, gen("quiet", text, default_voice_id, cont=False, seed=77, output_format=f32,
                           generation_config={"volume": 0.5}))
        ctx = by_context(await read_until_terminal(ws, ["native", "48k", "quiet"]))
    body = {"model_id": "sonic-3", "transcript": text, "voice": default_voice_id, "output_format": f32, "seed": 77}
    r = httpx.post(gateway.url + "/tts/bytes", json=body, timeout=60)
    native = np.frombuffer(r.content, "<f4")
    assert len(audio_of(ctx["native"])) == len(r.content)
    np.testing.assert_allclose(np.frombuffer(audio_of(ctx["native"]), "<f4"), native, atol=1e-4)
    assert {m["flush_id"] for m in ctx["native"] if m["type"] == "chunk"} == {1}
    whole = np.concatenate([soxr.resample(native[i:i + SAMPLES_PER_SEGMENT], CODEC_RATE_HZ, 48000, quality="HQ")
                            for i in (0, SAMPLES_PER_SEGMENT)])
    streamed = np.frombuffer(audio_of(ctx["48k"]), "<f4")
    assert len(streamed) == len(whole) == 2 * expected_samples(1, 48000)
    assert np.abs(streamed - whole).max() < 1e-3
    np.testing.assert_allclose(np.frombuffer(audio_of(ctx["quiet"]), "<f4"), native * 0.5, atol=1e-4)  # volume


async def test_speed_stretches_each_segment_and_is_fixed_by_the_first_message(gateway, default_voice_id):
    """generation_config.speed stretches every segment of the context to round(N / speed) samples
    at its pitch; like the volume, it is the first message's (a later one's speed changes nothing),
    and the word timestamps follow the stretched audio."""
    v = default_voice_id
    f32 = {"container": "raw", "encoding": "pcm_f32le", "sample_rate": 22050}
    async with connect(ws_url(gateway)) as ws:
        await send(ws, gen("fast", "Hello there. ", v, output_format=f32, temperature=0.0, add_timestamps=True,
                           generation_config={"speed": 1.5}))
        await send(ws, gen("fast", "How are you today?", v, cont=False, output_format=f32, temperature=0.0,
                           add_timestamps=True, generation_config={"speed": 0.6}))
        await send(ws, gen("plain", "Hello there. How are you today?", v, cont=False, output_format=f32,
                           temperature=0.0))
        await send(ws, gen("legacy", "Hello there.", v, cont=False, speed="slow"))
        ctx = by_context(await read_until_terminal(ws, ["fast", "plain", "legacy"]))
    assert all(m["type"] != "error" for msgs in ctx.values() for m in msgs), ctx
    fast = np.frombuffer(audio_of(ctx["fast"]), "<f4")
    plain = np.frombuffer(audio_of(ctx["plain"]), "<f4")
    assert plain.size == 2 * SAMPLES_PER_SEGMENT
    assert fast.size == stretched_samples(2, 1.5)  # both segments at 1.5, the second one's 0.6 ignored
    assert spectral_centroid_hz(fast) == pytest.approx(spectral_centroid_hz(plain), rel=0.05)
    assert len(audio_of(ctx["legacy"])) == stretched_samples(1, 0.8) * 2  # "slow": 0.8, s16
    stamps = [m for m in ctx["fast"] if m["type"] == "timestamps"]
    ends = [e for m in stamps for e in m["word_timestamps"]["end"]]
    starts = [t for m in stamps for t in m["word_timestamps"]["start"]]
    assert len(stamps) == 2 and max(ends) <= fast.size / CODEC_RATE_HZ + 1e-6
    # the second segment starts where the first one's stretched audio ends
    assert stamps[1]["word_timestamps"]["start"][0] >= stretched_samples(1, 1.5) / CODEC_RATE_HZ - 1e-6
    assert starts[-1] < fast.size / CODEC_RATE_HZ


def _post_audio(server, route: str, payload: dict) -> bytes:
    r = httpx.post(server.url + route, json=payload, timeout=60)
    assert r.status_code == 200, r.text
    if route == "/tts/bytes":
        return r.content
    frames = [json.loads(f.split("\ndata: ", 1)[1]) for f in r.text.strip().split("\n\n")]
    assert frames[-1]["type"] == "done"
    return b"".join(base64.b64decode(f["data"]) for f in frames if f["type"] == "chunk")


@pytest.mark.parametrize("rate", [24000, 8000])
async def test_bytes_sse_and_websocket_make_the_same_audio_for_several_sentences(gateway, default_voice_id, rate):
    """The three routes resample each segment on its own, so a multi-sentence transcript is the
    same samples on all of them at any rate (a resampler kept across segments on the HTTP routes
    made other samples from the first segment seam on, and one sample more)."""
    text = "Hello there. This is the second sentence! And a third one?"
    fmt = {"container": "raw", "encoding": "pcm_f32le", "sample_rate": rate}
    payload = {"model_id": "sonic-3", "transcript": text, "voice": default_voice_id, "output_format": fmt, "seed": 7}
    by_bytes = _post_audio(gateway, "/tts/bytes", payload)
    by_sse = _post_audio(gateway, "/tts/sse", payload)
    async with connect(ws_url(gateway)) as ws:
        await send(ws, gen("parity", text, default_voice_id, cont=False, seed=7, output_format=fmt))
        msgs = by_context(await read_until_terminal(ws, ["parity"]))["parity"]
    by_ws = audio_of(msgs)
    assert msgs[-1]["type"] == "done"
    assert len(by_bytes) == len(by_sse) == len(by_ws) == expected_bytes(3, "pcm_f32le", rate)
    a, b, c = (np.frombuffer(x, "<f4") for x in (by_bytes, by_sse, by_ws))
    np.testing.assert_array_equal(a, b)
    np.testing.assert_array_equal(a, c)
    assert np.abs(a).max() > 0.01


@pytest.mark.parametrize("closing", ["", " ", "  \n"])
async def test_empty_or_blank_close_gives_exactly_one_done_and_no_audio(gateway, default_voice_id, closing):
    async with connect(ws_url(gateway)) as ws:
        await send(ws, gen("empty", closing, default_voice_id, cont=False))
        assert await recv(ws) == {"type": "done", "done": True, "status_code": 206, "context_id": "empty"}
        await send(ws, gen("after-text", "Hi there. ", default_voice_id))
        await send(ws, gen("after-text", closing, default_voice_id, cont=False))
        msgs = await read_until_terminal(ws, ["after-text"])
        check_context(msgs, [1], FMT_22K)
        assert await read_for(ws, 0.3) == []


async def test_a_closing_quote_or_emoji_after_its_sentence_gets_no_engine_request(gateway, default_voice_id):
    # the sentence is cut at "!" as it arrives; what follows it alone has no letter for the model
    # to read (it would voice arbitrary audio for seconds): no audio, no timestamps, one done
    async with connect(ws_url(gateway)) as ws:
        for piece in ['He said "Stop!', '"', " \U0001F60A"]:
            await send(ws, gen("tail", piece, default_voice_id, add_timestamps=True))
        await send(ws, gen("tail", "", default_voice_id, cont=False))
        msgs = await read_until_terminal(ws, ["tail"])
    stamps = [m for m in msgs if m["type"] == "timestamps"]
    assert [w for m in stamps for w in m["word_timestamps"]["words"]] == ["He", "said", '"Stop!']
    check_context([m for m in msgs if m["type"] != "timestamps"], [1], FMT_22K)


@pytest.mark.parametrize("mode, words", [("off", ["I", "paid", "$5", "today."]),
                                         ("auto", ["I", "paid", "five", "dollars", "today."])])
async def test_normalization_is_honoured_on_the_socket(gateway, default_voice_id, mode, words):
    async with connect(ws_url(gateway)) as ws:
        await send(ws, gen("norm", "I paid $5 today.", default_voice_id, cont=False, add_timestamps=True,
                           use_normalized_timestamps=True, normalization=mode))
        msgs = await read_until_terminal(ws, ["norm"])
    assert [w for m in msgs if m["type"] == "timestamps" for w in m["word_timestamps"]["words"]] == words


async def test_a_time_and_its_day_stay_one_sentence_and_emoji_are_not_spoken(gateway, default_voice_id):
    """"9 a.m." streams in before "Monday": the segmenter waits for the word after the period, so
    the sentence is not cut there (the model would say "nine a m." and start again), and the emoji
    in it reaches the model as nothing."""
    async with connect(ws_url(gateway)) as ws:
        for piece in ["We're open 9 a.m.", " Mon", "day \U0001F60A through Friday. ", "Bye."]:
            await send(ws, gen("hours", piece, default_voice_id, add_timestamps=True, use_normalized_timestamps=True))
        await send(ws, gen("hours", "", default_voice_id, cont=False))
        msgs = await read_until_terminal(ws, ["hours"])
    words = [w for m in msgs if m["type"] == "timestamps" for w in m["word_timestamps"]["words"]]
    assert words == ["We're", "open", "nine", "a", "m", "Monday", "through", "Friday.", "Bye."]


@pytest.mark.parametrize("normalized, words", [
    (True, ["Your", "plan:", "five", "million", "dollars,", "BP", "one", "twenty", "over", "eighty."]),
    (False, ["Your", "plan:", "**$5", "million**,", "BP", "120/80."]),  # the words as the client sent them
])
async def test_an_llm_reply_streamed_in_pieces_is_read_whole(gateway, default_voice_id, normalized, words):
    """A reply streamed token by token, Markdown and all: the pieces join before the sentence is
    read, so a reading that spans tokens ("$5" + "million") and the marks around it come out whole."""
    async with connect(ws_url(gateway)) as ws:
        for piece in ["Your plan: **$5", " million**, BP", " 120/80."]:
            await send(ws, gen("llm", piece, default_voice_id, add_timestamps=True,
                               use_normalized_timestamps=normalized))
        await send(ws, gen("llm", "", default_voice_id, cont=False))
        msgs = await read_until_terminal(ws, ["llm"])
    assert [w for m in msgs if m["type"] == "timestamps" for w in m["word_timestamps"]["words"]] == words


@pytest.mark.parametrize("normalized, words", [
    (True, ["Options:", "Paris", "Rome.", "Which", "one?"]),  # bullets unsaid, each item a segment
    (False, ["Options:", "-", "Paris", "-", "Rome", "Which", "one?"]),
])
async def test_an_llm_list_streamed_line_by_line_is_read_as_a_list(gateway, default_voice_id, normalized, words):
    async with connect(ws_url(gateway)) as ws:
        for piece in ["Options:\n", "- Paris\n", "- Rome\n", "Which one?"]:
            await send(ws, gen("list", piece, default_voice_id, add_timestamps=True, use_normalized_timestamps=normalized))
        await send(ws, gen("list", "", default_voice_id, cont=False))
        msgs = await read_until_terminal(ws, ["list"])
    assert [w for m in msgs if m["type"] == "timestamps" for w in m["word_timestamps"]["words"]] == words


async def test_an_llm_table_streamed_row_by_row_is_read_cell_by_cell(gateway, default_voice_id):
    """Pipes and the rule row are not said; each row is a segment, a pause after each cell."""
    pieces = ["Plans:\n", "| Plan | Price |\n", "|---|---|\n", "| Basic | $10 |\n", "| Pro | $25 |\n", "Pick one \U0001F60A"]
    async with connect(ws_url(gateway)) as ws:
        for piece in pieces:
            await send(ws, gen("table", piece, default_voice_id, add_timestamps=True, use_normalized_timestamps=True))
        await send(ws, gen("table", "", default_voice_id, cont=False))
        msgs = await read_until_terminal(ws, ["table"])
    assert [w for m in msgs if m["type"] == "timestamps" for w in m["word_timestamps"]["words"]] == [
        "Plans:", "Plan,", "Price.", "Basic,", "ten", "dollars.", "Pro,", "twenty-five", "dollars.", "Pick", "one"]


async def test_input_to_a_closing_context_ends_it_with_one_error_after_its_audio(gateway, default_voice_id):
    """Issue 9.5: a second continue:false (or any input) while the context is still speaking is not
    spoken, and the context's one terminal event is a context_closed error sent after all the audio
    it accepted; never a terminal event first and audio or done after it."""
    async with connect(ws_url(gateway)) as ws:
        await send(ws, gen("fin", "Hello there.", default_voice_id, cont=False))
        await send(ws, gen("fin", "More text.", default_voice_id, cont=False))  # still closing
        msgs = await read_until_terminal(ws, ["fin"])
        assert [m["type"] for m in msgs].count("error") == 1 and msgs[-1]["type"] == "error"
        assert_ws_error(msgs[-1], "fin", 400, "context_closed", "fin")
        check_context([m for m in msgs if m["type"] != "error"] + [{"type": "done", "context_id": "fin"}], [1], FMT_22K)
        assert await read_for(ws, 0.5) == []  # nothing after the terminal event
        await send(ws, gen("fin", "Again.", default_voice_id, cont=False))  # after it ended
        err = await recv(ws)
        assert err["type"] == "error" and err["error_code"] == "context_closed" and err["context_id"] == "fin"
        assert err["status_code"] == 400 and "fin" in err["message"]


async def test_input_to_a_finished_context_is_an_error(gateway, default_voice_id):
    async with connect(ws_url(gateway)) as ws:
        await send(ws, gen("ended", "Hello there.", default_voice_id, cont=False))
        msgs = await read_until_terminal(ws, ["ended"])
        check_context(msgs, [1], FMT_22K)
        await send(ws, gen("ended", "Again.", default_voice_id, cont=False))
        err = await recv(ws)
        assert err["type"] == "error" and err["error_code"] == "context_closed" and err["context_id"] == "ended"


# --- buffering ------------------------------------------------------------------------------------


async def test_first_audio_does_not_wait_for_later_text(gateway, default_voice_id):
    async with connect(ws_url(gateway)) as ws:
        t0 = time.monotonic()
        await send(ws, gen("eager", "Hello there. ", default_voice_id, max_buffer_delay_ms=5000))
        first = await recv(ws, timeout=4.0)  # the timer would say 5 s; the sentence end says now
        assert first["type"] == "chunk" and first["context_id"] == "eager"
        assert time.monotonic() - t0 < 4.0
        await send(ws, gen("eager", "", default_voice_id, cont=False))
        msgs = [first] + await read_until_terminal(ws, ["eager"])
        check_context(msgs, [1], FMT_22K)


async def test_long_clause_is_generated_before_the_timer(gateway, default_voice_id):
    clause = "Well, considering everything you have told me about the project so far, "
    async with connect(ws_url(gateway)) as ws:
        await send(ws, gen("clause", clause, default_voice_id, max_buffer_delay_ms=5000))
        await send(ws, gen("clause", "I think", default_voice_id, max_buffer_delay_ms=5000))
        first = await recv(ws, timeout=4.0)
        assert first["type"] == "chunk"
        await send(ws, gen("clause", " we should wait.", default_voice_id, cont=False))
        msgs = [first] + await read_until_terminal(ws, ["clause"])
        check_context(msgs, [2], FMT_22K)  # the long clause, then "I think we should wait."


async def test_max_buffer_delay_is_the_fallback_timer(gateway, default_voice_id):
    async with connect(ws_url(gateway)) as ws:
        t0 = time.monotonic()
        await send(ws, gen("timer", "no sentence end here", default_voice_id, max_buffer_delay_ms=1200))
        assert await read_for(ws, 0.7) == []  # nothing to say yet: no boundary, timer not due
        first = await recv(ws, timeout=5.0)
        assert first["type"] == "chunk" and time.monotonic() - t0 >= 1.1
        await send(ws, gen("timer", "", default_voice_id, cont=False))
        # the timer says "no sentence end " and keeps "here" (the client may be half-way through
        # it); the close says it
        check_context([first] + await read_until_terminal(ws, ["timer"]), [2], FMT_22K)


def segment_words(msgs: list[dict]) -> list[list[str]]:
    """The words of each spoken segment, from its timestamps event (the tokens as sent)."""
    return [m["word_timestamps"]["words"] for m in msgs if m["type"] == "timestamps"]


async def test_the_timer_cuts_between_words_not_inside_one(gateway, default_voice_id):
    """A client that pauses mid-word ("fo" ... "x") gets the words before it said at the timer;
    the unfinished word waits for its rest, with a new delay of its own."""
    opts = {"add_timestamps": True, "max_buffer_delay_ms": 1500}
    async with connect(ws_url(gateway)) as ws:
        await send(ws, gen("word", "The quick brown fo", default_voice_id, **opts))
        await asyncio.sleep(2.2)  # the timer fired at 1.5 s; the one for "fo" is due at 3 s
        await send(ws, gen("word", "x jumps.", default_voice_id, cont=False, **opts))
        msgs = await read_until_terminal(ws, ["word"])
    assert segment_words(msgs) == [["The", "quick", "brown"], ["fox", "jumps."]]


async def test_the_timer_does_not_part_words_read_together(gateway, default_voice_id):
    """An LLM that stalls after "$5 million" has "$5" and "million" said together, as "five
    million dollars", once its next words come: the timer cuts before them, between plain words."""
    opts = {"add_timestamps": True, "max_buffer_delay_ms": 1500}
    async with connect(ws_url(gateway)) as ws:
        await send(ws, gen("scale", "The price is $5 million", default_voice_id, **opts))
        await asyncio.sleep(2.2)  # the timer fired at 1.5 s
        await send(ws, gen("scale", " for the plan.", default_voice_id, cont=False, **opts))
        msgs = await read_until_terminal(ws, ["scale"])
    assert segment_words(msgs) == [["The", "price"], ["is", "$5", "million", "for", "the", "plan."]]


async def test_what_the_timer_kept_back_is_said_at_the_next_one(gateway, default_voice_id):
    """A client that goes quiet after "$5 million" hears it one delay later, all of it at once,
    not a word more per delay."""
    opts = {"add_timestamps": True, "max_buffer_delay_ms": 1000}
    async with connect(ws_url(gateway)) as ws:
        await send(ws, gen("quiet", "The price is $5 million", default_voice_id, **opts))
        heard: list[dict] = []
        deadline = time.monotonic() + 20
        while len(segment_words(heard)) < 2 and time.monotonic() < deadline:  # before any close
            heard += await read_for(ws, 0.5)
        await send(ws, gen("quiet", "", default_voice_id, cont=False))
        msgs = heard + await read_until_terminal(ws, ["quiet"])
    assert segment_words(msgs) == [["The", "price"], ["is", "$5", "million"]]


async def test_text_left_after_a_sentence_gets_its_own_buffer_delay(gateway, default_voice_id):
    """The timer runs from the first text buffered since the last cut: text left over after a
    sentence is not cut early on the deadline of the sentence that went before it."""
    opts = {"add_timestamps": True, "max_buffer_delay_ms": 2000}
    async with connect(ws_url(gateway)) as ws:
        await send(ws, gen("left", "First sentence", default_voice_id, **opts))
        await asyncio.sleep(1.0)
        await send(ws, gen("left", " ends here. Second sen", default_voice_id, **opts))  # "Second sen": due at 3 s
        await asyncio.sleep(1.5)  # past the first text's 2 s
        await send(ws, gen("left", "tence ends.", default_voice_id, cont=False, **opts))
        msgs = await read_until_terminal(ws, ["left"])
    assert segment_words(msgs) == [["First", "sentence", "ends", "here."], ["Second", "sentence", "ends."]]


async def test_zero_delay_generates_each_submission_at_once(gateway, default_voice_id):
    async with connect(ws_url(gateway)) as ws:
        await send(ws, gen("zero", "no boundary", default_voice_id, max_buffer_delay_ms=0))
        first = await recv(ws, timeout=4.0)
        assert first["type"] == "chunk"
        await send(ws, gen("zero", " and more", default_voice_id, max_buffer_delay_ms=0, cont=False))
        check_context([first] + await read_until_terminal(ws, ["zero"]), [2], FMT_22K)


# --- cancel and close -------------------------------------------------------------------------------


async def probe(ws) -> list[dict]:
    """Send a message the server answers at once (unknown model) and wait for that answer: every
    message the server sent before it was sent before the probe was read. Returns those messages."""
    cid = f"probe-{time.monotonic_ns()}"
    await send(ws, gen(cid, "x", "v") | {"model_id": "no-such-model"})
    before: list[dict] = []
    while True:
        msg = await recv(ws)
        if msg["context_id"] == cid:
            assert msg["type"] == "error" and msg["error_code"] == "model_not_found"
            return before
        before.append(msg)


async def test_cancel_mid_stream_sends_nothing_more_and_stops_the_engine(gateway, default_voice_id):
    long_text = " ".join(f"Sentence {w}." for w in "one two three four five six seven eight".split())
    async with connect(ws_url(gateway)) as ws:
        await send(ws, gen("victim", long_text, default_voice_id, cont=False, output_format=FMT_16K))
        await send(ws, gen("bystander", "Hello there. Fine thanks.", default_voice_id, cont=False,
                           output_format=FMT_16K))
        seen: list[dict] = []
        while not any(m["context_id"] == "victim" and m["type"] == "chunk" for m in seen):
            seen.append(await recv(ws))
        await send(ws, {"context_id": "victim", "cancel": True})
        seen += await probe(ws)  # may still hold victim audio that was on the wire before the cancel
        after = await read_until_terminal(ws, ["bystander"]) if not any(
            m["context_id"] == "bystander" and m["type"] == "done" for m in seen) else []
        after += await read_for(ws, 0.5)
        assert all(m["context_id"] != "victim" for m in after), [short(m) for m in after]
        assert not any(m["context_id"] == "victim" and m["done"] for m in seen)
        # the other context is untouched: all its audio, one done
        bystander = [m for m in seen + after if m["context_id"] == "bystander"]
        check_context(bystander, [2], FMT_16K)
        assert engine_idle(gateway, timeout_s=3.0, hold_s=0.8)
        # later input for a cancelled context is dropped silently
        await send(ws, gen("victim", "Are you there?", default_voice_id, cont=False))
        await send(ws, {"context_id": "victim", "cancel": True})
        assert await probe(ws) == []
        assert await read_for(ws, 0.3) == []


async def test_cancel_of_unknown_or_finished_context_is_silent(gateway, default_voice_id):
    async with connect(ws_url(gateway)) as ws:
        await send(ws, {"context_id": "never-opened", "cancel": True})
        await send(ws, gen("done-one", "", default_voice_id, cont=False))
        assert (await recv(ws))["type"] == "done"
        await send(ws, {"context_id": "done-one", "cancel": True})
        assert await probe(ws) == []


async def test_nothing_after_a_cancel_even_of_an_id_not_open(gateway, default_voice_id):
    """The SDKs stop routing a cancelled id's events (4.2.0's sync client hands strays to whichever
    context is reading, and a done among them ends that one's receive), and they let push() go on
    after cancel(): a late token for a turn cancelled before it opened, or after it finished, must
    neither speak nor be answered."""
    v = default_voice_id
    async with connect(ws_url(gateway)) as ws:
        await send(ws, {"context_id": "pre", "cancel": True})  # cancelled before its first message
        await send(ws, gen("pre", "Hello there.", v, cont=False))
        await send(ws, gen("ended", "Hi.", v, cont=False))
        assert (await read_until_terminal(ws, ["ended"]))[-1]["type"] == "done"
        await send(ws, {"context_id": "ended", "cancel": True})  # cancelled after its done
        await send(ws, gen("ended", "More.", v, cont=False))
        assert await probe(ws) == []


async def test_client_close_cancels_every_context(gateway, default_voice_id):
    long_text = " ".join(f"Part {w}." for w in "one two three four five six seven eight".split())
    async with connect(ws_url(gateway)) as ws:
        await send(ws, gen("x", long_text, default_voice_id, cont=False))
        await send(ws, gen("y", long_text, default_voice_id, cont=False))
        while (await recv(ws))["type"] != "chunk":
            pass
    assert engine_idle(gateway, timeout_s=3.0, hold_s=1.0), "contexts kept generating after the socket closed"


# --- timestamps ---------------------------------------------------------------------------------------


async def test_timestamps_across_continuations(gateway, default_voice_id):
    pieces = ["Hello, ", "world! ", "It's a ", "fine day, ", "isn't it? ", "Yes. "]
    async with connect(ws_url(gateway)) as ws:
        for piece in pieces:
            await send(ws, gen("ts", piece, default_voice_id, add_timestamps=True, max_buffer_delay_ms=5000))
        await send(ws, gen("ts", "", default_voice_id, add_timestamps=True, flush=True))
        await send(ws, gen("ts", "Bye now.", default_voice_id, add_timestamps=True, cont=False))
        msgs = await read_until_terminal(ws, ["ts"])
    stamps = [m for m in msgs if m["type"] == "timestamps"]
    words = [w for m in stamps for w in m["word_timestamps"]["words"]]
    starts = [t for m in stamps for t in m["word_timestamps"]["start"]]
    ends = [t for m in stamps for t in m["word_timestamps"]["end"]]
    assert words == "".join(pieces + ["Bye now."]).split()  # original tokens, punctuation attached
    segments = 4  # "Hello, world! " "It's a fine day, isn't it? " "Yes." | "Bye now."
    seconds = segments * SAMPLES_PER_SEGMENT / CODEC_RATE_HZ
    assert all(0 <= s <= e <= seconds + 1e-6 for s, e in zip(starts, ends))
    assert starts == sorted(starts) and ends == sorted(ends)
    assert starts[words.index("Bye")] >= 3 * SAMPLES_PER_SEGMENT / CODEC_RATE_HZ - 1e-6  # times keep increasing
    assert all(m["flush_id"] == (2 if "Bye" in m["word_timestamps"]["words"] else 1) for m in stamps)
    assert msgs[-1]["type"] == "done"
    check_context([m for m in msgs if m["type"] != "timestamps"], [3, 1], FMT_22K)


# --- errors --------------------------------------------------------------------------------------------


def assert_ws_error(msg: dict, context_id, status: int, error_code: str, *needles: str) -> None:
    assert msg["type"] == "error" and msg["done"] is True, short(msg)
    assert msg["context_id"] == context_id and msg["status_code"] == status and msg["error_code"] == error_code, msg
    assert msg["title"] and msg["request_id"] and msg["error"] == f"{msg['title']}: {msg['message']}"
    for needle in needles:
        assert needle in msg["message"], (needle, msg["message"])


async def test_every_in_band_error_names_its_context(gateway, default_voice_id):
    v = default_voice_id
    limit = gateway.runtime.settings.max_transcript_chars
    missing_voice = gen("e-missing", "Hi.", v)
    del missing_voice["voice"]
    cases = [
        ('{"context_id": "e-json", "transcript": "oops"', "e-json", 400, "invalid_json", "not valid JSON"),
        (missing_voice, "e-missing", 400, "missing_field", "voice"),
        (gen("e-voice", "Hi there.", "no-such-voice-id"), "e-voice", 404, "voice_not_found", "no-such-voice-id"),
        (gen("e-model", "Hi.", v) | {"model_id": "gpt-4o-mini-tts"}, "e-model", 400, "model_not_found",
         "gpt-4o-mini-tts"),
        (gen("e-wav", "Hi.", v, output_format={"container": "wav", "encoding": "pcm_s16le", "sample_rate": 16000}),
         "e-wav", 400, "invalid_output_format", "raw"),
        (gen("e-rate", "Hi.", v, output_format={"container": "raw", "encoding": "pcm_s16le", "sample_rate": 12345}),
         "e-rate", 400, "invalid_output_format", "sample_rate"),
        (gen("e-long", "a" * (limit + 1), v), "e-long", 400, "transcript_too_long", str(limit)),
        (gen("e-speed", "Hi.", v, generation_config={"speed": 1.6}), "e-speed", 400, "invalid_request",
         "generation_config.speed: must be between 0.6 and 1.5, got 1.6"),
        (gen("e-delay", "Hi.", v, max_buffer_delay_ms=6000), "e-delay", 400, "invalid_request",
         "max_buffer_delay_ms"),
        (gen("e-embed", "Hi.", {"mode": "embedding", "embedding": [0.1] * 192}), "e-embed", 400,
         "voice_embedding_not_supported", "voice"),
    ]
    async with connect(ws_url(gateway)) as ws:
        for payload, cid, status, code, needle in cases:
            await ws.send(payload if isinstance(payload, str) else json.dumps(payload))
            assert_ws_error(await recv(ws), cid, status, code, needle)
        # the socket is still fine afterwards
        await send(ws, gen("ok", "Fine.", v, cont=False))
        check_context(await read_until_terminal(ws, ["ok"]), [1], FMT_22K)


async def test_an_unreadable_first_message_closes_its_context_id(gateway, default_voice_id):
    v = default_voice_id
    async with connect(ws_url(gateway)) as ws:
        await send(ws, gen("bad-start", "Hello", v, output_format={"container": "raw"}))
        assert_ws_error(await recv(ws), "bad-start", 400, "invalid_output_format")
        # the rest of that utterance: answered context_closed, never spoken from mid-sentence
        await send(ws, gen("bad-start", " there.", v, cont=False))
        assert_ws_error(await recv(ws), "bad-start", 400, "context_closed")
        await send(ws, gen("good", "Fine.", v, cont=False))
        check_context(await read_until_terminal(ws, ["good"]), [1], FMT_22K)


async def test_a_context_failed_before_its_worker_ran_gives_its_stream_place_back(gateway, default_voice_id):
    """A context's first message and a bad one for it in one TCP write: the reader opens the context
    and fails it before its worker task first runs. Its place must come back at once, not when the
    socket closes (else one socket could hold every place of the server)."""
    from websockets.frames import Frame, Opcode

    admission = gateway.runtime.service.admission
    before = admission.open_streams
    pairs = [(gen(f"early-{i}", "Hi", default_voice_id), gen(f"early-{i}", "", default_voice_id) | {"transcript": 5})
             for i in range(6)]
    async with connect(ws_url(gateway)) as ws:
        frames = [Frame(Opcode.TEXT, json.dumps(m).encode()).serialize(mask=True, extensions=[])
                  for pair in pairs for m in pair]
        ws.transport.write(b"".join(frames))  # one write: the server reads both of each pair at once
        for first, _ in pairs:
            msg = await recv(ws)
            assert msg["type"] == "error" and msg["context_id"] == first["context_id"], short(msg)
            assert msg["status_code"] == 400 and "transcript" in msg["message"], short(msg)
        deadline = time.monotonic() + 5
        while admission.open_streams != before and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        assert admission.open_streams == before  # the socket is still open
        await send(ws, gen("after", "Fine.", default_voice_id, cont=False))
        check_context(await read_until_terminal(ws, ["after"]), [1], FMT_22K)


async def test_unknown_voice_is_reported_at_once_not_after_the_buffer_delay(gateway, default_voice_id):
    async with connect(ws_url(gateway)) as ws:
        await send(ws, gen("v-late", "no sentence end yet", "missing-voice-0001", max_buffer_delay_ms=5000))
        assert_ws_error(await recv(ws, timeout=2.0), "v-late", 404, "voice_not_found", "missing-voice-0001")
        # an empty close needs no voice (the Python SDK falls back to a placeholder voice id there)
        await send(ws, gen("v-empty", "", "6ccbfb76-1fc6-48f7-b71d-91ac6298247b", cont=False))
        assert (await recv(ws))["type"] == "done"


async def test_limits_apply_to_every_message_of_a_context(gateway, default_voice_id):
    limit = gateway.runtime.settings.max_transcript_chars
    async with connect(ws_url(gateway)) as ws:
        await send(ws, gen("grow", "Hello ", default_voice_id))
        await send(ws, gen("grow", "b" * (limit + 1), default_voice_id))
        msg = await recv(ws)
        assert_ws_error(msg, "grow", 400, "transcript_too_long", str(limit))


async def test_unknown_fields_and_null_language_are_accepted(gateway, default_voice_id):
    async with connect(ws_url(gateway), additional_headers={"Cartesia-Version": "2024-11-13"}) as ws:
        await send(ws, gen("lenient", "Hello there.", {"mode": "id", "id": default_voice_id,
                                                      "__experimental_controls": {"speed": "slow"}},
                           cont=False, language=None, some_new_field=[1], add_phoneme_timestamps=False,
                           pronunciation_dict_id=None, temperature=0.5, cfg_scale=1.2, max_frames=30, seed=3))
        check_context(await read_until_terminal(ws, ["lenient"]), [1], FMT_22K)


async def test_binary_frames_and_pings(gateway, default_voice_id):
    async with connect(ws_url(gateway)) as ws:
        pong = await ws.ping()
        await asyncio.wait_for(pong, 5)
        await ws.send(json.dumps(gen("bin", "Hello there.", default_voice_id, cont=False)).encode())
        msg = await recv(ws)
        assert msg["context_id"] == "bin"  # JSON in a binary frame: answered for its context
        if msg["type"] == "error":
            assert "text" in msg["message"]
        else:
            check_context([msg] + await read_until_terminal(ws, ["bin"]), [1], FMT_22K)


# --- a server with tight limits ------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def tight_gateway(tiny_ckpt_dir, tmp_path_factory):
    settings = gateway_settings(tiny_ckpt_dir, tmp_path_factory.mktemp("tight-data"), ws_idle_timeout_s=1.0,
                                max_contexts_per_socket=2)
    with LiveServer(settings) as server:
        yield server


async def test_idle_socket_closes_with_1000(tight_gateway):
    async with connect(ws_url(tight_gateway)) as ws:
        t0 = time.monotonic()
        with pytest.raises(ConnectionClosed):
            await asyncio.wait_for(ws.recv(), 10)
        assert ws.close_code == 1000
        assert 0.8 <= time.monotonic() - t0 < 5.0


async def test_open_contexts_keep_the_socket_alive_then_idle_closes(tight_gateway, default_voice_id):
    async with connect(ws_url(tight_gateway)) as ws:
        await send(ws, gen("slow", "waiting for more", default_voice_id, max_buffer_delay_ms=2500))
        first = await recv(ws, timeout=6.0)  # the socket outlived the 1 s idle timeout: a context was open
        assert first["type"] == "chunk"
        await send(ws, gen("slow", "", default_voice_id, cont=False))
        await read_until_terminal(ws, ["slow"])
        with pytest.raises(ConnectionClosed):
            await asyncio.wait_for(ws.recv(), 10)
        assert ws.close_code == 1000


async def test_a_socket_whose_contexts_are_all_idle_closes_and_frees_their_places(tight_gateway, default_voice_id):
    """Open contexts with nothing to say (one spoke and waits for more, one never got text) do not
    hold the socket: it closes with 1000 after the idle timeout, and the places come back."""
    admission = tight_gateway.runtime.service.admission
    before = admission.open_streams
    async with connect(ws_url(tight_gateway)) as ws:
        await send(ws, gen("said", "Hello there.", default_voice_id))  # spoken, then kept open
        await send(ws, gen("empty", "", default_voice_id))  # opened for later, never given text
        msgs: list[dict] = []
        last = time.monotonic()
        with pytest.raises(ConnectionClosed):
            while True:
                msgs.append(await recv(ws, timeout=5.0))
                last = time.monotonic()
        assert ws.close_code == 1000
        assert time.monotonic() - last >= 0.8  # the idle timeout (1 s) ran from the last audio
    assert all(m["type"] == "chunk" and m["context_id"] == "said" for m in msgs), [short(m) for m in msgs]
    assert len(audio_of(msgs)) == expected_bytes(1, FMT_22K["encoding"], FMT_22K["sample_rate"])
    deadline = time.monotonic() + 5
    while admission.open_streams != before and time.monotonic() < deadline:
        await asyncio.sleep(0.05)
    scrape = httpx.get(tight_gateway.url + "/metrics").text
    assert f"gepard_streams_open {float(before)}" in scrape.splitlines()


async def test_too_many_contexts_on_one_socket(tight_gateway, default_voice_id):
    v = default_voice_id
    async with connect(ws_url(tight_gateway)) as ws:
        await send(ws, gen("c1", "first", v))
        await send(ws, gen("c2", "second", v))
        await send(ws, gen("c3", "third", v))
        assert_ws_error(await recv(ws), "c3", 429, "too_many_contexts", "2")
        await send(ws, {"context_id": "c1", "cancel": True})
        # a place is free now, but the rest of the refused utterance must not open a context that
        # starts mid-sentence (and would give c3 a second terminal event)
        await send(ws, gen("c3", " and the rest of it.", v, cont=False))
        await send(ws, gen("c4", "Fourth.", v, cont=False))
        await send(ws, gen("c2", "", v, cont=False, flush=True))
        msgs = await read_until_terminal(ws, ["c2", "c3", "c4"])
        ctx = by_context(msgs)
        assert "c1" not in ctx
        assert len(ctx["c3"]) == 1, [short(m) for m in ctx["c3"]]
        assert_ws_error(ctx["c3"][0], "c3", 400, "context_closed")
        check_context(ctx["c4"], [1], FMT_22K)
        check_context(ctx["c2"], [1, 0], FMT_22K)


# --- one generation slot: the concurrency limit --------------------------------------------------------------


@pytest.fixture(scope="module")
def single_slot_gateway(tiny_ckpt_dir, tmp_path_factory):
    settings = gateway_settings(tiny_ckpt_dir, tmp_path_factory.mktemp("one-slot-data"), max_concurrent_generations=1)
    with LiveServer(settings) as server:
        yield server


async def test_concurrency_limit_is_an_in_band_429_for_that_context(single_slot_gateway, default_voice_id):
    v = default_voice_id
    async with connect(ws_url(single_slot_gateway)) as ws:
        await send(ws, gen("first", "Hello there. How are you?", v, cont=False))
        await send(ws, gen("second", "Hello there. How are you?", v, cont=False))
        ctx = by_context(await read_until_terminal(ws, ["first", "second"]))
    finished = [cid for cid, msgs in ctx.items() if msgs[-1]["type"] == "done"]
    failed = [cid for cid, msgs in ctx.items() if msgs[-1]["type"] == "error"]
    assert len(finished) == 1 and len(failed) == 1, {k: [short(m) for m in v] for k, v in ctx.items()}
    assert_ws_error(ctx[failed[0]][-1], failed[0], 429, "concurrency_limited", "concurrent")
    check_context(ctx[finished[0]], [2], FMT_22K)


async def test_concurrency_limit_on_http_is_429_without_retry(single_slot_gateway, default_voice_id):
    long_text = " ".join(f"Sentence {w}." for w in "one two three four five six seven eight".split())
    body = {"model_id": "sonic-3", "transcript": "Hi there.", "voice": default_voice_id, "output_format": FMT_22K}
    async with connect(ws_url(single_slot_gateway)) as ws, httpx.AsyncClient(timeout=30) as client:
        await send(ws, gen("busy", long_text, default_voice_id, cont=False))
        await recv(ws)  # generating now
        for _ in range(10):  # the slot is free only for an instant between two segments
            r = await client.post(single_slot_gateway.url + "/tts/bytes", json=body)
            if r.status_code == 429:
                break
        err = r.json()
        assert r.status_code == 429 and err["error_code"] == "concurrency_limited"
        assert r.headers["x-should-retry"] == "false"  # SDK retries would triple the load
        await read_until_terminal(ws, ["busy"])


# --- stream places are taken with a context's first text ---------------------------------------------------


@pytest.fixture(scope="module")
def two_stream_gateway(tiny_ckpt_dir, tmp_path_factory):
    settings = gateway_settings(tiny_ckpt_dir, tmp_path_factory.mktemp("two-stream-data"), max_streams=2)
    with LiveServer(settings) as server:
        yield server


async def open_empty(ws, context_ids: list[str], voice) -> None:
    """Open contexts with no text; returns once the server read them all (a flush answers)."""
    for cid in context_ids:
        await send(ws, gen(cid, "", voice))
    await send(ws, gen(context_ids[-1], "", voice, flush=True))
    msg = await recv(ws)
    assert msg["type"] == "flush_done" and msg["context_id"] == context_ids[-1], short(msg)


async def next_of(ws, context_id: str) -> dict:
    """The next message for ``context_id`` (other contexts' audio is passed over)."""
    while (msg := await recv(ws))["context_id"] != context_id:
        pass
    return msg


async def test_contexts_opened_empty_take_no_stream_place(two_stream_gateway, default_voice_id):
    server, v = two_stream_gateway, default_voice_id
    admission = server.runtime.service.admission
    before = admission.open_streams
    body = {"model_id": "sonic-3", "transcript": "Hi there.", "voice": v, "output_format": FMT_22K}
    async with connect(ws_url(server)) as held, connect(ws_url(server)) as other:
        await open_empty(held, [f"e{i}" for i in range(5)], v)  # more than GEPARD_MAX_STREAMS (2)
        assert admission.open_streams == before
        async with httpx.AsyncClient(timeout=30) as http:
            r = await http.post(server.url + "/tts/bytes", json=body)
        assert r.status_code == 200 and len(r.content) == expected_bytes(1, "pcm_s16le", 22050)
        await send(other, gen("spoken", "Hello there.", v, cont=False))
        check_context(await read_until_terminal(other, ["spoken"]), [1], FMT_22K)


async def test_an_empty_context_is_admitted_with_its_first_text(two_stream_gateway, default_voice_id):
    server, v = two_stream_gateway, default_voice_id
    admission = server.runtime.service.admission
    before = admission.open_streams
    async with connect(ws_url(server)) as ws, connect(ws_url(server)) as other:
        await open_empty(ws, ["first", "late"], v)
        await send(ws, gen("first", "Hello there.", v))  # its first text: admitted now, and spoken
        assert (await next_of(ws, "first"))["type"] == "chunk"
        assert admission.open_streams == before + 1
        await send(other, gen("filler", "Hello there.", v))  # the last place
        assert (await next_of(other, "filler"))["type"] == "chunk"
        # the server is full when "late" brings its first text: refused as a new context would be
        await send(ws, gen("late", "Hi there.", v))
        assert_ws_error(await next_of(ws, "late"), "late", 429, "concurrency_limited", "GEPARD_MAX_STREAMS", "retry")
        await send(ws, gen("late", " And more.", v, cont=False))
        closed = await next_of(ws, "late")
        assert_ws_error(closed, "late", 400, "context_closed", "refused or failed earlier")
        assert "continue=false" not in closed["message"]  # it never got one: it was refused
        await send(ws, gen("bye", "", v, cont=False))  # an empty close needs no place, full or not
        assert (await next_of(ws, "bye"))["type"] == "done"
        for sock, cid in ((ws, "first"), (other, "filler")):
            await send(sock, gen(cid, "", v, cont=False))
            assert (await read_until_terminal(sock, [cid]))[-1]["type"] == "done"
    deadline = time.monotonic() + 5
    while admission.open_streams != before and time.monotonic() < deadline:
        await asyncio.sleep(0.05)
    assert admission.open_streams == before
