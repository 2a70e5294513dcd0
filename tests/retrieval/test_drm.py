"""The Decoder Retrieval Metric: a symmetric seminorm of the difference, batched search equal
to the paired form, and training that lowers the held-out regression loss."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from taskgeom.evaluate.tasks import silog
from taskgeom.metric.head import ImportanceHead
from taskgeom.retrieval.drm import DecoderRetrievalMetric, cross_distance, pair_distance, silog_matrix
from taskgeom.retrieval.evaluate import recall_at_k, two_stage
from taskgeom.stages.retrieval import regression_loss, train_variant


def drm(dim: int = 6, tokens: int = 5, rank: int = 3) -> DecoderRetrievalMetric:
    torch.manual_seed(0)
    return DecoderRetrievalMetric(ImportanceHead(tokens, dim, 8), dim, rank).double().eval()


def test_distance_to_itself_is_zero_and_it_is_symmetric():
    m = drm()
    F, G = torch.randn(4, 5, 6, dtype=torch.float64), torch.randn(4, 5, 6, dtype=torch.float64)
    with torch.no_grad():
        assert torch.equal(m(F, F), torch.zeros(4, dtype=torch.float64))
        torch.testing.assert_close(m(F, G), m(G, F))
        assert (m(F, G) > 0).all()


@pytest.mark.parametrize("c", [0.5, 2.0, -3.0])
def test_the_metric_at_fixed_weights_is_a_seminorm_linear_in_the_difference(c):
    m = drm()
    F, G = torch.randn(3, 5, 6, dtype=torch.float64), torch.randn(3, 5, 6, dtype=torch.float64)
    with torch.no_grad():
        (P, w), (Q, v) = m.embed(F), m.embed(G)
        torch.testing.assert_close(pair_distance(P, w, P + c * (Q - P), v), abs(c) * pair_distance(P, w, Q, v))
        # a difference inside A's kernel costs nothing: a seminorm, not a norm
        kernel = torch.linalg.svd(m.A.detach()).Vh[-1]                       # (D,), A @ kernel = 0
        H = F + kernel
        torch.testing.assert_close(pair_distance(P, w, H @ m.A.T, v), torch.zeros(3, dtype=torch.float64))


def test_batched_search_equals_the_paired_distance():
    m = drm()
    F, G = torch.randn(4, 5, 6, dtype=torch.float64), torch.randn(7, 5, 6, dtype=torch.float64)
    with torch.no_grad():
        (P, w), (Q, v) = m.embed(F), m.embed(G)
        full = cross_distance(P, w, Q, v)
        pairs = pair_distance(P.repeat_interleave(7, 0), w.repeat_interleave(7, 0), Q.repeat(4, 1, 1), v.repeat(4, 1))
    torch.testing.assert_close(full, pairs.view(4, 7))


def test_silog_matrix_is_pairwise_silog():
    g = torch.Generator().manual_seed(0)
    a, b = (torch.rand(3, 50, generator=g, dtype=torch.float64) + 0.5,
            torch.rand(4, 50, generator=g, dtype=torch.float64) + 0.5)
    full = silog_matrix(a.log(), b.log())
    for i in range(3):
        torch.testing.assert_close(full[i], silog(a[i].expand(4, -1), b))


def test_training_lowers_the_held_out_regression_loss():
    torch.manual_seed(1)
    n, tokens, dim = 40, 5, 6
    F = torch.randn(n, tokens, dim)
    hidden = torch.randn(2, dim)  # the "decoder" only sees two directions of token 0 and 1
    proj = torch.einsum("ntd,kd->ntk", F[:, :2], hidden).flatten(1)
    true = torch.cdist(proj, proj) + 1e-3
    model = DecoderRetrievalMetric(ImportanceHead(tokens, dim, 8), dim, 3)
    held = np.arange(30, 40)
    i, j = np.triu_indices(len(held), 1)
    with torch.no_grad():
        before = regression_loss(model(F[held[i]], F[held[j]]), true[held[i], held[j]]).item()
    cfg = {"steps": 150, "batch_size": 32, "lr": 0.01, "seed": 0, "distill_weight": 1.0}
    curve = train_variant(model, F, true, torch.rand(n, tokens) + 0.1, np.arange(30), held, cfg, True, False,
                          "retrieval test")
    assert curve[-1]["heldout_regression"] < 0.5 * before


def test_recall_and_two_stage_search():
    true = np.array([[0.1, 0.2, 0.3, 0.4]])
    assert recall_at_k(np.array([[0.2, 0.1, 0.5, 0.4]]), true, 2) == 1.0
    assert recall_at_k(np.array([[0.9, 0.1, 0.5, 0.4]]), true, 2) == 0.5
    staged = two_stage(np.array([[0.5, 0.1, 0.2, 0.9]]), np.array([[0.0, 3.0, 2.0, 1.0]]), 2)
    assert staged[0, 2] == 2.0 and staged[0, 1] == 3.0 and np.isinf(staged[0, [0, 3]]).all()
