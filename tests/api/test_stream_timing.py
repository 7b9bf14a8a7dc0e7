"""StreamTiming (api/stream_timing.py): underrun and real-time factor from exact arrival times."""

from __future__ import annotations

import pytest

from api.stream_timing import StreamReport, StreamTiming


class Recorder:
    def __init__(self) -> None:
        self.underruns: list[tuple[str, float]] = []
        self.chunks: list[tuple[str, float]] = []
        self.reports: list[StreamReport] = []

    def underrun(self, route: str, seconds: float) -> None:
        self.underruns.append((route, seconds))

    def audio(self, route: str, seconds: float) -> None:
        self.chunks.append((route, seconds))

    def stream_finished(self, report: StreamReport) -> None:
        self.reports.append(report)


def test_chunks_that_arrive_before_the_playhead_runs_out_never_underrun():
    rec = Recorder()
    t = StreamTiming("bytes", rec, continuous=True)
    t.owe(0.0)
    t.audio(0.3, 0.5)  # plays 0.3 .. 0.8
    t.audio(0.5, 0.5)  # queued: plays 0.8 .. 1.3
    t.audio(1.3, 0.5)  # exactly when the playhead runs out: no wait
    report = t.close(1.4)
    assert report == StreamReport("bytes", audio_s=1.5, busy_s=pytest.approx(1.3), underrun_s=0.0)
    assert report.rtf == pytest.approx(1.3 / 1.5)
    assert rec.underruns == [] and rec.reports == [report]


def test_underrun_is_the_sum_of_the_gaps_after_the_playhead_ran_out():
    rec = Recorder()
    t = StreamTiming("sse", rec, continuous=True)
    t.owe(10.0)
    t.audio(10.2, 0.25)  # playback starts at 10.2 (first chunk: no underrun), runs out at 10.45
    t.audio(10.70, 0.25)  # waited 0.25; plays to 10.95
    t.audio(10.80, 1.0)  # queued: plays to 11.95
    t.audio(12.45, 0.5)  # waited 0.5
    report = t.close(13.0)
    assert report.underrun_s == pytest.approx(0.75)
    assert [s for _, s in rec.underruns] == [pytest.approx(0.25), pytest.approx(0.5)]
    assert all(route == "sse" for route, _ in rec.underruns)
    assert report.audio_s == pytest.approx(2.0) and report.busy_s == pytest.approx(2.45)


def test_time_owing_no_audio_is_not_underrun_websocket_rule():
    """A context that spoke, then waited for the client's next words: the silence while it owed
    nothing is not an underrun; the wait for the reply after the text arrived is."""
    t = StreamTiming("ws")
    t.owe(0.0)
    t.audio(0.1, 1.0)  # plays 0.1 .. 1.1
    t.settle(0.5)  # segment done; the client has not sent more text
    t.owe(5.0)  # next text at 5.0 (the listener ran out at 1.1: not counted)
    t.audio(5.3, 1.0)  # the listener waited 0.3 for the reply: counted
    t.settle(5.4)
    t.owe(5.5)  # next segment while audio still plays (to 6.3)
    t.audio(6.0, 1.0)  # arrives before 6.3: no wait
    report = t.close(7.0)
    assert report.underrun_s == pytest.approx(0.3)
    # busy: 0.0-0.1, 5.0-5.3 and 5.5-6.0 (to each segment's last audio), not the idle 4.5 s
    assert report.busy_s == pytest.approx(0.1 + 0.3 + 0.5)
    assert report.audio_s == pytest.approx(3.0)


def test_an_http_stream_owes_audio_until_it_ends_even_between_segments():
    t = StreamTiming("bytes", continuous=True)
    t.owe(0.0)
    t.audio(0.1, 0.2)  # runs out at 0.3
    t.settle(0.15)  # segment 1 ends: ignored (continuous)
    t.owe(0.2)
    t.audio(0.9, 0.2)  # waited 0.6: counted, although a new segment started meanwhile
    report = t.close(1.0)
    assert report.underrun_s == pytest.approx(0.6)
    assert report.busy_s == pytest.approx(0.9)


def test_a_stream_without_audio_reports_once_with_no_rtf():
    rec = Recorder()
    t = StreamTiming("ws", rec)
    t.owe(1.0)
    t.settle(2.0)
    report = t.close(3.0)
    assert report.audio_s == 0.0 and report.rtf is None and report.underrun_s == 0.0
    assert t.close(4.0) is None and len(rec.reports) == 1
    t.audio(5.0, 1.0)  # after close: ignored
    assert t.audio_s == 0.0


def test_context_manager_closes_and_reports():
    rec = Recorder()
    with StreamTiming("bytes", rec, continuous=True) as t:
        t.owe(0.0)
        t.audio(0.0, 0.5)
    assert len(rec.reports) == 1 and rec.reports[0].audio_s == 0.5


def test_audio_is_reported_as_it_comes_so_a_stream_cut_short_counts_what_it_made():
    rec = Recorder()
    t = StreamTiming("ws", rec)
    t.owe(0.0)
    t.audio(0.1, 0.5)
    assert rec.chunks == [("ws", 0.5)]  # before the stream ends (a hang-up or a cancel may end it next)
    t.audio(0.2, 0.25)
    t.close(0.3)
    t.audio(0.4, 1.0)  # after the end: not the stream's
    assert rec.chunks == [("ws", 0.5), ("ws", 0.25)]
