"""AudioSink: resample -> encode -> container for one context, against one-shot references."""

from __future__ import annotations

import io

import numpy as np
import pytest
import soundfile as sf
import soxr

from api.audio.encoding import AudioEncoding, decode_pcm, encode_pcm
from api.audio.formats import OutputFormat
from api.audio.pipeline import AudioSink


def _speechlike(n: int) -> np.ndarray:
    t = np.arange(n) / 22050
    return (0.3 * np.sin(2 * np.pi * 180 * t) * (1 + np.sin(2 * np.pi * 3 * t)) / 2).astype(np.float32)


def _run(sink: AudioSink, x: np.ndarray, sizes=(1234, 17, 4000, 999)) -> bytes:
    out, i, k = [], 0, 0
    while i < len(x):
        out.append(sink.push(x[i : i + sizes[k % len(sizes)]]))
        i += sizes[k % len(sizes)]
        k += 1
    return b"".join(out) + sink.finish()


@pytest.mark.parametrize("encoding", list(AudioEncoding))
@pytest.mark.parametrize("rate", [8000, 22050, 48000])
def test_raw_sink_matches_one_shot_reference(encoding, rate):
    x = _speechlike(22050)
    data = _run(AudioSink(OutputFormat.parse("raw", encoding.value, rate)), x)
    whole = x if rate == 22050 else soxr.resample(x, 22050, rate, quality="HQ")
    ref = encode_pcm(whole, encoding)
    assert len(data) == len(ref) == round(22050 * rate / 22050) * encoding.sample_width
    got, want = decode_pcm(data, encoding), decode_pcm(ref, encoding)
    # Identical up to one quantisation step where the 1e-4 resampler tolerance crosses a boundary.
    step = {"pcm_f32le": 1e-4, "pcm_s16le": 1e-4 + 2**-15}.get(encoding.value, 0.04)
    assert np.max(np.abs(got - want)) <= step


def test_every_raw_piece_holds_whole_samples():
    sink = AudioSink(OutputFormat.parse("raw", "pcm_f32le", 44100))
    pieces = [sink.push(p) for p in np.array_split(_speechlike(5000), 9)] + [sink.finish()]
    assert all(len(p) % 4 == 0 for p in pieces)


def test_wav_sink_with_known_length_has_exact_sizes():
    x = _speechlike(11025)
    data = _run(AudioSink(OutputFormat.parse("wav", "pcm_s16le", 16000), num_input_samples=len(x)), x)
    info = sf.info(io.BytesIO(data))
    assert (info.samplerate, info.frames) == (16000, 8000)
    assert int.from_bytes(data[4:8], "little") == len(data) - 8


def test_wav_sink_pads_when_fewer_samples_than_announced():
    sink = AudioSink(OutputFormat.parse("wav", "pcm_mulaw", 8000), num_input_samples=22050)
    data = _run(sink, _speechlike(20000))
    y, _ = sf.read(io.BytesIO(data))
    assert len(y) == 8000 and np.all(np.abs(y[-500:]) < 1e-3)


def test_wav_sink_streaming_header_and_mp3():
    x = _speechlike(22050)
    wav = _run(AudioSink(OutputFormat.parse("wav", "pcm_f32le", 24000)), x)
    assert sf.info(io.BytesIO(wav)).frames == 24000
    mp3 = _run(AudioSink(OutputFormat.parse("mp3", None, 24000, 96000)), x)
    y, rate = sf.read(io.BytesIO(mp3))
    assert rate == 24000 and 1.0 <= len(y) / rate < 1.2


def test_sink_is_single_use():
    sink = AudioSink(OutputFormat.parse("raw", "pcm_s16le", 16000))
    sink.finish()
    with pytest.raises(RuntimeError, match="finished"):
        sink.push(np.zeros(3, np.float32))
    with pytest.raises(RuntimeError, match="already finished"):
        sink.finish()


# --- output range: the resampler overshoots around full-scale peaks ------------------------------


