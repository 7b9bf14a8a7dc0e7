"""The torch decoder (codec_worker.torchcodec): the NeMo decoder's audio without NeMo.

Equality with NanoCodec (NeMo's modules) on the same random checkpoint, batched and through the
streaming/batching decoder; NeMo never imported; load errors; the implementation choice.
"""

from __future__ import annotations

import asyncio
import inspect
import io
import json
import subprocess
import sys
import tarfile
from pathlib import Path
from typing import Any, Callable

import numpy as np
import pytest
import torch
import yaml

from codec_worker.batching import BatchedDecodeStream, BatchingCodecDecoder
from codec_worker.errors import CodecFormatError, CodecNotFoundError, EncodeUnavailableError, InvalidCodesError
from codec_worker.nanocodec import NanoCodec, load_codec
from codec_worker.torchcodec import DecoderConfig, TorchNanoCodec, load_torch_decoder
from codec_worker.torchcodec.random import write_random_decoder_codec
from codec_worker.torchcodec.weights import map_key, nemo_key
from tests.codec_worker.conftest import random_codes

ROOT = Path(__file__).resolve().parents[2]
TOLERANCE = 1e-5  # float32 on CPU; in practice the two are bit-identical (weight norm folded the same way)


@pytest.fixture(scope="module")
def torch_codec(codec_path: Path) -> TorchNanoCodec:
    return load_torch_decoder(codec_path)


def _max_diff(a: torch.Tensor | np.ndarray, b: torch.Tensor | np.ndarray) -> float:
    return float(np.abs(np.asarray(a) - np.asarray(b)).max())


# ---- same audio as NeMo's decoder ------------------------------------------------------------


