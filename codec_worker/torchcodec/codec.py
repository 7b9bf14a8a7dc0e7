"""NanoCodec decode-only, in plain torch: the same checkpoint, the same audio, no NeMo.

    codec = load_torch_decoder("codec.nemo", device="cuda", dtype=torch.bfloat16)  # or a directory
    audio = codec.decode_codes(codes)   # codes [B, 32, T] int64 -> audio [B, T*1024] float32
    codec.carry_state(slots=64)         # streams may then decode chunk by chunk with no context:
    audio = codec.decode_stateful(codes, lengths, slots, fresh)   # (torchcodec.state)
    codec.fuse_activations()            # CUDA: each snake activation, the sum it reads and the padding
                                        # of the conv it feeds one Triton kernel (torchcodec.fused)

It offers what the streaming and batching decoders use from ``NanoCodec`` (``decode_codes``,
``decode_latents``, ``sample_rate_hz``, ``samples_per_frame``, ``receptive_field_frames``,
``fingerprint``, ``device``, ``dtype``), so ``BatchingCodecDecoder`` runs on it unchanged. It cannot
encode (the encoder and FSQ quantiser stay NeMo's): ``encode`` raises EncodeUnavailableError, so
voice cloning needs NeMo. Reading the ``.nemo`` needs only torch and PyYAML.
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Mapping, Optional, Sequence

import numpy as np
import torch
import torch.nn.functional as F

from codec_worker import fsq
from codec_worker._checkpoint import (
    CONFIG_NAME,
    SUPPORTED_DTYPES,
    Checkpoint,
    CodecConfig,
    fingerprint,
    read_source,
)
from codec_worker.device_errors import device_lost, error_summary
from codec_worker.errors import CodecFormatError, EncodeUnavailableError, InvalidCodesError
from codec_worker.nanocodec import DecodesLatents, check_codes, check_lengths, decoder_left_context_frames
from codec_worker.torchcodec.decoder import CausalHiFiGANDecoder, DecoderConfig
from codec_worker.torchcodec.layers import (
    ActivationKernel,
    HalfSnake,
    Snake,
    past_rounding,
    probe_input,
    snake_then_leaky,
)
from codec_worker.torchcodec.state import ConvStateCache, ExtendKernel, check_extend_kernel, check_slots
from codec_worker.torchcodec.weights import load_decoder_weights

logger = logging.getLogger(__name__)


def _codec_config(raw: Any, origin: str) -> tuple[CodecConfig, DecoderConfig]:
    """The parts of model_config.yaml decoding needs, checked without NeMo; CodecFormatError names the key."""
    if not isinstance(raw, Mapping):
        raise CodecFormatError(f"{origin}: {CONFIG_NAME} is not a mapping (got {type(raw).__name__})")
    for key in ("sample_rate", "samples_per_frame", "audio_decoder"):
        if key not in raw:
            raise CodecFormatError(f"{origin}: {CONFIG_NAME} has no '{key}' key")
    for key in ("sample_rate", "samples_per_frame"):
        if not isinstance(raw[key], int) or isinstance(raw[key], bool) or raw[key] <= 0:
            raise CodecFormatError(f"{origin}: {CONFIG_NAME} '{key}' must be a positive int, got {raw[key]!r}")
    sections = {}
    for section in ("audio_encoder", "audio_decoder", "vector_quantizer"):
        value = raw.get(section, {})
        if not isinstance(value, Mapping):
            raise CodecFormatError(f"{origin}: {CONFIG_NAME} '{section}' must be a mapping, got {type(value).__name__}")
        sections[section] = dict(value)
    decoder = DecoderConfig.from_mapping(sections["audio_decoder"], origin)
    if decoder.samples_per_frame != raw["samples_per_frame"]:
        raise CodecFormatError(
            f"{origin}: audio_decoder.up_sample_rates {list(decoder.up_sample_rates)} multiply to "
            f"{decoder.samples_per_frame}, expected samples_per_frame {raw['samples_per_frame']}"
        )
    if decoder.input_dim != fsq.NUM_CHANNELS:
        raise CodecFormatError(f"{origin}: audio_decoder.input_dim is {decoder.input_dim}, expected {fsq.NUM_CHANNELS}")
    quantizer = sections["vector_quantizer"]
    groups, levels = quantizer.get("num_groups"), quantizer.get("num_levels_per_group")
    if groups != fsq.NUM_GROUPS or list(levels or ()) != list(fsq.FSQ_LEVELS):
        raise CodecFormatError(
            f"{origin}: vector_quantizer has num_groups={groups}, num_levels_per_group={levels}; "
            f"only {fsq.NUM_GROUPS} groups of {list(fsq.FSQ_LEVELS)} (32 channels) are supported"
        )
    # built directly (not CodecConfig.from_mapping, whose checks may ask NeMo for class defaults),
    # so the fingerprint is the one NanoCodec computes for the same checkpoint
    config = CodecConfig(
        sample_rate_hz=raw["sample_rate"],
        samples_per_frame=raw["samples_per_frame"],
        audio_encoder=sections["audio_encoder"],
        audio_decoder=sections["audio_decoder"],
        vector_quantizer=quantizer,
        origin=origin,
    )
    return config, decoder


def _check_stored_levels(state_dict: Mapping[str, Any], origin: str) -> None:
    """Stored FSQ levels (``vector_quantizer.fsqs.i.num_levels``), where present, must be codec_worker.fsq's."""
    for index in range(fsq.NUM_GROUPS):
        key = f"vector_quantizer.fsqs.{index}.num_levels"
        stored = state_dict.get(key)
        if isinstance(stored, torch.Tensor):
            levels = stored.reshape(-1).to(torch.int64).tolist()
            if levels != list(fsq.FSQ_LEVELS):
                raise CodecFormatError(f"{origin}: {key} is {levels}, expected {list(fsq.FSQ_LEVELS)}")


