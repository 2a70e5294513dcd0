"""Trace and quadrature estimators (Hutchinson / Hutch++, leave-one-out and deflated residuals,
Lanczos quadrature, SLQ, the Ritz density) against exact spectra in float64, on maps
f(F) = A vec F with a planted spectrum A = U diag(s) Vᵀ (planted_spectra.py)."""

from __future__ import annotations

import math

import pytest
import torch
from planted_spectra import DT, FAST, SLOW, D, I, M, N, exact, planted_map

from taskgeom.diagnostics import _count_to_090
from taskgeom.linalg import (
    JacobianOperator,
    block_krylov_svd,
    deflated_residuals,
    exact_spectrum,
    hutchinson,
    hutchpp,
    lanczos_quadrature,
    leave_one_out_residuals,
    project_out,
    r90,
    rademacher,
    randomized_svd,
    slq_erank,
    xlogx,
)
from taskgeom.linalg.ritz_density import ritz_density

# -- traces ----------------------------------------------------------------------------------

def test_hutchinson_is_unbiased_and_counts_jvps():
    f, F, sigma, _ = exact(SLOW)
    op = JacobianOperator(f, F)
    est = hutchinson(op, num_probes=400, seed=0)
    truth = float(sigma.pow(2).sum())
    assert est.products == op.jvps == 400 and op.vjps == 0
    assert abs(est.estimate - truth) < 4 * est.stderr and abs(est.estimate / truth - 1) < 0.05


def test_hutchpp_reuses_the_sketch_and_beats_hutchinson():
    f, F, sigma, _ = exact(SLOW)
    truth = float(sigma.pow(2).sum())
    op = JacobianOperator(f, F)
    sk = randomized_svd(op, 20, power_iters=2)
    before = op.products
    pp = hutchpp(op, sk.Q, num_probes=20, seed=1, J_basis=sk.JQ)
    assert pp.products == op.products - before == 20            # the exact part was free
    assert pp.exact_part == pytest.approx(float(sk.ritz.pow(2).sum()), rel=1e-12)
    own = hutchpp(JacobianOperator(f, F), sk.Q, num_probes=20, seed=1)
    assert own.products == 30 + 20 and own.estimate == pytest.approx(pp.estimate, rel=1e-10)
    pp_err = [abs(hutchpp(op, sk.Q, 20, seed=s, J_basis=sk.JQ).estimate / truth - 1) for s in range(5)]
    h_err = [abs(hutchinson(op, 20, seed=s).estimate / truth - 1) for s in range(5)]
    assert sum(pp_err) < 0.5 * sum(h_err)
    with_exact_basis = hutchpp(op, exact_spectrum(f, F)[1], num_probes=5, seed=0)
    assert with_exact_basis.estimate == pytest.approx(truth, rel=1e-10)   # nothing left outside


def _residual_truth(op: JacobianOperator, Q: torch.Tensor) -> float:
    """tr(P g P) from the dense Jacobian, P = I − QQᵀ."""
    J = op.mm(torch.eye(op.in_dim, dtype=DT))
    return float((J - (J @ Q) @ Q.T).pow(2).sum())


