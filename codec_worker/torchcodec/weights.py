"""From a NeMo codec state dict to the torch decoder's parameters: key mapping and weight-norm folding.

NeMo's ``audio_decoder.*`` keys (left) and the torch decoder's (right); ``{conv}`` stands for a
conv's tensors, stored either with weight norm (``conv.parametrizations.weight.original0`` = g and
``original1`` = v; or the older ``conv.weight_g`` / ``conv.weight_v``) or plain (``conv.weight``),
plus ``conv.bias``. Activation alphas are ``activation.alpha`` (snake) or
``activation.snake_act.alpha`` (half snake).

    pre_conv.{conv}                                             pre_conv.{weight,bias}
    activations.i.activation[.snake_act].alpha                  stages.i.act.alpha
    up_sample_conv_layers.i.{conv}                              stages.i.upsample.{weight,bias}
    res_layers.i.res_blocks.k.res_blocks.d.input_activation..   stages.i.residual.chains.k.units.d.act1.alpha
    res_layers.i.res_blocks.k.res_blocks.d.input_conv.{conv}    stages.i.residual.chains.k.units.d.conv1.*
    res_layers.i.res_blocks.k.res_blocks.d.skip_activation..    stages.i.residual.chains.k.units.d.act2.alpha
    res_layers.i.res_blocks.k.res_blocks.d.skip_conv.{conv}     stages.i.residual.chains.k.units.d.conv2.*
    post_activation.activation[.snake_act].alpha                post_act.alpha
    post_conv.{conv}                                            post_conv.{weight,bias}

Weight norm: weight = g * v / ||v||, the norm over every dim but the first (NeMo's default dim 0,
for convs and transposed convs alike), computed in the stored float32 before any cast.
"""

from __future__ import annotations

import re
from typing import Any, Mapping

import torch

from codec_worker.errors import CodecFormatError

PREFIX = "audio_decoder."

_ALPHA = r"\.activation\.(?:snake_act\.)?alpha"
_CONV = r"\.conv\.(?P<param>bias|weight|weight_g|weight_v|parametrizations\.weight\.original[01])"
_UNIT = r"res_layers\.(?P<i>\d+)\.res_blocks\.(?P<k>\d+)\.res_blocks\.(?P<d>\d+)"
_TARGET_UNIT = "stages.{i}.residual.chains.{k}.units.{d}"

# (NeMo key pattern, torch parameter path; {param} is kept for convs)
_RULES: tuple[tuple[re.Pattern[str], str], ...] = tuple(
    (re.compile(f"^{pattern}$"), target)
    for pattern, target in (
        (f"pre_conv{_CONV}", "pre_conv.{param}"),
        (f"activations\\.(?P<i>\\d+){_ALPHA}", "stages.{i}.act.alpha"),
        (f"up_sample_conv_layers\\.(?P<i>\\d+){_CONV}", "stages.{i}.upsample.{param}"),
        (f"{_UNIT}\\.input_activation{_ALPHA}", _TARGET_UNIT + ".act1.alpha"),
        (f"{_UNIT}\\.input_conv{_CONV}", _TARGET_UNIT + ".conv1.{param}"),
        (f"{_UNIT}\\.skip_activation{_ALPHA}", _TARGET_UNIT + ".act2.alpha"),
        (f"{_UNIT}\\.skip_conv{_CONV}", _TARGET_UNIT + ".conv2.{param}"),
        (f"post_activation{_ALPHA}", "post_act.alpha"),
        (f"post_conv{_CONV}", "post_conv.{param}"),
    )
)

_GAIN = ("parametrizations.weight.original0", "weight_g")
_DIRECTION = ("parametrizations.weight.original1", "weight_v")


def map_key(nemo_key: str) -> str | None:
    """The torch decoder path of one ``audio_decoder.`` key (prefix removed), or None when unknown."""
    for pattern, target in _RULES:
        match = pattern.match(nemo_key)
        if match:
            return target.format(**match.groupdict())
    return None


