"""Admission decisions and the load meter, with a fake clock (no server): limits per process and per
key, the load-aware limit and its prediction, places given back exactly once."""

from __future__ import annotations

import dataclasses
import math

import pytest

from api.admission import Admission, AdmissionLimits, LoadMeter, StreamRefusedError
from api.errors import describe_error


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now

    def run(self, meter: LoadMeter, seconds: float, streams: int, xrt_per_stream: float, step: float = 0.05) -> None:
        """``streams`` streams generating for ``seconds``, each producing audio ``xrt_per_stream``
        times faster than real time, reported every ``step`` seconds."""
        t = 0.0
        while t < seconds - 1e-9:
            self.now += step
            t += step
            for _ in range(streams):
                meter.audio(step * xrt_per_stream, step)


def steady_meter(streams: int, xrt_per_stream: float, seconds: float = 20.0) -> tuple[LoadMeter, Clock]:
    clock = Clock()
    meter = LoadMeter(tau_s=2.0, clock=clock)
    meter.stream_busy(+streams)
    clock.run(meter, seconds, streams, xrt_per_stream)
    return meter, clock


@pytest.mark.parametrize("streams,xrt", [(1, 10.0), (4, 2.0), (16, 1.25), (32, 0.5)])
def test_saturation_is_the_average_real_time_factor_of_generating_streams(streams, xrt):
    meter, _ = steady_meter(streams, xrt)
    assert meter.saturation() == pytest.approx(1.0 / xrt, rel=0.02)


def test_idle_meter_reads_zero_and_has_no_capacity():
    meter = LoadMeter(clock=Clock())
    assert meter.saturation() == 0.0 and meter.capacity() is None
    assert meter.predicted_saturation(0) == 0.0


def test_capacity_is_learned_only_when_saturated_and_forgotten_later():
    meter, clock = steady_meter(8, 4.0)  # 8 streams at 4x: not saturated (0.25)
    assert meter.capacity() is None
    meter2, clock2 = steady_meter(20, 0.9)  # 20 streams at 0.9x: saturated, 18 audio s per s
    assert meter2.capacity() == pytest.approx(18.0, rel=0.05)
    meter2.stream_busy(-20)
    clock2.now += 1000
    assert meter2.capacity() is None


def test_prediction_counts_the_new_stream_and_open_streams_not_yet_generating():
    meter, _ = steady_meter(4, 2.0)  # s = 0.5 over 4 busy streams
    assert meter.predicted_saturation(4) == pytest.approx(0.5 * 5 / 4, rel=0.03)
    assert meter.predicted_saturation(8) == pytest.approx(0.5 * 9 / 4, rel=0.03)  # 4 more open, soon generating
    saturated, _ = steady_meter(20, 0.9)  # capacity ~18 audio s/s, measured with 20 streams
    assert saturated.predicted_saturation(19) >= 20 / 18 - 0.05


def test_a_capacity_measured_with_few_streams_is_not_used_for_more():
    """Batching engines deliver more in total with more streams: 2 saturated streams say nothing
    about what 10 would get, so the prediction for 10 does not use that capacity."""
    meter, clock = steady_meter(2, 0.95)  # saturated with 2 streams: ~1.9 audio s/s
    assert meter.capacity() == pytest.approx(1.9, rel=0.05)
    assert meter.capacity(streams=2) is not None and meter.capacity(streams=10) is None
    meter.stream_busy(-2)
    meter.stream_busy(+1)
    clock.run(meter, 20.0, 1, 10.0)  # later: one stream, 10x real time
    assert meter.predicted_saturation(9) == pytest.approx(0.1 * 10, rel=0.05)  # not 10 / 1.9
    meter.stream_busy(+19)
    clock.run(meter, 20.0, 20, 0.9)  # saturated with 20 streams: the higher concurrency wins
    assert meter.capacity(streams=20) == pytest.approx(18.0, rel=0.05)


def admission(meter: LoadMeter | None = None, open_streams: int = 0, **limits) -> Admission:
    """An Admission with ``open_streams`` streams already admitted and speaking (before the load
    limit applies); the meter says how many of them generate now."""
    refused: list[str] = []
    wanted = AdmissionLimits(**limits)
    adm = Admission(dataclasses.replace(wanted, max_saturation=0.0), meter or LoadMeter(clock=Clock()),
                    on_refused=refused.append)
    for _ in range(open_streams):
        adm.admit("earlier").mark_spoke()
    adm.limits = wanted
    adm.refused = refused  # type: ignore[attr-defined]
    return adm


def test_process_limit_refuses_with_retry_advice_and_places_come_back_once():
    adm = admission(max_streams=2)
    a, b = adm.admit("k1"), adm.admit("k2")
    with pytest.raises(StreamRefusedError) as info:
        adm.admit("k3")
    err = info.value
    assert err.reason == "process" and err.error_code == "concurrency_limited" and "GEPARD_MAX_STREAMS" in err.message
    described = describe_error(err)
    assert described.status_code == 429 and described.retryable and described.retry_after_s == 1.0
    a.release()
    a.release()  # idempotent: one place back, not two
    assert adm.open_streams == 1
    adm.admit("k3")
    with pytest.raises(StreamRefusedError):
        adm.admit("k4")
    b.release()
    assert adm.refused == ["process", "process"]


def test_per_key_limit_counts_each_key_apart():
    adm = admission(max_streams=10, max_streams_per_key=2)
    tickets = [adm.admit("alice"), adm.admit("alice")]
    with pytest.raises(StreamRefusedError) as info:
        adm.admit("alice")
    assert info.value.reason == "key" and "GEPARD_MAX_STREAMS_PER_KEY" in info.value.message
    adm.admit("bob")
    tickets[0].release()
    adm.admit("alice")
    assert adm.streams_of("alice") == 2 and adm.streams_of("bob") == 1


