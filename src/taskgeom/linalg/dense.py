"""Dense reference: the whole Jacobian and its exact SVD. For tests and small probes only
(docs/design.md, "Core objects": the operator is never formed except by this reference)."""

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