@pytest.mark.parametrize("frames", [1, 2, 7, 26, 41])
def test_decode_equals_the_nemo_decoder(codec: NanoCodec, torch_codec: TorchNanoCodec, frames: int) -> None:
    codes = random_codes(frames, batch=3, seed=frames)
    lengths = [frames, (frames + 1) // 2, 1]  # right-padded rows: their tails must come out as zeros too
    want = codec.decode_codes(codes, lengths=lengths)
    got = torch_codec.decode_codes(codes, lengths=lengths)
    assert got.shape == want.shape == (3, frames * 1024) and got.dtype == torch.float32
    assert float(want.abs().max()) > 0.01  # real audio, not silence on both sides
    assert _max_diff(got, want) <= TOLERANCE
    assert not bool(got[2, 1024:].any())


def test_batched_rows_equal_each_row_alone(torch_codec: TorchNanoCodec) -> None:
    codes = random_codes(12, batch=4, seed=5)
    batched = torch_codec.decode_codes(codes)
    for row in range(4):
        assert _max_diff(batched[row], torch_codec.decode_codes(codes[row : row + 1])[0]) <= TOLERANCE


def test_decode_latents_equals_the_nemo_decoder(codec: NanoCodec, torch_codec: TorchNanoCodec) -> None:
    # off the FSQ grid and beyond [-1, 1]: every activation branch and the output clamp are exercised
    latents = torch.randn(2, 32, 9, generator=torch.Generator().manual_seed(3)) * 1.5
    assert _max_diff(torch_codec.decode_latents(latents), codec.decode_latents(latents)) <= TOLERANCE


def test_reports_what_the_streaming_code_reads(codec: NanoCodec, torch_codec: TorchNanoCodec) -> None:
    assert (torch_codec.sample_rate_hz, torch_codec.samples_per_frame) == (22050, 1024)
    assert torch_codec.receptive_field_frames == codec.receptive_field_frames == 25
    assert torch_codec.fingerprint == codec.fingerprint  # same cache key for the same checkpoint
    assert (torch_codec.impl, torch_codec.can_encode, codec.impl, codec.can_encode) == ("torch", False, "nemo", True)


def test_rejects_bad_codes_like_nanocodec(torch_codec: TorchNanoCodec) -> None:
    codes = random_codes(3, batch=1)
    codes[0, 0, 1] = 8  # channel 0 has 8 levels
    with pytest.raises(InvalidCodesError, match="out of range"):
        torch_codec.decode_codes(codes)
    with pytest.raises(InvalidCodesError, match="length 4"):
        torch_codec.decode_codes(random_codes(3, batch=1), lengths=[4])


def test_encode_is_refused_with_a_pointer_to_nemo(torch_codec: TorchNanoCodec) -> None:
    with pytest.raises(EncodeUnavailableError, match="voice cloning needs|NeMo"):
        torch_codec.encode(np.zeros((1, 2048), dtype=np.float32))


# ---- streaming / batching -----------------------------------------------------------------------


async def _stream(decoder: BatchingCodecDecoder, codes: torch.Tensor, pushes: list[int],
                  stream: BatchedDecodeStream | None = None) -> np.ndarray:
    """``codes`` pushed in ``pushes`` frames then finished, on ``stream`` (default: a new one); its audio."""
    stream = stream or decoder.open_stream()
    pieces, at = [], 0
    try:
        for size in pushes:
            pieces.append(await stream.push(codes[:, at : at + size]))
            at += size
            await asyncio.sleep(0)
        pieces.append(await stream.finish())
    finally:
        await stream.aclose()
    return np.concatenate(pieces)


async def test_batched_streams_on_a_growing_schedule_equal_the_whole_utterance(
    codec: NanoCodec, torch_codec: TorchNanoCodec
) -> None:
    utterances = [random_codes(frames, seed=60 + i) for i, frames in enumerate([50, 17, 3, 33])]
    pushes = [[1] * 50, [5, 5, 7], [3], [2, 30, 1]]  # frame by frame, bursts, and one push crossing boundaries
    async with BatchingCodecDecoder(torch_codec, max_batch=3, schedule="2,4,8,32") as decoder:
        results = await asyncio.gather(*(_stream(decoder, c, p) for c, p in zip(utterances, pushes)))
    assert decoder.batches_decoded >= 2  # windows did go through the batching worker
    for codes, got in zip(utterances, results):
        whole = codec.decode_codes(codes.unsqueeze(0))[0].numpy()  # NeMo's one-shot decode
        assert got.shape == whole.shape
        assert _max_diff(got, whole) <= TOLERANCE


# ---- no NeMo ------------------------------------------------------------------------------------

_NO_NEMO_SCRIPT = """
import asyncio, json, sys
import torch

class NoNemo:  # a host without NeMo: any `import nemo...` fails as it would there
    def find_spec(self, name, path=None, target=None):
        if name == "nemo" or name.startswith("nemo."):
            raise ImportError(f"No module named {name!r} (blocked by the test)")
        return None

if sys.argv[2] == "block":
    sys.meta_path.insert(0, NoNemo())

import codec_worker
from codec_worker import BatchingCodecDecoder, CodecLoadError, EncodeUnavailableError, NanoCodec, load_codec

codec = load_codec(sys.argv[1], impl="auto" if sys.argv[2] == "block" else "torch")
codes = torch.stack([torch.randint(0, n, (1, 9)) for n in [8, 7, 6, 6] * 8], dim=1)

async def stream():
    async with BatchingCodecDecoder(codec, schedule="2,4,8,32") as decoder:
        s = decoder.open_stream()
        pcm = [await s.push(codes[0, :, :5]), await s.push(codes[0, :, 5:]), await s.finish()]
        await s.aclose()
    return sum(p.size for p in pcm)

out = {"impl": type(codec).__name__, "samples": asyncio.run(stream())}
try:
    codec.encode(torch.zeros(1, 1024))
except EncodeUnavailableError as exc:
    out["encode"] = str(exc)
if sys.argv[2] == "block":  # a codec to benchmark with, written without NeMo
    from codec_worker.torchcodec.random import write_random_decoder_codec
    written = load_codec(write_random_decoder_codec(sys.argv[3], size="tiny", seed=1))
    out["written"] = float(written.decode_codes(codes).pow(2).mean().sqrt())
out["nemo_imported"] = sorted(m for m in sys.modules if m == "nemo" or m.startswith("nemo."))
if sys.argv[2] == "block":
    try:
        NanoCodec.load(sys.argv[1])
        out["nemo_load"] = "loaded"
    except CodecLoadError as exc:
        out["nemo_load"] = str(exc)
print(json.dumps(out))
"""


def _run_no_nemo(codec_path: Path, mode: str, written: Path | None = None) -> dict[str, Any]:
    done = subprocess.run(
        [sys.executable, "-c", _NO_NEMO_SCRIPT, str(codec_path), mode, str(written)],
        cwd=ROOT, capture_output=True, text=True, timeout=120, check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_decodes_on_a_host_without_nemo(codec_path: Path, tmp_path: Path) -> None:
    """NeMo blocked: auto picks the torch decoder, streams decode, encode and NeMo loading fail clearly,
    and a random decoder-only codec can be written and decoded."""
    out = _run_no_nemo(codec_path, "block", tmp_path / "written.nemo")
    assert 0.05 < out["written"] < 0.2  # audio RMS ~0.1 as calibrated
    assert out["impl"] == "TorchNanoCodec"
    assert out["samples"] == 9 * 1024
    assert "NeMo" in out["encode"] and "cloning" in out["encode"]
    assert "needs nemo_toolkit" in out["nemo_load"]
    assert out["nemo_imported"] == []


def test_torch_decoder_never_imports_nemo(codec_path: Path) -> None:
    """NeMo installed (as here) but the torch decoder chosen: importing and running it loads no nemo module."""
    out = _run_no_nemo(codec_path, "torch")
    assert out["impl"] == "TorchNanoCodec" and out["samples"] == 9 * 1024
    assert out["nemo_imported"] == []


def test_load_codec_chooses_the_implementation(codec_path: Path) -> None:
    assert isinstance(load_codec(codec_path, impl="torch"), TorchNanoCodec)
    assert isinstance(load_codec(codec_path, impl="nemo"), NanoCodec)
    assert isinstance(load_codec(codec_path), NanoCodec)  # auto with NeMo importable: unchanged behaviour
    with pytest.raises(ValueError, match="auto, nemo, torch"):
        load_codec(codec_path, impl="onnx")


# ---- loading: weight-norm layouts and errors -------------------------------------------------


def _read(path: Path) -> tuple[dict[str, Any], dict[str, torch.Tensor]]:
    with tarfile.open(path) as archive:
        config = yaml.safe_load(archive.extractfile("./model_config.yaml").read())
        state = torch.load(io.BytesIO(archive.extractfile("./model_weights.ckpt").read()), weights_only=True)
    return config, state


def _write(path: Path, config: Any, state: dict[str, Any]) -> Path:
    path.mkdir()
    (path / "model_config.yaml").write_text(yaml.safe_dump(config))
    torch.save(state, path / "model_weights.ckpt")
    return path


def _relayout(state: dict[str, torch.Tensor], how: str) -> dict[str, torch.Tensor]:
    """Weight norm as old-style weight_g/weight_v, or folded into plain weights."""
    out: dict[str, torch.Tensor] = {}
    for key, value in state.items():
        if key.endswith("parametrizations.weight.original1") or not key.startswith("audio_decoder."):
            if not key.startswith("audio_decoder."):
                out[key] = value
            continue
        if key.endswith("parametrizations.weight.original0"):
            base = key[: -len("parametrizations.weight.original0")]
            direction = state[base + "parametrizations.weight.original1"]
            if how == "g/v":
                out[base + "weight_g"], out[base + "weight_v"] = value, direction
            else:
                out[base + "weight"] = torch._weight_norm(direction, value, 0)
        else:
            out[key] = value
    return out


@pytest.mark.parametrize("how", ["g/v", "plain"])
def test_loads_other_weight_layouts(codec_path: Path, torch_codec: TorchNanoCodec, tmp_path: Path, how: str) -> None:
    config, state = _read(codec_path)
    other = load_torch_decoder(_write(tmp_path / "ckpt", config, _relayout(state, how)))
    codes = random_codes(4, batch=1, seed=9)
    assert _max_diff(other.decode_codes(codes), torch_codec.decode_codes(codes)) <= TOLERANCE


def _broken(edit: Callable[[dict[str, Any], dict[str, Any]], None]) -> Callable[[Path, Path], Path]:
    def make(codec_path: Path, tmp_path: Path) -> Path:
        config, state = _read(codec_path)
        edit(config, state)
        return _write(tmp_path / "broken", config, state)

    return make


_PRE_G = "audio_decoder.pre_conv.conv.parametrizations.weight.original0"
_PRE_V = "audio_decoder.pre_conv.conv.parametrizations.weight.original1"


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (lambda c, s: c["audio_decoder"].update(_target_="nemo.collections.tts.modules.audio_codec_modules.HiFiGANDecoder"),
         r"_target_ .*HiFiGANDecoder.* not supported"),
        (lambda c, s: c["audio_decoder"].update(upsample_factor=2), r"unknown key\(s\) 'upsample_factor'"),
        (lambda c, s: c["audio_decoder"].update(activation="gelu"), r"'activation' must be one of"),
        (lambda c, s: c["audio_decoder"].update(up_sample_rates=[8, 8, 4, 2]), r"multiply to 512, expected samples_per_frame 1024"),
        (lambda c, s: c["audio_decoder"].update(base_channels=32), r"tensor 'audio_decoder\.pre_conv.*' gives shape"),
        (lambda c, s: c.pop("sample_rate"), r"has no 'sample_rate' key"),
        (lambda c, s: c["vector_quantizer"].update(num_groups=4), r"num_groups=4"),
        (lambda c, s: s.pop(_PRE_V), r"'audio_decoder\.pre_conv\.conv\.parametrizations\.weight\.original0' .* no direction"),
        (lambda c, s: s.pop(_PRE_G), r"'audio_decoder\.pre_conv\.conv\.parametrizations\.weight\.original1' .* no gain"),
        (lambda c, s: s.pop("audio_decoder.post_conv.conv.bias"), r"missing decoder tensor for 'post_conv\.bias'"),
        (lambda c, s: s.update({"audio_decoder.extra.weight": torch.zeros(1)}), r"unexpected tensor 'audio_decoder\.extra\.weight'"),
        (lambda c, s: s[_PRE_G].fill_(float("nan")), r"'audio_decoder\.pre_conv.*original0' holds NaN"),
        (lambda c, s: s["vector_quantizer.fsqs.3.num_levels"].fill_(5), r"fsqs\.3\.num_levels is \[5, 5, 5, 5\]"),
    ],
    ids=["non-causal", "unknown-key", "activation", "rates", "widths", "no-rate", "groups", "no-v", "no-g",
         "missing", "unexpected", "nan", "levels"],
)
def test_bad_checkpoints_fail_with_a_precise_message(codec_path: Path, tmp_path: Path, edit, message: str) -> None:
    path = _broken(edit)(codec_path, tmp_path)
    with pytest.raises(CodecFormatError, match=message):
        load_torch_decoder(path)


