"""voices/audio_input.py: real clips in every supported container, and each rejection."""

from __future__ import annotations

import io
from pathlib import Path

import lameenc
import numpy as np
import pytest
import soundfile as sf

from voices.audio_input import load_reference_clip, sniff_format
from voices.errors import (
    ClipSilentError,
    ClipTooLargeError,
    ClipTooShortError,
    CorruptClipError,
    UnsupportedAudioFormatError,
)

RATE = 22050


def sine(seconds: float, rate: int, freq: float = 440.0, amp: float = 0.3) -> np.ndarray:
    t = np.arange(int(seconds * rate)) / rate
    return (amp * np.sin(2 * np.pi * freq * t)).astype(np.float32)


def encode(pcm: np.ndarray, rate: int, fmt: str, subtype: str | None = None) -> bytes:
    buf = io.BytesIO()
    sf.write(buf, pcm, rate, format=fmt, subtype=subtype)
    return buf.getvalue()


def encode_mp3(pcm: np.ndarray, rate: int) -> bytes:
    enc = lameenc.Encoder()
    enc.set_bit_rate(96)
    enc.set_in_sample_rate(rate)
    enc.set_channels(1)
    enc.set_quality(2)
    data = (np.clip(pcm, -1, 1) * 32767).astype(np.int16).tobytes()
    return bytes(enc.encode(data) + enc.flush())


def peak_hz(pcm: np.ndarray, rate: int = RATE) -> float:
    spectrum = np.abs(np.fft.rfft(pcm * np.hanning(len(pcm))))
    return float(np.argmax(spectrum) * rate / len(pcm))


# ---------------------------------------------------------------------------- accepted clips


def test_reference_clips_load_resample_and_trim(ref_audio_dir: Path) -> None:
    en = (ref_audio_dir / "audio_en.wav").read_bytes()  # 44.1 kHz, 7.3 s
    linda = (ref_audio_dir / "linda.wav").read_bytes()  # 22.05 kHz, 8.0 s
    pcm = load_reference_clip(en, filename="audio_en.wav", content_type="audio/wav")
    assert pcm.dtype == np.float32 and pcm.ndim == 1
    assert len(pcm) == round(7.3 * RATE)
    original, _ = sf.read(io.BytesIO(linda), dtype="float32")
    pcm = load_reference_clip(linda, filename="linda.wav", content_type="audio/x-wav")
    np.testing.assert_array_equal(pcm, original)  # already at 22.05 kHz: untouched
    for clip in (en, linda):
        assert len(load_reference_clip(clip, max_ref_seconds=5.0)) == 5 * RATE
        assert len(load_reference_clip(clip, max_ref_seconds=0)) >= 7 * RATE  # 0 disables trimming
    long_clip = encode(np.tile(original, 3), RATE, "WAV")  # 24 s
    assert len(load_reference_clip(long_clip)) == 15 * RATE  # default max_ref_seconds


def test_resampling_keeps_pitch_and_mixes_stereo_to_mono() -> None:
    left = sine(4.0, 48000, freq=1000.0)
    stereo = np.stack([left, 0.5 * left], axis=1)
    pcm = load_reference_clip(encode(stereo, 48000, "WAV"), filename="s.wav")
    assert len(pcm) == 4 * RATE
    assert abs(peak_hz(pcm) - 1000.0) < 2.0
    np.testing.assert_allclose(np.abs(pcm).max(), 0.75 * 0.3, rtol=0.02)  # mean of the channels


@pytest.mark.parametrize("fmt, subtype, rate", [("FLAC", None, 16000), ("OGG", "VORBIS", 48000),
                                                 ("WAV", "FLOAT", 8000)])
def test_flac_ogg_and_float_wav_load(fmt: str, subtype: str | None, rate: int) -> None:
    data = encode(sine(3.5, rate, freq=300.0), rate, fmt, subtype)
    pcm = load_reference_clip(data, filename=None, content_type=None)
    assert abs(len(pcm) - 3.5 * RATE) <= 1
    assert abs(peak_hz(pcm) - 300.0) < 2.0