def padded_size(n: int) -> int:
    """The power of two a compiled decode pads ``n`` (windows or frames) up to."""
    return 1 << max(n - 1, 0).bit_length()


def padded_sizes(limit: int) -> list[int]:
    """Every padded size up to ``padded_size(limit)``: 1, 2, 4, ..."""
    return [1 << i for i in range(padded_size(limit).bit_length())]


Capture = Callable[[Callable[[], None]], Callable[[], None]]  # body -> replay


def cuda_graph_capture(device: torch.device) -> Capture:
    """Capture a body as a CUDA graph, all graphs in one memory pool (they replay one at a time,
    under DecoderGraphs' lock). The body first runs once on a side stream, uncaptured: cuDNN picks
    its algorithms and allocates its workspace there, which a capture may not do."""
    pool = torch.cuda.graph_pool_handle()

    def capture(body: Callable[[], None]) -> Callable[[], None]:
        side = torch.cuda.Stream(device=device)
        side.wait_stream(torch.cuda.current_stream(device))
        with torch.cuda.stream(side):
            body()
        torch.cuda.current_stream(device).wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        # thread_local: the engine's thread launching its own work meanwhile does not spoil the capture
        with torch.cuda.graph(graph, pool=pool, capture_error_mode="thread_local"):
            body()
        return graph.replay

    return capture


#: The decoder as DecoderGraphs captures it: (latents, lengths, slots, fresh) -> audio, where slots
#: and fresh are None for windowed decodes and [rows] tensors for decodes that carry state.
DecoderRun = Callable[[torch.Tensor, torch.Tensor, Optional[torch.Tensor], Optional[torch.Tensor]], torch.Tensor]


@dataclass
class _CapturedShape:
    latents: torch.Tensor  # [rows, 32, width]: the graph's input, written before each replay
    lengths: torch.Tensor  # [rows] int64
    audio: torch.Tensor  # [rows, width * spf]: the graph's output, written by each replay
    replay: Callable[[], None]
    slots: Optional[torch.Tensor] = None  # [rows] int64 (stateful graphs): each row's state slot
    fresh: Optional[torch.Tensor] = None  # [rows] bool (stateful graphs): rows that start their stream