def test_missing_source_and_bad_dtype(tmp_path: Path) -> None:
    with pytest.raises(CodecNotFoundError, match="does not exist"):
        load_torch_decoder(tmp_path / "nowhere.nemo")
    not_a_tar = tmp_path / "codec.nemo"
    not_a_tar.write_bytes(b"not a tar")
    with pytest.raises(CodecFormatError, match="not a .nemo archive"):
        load_torch_decoder(not_a_tar)
    with pytest.raises(ValueError, match="dtype"):
        load_torch_decoder(not_a_tar, dtype=torch.float64)


def test_config_defaults_are_nemos() -> None:
    """DecoderConfig fills missing keys with CausalHiFiGANDecoder's own defaults (checked where NeMo is)."""
    module = pytest.importorskip("nemo.collections.tts.modules.audio_codec_modules")
    params = inspect.signature(module.CausalHiFiGANDecoder).parameters
    ours = DecoderConfig(input_dim=32)
    for name, param in params.items():
        if name == "input_dim":
            continue
        default = param.default
        assert getattr(ours, name) == (tuple(default) if isinstance(default, (list, tuple)) else default), name


def test_every_nemo_decoder_key_has_a_mapping(codec_path: Path) -> None:
    _, state = _read(codec_path)
    keys = [k.removeprefix("audio_decoder.") for k in state if k.startswith("audio_decoder.")]
    assert keys and all(map_key(k) is not None for k in keys)
    assert map_key("res_layers.1.res_blocks.2.res_blocks.0.skip_conv.conv.bias") == "stages.1.residual.chains.2.units.0.conv2.bias"


