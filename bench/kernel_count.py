"""Kernels one decode step of the torch fast path launches, eager and with GEPARD_TORCH_FUSED_KERNELS,
and one decode of the torch codec, eager and with GEPARD_CODEC_FUSED_ACTIVATIONS.

    python bench/kernel_count.py [--size tiny|full] [--batch 1] [--json OUT]

On a GPU a batch-1 step replayed as a CUDA graph is bound by its kernels running one after another
(~2 us each on the H200), not by its arithmetic, so their number is the step's cost model. This
counts them without a GPU: every aten op the step dispatches that launches a kernel (views and
allocations do not), and every fused Triton kernel it launches. Without CUDA the fused kernels run
in Triton's interpreter (this script sets TRITON_INTERPRET=1 before they are defined), whose own
tensor work is not counted. Per part: the step's inputs, one decoder layer, its end (final norm,
sampling, commit), and the whole step (inputs + layers x one layer + end); then a prefill of one
57-token prompt to its first frame (eager on a GPU by default: each launch also costs the host). The model's dtype is
float32 on CPU (the interpreter has no bf16); in bf16 the eager layer adds 18 casts, the fused one
none.

The codec's part counts one decode of one stream's 4 frames by a random codec of the same size
(the count does not depend on the frames): windowed (each chunk decodes its context again) and
carrying each stream's conv state (GEPARD_CODEC_CARRY_STATE), eager and with its Triton kernels
(the activations, each written into the padded input of the conv it feeds, and the state's reads
and records, which apply the activation too).
"""

from __future__ import annotations

import argparse
import collections
import importlib
import json
import os
import sys
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import torch  # noqa: E402
from torch.utils._python_dispatch import TorchDispatchMode, _disable_current_modes  # noqa: E402


class KernelCounter(TorchDispatchMode):
    """Counts, within its block, the aten ops that launch a kernel and the fused Triton kernels."""

    METADATA = {"view", "_unsafe_view", "reshape", "transpose", "t", "slice", "select", "unsqueeze", "squeeze",
                "expand", "detach", "split", "split_with_sizes", "chunk", "as_strided", "permute", "alias",
                "empty", "empty_like", "new_empty", "empty_strided"}
    #: module -> its Triton kernels (the modules are imported by the caller first: main imports them
    #: with the interpreter set)
    KERNELS = {
        "engine.backends.fused_ops": ("_rms_norm", "_attention_inputs", "_sigmoid_gate", "_silu_mul", "_embed_frames",
                                      "_decode_inputs", "_sample_heads", "_commit_frames"),
        "codec_worker.torchcodec.fused": ("_snake_then_leaky", "_extend_with_tail"),
    }

    def __init__(self) -> None:
        super().__init__()
        self.aten: collections.Counter = collections.Counter()
        self.kernels: collections.Counter = collections.Counter()  # Triton kernel -> its launches

    @property
    def triton(self) -> int:
        return sum(self.kernels.values())

    @property
    def total(self) -> int:
        return sum(self.aten.values()) + self.triton

    def _triton_kernels(self):
        for module, names in self.KERNELS.items():
            for name in names:
                kernel = getattr(importlib.import_module(module), name, None)
                if kernel is not None:  # none without Triton
                    yield name, kernel

    def __enter__(self):
        for name, kernel in self._triton_kernels():
            kernel.run = self._counted(name, kernel.run)  # an instance attribute over the class's method
        return super().__enter__()

    def __exit__(self, *exc):
        for _, kernel in self._triton_kernels():
            del kernel.run
        return super().__exit__(*exc)

    def _counted(self, name: str, run):
        def counted(*args, **kwargs):
            self.kernels[name] += 1
            with _disable_current_modes():  # the interpreter's own tensor work is no kernel of the step
                return run(*args, **kwargs)
        return counted

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func.overloadpacket.__name__ not in self.METADATA:
            self.aten[func.overloadpacket.__name__] += 1
        return func(*args, **(kwargs or {}))


@dataclass
class StepCount:
    fused: bool  # whether the generator ran the fused kernels (asked, and their start-up check passed)
    inputs: int
    layer: int
    end: int
    layers: int
    layer_aten: dict
    end_aten: dict

    @property
    def step(self) -> int:
        return self.inputs + self.layers * self.layer + self.end


def count_step(gen, batch: int = 1, span: int = 64) -> StepCount:
    """The launches of one decode step of FastGenerator ``gen`` for ``batch`` rows (padding rows:
    what they launch is what a request's do), by part."""
    step = gen.device_step
    tables = gen.tables(batch)
    layers = step.model.backbone.layers
    with torch.no_grad():
        with KernelCounter() as inputs:
            x, pos, rope, mask = step.start_decode(tables, span)
        with KernelCounter() as layer:
            x = step.decode_layer(layers[0], step.weights[0].qkv, step.weights[0].gate_up, x, rope, mask, tables.slot,
                                  pos, step.cache.keys[0], step.cache.values[0])
        with KernelCounter() as end:
            step.finish_decode(x, tables)
    step.clear()
    return StepCount(gen.fused_kernels, inputs.total, layer.total, end.total, len(layers), dict(layer.aten),
                     dict(end.aten))


