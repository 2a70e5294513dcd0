"""Dense reference: the whole Jacobian, its exact SVD, and its spectrum from the Gram of its shorter side. For
tests and small probes only (docs/design.md, "Core objects": the operator is never formed except by this reference)."""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor
from torch.func import jacrev

from taskgeom.linalg.operator import product_mode


def dense_jacobian(f: Callable[[Tensor], Tensor], F: Tensor, chunk_size: int | None = 256) -> Tensor:
    """The whole Jacobian of f at F by reverse mode: M VJPs.

    Args:
        f: the probe map, (N, D) -> (M,).
        F: the point, (N, D).
        chunk_size: rows of J per vmapped pullback (jacrev's ``chunk_size``), so memory stays
            bounded on large outputs; None for all at once.

    Returns:
        J (M, N·D), columns row-major over (token, channel), the flattening of ``F.reshape(-1)``.
    """
    with product_mode():
        J = jacrev(f, chunk_size=chunk_size)(F.detach())
    return J.reshape(-1, F.numel())


def exact_spectrum(f: Callable[[Tensor], Tensor], F: Tensor) -> tuple[Tensor, Tensor]:
    """The exact singular values and right singular vectors of J, by ``torch.linalg.svd`` of the
    dense Jacobian.

    Args:
        f: the probe map, (N, D) -> (M,).
        F: the point, (N, D).

    Returns:
        sigma (k,) descending and V (N·D, k) orthonormal, k = min(M, N·D).
    """
    J = dense_jacobian(f, F)
    _, sigma, Vh = torch.linalg.svd(J, full_matrices=False)
    return sigma, Vh.T


GRAM_FLOOR = 1e-6  # σ_r / σ_1 below which Jᵀu / σ loses the right singular vector to the Gram's rounding


def gram_spectrum(J: Tensor, r: int) -> tuple[Tensor, Tensor]:
    """Every singular value of J and its top-r right singular vectors, from the eigendecomposition
    of the Gram matrix of J's shorter side, formed and decomposed in float64.

    The SVD of a wide J (M ≪ N·D, a probe reading several layers) costs about 4M²·N·D; the
    Gram J Jᵀ costs M²·N·D and its eigh O(M³). Then V_r = Jᵀ U_r / σ_r. In float64 a singular
    value's absolute error is about √(ε₆₄·M)·σ_1 (λ = σ² errs by ε·λ_1), below float32's SVD for
    float32 Jacobians; the values it blurs hold under ε·M of ‖J‖_F² each. When σ_r ≤ GRAM_FLOOR·σ_1
    the division cannot recover V_r and the SVD of J gives it instead.

    Args:
        J: (M, N·D).
        r: modes returned, at most min(M, N·D).

    Returns:
        sigma (min(M, N·D),) descending, in J's dtype, and V (N·D, r) orthonormal.
    """
    M, n = J.shape
    Jd = J.to(torch.float64)
    tall = M >= n
    lam, E = torch.linalg.eigh(Jd.T @ Jd if tall else Jd @ Jd.T)
    lam, E = lam.flip(0).clamp(min=0.0), E.flip(1)
    sigma = lam.sqrt()
    if tall:
        V = E[:, :r]
    elif r and sigma[r - 1] > GRAM_FLOOR * sigma[0]:
        V = (Jd.T @ E[:, :r]) / sigma[:r]
    else:
        V = torch.linalg.svd(Jd, full_matrices=False)[2][:r].T
    return sigma.to(J.dtype), V.to(J.dtype)
