"""JacobianOperator against the dense Jacobian in float64: products, adjoint, counters."""

from __future__ import annotations

import pytest
import torch

from taskgeom.linalg import JacobianOperator, dense_jacobian, exact_spectrum, gram_spectrum

DT = torch.float64


def tanh_map(M: int = 30, N: int = 6, D: int = 5, seed: int = 0):
    """f(F) = A tanh(B vec F) + C vec F: nonlinear, so J depends on F."""
    g = torch.Generator().manual_seed(seed)
    A, B, C = (torch.randn(rows, N * D, generator=g, dtype=DT) for rows in (M, N * D, M))
    F = torch.randn(N, D, generator=g, dtype=DT)
    return (lambda X: A @ torch.tanh(B @ X.reshape(-1)) + 0.1 * C @ X.reshape(-1)), F


def test_dense_jacobian_matches_the_closed_form():
    f, F = tanh_map()
    g = torch.Generator().manual_seed(0)
    A, B, C = (torch.randn(30, 30, generator=g, dtype=DT) for _ in range(3))  # M = N·D = 30
    x = F.reshape(-1)
    expected = A @ torch.diag(1 - torch.tanh(B @ x) ** 2) @ B + 0.1 * C
    torch.testing.assert_close(dense_jacobian(f, F), expected, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("linearize", [False, True])
def test_matvec_and_rmatvec_match_dense(linearize):
    f, F = tanh_map()
    J = dense_jacobian(f, F)                                  # (M, N·D)
    op = JacobianOperator(f, F, linearize=linearize)
    g = torch.Generator().manual_seed(1)
    V = torch.randn(7, *F.shape, generator=g, dtype=DT)
    U = torch.randn(4, op.out_dim, generator=g, dtype=DT)
    torch.testing.assert_close(op.matvec(V), V.reshape(7, -1) @ J.T, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(op.rmatvec(U), (U @ J).reshape(4, *F.shape), rtol=1e-12, atol=1e-12)
    X, Y = V.reshape(7, -1).T, U.T
    torch.testing.assert_close(op.mm(X), J @ X, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(op.rmm(Y), J.T @ Y, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(op.gram_mm(X), J.T @ (J @ X), rtol=1e-11, atol=1e-11)
    torch.testing.assert_close(op.y, f(F))


def test_products_are_counted_per_column():
    f, F = tanh_map()
    op = JacobianOperator(f, F)
    assert (op.jvps, op.vjps, op.products) == (0, 0, 0)
    op.matvec(torch.randn(5, *F.shape, dtype=DT))
    op.rmatvec(torch.randn(3, op.out_dim, dtype=DT))
    op.gram_mm(torch.randn(op.in_dim, 2, dtype=DT))        # 2 JVPs + 2 VJPs
    assert (op.jvps, op.vjps, op.products) == (7, 5, 12)
    assert (op.in_dim, op.out_dim, op.in_shape, op.dtype) == (30, 30, (6, 5), DT)


def test_bad_shapes_are_rejected():
    f, F = tanh_map()
    op = JacobianOperator(f, F)
    with pytest.raises(ValueError, match="matvec expects"):
        op.matvec(torch.randn(2, 5, 6, dtype=DT))
    with pytest.raises(ValueError, match="rmatvec expects"):
        op.rmatvec(torch.randn(2, 31, dtype=DT))


def test_zoo_probe_operator_matches_dense():
    from taskgeom.models.zoo import build
    from taskgeom.probes import ProbeMap

    torch.manual_seed(0)
    host = build(dict(kind="cls", embed_dim=16, depth=3, num_heads=2, patch_size=8, img_size=32)).double()
    probe = ProbeMap(host, "cls", [1]).at(torch.randn(3, 32, 32, dtype=DT))
    J = dense_jacobian(probe.f, probe.F)
    op = JacobianOperator(probe.f, probe.F)
    V = torch.randn(3, *probe.F.shape, dtype=DT)
    U = torch.randn(3, op.out_dim, dtype=DT)
    torch.testing.assert_close(op.matvec(V), V.reshape(3, -1) @ J.T, rtol=1e-9, atol=1e-10)
    torch.testing.assert_close(op.rmatvec(U).reshape(3, -1), U @ J, rtol=1e-9, atol=1e-10)


def test_exact_spectrum_is_the_svd():
    f, F = tanh_map(M=12)
    sigma, V = exact_spectrum(f, F)
    J = dense_jacobian(f, F)
    assert sigma.shape == (12,) and V.shape == (30, 12)
    assert torch.all(sigma[:-1] >= sigma[1:])
    torch.testing.assert_close(V.T @ V, torch.eye(12, dtype=DT), rtol=0, atol=1e-12)
    torch.testing.assert_close(torch.linalg.norm(J @ V, dim=0), sigma, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("shape, rank", [((12, 30), 12), ((30, 12), 12), ((40, 90), 5), ((90, 40), 5)])
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_gram_spectrum_is_the_svd(shape, rank, dtype):
    """Wide and tall, full rank and rank 5 (r = 8 asks for modes past the rank: the SVD fallback):
    every singular value and the top-r subspace of the SVD, to the Gram's float64 rounding."""
    g = torch.Generator().manual_seed(0)
    J = (torch.randn(shape[0], rank, generator=g, dtype=DT) @ torch.randn(rank, shape[1], generator=g, dtype=DT)
         * torch.logspace(0, -3, shape[1], dtype=DT)).to(dtype)
    r = 8
    sigma, V = gram_spectrum(J, r)
    _, S, Vh = torch.linalg.svd(J.to(DT), full_matrices=False)
    assert sigma.dtype == V.dtype == dtype and sigma.shape == (min(shape),) and V.shape == (shape[1], r)
    tol = 1e-10 if dtype == DT else 1e-5
    floor = 2 * (torch.finfo(DT).eps * min(shape)) ** 0.5 if dtype == DT else tol  # the docstring's bound / σ_1
    torch.testing.assert_close(sigma.to(DT), S, rtol=0, atol=floor * float(S[0]))
    torch.testing.assert_close(sigma.to(DT) ** 2, S ** 2, rtol=0, atol=tol * float(S[0]) ** 2)
    k = min(r, rank)
    torch.testing.assert_close(V.T.to(DT) @ V.to(DT), torch.eye(r, dtype=DT), rtol=0, atol=10 * tol)
    overlap = torch.linalg.svdvals(Vh[:k] @ V[:, :k].to(DT))   # cosines of the principal angles
    torch.testing.assert_close(overlap, torch.ones(k, dtype=DT), rtol=0, atol=10 * tol)
