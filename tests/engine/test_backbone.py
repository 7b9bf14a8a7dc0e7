"""The plain-PyTorch backbone against transformers' own Qwen3.5 text model (an independent oracle)."""

import json

import pytest
import torch

from engine.model.backbone import KVCache

qwen35 = pytest.importorskip("transformers.models.qwen3_5.modeling_qwen3_5")


@pytest.fixture(scope="module")
def hf_backbone(tiny_gepard_dir, tiny_model):
    from transformers.models.qwen3_5.configuration_qwen3_5 import Qwen3_5TextConfig

    cfg = Qwen3_5TextConfig(**json.loads((tiny_gepard_dir / "config.json").read_text()))
    model = qwen35.Qwen3_5TextModel(cfg).eval()
    state = {k[len("backbone."):]: v for k, v in tiny_model.state_dict().items() if k.startswith("backbone.")}
    missing, unexpected = model.load_state_dict(state, strict=False)
    assert not missing and not unexpected
    return model


def test_prefill_and_incremental_decode_match_transformers(tiny_model, hf_backbone):
    torch.manual_seed(0)
    x = torch.randn(1, 20, tiny_model.config.hidden_size) * 0.05
    with torch.no_grad():
        ref = hf_backbone(inputs_embeds=x).last_hidden_state
        cache = KVCache.allocate(tiny_model.config.backbone, 1, 32, torch.device("cpu"), torch.float32)
        outs = [tiny_model.backbone(x[:, :12], cache, slice(0, 1), torch.zeros(1, dtype=torch.long))]
        for t in range(12, 20):
            outs.append(tiny_model.backbone(x[:, t : t + 1], cache, slice(0, 1), cache.lengths[:1].clone()))
    ours = torch.cat(outs, dim=1)
    assert (ours - ref).abs().max().item() < 1e-5


def test_batched_rows_of_different_lengths_match_single_rows(tiny_model):
    torch.manual_seed(1)
    h = tiny_model.config.hidden_size
    prompts = [torch.randn(1, n, h) * 0.05 for n in (5, 11, 8)]
    steps = torch.randn(3, 4, h) * 0.05
    with torch.no_grad():
        batch = KVCache.allocate(tiny_model.config.backbone, 3, 32, torch.device("cpu"), torch.float32)
        for row, p in enumerate(prompts):
            tiny_model.backbone(p, batch, torch.tensor([row]), torch.zeros(1, dtype=torch.long))
        batched = [tiny_model.backbone(steps[:, t : t + 1], batch, slice(0, 3), batch.lengths[:3].clone()) for t in range(4)]
        for row, p in enumerate(prompts):
            solo = KVCache.allocate(tiny_model.config.backbone, 1, 32, torch.device("cpu"), torch.float32)
            tiny_model.backbone(p, solo, slice(0, 1), torch.zeros(1, dtype=torch.long))
            for t in range(4):
                out = tiny_model.backbone(steps[row : row + 1, t : t + 1], solo, slice(0, 1), solo.lengths[:1].clone())
                assert (out[0] - batched[t][row]).abs().max().item() < 1e-5


def test_cache_grow_keeps_contents(tiny_model):
    cache = KVCache.allocate(tiny_model.config.backbone, 1, 4, torch.device("cpu"), torch.float32)
    cache.keys[0][0, :, :4] = 1.0
    cache.lengths[0] = 4
    cache.grow(rows=3, capacity=16)
    assert cache.capacity == 16 and cache.rows == 3
    assert torch.all(cache.keys[0][0, :, :4] == 1.0) and int(cache.lengths[0]) == 4