class DecoderGraphs:
    """The decoder captured once per padded shape (``padded_size`` of windows and of frames, up to
    the limits given), then replayed. Eager, a full-size decode is ~1,100 small kernels whatever its
    length, launched one by one from Python: on an H200 one window took 23-52 ms of host time (two
    machines) for a few ms of GPU work, in every stream's time to first audio and in the gateway's decode budget. A
    replay launches them all at once.

    A decode copies its latents into the shape's input (right-padded: the decoder is causal, so the
    padding changes no real sample; padding rows get length 0), replays, and returns a copy of the
    output's real part. One lock orders decodes: every shape's input and output are reused, and
    the graphs share one memory pool. ``capture`` is how a body becomes a replay (CUDA:
    ``cuda_graph_capture``; the CPU tests pass one that runs the body, for the logic around it).

    With ``state`` (a ConvStateCache) every shape also takes each row's slot and whether it starts
    its stream: the graph reads and writes the rows' conv tails in the cache's fixed buffers
    (padding rows use its scratch slot). ``lock``: shared by DecoderGraphs whose graphs share a
    memory pool (default: a lock of its own)."""

    def __init__(self, run: DecoderRun, samples_per_frame: int, device: torch.device, dtype: torch.dtype,
                 capture: Capture, state: Optional[ConvStateCache] = None,
                 lock: Optional[threading.Lock] = None) -> None:
        self._run = run
        self._spf = samples_per_frame
        self._device, self._dtype = device, dtype
        self._capture = capture
        self._state = state
        self._shapes: dict[tuple[int, int], _CapturedShape] = {}
        self._lock = lock if lock is not None else threading.Lock()

    @property
    def shapes(self) -> list[tuple[int, int]]:
        return sorted(self._shapes)

    def capture_all(self, max_batch: int, max_frames: int) -> int:
        """Capture every padded shape up to ``max_batch`` windows of ``max_frames`` frames; how many."""
        for rows in padded_sizes(max_batch):
            for width in padded_sizes(max_frames):
                self._capture_shape(rows, width)
        return len(self._shapes)

    def _capture_shape(self, rows: int, width: int) -> None:
        latents = torch.zeros(rows, fsq.NUM_CHANNELS, width, device=self._device, dtype=self._dtype)
        lengths = torch.full((rows,), width, dtype=torch.long, device=self._device)
        audio = torch.zeros(rows, width * self._spf, device=self._device, dtype=self._dtype)
        slots = fresh = None
        if self._state is not None:  # the capture itself runs the body: on the scratch slot, which nothing reads
            slots = torch.full((rows,), self._state.scratch, dtype=torch.long, device=self._device)
            fresh = torch.ones(rows, dtype=torch.bool, device=self._device)

        def body() -> None:  # into a buffer made before the capture, which each replay writes
            audio.copy_(self._run(latents, lengths, slots, fresh))

        with torch.no_grad():
            replay = self._capture(body)
        self._shapes[(rows, width)] = _CapturedShape(latents, lengths, audio, replay, slots, fresh)

    def decode(self, latents: torch.Tensor, input_len: torch.Tensor, slots: Optional[torch.Tensor] = None,
               fresh: Optional[torch.Tensor] = None) -> Optional[torch.Tensor]:
        """Audio [B, T * spf] of latents [B, 32, T] (stateful graphs: rows ``slots`` [B], ``fresh``
        [B]); None when no captured shape holds them."""
        batch, _, frames = latents.shape
        shape = self._shapes.get((padded_size(batch), padded_size(frames)))
        if shape is None:
            return None
        with self._lock:
            shape.latents.zero_()
            shape.latents[:batch, :, :frames] = latents
            shape.lengths.zero_()
            shape.lengths[:batch] = input_len
            if shape.slots is not None and shape.fresh is not None and self._state is not None:
                shape.slots.fill_(self._state.scratch)  # padding rows: length 0, scratch slot
                shape.slots[:batch] = slots
                shape.fresh.fill_(True)
                shape.fresh[:batch] = fresh
            shape.replay()
            return shape.audio[:batch, : frames * self._spf].clone()


