"""Write a random NanoCodec ``.nemo`` in the published layout, for tests ("tiny") and benchmarks ("full").

    path = write_random_codec(tmp_path / "codec.nemo", size="tiny", seed=0)
    codec = NanoCodec.load(path)

    python -m codec_worker.tiny OUT.nemo --size tiny|full --seed N

The archive matches ``nvidia/nemo-nano-codec-22khz-1.89kbps-21.5fps``: a tar with ``./model_config.yaml``
(the same keys and values, training keys included, with ``target`` naming AudioCodecModel) and
``./model_weights.ckpt`` (a plain fp32 state dict with ``audio_encoder.*``, ``audio_decoder.*``,
``vector_quantizer.fsqs.{0..7}.{dim_base_index,num_levels}`` and weight norm stored as
``<path>.conv.parametrizations.weight.original0/original1``, plus a few training-only
``discriminator.*`` tensors that loaders must ignore). "tiny" only narrows the widths (encoder
base_channels 2, decoder base_channels 64); rates stay, so a frame is still 1024 samples and the
decoder's receptive field is the real one. Weights are random with scales set so that decoded
audio has an RMS of about 0.1 (rarely clipped) and the encoder spreads codes over the levels.
"""

from __future__ import annotations

import argparse
import copy
import logging
from pathlib import Path
from typing import Any, Literal

import torch

from codec_worker._checkpoint import NEMO_MODULES, CodecConfig, build_modules, write_nemo_archive

logger = logging.getLogger(__name__)

CodecSize = Literal["tiny", "full"]

# (encoder base_channels, decoder base_channels)
WIDTHS: dict[str, tuple[int, int]] = {"tiny": (2, 64), "full": (24, 864)}
TARGET_AUDIO_RMS = 0.1
TARGET_LATENT_STD = 1.0

_PUBLISHED_CONFIG: dict[str, Any] = {
    "sample_rate": 22050,
    "samples_per_frame": 1024,
    "mel_loss_l1_scale": 10.0,
    "mel_loss_l2_scale": 0.0,
    "stft_loss_scale": 10.0,
    "time_domain_loss_scale": 0.0,
    "commit_loss_scale": 0.0,
    "disc_updates_per_period": 1,
    "disc_update_period": 2,
    "loss_resolutions": [[32, 8, 32], [64, 16, 64], [128, 32, 128], [256, 64, 256], [512, 128, 512], [1024, 256, 1024]],
    "mel_loss_dims": [5, 10, 20, 40, 80, 160],
    "mel_loss_log_guard": 1.0,
    "stft_loss_log_guard": 1.0,
    "feature_loss_type": "absolute",
    "audio_encoder": {
        "_target_": f"{NEMO_MODULES}.HiFiGANEncoder",
        "down_sample_rates": [2, 2, 4, 8, 8],
        "encoded_dim": 32,
        "base_channels": 24,
        "activation": "lrelu",
        "pad_mode": "replicate",
    },
    "audio_decoder": {
        "_target_": f"{NEMO_MODULES}.CausalHiFiGANDecoder",
        "up_sample_rates": [8, 8, 4, 2, 2],
        "input_dim": 32,
        "base_channels": 864,
        "activation": "half_snake",
        "output_activation": "clamp",
        "pad_mode": "zeros",
        "n_groups_equal_to_out_channels": True,
    },
    "vector_quantizer": {
        "_target_": f"{NEMO_MODULES}.GroupFiniteScalarQuantizer",
        "num_groups": 8,
        "num_levels_per_group": [8, 7, 6, 6],
    },
    "discriminator": {
        "_target_": f"{NEMO_MODULES}.Discriminator",
        "discriminators": [
            {
                "_target_": f"{NEMO_MODULES}.MultiPeriodDiscriminator",
            },
            {
                "_target_": f"{NEMO_MODULES}.MultiResolutionDiscriminatorSTFT",
                "resolutions": [[512, 128, 512], [1024, 256, 1024], [2048, 512, 2048]],
            },
        ],
    },
    "generator_loss": {"_target_": "nemo.collections.tts.losses.audio_codec_loss.GeneratorSquaredLoss"},
    "discriminator_loss": {"_target_": "nemo.collections.tts.losses.audio_codec_loss.DiscriminatorSquaredLoss"},
    "optim": {"_target_": "torch.optim.Adam", "lr": 0.0002, "betas": [0.8, 0.99]},
    "target": "nemo.collections.tts.models.audio_codec.AudioCodecModel",
    "nemo_version": "2.3.0",
}

