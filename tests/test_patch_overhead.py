"""``patching.pullback``'s cheaper algebra gives the single-token pullback distance by its definition
(``prune.soft_merge.pullback_distance`` on ``spn(x)``): the packed moment Gram is rawᵀraw, both
routes to U_tᵀ(x_s − x_t) and the QR fallback match the reference in float64, ``route`` picks the
route with fewer counted FLOPs and its cost model is what the flop counter counts, and a model
patched with importance computes what it computes with the reference distances."""

from __future__ import annotations

from pathlib import Path

import pytest
import timm
import torch
from torch.utils.flop_counter import FlopCounterMode

import taskgeom
from taskgeom.fitting.checkpoint import Fitted
from taskgeom.fitting.identity import describe
from taskgeom.metric.head import ImportanceHead
from taskgeom.metric.spn import SpectralPullbackNetwork
from taskgeom.models.vit import Grid
from taskgeom.patching import patched, pullback, reduce
from taskgeom.prune.scores import LearnedMetric
from taskgeom.prune.select import gather_tokens, split_lowest
from taskgeom.prune.soft_merge import pullback_distance as reference


def spn_of(tokens: int, dim: int, rank: int, width: int, seed: int = 0) -> SpectralPullbackNetwork:
    torch.manual_seed(seed)
    return SpectralPullbackNetwork(tokens, dim, rank, width, 1, 2).eval().double()


def reference_distance(spn, base: Grid, grid: Grid, x, keep, drop, prefix: int):
    """The definition: the SPN's metric at x (positions carried to ``grid``), then soft_merge's distance."""
    pos = pullback.spn_positions(spn, base, grid)[None].expand(x.shape[0], -1, -1)
    return reference(x, spn(x, pos), keep, drop, prefix)


CASES = [  # base grid, image grid, removed, D, r, w
    (Grid(1, 4, 4), Grid(1, 4, 4), 2, 32, 4, 16),
    (Grid(1, 4, 4), Grid(1, 4, 4), 14, 32, 4, 16),
    (Grid(3, 4, 4), Grid(3, 5, 3), 9, 24, 6, 8),
    (Grid(1, 6, 6), Grid(1, 6, 6), 30, 48, 5, 12),
]


@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("path", ["route", "rows", "tokens", "qr"])
def test_every_route_gives_the_reference_distance_in_float64(case, path, monkeypatch):
    base, grid, k, dim, rank, width = case
    n = grid.prefix + grid.rows * grid.cols
    spn = spn_of(base.prefix + base.rows * base.cols, dim, rank, width)
    torch.manual_seed(1)
    x = torch.randn(3, n, dim, dtype=torch.float64)
    keep, drop = split_lowest(torch.randn(3, n), k, grid.prefix)
    if path in ("rows", "tokens"):
        monkeypatch.setattr(pullback, "route", lambda *shape: path)
    if path == "qr":
        monkeypatch.setattr(pullback, "_factor", lambda spn, z: None)
    with torch.no_grad():
        want = reference_distance(spn, base, grid, x, keep, drop, grid.prefix)
        got = pullback.pullback_distance(spn, base, grid, x, keep, drop, grid.prefix)
    assert got.shape == (3, k, n - grid.prefix - k)
    torch.testing.assert_close(got, want, rtol=1e-9, atol=1e-12 * float(want.abs().max()))


def test_the_packed_gram_is_the_mode_projections_gram():
    spn = spn_of(17, 32, 5, 12)
    z = torch.randn(2, 17, 12, dtype=torch.float64)
    with torch.no_grad():
        raw = spn.modes(z).reshape(2, 17 * 32, 5)
        torch.testing.assert_close(pullback.gram(spn, z), raw.mT @ raw, rtol=1e-12, atol=1e-9)


def counted(fn) -> int:
    with FlopCounterMode(display=False) as counter, torch.no_grad():
        fn()
    return int(counter.get_total_flops())


@pytest.mark.parametrize("shape", [(20, 65, 192, 20, 64), (60, 5, 192, 20, 64), (48, 49, 768, 20, 64),
                                   (98, 98, 768, 20, 64), (8, 8, 32, 4, 16)])
def test_route_picks_the_route_the_counter_finds_cheaper(shape, monkeypatch):
    """Shapes (K', k, D, r, w): the 64-px fixture's and ViT-B's among them. Each route's counted FLOPs
    are twice ``route_costs``' multiply-adds per item, and ``route`` names the smaller."""
    kept, k, dim, rank, width = shape
    torch.manual_seed(0)
    spn = SpectralPullbackNetwork(kept + k, dim, rank, width, 1, 2).eval()
    z, x = torch.randn(2, kept + k, width), torch.randn(2, kept + k, dim)
    drop = torch.arange(kept, kept + k).expand(2, -1)
    xs, xt = x[:, :kept], gather_tokens(x, drop)
    pullback.weights(spn)
    flops = {}
    for name in ("rows", "tokens"):
        monkeypatch.setattr(pullback, "route", lambda *args, name=name: name)
        flops[name] = counted(lambda: pullback._raw_coordinates(spn, z, xs, xt, drop))
    monkeypatch.undo()
    assert flops == {name: 2 * 2 * cost for name, cost in pullback.route_costs(kept, k, dim, rank, width).items()}
    assert pullback.route(kept, k, dim, rank, width) == min(flops, key=lambda name: (flops[name], name != "rows"))


def tiny_vit() -> torch.nn.Module:
    torch.manual_seed(0)
    return timm.create_model("vit_tiny_patch16_224", pretrained=False, depth=4, embed_dim=32, num_heads=2, img_size=32,
                             patch_size=8, num_classes=5, dynamic_img_size=True).eval()


def random_fit(model: torch.nn.Module) -> Fitted:
    torch.manual_seed(1)
    metric = LearnedMetric(ImportanceHead(17, 32, 16), Grid(1, 4, 4), SpectralPullbackNetwork(17, 32, 4, 16, 1, 2))
    return Fitted(metric, 1, "logits", "merge", describe(model), {"prefix": 1, "dim": 32}, {}, {}, Path("fit-dir"), {})


@pytest.mark.parametrize("path", ["rows", "tokens"])
def test_a_patched_model_computes_what_the_reference_distance_gives(path, monkeypatch):
    """The 4-block ViT patched at block 1 by importance, at η 0.25, 0.5 and 0.75 and on a grid other
    than the fit's: its logits and the tokens it keeps are those of the same patch merging by the
    reference distance."""
    vit, x = tiny_vit(), torch.randn(2, 3, 40, 48)
    fit = random_fit(vit)
    with torch.no_grad():
        for ratio in (0.25, 0.5, 0.75):
            with monkeypatch.context() as m:
                m.setattr(reduce, "pullback_distance", reference_distance)
                taskgeom.patch(vit, fit, ratio, "importance")
                want, kept = vit(x), patched(vit).kept
            with monkeypatch.context() as m:
                m.setattr(pullback, "route", lambda *shape: path)
                taskgeom.patch(vit, fit, ratio, "importance")
                got = vit(x)
            torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-5)
            assert torch.equal(patched(vit).kept, kept)
    taskgeom.unpatch(vit)
