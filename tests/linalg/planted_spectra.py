"""Planted-spectrum maps shared by the estimator tests: f(F) = A vec F, A = U diag(s) Vᵀ, in float64."""

from __future__ import annotations

import torch

from taskgeom.linalg import exact_spectrum

DT = torch.float64
M, N, D = 120, 15, 16


def planted_map(s: torch.Tensor, seed: int = 0):
    """f(F) = A vec F, A = U diag(s) Vᵀ (M × N·D) -> (f, F, exact σ descending, exact V)."""
    g = torch.Generator().manual_seed(seed)
    k = s.numel()
    U = torch.linalg.qr(torch.randn(M, k, generator=g, dtype=DT)).Q
    V = torch.linalg.qr(torch.randn(N * D, k, generator=g, dtype=DT)).Q
    A = U @ torch.diag(s) @ V.T
    F = torch.randn(N, D, generator=g, dtype=DT)
    return (lambda X: A @ X.reshape(-1)), F


I = torch.arange(1, M + 1, dtype=DT)
FAST, SLOW = 0.7 ** I, I ** -0.5             # σ_i: geometric vs λ_i = σ_i² ∝ 1/i


def exact(s):
    f, F = planted_map(s)
    sigma, V = exact_spectrum(f, F)
    return f, F, sigma, V
