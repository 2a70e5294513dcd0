"""Projecting a block of vectors off an orthonormal basis, P X = (I − QQᵀ) X, the deflation that
the sketch's Gram–Schmidt, the residual's Lanczos runs and the trace samples all apply."""

from __future__ import annotations

from torch import Tensor


def project_out(basis: Tensor, X: Tensor) -> Tensor:
    """basis Q (n, ℓ) orthonormal, X (n, m) -> (I − QQᵀ) X (n, m).

    The coefficients are formed as (Xᵀ Q)ᵀ, not Qᵀ X: the blocks here are tall and narrow and
    often transposed views (``JacobianOperator.rmm`` returns one), and for narrow X (m ≈ 8) the
    CPU BLAS takes a slow path on Qᵀ X — 2–4× slower for n = 16,640–33,280, ℓ = 40–60 on 2 threads
    — while the other order costs the same as Qᵀ X at wider m."""
    return X - basis @ (X.T @ basis).T