@pytest.mark.parametrize("side", ["input", "output"])
def test_leave_one_out_and_deflated_trace_samples_are_unbiased_and_sharper_than_hutchinson(side):
    """On the residual of a 20-column sketch of σ_i = 0.93^i, whose leading directions carry most
    of Hutchinson's variance: every run's sample deflated by the other runs' vectors, and extra
    starts deflated by all of them, average to tr(P g P) over seeds with under half the plain
    Hutchinson samples' spread; one run alone is plain Hutchinson."""
    f, F = planted_map(0.93 ** I)
    op = JacobianOperator(f, F)
    sk = block_krylov_svd(op, 10, power_iters=1, seed=0)
    truth = _residual_truth(op, sk.Q)
    n_start = op.in_dim if side == "input" else op.out_dim
    plain_means, loo_means, extra_means = [], [], []
    for seed in range(40):
        Z = rademacher(n_start, 16, seed=seed)
        runs = lanczos_quadrature(op, Z[:, :8], 2, sk.Q, side=side, rule="radau", keep_vectors=True)
        plain = (runs.weights * runs.nodes).sum(1)
        loo = leave_one_out_residuals(*runs.krylov, runs.norms, output_starts=side == "output")
        if side == "output":
            S = op.rmm(Z[:, 8:])
            S, JS = S - sk.Q @ (sk.Q.T @ S), None
        else:
            S = Z[:, 8:] - sk.Q @ (sk.Q.T @ Z[:, 8:])
            JS = op.mm(S)
        extra = deflated_residuals(*runs.krylov, S, JS)
        plain_means.append(float(plain.mean()))
        loo_means.append(float(loo.mean()))
        extra_means.append(float(extra.mean()))
    for means in (plain_means, loo_means, extra_means):
        m = torch.tensor(means)
        assert abs(float(m.mean()) - truth) < 4 * float(m.std()) / len(means) ** 0.5
    spread = lambda means: float(torch.tensor(means).std())
    assert spread(loo_means) < 0.5 * spread(plain_means) and spread(extra_means) < 0.5 * spread(plain_means)
    one = lanczos_quadrature(op, Z[:, :1], 2, sk.Q, side=side, rule="radau", keep_vectors=True)
    torch.testing.assert_close(leave_one_out_residuals(*one.krylov, one.norms, output_starts=side == "output"),
                               (one.weights * one.nodes).sum(1), rtol=1e-9, atol=0)


@pytest.mark.parametrize("output_starts", [False, True])
def test_leave_one_out_samples_equal_explicit_projections_even_when_the_runs_spans_meet(output_starts):
    """The block-inverse formulas against bases built run by run; a vector that repeats its run's
    first (a closing Krylov space), a run that repeats another (spans that meet: the per-run path)
    and a zero vector (a closed run) included."""
    g = torch.Generator().manual_seed(0)
    n, m, k = 50, 6, 2
    J = torch.randn(40, n, generator=g, dtype=DT)
    X = torch.randn(m, n, k, generator=g, dtype=DT)
    norms = torch.rand(m, generator=g, dtype=DT) + 0.5
    X[2, :, 1] = 0

    def explicit(X):
        out = []
        for j in range(m):
            others = torch.cat([X[i] for i in range(m) if i != j], 1)
            U, S, _ = torch.linalg.svd(others, full_matrices=False)
            W = U[:, S > 1e-10 * S[0]]
            s = norms[j] * X[j, :, 0]
            left = s @ s - (W.T @ s).pow(2).sum() if output_starts else (J @ (s - W @ (W.T @ s))).pow(2).sum()
            out.append((J @ W).pow(2).sum() + left)
        return torch.stack(out)

    for case in ("independent", "dependent"):
        if case == "dependent":
            X[1, :, 1] = 2 * X[1, :, 0]
            X[4] = X[3]
        JX = torch.einsum("Mn,mnk->mMk", J, X)
        torch.testing.assert_close(leave_one_out_residuals(X, JX, norms, output_starts), explicit(X),
                                   rtol=1e-10, atol=1e-9)
    S = torch.randn(n, 3, generator=g, dtype=DT)              # extra starts, deflated by all runs
    W = torch.linalg.svd(torch.cat(list(X), 1), full_matrices=False)
    W = W.U[:, W.S > 1e-10 * W.S[0]]
    want = (J @ W).pow(2).sum() + ((S.pow(2).sum(0) - (W.T @ S).pow(2).sum(0)) if output_starts
                                   else (J @ (S - W @ (W.T @ S))).pow(2).sum(0))
    got = deflated_residuals(X, JX, S, None if output_starts else J @ S)
    torch.testing.assert_close(got, want, rtol=1e-10, atol=1e-9)


# -- SLQ -------------------------------------------------------------------------------------

def exact_erank(sigma):
    p = sigma.pow(2) / sigma.pow(2).sum()
    p = p[p > 0]
    return math.exp(-float((p * p.log()).sum()))


