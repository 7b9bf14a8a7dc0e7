"""The playground in headless Chromium against a live gateway on the tiny checkpoint.

Everything is read from the page's own state (``window.__playground.snapshot()``): what it sent on
its socket, what came back per context, and where each chunk was scheduled on the AudioContext clock.
"""

from __future__ import annotations

import threading
import time

import httpx
import pytest

from api.cli import main as gepard
from tests.api.conftest import redis_key_gateway
from tests.api.routes.test_phoneme_timestamps import spoken_phonemes
from tests.playground.conftest import API_KEY, screenshot

TYPED = "Hello there, this is the playground streaming words as they are typed."
SPEECH = ("One sentence here. Two sentences there. Three sentences now. Four sentences more. "
          "Five sentences still. Six sentences at last.")


def snapshot(page) -> dict:
    return page.evaluate("__playground.snapshot()")


def context_of(page, lane: int = 0) -> dict:
    return page.evaluate(f"__playground.lane({lane}).context")


def wait_for(page, predicate: str, timeout_s: float = 30.0) -> None:
    """Waits for a JS predicate on ``c`` (lane 0's context snapshot) and ``s`` (the page snapshot)."""
    page.wait_for_function(
        f"() => {{ const s = __playground.snapshot(); const c = s.lanes[0] && s.lanes[0].context; return {predicate}; }}",
        timeout=timeout_s * 1000)


def gaps_between_runs(ctx: dict) -> float:
    """Checks the schedule is gapless within each run and never overlaps; returns the silence between runs."""
    schedule, rate = ctx["schedule"], ctx["sampleRate"]
    assert schedule, "no audio was scheduled"
    assert schedule[0]["frame"] == 0
    silence = 0.0
    for prev, cur in zip(schedule, schedule[1:]):
        assert cur["frame"] == prev["frame"] + prev["frames"]  # every sample scheduled once, in order
        end = prev["at"] + prev["frames"] / rate
        if cur["run"] == prev["run"]:
            assert cur["at"] == pytest.approx(end, abs=1e-9)  # sample-exact: back to back
        else:
            assert cur["run"] == prev["run"] + 1 and cur["at"] > end
            silence += cur["at"] - end
    assert sum(c["frames"] for c in schedule) == ctx["samples"]
    return silence


def voice_ids(url: str, headers: dict | None = None) -> list[str]:
    ids, after = [], None
    while True:
        params = {"limit": 100, **({"starting_after": after} if after else {})}
        data = httpx.get(url + "/voices", params=params, headers=headers or {}).json()["data"]
        if not data:
            return ids
        ids += [v["id"] for v in data]
        after = data[-1]["id"]


def sent_for(page, context_id: str) -> list[dict]:
    return [m for m in snapshot(page)["socket"]["sent"] if m["context_id"] == context_id]