# torch decoder path -> NeMo key, the table above read right to left ({alpha} = the activation's alpha key)
_REVERSE: tuple[tuple[re.Pattern[str], str], ...] = tuple(
    (re.compile(f"^{pattern}$"), target)
    for pattern, target in (
        (r"pre_conv\.(?P<param>weight|bias)", "pre_conv.conv.{param}"),
        (r"stages\.(?P<i>\d+)\.act\.alpha", "activations.{i}.activation.{alpha}"),
        (r"stages\.(?P<i>\d+)\.upsample\.(?P<param>weight|bias)", "up_sample_conv_layers.{i}.conv.{param}"),
        (r"stages\.(?P<i>\d+)\.residual\.chains\.(?P<k>\d+)\.units\.(?P<d>\d+)\.act1\.alpha",
         "res_layers.{i}.res_blocks.{k}.res_blocks.{d}.input_activation.activation.{alpha}"),
        (r"stages\.(?P<i>\d+)\.residual\.chains\.(?P<k>\d+)\.units\.(?P<d>\d+)\.conv1\.(?P<param>weight|bias)",
         "res_layers.{i}.res_blocks.{k}.res_blocks.{d}.input_conv.conv.{param}"),
        (r"stages\.(?P<i>\d+)\.residual\.chains\.(?P<k>\d+)\.units\.(?P<d>\d+)\.act2\.alpha",
         "res_layers.{i}.res_blocks.{k}.res_blocks.{d}.skip_activation.activation.{alpha}"),
        (r"stages\.(?P<i>\d+)\.residual\.chains\.(?P<k>\d+)\.units\.(?P<d>\d+)\.conv2\.(?P<param>weight|bias)",
         "res_layers.{i}.res_blocks.{k}.res_blocks.{d}.skip_conv.conv.{param}"),
        (r"post_act\.alpha", "post_activation.activation.{alpha}"),
        (r"post_conv\.(?P<param>weight|bias)", "post_conv.conv.{param}"),
    )
)


def nemo_key(path: str, activation: str) -> str:
    """The NeMo key (without ``audio_decoder.``) of a torch decoder parameter; ``activation`` is the
    config's (half snake keeps its alpha under ``snake_act``). Raises KeyError for an unknown path."""
    alpha = "snake_act.alpha" if activation.lower() == "half_snake" else "alpha"
    for pattern, target in _REVERSE:
        match = pattern.match(path)
        if match:
            return target.format(alpha=alpha, **match.groupdict())
    raise KeyError(f"no NeMo key for torch decoder parameter {path!r}")


def fold_weight_norm(gain: torch.Tensor, direction: torch.Tensor) -> torch.Tensor:
    """weight = g * v / ||v||, the norm taken per slice of dim 0.

    torch._weight_norm is the kernel torch's own weight-norm parametrization runs, so the folded
    weights are bit-identical to those NeMo's modules compute (and the audio too, not just close);
    the formula spelled out is the fallback should that private function go away.
    """
    kernel = getattr(torch, "_weight_norm", None)
    if kernel is not None:
        return kernel(direction, gain, 0)
    dims = tuple(range(1, direction.dim()))
    return direction * (gain / direction.norm(p=2, dim=dims, keepdim=True))


