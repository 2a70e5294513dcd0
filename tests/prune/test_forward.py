"""Merging and pruning inside a model: identities at η = 0, exact reinsertion, the fused
statistics and proportional attention, the pullback distance against its definition."""

from __future__ import annotations

import pytest
import torch

from taskgeom.metric.head import ImportanceHead
from taskgeom.metric.spn import PredictedMetric, SpectralPullbackNetwork
from taskgeom.models.dpt import TinyDPT
from taskgeom.models.host import freeze, run_decoder
from taskgeom.models.vit import Grid, TimmViTHost, tiny_vit
from taskgeom.prune.cls_merge import merged_forward, merged_forward_from, unreduced_prefix
from taskgeom.prune.llf import TokenState, pruned_forward, stage_counts
from taskgeom.prune.methods import NAMES as METHODS
from taskgeom.prune.scores import LearnedMetric
from taskgeom.prune.soft_merge import pullback_distance
from taskgeom.prune.timm_blocks import block_forward, block_with_stats


@pytest.fixture(scope="module")
def cls_host():
    torch.manual_seed(0)
    return freeze(TimmViTHost(tiny_vit(32, 4, 2, 8, 32, num_classes=5)))


@pytest.fixture(scope="module")
def dpt_host():
    torch.manual_seed(0)
    return freeze(TinyDPT(32, 4, 2, 8, 32, read_layers=(0, 1, 2, 3), head_features=16))


def learned(dim: int = 32, tokens: int = 17) -> LearnedMetric:
    torch.manual_seed(1)
    return LearnedMetric(ImportanceHead(tokens, dim, 16).eval(), Grid(1, 4, 4),
                         SpectralPullbackNetwork(tokens, dim, 4, 16, 1, 2).eval())


@pytest.mark.parametrize("method", METHODS)
def test_merging_at_ratio_zero_is_the_unmodified_model(cls_host, method):
    x = torch.randn(3, 3, 32, 32)
    out = merged_forward(cls_host, "cls", x, 1, method, 0.0, learned(), torch.Generator().manual_seed(0))
    assert torch.equal(out, run_decoder(cls_host, "cls", x))


def test_one_prefix_serves_every_method_and_is_left_as_it_was(cls_host):
    x = torch.randn(3, 3, 32, 32)
    prefix = unreduced_prefix(cls_host, x, 2)
    before = prefix[0].clone()
    gen = lambda: torch.Generator().manual_seed(0)
    for method in METHODS:  # the prune-cls stage's order: one prefix, every method in turn
        shared = merged_forward_from(cls_host, "cls", prefix, 2, method, 0.5, learned(), gen())
        fresh = merged_forward(cls_host, "cls", x, 2, method, 0.5, learned(), gen())
        assert torch.equal(shared, fresh), method
    assert torch.equal(prefix[0], before)


@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("llf", [True, False])
def test_pruning_at_ratio_zero_is_the_unmodified_model(dpt_host, method, llf):
    x = torch.randn(2, 3, 32, 32)
    out = pruned_forward(dpt_host, "depth", x, [0, 1], method, 0.0, llf, learned(), torch.Generator().manual_seed(0))
    assert torch.equal(out, run_decoder(dpt_host, "depth", x))


@pytest.mark.parametrize("method", METHODS)
def test_every_method_runs_at_other_resolutions_and_changes_the_output(cls_host, dpt_host, method):
    x = torch.randn(2, 3, 48, 48)  # a 6 × 6 grid; the learned networks saw 4 × 4
    y = merged_forward(cls_host, "cls", x, 1, method, 0.5, learned(), torch.Generator().manual_seed(0))
    assert y.shape == (2, 32) and not torch.allclose(y, run_decoder(cls_host, "cls", x))
    d = pruned_forward(dpt_host, "depth", x, [0, 1], method, 0.5, True, learned(), torch.Generator().manual_seed(0))
    assert d.shape == (2, 48 * 48) and torch.isfinite(d).all()