def test_typed_words_stream_with_continue_then_flush_and_play_gapless(gateway, open_page) -> None:
    page, log = open_page(gateway.url + "/playground/?voices_page_size=1")
    lane = page.locator("#lane-1")
    options = lane.locator("select.voice option").evaluate_all("os => os.map(o => o.value)")
    expected = voice_ids(gateway.url)
    assert len(expected) >= 2 and options == expected  # every page of GET /voices, in order
    pages = [u for u in log.urls if "/voices?" in u]
    assert len(pages) == len(expected) + 1 and "starting_after=" + expected[-1] in pages[-1]  # up to the empty page

    lane.get_by_label("Temperature").fill("0.5")
    lane.get_by_label("Seed").fill("7")
    lane.get_by_label("Speed").fill("1.25")
    box = lane.get_by_label("Text", exact=True)
    box.click()
    box.press_sequentially(TYPED, delay=10)
    box.press("Enter")
    n_words = len(TYPED.split())
    wait_for(page, f"c && c.flushes >= 1 && c.words.length === {n_words}")
    # until the audio has played out (the highlighter has run over it)
    wait_for(page, "c.schedule.length && s.audio.currentTime > c.schedule.at(-1).at + c.schedule.at(-1).frames / c.sampleRate")
    ctx = context_of(page)

    sent = sent_for(page, ctx["id"])
    assert all(m["continue"] is True for m in sent)
    assert "".join(m["transcript"] for m in sent) == TYPED + "\n"
    words_sent = [m["transcript"] for m in sent[:-1]]
    assert all(len(t.split()) == 1 and t.endswith(" ") for t in words_sent)  # one finished word at a time
    assert len(words_sent) >= n_words - 1
    assert sent[-1]["flush"] is True and "flush" not in sent[0]
    first = sent[0]
    assert first["temperature"] == 0.5 and first["seed"] == 7 and first["add_timestamps"] is True
    assert first["add_phoneme_timestamps"] is True
    assert first["generation_config"] == {"speed": 1.25}
    assert first["output_format"] == {"container": "raw", "encoding": "pcm_f32le", "sample_rate": 24000}
    assert first["voice"] == options[0]

    assert ctx["errors"] == [] and ctx["state"] == "open"
    assert ctx["chunks"] > 0 and ctx["bytes"] == 4 * ctx["samples"]
    assert [w["word"] for w in ctx["words"]] == TYPED.split()
    starts = [w["start"] for w in ctx["words"]]
    assert starts == sorted(starts) and all(w["end"] >= w["start"] for w in ctx["words"])
    assert ctx["words"][-1]["end"] <= ctx["audioSeconds"] + 1e-6
    silence = gaps_between_runs(ctx)
    assert ctx["underrunS"] <= silence + 1e-9  # an underrun is silence; idle time while typing is not
    assert ctx["ttfaMs"] and ctx["ttfaMs"][0] > 0 and ctx["rtf"] > 0
    assert ctx["highlighted"] > 0
    assert lane.locator(".words span").count() == n_words
    # phoneme timestamps: eSpeak's phonemes of the spoken words, in order, inside the audio, and the
    # page marked the one heard as the audio played
    assert [p["phoneme"] for p in ctx["phonemes"]] == spoken_phonemes(TYPED)
    p_starts = [p["start"] for p in ctx["phonemes"]]
    assert p_starts == sorted(p_starts) and ctx["phonemes"][-1]["end"] <= ctx["audioSeconds"] + 1e-6
    assert ctx["phonemesShown"] > 0
    assert lane.locator(".ttfa").inner_text().endswith("ms")
    screenshot(page, "stream-as-typed")
    assert log.errors == []


def test_a_typed_turn_with_a_tag_ends_when_its_words_are_spoken(gateway, open_page) -> None:
    # The tag is markup, not words: the server's timestamps never count it. Counted as two words
    # ('<break', 'time="0.2s"/>', typed in two pieces), the turn never ended, the next sentence got
    # no time to first audio, and the pause while typing it counted as an underrun.
    page, log = open_page(gateway.url + "/playground/")
    box = page.locator("#lane-1").get_by_label("Text", exact=True)
    box.click()
    box.press_sequentially('Wait <break time="0.2s"/> then <spell>AB</spell> go. ', delay=10)
    wait_for(page, "c && c.words.length === 4")
    box.press_sequentially("Next one. ", delay=10)
    wait_for(page, "c.words.length === 6")
    ctx = context_of(page)
    assert [w["word"] for w in ctx["words"]] == ["Wait", "then", "AB", "go.", "Next", "one."]
    assert ctx["flushes"] == 0 and ctx["sentWords"] == 6
    assert len(ctx["ttfaMs"]) == 2  # each sentence is a turn of its own
    assert log.errors == []


