"""The SPN: its metric-vector product equals the dense rank-r-plus-isotropic metric (float64),
V1 of modes set to the exact subspace is 1, and a few training steps beat the random init."""

from __future__ import annotations

import torch

from taskgeom.linalg import JacobianOperator, exact_sketch
from taskgeom.metric.spn import (
    PredictedMetric,
    SpectralPullbackNetwork,
    captured_energy,
    metric_vector_product,
    spn_loss,
    subspace_alignment_batch,
)


def test_metric_vector_product_matches_the_dense_metric():
    torch.manual_seed(0)
    b, n, r = 3, 40, 5
    U = torch.linalg.qr(torch.randn(b, n, r, dtype=torch.float64)).Q
    lam, eps = torch.rand(b, r, dtype=torch.float64) + 0.1, torch.rand(b, dtype=torch.float64)
    v = torch.randn(b, n, dtype=torch.float64)
    dense = U @ torch.diag_embed(lam) @ U.transpose(1, 2) + eps[:, None, None] * torch.eye(n, dtype=torch.float64)
    got = metric_vector_product(PredictedMetric(U, lam, eps), v)
    torch.testing.assert_close(got, (dense @ v.unsqueeze(-1)).squeeze(-1))


def test_alignment_is_one_on_the_exact_subspace_and_about_r_over_n_at_random():
    torch.manual_seed(0)
    A = torch.randn(30, 6, 4, dtype=torch.float64)
    op = JacobianOperator(lambda F: (A.reshape(30, -1) @ F.flatten()).sin(), torch.randn(6, 4, dtype=torch.float64))
    V = exact_sketch(op, 5).V.unsqueeze(0)                   # (1, 24, 5)
    assert abs(float(subspace_alignment_batch(V, V)) - 1.0) < 1e-12
    rotated = V @ torch.linalg.qr(torch.randn(5, 5, dtype=torch.float64)).Q   # same subspace, other basis
    assert abs(float(subspace_alignment_batch(rotated, V)) - 1.0) < 1e-12
    sigma = torch.linspace(3, 1, 5, dtype=torch.float64).unsqueeze(0)
    assert abs(float(captured_energy(rotated, V, sigma)) - 1.0) < 1e-12
    random = torch.linalg.qr(torch.randn(200, 24, 5, dtype=torch.float64)).Q
    assert abs(float(subspace_alignment_batch(random, V.expand(200, -1, -1)).mean()) - 5 / 24) < 0.03


def test_a_few_training_steps_beat_the_random_init_on_held_out_features():
    torch.manual_seed(0)
    N, D, r = 6, 4, 3
    W = torch.randn(D, r)
    base = torch.linalg.qr(torch.randn(N * D, r)).Q                  # a shared subspace plus a feature tilt
    def batch(n):
        F = torch.randn(n, N, D)
        V = torch.linalg.qr(base + 0.1 * F.flatten(1).unsqueeze(-1) * W.sum()).Q
        return F, V, torch.tensor([[3.0, 2.0, 1.0]]).expand(n, r), torch.full((n,), 20.0)
    model = SpectralPullbackNetwork(N, D, r, width=16, depth=1, heads=2)
    F_test, V_test, _, _ = batch(64)
    with torch.no_grad():
        before = float(subspace_alignment_batch(model(F_test).U, V_test).mean())
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    for _ in range(300):
        F, V, s, fro = batch(16)
        loss = spn_loss(model(F), V, s, fro)
        opt.zero_grad()
        loss.backward()
        opt.step()
    with torch.no_grad():
        after = float(subspace_alignment_batch(model(F_test).U, V_test).mean())
    assert after > 0.6 and after > 3 * before, (before, after)
