"""What makes ``taskgeom fit`` cheaper, checked against exact answers in float64: the projected
sketch (``linalg.projected``: its product count, its accuracy, the exact route it takes when the
sketch would span J's row space, the Hutchinson diagonal of its first block), the product count
the estimate announces (``fitting.targets.products_per_image``) and the estimate's line."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from taskgeom.fitting import estimate
from taskgeom.fitting.estimate import Estimate, batch_of
from taskgeom.fitting.targets import SKETCHES, Geometry, products_per_image, projected_row
from taskgeom.linalg import JacobianOperator, dense_jacobian, randomized_svd, subspace_alignment, token_energy
from taskgeom.linalg.projected import projected_cost, projected_svd
from taskgeom.linalg.transposed import TransposedOperator
from taskgeom.pipeline import fit_command
from taskgeom.probes import Probe

DT = torch.float64
N, D = 8, 8


def planted(M: int, s: torch.Tensor, seed: int = 0):
    """f(F) = A vec F with A = U diag(s) Vᵀ (M × N·D; s cut to min(M, N·D) values), and a point F."""
    s = s[:min(M, N * D)]
    g = torch.Generator().manual_seed(seed)
    U = torch.linalg.qr(torch.randn(M, s.numel(), generator=g, dtype=DT)).Q
    V = torch.linalg.qr(torch.randn(N * D, s.numel(), generator=g, dtype=DT)).Q
    A = U @ torch.diag(s) @ V.T
    return (lambda X: A @ X.reshape(-1)), torch.randn(N, D, generator=g, dtype=DT)


def dense_truth(f, F, r: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(σ_1..r, e_t of the top r, diag(JᵀJ)) from the dense Jacobian."""
    J = dense_jacobian(f, F)
    _, S, Vh = torch.linalg.svd(J, full_matrices=False)
    return S[:r], token_energy(S[:r], Vh.T[:, :r], N, D), J.pow(2).sum(0)


@pytest.mark.parametrize("q", [0, 1, 2])
def test_the_projected_sketch_spends_2q_plus_1_blocks(q):
    f, F = planted(80, 0.8 ** torch.arange(80, dtype=DT))
    op = JacobianOperator(f, F)
    sk = projected_svd(op, r=4, power_iters=q, oversample=4, seed=1)
    assert sk.products == op.products == (2 * q + 1) * 8 == projected_cost(80, N * D, 4, 4, q)
    assert (op.vjps, op.jvps) == ((q + 1) * 8, q * 8) and not sk.exact
    torch.testing.assert_close(sk.V.T @ sk.V, torch.eye(4, dtype=DT), rtol=0, atol=1e-10)
    sigma, _, _ = dense_truth(f, F, 4)
    assert torch.all(sk.sigma <= sigma * (1 + 1e-10))          # a projection's σ lie below J's


def test_power_iterations_bring_the_projected_sketch_to_the_exact_triplets():
    f, F = planted(100, 0.5 ** torch.arange(100, dtype=DT))
    sigma, energy, _ = dense_truth(f, F, 4)
    errors = []
    for q in (0, 1, 3):
        sk = projected_svd(JacobianOperator(f, F), 4, q, oversample=4, seed=2)
        errors.append(float((token_energy(sk.sigma, sk.V, N, D) - energy).abs().max() / energy.max()))
    assert errors[0] > errors[1] > errors[2] and errors[2] < 1e-6


def test_it_matches_the_rayleigh_ritz_sketch_in_subspace_at_the_same_q():
    """Both reach range((JᵀJ)^q JᵀΩ) from the same Ω; on a slowly decaying spectrum their top-r
    subspaces are as close to the exact one as each other, within a few points."""
    f, F = planted(100, torch.arange(1, 101, dtype=DT) ** -0.5)
    _, Vh = torch.linalg.svd(dense_jacobian(f, F), full_matrices=False)[1:]
    exact = Vh.T[:, :5]
    for q in (1, 2):
        ours = projected_svd(JacobianOperator(f, F), 5, q, 5, seed=3).V
        theirs = randomized_svd(JacobianOperator(f, F), 5, 5, q, seed=3).V
        assert abs(subspace_alignment(exact, ours) - subspace_alignment(exact, theirs)) < 0.1


