"""The load generator (bench/loadgen.py): its maths (percentiles, the playhead underrun, gaps, RTF,
xRT and a level's summary) as pure functions; its sender's timing against a stand-in socket; and
how a level reports what is not the server's figures (connection failures, crashed agents) against
a closed port and a WebSocket server on loopback."""

from __future__ import annotations

import asyncio
import base64
import math
import random
import re
from pathlib import Path
from types import SimpleNamespace

import pytest
from websockets.asyncio.server import serve

from bench import _common
from bench.loadgen import (
    Agent,
    Chunk,
    Clock,
    LevelStats,
    LiveStream,
    LoadConfig,
    Session,
    StreamRecord,
    Utterance,
    audio_seconds,
    backoff_s,
    b64_decoded_len,
    gaps,
    main,
    parse_args,
    percentile,
    percentiles,
    plan_utterance,
    real_time_factor,
    run_level,
    summarize,
    underrun,
    websocket_url,
    xrt,
)


# -- percentiles ------------------------------------------------------------------------------------
def test_percentile_interpolates_between_closest_ranks():
    xs = [4.0, 1.0, 3.0, 2.0]  # sorted: 1 2 3 4
    assert percentile(xs, 0) == 1.0
    assert percentile(xs, 100) == 4.0
    assert percentile(xs, 50) == 2.5
    assert percentile(xs, 90) == pytest.approx(3.7)  # rank 2.7: 3 + 0.7 * (4 - 3)


def test_percentile_matches_numpy_linear():
    np = pytest.importorskip("numpy")
    rng = random.Random(3)
    xs = [rng.expovariate(1.0) for _ in range(101)]
    for q in (0, 1, 50, 90, 99, 99.9, 100):
        assert percentile(xs, q) == pytest.approx(float(np.percentile(xs, q)))


def test_percentile_of_nothing_and_of_one():
    assert percentile([], 50) is None
    assert percentile([7.0], 99) == 7.0
    assert percentiles([]) == {"p50": None, "p90": None, "p99": None}
    with pytest.raises(ValueError):
        percentile([1.0], 101)


def test_every_bench_script_shares_one_interpolating_percentile():
    from bench import engine, gateway, gpu_summary, pipeline

    assert percentile is _common.percentile
    for module in (engine, gateway, gpu_summary, pipeline):
        assert module.percentile is _common.percentile, module.__name__
    assert pipeline.pct([2.0, 1.0], 50) == 1.5  # not the minimum (nearest rank, rounded half to even)
    assert math.isnan(pipeline.pct([], 50))


# -- audio sizes ------------------------------------------------------------------------------------
@pytest.mark.parametrize("n", [0, 1, 2, 3, 4, 5, 1023, 4410])
def test_b64_decoded_len_without_decoding(n):
    assert b64_decoded_len(base64.b64encode(bytes(n)).decode()) == n


def test_audio_seconds():
    assert audio_seconds(44100, 22050, 2) == 1.0
    assert audio_seconds(16000, 16000, 1) == 1.0


# -- underrun ---------------------------------------------------------------------------------------
def test_underrun_nothing_when_chunks_keep_ahead():
    # 0.5 s chunks every 0.4 s: the buffer only grows
    assert underrun([Chunk(i * 0.4, 0.5) for i in range(10)]) == 0.0
    assert underrun([]) == 0.0
    assert underrun([Chunk(1.0, 0.1)]) == 0.0


def test_underrun_counts_waits_and_restarts_the_playhead():
    # first chunk at 1.0 plays until 1.5; the next arrives at 2.0 (0.5 s wait), plays until 2.3;
    # the third at 2.2 extends to 2.6; the fourth at 3.0 waits 0.4 s
    chunks = [Chunk(1.0, 0.5), Chunk(2.0, 0.3), Chunk(2.2, 0.3), Chunk(3.0, 0.2)]
    assert underrun(chunks) == pytest.approx(0.9)


def test_underrun_buffered_audio_covers_a_late_chunk():
    # 2 s of audio in hand at 0.0: a chunk 1.5 s later is no wait, and extends from 2.0 (not 1.5)
    assert underrun([Chunk(0.0, 2.0), Chunk(1.5, 0.5), Chunk(2.4, 0.1)]) == 0.0