def test_lanczos_quadrature_is_exact_for_the_trace_and_counts_products():
    f, F, sigma, _ = exact(SLOW)
    op = JacobianOperator(f, F)
    Z = rademacher(N * D, 6, seed=0)
    quad = lanczos_quadrature(op, Z, steps=7)
    assert quad.products == 6 * (2 * 7 - 1) and quad.nodes.shape == (6, 7)   # the last step needs no VJP
    torch.testing.assert_close(quad.weights.sum(1), Z.pow(2).sum(0), rtol=1e-10, atol=0)   # ‖z‖²
    JZ = op.mm(Z).pow(2).sum(0)
    torch.testing.assert_close((quad.weights * quad.nodes).sum(1), JZ, rtol=1e-9, atol=0)   # zᵀ g z


def _dense_gram(op: JacobianOperator) -> torch.Tensor:
    J = op.mm(torch.eye(op.in_dim, dtype=DT))   # (M, N·D)
    return J.T @ J


def test_radau_rule_fixes_a_node_at_zero_and_is_exact_to_degree_2s():
    f, F, sigma, _ = exact(SLOW)
    op = JacobianOperator(f, F)
    g = _dense_gram(JacobianOperator(f, F))
    Z = rademacher(N * D, 5, seed=2)
    s = 3
    radau = lanczos_quadrature(op, Z, steps=s, rule="radau")
    assert radau.products == op.products == 5 * 2 * s and radau.nodes.shape == (5, s + 1)
    assert radau.gauss is not None and radau.gauss.nodes.shape == (5, s)
    assert float(radau.nodes.min(1).values.abs().max()) < 1e-10 * float(radau.nodes.max())
    gz = Z
    for k in range(2 * s + 1):          # zᵀ gᵏ z: Radau is exact to degree 2s, Gauss to 2s − 1
        moment = (Z * gz).sum(0)
        torch.testing.assert_close((radau.weights * radau.nodes.pow(k)).sum(1), moment, rtol=1e-7, atol=1e-12)
        if k < 2 * s:
            torch.testing.assert_close((radau.gauss.weights * radau.gauss.nodes.pow(k)).sum(1), moment,
                                       rtol=1e-7, atol=1e-12)
        gz = g @ gz
    with pytest.raises(ValueError, match="rule"):
        lanczos_quadrature(op, Z, steps=2, rule="lobatto")


def test_gauss_and_radau_bracket_the_x_log_x_quadratic_form():
    """x log x has positive even and negative odd derivatives (from the 3rd): Gauss rules fall
    below zᵀ φ(g) z and Radau rules at 0 above it, run by run."""
    f, F, sigma, _ = exact(SLOW)
    op = JacobianOperator(f, F)
    lam, E = torch.linalg.eigh(_dense_gram(op))
    Z = rademacher(N * D, 8, seed=3)
    truth = ((E.T @ Z).pow(2) * xlogx(lam.clamp_min(0))[:, None]).sum(0)
    for s in (2, 3, 5):
        radau = lanczos_quadrature(op, Z, steps=s, rule="radau")
        gauss_value = (radau.gauss.weights * xlogx(radau.gauss.nodes)).sum(1)
        radau_value = (radau.weights * xlogx(radau.nodes)).sum(1)
        assert torch.all(gauss_value < truth) and torch.all(radau_value > truth)


def test_radau_on_a_closing_krylov_space_keeps_the_exact_gauss_rule():
    f, F, _, _ = exact(torch.cat([FAST[:4], torch.zeros(M - 4, dtype=DT)]))   # rank 4: runs close at step 4
    op = JacobianOperator(f, F)
    Z = rademacher(N * D, 3, seed=4)
    radau = lanczos_quadrature(op, Z, steps=8, rule="radau")
    torch.testing.assert_close((radau.gauss.weights * radau.gauss.nodes).sum(1), op.mm(Z).pow(2).sum(0),
                               rtol=1e-9, atol=0)
    for phi in (lambda x: x, xlogx):
        torch.testing.assert_close((radau.weights * phi(radau.nodes)).sum(1),
                                   (radau.gauss.weights * phi(radau.gauss.nodes)).sum(1), rtol=1e-8, atol=1e-12)


