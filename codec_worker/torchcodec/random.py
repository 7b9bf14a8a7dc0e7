"""Write a random, decoder-only NanoCodec ``.nemo`` without NeMo, for benchmarks on hosts that lack it.

    path = write_random_decoder_codec(out / "nanocodec.nemo", size="full", seed=0)
    codec = load_torch_decoder(path)       # decodes; NanoCodec.load (NeMo) refuses it: no encoder tensors

    python -m codec_worker.torchcodec.random OUT.nemo --size tiny|full --seed N

The archive has the published layout (``./model_config.yaml`` = codec_worker.tiny's config for
``size``, ``./model_weights.ckpt``) but holds only ``audio_decoder.*`` (weight norm stored as NeMo
does, ``conv.parametrizations.weight.original0/1``) and the quantizer's level buffers. Weights use
torch's default conv init; the output conv is scaled so decoded audio has an RMS of about 0.1.
A 250 MB full-size codec cannot travel to an offline GPU machine (64 MiB per run); this writes
one there in seconds.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import torch

from codec_worker import fsq
from codec_worker._checkpoint import write_nemo_archive
from codec_worker.tiny import TARGET_AUDIO_RMS, WIDTHS, CodecSize, codec_config
from codec_worker.torchcodec.decoder import CausalHiFiGANDecoder, DecoderConfig
from codec_worker.torchcodec.weights import nemo_key

_CALIBRATION_FRAMES = 3


@torch.no_grad()
def randomize(decoder: CausalHiFiGANDecoder, generator: torch.Generator) -> None:
    """Random weights in place: torch's default conv init, snake's alpha at 1."""
    for name, tensor in decoder.named_parameters():
        if name.endswith("alpha"):
            tensor.fill_(1.0)  # snake's own init
            continue
        # torch's default conv init: U(-1/sqrt(fan_in), 1/sqrt(fan_in)), fan_in from the weight's dims 1..
        owner = decoder.get_submodule(name.rpartition(".")[0])
        bound = owner.weight[0].numel() ** -0.5
        tensor.copy_((torch.rand(tensor.shape, generator=generator) * 2 - 1) * bound)


@torch.no_grad()
def random_decoder(size: CodecSize = "tiny", seed: int = 0) -> tuple[dict, CausalHiFiGANDecoder]:
    """(model_config mapping, a torch decoder with random weights, audio RMS ~0.1)."""
    config = codec_config(size)
    decoder = CausalHiFiGANDecoder(DecoderConfig.from_mapping(config["audio_decoder"], f"<random {size} codec>"))
    generator = torch.Generator().manual_seed(seed)
    randomize(decoder, generator)
    latents = fsq.dequantize(torch.stack(
        [torch.randint(0, level, (1, _CALIBRATION_FRAMES), generator=generator) for level in fsq.channel_levels()], dim=1))
    decoder.post_conv.bias.zero_()
    decoder.out_act, clamp = torch.nn.Identity(), decoder.out_act  # measure before the clamp
    rms = float(decoder(latents).pow(2).mean().sqrt())
    decoder.out_act = clamp
    decoder.post_conv.weight.mul_(TARGET_AUDIO_RMS / max(rms, 1e-8))
    return config, decoder


def decoder_state_dict(decoder: CausalHiFiGANDecoder, activation: str) -> dict[str, torch.Tensor]:
    """The decoder's parameters under NeMo's keys, each conv weight split into weight norm's g and v."""
    state: dict[str, torch.Tensor] = {}
    for path, tensor in decoder.state_dict().items():
        key = "audio_decoder." + nemo_key(path, activation)
        if key.endswith(".weight"):
            base = key[: -len("weight")]
            norm = tensor.reshape(tensor.shape[0], -1).norm(dim=1).reshape(-1, *([1] * (tensor.dim() - 1)))
            state[base + "parametrizations.weight.original0"] = norm.clone()  # g
            state[base + "parametrizations.weight.original1"] = tensor.clone()  # v (g * v / |v| = v)
        else:
            state[key] = tensor.clone()
    bases = torch.tensor([1, 8, 56, 336], dtype=torch.int32).view(1, 4, 1)
    levels = torch.tensor(fsq.FSQ_LEVELS, dtype=torch.int32).view(1, 4, 1)
    for group in range(fsq.NUM_GROUPS):
        state[f"vector_quantizer.fsqs.{group}.dim_base_index"] = bases.clone()
        state[f"vector_quantizer.fsqs.{group}.num_levels"] = levels.clone()
    return state


def write_random_decoder_codec(path: Path | str, size: CodecSize = "tiny", seed: int = 0) -> Path:
    """Write a random decoder-only codec ``.nemo`` to ``path`` (atomically) and return the path."""
    config, decoder = random_decoder(size, seed)
    state = decoder_state_dict(decoder, config["audio_decoder"]["activation"])
    return write_nemo_archive(path, config, state)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m codec_worker.torchcodec.random", description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path, help="where to write the .nemo file")
    parser.add_argument("--size", choices=sorted(WIDTHS), default="tiny")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    print(write_random_decoder_codec(args.out, size=args.size, seed=args.seed))


if __name__ == "__main__":
    main()


__all__ = ["decoder_state_dict", "random_decoder", "randomize", "write_random_decoder_codec"]
