"""NanoCodec: load the NeMo checkpoint, decode codes to PCM, encode PCM to codes.

    codec = NanoCodec.load("nvidia/nemo-nano-codec-22khz-1.89kbps-21.5fps")  # or a .nemo / a directory
    audio = codec.decode_codes(codes)   # codes [B, 32, T] int64 -> audio [B, T*1024] float32
    codes = codec.encode(audio)         # audio [B, N] float32 @ 22050 Hz -> codes [B, 32, ceil(N/1024)]

A ``.nemo`` file is a tar holding ``model_config.yaml`` and ``model_weights.ckpt`` (a plain torch
state dict). ``nemo.collections.tts.models.AudioCodecModel`` cannot be imported here (missing
training dependencies), so the three modules inference needs (``audio_encoder``, ``audio_decoder``,
``vector_quantizer``) are built from the config by their ``_target_`` class, which must live in
``nemo.collections.tts.modules.audio_codec_modules``, and their subset of the state dict is loaded
strictly. Training-only tensors (``discriminator.*`` and the like) are ignored. Weight norm is
folded into plain weights after loading (same values, less work per call).

Codes are *unfolded* FSQ digits (channel ``4*g + d``, see ``codec_worker.fsq``). Outputs stay on the
codec's device; audio is always returned as float32.
"""

from __future__ import annotations

import importlib
import logging
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Mapping, Sequence

import numpy as np
import torch

from codec_worker import fsq
from codec_worker._checkpoint import (
    DEFAULT_HF_REPO,
    NEMO_MODULES,
    SUPPORTED_DTYPES,
    CodecConfig,
    build_modules,
    check_quantizer_buffers,
    class_default,
    fingerprint,
    fold_weight_norm,
    load_section,
    read_source,
)
from codec_worker.device_errors import device_lost, error_summary
from codec_worker.errors import CodecLoadError, DecodeUnavailableError, InvalidAudioError, InvalidCodesError

if TYPE_CHECKING:
    from codec_worker.torchcodec import TorchNanoCodec

logger = logging.getLogger(__name__)