@pytest.mark.slow
def test_full_size_decoder_equals_nemos() -> None:
    """The published widths (864 channels, down to 27: an odd half-snake split), without writing 250 MB:
    NeMo's module built from the full config, its state dict loaded into the torch decoder."""
    from codec_worker import fsq
    from codec_worker._checkpoint import CodecConfig, build_modules
    from codec_worker.tiny import codec_config
    from codec_worker.torchcodec.decoder import CausalHiFiGANDecoder
    from codec_worker.torchcodec.weights import load_decoder_weights

    config = codec_config("full")
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        nemo = build_modules(CodecConfig.from_mapping(config, "<full>"), sections=("audio_decoder",))["audio_decoder"]
    nemo.eval()
    with torch.no_grad():  # quieter output, so the final clamp does not flatten the comparison
        nemo.post_conv.conv.parametrizations.weight.original0.mul_(1e-2)
    ours = CausalHiFiGANDecoder(DecoderConfig.from_mapping(config["audio_decoder"], "<full>"))
    load_decoder_weights(ours, {"audio_decoder." + k: v for k, v in nemo.state_dict().items()}, "<full>")
    latents = fsq.dequantize(random_codes(3, batch=2, seed=11))
    with torch.no_grad():
        want, _ = nemo(inputs=latents, input_len=torch.tensor([3, 2]))
        got = ours(latents, torch.tensor([3, 2]))
    assert ours.post_act.split == 13  # 27 channels at the end: 13 snake, 14 leaky ReLU
    assert 0.01 < float(want.abs().max()) < 1.0
    assert _max_diff(got, want) <= TOLERANCE