def test_reinsertion_restores_every_token_at_its_place():
    g = torch.Generator().manual_seed(0)
    h = torch.randn(2, 10, 4, generator=g)
    state = TokenState(h.clone())
    state.remove(torch.tensor([[0, 2, 3, 5, 7, 9], [0, 1, 4, 6, 8, 9]]))
    assert state.positions().tolist() == [[0, 2, 3, 5, 7, 9], [0, 1, 4, 6, 8, 9]]
    state.remove(torch.tensor([[0, 1, 3, 5], [0, 2, 3, 4]]))
    assert state.positions().tolist() == [[0, 2, 5, 9], [0, 4, 6, 8]]
    state.h = state.h + 1.0  # the kept tokens move on; the removed ones stay frozen
    state.reinsert()
    moved = torch.zeros(2, 10, dtype=torch.bool)
    moved[0, [0, 2, 5, 9]] = moved[1, [0, 4, 6, 8]] = True
    assert torch.equal(state.h, torch.where(moved[..., None], h + 1.0, h))


def test_removals_are_spread_over_the_stages():
    assert stage_counts(10, 4) == [3, 3, 2, 2] and stage_counts(3, 1) == [3]


def test_block_statistics_come_from_the_same_pass(cls_host):
    block = cls_host.vit.blocks[0].double()
    try:
        x = torch.randn(2, 7, 32, dtype=torch.float64)
        out, stats = block_with_stats(block, x)
        torch.testing.assert_close(out, block(x))
        size = torch.tensor([1.0, 2.0, 1.0, 3.0, 1.0, 1.0, 2.0], dtype=torch.float64).expand(2, -1)[..., None]
        torch.testing.assert_close(block_with_stats(block, x, size)[0], block_forward(block, x, size))
        assert stats.keys.shape == (2, 7, 16) and stats.cls_attn.shape == (2, 7)
        torch.testing.assert_close(stats.cls_attn.sum(-1), torch.ones(2, dtype=torch.float64))
    finally:
        block.float()


def test_proportional_attention_makes_a_merged_token_count_as_its_copies(cls_host):
    """A token of size 2 attends and is attended like two identical tokens."""
    block = cls_host.vit.blocks[1].double()
    try:
        x = torch.randn(1, 6, 32, dtype=torch.float64)
        doubled = torch.cat([x, x[:, 3:4]], dim=1)
        size = torch.ones(1, 6, 1, dtype=torch.float64)
        size[0, 3] = 2.0
        torch.testing.assert_close(block_forward(block, x, size), block(doubled)[:, :6])
    finally:
        block.float()


def test_pullback_distance_matches_the_single_token_metric():
    g = torch.Generator().manual_seed(0)
    b, n, d, r = 2, 6, 5, 3
    x = torch.randn(b, n, d, generator=g, dtype=torch.float64)
    U = torch.linalg.qr(torch.randn(b, n * d, r, generator=g, dtype=torch.float64)).Q
    metric = PredictedMetric(U=U, lam=torch.rand(b, r, generator=g, dtype=torch.float64) + 0.1,
                             eps=torch.full((b,), 0.01, dtype=torch.float64))
    keep = torch.tensor([[0, 1, 3, 4], [0, 2, 3, 5]])
    drop = torch.tensor([[2, 5], [1, 4]])
    dist = pullback_distance(x, metric, keep, drop)
    for i in range(b):
        full = U[i] @ torch.diag(metric.lam[i]) @ U[i].T + metric.eps[i] * torch.eye(n * d, dtype=torch.float64)
        for a, t in enumerate(drop[i].tolist()):
            g_t = full[t * d:(t + 1) * d, t * d:(t + 1) * d]   # perturbations of token t alone
            for c, s in enumerate(keep[i, 1:].tolist()):
                diff = x[i, s] - x[i, t]
                torch.testing.assert_close(dist[i, a, c], diff @ g_t @ diff)