class TorchNanoCodec(DecodesLatents):
    """NanoCodec's decoder in plain torch (decode only). Built by :func:`load_torch_decoder`.

    Calls run under ``torch.inference_mode``; concurrent calls from several threads are safe
    (windowed decodes mutate nothing after loading; stateful ones write their streams' slots of the
    state cache under a lock).
    """

    impl = "torch"
    can_encode = False

    def __init__(
        self,
        config: CodecConfig,
        decoder: CausalHiFiGANDecoder,
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
        self._decoder = decoder
        self._compiled: Callable[..., torch.Tensor] | None = None  # the decoder through torch.compile (``compile``)
        self._compiled_limits = (0, 0)  # (batch, frames): the largest padded shape compiled
        self._graphs: DecoderGraphs | None = None  # the decoder as CUDA graphs (``capture_graphs``)
        self._state: ConvStateCache | None = None  # conv tails of streams that carry state (``carry_state``)
        self._state_kernel: ExtendKernel | None = None  # their reads and records as one kernel (``fuse_state``)
        self._state_graphs: DecoderGraphs | None = None  # stateful decodes as CUDA graphs
        self._state_lock = threading.Lock()  # eager stateful decodes: one at a time reads and writes the tails
        self._fingerprint = fingerprint
        self._receptive_field_frames = decoder_left_context_frames(decoder.config.as_mapping())

    @property
    def fingerprint(self) -> str:
        """The same SHA-256 NanoCodec reports for this checkpoint (config + stored tensors)."""
        return self._fingerprint

    @property
    def compiled(self) -> bool:
        return self._compiled is not None

    @property
    def fused_activations(self) -> int:
        """How many of the decoder's activations run as one kernel each (``fuse_activations``)."""
        return sum(1 for m in self._snakes() if m.kernel is not None)

    def _snakes(self) -> list[Snake]:
        return [m for m in self._decoder.modules() if isinstance(m, Snake)]  # a HalfSnake is one

    def fuse_activations(self, kernel: Optional[ActivationKernel] = None) -> int:
        """Run each snake activation as one kernel instead of its ten eager ops and the padding of
        the conv it feeds (default: the Triton kernel of codec_worker.torchcodec.fused; with fused
        carried state, ``fuse_state``, that kernel applies it instead), and leave every residual
        sum and mean to the kernel of the activation that reads it (CausalHiFiGANDecoder.fold_sums);
        how many activations it now runs so (0: the decoder has no snake activation, and nothing
        changes). Before ``compile`` (which fuses by itself) and ``capture_graphs``.

        The kernel is first run here, on an activation's inputs of this device and dtype as the
        decoder makes them (a strided tensor, padded and not; a residual unit's sum, which it must
        write out as the eager add does, bit for bit; a mean of three pairs), against the eager
        ops computed in float32: ValueError when it is off by more than its dtype's rounding, and
        whatever it raises when it cannot run (no Triton, not CUDA); the decoder is then left as
        it was. That run also compiles the kernel's variants, before any capture."""
        if kernel is None:
            from codec_worker.torchcodec import fused

            reason = fused.unavailable_reason(self.device)
            if reason:
                raise RuntimeError(f"the fused activations cannot run here: {reason}")
            kernel = fused.snake_then_leaky
        snakes = self._snakes()
        for module in {type(m): m for m in snakes}.values():  # one probe per kind: Snake splits at C, HalfSnake at C/2
            self._check_kernel(kernel, module)
        for module in snakes:
            module.kernel = kernel
        if snakes:
            self._decoder.fold_sums()
        return len(snakes)

    def _check_kernel(self, kernel: ActivationKernel, module: Snake) -> None:
        split = module.alpha.shape[1]
        channels = 2 * split + 1 if isinstance(module, HalfSnake) else split  # odd: the leaky half is the larger
        generator = torch.Generator().manual_seed(0)
        x = (3 * torch.randn(2, channels, 700, generator=generator)).to(self.device, self.dtype)
        # as an up-sample reads it (no pad) and a causal conv does (its zero padding in front); a
        # unit's first input is an up-sample's cut output, its later ones sums, a stage's the mean
        for form, pad in (("tensor", 0), ("tensor", 10), ("residual", 10), ("mean", 0)):
            probe = probe_input(x, form, generator)
            with torch.no_grad():
                want = F.pad(snake_then_leaky(probe.eager, module.alpha.float().cpu(), split), (pad, 0))
                got = kernel(probe.input, module.alpha, split, pad)  # in the codec's dtype: its rounding is allowed
            refused = f"the fused activation differs from the eager one on {self.device}/{self.dtype} ({form}, pad {pad}: "
            if got.shape != want.shape:
                raise ValueError(f"{refused}shape {tuple(got.shape)}, expected {tuple(want.shape)})")
            off = past_rounding(got, want, F.pad(probe.eager, (pad, 0)) if probe.summed else None)
            if bool(off.any()):
                worst = float((got.float().cpu() - want).abs().max())
                raise ValueError(f"{refused}max abs diff {worst:.3g}, {int(off.sum())} values past rounding)")
            if probe.kept is not None and not (probe.input.total is not None and torch.equal(probe.input.total, probe.kept)):
                raise ValueError(f"{refused}the sum it keeps for the residual is not the eager add's)")

    @property
    def graph_shapes(self) -> list[tuple[int, int]]:
        """The (windows, frames) shapes captured as CUDA graphs (``capture_graphs``); [] for none."""
        return self._graphs.shapes if self._graphs is not None else []

    @property
    def state_graph_shapes(self) -> list[tuple[int, int]]:
        """The (chunks, frames) shapes of stateful decodes captured as CUDA graphs; [] for none."""
        return self._state_graphs.shapes if self._state_graphs is not None else []

    @property
    def state_cache(self) -> ConvStateCache | None:
        """The streams' conv tails when ``carry_state`` ran, else None (windowed decodes only)."""
        return self._state

    def carry_state(self, slots: int) -> ConvStateCache:
        """Keep the conv tails of up to ``slots`` streams (torchcodec.state), so that a stream's chunks
        decode only their new frames (``decode_stateful``). Before ``capture_graphs``, which then
        captures the stateful decodes too."""
        if self._state is None or self._state.slots != slots:
            self._state = ConvStateCache(self._decoder, slots, self.device, self.dtype)
            self._state.kernel = self._state_kernel
        return self._state

    @property
    def fused_state(self) -> bool:
        """Whether carried state is read and recorded by one kernel per conv (``fuse_state``)."""
        return self._state_kernel is not None

    def fuse_state(self, kernel: Optional[ExtendKernel] = None) -> int:
        """Read and record the carried conv state (``carry_state``, now or later) with one kernel per
        conv instead of five eager ops, and commit it with one copy (default: the Triton kernel of
        codec_worker.torchcodec.fused); how many convs carry state. Before ``capture_graphs``.
        Where the activations are fused too (``fuse_activations``), the kernel applies each conv's
        activation as it reads the new samples.

        The kernel is first run here against the eager ops on every conv, on this device and dtype
        (torchcodec.state.check_extend_kernel): ValueError when anything differs (every value is a
        copy; activated, within rounding of the eager activation, and recorded as read), and whatever
        it raises when it cannot run (no Triton, not CUDA); the state is then read eagerly as
        before. That run also compiles the kernel's variants, before any capture."""
        if kernel is None:
            from codec_worker.torchcodec import fused

            reason = fused.unavailable_reason(self.device)
            if reason:
                raise RuntimeError(f"the fused state cannot run here: {reason}")
            kernel = fused.extend_with_tail
        convs = check_extend_kernel(kernel, self._decoder, self.device, self.dtype)
        self._state_kernel = kernel
        if self._state is not None:
            self._state.kernel = kernel
        return convs

    @torch.no_grad()
    def decode_stateful(self, codes: torch.Tensor, lengths: Sequence[int], slots: Sequence[int],
                        fresh: Sequence[bool]) -> torch.Tensor:
        """Each row continues its stream: codes [B, 32, T] (row b's ``lengths[b]`` new frames, right
        padded) -> audio [B, T * spf] float32, the samples those frames add to their stream's audio
        (past a row's length: 0). Row b's stream holds slot ``slots[b]``; ``fresh[b]``: its first
        chunk. Its tails are written only once the whole batch decoded, so a batch that fails can be
        decoded again. Needs ``carry_state``."""
        if self._state is None:
            raise RuntimeError("decode_stateful needs carry_state() first")
        check_codes(codes)
        batch, _, frames = codes.shape
        if not len(slots) == len(fresh) == batch:
            raise ValueError(f"expected {batch} slots and fresh flags, got {len(slots)} and {len(fresh)}")
        # a length past the frames would gather past a row's end (on CUDA: a device-side assert)
        input_len = check_lengths(lengths, batch, frames, "frames", self.device, InvalidCodesError)
        check_slots(slots, self._state)
        latents = fsq.dequantize(codes.to(self.device)).to(self.dtype)
        slot_rows = torch.tensor(list(slots), dtype=torch.long, device=self.device)
        fresh_rows = torch.tensor(list(fresh), dtype=torch.bool, device=self.device)
        if self._state_graphs is not None:
            audio = self._state_graphs.decode(latents, input_len, slot_rows, fresh_rows)
            if audio is not None:
                return audio.float()
        with self._state_lock:
            return self._run_stateful(latents, input_len, slot_rows, fresh_rows).float()

    def _run_stateful(self, latents: torch.Tensor, input_len: torch.Tensor, slots: Optional[torch.Tensor],
                      fresh: Optional[torch.Tensor]) -> torch.Tensor:
        assert self._state is not None and slots is not None and fresh is not None
        step = self._state.step(slots, input_len, fresh, latents.shape[-1])
        audio = self._decoder(latents, input_len, step)
        step.commit()
        return audio

    def _run_decoder(self, latents: torch.Tensor, input_len: torch.Tensor) -> torch.Tensor:
        if self._graphs is not None:
            audio = self._graphs.decode(latents, input_len)
            if audio is not None:
                return audio
        return self._run_padded(latents, input_len)

    def _run_padded(self, latents: torch.Tensor, input_len: torch.Tensor) -> torch.Tensor:
        """The decoder, compiled for shapes up to the compiled limits (padded to them), else eager."""
        batch, _, frames = latents.shape
        max_batch, max_frames = self._compiled_limits
        if self._compiled is None or batch > max_batch or frames > max_frames:
            return self._decoder(latents, input_len)  # uncompiled, or beyond the shapes compiled: eager
        rows, width = padded_size(batch), padded_size(frames)
        if (rows, width) != (batch, frames):  # right-padding: the decoder is causal, real samples stay as they are
            padded = latents.new_zeros(rows, latents.shape[1], width)
            padded[:batch, :, :frames] = latents
            lengths = input_len.new_zeros(rows)  # padding rows: length 0, all zeros out
            lengths[:batch] = input_len
            latents, input_len = padded, lengths
        return self._compiled(latents, input_len)[:batch, : frames * self.samples_per_frame]

    def compile(self, max_batch: int, max_frames: int, backend: str = "inductor") -> int:
        """Put the decoder through torch.compile (TorchInductor: Triton kernels on CUDA, C++ on CPU)
        and compile it now for every shape up to ``max_batch`` windows of ``max_frames`` frames, so no
        decode waits for a compile. Eager, a full-size decode launches about 1,100 kernels whatever
        its length (per convolution: the half-snake activation's element-wise ops and the causal
        padding); a short window, such as a stream's first chunk of 2 frames, is bound by those
        launches on a GPU, and fusing removes most of them.

        Batches and widths are padded to powers of two (``padded_size``): the compiled graphs are
        dynamic, but torch.compile guards each on ranges of sizes (a size of 1; the convolution
        algorithm the sizes select), and only decoding every padded shape once here shows which
        ranges serving will meet. Larger decodes run uncompiled. Returns the number of warm-up
        decodes. Raises what the compiler raises (no C++ compiler, an Inductor or Triton error);
        the codec then decodes as before. ``backend``: torch.compile's (the CPU tests use "eager":
        the same graphs and guards, run with PyTorch's kernels, since generating this network's
        kernels in C++ takes minutes on a small CPU)."""
        run = torch.compile(self._decoder.forward, dynamic=True, fullgraph=True, backend=backend)
        shapes = [(b, t) for b in padded_sizes(max_batch) for t in padded_sizes(max_frames)]
        with torch.no_grad():
            for b, t in shapes:
                run(torch.zeros(b, fsq.NUM_CHANNELS, t, device=self.device, dtype=self.dtype),
                    torch.full((b,), t, dtype=torch.long, device=self.device))
        self._compiled, self._compiled_limits = run, (padded_size(max_batch), padded_size(max_frames))
        return len(shapes)

    def capture_graphs(self, max_batch: int, max_frames: int, capture: Capture | None = None,
                       max_chunk_frames: int = 0) -> int:
        """Capture the decoder as CUDA graphs for every padded shape up to ``max_batch`` windows of
        ``max_frames`` frames (``DecoderGraphs``), compiled first if ``compile`` ran; larger decodes
        run as before. With ``carry_state`` done and ``max_chunk_frames``, the stateful decodes of up
        to ``max_batch`` chunks of that many frames too (eagerly: compiling covers windowed decodes).
        Returns the number of shapes. ``capture``: default ``cuda_graph_capture`` (a CUDA codec
        only). Raises what capturing the windowed decodes raises; the codec then decodes as before.
        Where only the stateful decodes fail to capture, that is logged and they run eagerly: the
        windowed graphs are kept (a stream's first window, in its time to first audio, replays);
        unless the device was lost (``device_errors.device_lost``), which raises."""
        if capture is None:
            if self.device.type != "cuda":
                raise ValueError(f"CUDA graphs need a CUDA device; this codec is on {self.device}")
            capture = cuda_graph_capture(self.device)
        one_at_a_time = threading.Lock()  # both kinds of graph share capture's memory pool
        graphs = DecoderGraphs(lambda latents, lengths, _slots, _fresh: self._run_padded(latents, lengths),
                               self.samples_per_frame, self.device, self.dtype, capture, lock=one_at_a_time)
        count = graphs.capture_all(max_batch, max_frames)
        kept_state_graphs: DecoderGraphs | None = None
        if self._state is not None and max_chunk_frames > 0:
            state_graphs = DecoderGraphs(self._run_stateful, self.samples_per_frame, self.device, self.dtype, capture,
                                         state=self._state, lock=one_at_a_time)
            try:
                count += state_graphs.capture_all(max_batch, max_chunk_frames)
            except Exception as exc:
                if device_lost(exc):
                    raise  # before anything is set: a codec whose start failed holds no graph of the lost context
                logger.error("codec: capturing the stateful decodes as CUDA graphs failed (%s); they run eagerly, "
                             "windowed decodes replay their %d graphs", error_summary(exc), count)
            else:
                kept_state_graphs = state_graphs
        self._graphs, self._state_graphs = graphs, kept_state_graphs
        return count

    def encode(self, audio: torch.Tensor | np.ndarray, lengths: Sequence[int] | torch.Tensor | None = None) -> torch.Tensor:
        raise EncodeUnavailableError(
            "this codec is the torch decoder (decode only, loaded without NeMo): encoding audio, e.g. a "
            "reference clip for voice cloning, needs NeMo's NanoCodec encoder; install nemo_toolkit "
            "(see run.sh) or load the codec with impl='nemo'"
        )


def load_torch_decoder(
    source: str | Path,
    device: str | torch.device = "cpu",
    dtype: torch.dtype = torch.float32,
) -> TorchNanoCodec:
    """Load the decoder of a NanoCodec ``.nemo`` file, a directory (config + weights, or one .nemo) or a HF id.

    Raises CodecNotFoundError when the source does not resolve, CodecFormatError when its config or
    decoder tensors do not match (the message names the key or tensor).
    """
    if dtype not in SUPPORTED_DTYPES:
        raise ValueError(f"dtype must be one of {SUPPORTED_DTYPES}, got {dtype}")
    device = torch.device(device)
    checkpoint: Checkpoint = read_source(source)
    config, decoder_config = _codec_config(checkpoint.config, checkpoint.origin)
    _check_stored_levels(checkpoint.state_dict, checkpoint.origin)
    decoder = CausalHiFiGANDecoder(decoder_config)
    load_decoder_weights(decoder, checkpoint.state_dict, checkpoint.origin)
    decoder.to(device=device, dtype=dtype).eval().requires_grad_(False)
    digest = fingerprint(config, checkpoint.state_dict)
    codec = TorchNanoCodec(config, decoder, fingerprint=digest, device=device, dtype=dtype, origin=checkpoint.origin)
    logger.info(
        "codec (torch decoder, decode only) loaded from %s on %s/%s (receptive field %d frames, fingerprint %s)",
        checkpoint.origin,
        device,
        dtype,
        codec.receptive_field_frames,
        digest[:12],
    )
    return codec


__all__ = ["DecoderGraphs", "TorchNanoCodec", "cuda_graph_capture", "load_torch_decoder"]