# Training-only tensors in the published checkpoint; a loader must skip them.
_DISCRIMINATOR_SHAPES: dict[str, tuple[int, ...]] = {
    "discriminator.discriminators.0.discriminators.0.conv_layers.0.conv.bias": (8,),
    "discriminator.discriminators.0.discriminators.0.conv_layers.0.conv.parametrizations.weight.original0": (8, 1, 1, 1),
    "discriminator.discriminators.0.discriminators.0.conv_layers.0.conv.parametrizations.weight.original1": (8, 1, 5, 1),
}


def codec_config(size: CodecSize = "tiny") -> dict[str, Any]:
    """The model_config.yaml contents for ``size`` (the published one for "full")."""
    if size not in WIDTHS:
        raise ValueError(f"size must be one of {sorted(WIDTHS)}, got {size!r}")
    config = copy.deepcopy(_PUBLISHED_CONFIG)
    config["audio_encoder"]["base_channels"], config["audio_decoder"]["base_channels"] = WIDTHS[size]
    return config


def _weight_norm_gain(conv: torch.nn.Module) -> torch.Tensor:
    """The weight-norm magnitude g (stored as ``parametrizations.weight.original0``)."""
    return conv.parametrizations.weight.original0


@torch.no_grad()
def _calibrate(modules: dict[str, torch.nn.Module], generator: torch.Generator) -> None:
    """Scale the output convs so decoded audio and encoder latents have sensible magnitudes."""
    decoder, encoder = modules["audio_decoder"], modules["audio_encoder"]
    decoder.eval()
    encoder.eval()
    # 1) decoder: random latents in [-1, 1] -> audio RMS TARGET_AUDIO_RMS (before the clamp)
    frames = 3  # enough for stable statistics, cheap even for the full codec
    latents = torch.rand(1, 32, frames, generator=generator) * 2 - 1
    post = decoder.post_conv.conv
    post.bias.zero_()
    audio, _ = decoder(inputs=latents, input_len=torch.tensor([frames]))
    rms = float(audio.pow(2).mean().sqrt())
    _weight_norm_gain(post).mul_(TARGET_AUDIO_RMS / max(rms, 1e-8))
    # 2) encoder: noise at RMS 0.1 -> latents with std TARGET_LATENT_STD, so FSQ uses many levels.
    #    Without biases the encoder (convs + leaky ReLU) has no constant offsets that would pin
    #    every frame to the same code.
    for name, tensor in encoder.named_parameters():
        if name.endswith("bias"):
            tensor.zero_()
    noise = torch.randn(1, 1024 * frames, generator=generator) * 0.1
    encoded, _ = encoder(audio=noise, audio_len=torch.tensor([noise.shape[1]]))
    std = float(encoded.std())
    _weight_norm_gain(encoder.post_conv.conv).mul_(TARGET_LATENT_STD / max(std, 1e-8))


def random_state_dict(size: CodecSize = "tiny", seed: int = 0) -> tuple[dict[str, Any], dict[str, torch.Tensor]]:
    """(model_config mapping, state dict) of a random codec; deterministic for a given seed."""
    config = codec_config(size)
    generator = torch.Generator().manual_seed(seed)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        modules = build_modules(CodecConfig.from_mapping(config, f"<random {size} codec>"))
    _calibrate(modules, generator)
    state: dict[str, torch.Tensor] = {}
    for section, module in modules.items():
        for key, tensor in module.state_dict().items():
            state[f"{section}.{key}"] = tensor.detach().clone()
    for key, shape in _DISCRIMINATOR_SHAPES.items():
        state[key] = torch.randn(shape, generator=generator)
    return config, state


def write_random_codec(path: Path | str, size: CodecSize = "tiny", seed: int = 0) -> Path:
    """Write a random codec ``.nemo`` to ``path`` (atomically) and return the path."""
    config, state = random_state_dict(size, seed)
    path = write_nemo_archive(path, config, state)
    logger.info("wrote random %s codec (seed %d) to %s", size, seed, path)
    return path


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m codec_worker.tiny", description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path, help="where to write the .nemo file")
    parser.add_argument("--size", choices=sorted(WIDTHS), default="tiny")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    print(write_random_codec(args.out, size=args.size, seed=args.seed))


if __name__ == "__main__":
    main()


__all__ = ["codec_config", "random_state_dict", "write_random_codec"]
