"""Spectral density of g = JᵀJ by Rayleigh–Ritz on a deflation basis joined with each Lanczos
run's vectors — the density that r_0.90 counts beyond the sketch's basis (docs/design.md,
"Definitions": r_0.90 = smallest r with Σ_{i≤r} λ_i ≥ 0.90 tr g, λ_i = σ_i²).

Why not the Ritz values of the basis Q plus the SLQ nodes of P g P (P = I − QQᵀ): that is the
spectrum of the pinched operator QᵀgQ ⊕ PgP, which g's spectrum majorizes, so whenever Q is not
invariant it holds too little energy in its top eigenvalues and the count to 0.90 comes out high,
even with the residual's spectrum known exactly. Here the Ritz pairs (θ_k, W y_k) of g are taken on
W = [Q, X], X the runs' vectors in P's range, orthonormalised together, whose J-images the runs
already computed — so g's coupling between Q and the runs is kept, and the joint space resolves
more of the spectrum than Q alone — and each node stands for
  ‖y_k[Q]‖²                                       eigenvalues of Q's part (Σ_i ‖Qᵀv_i‖² δ(λ_i)), plus
  mean_j (y_kᵀ c_j)²  or  mean_j (y_kᵀ c_j)² ‖y_k[X]‖² / (y_k[X]ᵀ Hₓ y_k[X])   of the residual's,
c_j the coordinates of run j's start s_j in X and Hₓ = Xᵀ g X. Input-side starts
s_j = P z_j have E s sᵀ = P, so (vᵀ s)² averages to ‖P v‖², the residual's share of an
eigenvector v; output-side starts s_j = P Jᵀ z_j have E s sᵀ = P g P, so their weight is divided by
vᵀ P g P v (Hₓ's Rayleigh quotient) and scaled by ‖P v‖² (whitening). Σ_k (counts) δ(θ_k) then
estimates g's whole spectrum, Σ_i δ(λ_i). Rayleigh–Ritz resolves it only as far as the joint space
reaches; beyond the basis ``taskgeom.diagnostics`` counts the deep tail from the quadrature nodes.
``tests/linalg/test_estimators_quadrature.py`` checks, on a planted spectrum with a basis far from
invariant, that the pinched count comes out high and this density's within ±1 of the exact r_0.90.

Given ``residual_trace`` (the runs' Hutchinson estimate of tr P g P), the residual's counts are
scaled so that their energy Σ θ · count equals it. On the input side that holds already (the
density's trace is the Hutch++ estimate); the output side's whitening is only approximate — the
Ritz vectors are not eigenvectors of P g P — so its energy need not match, and near r_0.90, where
each eigenvalue holds a small share of ‖J‖_F², a shortfall delays the count. Calibrated, what is
left is the noise of the trace estimate itself (r_0.90 against the dense reference:
``benchmarks/diagnose_cost.py``).
"""

from __future__ import annotations

import torch
from torch import Tensor

from taskgeom.linalg.lanczos import Quadrature


def ritz_density(JQ: Tensor, runs: Quadrature, output_starts: bool,
                 residual_trace: float | None = None) -> Quadrature:
    """g's spectral density on the basis joined with the runs' vectors (see the module docstring).

    Args:
        JQ: (M, ℓ) = J Q for the orthonormal basis Q that the runs were deflated by.
        runs: from ``lanczos_quadrature(..., keep_vectors=True)`` (or several concatenated): X
            (m, n, k) in P's range, J X (m, M, k) and the start norms (m,).
        output_starts: the runs started on the output side (s_j = P Jᵀ z_j).
        residual_trace: scale the residual's counts to this energy; None to leave them.

    Returns:
        A one-row Quadrature: nodes (1, ℓ + K) the Ritz values of g on W = [Q, X], X all runs'
        vectors orthonormalised together (K ≤ m·k of them), and weights (1, ℓ + K) the number of
        eigenvalues each node stands for, so ``trace(φ)`` estimates tr φ(g) = Σ_i φ(λ_i) for
        φ(0) = 0. products = 0: every image was paid for by the runs.

    Raises:
        ValueError: ``runs`` kept no vectors.
    """
    if runs.krylov is None or runs.norms is None:
        raise ValueError("ritz_density needs runs from lanczos_quadrature(..., keep_vectors=True)")
    X, JX = runs.krylov
    m, n, k = X.shape
    X, JX = X.transpose(0, 1).reshape(n, m * k), JX.transpose(0, 1).reshape(JX.shape[1], m * k)  # run j: columns j·k …
    # One orthonormal basis of all runs' vectors from their Gram matrix, X C with
    # C = E diag(d)^(-1/2) on the kept eigenpairs (closed runs' zero columns drop out).
    G = X.T @ X
    d, E = torch.linalg.eigh(G)
    keep = d > 1e-10 * float(d.max())
    C = E[:, keep] * d[keep].rsqrt()
    JB = JX @ C                                                 # (M, K) images of the basis
    starts = (C.T @ G[:, ::k]) * runs.norms                     # (K, m) coordinates of the starts s_j
    ell = JQ.shape[1]
    Hx = JB.T @ JB                                              # Xᵀ g X in that basis
    cross = JQ.T @ JB
    H = torch.cat([torch.cat([JQ.T @ JQ, cross], 1), torch.cat([cross.T, Hx], 1)], 0)
    theta, Y = torch.linalg.eigh(H)
    Yq, Yx = Y[:ell], Y[ell:]                                   # (ℓ, ℓ+K), (K, ℓ+K)
    residual = (Yx.T @ starts).pow(2)                           # (ℓ+K, m): (y_kᵀ c_j)²
    if output_starts:  # whiten: divide by y_xᵀ Hₓ y_x, scale by ‖y_x‖²
        rayleigh = torch.einsum("ik,ij,jk->k", Yx, Hx, Yx)
        positive = rayleigh > 0
        whiten = torch.where(positive, Yx.pow(2).sum(0) / torch.where(positive, rayleigh, torch.ones_like(rayleigh)),
                             torch.zeros_like(rayleigh))
        residual = residual * whiten[:, None]
    residual = residual.mean(1)
    energy = float((theta.clamp_min(0) * residual).sum())
    if residual_trace is not None and energy > 0:
        residual = residual * (residual_trace / energy)
    counts = Yq.pow(2).sum(0) + residual
    return Quadrature(nodes=theta.clamp_min(0)[None], weights=counts[None], products=0)
