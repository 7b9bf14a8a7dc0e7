"""The building blocks of NanoCodec's decoder, in plain torch: causal convs and the activations.

Every conv here holds a plain ``weight`` (weight norm is folded when the checkpoint is read, see
``codec_worker.torchcodec.weights``) and pads explicitly, so one block = one small forward.

    CausalConv1d(c_in, c_out, k, dilation)      [B, c_in, T] -> [B, c_out, T]   (left zero padding)
    CausalUpsample(c_in, c_out, stride, groups) [B, c_in, T] -> [B, c_out, T*stride]
    Snake(c) / HalfSnake(c) / LeakyReLU / ELU   activations, shapes unchanged; act(x, pad) puts
                                                ``pad`` zeros in front
    PendingSum(pairs, divisor)                  a residual add or the mean of the residual chains,
                                                left for the activation that reads it to compute

Every activation of the decoder feeds a conv, so a conv takes it as ``act``: conv(x, act=a) is
conv(a(x)), and a fused activation writes straight into the conv's padded input (or, with carried
state, the state kernel applies it), one kernel where the activation and the pad were two. Every
sum the decoder makes (a residual unit's ``x + y``, the mean of its chains) is read by an
activation next, so with the fused activations it is that activation's kernel that adds (and, for
a unit's input, which is its residual too, writes the sum out as it goes), one kernel where each
add and the division were one more.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable, Optional, Sequence, Union

import torch
import torch.nn.functional as F
from torch import nn

if TYPE_CHECKING:
    from codec_worker.torchcodec.state import DecodeStep

LEAKY_RELU_SLOPE = 0.01  # torch's default, which NeMo's codec activations use
SNAKE_EPS = 1e-9


class PendingSum:
    """``((a0 + b0) + (a1 + b1) + ...) / divisor``, not computed yet: a residual unit's output (one
    pair: its input and its last conv's output) or the mean of the residual chains (a pair each).

    Whoever reads it first computes it: ``value()`` with the decoder's own eager ops, in their
    order (so an eager decode is bit for bit what it was with the adds in place), or an
    activation's kernel as it activates it (codec_worker.torchcodec.fused), which writes the sum
    out too only where it is read again (``keep``: a unit's input is also its residual) and leaves
    it in ``total``. Made only once the activations are fused (CausalHiFiGANDecoder.fold_sums):
    eagerly it would hold every chain's pair until the mean, where the adds in place hold one
    running total."""

    __slots__ = ("pairs", "divisor", "keep", "total")

    def __init__(self, pairs: Sequence[tuple[torch.Tensor, torch.Tensor]], divisor: int = 1) -> None:
        if not pairs or divisor < 1:
            raise ValueError(f"a pending sum needs at least one pair and a divisor >= 1, got {len(pairs)} and {divisor}")
        self.pairs = tuple(pairs)
        self.divisor = divisor
        self.keep = False  # set by a reader that needs the sum itself afterwards
        self.total: Optional[torch.Tensor] = None  # the sum, once computed

    @property
    def shape(self) -> torch.Size:
        return self.pairs[0][1].shape

    def value(self) -> torch.Tensor:
        """The sum as the eager decoder computes it (once; the kernel that read it may have)."""
        if self.total is None:
            (a, b), *rest = self.pairs
            total = a + b
            for a, b in rest:
                total = total + (a + b)
            self.total = total / self.divisor if self.divisor > 1 else total
        return self.total


#: what a decoder layer's input may be: a tensor, or a sum its activation computes (PendingSum)
Input = Union[torch.Tensor, PendingSum]


def value_of(x: Input) -> torch.Tensor:
    return x.value() if isinstance(x, PendingSum) else x


class CausalConv1d(nn.Module):
    """Stride-1 conv that sees only the present and the past: zero-pad ``(k - 1) * dilation`` on the left."""

    def __init__(self, in_channels: int, out_channels: int, kernel_size: int, dilation: int = 1, groups: int = 1) -> None:
        super().__init__()
        self.dilation = dilation
        self.groups = groups
        self.left_pad = (kernel_size - 1) * dilation
        self.weight = nn.Parameter(torch.empty(out_channels, in_channels // groups, kernel_size))
        self.bias = nn.Parameter(torch.zeros(out_channels))

    def forward(self, x: Input, state: Optional[DecodeStep] = None, act: Optional[nn.Module] = None) -> torch.Tensor:
        """``state``: the stream's last inputs go in front instead of zeros (torchcodec.state).
        ``act``: the activation applied to ``x`` first, which pads (or is applied by the state)."""
        if state is not None:
            full = state.extend(self, x, act)
        elif act is not None:
            full = act(x, self.left_pad)
        else:
            full = F.pad(value_of(x), (self.left_pad, 0))
        return F.conv1d(full, self.weight, self.bias, dilation=self.dilation, groups=self.groups)


class CausalUpsample(nn.Module):
    """Transposed conv, kernel ``2 * stride``, whose output is cut to ``T * stride`` on the right.

    Input frame j writes outputs ``j*stride .. j*stride + 2*stride - 1``; dropping the last ``stride``
    outputs keeps only what is complete given inputs up to now, so output t depends on inputs
    j <= t // stride (causal). Its weight is [in, out / groups, kernel], as ConvTranspose1d stores it.
    """

    def __init__(self, in_channels: int, out_channels: int, stride: int, groups: int) -> None:
        super().__init__()
        self.stride = stride
        self.groups = groups
        self.weight = nn.Parameter(torch.empty(in_channels, out_channels // groups, 2 * stride))
        self.bias = nn.Parameter(torch.zeros(out_channels))

    def forward(self, x: Input, state: Optional[DecodeStep] = None, act: Optional[nn.Module] = None) -> torch.Tensor:
        """``state``: the stream's last input frame goes in front (torchcodec.state); its outputs, the
        first ``stride``, were emitted with the last chunk and are dropped again. ``act``: the
        activation applied to ``x`` first (by the state's kernel where it has one)."""
        frames = x.shape[-1]
        if state is None:
            out = F.conv_transpose1d(value_of(x) if act is None else act(x), self.weight, self.bias, stride=self.stride,
                                     groups=self.groups)
            return out[..., : frames * self.stride]
        out = F.conv_transpose1d(state.extend(self, x, act), self.weight, self.bias, stride=self.stride,
                                 groups=self.groups)
        return out[..., self.stride : (frames + 1) * self.stride]


def snake(x: torch.Tensor, alpha: torch.Tensor) -> torch.Tensor:
    """x + sin(alpha * x)^2 / alpha, alpha [1, C, 1] per channel (eps keeps alpha = 0 finite)."""
    return x + (alpha + SNAKE_EPS).reciprocal() * torch.sin(alpha * x).pow(2)


def snake_then_leaky(x: torch.Tensor, alpha: torch.Tensor, split: int) -> torch.Tensor:
    """``snake`` on channels < ``split`` (alpha [1, split, 1]), leaky ReLU on the rest, computed in
    place in one output: bit for bit the functional ops and ``torch.cat`` of the halves, without the
    concatenation's copy or a temporary per op (on the 2-core CPU 2-3x faster at full size)."""
    out = torch.empty_like(x)
    head, wave = x[:, :split], out[:, :split]
    wave.copy_(head).mul_(alpha).sin_().pow_(2).mul_((alpha + SNAKE_EPS).reciprocal()).add_(head)
    if split < x.shape[1]:
        F.leaky_relu_(out[:, split:].copy_(x[:, split:]), LEAKY_RELU_SLOPE)
    return out


def past_rounding(got: torch.Tensor, want: torch.Tensor, summed: Optional[torch.Tensor] = None) -> torch.Tensor:
    """Where a fused activation's ``got`` (any device, its dtype) is off the eager ``want``
    (float32, on CPU) by more than ``got``'s dtype rounds: a float32 sin may be approximate on a
    device, and bf16 rounds once, not once per op. ``summed``: the activation's input was a sum of
    several terms (float32, on CPU), which the kernel rounds once where the eager ops round at each
    add (a mean's division may round otherwise too): one more rounding of it, at most doubled by
    the activation (a snake's slope is within [0, 2]). What the codec's kernel checks allow."""
    eps = max(torch.finfo(got.dtype).eps, 1e-5)
    tolerance = eps * (1 + want.abs())
    if summed is not None:
        tolerance = tolerance + 2 * eps * summed.abs()
    return (got.float().cpu() - want).abs() > tolerance


@dataclass
class ProbeInput:
    """One form of input a fused kernel's check at start runs it on (``probe_input``)."""

    input: Input  # a PendingSum is computed once: one probe, one kernel run
    eager: torch.Tensor  # what the activation must be applied to, float32 on CPU
    summed: bool  # of several pairs: the kernel may round their sum otherwise (past_rounding's ``summed``)
    kept: Optional[torch.Tensor]  # the sum the kernel must write out, bit for bit: the eager add on the device


#: the forms of a layer's input, as the decoder feeds its activations: a tensor (an up-sample's
#: cut output: strided), a residual unit's sum (which its reader keeps as its residual too), the
#: mean of three chains' pairs
PROBE_FORMS = ("tensor", "residual", "mean")


def probe_input(x: torch.Tensor, form: str, generator: torch.Generator) -> ProbeInput:
    """``x`` [B, C, T] (any device and dtype) as ``form``, its other terms random."""
    def like() -> torch.Tensor:
        return (3 * torch.randn(x.shape, generator=generator)).to(x.device, x.dtype)

    if form == "tensor":
        wide = torch.cat([x, like()[..., :3]], dim=-1)  # a view with the row stride of a longer tensor
        return ProbeInput(wide[..., : x.shape[-1]], x.float().cpu(), False, None)
    if form == "residual":
        pending = PendingSum([(x, like())])
        pending.keep = True
        (a, b), = pending.pairs
        return ProbeInput(pending, (a + b).float().cpu(), False, a + b)
    if form == "mean":
        pairs = [(x, like()), (like(), like()), (like(), like())]
        total = sum(a.float().cpu() + b.float().cpu() for a, b in pairs) / len(pairs)
        return ProbeInput(PendingSum(pairs, divisor=len(pairs)), total, True, None)
    raise ValueError(f"unknown probe form {form!r}; expected one of {', '.join(PROBE_FORMS)}")


#: kernel(x, alpha, split, pad): what ``F.pad(snake_then_leaky(value_of(x), alpha, split), (pad,
#: 0))`` gives, as one kernel, x a tensor or a PendingSum (the kernel adds its terms, and leaves
#: the sum in its ``total`` where it ``keep``s it) (codec_worker.torchcodec.fused, set on the
#: activations by TorchNanoCodec.fuse_activations).
ActivationKernel = Callable[[Input, torch.Tensor, int, int], torch.Tensor]


def _padded(y: torch.Tensor, pad: int) -> torch.Tensor:
    return F.pad(y, (pad, 0)) if pad else y


class Snake(nn.Module):
    """Snake on every channel (split = channels). ``forward(x, pad)``: behind ``pad`` zeros."""

    def __init__(self, channels: int) -> None:
        super().__init__()
        self.alpha = nn.Parameter(torch.ones(1, channels, 1))
        self.kernel: Optional[ActivationKernel] = None  # fused: one kernel instead of the eager ops and the pad

    @property
    def split(self) -> int:
        return self.alpha.shape[1]

    def forward(self, x: Input, pad: int = 0) -> torch.Tensor:
        if self.kernel is not None:
            return self.kernel(x, self.alpha, self.split, pad)
        return _padded(snake_then_leaky(value_of(x), self.alpha, self.split), pad)


class HalfSnake(Snake):
    """Snake on the first ``channels // 2`` channels, leaky ReLU on the rest."""

    def __init__(self, channels: int) -> None:
        super().__init__(channels // 2)


class LeakyReLU(nn.Module):
    def forward(self, x: Input, pad: int = 0) -> torch.Tensor:
        return _padded(F.leaky_relu(value_of(x), LEAKY_RELU_SLOPE), pad)


class ELU(nn.Module):
    def forward(self, x: Input, pad: int = 0) -> torch.Tensor:
        return _padded(F.elu(value_of(x)), pad)


class Clamp(nn.Module):
    """Clip audio to [-1, 1]."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.clamp(x, -1.0, 1.0)


ACTIVATIONS = ("elu", "lrelu", "snake", "half_snake")
OUTPUT_ACTIVATIONS = ("tanh", "clamp")


def activation(name: str, channels: int) -> nn.Module:
    """The activation a NeMo codec config names (``activation: half_snake`` and the like)."""
    kind = name.lower()
    if kind == "elu":
        return ELU()
    if kind == "lrelu":
        return LeakyReLU()
    if kind == "snake":
        return Snake(channels)
    if kind == "half_snake":
        return HalfSnake(channels)
    raise ValueError(f"unknown activation {name!r}; expected one of {', '.join(ACTIVATIONS)}")


def output_activation(name: str) -> nn.Module:
    """Audio squashing at the very end: ``tanh`` or ``clamp`` to [-1, 1]."""
    if name == "tanh":
        return nn.Tanh()
    if name == "clamp":
        return Clamp()
    raise ValueError(f"unknown output_activation {name!r}; expected one of {', '.join(OUTPUT_ACTIVATIONS)}")


__all__ = [
    "ACTIVATIONS",
    "ActivationKernel",
    "CausalConv1d",
    "CausalUpsample",
    "Clamp",
    "HalfSnake",
    "Input",
    "OUTPUT_ACTIVATIONS",
    "PROBE_FORMS",
    "PendingSum",
    "ProbeInput",
    "Snake",
    "activation",
    "output_activation",
    "past_rounding",
    "probe_input",
    "snake",
    "snake_then_leaky",
    "value_of",
]
