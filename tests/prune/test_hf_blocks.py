"""Pruning and merging on a transformers host (Depth-Anything-V2's DINOv2 layers): the explicit
layer against the model's own, proportional attention for both block implementations, and every
method end to end through hard prune + LLF."""

from __future__ import annotations

import copy

import pytest
import torch

from taskgeom.metric.head import ImportanceHead
from taskgeom.models.adapters import build_paper_model
from taskgeom.models.host import freeze, run_decoder
from taskgeom.models.vit import Grid, TimmViTHost, tiny_vit
from taskgeom.prune.blocks import attention_block
from taskgeom.prune.hf_blocks import Dinov2AttentionBlock
from taskgeom.prune.llf import pruned_forward
from taskgeom.prune.methods import NAMES as METHODS
from taskgeom.prune.scores import LearnedMetric
from taskgeom.prune.timm_blocks import TimmAttentionBlock


@pytest.fixture(scope="module")
def da_host():
    torch.manual_seed(0)
    return build_paper_model("depth-anything-v2", tiny=True)  # DINOv2 width 32, 2 heads, 4 layers


@pytest.fixture(scope="module")
def timm_host():
    torch.manual_seed(0)
    return freeze(TimmViTHost(tiny_vit(32, 4, 2, 8, 32)))


def lively(module: torch.nn.Module) -> torch.nn.Module:
    """A float64 copy with weights large enough that attention is far from uniform (the random
    initialisations of transformers and timm make it nearly so)."""
    module = copy.deepcopy(module).double().requires_grad_(False)
    g = torch.Generator().manual_seed(3)
    with torch.no_grad():
        for p in module.parameters():
            p.copy_(0.5 * torch.randn(p.shape, generator=g, dtype=p.dtype))
    return module


def registers_model() -> torch.nn.Module:
    from transformers import Dinov2WithRegistersConfig, Dinov2WithRegistersModel

    config = Dinov2WithRegistersConfig(hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
                                       image_size=28, patch_size=14, attn_implementation="eager")
    return Dinov2WithRegistersModel(config).eval()


def test_every_layer_is_the_models_own_with_or_without_stats(da_host):
    x = torch.randn(2, 3, 56, 56)
    h, ctx = da_host.embed(x)
    assert ctx == Grid(1, 4, 4)
    for i in range(da_host.num_blocks):
        block = attention_block(da_host, i)
        assert isinstance(block, Dinov2AttentionBlock)
        out = da_host.block(i, h, ctx)
        assert torch.equal(block.forward(h), out)
        assert torch.equal(block.forward(h, torch.ones_like(h[..., :1])), out)  # the same operations, + log 1
        with_stats, stats = block.with_stats(h)
        assert torch.equal(with_stats, out)
        assert stats.keys.shape == (2, 17, 16) and stats.cls_attn.shape == (2, 17)
        torch.testing.assert_close(stats.cls_attn.sum(-1), torch.ones(2))
        h = out


@pytest.mark.parametrize("variant", ["dinov2", "registers"])
def test_the_explicit_layer_matches_transformers_far_from_uniform_attention(da_host, variant):
    host = da_host if variant == "dinov2" else registers_model()  # its layers at .encoder.layer
    layer = lively(attention_block(host, 1 if variant == "dinov2" else 0).layer)
    x = torch.randn(2, 9, 32, dtype=torch.float64)
    out, stats = Dinov2AttentionBlock(layer).with_stats(x)
    torch.testing.assert_close(out, layer(x))
    assert stats.cls_attn.max() > 3.0 / 9  # far from the uniform 1 / 9


def implementations(timm_host, da_host) -> dict:
    return {"timm": TimmAttentionBlock(lively(timm_host.vit.blocks[1])),
            "transformers": Dinov2AttentionBlock(lively(da_host.model.backbone.encoder.layer[1]))}


@pytest.mark.parametrize("impl", ["timm", "transformers"])
def test_proportional_attention_makes_a_merged_token_count_as_its_copies(timm_host, da_host, impl):
    """ToMe's defining property: a token of size 2 attends and is attended like two identical tokens."""
    block = implementations(timm_host, da_host)[impl]
    x = torch.randn(2, 6, 32, dtype=torch.float64)
    doubled = torch.cat([x, x[:, 3:4]], dim=1)
    size = torch.ones(2, 6, 1, dtype=torch.float64)
    size[:, 3] = 2.0
    expected = block.forward(doubled)[:, :6]
    assert not torch.allclose(block.forward(x), expected)  # without the bias, the copy counts once
    torch.testing.assert_close(block.forward(x, size), expected)
    out, stats = block.with_stats(x, size)
    torch.testing.assert_close(out, expected)
    _, doubled_stats = block.with_stats(doubled)
    torch.testing.assert_close(stats.keys, doubled_stats.keys[:, :6])
    cls_attn = doubled_stats.cls_attn[:, :6].clone()
    cls_attn[:, 3] += doubled_stats.cls_attn[:, 6]  # the class token's attention to both copies
    torch.testing.assert_close(stats.cls_attn, cls_attn)


def test_a_host_without_an_adapter_is_named():
    with pytest.raises(TypeError, match="Sequential.*importance and random selection work on any host"):
        attention_block(torch.nn.Sequential(torch.nn.Linear(2, 2)), 0)


def learned() -> LearnedMetric:
    torch.manual_seed(1)
    return LearnedMetric(ImportanceHead(17, 32, 16).eval(), Grid(1, 4, 4))


@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("llf", [True, False])
def test_every_method_prunes_depth_anything(da_host, method, llf):
    x = torch.randn(2, 3, 56, 56)
    unpruned = run_decoder(da_host, "depth", x)
    same = pruned_forward(da_host, "depth", x, [0, 1], method, 0.0, llf, learned(), torch.Generator().manual_seed(0))
    assert torch.equal(same, unpruned)
    depth = pruned_forward(da_host, "depth", x, [0, 1], method, 0.5, llf, learned(), torch.Generator().manual_seed(0))
    assert depth.shape == unpruned.shape == (2, 56 * 56) and torch.isfinite(depth).all()
    # random weights: the depth is near 0 and attention near uniform, so pruning changes it only a little
    assert not torch.allclose(depth, unpruned, rtol=1e-4, atol=0)