def test_load_limit_refuses_when_one_more_stream_would_fall_behind():
    meter, _ = steady_meter(4, 1.25)  # s = 0.8; with a fifth stream 1.0
    adm = admission(meter, open_streams=4, max_saturation=0.9)
    with pytest.raises(StreamRefusedError) as info:
        adm.admit("k")
    assert info.value.reason == "load" and "GEPARD_ADMIT_MAX_SATURATION" in info.value.message
    relaxed = admission(meter, open_streams=4, max_saturation=1.1)
    relaxed.admit("k")
    off = admission(meter, open_streams=4, max_saturation=0.0)  # 0 turns the load limit off
    off.admit("k")


def test_min_streams_are_admitted_whatever_the_load():
    meter, _ = steady_meter(1, 0.5)  # one stream already slower than real time
    adm = admission(meter, open_streams=1, max_saturation=0.9, min_streams=2)
    adm.admit("k")
    strict = admission(meter, open_streams=1, max_saturation=0.9, min_streams=1)
    with pytest.raises(StreamRefusedError):
        strict.admit("k")


def test_light_load_admits():
    meter, _ = steady_meter(8, 10.0)  # s = 0.1
    adm = admission(meter, open_streams=8, max_saturation=0.9)
    for _ in range(5):
        adm.admit("k")


def test_a_burst_of_new_streams_counts_before_the_meter_sees_it():
    """Streams admitted a moment ago have produced nothing the meter could measure; they count as
    generating, so a burst at light load is cut where it would overload."""
    meter, _ = steady_meter(2, 5.0)  # s = 0.2 with 2 streams generating
    adm = admission(meter, open_streams=2, max_saturation=0.85)
    burst = [adm.admit("k") for _ in range(6)]  # the 6th: 0.2 * (2 + 5 fresh + 1) / 2 = 0.8
    with pytest.raises(StreamRefusedError):
        adm.admit("k")  # 0.2 * (2 + 6 fresh + 1) / 2 = 0.9 > 0.85
    burst[0].mark_spoke()  # its audio is out: from now on the meter accounts for it
    burst[1].release()  # a fresh stream that ended without audio stops counting too
    adm.admit("k")
    burst[0].mark_spoke()  # idempotent
    assert adm.open_streams == 2 + 6


def test_open_streams_waiting_for_text_do_not_count_as_load():
    meter, _ = steady_meter(1, 5.0)  # 1 stream generating, s = 0.2
    adm = admission(meter, open_streams=6, max_saturation=0.9)  # 6 open, 5 of them idle between turns
    adm.admit("k")  # predicted 0.2 * (1 + 0 + 1) / 1 = 0.4


def test_a_piece_still_being_generated_is_not_counted_as_load():
    """Audio comes in chunks (4 then 16 frames on a CPU codec): between two of a stream's chunks
    its time is spent on audio not out yet. Counted as busy time with no audio, it read a lone
    stream 0.1 s past its first chunk as ~50000x real time and one between its first two counted
    chunks as up to twice its real rate, refusing a second stream on an idle server (the pair ran
    at 0.2-0.7x real time). Each piece brings the busy time that produced it instead."""
    clock = Clock()
    meter = LoadMeter(tau_s=2.0, clock=clock)
    adm = admission(meter, open_streams=1, max_saturation=0.9)
    meter.stream_busy(+1)  # the first stream's first chunk is out (its audio is not counted)
    clock.now += 0.1  # its next chunk (16 frames, 0.744 s of audio) is being generated
    assert meter.saturation() == 0.0 and meter.predicted_saturation(1) == 0.0  # nothing measured yet
    clock.now += 0.15
    meter.audio(16 / 21.5, 0.25)  # out after 0.25 s: the stream runs at 0.34x real time
    assert meter.saturation() == pytest.approx(0.25 / (16 / 21.5), rel=0.01)
    for _ in range(4):  # the next chunk, not out yet: the measurement holds
        clock.now += 0.05
        assert meter.predicted_saturation(1) == pytest.approx(2 * 0.336, rel=0.02)
    adm.admit("second")  # 0.67 <= 0.9: two such streams keep up
    clock.now += 0.05
    meter.audio(16 / 21.5, 0.5)  # the next chunk took 0.5 s (0.67x): now it counts
    decay = math.exp(-0.25 / 2.0)  # the first piece is 0.25 s older
    assert meter.saturation() == pytest.approx((0.25 * decay + 0.5) / (16 / 21.5 * (decay + 1)), rel=0.01)


def test_a_pause_does_not_turn_the_rate_of_two_streams_into_one_streams():
    """Saturation is a ratio, so it holds through a pause while the average of busy streams decays:
    the prediction divides by the streams busy together when it was measured, not by that decayed
    average (which read a pair's per-stream rate as one stream's and refused a second request
    sent just after a first on a server that had just served such a pair)."""
    meter, clock = steady_meter(2, 1 / 0.45, seconds=1.0)  # a pair at 0.45x real time each
    meter.stream_busy(-2)
    clock.now += 1.5  # the pair is done; a pause
    meter.stream_busy(+1)  # a new request: its first chunk is out
    clock.now += 0.05
    assert meter.saturation() == pytest.approx(0.45, rel=0.02)
    assert meter.predicted_saturation(1) == pytest.approx(0.45, rel=0.1)  # two streams: as the pair ran, not 0.9
    adm = admission(meter, open_streams=1, max_saturation=0.9)
    adm.admit("second")
    meter2, _ = steady_meter(2, 1 / 0.45, seconds=20.0)  # still running: the same prediction for 2
    assert meter2.predicted_saturation(1) == pytest.approx(0.45, rel=0.03)