def test_underrun_only_counts_once_the_text_was_complete():
    # the listener waits 1.5 -> 3.0, but the agent sent the text for that chunk at 2.5: 0.5 s counts
    assert underrun([Chunk(1.0, 0.5), Chunk(3.0, 0.5, ready=2.5)]) == pytest.approx(0.5)
    # text completed after the chunk even arrived: the server was waiting for the agent, none counts
    assert underrun([Chunk(1.0, 0.5), Chunk(3.0, 0.5, ready=math.inf)]) == 0.0
    # text complete long before: the whole wait counts
    assert underrun([Chunk(1.0, 0.5), Chunk(3.0, 0.5, ready=0.0)]) == pytest.approx(1.5)


# -- gaps, RTF, xRT ---------------------------------------------------------------------------------
def test_gaps():
    assert gaps([]) == (0.0, 0)
    assert gaps([1.0]) == (0.0, 0)
    big, count = gaps([0.0, 0.5, 4.0, 4.1, 7.2, 7.3])
    assert big == pytest.approx(3.5) and count == 2
    assert gaps([0.0, 3.0])[1] == 0  # exactly 3 s is within pipecat's limit


def test_real_time_factor_and_xrt():
    assert real_time_factor(1.0, 3.0, 4.0) == 0.5
    assert real_time_factor(None, 3.0, 4.0) is None
    assert real_time_factor(1.0, 3.0, 0.0) is None
    assert xrt(120.0, 60.0) == 2.0
    assert xrt(5.0, 0.0) == 0.0


# -- a stream's record from its messages ---------------------------------------------------------------
class _Clock:
    def __init__(self) -> None:
        self.t = 0.0

    def now(self) -> float:
        return self.t


def _chunk(cid: str, seconds: float, flush_id: int = 1) -> dict:
    data = base64.b64encode(bytes(int(seconds * 22050) * 2)).decode()
    return {"type": "chunk", "data": data, "done": False, "status_code": 206, "context_id": cid, "flush_id": flush_id}


def _stream(cid: str = "c") -> LiveStream:
    return LiveStream(StreamRecord(level=1, agent=0, socket=0, context_id=cid), LoadConfig(url="ws://x"), _Clock())


def test_live_stream_figures_for_a_completed_stream():
    s = _stream()
    s.t_first_text, s.t_first_sentence, s.complete_at[1], s.t_input_end = 0.0, 0.15, 0.3, 0.3
    s.on_message(_chunk("c", 0.5), 0.2)  # plays 0.2 -> 0.7
    s.on_message(_chunk("c", 0.5), 1.0)  # waits 0.3 s (0.7 -> 1.0), plays until 1.5
    s.on_message({"type": "done", "done": True, "status_code": 206, "context_id": "c"}, 1.2)
    rec = s.finish()
    assert rec.outcome == "done" and rec.terminal_events == 1 and not rec.violations
    assert rec.ttfa_s == pytest.approx(0.2) and rec.ttfa_sentence_s == pytest.approx(0.05)
    assert rec.audio_s == pytest.approx(1.0)
    assert rec.wall_s == pytest.approx(1.2)
    assert rec.rtf == pytest.approx(1.0)  # (1.2 - 0.2) / 1.0
    assert rec.underrun_s == pytest.approx(0.3)
    assert rec.max_gap_s == pytest.approx(0.8) and rec.gaps_over_3s == 0


def test_live_stream_flags_a_second_terminal_event_and_audio_after_it():
    s = _stream()
    s.t_first_text = 0.0
    s.on_message({"type": "error", "done": True, "status_code": 500, "error_code": "internal", "context_id": "c"}, 0.1)
    s.on_message(_chunk("c", 0.1), 0.2)
    s.on_message({"type": "done", "done": True, "status_code": 206, "context_id": "c"}, 0.3)
    rec = s.finish()
    assert rec.outcome == "error" and rec.error_code == "internal"
    assert rec.terminal_events == 2 and rec.after_terminal == 2 and rec.audio_s == 0.0
    assert len(rec.violations) == 2