def test_every_torch_parameter_maps_back_to_its_nemo_key(torch_codec: TorchNanoCodec) -> None:
    paths = list(torch_codec._decoder.state_dict())
    assert paths and all(map_key(nemo_key(path, "half_snake")) == path for path in paths)
    assert nemo_key("post_act.alpha", "snake") == "post_activation.activation.alpha"


def test_random_decoder_codec_loads_into_nemos_decoder(tmp_path: Path) -> None:
    """The NeMo-free writer stores the decoder exactly as NeMo names it: NeMo's module loads it strictly
    and decodes what the torch decoder decodes."""
    from codec_worker import fsq
    from codec_worker._checkpoint import CodecConfig, build_modules, load_section, read_source

    path = write_random_decoder_codec(tmp_path / "random.nemo", size="tiny", seed=2)
    checkpoint = read_source(path)
    nemo = build_modules(CodecConfig.from_mapping(checkpoint.config, str(path)), sections=("audio_decoder",))["audio_decoder"]
    load_section(nemo, "audio_decoder", checkpoint.state_dict, str(path))
    nemo.eval()
    ours = load_torch_decoder(path)
    codes = random_codes(6, batch=2, seed=4)
    with torch.no_grad():
        want, _ = nemo(inputs=fsq.dequantize(codes), input_len=torch.tensor([6, 6]))
    got = ours.decode_codes(codes)
    assert 0.05 < float(got.pow(2).mean().sqrt()) < 0.2
    assert _max_diff(got, want) <= TOLERANCE
    with pytest.raises(CodecFormatError, match="missing tensor 'audio_encoder"):
        NanoCodec.load(path)  # decoder only: NeMo's full codec refuses it, naming what is missing
