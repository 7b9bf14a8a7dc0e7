"""The building blocks of NanoCodec's decoder, in plain torch: causal convs and the activations.

Every conv here holds a plain ``weight`` (weight norm is folded when the checkpoint is read, see
``codec_worker.torchcodec.weights``) and pads explicitly, so one block = one small forward.

    CausalConv1d(c_in, c_out, k, dilation)      [B, c_in, T] -> [B, c_out, T]   (left zero padding)
    CausalUpsample(c_in, c_out, stride, groups) [B, c_in, T] -> [B, c_out, T*stride]
    Snake(c) / HalfSnake(c) / LeakyReLU / ELU   activations, shapes unchanged; act(x, pad) puts
                                                ``pad`` zeros in front

Every activation of the decoder feeds a conv, so a conv takes it as ``act``: conv(x, act=a) is
conv(a(x)), and a fused activation writes straight into the conv's padded input (or, with carried
state, the state kernel applies it), one kernel where the activation and the pad were two.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Callable, Optional

import torch
import torch.nn.functional as F
from torch import nn

if TYPE_CHECKING:
    from codec_worker.torchcodec.state import DecodeStep

LEAKY_RELU_SLOPE = 0.01  # torch's default, which NeMo's codec activations use
SNAKE_EPS = 1e-9


class CausalConv1d(nn.Module):
    """Stride-1 conv that sees only the present and the past: zero-pad ``(k - 1) * dilation`` on the left."""

    def __init__(self, in_channels: int, out_channels: int, kernel_size: int, dilation: int = 1, groups: int = 1) -> None:
        super().__init__()
        self.dilation = dilation
        self.groups = groups
        self.left_pad = (kernel_size - 1) * dilation
        self.weight = nn.Parameter(torch.empty(out_channels, in_channels // groups, kernel_size))
        self.bias = nn.Parameter(torch.zeros(out_channels))

    def forward(self, x: torch.Tensor, state: Optional[DecodeStep] = None, act: Optional[nn.Module] = None) -> torch.Tensor:
        """``state``: the stream's last inputs go in front instead of zeros (torchcodec.state).
        ``act``: the activation applied to ``x`` first, which pads (or is applied by the state)."""
        if state is not None:
            full = state.extend(self, x, act)
        elif act is not None:
            full = act(x, self.left_pad)
        else:
            full = F.pad(x, (self.left_pad, 0))
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

    def forward(self, x: torch.Tensor, state: Optional[DecodeStep] = None, act: Optional[nn.Module] = None) -> torch.Tensor:
        """``state``: the stream's last input frame goes in front (torchcodec.state); its outputs, the
        first ``stride``, were emitted with the last chunk and are dropped again. ``act``: the
        activation applied to ``x`` first (by the state's kernel where it has one)."""
        frames = x.shape[-1]
        if state is None:
            out = F.conv_transpose1d(x if act is None else act(x), self.weight, self.bias, stride=self.stride,
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


def past_rounding(got: torch.Tensor, want: torch.Tensor) -> torch.Tensor:
    """Where a fused activation's ``got`` (any device, its dtype) is off the eager ``want``
    (float32, on CPU) by more than ``got``'s dtype rounds: a float32 sin may be approximate on a
    device, and bf16 rounds once, not once per op. What the codec's kernel checks allow."""
    tolerance = max(torch.finfo(got.dtype).eps, 1e-5) * (1 + want.abs())
    return (got.float().cpu() - want).abs() > tolerance


#: kernel(x, alpha, split, pad): what ``F.pad(snake_then_leaky(x, alpha, split), (pad, 0))``
#: gives, as one kernel (codec_worker.torchcodec.fused, set on the activations by
#: TorchNanoCodec.fuse_activations).
ActivationKernel = Callable[[torch.Tensor, torch.Tensor, int, int], torch.Tensor]


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

    def forward(self, x: torch.Tensor, pad: int = 0) -> torch.Tensor:
        if self.kernel is not None:
            return self.kernel(x, self.alpha, self.split, pad)
        return _padded(snake_then_leaky(x, self.alpha, self.split), pad)


class HalfSnake(Snake):
    """Snake on the first ``channels // 2`` channels, leaky ReLU on the rest."""

    def __init__(self, channels: int) -> None:
        super().__init__(channels // 2)


class LeakyReLU(nn.Module):
    def forward(self, x: torch.Tensor, pad: int = 0) -> torch.Tensor:
        return _padded(F.leaky_relu(x, LEAKY_RELU_SLOPE), pad)


class ELU(nn.Module):
    def forward(self, x: torch.Tensor, pad: int = 0) -> torch.Tensor:
        return _padded(F.elu(x), pad)


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
    "OUTPUT_ACTIVATIONS",
    "Snake",
    "activation",
    "output_activation",
    "past_rounding",
    "snake",
    "snake_then_leaky",
]