def test_speak_at_another_format_then_escape_cancels_and_silences(gateway, open_page) -> None:
    page, log = open_page(gateway.url + "/playground")
    page.get_by_label("Encoding").select_option("pcm_s16le")
    page.get_by_label("Sample rate").select_option("16000")
    lane = page.locator("#lane-1")
    lane.get_by_label("Speak the whole text").check()
    box = lane.get_by_label("Text", exact=True)
    box.fill(SPEECH)
    lane.get_by_role("button", name="Speak").click()
    # at its first chunk: the tiny checkpoint's 24 frames come out in a few chunks within a few
    # tens of ms on a quiet machine, so waiting for a later one now and then found them all out,
    # the turn done, before the Escape (1 of 3 full runs on 2026-12-04)
    wait_for(page, "c && c.chunks >= 1")
    box.press("Escape")  # keyboard: Escape is Stop
    ctx = context_of(page)
    assert ctx["state"] == "cancelled"  # it was still speaking: no done had come
    assert ctx["stopped"] and ctx["activeSources"] == 0  # silent at once
    sent = sent_for(page, ctx["id"])
    assert sent[0]["output_format"] == {"container": "raw", "encoding": "pcm_s16le", "sample_rate": 16000}
    assert sent[0]["transcript"] == SPEECH and sent[0]["continue"] is False
    assert sent[-1] == {"context_id": ctx["id"], "cancel": True}
    assert ctx["sampleRate"] == 16000 and ctx["bytes"] == 2 * ctx["samples"]
    # speak mode: every silence between runs happened mid-turn, so it is all counted as underrun
    assert ctx["underrunS"] == pytest.approx(gaps_between_runs(ctx), abs=1e-6)

    # An ordering probe: the server answers a bad message on another context after it has handled
    # the cancel, so anything for the cancelled context after that answer would be a leak.
    page.evaluate("__playground.sendRaw({context_id: 'probe-after-cancel', transcript: 'x'})")
    page.wait_for_function("() => __playground.snapshot().socket.orphans.some(o => o.context_id === 'probe-after-cancel')")
    at_probe = context_of(page)
    time.sleep(1.0)  # the rest of the text would have produced chunks by now
    after = context_of(page)
    assert after["lateChunks"] == at_probe["lateChunks"]
    assert "done" not in after["lateEvents"] and after["lateEvents"] == at_probe["lateEvents"]
    assert after["samples"] == ctx["samples"]  # nothing more was scheduled
    orphan = [o for o in snapshot(page)["socket"]["orphans"] if o["context_id"] == "probe-after-cancel"]
    assert orphan[0]["type"] == "error"
    assert lane.locator(".state").inner_text() == "cancelled"
    assert log.errors == []


def test_two_contexts_side_by_side_on_one_socket(gateway, open_page) -> None:
    page, log = open_page(gateway.url + "/playground")
    page.get_by_role("button", name="Add a context side by side").click()
    texts = ["The first lane speaks.", "The second lane answers."]
    for i, text in enumerate(texts):
        lane = page.locator(f"#lane-{i + 1}")
        lane.get_by_label("Speak the whole text").check()
        lane.get_by_label("Text", exact=True).fill(text)
    page.locator("#lane-2").get_by_label("Language").select_option("en")
    for i in range(2):
        page.locator(f"#lane-{i + 1}").get_by_role("button", name="Speak").click()
    page.wait_for_function("() => __playground.snapshot().lanes.every(l => l.context && l.context.state === 'done')",
                           timeout=30_000)
    s = snapshot(page)
    contexts = [lane["context"] for lane in s["lanes"]]
    assert s["socket"]["opens"] == 1  # one WebSocket carried both
    assert contexts[0]["id"] != contexts[1]["id"]
    languages = [sent_for(page, ctx["id"])[0].get("language") for ctx in contexts]
    assert languages == [None, "en"]  # "voice default" sends none
    for ctx, text in zip(contexts, texts):
        assert ctx["chunks"] > 0 and ctx["errors"] == []
        assert [w["word"] for w in ctx["words"]] == text.split()
        gaps_between_runs(ctx)
    screenshot(page, "two-contexts")
    assert log.errors == []