def test_mp3_encoded_with_lame_loads() -> None:
    data = encode_mp3(sine(4.0, 44100, freq=500.0), 44100)
    assert sniff_format(data) == "mp3"
    pcm = load_reference_clip(data, filename="clip.mp3", content_type="audio/mpeg")
    assert abs(len(pcm) / RATE - 4.0) < 0.1  # the encoder adds a few ms of padding
    assert abs(peak_hz(pcm) - 500.0) < 3.0


# ---------------------------------------------------------------------------- rejections


def test_too_short_clip_names_its_duration() -> None:
    with pytest.raises(ClipTooShortError, match="reference clip is 2.50 s long; at least 3 s of audio is needed"):
        load_reference_clip(encode(sine(2.5, 44100), 44100, "WAV"))


def test_silent_clips_are_rejected_with_their_level() -> None:
    with pytest.raises(ClipSilentError, match="RMS level is -inf dBFS, below the -60 dBFS threshold"):
        load_reference_clip(encode(np.zeros(4 * RATE, np.float32), RATE, "WAV"))
    hiss = np.random.default_rng(0).normal(0, 1e-4, 4 * RATE).astype(np.float32)  # about -80 dBFS
    with pytest.raises(ClipSilentError, match=r"RMS level is -8\d\.\d dBFS"):
        load_reference_clip(encode(hiss, RATE, "WAV", "FLOAT"))
    tone = sine(4.0, RATE)
    cancelled = np.stack([tone, -tone], axis=1)  # opposite channels: the mono mix is silent
    with pytest.raises(ClipSilentError):
        load_reference_clip(encode(cancelled, RATE, "WAV", "FLOAT"))


