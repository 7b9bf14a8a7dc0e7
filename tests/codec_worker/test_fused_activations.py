"""The decoder's snake activations: the eager form computed in place equals the functional ops bit
for bit (what HalfSnake computed before), in float32 and bfloat16, and still runs under autograd."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from codec_worker.torchcodec.layers import LEAKY_RELU_SLOPE, HalfSnake, Snake, snake, snake_then_leaky


def _functional(x: torch.Tensor, alpha: torch.Tensor, split: int) -> torch.Tensor:
    """What HalfSnake computed before it worked in place: the ops one by one, then a concatenation."""
    return torch.cat([snake(x[:, :split], alpha), F.leaky_relu(x[:, split:], LEAKY_RELU_SLOPE)], dim=1)


def _alphas(split: int, seed: int) -> torch.Tensor:
    """Per-channel alphas as a trained codec has them (not the 1.0 of a fresh init), one near 0."""
    alpha = torch.rand(1, split, 1, generator=torch.Generator().manual_seed(seed)) * 3 + 0.05
    alpha[:, :1] = 0.0  # eps keeps 1 / alpha finite
    return alpha


# ---- eager, in place ------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("channels,split", [(9, 4), (8, 4), (6, 6), (5, 0)])
def test_in_place_activation_is_bit_identical_to_the_functional_ops(dtype: torch.dtype, channels: int, split: int) -> None:
    x = (4 * torch.randn(3, channels, 257, generator=torch.Generator().manual_seed(channels))).to(dtype)
    alpha = _alphas(split, seed=split).to(dtype)
    assert torch.equal(snake_then_leaky(x, alpha, split), _functional(x, alpha, split))


def test_modules_use_the_in_place_form_and_still_run_under_autograd() -> None:
    x = torch.randn(2, 7, 50, requires_grad=True)  # a decoder built from scratch has trainable alphas
    half, full = HalfSnake(7), Snake(7)
    y = half(x)
    y.sum().backward()
    assert x.grad is not None and half.alpha.grad is not None
    with torch.no_grad():
        assert torch.equal(half(x), _functional(x, half.alpha, 3))
        assert torch.equal(full(x), snake(x, full.alpha))