def test_messages_after_a_cancel_are_allowed_and_not_counted_as_audio():
    s = _stream()
    s.t_first_text = 0.0
    s.on_message(_chunk("c", 0.2), 0.1)
    s.clock.t = 0.15
    s.end_by_client("cancelled")
    s.on_message(_chunk("c", 0.2), 0.2)  # was already in flight
    rec = s.finish()
    assert rec.outcome == "cancelled" and rec.after_client_end == 1 and rec.audio_s == pytest.approx(0.2)
    assert rec.after_client_end_s == pytest.approx(0.05)
    assert not rec.violations and rec.rtf is None


def test_malformed_message_is_a_violation():
    s = _stream()
    s.t_first_text = 0.0
    s.on_message({"type": "chunk", "data": "", "context_id": "c"}, 0.1)  # no done / status_code
    assert s.record.malformed == 1 and s.record.violations


# -- a level's summary --------------------------------------------------------------------------------
def _rec(outcome: str, **kw) -> StreamRecord:
    return StreamRecord(level=4, agent=0, socket=0, context_id="x", outcome=outcome, **kw)


def test_summary_separates_refusals_from_errors_and_failures():
    records = [
        _rec("done", ttfa_s=0.1, rtf=0.5, underrun_s=0.0, audio_s=2.0),
        _rec("done", ttfa_s=0.3, rtf=0.7, underrun_s=0.2, audio_s=2.0, gaps_over_3s=1, max_gap_s=3.5),
        _rec("error", error_code="concurrency_limited", status_code=429),
        _rec("error", error_code="too_many_contexts", status_code=429),
        _rec("error", error_code="internal_error", status_code=500),
        _rec("cancelled", ttfa_s=0.2, audio_s=0.5),
        _rec("disconnected"),
        _rec("timeout"),
    ]
    s = summarize(records, concurrency=4, wall_s=10.0)
    assert s["streams"] == 8 and s["completed"] == 2
    assert s["refused"] == 2 and s["refusal_rate"] == 0.25
    assert s["errors_by_code"] == {"concurrency_limited": 1, "internal_error": 1, "too_many_contexts": 1}
    assert s["other_errors"] == 1
    assert s["failures"] == 2  # the timeout and the internal error; refusals are not failures
    assert s["outcomes"]["cancelled"] == 1 and s["outcomes"]["disconnected"] == 1
    assert s["ttfa_s"]["p50"] == pytest.approx(0.2)  # every stream with audio, cancelled ones too
    assert s["rtf"]["p50"] == pytest.approx(0.6)  # completed streams only
    assert s["underrun_s"]["p99"] == pytest.approx(0.198)
    assert s["streams_with_underrun"] == 1
    assert s["gaps_over_3s"] == 1 and s["max_gap_s"] == 3.5
    assert s["audio_s"] == 4.5 and s["xrt"] == pytest.approx(0.45)


def test_summary_of_an_empty_level():
    s = summarize([], concurrency=1, wall_s=0.0)
    assert s["streams"] == 0 and s["refusal_rate"] == 0.0 and s["xrt"] == 0.0 and s["ttfa_s"]["p50"] is None


# -- configuration and plans ------------------------------------------------------------------------
def test_websocket_url_from_any_base():
    assert websocket_url("http://h:1") == "ws://h:1/tts/websocket"
    assert websocket_url("https://h/v1/") == "wss://h/v1/tts/websocket"
    assert websocket_url("ws://h:1/tts/websocket") == "ws://h:1/tts/websocket"
    with pytest.raises(ValueError):
        websocket_url("h:1")
    assert LoadConfig(url="wss://h/v1").http_url == "https://h/v1"


def test_cli_checks_its_arguments(capsys):
    cfg, out, plot = parse_args(["--url", "ws://127.0.0.1:9", "--concurrency", "1,8", "--seed", "3"])
    assert cfg.concurrency == [1, 8] and cfg.seed == 3 and out is None and plot is None
    assert cfg.phonemes_rate == 0.0
    assert parse_args(["--url", "ws://127.0.0.1:9", "--phonemes-rate", "0.5"])[0].phonemes_rate == 0.5
    for bad in (["--concurrency", "0"], ["--cancel-rate", "1.5"], ["--cancel-rate", "0.6", "--disconnect-rate", "0.6"],
                ["--phonemes-rate", "-0.1"]):
        with pytest.raises(SystemExit):
            parse_args(["--url", "ws://127.0.0.1:9", *bad])


