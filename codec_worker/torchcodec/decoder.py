"""NanoCodec's causal HiFi-GAN decoder in plain torch: dequantised latents [B, 32, T] -> audio [B, T * 1024].

The same network as NeMo's ``CausalHiFiGANDecoder`` (built from the same config section):

    pre_conv      causal conv, 32 -> C channels, kernel in_kernel_size
    stages[i]     for each up-sample rate r (C halves each time):
                    act -> CausalUpsample (x r, grouped) -> MultiKernelResidual
    post_act      activation
    post_conv     causal conv, -> 1 channel, kernel out_kernel_size
    out_act       clamp (or tanh) to [-1, 1]

MultiKernelResidual averages one ResidualChain per kernel size; a chain applies one ResidualUnit
per dilation (x + conv_k(act(conv_{k,d}(act(x))))). Every sum there (a unit's, the mean) is read
by an activation next: with ``fold_sums`` (set with the fused activations) each is left to that
activation's kernel as a PendingSum. Every layer is causal, so audio at sample t
depends only on latents of frames <= t // samples_per_frame: a right-padded batch needs no masking
inside the network, only the padded tail of the output is zeroed (as NeMo's last mask does).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, fields
from typing import TYPE_CHECKING, Any, Mapping, Optional, Sequence

import torch
from torch import nn

from codec_worker.errors import CodecFormatError
from codec_worker.torchcodec.layers import (
    ACTIVATIONS,
    OUTPUT_ACTIVATIONS,
    CausalConv1d,
    CausalUpsample,
    Input,
    PendingSum,
    activation,
    output_activation,
    value_of,
)

if TYPE_CHECKING:
    from codec_worker.torchcodec.state import DecodeStep

DECODER_CLASS = "CausalHiFiGANDecoder"
PAD_MODES = ("zeros", "reflect", "replicate", "circular")  # nn.Conv1d's; NeMo pads by hand, so none changes the output


@dataclass(frozen=True, slots=True)
class DecoderConfig:
    """The ``audio_decoder`` section of model_config.yaml; defaults are NeMo's constructor defaults."""

    input_dim: int
    up_sample_rates: tuple[int, ...] = (8, 8, 2, 2)
    base_channels: int = 512
    in_kernel_size: int = 7
    out_kernel_size: int = 3
    resblock_kernel_sizes: tuple[int, ...] = (3, 7, 11)
    resblock_dilation_sizes: tuple[int, ...] = (1, 3, 5)
    activation: str = "lrelu"
    output_activation: str = "tanh"
    pad_mode: str = "zeros"
    n_groups_equal_to_out_channels: bool = True

    @classmethod
    def from_mapping(cls, section: Mapping[str, Any], origin: str = "<config>") -> DecoderConfig:
        """Validate the section (its ``_target_`` must be a CausalHiFiGANDecoder); CodecFormatError names the key."""

        def bad(message: str) -> CodecFormatError:
            return CodecFormatError(f"{origin}: audio_decoder {message}")

        target = str(section.get("_target_", ""))
        if target.rpartition(".")[2] != DECODER_CLASS:
            raise bad(f"_target_ {target!r} is not supported by the torch decoder; expected a ...{DECODER_CLASS}")
        known = {f.name for f in fields(cls)}
        unknown = sorted(key for key in section if key != "_target_" and key not in known)
        if unknown:
            raise bad(f"has unknown key(s) {', '.join(map(repr, unknown))}; the torch decoder knows {sorted(known)}")
        if "input_dim" not in section:
            raise bad("has no 'input_dim'")
        values: dict[str, Any] = {}
        for f in fields(cls):
            if f.name not in section:
                continue
            value = section[f.name]
            if f.name in ("up_sample_rates", "resblock_kernel_sizes", "resblock_dilation_sizes"):
                if not isinstance(value, Sequence) or isinstance(value, str) or not value or not all(_positive_int(v) for v in value):
                    raise bad(f"'{f.name}' must be a non-empty list of positive ints, got {value!r}")
                value = tuple(value)
            elif f.name in ("activation", "output_activation", "pad_mode"):
                allowed = {"activation": ACTIVATIONS, "output_activation": OUTPUT_ACTIVATIONS, "pad_mode": PAD_MODES}[f.name]
                if not isinstance(value, str) or value.lower() not in allowed:
                    raise bad(f"'{f.name}' must be one of {', '.join(allowed)}, got {value!r}")
            elif f.name == "n_groups_equal_to_out_channels":
                if not isinstance(value, bool):
                    raise bad(f"'{f.name}' must be true or false, got {value!r}")
            elif not _positive_int(value):
                raise bad(f"'{f.name}' must be a positive int, got {value!r}")
            values[f.name] = value
        config = cls(**values)
        channels = config.base_channels
        for stage, _ in enumerate(config.up_sample_rates):
            if channels < 2:
                raise bad(f"base_channels {config.base_channels} halves below 2 channels at up-sample stage {stage}")
            channels //= 2
        return config

    @property
    def samples_per_frame(self) -> int:
        return math.prod(self.up_sample_rates)

    def as_mapping(self) -> dict[str, Any]:
        """Every key, defaults filled in (what codec_worker.nanocodec.decoder_left_context_frames reads)."""
        return {"_target_": DECODER_CLASS, **{key: list(v) if isinstance(v, tuple) else v for key, v in asdict(self).items()}}


def _positive_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value > 0