def test_output_side_lanczos_sees_the_same_deflated_spectrum():
    """J P Jᵀ on R^M and P g P on R^{N·D} share their nonzero eigenvalues: both sides give the
    same traces of x and x log x once the runs are long enough to close."""
    f, F, sigma, _ = exact(FAST)
    op = JacobianOperator(f, F)
    Q = randomized_svd(op, 5, oversample=0, power_iters=1).Q
    U = rademacher(M, 3, seed=1)
    out = lanczos_quadrature(op, U, steps=M, basis=Q, side="output")
    JtU = op.rmm(U)
    PJtU = JtU - Q @ (Q.T @ JtU)
    torch.testing.assert_close((out.weights * out.nodes).sum(1), PJtU.pow(2).sum(0), rtol=1e-9, atol=1e-12)
    J = torch.stack([op.mm(e[:, None])[:, 0] for e in torch.eye(N * D, dtype=DT)], 1)   # (M, N·D)
    P = torch.eye(N * D, dtype=DT) - Q @ Q.T
    lam = torch.linalg.eigvalsh(J @ P @ J.T).clamp_min(0)
    full = lanczos_quadrature(op, torch.eye(M, dtype=DT), steps=M, basis=Q, side="output")
    for phi in (lambda x: x, xlogx):
        assert out.trace(phi) == pytest.approx(float(phi(lam).sum()), rel=0.5)   # 3 starts: Hutchinson's spread
        assert full.trace(phi) * M == pytest.approx(float(phi(lam).sum()), rel=1e-6)  # unit starts: exact trace
    with pytest.raises(ValueError, match="side"):
        lanczos_quadrature(op, U, steps=2, side="left")


@pytest.mark.parametrize("side", ["input", "output"])
def test_ritz_density_counts_r90_where_the_pinched_spectrum_overcounts(side):
    """σ_i = 0.97^i (exact r_0.90 = 38) and a 20-column basis from one Krylov round, far from
    invariant: the Ritz values of the basis joined with P g P's exact spectrum (the pinched
    operator) need 4 eigenvalues too many; the Ritz density of 200 two-step runs is within ±1, and
    on the input side it keeps the Hutch++ trace exactly; calibrated to the runs' residual trace,
    it does on both sides and stays within ±1."""
    s = 0.97 ** I
    f, F = planted_map(s)
    lam = s.pow(2)
    T = float(lam.sum())
    exact_r90 = r90(torch.cumsum(lam, 0) / T)
    op = JacobianOperator(f, F)
    sk = block_krylov_svd(op, 10, power_iters=1, seed=0)
    J = op.mm(torch.eye(N * D, dtype=DT))
    P = torch.eye(N * D, dtype=DT) - sk.Q @ sk.Q.T
    pinched = torch.cat([sk.ritz.pow(2), torch.linalg.svdvals(J @ P).pow(2)])
    assert _count_to_090(pinched, torch.ones_like(pinched), T) - exact_r90 >= 3

    starts = rademacher(op.in_dim if side == "input" else op.out_dim, 200, seed=1)
    runs = lanczos_quadrature(op, starts, 2, sk.Q, side=side, rule="radau", keep_vectors=True)
    X, JX = runs.krylov
    torch.testing.assert_close(JX, torch.stack([op.mm(x) for x in X]), rtol=1e-9, atol=1e-12)  # images are J X
    density = ritz_density(sk.JQ, runs, output_starts=side == "output")
    assert abs(_count_to_090(density.nodes[0], density.weights[0], T) - exact_r90) <= 1
    # input starts count all N·D eigenvalues of g, null ones too; output starts J's rank (here M)
    assert float(density.weights.sum()) == pytest.approx(N * D if side == "input" else M, rel=0.05)
    hutchpp = float(sk.JQ.pow(2).sum()) + runs.trace(lambda x: x)    # ‖J Q‖_F² + mean ‖J P z‖²
    if side == "input":  # Σ θ · count is the Hutch++ estimate already
        torch.testing.assert_close(density.trace(lambda x: x), hutchpp, rtol=1e-10, atol=0)
    calibrated = ritz_density(sk.JQ, runs, output_starts=side == "output", residual_trace=runs.trace(lambda x: x))
    torch.testing.assert_close(calibrated.trace(lambda x: x), hutchpp, rtol=1e-10, atol=0)
    assert abs(_count_to_090(calibrated.nodes[0], calibrated.weights[0], T) - exact_r90) <= 1
    with pytest.raises(ValueError, match="keep_vectors"):
        ritz_density(sk.JQ, lanczos_quadrature(op, starts, 2, sk.Q, side=side), output_starts=False)
    if side == "output":
        with pytest.raises(ValueError, match="keep_vectors"):
            lanczos_quadrature(op, starts, 1, sk.Q, side=side, keep_vectors=True)


