"""Sketching estimators (randomized SVD, block Krylov, adaptive power iterations) and the spectral
summaries against exact spectra in float64, on maps f(F) = A vec F with a planted spectrum
A = U diag(s) Vᵀ (planted_spectra.py)."""

from __future__ import annotations

import pytest
import torch
from planted_spectra import DT, FAST, SLOW, D, I, M, N, exact

from taskgeom.linalg import (
    JacobianOperator,
    adaptive_power_iters,
    block_krylov_svd,
    cv,
    exact_spectrum,
    kappa_curve,
    r90,
    randomized_svd,
    subspace_alignment,
    token_energy,
)

# -- randomized SVD --------------------------------------------------------------------------

@pytest.mark.parametrize("q", [0, 1, 2])
def test_randomized_svd_counts_products_and_returns_orthonormal_modes(q):
    f, F, sigma, V = exact(FAST)
    op = JacobianOperator(f, F)
    sk = randomized_svd(op, r=20, oversample=10, power_iters=q, seed=3)
    assert sk.products == op.products == (2 * q + 2) * 30
    assert (op.jvps, op.vjps) == ((q + 1) * 30, (q + 1) * 30)
    assert sk.sigma.shape == (20,) and sk.V.shape == (N * D, 20) and sk.Q.shape == (N * D, 30)
    torch.testing.assert_close(sk.Q.T @ sk.Q, torch.eye(30, dtype=DT), rtol=0, atol=1e-10)
    torch.testing.assert_close(op.mm(sk.Q), sk.JQ, rtol=1e-9, atol=1e-12)  # JQ is exact
    assert torch.all(sk.sigma[:-1] >= sk.sigma[1:])
    if q == 2:  # fast decay: the leading σ are exact to high accuracy
        torch.testing.assert_close(sk.sigma[:10], sigma[:10], rtol=1e-8, atol=0)


def test_power_iterations_converge_to_the_exact_subspace():
    f, F, sigma, V = exact(SLOW)
    errors = [1 - subspace_alignment(V[:, :20], randomized_svd(JacobianOperator(f, F), 20, power_iters=q).V)
              for q in (0, 1, 2, 5)]
    assert errors[0] > errors[1] > errors[2] > errors[3]
    assert errors[3] < 0.01


def test_block_krylov_keeps_every_block_and_beats_power_iteration_at_equal_cost():
    f, F, sigma, V = exact(SLOW)
    errors = {}
    for name, run in (("krylov", lambda op: block_krylov_svd(op, 15, power_iters=2, seed=0)),
                      ("power", lambda op: randomized_svd(op, 15, oversample=0, power_iters=2, seed=0))):
        op = JacobianOperator(f, F)
        sk = run(op)
        assert sk.products == op.products == 6 * 15 and not sk.exact      # (2q + 2)·b, the same passes
        assert sk.Q.shape[1] == (45 if name == "krylov" else 15)
        torch.testing.assert_close(sk.Q.T @ sk.Q, torch.eye(sk.Q.shape[1], dtype=DT), rtol=0, atol=1e-10)
        torch.testing.assert_close(sk.JQ, op.mm(sk.Q), rtol=1e-8, atol=1e-10)   # J Q is the passes' own
        errors[name] = 1 - subspace_alignment(V[:, :15], sk.V)
    assert errors["krylov"] < 0.2 * errors["power"]
    with pytest.raises(ValueError, match="block"):
        block_krylov_svd(JacobianOperator(f, F), 20, block=5, power_iters=2)   # 3·5 < r
    op = JacobianOperator(f, F)                                 # M = 120 ≤ 6·20: reading J whole is cheaper
    whole = block_krylov_svd(op, 20, power_iters=2)
    assert whole.exact and whole.products == M and torch.allclose(whole.sigma, sigma[:20])


def test_sketch_is_exact_when_it_spans_everything():
    s = torch.cat([0.8 ** I[:8], torch.zeros(M - 8)])
    f, F, sigma, V = exact(s)
    small = lambda X: f(X)[:12]                           # M = 12 < r + oversample
    op = JacobianOperator(small, F)
    sk = randomized_svd(op, r=20)
    assert sk.exact and sk.products == 12 and sk.sigma.shape == (12,)
    torch.testing.assert_close(sk.sigma, exact_spectrum(small, F)[0], rtol=1e-10, atol=1e-12)


def test_adaptive_power_iters_stops_when_the_subspace_settles():
    f, F, _, _ = exact(FAST)
    op = JacobianOperator(f, F)
    fast = adaptive_power_iters(op, r=20, tol=1e-3, seed=0)
    assert fast.products == op.products == (2 * fast.power_iters + 2) * 30
    assert 1 - fast.alignments[-1] < 1e-3 and len(fast.alignments) == fast.power_iters
    f, F, _, V = exact(SLOW)
    slow = adaptive_power_iters(JacobianOperator(f, F), r=20, tol=1e-3, seed=0)
    assert slow.power_iters > fast.power_iters
    assert 1 - subspace_alignment(V[:, :20], slow.V) < 0.02
    capped = adaptive_power_iters(JacobianOperator(f, F), r=20, tol=1e-12, max_iters=3)
    assert capped.power_iters == 3


# -- summaries -------------------------------------------------------------------------------

def test_spectral_summaries_follow_the_definitions():
    sigma = torch.tensor([3.0, 2.0, 1.0, 0.5], dtype=DT)
    curve = kappa_curve(sigma, float(sigma.pow(2).sum()))
    torch.testing.assert_close(curve, torch.tensor([9, 13, 14, 14.25], dtype=DT) / 14.25)
    assert r90(curve) == 2 and r90(curve, 0.95) == 3 and r90(curve, 0.5) == 1 and r90(curve[:1]) is None
    Nt, Dt = 4, 3
    V = torch.linalg.qr(torch.randn(Nt * Dt, 4, dtype=DT)).Q
    e = token_energy(sigma, V, Nt, Dt)
    manual = torch.stack([sum(sigma[i] ** 2 * V.reshape(Nt, Dt, 4)[t, :, i].pow(2).sum() for i in range(4))
                          for t in range(Nt)])
    torch.testing.assert_close(e, manual)
    assert e.sum() == pytest.approx(float(sigma.pow(2).sum()))   # orthonormal V: all energy lands
    assert cv(e) == pytest.approx(float(e.std(unbiased=False) / e.mean()))
    assert cv(torch.ones(5, dtype=DT)) == 0.0
    assert subspace_alignment(V, V) == pytest.approx(1.0)
    W = torch.linalg.qr(torch.randn(Nt * Dt, 8, dtype=DT)).Q
    assert subspace_alignment(W[:, :4], W[:, 4:]) == pytest.approx(0.0, abs=1e-12)


def test_the_power_iteration_path_gives_each_q_what_a_separate_run_gives():
    from taskgeom.linalg import randomized_svd_path

    torch.manual_seed(0)
    A = torch.randn(40, 30, dtype=torch.float64) * torch.logspace(0, -3, 30, dtype=torch.float64)
    op = JacobianOperator(lambda F: A @ F.flatten(), torch.randn(6, 5, dtype=torch.float64))
    path = randomized_svd_path(op, 4, (1, 3), oversample=2, seed=7)
    assert op.products == (2 * 3 + 2) * 6
    for q in (1, 3):
        alone = randomized_svd(JacobianOperator(op.f, op.F), 4, 2, q, seed=7)
        torch.testing.assert_close(path[q].sigma, alone.sigma)
        torch.testing.assert_close(path[q].V.abs(), alone.V.abs())
