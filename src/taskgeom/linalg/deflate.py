"""Projecting a block of vectors off an orthonormal basis, P X = (I − QQᵀ) X, the deflation that
the sketch's Gram–Schmidt, the residual's Lanczos runs and the trace samples all apply."""

from __future__ import annotations

from torch import Tensor


def project_out(basis: Tensor, X: Tensor) -> Tensor:
    """Project the columns of X off an orthonormal basis.

    The coefficients are formed as (Xᵀ Q)ᵀ, not Qᵀ X: the blocks here are tall and narrow and
    often transposed views (``JacobianOperator.rmm`` returns one), and on such blocks the CPU
    BLAS takes a slow path for Qᵀ X.

    Args:
        basis: Q (n, ℓ) with orthonormal columns.
        X: (n, m), contiguous or a transposed view.

    Returns:
        (I − QQᵀ) X, (n, m).
    """
    return X - basis @ (X.T @ basis).T