def test_plain_slq_erank_on_a_spread_spectrum():
    """Without deflation SLQ is only as good as Hutchinson on φ(g): fine when the spectrum is spread."""
    f, F, sigma, _ = exact(SLOW)
    plain = slq_erank(JacobianOperator(f, F), num_probes=30, steps=15, seed=0)
    assert plain.products == 30 * (2 * 15 - 1) and plain.top.numel() == 0
    assert plain.erank == pytest.approx(exact_erank(sigma), rel=0.10)


@pytest.mark.parametrize("spectrum", ["fast", "slow", "rank-deficient"])
def test_deflated_slq_erank_matches_the_exact_effective_rank(spectrum):
    s = {"fast": FAST, "slow": SLOW,
         "rank-deficient": torch.cat([0.9 ** I[:10], torch.zeros(M - 10, dtype=DT)])}[spectrum]
    f, F, sigma, _ = exact(s)
    truth = exact_erank(sigma)
    op = JacobianOperator(f, F)
    sk = randomized_svd(op, 20, power_iters=2)
    before = op.products
    deflated = slq_erank(op, num_probes=10, steps=5, seed=0, basis=sk.Q, J_basis=sk.JQ)
    assert deflated.products == op.products - before <= 10 * (2 * 5 - 1)
    assert deflated.erank == pytest.approx(truth, rel=0.05)
    assert deflated.frob2 == pytest.approx(float(sigma.pow(2).sum()), rel=0.03)
    # plain SLQ with the same kind of budget is far worse when a few directions dominate
    if spectrum == "fast":
        plain = slq_erank(JacobianOperator(f, F), num_probes=10, steps=5, seed=0)
        assert abs(plain.erank / truth - 1) > 5 * abs(deflated.erank / truth - 1)


def test_slq_stops_when_the_krylov_space_closes():
    s = torch.cat([torch.ones(3, dtype=DT), torch.zeros(M - 3, dtype=DT)])   # g: eigenvalues 1 (×3), 0
    f, F, sigma, _ = exact(s)
    op = JacobianOperator(f, F)
    res = slq_erank(op, num_probes=4, steps=10, seed=0)
    assert res.products < 4 * (2 * 10 - 1)                 # every run closed after 2 steps
    nodes = res.tail.nodes[res.tail.weights > 1e-12]
    assert torch.all((nodes - 1).abs().minimum(nodes.abs()) < 1e-8)   # quadrature nodes = {0, 1}
    assert res.erank == pytest.approx(res.frob2, rel=1e-8)  # log 1 = 0, 0 log 0 = 0: erank = T̂
    sk = randomized_svd(JacobianOperator(f, F), 3, oversample=2, power_iters=1)
    exact_part = slq_erank(JacobianOperator(f, F), 4, 10, basis=sk.Q, J_basis=sk.JQ)
    assert exact_part.erank == pytest.approx(3.0, rel=1e-8)  # zero tail: p log p → 0 handled


def test_project_out_is_the_orthogonal_projection_for_any_layout():
    Q = torch.linalg.qr(torch.randn(50, 6, dtype=DT)).Q
    P = torch.eye(50, dtype=DT) - Q @ Q.T
    for X in (torch.randn(50, 8, dtype=DT), torch.randn(8, 50, dtype=DT).T):   # contiguous and transposed
        Y = project_out(Q, X)
        torch.testing.assert_close(Y, P @ X)
        assert float((Q.T @ Y).abs().max()) < 1e-12