def decoder_left_context_frames(decoder_cfg: Mapping[str, Any]) -> int:
    """Left receptive field of a CausalHiFiGANDecoder, in frames.

    A windowed decode of ``frames[w:end]`` reproduces the one-shot output exactly from frame
    ``w + L`` on, where L is what this returns. Walk back from the first output sample of a frame
    (index 0 at the output rate) through every layer, tracking the earliest input index it reads,
    in that layer's own sample rate:

    - causal conv, kernel k, dilation d:          i -= (k - 1) * d
    - residual layer (parallel kernel branches, each a chain over the dilations of
      conv(k, d) then conv(k, 1)):                i -= max_k sum_d (k - 1) * (d + 1)
    - causal transposed conv, stride s, kernel K = 2s, trimmed K - s on the right
      (input j feeds outputs j*s .. j*s + K - 1):  i = ceil((i - K + 1) / s)

    Order, from the output back: post_conv (out_kernel_size), then for each up-sample stage in
    reverse: its residual layer, its transposed conv; finally pre_conv (in_kernel_size). L = -i.
    Frame boundaries are multiples of every stage's stride, so the walk is the same for any frame.
    For the published config (kernels 7/3, residual kernels [3, 7, 11], dilations [1, 3, 5], rates
    [8, 8, 4, 2, 2]) this gives 25 frames (≈1.16 s of audio).
    """

    def get(key: str) -> Any:
        value = decoder_cfg.get(key)
        return class_default("audio_decoder", decoder_cfg, key) if value is None else value

    rates = list(get("up_sample_rates"))
    res_lookback = max(sum((k - 1) * (d + 1) for d in get("resblock_dilation_sizes")) for k in get("resblock_kernel_sizes"))
    index = -(get("out_kernel_size") - 1)
    for rate in reversed(rates):
        index -= res_lookback
        kernel = 2 * rate
        index = -((kernel - 1 - index) // rate)  # ceil((index - kernel + 1) / rate)
    index -= get("in_kernel_size") - 1
    return -index


# --------------------------------------------------------------------------------------------
# Input checks


def check_codes(codes: Any) -> None:
    if not isinstance(codes, torch.Tensor):
        raise InvalidCodesError(f"expected codes as a torch.Tensor [B, 32, T], got {type(codes).__name__}")
    if codes.dtype.is_floating_point or codes.dtype.is_complex or codes.dtype == torch.bool:
        raise InvalidCodesError(f"expected integer codes [B, 32, T], got dtype {codes.dtype}")
    if codes.dim() != 3 or codes.shape[1] != fsq.NUM_CHANNELS:
        raise InvalidCodesError(f"expected codes [B, {fsq.NUM_CHANNELS}, T], got shape {tuple(codes.shape)}")
    if codes.shape[0] == 0 or codes.shape[2] == 0:
        raise InvalidCodesError(f"expected at least one item and one frame, got shape {tuple(codes.shape)}")
    limits = torch.tensor(fsq.channel_levels(), device=codes.device).view(1, -1, 1)
    bad = (codes < 0) | (codes >= limits)
    if bool(bad.any()):
        item, channel, frame = (int(i) for i in bad.nonzero()[0])
        raise InvalidCodesError(
            f"code {int(codes[item, channel, frame])} out of range [0, {fsq.channel_levels()[channel]}) "
            f"at item {item}, channel {channel}, frame {frame} (codes shape {tuple(codes.shape)})"
        )


def check_lengths(
    lengths: Any, batch: int, limit: int, unit: str, device: torch.device, error: type[ValueError]
) -> torch.Tensor:
    """Lengths [B] as int64 on ``device``; each in [0, limit] ``unit``; else ``error``."""
    if lengths is None:
        return torch.full((batch,), limit, dtype=torch.long, device=device)
    values = lengths.detach().cpu().tolist() if isinstance(lengths, torch.Tensor) else lengths
    if isinstance(values, np.ndarray):
        values = values.tolist()
    if not isinstance(values, Sequence) or len(values) != batch or not all(isinstance(v, int) for v in values):
        raise error(f"expected lengths as {batch} ints (one per item), got {lengths!r}")
    for index, value in enumerate(values):
        if not 0 <= value <= limit:
            raise error(f"length {value} of item {index} is outside [0, {limit}] {unit}")
    return torch.tensor(values, dtype=torch.long, device=device)


# --------------------------------------------------------------------------------------------
# The codec


class DecodesLatents:
    """``decode_codes`` and ``decode_latents`` with their input checks, and the rates and context the
    streaming decoder reads, shared by NanoCodec (NeMo's decoder) and
    codec_worker.torchcodec.TorchNanoCodec (the same maths in plain torch): a subclass sets
    ``device``, ``dtype``, ``config`` and ``_receptive_field_frames`` and runs its decoder in ``_run_decoder``."""

    device: torch.device
    dtype: torch.dtype
    config: CodecConfig
    _receptive_field_frames: int
    can_decode = True

    @property
    def sample_rate_hz(self) -> int:
        return self.config.sample_rate_hz

    @property
    def samples_per_frame(self) -> int:
        return self.config.samples_per_frame

    @property
    def receptive_field_frames(self) -> int:
        """Left context (frames) a windowed decode needs to be exact; see decoder_left_context_frames."""
        return self._receptive_field_frames

    # The decode speed-ups start-up may have applied (for monitoring): none of them applies to NeMo's
    # decoder; codec_worker.torchcodec.TorchNanoCodec says which it runs
    @property
    def compiled(self) -> bool:
        return False

    @property
    def fused_activations(self) -> int:
        """How many activations run as one kernel each."""
        return 0

    @property
    def graph_shapes(self) -> list[tuple[int, int]]:
        """The (windows, frames) shapes decodes replay as CUDA graphs."""
        return []

    @torch.no_grad()
    def decode_codes(self, codes: torch.Tensor, lengths: Sequence[int] | torch.Tensor | None = None) -> torch.Tensor:
        """Unfolded codes [B, 32, T] int -> audio [B, T*samples_per_frame] float32 on the codec device.

        ``lengths`` [B] (frames, default T each): samples past ``lengths[b]*samples_per_frame`` are zero.
        """
        check_codes(codes)
        latents = fsq.dequantize(codes.to(self.device))  # [B, 32, T] float32 in [-1, 1]
        return self._decode(latents, lengths)

    @torch.no_grad()
    def decode_latents(self, latents: torch.Tensor, lengths: Sequence[int] | torch.Tensor | None = None) -> torch.Tensor:
        """Dequantized latents [B, 32, T] float -> audio [B, T*samples_per_frame] float32."""
        if not isinstance(latents, torch.Tensor) or not latents.dtype.is_floating_point:
            raise InvalidCodesError(f"expected float latents [B, 32, T], got {getattr(latents, 'dtype', type(latents))}")
        if latents.dim() != 3 or latents.shape[1] != fsq.NUM_CHANNELS or 0 in latents.shape:
            raise InvalidCodesError(f"expected latents [B, {fsq.NUM_CHANNELS}, T>0], got shape {tuple(latents.shape)}")
        if not bool(torch.isfinite(latents).all()):
            raise InvalidCodesError("latents hold NaN or infinite values")
        return self._decode(latents.to(self.device), lengths)

    def _decode(self, latents: torch.Tensor, lengths: Sequence[int] | torch.Tensor | None) -> torch.Tensor:
        batch, _, frames = latents.shape
        input_len = check_lengths(lengths, batch, frames, "frames", self.device, InvalidCodesError)
        return self._run_decoder(latents.to(self.dtype), input_len).float()

    def _run_decoder(self, latents: torch.Tensor, input_len: torch.Tensor) -> torch.Tensor:
        """Latents [B, 32, T] in ``dtype``, lengths [B] -> audio [B, T * samples_per_frame]."""
        raise NotImplementedError


class NanoCodec(DecodesLatents):
    """NeMo NanoCodec 22 kHz (1.89 kbps, 21.5 fps) for inference: decode codes, encode audio.

    Built by :meth:`load`. Every method runs under ``torch.no_grad`` with the modules in eval mode;
    concurrent calls from several threads are safe (nothing is mutated after loading).
    """

    impl = "nemo"  # built from NeMo's modules (codec_worker.torchcodec.TorchNanoCodec is "torch")
    can_encode = True

    def __init__(
        self,
        config: CodecConfig,
        modules: Mapping[str, torch.nn.Module],
        *,
        fingerprint: str,
        device: torch.device,
        dtype: torch.dtype,
        origin: str = "<memory>",
    ) -> None:
        self.config = config
        self.device = device
        self.dtype = dtype
        self.origin = origin
        self._encoder = modules["audio_encoder"]
        self._decoder = modules["audio_decoder"]
        self._quantizer = modules["vector_quantizer"]
        self._fingerprint = fingerprint
        self._receptive_field_frames = decoder_left_context_frames(config.audio_decoder)

    # ---- construction ------------------------------------------------------------------

    @classmethod
    def load(
        cls,
        source: str | Path = DEFAULT_HF_REPO,
        device: str | torch.device = "cpu",
        dtype: torch.dtype = torch.float32,
    ) -> NanoCodec:
        """Load from a ``.nemo`` file, a directory (config + weights, or one .nemo) or a HF repo id.

        Raises CodecNotFoundError when the source does not resolve, CodecFormatError when its
        contents do not match (the message names the file, key or tensor).
        """
        if dtype not in SUPPORTED_DTYPES:
            raise ValueError(f"dtype must be one of {SUPPORTED_DTYPES}, got {dtype}")
        device = torch.device(device)
        checkpoint = read_source(source)
        config = CodecConfig.from_mapping(checkpoint.config, checkpoint.origin)
        modules = build_modules(config)
        for section, module in modules.items():
            load_section(module, section, checkpoint.state_dict, checkpoint.origin)
        check_quantizer_buffers(modules["vector_quantizer"], checkpoint.origin)
        digest = fingerprint(config, checkpoint.state_dict)
        for section, module in modules.items():
            fold_weight_norm(module)
            # the quantizer holds only int buffers and runs in float32 whatever the codec dtype
            module.to(device=device, dtype=torch.float32 if section == "vector_quantizer" else dtype)
            module.eval()
            module.requires_grad_(False)
        logger.info(
            "codec loaded from %s on %s/%s (receptive field %d frames, fingerprint %s)",
            checkpoint.origin,
            device,
            dtype,
            decoder_left_context_frames(config.audio_decoder),
            digest[:12],
        )
        return cls(config, modules, fingerprint=digest, device=device, dtype=dtype, origin=checkpoint.origin)

    # ---- properties --------------------------------------------------------------------

    @property
    def fingerprint(self) -> str:
        """SHA-256 hex of the inference config and the encoder/decoder/quantizer tensors as stored.

        Independent of device and dtype; use it as a cache key for things derived from the codec.
        """
        return self._fingerprint

    # ---- decode (decode_codes / decode_latents: DecodesLatents) ------------------------

    @property
    def can_decode(self) -> bool:  # type: ignore[override]
        """False once ``release_decoder`` ran: the codec then only encodes."""
        return self._decoder is not None

    def release_decoder(self) -> None:
        """Drop NeMo's decoder (31.6M parameters at full size: 120 MiB in float32), so that this
        codec only encodes from now on: for where the torch decoder of the same checkpoint decodes
        beside it (``decoding_codec``), as the gateway's does. Decodes then raise
        DecodeUnavailableError."""
        self._decoder = None

    def _run_decoder(self, latents: torch.Tensor, input_len: torch.Tensor) -> torch.Tensor:
        if self._decoder is None:
            raise DecodeUnavailableError(
                "this NanoCodec's decoder was released (release_decoder): it only encodes; decode with the torch "
                "decoder that decodes beside it")
        audio, _ = self._decoder(inputs=latents, input_len=input_len)  # [B, 32, T] -> [B, T * samples_per_frame]
        return audio

    # ---- encode ------------------------------------------------------------------------

    @torch.no_grad()
    def encode(
        self, audio: torch.Tensor | np.ndarray, lengths: Sequence[int] | torch.Tensor | None = None
    ) -> torch.Tensor:
        """Audio [B, N] float @ sample_rate_hz -> unfolded codes [B, 32, ceil(N / samples_per_frame)] int64.

        As NeMo's AudioCodecModel.encode: zero-pads each item to whole frames, encodes, quantizes.
        ``lengths`` [B] (samples, default N each); frames past ``ceil(lengths[b] / samples_per_frame)``
        hold packed code 0 (all digits 0).
        """
        audio = self._check_audio(audio)
        batch, samples = audio.shape
        audio_len = check_lengths(lengths, batch, samples, "samples", self.device, InvalidAudioError)
        spf = self.samples_per_frame
        # 1) pad to whole frames: [B, N] -> [B, T * spf]
        frames = -(-samples // spf)
        padded = torch.nn.functional.pad(audio, (0, frames * spf - samples))
        padded_len = -(-audio_len // spf) * spf
        # 2) encode: [B, T * spf] -> [B, 32, T]
        encoded, encoded_len = self._encoder(audio=padded.to(self.dtype), audio_len=padded_len)
        # 3) quantize in float32: [B, 32, T] -> packed [8, B, T] -> [B, 8, T] -> unfolded [B, 32, T]
        packed = self._quantizer.encode(inputs=encoded.float(), input_len=encoded_len)
        return fsq.unfold(packed.permute(1, 0, 2).long())

    def _check_audio(self, audio: Any) -> torch.Tensor:
        if isinstance(audio, np.ndarray):
            audio = torch.from_numpy(np.ascontiguousarray(audio))
        if not isinstance(audio, torch.Tensor):
            raise InvalidAudioError(f"expected audio as a tensor or array [B, N], got {type(audio).__name__}")
        if not audio.dtype.is_floating_point:
            raise InvalidAudioError(f"expected float audio in [-1, 1], got dtype {audio.dtype}")
        if audio.dim() != 2 or 0 in audio.shape:
            raise InvalidAudioError(f"expected audio [B, N>0], got shape {tuple(audio.shape)}")
        if not bool(torch.isfinite(audio).all()):
            raise InvalidAudioError("audio holds NaN or infinite samples")
        return audio.to(device=self.device, dtype=torch.float32)


# --------------------------------------------------------------------------------------------
# Choosing the implementation

CODEC_IMPLS = ("auto", "nemo", "torch")


def nemo_available() -> tuple[bool, str]:
    """Whether NeMo's codec modules import here, and why not (the import is tried, not just found:
    a NeMo whose own dependencies are missing fails only then)."""
    try:
        importlib.import_module(NEMO_MODULES)
    except Exception as exc:  # ImportError, or a NeMo dependency failing at import
        return False, f"{type(exc).__name__}: {exc}"
    return True, ""


def load_codec(
    source: str | Path = DEFAULT_HF_REPO,
    device: str | torch.device = "cpu",
    dtype: torch.dtype = torch.float32,
    impl: str = "auto",
) -> NanoCodec | TorchNanoCodec:
    """Load the codec with NeMo's modules (``nemo``: decode + encode) or plain torch (``torch``: decode only).

    ``auto`` picks NeMo when its codec modules import, else the torch decoder, which produces the
    same audio (bit-identical in float32 on CPU) from the same checkpoint but cannot encode: its
    ``encode`` raises EncodeUnavailableError (``can_encode`` is False), so voice cloning needs NeMo.
    Both offer what BatchingCodecDecoder uses. ``nemo`` without NeMo raises CodecLoadError.
    """
    if impl not in CODEC_IMPLS:
        raise ValueError(f"codec impl must be one of {', '.join(CODEC_IMPLS)}, got {impl!r}")
    if impl == "auto":
        ok, why = nemo_available()
        impl = "nemo" if ok else "torch"
        if not ok:
            logger.info("NeMo's codec modules do not import (%s): torch decoder, decode only", why[:200])
    if impl == "torch":
        from codec_worker.torchcodec import load_torch_decoder

        return load_torch_decoder(source, device=device, dtype=dtype)
    return NanoCodec.load(source, device=device, dtype=dtype)


def compile_decoder(codec: NanoCodec | TorchNanoCodec, max_batch: int, max_frames: int) -> bool:
    """Compile the torch decoder for decodes of up to ``max_batch`` windows of ``max_frames`` frames
    (TorchNanoCodec.compile); whether it is compiled. NeMo's decoder syncs with the host inside (an
    ``.item()`` in its length masking), so it stays uncompiled, with a warning; a compile that fails
    (no C++ compiler, an Inductor or Triton error) is logged and the codec decodes uncompiled; a
    lost device (``device_errors.device_lost``) raises, since no decode would run uncompiled either."""
    if codec.impl != "torch":
        logger.warning("codec: compiling applies to the torch decoder only (GEPARD_CODEC_IMPL=torch); NeMo's "
                       "decoder runs uncompiled")
        return False
    started = time.perf_counter()
    try:
        count = codec.compile(max_batch, max_frames)
    except Exception as exc:
        if device_lost(exc):  # nothing would decode uncompiled either: the start fails
            raise
        logger.error("codec: compiling the torch decoder failed (%s); decoding uncompiled", error_summary(exc))
        return False
    logger.info("codec: compiled the torch decoder for up to %d windows of %d frames (%d shapes) in %.1f s",
                max_batch, max_frames, count, time.perf_counter() - started)
    return True


def decodes_better_with_torch(impl: str, loaded: NanoCodec | TorchNanoCodec, graphs: bool,
                              carry_state: bool = False) -> bool:
    """Whether to decode with the torch decoder of the same checkpoint beside a loaded NeMo codec
    (which still encodes, for cloning): with ``impl`` auto and NeMo's codec, where the torch decoder
    can do what NeMo's cannot. That is replaying CUDA graphs (NeMo's codec on CUDA, graphs on):
    NeMo's decoder runs eagerly (an ``.item()`` inside keeps it out of graphs), ~1,100 kernel
    launches a decode, and on an H200 a stream's first window took 7.3 ms replayed against 22.6 ms
    eager, first audio 33 ms against 75. And carrying each stream's conv state (``carry_state``),
    which only the torch decoder's convs take. The torch decoder gives the same audio
    (bit-identical in float32 on CPU)."""
    if impl != "auto" or loaded.impl != "nemo":
        return False
    return (loaded.device.type == "cuda" and graphs) or carry_state


def carries_state_by_default(device: torch.device, compiled: bool) -> bool:
    """GEPARD_CODEC_CARRY_STATE unset: on CPU, where it was measured (bench/torch_codec.py --carry),
    unless the decoder is compiled (compiling covers windowed decodes; stateful ones run eagerly).
    Off on CUDA until a GPU session has measured it."""
    return device.type == "cpu" and not compiled


def carry_decoder_state(codec: NanoCodec | TorchNanoCodec, slots: int) -> bool:
    """Give the torch decoder state slots for ``slots`` streams (TorchNanoCodec.carry_state), so a
    stream's chunks decode only their new frames; whether it now carries state. NeMo's decoder
    cannot (its convs pad by themselves): logged, and it decodes windowed."""
    if codec.impl != "torch":
        logger.info("codec: carrying conv state applies to the torch decoder only; NeMo's decoder re-decodes "
                    "%d frames of context per chunk", codec.receptive_field_frames)
        return False
    cache = codec.carry_state(slots)
    logger.info("codec: streams carry the decoder's conv state: %d slots of %.2f MB on %s (%d frames of context "
                "no longer re-decoded per chunk)", slots, cache.bytes_per_slot / 1e6, codec.device,
                codec.receptive_field_frames)
    return True


def decoding_codec(loaded: NanoCodec | TorchNanoCodec, source: str | Path, impl: str,
                   graphs: bool, carry_state: bool = False) -> NanoCodec | TorchNanoCodec:
    """The codec that decodes beside ``loaded`` (which encodes): the torch decoder of ``source``
    where ``decodes_better_with_torch`` says so, else ``loaded`` itself. A torch decoder that does
    not load (a decoder layout it does not know) is logged, and NeMo's decoder decodes as before:
    the server starts as it did without this choice."""
    if not decodes_better_with_torch(impl, loaded, graphs, carry_state):
        return loaded
    try:
        return load_codec(source, device=loaded.device, dtype=loaded.dtype, impl="torch")
    except CodecLoadError as exc:
        logger.warning("codec: the torch decoder did not load beside NeMo's codec (%s); NeMo's decoder decodes, "
                       "eagerly", error_summary(exc))
        return loaded


def stream_decoding_codec(loaded: NanoCodec | TorchNanoCodec, source: str | Path, impl: str, *, graphs: bool,
                          carry_state: bool | None, compiled: bool, slots: int) -> tuple[NanoCodec | TorchNanoCodec, bool]:
    """The codec streams decode with beside ``loaded`` (``decoding_codec``), given state slots for
    ``slots`` streams where it carries their conv state (``carry_decoder_state``); and whether it
    does. ``carry_state`` None (GEPARD_CODEC_CARRY_STATE unset): ``carries_state_by_default``."""
    carry = carries_state_by_default(loaded.device, compiled) if carry_state is None else carry_state
    decoding = decoding_codec(loaded, source, impl, graphs, carry)
    return decoding, carry and carry_decoder_state(decoding, slots)


def fuses_activations_by_default(device: torch.device, compiled: bool) -> bool:
    """GEPARD_CODEC_FUSED_ACTIVATIONS unset: on CUDA, where the Triton kernel runs, unless the
    decoder is compiled (Inductor fuses the activations itself)."""
    return device.type == "cuda" and not compiled


def fuse_decoder_activations(codec: NanoCodec | TorchNanoCodec, fused: bool | None, compiled: bool) -> bool:
    """Run the torch decoder's snake activations as one Triton kernel each, written into the padded
    input of the conv each feeds (TorchNanoCodec.fuse_activations), and its carried conv state's
    reads and records as one per conv, which then applies the conv's activation too
    (TorchNanoCodec.fuse_state, for streams that carry state); whether the activations now
    run fused. ``fused`` None (GEPARD_CODEC_FUSED_ACTIVATIONS unset): ``fuses_activations_by_default``.
    Before compiling or capturing graphs. NeMo's decoder, a device Triton does not compile for and
    a kernel that fails its check leave the activations (or the state) eager, logged (a warning
    where the setting asked for it); a lost device raises (``device_errors.device_lost``)."""
    wanted = fuses_activations_by_default(codec.device, compiled) if fused is None else fused
    if not wanted:
        return False
    say = logger.warning if fused else logger.info
    if codec.impl != "torch":
        say("codec: fused activations apply to the torch decoder only (GEPARD_CODEC_IMPL=torch, or auto with CUDA "
            "graphs or carried state); NeMo's decoder runs its activations eagerly")
        return False
    if codec.state_cache is not None:  # the streams' conv state, read and recorded by one kernel per conv
        fused_state = _checked_fusion(codec.fuse_state, "codec: the carried conv state stays eager (five kernels a conv)",
                                      say)
        if fused_state is not None:
            logger.info("codec: the carried state of %d convs is read and recorded by one Triton kernel each (checked "
                        "in %.1f s)", *fused_state)
    fused_activations = _checked_fusion(codec.fuse_activations, "codec: the decoder's activations stay eager", say)
    if fused_activations is None:
        return False
    if fused_activations[0] == 0:  # activation lrelu or elu: already one kernel each
        logger.info("codec: the decoder has no snake activation; nothing to fuse")
        return False
    logger.info("codec: %d snake activations run as one Triton kernel each, which also pads the conv it feeds "
                "(checked in %.1f s)", *fused_activations)
    return True


def _checked_fusion(fuse: Callable[[], int], refused: str, say: Callable[..., None]) -> tuple[int, float] | None:
    """Run one of TorchNanoCodec's fusions (it checks its kernel against the eager ops first): what
    it counts and the seconds it took, or None where it raised, said as ``refused: <why>``."""
    started = time.perf_counter()
    try:
        count = fuse()
    except Exception as exc:
        if device_lost(exc):  # the eager activations would fail as well: the start fails
            raise
        say("%s: %s", refused, error_summary(exc))
        return None
    return count, time.perf_counter() - started


def capture_decoder_graphs(codec: NanoCodec | TorchNanoCodec, max_batch: int, max_frames: int,
                           max_chunk_frames: int = 0) -> bool:
    """Capture the torch decoder on CUDA as CUDA graphs for decodes of up to ``max_batch`` windows
    of ``max_frames`` frames (TorchNanoCodec.capture_graphs); whether it now replays them. NeMo's
    decoder syncs with the host inside (see ``compile_decoder``) and a CPU codec has nothing to
    capture: both stay as they are (logged). A capture that fails is logged, and the codec decodes
    as before; one that lost the device (``device_errors.device_lost``, not a refused capture)
    raises. ``max_chunk_frames``: the stateful decodes too, where the codec carries state."""
    if codec.impl != "torch":
        logger.info("codec: CUDA graphs apply to the torch decoder only (GEPARD_CODEC_IMPL=torch); NeMo's decoder "
                    "runs eagerly")
        return False
    if codec.device.type != "cuda":
        logger.debug("codec: on %s, no CUDA graphs to capture", codec.device)
        return False
    started = time.perf_counter()
    try:
        count = codec.capture_graphs(max_batch, max_frames, max_chunk_frames=max_chunk_frames)
    except Exception as exc:
        if device_lost(exc):  # not a refused capture: no eager decode would run either, the start fails
            raise
        logger.error("codec: capturing the torch decoder as CUDA graphs failed (%s); decoding eagerly",
                     error_summary(exc))
        return False
    logger.info("codec: captured the torch decoder as CUDA graphs for up to %d windows of %d frames (%d shapes) in %.1f s",
                max_batch, max_frames, count, time.perf_counter() - started)
    return True


__all__ = [
    "CODEC_IMPLS",
    "CodecConfig",
    "DEFAULT_HF_REPO",
    "NanoCodec",
    "capture_decoder_graphs",
    "carries_state_by_default",
    "carry_decoder_state",
    "fuse_decoder_activations",
    "fuses_activations_by_default",
    "decodes_better_with_torch",
    "decoding_codec",
    "stream_decoding_codec",
    "compile_decoder",
    "decoder_left_context_frames",
    "load_codec",
    "nemo_available",
]