def test_the_exact_route_equals_the_randomized_route_on_a_small_output():
    """M = 24 outputs: where min(M, N·D) ≤ (2q + 1)·ℓ the sketch reads J whole in M VJPs (e_t, σ
    and diag(JᵀJ) exact), even with ℓ < M; where the sketch is cheaper it converges to the same e_t."""
    f, F = planted(24, 0.3 ** torch.arange(24, dtype=DT))
    sigma, energy, diag = dense_truth(f, F, 2)
    op = JacobianOperator(f, F)
    whole = projected_svd(op, 2, power_iters=1, oversample=6)          # 3ℓ = 24 ≥ M: no dearer to read J
    assert whole.exact and whole.products == op.vjps == 24 and op.jvps == 0
    assert projected_cost(24, N * D, 2, 6, 1) == 24
    torch.testing.assert_close(token_energy(whole.sigma, whole.V, N, D), energy, rtol=1e-10, atol=1e-14)
    torch.testing.assert_close(whole.diag, diag, rtol=1e-10, atol=1e-14)
    sketched = projected_svd(JacobianOperator(f, F), 2, power_iters=3, oversample=1, seed=5)
    assert not sketched.exact and sketched.products == 7 * 3 == projected_cost(24, N * D, 2, 1, 3)
    torch.testing.assert_close(token_energy(sketched.sigma, sketched.V, N, D), energy, rtol=1e-6, atol=1e-12)
    torch.testing.assert_close(sketched.sigma, sigma, rtol=1e-8, atol=0)


def test_the_first_block_is_an_unbiased_estimate_of_the_block_norms():
    """E (1/ℓ) Σ_j ((JᵀΩ)_{:,j})² = diag(JᵀJ): the mean over 300 seeds is within 3% of the exact
    block norms ‖J_t‖_F² (one seed's error is about 30% at ℓ = 8)."""
    f, F = planted(40, torch.arange(1, 41, dtype=DT) ** -0.5)
    _, _, diag = dense_truth(f, F, 4)
    block = diag.reshape(N, D).sum(1)
    runs = torch.stack([projected_svd(JacobianOperator(f, F), 4, 0, 4, seed=s).diag for s in range(300)])
    mean = runs.mean(0).reshape(N, D).sum(1)
    assert float(((mean - block) / block).abs().max()) < 0.03
    one = runs[0].reshape(N, D).sum(1)
    assert float(((one - block) / block).abs().max()) > 0.03        # the average is what converges


def test_the_transposed_pullback_gives_the_jvps_and_falls_back_where_it_cannot():
    g = torch.Generator().manual_seed(4)
    W1, W2 = torch.randn(N * D, 16, generator=g, dtype=DT), torch.randn(16, 12, generator=g, dtype=DT)
    f = lambda X: torch.tanh(X.reshape(-1) @ W1).pow(2) @ W2                     # nonlinear: a real second pass
    F = torch.randn(N, D, generator=g, dtype=DT)
    V = torch.randn(5, N, D, generator=g, dtype=DT)
    forward, transposed = JacobianOperator(f, F), TransposedOperator(f, F)
    torch.testing.assert_close(transposed.matvec(V), forward.matvec(V), rtol=1e-12, atol=1e-12)
    assert transposed.transposed and (transposed.jvps, transposed.vjps) == (5, 0)
    torch.testing.assert_close(transposed.rmatvec(torch.eye(12, dtype=DT)), dense_jacobian(f, F).reshape(12, N, D))

    def no_second_derivative(block):
        raise RuntimeError("derivative for aten::something is not implemented")

    fallback = TransposedOperator(f, F)
    fallback._jvp_block = no_second_derivative
    torch.testing.assert_close(fallback.matvec(V), forward.matvec(V), rtol=1e-12, atol=1e-12)
    assert not fallback.transposed and fallback.jvps == 5
    fallback.matvec(V[:2])
    assert fallback.jvps == 7