def test_utterance_plan_pieces_and_rates():
    cfg = LoadConfig(url="ws://x", cancel_rate=0.2, disconnect_rate=0.1)
    rng = random.Random(0)
    plans = [plan_utterance(rng, cfg) for _ in range(2000)]
    for p in plans[:50]:
        assert 1 <= len(p.sentences) <= 3 and len(p.flush_after) == len(p.sentences)
        for pieces in p.sentences:
            assert all(1 <= len(piece.split()) <= 6 and piece.endswith(" ") for piece in pieces)
            assert all(2 <= len(piece.split()) for piece in pieces[:-1])  # only a sentence's last piece may be short
    cancels = sum(p.action == "cancel" for p in plans) / len(plans)
    disconnects = sum(p.action == "disconnect" for p in plans) / len(plans)
    assert 0.17 < cancels < 0.23 and 0.08 < disconnects < 0.12
    assert not any(p.phonemes for p in plans)  # off unless asked for


def test_phoneme_streams_ask_for_them_and_leave_the_other_draws_alone():
    plain = plan_utterance(random.Random(7), LoadConfig(url="ws://x"))
    rng = random.Random(7)
    with_phonemes = [plan_utterance(rng, LoadConfig(url="ws://x", phonemes_rate=0.4)) for _ in range(2000)]
    first = with_phonemes[0]
    assert (first.sentences, first.action, first.timestamps) == (plain.sentences, plain.action, plain.timestamps)
    assert 0.36 < sum(p.phonemes for p in with_phonemes) / len(with_phonemes) < 0.44
    agent_msg = Agent._message(SimpleNamespace(cfg=LoadConfig(url="ws://x"), voice="v"), "c", "Hi ", first)
    assert agent_msg.get("add_phoneme_timestamps", False) == first.phonemes


def test_context_closed_after_the_terminal_event_answers_late_input_and_is_no_violation():
    s = _stream()
    s.t_first_text = 0.0
    s.on_message({"type": "error", "done": True, "status_code": 429, "error_code": "concurrency_limited",
                  "context_id": "c"}, 0.01)
    s.on_message({"type": "error", "done": True, "status_code": 400, "error_code": "context_closed",
                  "context_id": "c"}, 0.02)
    rec = s.finish()
    assert rec.refused and rec.terminal_events == 1 and rec.late_input_errors == 1 and not rec.violations


def test_backoff_follows_the_servers_advice_else_doubles_with_jitter():
    rng = random.Random(0)
    assert backoff_s(1, 2.5, rng) == 2.5
    waits = [backoff_s(n, None, rng) for n in (1, 2, 3, 4, 5, 6, 7)]
    for n, w in zip((1, 2, 3, 4), waits):
        assert 0.75 * 0.5 * 2 ** (n - 1) <= w <= 1.25 * 0.5 * 2 ** (n - 1)
    assert max(waits) <= 8.0


def test_a_refused_context_refused_again_for_late_text_is_no_violation_but_audio_is():
    s = _stream()
    s.t_first_text = 0.0
    refusal = {"type": "error", "done": True, "status_code": 429, "error_code": "concurrency_limited", "context_id": "c"}
    s.on_message(refusal, 0.01)
    s.on_message(refusal, 0.02)
    assert s.record.late_input_errors == 1 and not s.record.violations
    s.on_message(_chunk("c", 0.1), 0.03)  # a later piece was admitted as a new context: never fine
    assert s.record.after_terminal == 1 and s.record.violations


# -- a level that never reached the server, or whose agents crashed, is no clean run -------------------
def test_summary_counts_connection_failures_and_crashed_agents_as_failures():
    s = summarize([_rec("done", ttfa_s=0.1, audio_s=1.0)], concurrency=1, wall_s=1.0, connect_errors=3,
                  agent_errors=1)
    assert s["connect_errors"] == 3 and s["agent_errors"] == 1 and s["failures"] == 4


def _closed_port() -> int:
    import socket

    with socket.socket() as sock:  # bound, then closed: nothing listens there
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_a_server_that_cannot_be_reached_is_a_failed_run(capsys):
    code = main(["--url", f"ws://127.0.0.1:{_closed_port()}", "--voice", "v", "--concurrency", "1",
                 "--duration", "0.3", "--ramp", "0", "--grace", "0"])
    out = capsys.readouterr().out
    assert code == 1, out
    header, row = out.splitlines()[2:4]
    assert "conn err" in header
    cells = dict(zip(["C", "streams", "done", "refused", "other", "conn", "fail"], row.split()))
    assert cells["streams"] == "0" and int(cells["conn"]) >= 1 and cells["fail"] == cells["conn"], out
    assert re.search(r"^FAILED C=1: \d+ connection attempt\(s\) failed \(ConnectionRefusedError x\d+\)$", out, re.M)
    assert "FAILED C=1: no stream ran" in out