def test_clone_from_file_appears_in_picker_speaks_and_deletes(gateway, open_page, tmp_path) -> None:
    from pathlib import Path

    clip = Path(__file__).parents[1] / "data" / "linda.wav"
    page, log = open_page(gateway.url + "/playground")
    page.get_by_label("Name", exact=True).fill("Playground Linda")
    page.locator("#clone-language").select_option("es-MX")  # the voice's locale: how its text is read
    page.get_by_label("Audio file (wav, flac, ogg, mp3)").set_input_files(str(clip))
    page.get_by_role("button", name="Clone", exact=True).click()
    status = page.locator("#clone-status")
    status.filter(has_text="Cloned").wait_for(timeout=30_000)
    new = [v for v in snapshot(page)["voices"] if v["name"] == "Playground Linda"]
    assert len(new) == 1 and new[0]["is_owner"]
    voice_id = new[0]["id"]
    assert voice_id in voice_ids(gateway.url)
    assert httpx.get(f"{gateway.url}/voices/{voice_id}").json()["language"] == "es-MX"
    lane = page.locator("#lane-1")
    assert lane.locator("select.voice").input_value() == voice_id  # selected for use at once

    lane.get_by_label("Speak the whole text").check()
    lane.get_by_label("Text", exact=True).fill("Hello from a cloned voice.")
    lane.get_by_role("button", name="Speak").click()
    wait_for(page, "c && c.state === 'done'")
    ctx = context_of(page)
    assert ctx["chunks"] > 0 and ctx["errors"] == []
    assert sent_for(page, ctx["id"])[0]["voice"] == voice_id
    screenshot(page, "cloned-voice")

    page.get_by_role("button", name="Delete voice Playground Linda").click()
    page.wait_for_function(f"() => !__playground.snapshot().voices.some(v => v.id === '{voice_id}')")
    assert httpx.get(f"{gateway.url}/voices/{voice_id}").status_code == 404
    assert voice_id not in lane.locator("select.voice option").evaluate_all("os => os.map(o => o.value)")
    assert log.errors == []


def test_clone_from_microphone(gateway, open_page) -> None:
    page, log = open_page(gateway.url + "/playground")
    record = page.get_by_role("button", name="Record from microphone")
    record.click()  # Chromium's fake device: a test tone, no permission prompt
    page.locator("#record-state").filter(has_text="Recording").wait_for()
    time.sleep(3.6)  # the clone endpoint wants at least 3 s of audio
    page.get_by_role("button", name="Stop recording").click()
    page.locator("#record-state").filter(has_text="Recorded").wait_for(timeout=10_000)
    page.get_by_label("Name", exact=True).fill("Playground mic")
    page.get_by_role("button", name="Clone", exact=True).click()
    status = page.locator("#clone-status")
    status.filter(has_text="lone").filter(has_not_text="Cloning").wait_for(timeout=30_000)
    assert status.inner_text().startswith("Cloned"), status.inner_text()
    voice = [v for v in snapshot(page)["voices"] if v["name"] == "Playground mic"][0]
    assert httpx.delete(f"{gateway.url}/voices/{voice['id']}").status_code == 204
    assert log.errors == []


