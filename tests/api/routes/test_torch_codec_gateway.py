"""A gateway on the torch decoder (GEPARD_CODEC_IMPL=torch, no NeMo needed to decode): the same audio
as the NeMo-built codec for the same request, and cloning refused up front with 501, not failed late.
On CPU the torch decoder carries each stream's conv state by default (GEPARD_CODEC_CARRY_STATE), also
beside NeMo's encoder; NeMo's decoder decodes windowed only with that setting off."""

from __future__ import annotations

import asyncio
import logging

import httpx
import numpy as np
import torch
import pytest

from api.app import open_runtime
from api.settings import Settings
from codec_worker.errors import CodecLoadError
from tests.api.conftest import gateway_settings
from tests.api.live import LiveServer

CLIP = "tests/data/linda.wav"


def speech_body(voice_id: str) -> dict:
    return {"model_id": "sonic-3", "transcript": "Hello there. How are you today?", "voice": {"mode": "id", "id": voice_id},
            "output_format": {"container": "raw", "encoding": "pcm_f32le", "sample_rate": 22050}, "seed": 7}


@pytest.fixture(scope="module")
def torch_codec_gateway(tiny_ckpt_dir, tmp_path_factory):
    settings = gateway_settings(tiny_ckpt_dir, tmp_path_factory.mktemp("torch-codec"), codec_impl="torch")
    with LiveServer(settings) as server:
        yield server


@pytest.fixture(scope="module")
def nemo_windowed_gateway(tiny_ckpt_dir, tmp_path_factory):
    settings = gateway_settings(tiny_ckpt_dir, tmp_path_factory.mktemp("nemo-windowed"), codec_carry_state=False)
    with LiveServer(settings) as server:
        yield server


def test_the_torch_decoder_speaks_exactly_what_the_nemo_codec_speaks(gateway, torch_codec_gateway, nemo_windowed_gateway,
                                                                     default_voice_id):
    assert torch_codec_gateway.runtime.codec.impl == "torch" and gateway.runtime.codec.impl == "nemo"
    # NeMo's decoder, windowed; the torch decoder carrying state, alone and beside NeMo's encoder
    assert nemo_windowed_gateway.runtime.decoder._codec is nemo_windowed_gateway.runtime.codec
    assert not nemo_windowed_gateway.runtime.decoder.carries_state
    assert torch_codec_gateway.runtime.decoder.carries_state and gateway.runtime.decoder.carries_state
    assert gateway.runtime.decoder._codec.impl == "torch"
    # beside the torch decoder, NeMo's codec only encodes: its decoder is not kept
    assert not gateway.runtime.codec.can_decode and nemo_windowed_gateway.runtime.codec.can_decode
    replies = [httpx.post(server.url + "/tts/bytes", json=speech_body(default_voice_id), timeout=60)
               for server in (nemo_windowed_gateway, torch_codec_gateway, gateway)]
    assert [r.status_code for r in replies] == [200, 200, 200]
    windowed, carried, beside = (np.frombuffer(r.content, dtype="<f4") for r in replies)
    assert windowed.size > 0 and carried.shape == windowed.shape
    # the same samples, up to float32 rounding: the convs run on other lengths (new frames only)
    assert float(np.abs(carried - windowed).max()) <= 1e-5
    assert replies[2].content == replies[1].content  # the same decoder, with or without NeMo beside it


def test_cloning_is_refused_up_front_with_501(torch_codec_gateway):
    with open(CLIP, "rb") as clip:
        r = httpx.post(torch_codec_gateway.url + "/voices/clone", timeout=60,
                       files={"clip": ("linda.wav", clip, "audio/wav")}, data={"name": "x", "language": "en"})
    body = r.json()
    assert (r.status_code, body["error_code"]) == (501, "cloning_unavailable")
    assert "GEPARD_CODEC_IMPL=torch" in body["message"]


async def test_fused_activations_are_asked_for_and_refused_on_cpu(tiny_ckpt_dir, tmp_path, caplog):
    settings = gateway_settings(tiny_ckpt_dir, tmp_path / "data", codec_impl="torch", codec_fused_activations=True)
    with caplog.at_level(logging.WARNING, logger="codec_worker.nanocodec"):
        runtime = await open_runtime(settings)
    try:  # the gateway serves, its decoder's activations eager
        assert runtime.decoder._codec.fused_activations == 0
        assert "activations stay eager" in caplog.text and "Triton compiles for CUDA, not cpu" in caplog.text
    finally:
        await runtime.aclose()