def test_corrupt_bytes_of_a_supported_format() -> None:
    flac = encode(sine(4.0, RATE), RATE, "FLAC")
    with pytest.raises(CorruptClipError, match="looks like flac but cannot be decoded"):
        load_reference_clip(flac[: len(flac) // 3], filename="cut.flac")
    with pytest.raises(CorruptClipError, match="looks like wav but cannot be decoded"):
        load_reference_clip(b"RIFF\x00\x00\x00\x00WAVE" + bytes(200))
    with pytest.raises(CorruptClipError, match=r"'x.wav' is declared as wav \(content type 'audio/wav' and "
                                               r"extension '.wav'\) but its bytes are not a wav stream"):
        load_reference_clip(b"definitely not audio", filename="x.wav", content_type="audio/wav")
    with pytest.raises(CorruptClipError, match="is empty"):
        load_reference_clip(b"")


def test_oversize_clip_is_rejected_before_decoding() -> None:
    data = encode(sine(4.0, RATE), RATE, "WAV")
    with pytest.raises(ClipTooLargeError, match=f"reference clip is {len(data)} bytes; the limit is 100000 bytes"):
        load_reference_clip(data, max_bytes=100_000)
    with pytest.raises(ClipTooLargeError, match="the limit is 20000000 bytes"):
        load_reference_clip(b"\x00" * 20_000_001)


@pytest.mark.parametrize("data, filename, content_type, claim", [
    (b"just some text, not audio at all", None, None, "no content type or extension"),
    (b"\xff\xf1\x50\x80" + bytes(300), "voice.aac", "audio/aac", "content type 'audio/aac' and extension '.aac'"),
    (b"\x00\x00\x00\x20ftypM4A " + bytes(300), "voice.m4a", None, "extension '.m4a'"),
])
def test_unknown_formats_are_unsupported(data: bytes, filename, content_type, claim: str) -> None:
    with pytest.raises(UnsupportedAudioFormatError, match="supported formats: wav, flac, ogg, mp3") as info:
        load_reference_clip(data, filename=filename, content_type=content_type)
    assert claim in str(info.value)


def test_bad_limits_are_a_programming_error() -> None:
    with pytest.raises(ValueError, match="max_ref_seconds"):
        load_reference_clip(b"RIFF", max_ref_seconds=2.0, min_seconds=3.0)


# ---------------------------------------------------------------------------- decoding bombs (issue 9.10)


def silent_flac(rate: int, channels: int, seconds: int) -> bytes:
    """``seconds`` of silence as 16-bit FLAC, written a second at a time (tiny once compressed)."""
    buf = io.BytesIO()
    with sf.SoundFile(buf, "w", samplerate=rate, channels=channels, format="FLAC", subtype="PCM_16") as f:
        block = np.zeros((rate, channels), dtype=np.int16)
        for _ in range(seconds):
            f.write(block)
    return buf.getvalue()


def test_flac_bomb_is_refused_from_its_header_before_decoding() -> None:
    """90 KB declaring 16 s of 655,350 Hz x 8 channels: it used to be decoded (+408 MB RSS) and
    only then found silent; now the header alone refuses it."""
    bomb = silent_flac(655_350, 8, 16)
    assert len(bomb) < 200_000
    with pytest.raises(UnsupportedAudioFormatError, match="'bomb.flac' is 655350 Hz with 8 channels; at most "
                                                          "192000 Hz and 8 channels are accepted"):
        load_reference_clip(bomb, filename="bomb.flac", content_type="audio/flac")


def test_too_many_channels_are_refused() -> None:
    nine = encode(np.tile(sine(4.0, 8000)[:, None], (1, 9)), 8000, "WAV")
    with pytest.raises(UnsupportedAudioFormatError, match="8000 Hz with 9 channels"):
        load_reference_clip(nine)


def test_samples_to_decode_are_bounded_by_rate_times_channels_times_kept_seconds() -> None:
    from voices.audio_input import MAX_DECODED_SAMPLES, ClipDecodesTooLargeError

    wide = silent_flac(96_000, 8, 16)  # 15 s kept x 8 channels x 96 kHz = 11.5 M samples
    with pytest.raises(ClipDecodesTooLargeError, match=f"at most {MAX_DECODED_SAMPLES:,} samples") as info:
        load_reference_clip(wide, filename="wide.flac")
    assert "11,520,000 samples (15.0 s kept x 8 channels at 96000 Hz)" in str(info.value)
    assert isinstance(info.value, ClipTooLargeError)  # 400 clip_too_large, like too many bytes
    # the bound counts what is kept: the same clip trimmed to 7 s is decoded (and found silent)
    with pytest.raises(ClipSilentError):
        load_reference_clip(wide, max_ref_seconds=7.0)
    # keeping everything (max_ref_seconds=0) counts the whole clip: 61 s of 48 kHz stereo is over
    long_stereo = silent_flac(48_000, 2, 61)
    with pytest.raises(ClipDecodesTooLargeError, match="61.0 s kept x 2 channels at 48000 Hz"):
        load_reference_clip(long_stereo, max_ref_seconds=0)
    with pytest.raises(ClipSilentError):  # the default keeps 15 s of it: decoded
        load_reference_clip(long_stereo)


def test_check_runs_before_the_decode_and_before_the_resample_and_may_stop_the_clip():
    """A clip nobody waits for any more (its clone was cancelled) stops at the next check."""
    data = encode(sine(4.0, 44100), 44100, "WAV")
    calls: list[int] = []
    pcm = load_reference_clip(data, check=lambda: calls.append(1))
    assert len(calls) == 2 and pcm.shape == (4 * RATE,)

    class Stop(Exception):
        pass

    def stop() -> None:
        raise Stop()

    with pytest.raises(Stop):
        load_reference_clip(data, check=stop)


# --- the decoder process: libsndfile parses an upload in a child, whose crash is that clip's 400 -----

_CRASH_AT_ONCE = "import os, sys\nsys.stdin.buffer.read(8)\nsys.stderr.write('*** buffer overflow detected ***\\n')\nos.abort()\n"
_CRASH_AFTER_HEADER = (
    "import os, sys\n"
    "size = int.from_bytes(sys.stdin.buffer.read(8), 'big'); sys.stdin.buffer.read(size)\n"
    "sys.stdout.buffer.write(b'{\"rate\": 22050, \"channels\": 1, \"frames\": 88200}\\n'); sys.stdout.flush()\n"
    "sys.stdin.buffer.readline(); os.kill(os.getpid(), 11)\n"
)
_HANG = "import time\ntime.sleep(120)\n"


@pytest.mark.parametrize("program", [_CRASH_AT_ONCE, _CRASH_AFTER_HEADER], ids=["at-once", "after-header"])
def test_a_decoder_that_dies_is_that_clips_400_and_nothing_more(tmp_path, monkeypatch, caplog, program):
    """A clip that crashes libsndfile (here a decoder program that really dies, by abort or
    SIGSEGV, where libsndfile would) is refused like a corrupt clip; the caller lives on."""
    import voices.audio_input

    script = tmp_path / "decoder.py"
    script.write_text(program)
    monkeypatch.setattr(voices.audio_input, "DECODER_SCRIPT", str(script))
    clip = encode(sine(4.0, 22050), 22050, "wav")
    with caplog.at_level("WARNING", logger="voices.audio_input"), pytest.raises(CorruptClipError) as info:
        load_reference_clip(clip, filename="boom.wav")
    assert "'boom.wav' looks like wav but cannot be decoded: the decoder failed on it" in str(info.value)
    assert any("ended with -" in r.getMessage() and "boom.wav" in r.getMessage() for r in caplog.records)
    if program == _CRASH_AT_ONCE:  # what it said before dying is in the log line
        assert any("(*** buffer overflow detected ***)" in r.getMessage() for r in caplog.records)
    monkeypatch.undo()
    assert load_reference_clip(clip, filename="fine.wav").shape == (4 * 22050,)  # the next clip is decoded


def test_a_decoder_that_never_answers_is_killed_at_the_deadline(tmp_path, monkeypatch):
    import time

    import voices.audio_input

    script = tmp_path / "decoder.py"
    script.write_text(_HANG)
    monkeypatch.setattr(voices.audio_input, "DECODER_SCRIPT", str(script))
    monkeypatch.setattr(voices.audio_input, "DECODE_TIMEOUT_S", 1.0)
    t0 = time.monotonic()
    with pytest.raises(CorruptClipError, match="decoding took longer than 1 s"):
        load_reference_clip(encode(sine(4.0, 22050), 22050, "wav"), filename="slow.wav")
    assert time.monotonic() - t0 < 10



def test_a_decoder_that_cannot_start_is_the_servers_failure_not_the_clips(monkeypatch):
    """No process to decode with (no interpreter, no process slots): 500 voice_cloning_failed, not
    a 400 blaming the client's clip."""
    import sys

    from voices.errors import VoiceCloningError

    monkeypatch.setattr(sys, "executable", "/nonexistent/python3")
    with pytest.raises(VoiceCloningError, match="did not start"):
        load_reference_clip(encode(sine(4.0, 22050), 22050, "wav"), filename="fine.wav")


def test_a_decoder_that_answers_more_than_it_was_asked_is_not_believed(tmp_path, monkeypatch):
    """The decoder parses hostile bytes, so its answer is held to the frames the bounds allow."""
    import voices.audio_input

    script = tmp_path / "decoder.py"
    script.write_text(
        "import sys\n"
        "size = int.from_bytes(sys.stdin.buffer.read(8), 'big'); sys.stdin.buffer.read(size)\n"
        "sys.stdout.buffer.write(b'{\"rate\": 22050, \"channels\": 1, \"frames\": 88200}\\n'); sys.stdout.flush()\n"
        "sys.stdin.buffer.readline()\n"
        "sys.stdout.buffer.write(b'{\"frames\": 1000000000}\\n'); sys.stdout.flush()\n")
    monkeypatch.setattr(voices.audio_input, "DECODER_SCRIPT", str(script))
    with pytest.raises(CorruptClipError, match="the decoder failed on it"):
        load_reference_clip(encode(sine(4.0, 22050), 22050, "wav"), filename="liar.wav")