async def test_an_agent_that_raises_is_printed_and_fails_its_level(monkeypatch, capsys):
    """utterance() re-raises its sender's errors on purpose (a bug in this client, not the server's
    doing): gathering the agents must not swallow them."""

    async def listen(ws) -> None:  # a WebSocket server that takes whatever comes and answers nothing
        async for _ in ws:
            pass

    def broken(self, *args, **kwargs):
        raise RuntimeError("a bug in the client")

    monkeypatch.setattr(Agent, "_message", broken)
    async with serve(listen, "127.0.0.1", 0) as server:
        port = server.sockets[0].getsockname()[1]
        cfg = LoadConfig(url=f"ws://127.0.0.1:{port}", concurrency=[1], duration_s=0.2, ramp_s=0.0, grace_s=0.2,
                         cancel_rate=0.0, disconnect_rate=0.0)
        result = await run_level(cfg, 1, "v")
    err = capsys.readouterr().err
    assert result.summary["agent_errors"] == 1 and result.summary["failures"] >= 1, result.summary
    assert "C=1 agent 0 failed" in err and "RuntimeError: a bug in the client" in err


# -- the sender's own times -----------------------------------------------------------------------------
class _Wire:
    """Stands in for a Socket: notes when each piece goes out, and once the first sentence's last
    piece has gone, lets a chunk arrive 10 ms later (the reader's on_message), while the sender
    sleeps between pieces as an LLM does."""

    def __init__(self, stream: LiveStream, clock: Clock, last_piece: str) -> None:
        self.stream, self.clock, self.last_piece = stream, clock, last_piece
        self.sent: dict[str, float] = {}
        self.arrived_at: float | None = None

    async def send(self, msg: dict) -> None:
        self.sent.setdefault(msg["transcript"], self.clock.now())
        if msg["transcript"] == self.last_piece:
            asyncio.get_running_loop().call_later(0.01, self._arrive)

    def _arrive(self) -> None:
        self.arrived_at = self.clock.now()
        self.stream.on_message(_chunk(self.stream.record.context_id, 0.1), self.arrived_at)


async def test_the_first_sentence_ends_when_its_last_piece_is_sent_not_when_a_message_arrives():
    cfg = LoadConfig(url="ws://x")
    clock = Clock()
    agent = Agent(0, 1, Session(0, cfg, clock, LevelStats()), cfg, "v", clock, 60.0, 60.0, [])
    stream = LiveStream(StreamRecord(level=1, agent=0, socket=0, context_id="c"), cfg, clock)
    utt = Utterance([["Sure, I can ", "help. "], ["Bye. "]], [False, False], None, 1.0, False)
    wire = _Wire(stream, clock, "help. ")
    await agent._send_text(wire, stream, utt)
    assert wire.arrived_at is not None  # the chunk came while the sender slept after "help. "
    # the send's own time (taken as it returns), not the chunk's arrival 10 ms after it
    assert wire.sent["help. "] <= stream.t_first_sentence < wire.arrived_at
    assert stream.finish().ttfa_sentence_s == pytest.approx(wire.arrived_at - stream.t_first_sentence)


# -- the README says what loadgen's RTF is ------------------------------------------------------------------
def test_the_readme_defines_loadgens_rtf_as_loadgen_counts_it():
    """loadgen's RTF runs from the first audio to the terminal event, not from the request as the
    engine benchmarks' does; the README quotes loadgen's figures, so it must say which it is."""
    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text()
    paragraph = readme.split("`bench/loadgen.py` drives", 1)[1].split("```", 1)[0]
    assert "first audio chunk to its `done`" in " ".join(paragraph.split())
    assert "loadgen's RTF p50, first audio to `done`" in " ".join(readme.split())
    assert real_time_factor(t_first_audio=1.0, t_end=3.0, audio_s=4.0) == 0.5  # what the words describe