class ResidualUnit(nn.Module):
    """x + conv2(act2(conv1(act1(x)))): conv1 has the unit's dilation, conv2 dilation 1. With
    ``defer_sums`` (CausalHiFiGANDecoder.fold_sums) the sum is returned as a PendingSum, for the
    activation that reads it next."""

    def __init__(self, channels: int, kernel_size: int, dilation: int, act: str) -> None:
        super().__init__()
        self.act1 = activation(act, channels)
        self.conv1 = CausalConv1d(channels, channels, kernel_size, dilation=dilation)
        self.act2 = activation(act, channels)
        self.conv2 = CausalConv1d(channels, channels, kernel_size)
        self.defer_sums = False

    def forward(self, x: Input, state: Optional[DecodeStep] = None) -> Input:
        if isinstance(x, PendingSum):
            x.keep = True  # the residual below: act1's kernel writes the sum out as it reads it
        y = self.conv2(self.conv1(x, state, act=self.act1), state, act=self.act2)
        x = value_of(x)  # computed by now where act1's kernel wrote it
        return PendingSum([(x, y)]) if self.defer_sums else x + y


class ResidualChain(nn.Module):
    """One kernel size: a ResidualUnit per dilation, one after the other."""

    def __init__(self, channels: int, kernel_size: int, dilations: Sequence[int], act: str) -> None:
        super().__init__()
        self.units = nn.ModuleList(ResidualUnit(channels, kernel_size, d, act) for d in dilations)

    def forward(self, x: Input, state: Optional[DecodeStep] = None) -> Input:
        for unit in self.units:
            x = unit(x, state)
        return x


class MultiKernelResidual(nn.Module):
    """The mean of one ResidualChain per kernel size, all fed the same input. With ``defer_sums``
    it is returned as one PendingSum of the chains' last pairs, for the activation after it."""

    def __init__(self, channels: int, kernel_sizes: Sequence[int], dilations: Sequence[int], act: str) -> None:
        super().__init__()
        self.chains = nn.ModuleList(ResidualChain(channels, k, dilations, act) for k in kernel_sizes)
        self.defer_sums = False

    def forward(self, x: Input, state: Optional[DecodeStep] = None) -> Input:
        if self.defer_sums:  # so are its units' (CausalHiFiGANDecoder.fold_sums): each chain ends in one pair
            return PendingSum([chain(x, state).pairs[0] for chain in self.chains], divisor=len(self.chains))
        total = self.chains[0](x, state)
        for chain in self.chains[1:]:
            total = total + chain(x, state)
        return total / len(self.chains)


class UpsampleStage(nn.Module):
    """act -> up-sample x rate (channels halve) -> multi-kernel residual."""

    def __init__(self, in_channels: int, rate: int, config: DecoderConfig) -> None:
        super().__init__()
        out_channels = in_channels // 2
        self.act = activation(config.activation, in_channels)
        groups = out_channels if config.n_groups_equal_to_out_channels else 1
        self.upsample = CausalUpsample(in_channels, out_channels, rate, groups)
        self.residual = MultiKernelResidual(
            out_channels, config.resblock_kernel_sizes, config.resblock_dilation_sizes, config.activation
        )

    def forward(self, x: Input, state: Optional[DecodeStep] = None) -> Input:
        return self.residual(self.upsample(x, state, act=self.act), state)


class CausalHiFiGANDecoder(nn.Module):
    """Latents [B, input_dim, T] -> audio [B, T * samples_per_frame] in [-1, 1]."""

    def __init__(self, config: DecoderConfig) -> None:
        super().__init__()
        self.config = config
        self.samples_per_frame = config.samples_per_frame
        channels = config.base_channels
        self.pre_conv = CausalConv1d(config.input_dim, channels, config.in_kernel_size)
        stages = []
        for rate in config.up_sample_rates:
            stages.append(UpsampleStage(channels, rate, config))
            channels //= 2
        self.stages = nn.ModuleList(stages)
        self.post_act = activation(config.activation, channels)
        self.post_conv = CausalConv1d(channels, 1, config.out_kernel_size)
        self.out_act = output_activation(config.output_activation)

    def fold_sums(self, on: bool = True) -> int:
        """Leave every residual sum and mean to the activation that reads it next (PendingSum): for
        activations whose kernels add (TorchNanoCodec.fuse_activations); how many sums that is."""
        modules = [m for m in self.modules() if isinstance(m, (ResidualUnit, MultiKernelResidual))]
        for module in modules:
            module.defer_sums = on
        return len(modules)

    def forward(self, latents: torch.Tensor, lengths: torch.Tensor | None = None,
                state: Optional[DecodeStep] = None) -> torch.Tensor:
        """``lengths`` [B] frames: samples past ``lengths[b] * samples_per_frame`` come out as 0.
        ``state``: each row continues its stream from the last chunk (torchcodec.state), so
        ``latents`` hold only new frames."""
        x = self.pre_conv(latents, state)
        for stage in self.stages:
            x = stage(x, state)
        audio = self.out_act(self.post_conv(x, state, act=self.post_act))[:, 0]  # [B, 1, N] -> [B, N]
        if lengths is not None:
            samples = torch.arange(audio.shape[-1], device=audio.device)
            audio = audio * (samples < (lengths.to(audio.device) * self.samples_per_frame).unsqueeze(-1))
        return audio


__all__ = [
    "CausalHiFiGANDecoder",
    "DecoderConfig",
    "MultiKernelResidual",
    "ResidualChain",
    "ResidualUnit",
    "UpsampleStage",
]