def _clipped_loud(n: int = 22050) -> np.ndarray:
    """Speech-like audio at volume 1.6, clipped to [-1, 1] (what generation_config.volume makes)."""
    t = np.arange(n) / 22050
    return np.clip(1.6 * np.sin(2 * np.pi * 180 * t) * (1 + np.sin(2 * np.pi * 3 * t)) / 2, -1, 1).astype(np.float32)


@pytest.mark.parametrize("rate", [16000, 24000, 44100, 48000])
@pytest.mark.parametrize("container", ["raw", "wav"])
def test_f32_output_stays_in_range_after_resampling(container, rate):
    x = _clipped_loud()
    assert np.abs(soxr.resample(x, 22050, rate, quality="HQ")).max() > 1.0  # the premise: soxr overshoots
    data = _run(AudioSink(OutputFormat.parse(container, "pcm_f32le", rate)), x)
    y = decode_pcm(data, "pcm_f32le") if container == "raw" else sf.read(io.BytesIO(data), dtype="float32")[0]
    assert len(y) == rate and np.isfinite(y).all()
    assert np.abs(y).max() <= 1.0
    assert np.abs(y).max() == 1.0  # clipped, not scaled down


# --- segments: one resampler each, one container writer for the whole stream ------------------------


def _segments() -> list[np.ndarray]:
    x = _speechlike(3 * 22050)
    return [x[:20000], x[20000:20001], x[20001:45000], x[45000:]]


@pytest.mark.parametrize("rate", [8000, 22050, 24000, 48000])
def test_end_segment_resamples_each_segment_on_its_own(rate):
    segs = _segments()
    sink = AudioSink(OutputFormat.parse("raw", "pcm_f32le", rate))
    out = []
    for seg in segs:
        out.append(b"".join(sink.push(p) for p in np.array_split(seg, 3)))
        out.append(sink.end_segment())
        assert sink.end_segment() == b""  # nothing pushed since: nothing to end
    out.append(sink.finish())
    got = decode_pcm(b"".join(out), "pcm_f32le")
    want = np.concatenate([s if rate == 22050 else soxr.resample(s, 22050, rate, quality="HQ") for s in segs])
    assert len(got) == len(want) == sum(round(len(s) * rate / 22050) for s in segs)
    assert np.abs(got - want).max() < 1e-4
    assert (sink.samples_in, sink.samples_out) == (sum(map(len, segs)), len(got))


def test_end_segment_releases_the_held_back_tail_at_once():
    seg = _speechlike(22050)
    sink = AudioSink(OutputFormat.parse("raw", "pcm_s16le", 24000))
    pushed = len(sink.push(seg)) // 2
    assert pushed < 24000  # soxr holds back its look-ahead...
    assert pushed + len(sink.end_segment()) // 2 == 24000  # ...which the segment's end releases
    assert sink.finish() == b""


def test_end_segment_keeps_one_container_stream():
    segs = _segments()
    wav_sink = AudioSink(OutputFormat.parse("wav", "pcm_s16le", 16000))
    mp3_sink = AudioSink(OutputFormat.parse("mp3", None, 24000, 96000))
    wav, mp3 = [], []
    for seg in segs:
        wav += [wav_sink.push(seg), wav_sink.end_segment()]
        mp3 += [mp3_sink.push(seg), mp3_sink.end_segment()]
    wav, mp3 = b"".join(wav) + wav_sink.finish(), b"".join(mp3) + mp3_sink.finish()
    assert wav.count(b"RIFF") == 1 and sf.info(io.BytesIO(wav)).frames == sum(round(len(s) * 16000 / 22050) for s in segs)
    y, rate = sf.read(io.BytesIO(mp3))
    assert rate == 24000 and 3.0 <= len(y) / rate < 3.2  # one MP3 stream: one encoder delay, one padding


def test_end_segment_after_finish_raises():
    sink = AudioSink(OutputFormat.parse("raw", "pcm_s16le", 16000))
    sink.finish()
    with pytest.raises(RuntimeError, match="finished"):
        sink.end_segment()