def test_auth_asks_for_the_key_once_uses_a_token_for_the_socket_and_never_puts_the_key_in_a_url(
        auth_gateway, open_page) -> None:
    page, log = open_page(auth_gateway.url + "/playground")
    dialog = page.locator("#auth-dialog")
    assert dialog.is_visible()  # GET /voices said 401
    screenshot(page, "auth-dialog")
    page.get_by_role("textbox", name="API key").fill("not-the-key-0123456789")
    page.get_by_role("button", name="Use key").click()
    page.locator("#auth-error").filter(has_text="not accepted").wait_for()
    page.get_by_role("textbox", name="API key").fill(API_KEY)
    page.get_by_role("button", name="Use key").click()
    page.wait_for_function("() => __playground.snapshot().voicesLoaded > 0")
    assert not dialog.is_visible()

    box = page.locator("#lane-1").get_by_label("Text", exact=True)
    box.click()
    box.press_sequentially("Keys stay out of URLs.", delay=5)
    box.press("Enter")
    wait_for(page, "c && c.flushes >= 1 && c.chunks > 0")
    assert context_of(page)["errors"] == []

    # reload: the key is kept for the tab (sessionStorage), so no second prompt
    page.reload()
    page.wait_for_function("() => __playground.snapshot().voicesLoaded > 0")
    assert not dialog.is_visible()
    box = page.locator("#lane-1").get_by_label("Text", exact=True)
    box.click()
    box.press_sequentially("Again.", delay=5)
    box.press("Enter")
    wait_for(page, "c && c.flushes >= 1 && c.chunks > 0")

    urls = log.urls + log.websockets
    assert all(API_KEY not in url for url in urls)
    assert len(log.websockets) == 2
    for ws_url in log.websockets:
        assert "access_token=gat1." in ws_url and "cartesia_version=" in ws_url and "api_key" not in ws_url
    token_posts = [r for r in log.requests if r.url.endswith("/access-token") and r.method == "POST"]
    assert len(token_posts) == 2  # one per socket, minted with the key in the header
    api_calls = [r for r in log.requests if "/voices" in r.url or r.url.endswith("/access-token")]
    keyed = [r for r in api_calls if r.all_headers().get("authorization") == f"Bearer {API_KEY}"]
    assert len(keyed) >= 4
    storage = page.evaluate("() => ({s: {...sessionStorage}, l: localStorage.length, c: document.cookie})")
    assert list(storage["s"].values()) == [API_KEY] and storage["l"] == 0 and storage["c"] == ""
    assert API_KEY not in page.evaluate("JSON.stringify(__playground.snapshot())")
    # the only errors: the two expected 401s (first look, and the wrong key)
    assert len(log.errors) == 2 and all("401" in e for e in log.errors), log.errors


def test_escape_on_the_key_dialog_leaves_a_way_to_enter_a_key(auth_gateway, open_page) -> None:
    page, log = open_page(auth_gateway.url + "/playground")
    dialog = page.locator("#auth-dialog")
    assert dialog.is_visible()
    page.keyboard.press("Escape")
    dialog.wait_for(state="hidden")
    assert "needs an API key" in page.locator("#notice").inner_text()
    assert page.locator("#auth-state").inner_text() == "No API key"
    page.get_by_role("button", name="Enter API key").click()
    assert dialog.is_visible()
    page.get_by_role("textbox", name="API key").fill(API_KEY)
    page.get_by_role("button", name="Use key").click()
    page.wait_for_function("() => __playground.snapshot().voicesLoaded > 0")
    assert page.get_by_role("button", name="Forget key").is_visible()
    assert not page.get_by_role("button", name="Enter API key").is_visible()


REDIS_KEY = "k-playground-redis-0123456789"


@pytest.fixture(scope="module")
def redis_gateway(tiny_ckpt_dir, tmp_path_factory):
    """Auth on, keys in Redis (``gepard keys add|remove``); a removed key fails at once."""
    with redis_key_gateway(tiny_ckpt_dir, tmp_path_factory.mktemp("playground-keys")) as pair:
        yield pair


def gepard_keys(action: str, redis_url: str) -> None:
    # in a thread: the CLI runs asyncio.run, and Playwright's loop is the running one of this thread
    rc = []
    thread = threading.Thread(target=lambda: rc.append(gepard(["keys", action, REDIS_KEY, "--redis-url", redis_url])))
    thread.start()
    thread.join()
    assert rc == [0]