async def test_fused_activations_reach_the_decoder_before_it_streams(tiny_ckpt_dir, tmp_path, triton_interpreter):
    """Where the kernel runs (here: Triton's interpreter on CPU), the decoder the gateway streams
    with has every snake activation fused; its audio is tests/codec_worker/test_fused_activations.py's."""
    settings = gateway_settings(tiny_ckpt_dir, tmp_path / "data", codec_impl="torch", codec_fused_activations=True)
    runtime = await open_runtime(settings)
    try:
        codec = runtime.decoder._codec
        assert codec.fused_activations == len(codec._snakes()) > 0 and runtime.decoder.carries_state
    finally:
        await runtime.aclose()


async def test_fused_engine_kernels_reach_the_fast_path_the_gateway_serves_with(tiny_ckpt_dir, tmp_path,
                                                                               interpreted_fused_ops):
    """GEPARD_TORCH_FUSED_KERNELS travels from the settings to the fast path's layers (here the
    kernels run in Triton's interpreter; tests/engine/backends/test_fused_ops.py checks their frames)."""
    settings = gateway_settings(tiny_ckpt_dir, tmp_path / "data", torch_path="fast", torch_fused_kernels=True)
    runtime = await open_runtime(settings)
    try:
        assert runtime.engine._generator.fused_kernels
    finally:
        await runtime.aclose()


def test_preloading_voices_needs_an_encoder(tiny_ckpt_dir, tmp_path):
    (tmp_path / "preload").mkdir()
    settings = gateway_settings(tiny_ckpt_dir, tmp_path / "data", codec_impl="torch", preload_dir=tmp_path / "preload")
    with pytest.raises(CodecLoadError, match="GEPARD_PRELOAD_DIR"):
        asyncio.run(open_runtime(settings))


def test_the_setting_takes_only_known_implementations():
    assert Settings.from_env({"GEPARD_CODEC_IMPL": "torch"}).codec_impl == "torch"
    with pytest.raises(ValueError, match="GEPARD_CODEC_IMPL"):
        Settings.from_env({"GEPARD_CODEC_IMPL": "onnx"})


def test_the_codec_compile_setting_compiles_the_torch_decoder_for_every_window_the_gateway_cuts(
        tiny_ckpt_dir, tmp_path, monkeypatch, caplog):
    """GEPARD_CODEC_COMPILE: the gateway compiles the torch decoder for its batching decoder's largest
    batch and widest window before serving (the compile itself is tested in
    tests/codec_worker/test_torch_decoder_compiled.py; here it fails, as without a C++ compiler, and
    the gateway must still decode)."""
    from codec_worker.torchcodec import TorchNanoCodec

    asked = []

    def no_compiler(self, max_batch, max_frames):
        asked.append((max_batch, max_frames))
        raise RuntimeError("InvalidCxxCompiler: No working C++ compiler found")

    monkeypatch.setattr(TorchNanoCodec, "compile", no_compiler)
    caplog.set_level("INFO", logger="codec_worker.nanocodec")
    settings = gateway_settings(tiny_ckpt_dir, tmp_path / "data", codec_impl="torch", codec_compile=True,
                                chunk_schedule=(2, 4, 8, 48))

    async def open_and_decode():
        rt = await open_runtime(settings)
        try:
            stream = rt.decoder.open_stream()
            pcm = await stream.push(torch.zeros(32, 3, dtype=torch.long))
            pcm = np.concatenate([pcm, await stream.finish()])
            await stream.aclose()
            return rt.decoder.max_batch, rt.codec.receptive_field_frames, rt.codec.compiled, pcm
        finally:
            await rt.aclose()

    max_batch, context, compiled, pcm = asyncio.run(open_and_decode())
    assert asked == [(max_batch, context + 48)] and not compiled
    assert pcm.shape == (3 * 1024,)
    assert "compiling the torch decoder failed (RuntimeError: InvalidCxxCompiler" in caplog.text
    assert Settings.from_env({"GEPARD_CODEC_COMPILE": "true"}).codec_compile