def count_prefill(gen, tokens: int = 57) -> int:
    """The launches of an (eager) prefill of one ``tokens``-token prompt into slot 0, to its first
    frame: the engine's part of a lone stream's first audio. 57 tokens: bench/torch_fast.py's prompt."""
    from engine.backends.cuda_graphs import TableUpload
    from engine.backends.fast_step import HostRows, RowTables

    step, model = gen.device_step, gen.model
    device, scratch = model.device, gen.cache.scratch
    embeds = torch.randn(1, tokens, model.config.backbone.hidden_size, generator=torch.Generator().manual_seed(0))
    tables = RowTables.allocate(1, scratch, device)
    host = HostRows.padding(1, scratch)
    host.slot[0] = host.feed[0] = 0
    host.real[0] = host.commit[0] = True
    TableUpload(1, device)(tables, host)
    with torch.no_grad(), KernelCounter() as prefill:
        step.prefill(embeds.to(device=device, dtype=model.dtype), torch.tensor([tokens], device=device),
                     torch.tensor([0], device=device), tables)
    step.clear()
    return prefill.total


#: the codec's decodes counted: (name, its Triton kernels, whether it carries state)
CODEC_DECODES = (("windowed, eager", False, False), ("windowed, fused", True, False),
                 ("carrying state, eager", False, True), ("carrying state, fused", True, True))


def count_codec(size: str, device: torch.device, dtype: torch.dtype, frames: int = 4) -> dict[str, dict]:
    """The launches of one decode of one stream's ``frames`` frames by a random torch codec of
    ``size``, for each of CODEC_DECODES: {name: {"total", "triton", "aten": {op: launches},
    "kernels": {Triton kernel: launches}, "fused": whether its kernels passed their checks}}."""
    from codec_worker import fsq
    from codec_worker.torchcodec import load_torch_decoder
    from codec_worker.torchcodec.random import write_random_decoder_codec

    generator = torch.Generator().manual_seed(0)
    codes = torch.stack([torch.randint(0, level, (1, frames), generator=generator) for level in fsq.channel_levels()],
                        dim=1)  # [1, 32, frames], each channel within its FSQ levels
    counts: dict[str, dict] = {}
    with tempfile.TemporaryDirectory() as tmp:
        path = write_random_decoder_codec(Path(tmp) / "codec.nemo", size=size)
        for name, fused, stateful in CODEC_DECODES:
            codec = load_torch_decoder(path, device, dtype)
            if fused:
                codec.fuse_activations()  # raises where the kernels cannot run or compute something else
                codec.fuse_state()
            if stateful:
                codec.carry_state(1)
            with torch.no_grad(), KernelCounter() as counter:
                if stateful:
                    codec.decode_stateful(codes, [frames], [0], [True])
                else:
                    codec.decode_codes(codes, [frames])
            counts[name] = {"total": counter.total, "triton": counter.triton, "aten": dict(counter.aten),
                            "kernels": dict(counter.kernels), "fused": fused}
    return counts


def main(argv: list[str] | None = None) -> None:
    if not torch.cuda.is_available():  # before the kernels are defined (at import): they run interpreted
        os.environ.setdefault("TRITON_INTERPRET", "1")
    from bench._common import machine
    from bench.torch_fast import engine_checkpoint, engine_checkpoint_tiny
    importlib.import_module("codec_worker.torchcodec.fused")  # the codec's kernels defined now, as the engine's
    from engine.backends import fused_ops
    from engine.backends.torch_fast import FastGenerator
    from engine.model.gepard import GepardModel

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--size", default="full", help="random checkpoint size: tiny or full")
    p.add_argument("--batch", type=int, default=1, help="rows of the counted step (a batch bucket)")
    p.add_argument("--json", type=Path)
    args = p.parse_args(argv)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    checkpoint = engine_checkpoint_tiny() if args.size == "tiny" else engine_checkpoint(args.size)
    model = GepardModel.from_pretrained(checkpoint, device=device, dtype=dtype)
    print(f"machine: {machine()}\ncheckpoint: {args.size} ({dtype}, {device}); batch {args.batch}; Triton "
          f"{'interpreted' if fused_ops.interpreted() else 'compiled'}", flush=True)
    print(f"{'ops':>8} {'inputs':>7} {'layer':>6} {'x layers':>8} {'end':>5} {'step':>6} {'prefill':>8}", flush=True)
    counts, prefills = {}, {}
    for name, fused in (("eager", False), ("fused", True)):
        gen = FastGenerator(model, max_batch=args.batch, max_positions=128, cuda_graphs=False, fused_kernels=fused)
        c = counts[name] = count_step(gen, args.batch)
        prefills[name] = count_prefill(gen)
        label = name if c.fused == fused else f"{name} (fused kernels refused: see the log)"
        print(f"{label:>8} {c.inputs:7d} {c.layer:6d} {c.layers:8d} {c.end:5d} {c.step:6d} {prefills[name]:8d}", flush=True)
    codec = count_codec(args.size, device, dtype)
    print(f"\ncodec ({args.size}), one decode of one stream's frames:\n{'decode':>22} {'kernels':>8} {'Triton':>7}", flush=True)
    for name, c in codec.items():
        print(f"{name:>22} {c['total']:8d} {c['triton']:7d}", flush=True)
    if args.json:
        args.json.write_text(json.dumps({"machine": machine(), "size": args.size, "dtype": str(dtype), "batch": args.batch,
                                         "counts": {k: {**asdict(v), "step": v.step, "prefill": prefills[k]}
                                                    for k, v in counts.items()},
                                         "codec": codec},
                                        indent=2))


if __name__ == "__main__":
    main()
