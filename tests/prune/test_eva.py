"""Token reduction on a timm Eva host (EVA-02, rotary position embedding): the running tokens get
the rotary rows of their own grid positions, checked against Eva's own blocks run on the kept
tokens with those rows (indexed here, as Eva indexes the patches it keeps), the explicit block
with statistics against Eva's, proportional attention, and a clear refusal where tokens have no
single position."""

from __future__ import annotations

import copy
from dataclasses import replace

import pytest
import timm
import torch

from taskgeom.metric.head import ImportanceHead
from taskgeom.metric.spn import SpectralPullbackNetwork
from taskgeom.models.adapters.timm_any import timm_host
from taskgeom.models.host import run_decoder
from taskgeom.models.vit import Grid
from taskgeom.prune.blocks import attention_block
from taskgeom.prune.cls_merge import merged_forward, reduce_tokens, unreduced_prefix
from taskgeom.prune.eva_blocks import EvaAttentionBlock
from taskgeom.prune.llf import pruned_forward
from taskgeom.prune.methods import METHODS
from taskgeom.prune.scores import LearnedMetric


def lively(model: torch.nn.Module) -> torch.nn.Module:
    """Weights large enough that attention, and so the rotary embedding, matter (timm's random
    initialisation leaves attention nearly uniform)."""
    g = torch.Generator().manual_seed(3)
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(0.3 * torch.randn(p.shape, generator=g))
    return model


def build(name: str):
    """A 3-block random-weight timm model ``name`` as a host, on a 4 × 4 grid, and its image side."""
    torch.manual_seed(0)
    patch = 14 if name.startswith("eva02") else 16
    model = timm.create_model(name, pretrained=False, img_size=4 * patch, depth=3, embed_dim=32, num_heads=2,
                              num_classes=0)
    return timm_host(lively(model)), 4 * patch


@pytest.fixture(scope="module", params=["eva02_tiny_patch14_224", "vit_small_patch16_rope_mixed_224"])
def eva(request):
    """EVA-02 (one rotary embedding for every block, ``EvaAttention``) and a rope-mixed Eva (one per
    block and head, ``AttentionRope``)."""
    return build(request.param)


@pytest.fixture(scope="module")
def eva02():
    return build("eva02_tiny_patch14_224")


def rope_of(host, i: int, rope: torch.Tensor, patches: list[int]) -> torch.Tensor:
    """Eva block i's rotary rows of ``patches`` (indices into the patch grid), for one item."""
    if getattr(host.vit, "rope_mixed", False):
        return rope[i][:, patches]
    return rope[patches]


def reference(host, x: torch.Tensor, keeps: dict[int, list[list[int]]], llf: bool,
              shift: bool = False) -> torch.Tensor:
    """The last block's full state with patch tokens pruned after the blocks of ``keeps`` (block ->
    per item the positions kept from there on): Eva's own blocks, one item at a time, on the
    running tokens with the rotary rows of their patch positions (prefix tokens take none; with
    ``shift``, the grid's first rows instead), each removed token frozen at its value where it
    went; with LLF the last block on every token."""
    vit = host.vit
    h, rope = vit._pos_embed(vit.patch_embed(x))
    h = vit.norm_pre(h)
    prefix, last = vit.num_prefix_tokens, len(vit.blocks) - 1
    out = []
    for b in range(len(x)):
        full, positions = h[b:b + 1].clone(), list(range(h.shape[1]))
        t = full
        for i in range(last + 1):
            if i == last and llf:
                full[:, positions] = t
                t, positions = full, list(range(h.shape[1]))
            patches = [p - prefix for p in positions[prefix:]]
            t = vit.blocks[i](t, rope=rope_of(host, i, rope, list(range(len(patches))) if shift else patches))
            if i in keeps:
                full = full.clone()
                full[:, positions] = t
                t = t[:, [positions.index(p) for p in keeps[i][b]]]
                positions = keeps[i][b]
        full[:, positions] = t
        out.append(full)
    return torch.cat(out)


def drawn_keep(n: int, removed: int, seed: int, batch: int, prefix: int = 1) -> list[list[int]]:
    """The positions random selection keeps: its scores are uniform draws from ``seed``'s generator."""
    scores = torch.rand(batch, n, generator=torch.Generator().manual_seed(seed)).tolist()
    return [sorted([*range(prefix), *sorted(range(prefix, n), key=lambda t: row[t])[removed:]]) for row in scores]


@pytest.mark.parametrize("method", ["random", "tome_score", "evit", "tome", "importance"])
def test_pruning_and_merging_at_ratio_zero_are_the_unpruned_forward(eva, method):
    host, side = eva
    x = torch.randn(2, 3, side, side)
    unpruned = run_decoder(host, "cls", x)
    for llf in (True, False):
        assert torch.equal(pruned_forward(host, "cls", x, [0, 1], method, 0.0, llf), unpruned)
    assert torch.equal(merged_forward(host, "cls", x, 1, method, 0.0), unpruned)


def decoded_states(host, monkeypatch) -> dict:
    """The states ``host.decode`` is given, from here on."""
    seen = {}
    monkeypatch.setattr(host, "decode", lambda decoder, states, ctx: seen.update(states) or states[2][:, 0])
    return seen