def test_a_projected_row_holds_the_pipelines_datasets_and_counts_its_products():
    f, F = planted(40, 0.7 ** torch.arange(40, dtype=DT))
    probe = Probe(F.float(), lambda X: f(X.double()).float(), (0,), N)
    geom = Geometry(N, D, 40, 4, 0, 2, 3, (32, 48))
    settings = {"sketch": "projected", "power_iters": 1, "oversample": 4, "block_norm_probes": 0}
    row = projected_row(probe, 4, 1, 4, 0, seed=0)
    assert set(row) == {"features", "q1/sigma", "q1/modes", "q1/importance", "block_norm", "frob2", "products"}
    assert int(row["products"]) == products_per_image(geom, settings) == 3 * 8
    assert row["frob2"] == pytest.approx(float(row["block_norm"].sum()), rel=1e-6)
    probed = projected_row(probe, 4, 1, 4, 16, seed=0)
    assert int(probed["products"]) == products_per_image(geom, {**settings, "block_norm_probes": 16}) == 24 + 16
    np.testing.assert_array_equal(probed["q1/importance"], row["q1/importance"])   # the probes leave e_t alone


def test_products_per_image_by_sketch_and_route():
    assert fit_command.SKETCHES == SKETCHES
    geom = Geometry(tokens=197, dim=384, outputs=1000, rank=20, prefix=1, rows=14, cols=14, input=(224, 224))
    base = {"sketch": "projected", "power_iters": 1, "oversample": 10, "block_norm_probes": 0}
    assert products_per_image(geom, base) == 90
    assert products_per_image(geom, {**base, "sketch": "rayleigh-ritz", "power_iters": 2,
                                     "block_norm_probes": 32}) == 6 * 30 + 32      # the pipeline's row
    classes = Geometry(tokens=65, dim=192, outputs=20, rank=20, prefix=1, rows=8, cols=8, input=(64, 64))
    assert products_per_image(classes, base) == products_per_image(classes, {**base, "sketch": "rayleigh-ritz"}) == 20


def test_the_estimate_line_adds_up_its_phases():
    plan = Estimate(images=64, products=90, row_s=3.0, head_steps=300, head_step_s=0.1, head_read_s=2.0,
                    spn_steps=40, spn_step_s=1.5, spn_read_s=4.0)
    assert plan.phases == {"targets": 192.0, "head": pytest.approx(32.0), "spn": 64.0}
    assert plan.line() == ("estimated 4.8 min (targets ~3.2 min for 64 images at 90 products each, head ~32 s, "
                           "SPN ~1.1 min)")
    no_spn = Estimate(images=0, products=90, row_s=0.0, head_steps=300, head_step_s=0.1, head_read_s=0.0, spn_steps=0,
                      spn_step_s=0.0, spn_read_s=0.0)
    assert no_spn.line() == "estimated 30 s (targets ~0 s for 0 images at 90 products each, head ~30 s)"
    assert batch_of(32, 51) == 32 and batch_of(32, 5) == 5


def test_the_reading_counts_each_row_once_where_the_rows_fit_in_memory(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr(estimate, "read_seconds", lambda row, layout, keys, rows: rows * 0.01)
    layout = {"features": ((10, 4), "<f4")}  # 160 bytes a row
    assert estimate.reading_seconds({}, layout, ("features",), 8, 100, 50) == pytest.approx(50 * 0.01)
    monkeypatch.setattr(estimate, "IN_MEMORY_BYTES", 50 * 160 - 1)
    assert estimate.reading_seconds({}, layout, ("features",), 8, 100, 50) == pytest.approx(100 * 8 * 0.01)