def decoder_tensors(state_dict: Mapping[str, Any], origin: str) -> tuple[dict[str, torch.Tensor], dict[str, str]]:
    """The ``audio_decoder.*`` tensors renamed to torch decoder paths, weight norm folded, and for
    each path the checkpoint key it came from (for messages).

    CodecFormatError names the checkpoint key at fault: an unknown decoder key, a non-tensor, a
    conv with only half of its weight-norm pair or with both a plain and a normed weight.
    """
    renamed: dict[str, torch.Tensor] = {}
    source: dict[str, str] = {}  # torch path -> NeMo key, for messages
    for key, value in state_dict.items():
        if not key.startswith(PREFIX):
            continue  # encoder, quantizer, discriminator...: not the decoder's
        path = map_key(key[len(PREFIX) :])
        if path is None:
            raise CodecFormatError(f"{origin}: unexpected tensor '{key}' for a CausalHiFiGANDecoder")
        if not isinstance(value, torch.Tensor):
            raise CodecFormatError(f"{origin}: '{key}' is a {type(value).__name__}, not a tensor")
        if value.is_floating_point() and not bool(torch.isfinite(value).all()):
            raise CodecFormatError(f"{origin}: tensor '{key}' holds NaN or infinite values")
        renamed[path] = value
        source[path] = key
    tensors: dict[str, torch.Tensor] = {}
    for path, value in renamed.items():
        owner, param = _split(path)
        if param in _DIRECTION:
            continue  # handled with its gain
        if param in _GAIN:
            pair = _DIRECTION[_GAIN.index(param)]
            direction = renamed.get(f"{owner}.{pair}")
            if direction is None:
                raise CodecFormatError(f"{origin}: '{source[path]}' (weight-norm gain) has no direction tensor beside it")
            if f"{owner}.weight" in renamed:
                raise CodecFormatError(f"{origin}: '{source[path]}' and a plain weight both stored for one conv")
            if gain_shape(direction) != tuple(value.shape):
                raise CodecFormatError(
                    f"{origin}: weight-norm gain '{source[path]}' has shape {tuple(value.shape)}, "
                    f"expected {gain_shape(direction)} for its direction {tuple(direction.shape)}"
                )
            tensors[f"{owner}.weight"] = fold_weight_norm(value.float(), direction.float())
            source[f"{owner}.weight"] = source[path]
        else:
            tensors[path] = value
    for path, key in source.items():
        owner, param = _split(path)
        if param in _DIRECTION and f"{owner}.{_GAIN[_DIRECTION.index(param)]}" not in renamed:
            raise CodecFormatError(f"{origin}: '{key}' (weight-norm direction) has no gain tensor beside it")
    return tensors, {path: source[path] for path in tensors}


def _split(path: str) -> tuple[str, str]:
    """'stages.0.upsample.parametrizations.weight.original0' -> ('stages.0.upsample', 'parametrizations.weight.original0')."""
    for param in (*_GAIN, *_DIRECTION):
        if path.endswith("." + param):
            return path[: -len(param) - 1], param
    owner, _, param = path.rpartition(".")
    return owner, param


def gain_shape(direction: torch.Tensor) -> tuple[int, ...]:
    return (direction.shape[0],) + (1,) * (direction.dim() - 1)


def load_decoder_weights(module: torch.nn.Module, state_dict: Mapping[str, Any], origin: str) -> None:
    """Load the checkpoint's decoder strictly into ``module``; CodecFormatError names the first bad tensor."""
    tensors, source = decoder_tensors(state_dict, origin)
    expected = module.state_dict()
    missing = [path for path in expected if path not in tensors]
    if missing:
        more = f" (and {len(missing) - 1} more)" if len(missing) > 1 else ""
        raise CodecFormatError(
            f"{origin}: missing decoder tensor for '{missing[0]}'{more} "
            f"(no '{PREFIX}...' key maps to it; see codec_worker/torchcodec/weights.py)"
        )
    for path, tensor in tensors.items():
        name = source[path]
        if path not in expected:
            raise CodecFormatError(f"{origin}: unexpected tensor '{name}' for this decoder config")
        if tuple(tensor.shape) != tuple(expected[path].shape):
            raise CodecFormatError(
                f"{origin}: tensor '{name}' gives shape {tuple(tensor.shape)}, expected {tuple(expected[path].shape)}"
            )
        if not tensor.is_floating_point():
            raise CodecFormatError(f"{origin}: tensor '{name}' has dtype {tensor.dtype}, expected a float")
    module.load_state_dict({path: tensor.float() for path, tensor in tensors.items()}, strict=True)


__all__ = ["decoder_tensors", "fold_weight_norm", "load_decoder_weights", "map_key", "nemo_key"]