@pytest.mark.parametrize("llf", [True, False])
def test_kept_tokens_run_with_the_rotary_rows_of_their_positions(eva, monkeypatch, llf):
    host, side = eva
    x = torch.randn(2, 3, side, side)
    seen = decoded_states(host, monkeypatch)
    pruned_forward(host, "cls", x, [0], "random", 0.5, llf, None, torch.Generator().manual_seed(5))
    keeps = {0: drawn_keep(17, 8, 5, 2)}
    torch.testing.assert_close(seen[2], reference(host, x, keeps, llf))
    # the rows matter: the grid's first rows in place of the kept positions' give another state
    shifted = reference(host, x, keeps, llf, shift=True)
    for b, k in enumerate(keeps[0]):
        assert not torch.allclose(seen[2][b, k], shifted[b, k], atol=1e-3)


@pytest.mark.parametrize("llf", [True, False])
def test_a_second_stage_reads_statistics_of_the_kept_tokens_at_their_positions(eva02, monkeypatch, llf):
    """tome_score's pass with statistics at block 1 runs on the survivors of block 0 (its scores
    planted: a fixed value per original position)."""
    host, side = eva02
    x = torch.randn(2, 3, side, side)
    table = torch.rand(2, 17, generator=torch.Generator().manual_seed(9))
    monkeypatch.setitem(METHODS, "tome_score",
                        replace(METHODS["tome_score"], score=lambda h, idx, *_: table.gather(1, idx)))
    seen = decoded_states(host, monkeypatch)
    pruned_forward(host, "cls", x, [0, 1], "tome_score", 0.5, llf)
    rank = [sorted(range(1, 17), key=lambda t: row[t]) for row in table.tolist()]
    keeps = {0: [sorted([0, *r[4:]]) for r in rank], 1: [sorted([0, *r[8:]]) for r in rank]}
    torch.testing.assert_close(seen[2], reference(host, x, keeps, llf))


def test_the_explicit_block_is_evas_own_with_statistics_and_proportional_attention(eva02):
    host, side = eva02
    vit = copy.deepcopy(host.vit).double()
    h, ctx = host.embed(torch.randn(2, 3, side, side))
    h, rope = h.double(), ctx.rope.double()
    block = vit.blocks[1]
    wrapped = EvaAttentionBlock(block, rope)
    out, stats = wrapped.with_stats(h)
    torch.testing.assert_close(out, block(h, rope=rope))
    assert stats.keys.shape == (2, 17, 16) and stats.cls_attn.shape == (2, 17)
    torch.testing.assert_close(stats.cls_attn.sum(-1), torch.ones(2, dtype=torch.float64))
    # a token of size 2 attends and is attended like two copies of itself at its position
    size = torch.ones(2, 17, 1, dtype=torch.float64)
    size[:, 5] = 2.0
    doubled = torch.cat([h, h[:, 5:6]], dim=1)
    twice = block(doubled, rope=torch.cat([rope, rope[4:5]]))[:, :17]
    torch.testing.assert_close(wrapped.forward(h, size), twice)
    torch.testing.assert_close(wrapped.with_stats(h, size)[0], twice)


def test_statistics_of_an_attention_not_re_derived_are_refused():
    host, side = build("vit_small_patch16_rope_mixed_224")
    ctx = host.embed(torch.randn(1, 3, side, side))[1]
    with pytest.raises(TypeError, match="EvaAttention only"):
        attention_block(host, 1, ctx).with_stats(torch.randn(1, 17, 32))


def test_tokens_merged_into_kept_ones_run_with_the_rotary_rows_of_those(eva):
    host, side = eva
    x = torch.randn(2, 3, side, side)
    torch.manual_seed(1)
    learned = LearnedMetric(ImportanceHead(17, 32, 16).eval(), Grid(1, 4, 4),
                            SpectralPullbackNetwork(17, 32, 4, 16, 1, 2).eval())
    y = merged_forward(host, "cls", x, 1, "importance", 0.5, learned)
    # the reference: the merge itself, then Eva's own last block per item with the kept tokens'
    # rotary rows and log(size) added to every attention logit over the key axis
    h, ctx = unreduced_prefix(host, x, 1)
    grid = Grid(1, 4, 4)
    merged, size, keep = reduce_tokens("importance", host.block(1, h, ctx), None, 8, grid, learned, None)
    last = []
    for b in range(2):
        rows = rope_of(host, 2, ctx.rope, [p - 1 for p in keep[b, 1:].tolist()])
        last.append(host.vit.blocks[2](merged[b:b + 1], rope=rows, attn_mask=size[b:b + 1, :, 0].log()[:, None, None]))
    torch.testing.assert_close(y, host.decode("cls", {2: torch.cat(last)}, ctx))


def test_tokens_without_a_single_position_are_refused(eva02):
    host, side = eva02
    x = torch.randn(2, 3, side, side)
    for method in ("evit", "tome"):
        with pytest.raises(ValueError, match="no single grid position"):
            merged_forward(host, "cls", x, 1, method, 0.5)
    with pytest.raises(ValueError, match="no single grid position"):
        pruned_forward(host, "cls", x, [0], "tome", 0.5, False)