def test_a_key_removed_mid_session_fails_the_socket_and_asks_for_a_key_again(redis_gateway, open_page) -> None:
    server, redis = redis_gateway
    gepard_keys("add", redis.url)
    page, log = open_page(server.url + "/playground")
    page.get_by_role("textbox", name="API key").fill(REDIS_KEY)
    page.get_by_role("button", name="Use key").click()
    page.wait_for_function("() => __playground.snapshot().voicesLoaded > 0")
    lane = page.locator("#lane-1")
    lane.get_by_label("Speak the whole text").check()
    lane.get_by_label("Text", exact=True).fill("Hello.")
    speak = lane.get_by_role("button", name="Speak")
    speak.click()
    wait_for(page, "c && c.state === 'done'")

    gepard_keys("remove", redis.url)
    speak.click()  # the open socket's next context: token_revoked, and the server closes it (1008)
    page.locator("#connection[data-state=closed]").wait_for()
    speak.click()  # a new socket needs a new token, and minting it is refused (401)
    page.locator("#connection[data-state=failed]").wait_for()
    assert page.locator("#connection").inner_text() == "Could not connect"
    assert "no access token" in page.locator("#notice").inner_text()
    page.locator("#auth-error").filter(has_text="not accepted").wait_for()  # the key dialog, again

    gepard_keys("add", redis.url)
    page.get_by_role("textbox", name="API key").fill(REDIS_KEY)
    page.get_by_role("button", name="Use key").click()
    page.route("**/access-token", lambda route: route.abort())  # the mint never reaches the server
    speak.click()
    page.locator("#notice").filter(has_text="no access token (Failed to fetch)").wait_for()
    assert page.locator("#connection").get_attribute("data-state") == "failed"
    assert not page.locator("#auth-dialog").is_visible()  # not the key's fault: it is kept
    page.unroute("**/access-token")
    speak.click()
    wait_for(page, "c && c.state === 'done' && s.lanes[0].contexts.length === 5 && s.socket.opens === 2")


def test_narrow_screen_labels_and_modules(gateway, open_page) -> None:
    page, log = open_page(gateway.url + "/playground", viewport={"width": 360, "height": 800})
    assert page.evaluate("document.scrollingElement.scrollWidth <= document.scrollingElement.clientWidth")
    unlabelled = page.evaluate("""() => [...document.querySelectorAll('input, select, textarea, button')]
        .filter(el => el.offsetParent !== null)
        .filter(el => !(el.labels && el.labels.length) && !el.getAttribute('aria-label') && !el.textContent.trim())
        .map(el => el.outerHTML)""")
    assert unlabelled == []
    screenshot(page, "narrow")
    # the pure modules, in the page's own browser
    results = page.evaluate("""async () => {
        const t = await import(new URL('js/typing.js', location.href));
        const p = await import(new URL('js/pcm.js', location.href));
        const dec = new p.PcmDecoder('pcm_s16le');
        const a = dec.decode(new Uint8Array([0x00, 0x40, 0xff]));
        const b = dec.decode(new Uint8Array([0x7f]));
        return {
          partial: t.nextPiece('Hello wor', ''),
          word: t.nextPiece('Hello world ', 'Hello '),
          spaces: t.nextPiece('   ', ''),
          final: t.nextPiece('Hello world', 'Hello ', true),
          edited: t.nextPiece('Hello there ', 'Hello world '),
          words: t.countWords('  a  b c '),
          tagged: t.countWords('Wait <break time="1s"/> then <SPELL>AB-12</SPELL> go.<speed ratio="1.2"/>'),
          unknown: t.countWords('a <b>bold</b> c'),
          pcm: [...a, ...b],
        };
    }""")
    assert results["partial"] == {"piece": "Hello ", "sent": "Hello "}
    assert results["word"] == {"piece": "world ", "sent": "Hello world "}
    assert results["spaces"] == {"piece": "", "sent": ""}
    assert results["final"] == {"piece": "world", "sent": "Hello world"}
    assert results["edited"] == {"piece": "there ", "sent": "Hello there "}
    assert results["words"] == 3
    assert results["tagged"] == 4  # Wait, then, AB-12, go.: what the server's timestamps count
    assert results["unknown"] == 3  # not Cartesia's: text, spoken as written
    assert results["pcm"] == [0.5, 32767 / 32768]  # a sample split across chunks is carried over
    assert log.errors == []
