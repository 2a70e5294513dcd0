"""Dense reference: the whole Jacobian and its exact SVD. For tests and small probes only
(DESIGN.md, "Core objects": the operator is never formed except by this reference)."""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor
from torch.func import jacrev


def dense_jacobian(f: Callable[[Tensor], Tensor], F: Tensor, chunk_size: int | None = 256) -> Tensor:
    """f: (N, D) -> (M,), F (N, D) -> J (M, N·D), row-major over (token, channel)
    (the same flattening as ``F.reshape(-1)``). Costs M VJPs (jacrev vmaps the pullback,
    ``chunk_size`` rows at a time so memory stays bounded on large outputs)."""
    J = jacrev(f, chunk_size=chunk_size)(F.detach())
    return J.reshape(-1, F.numel())


def exact_spectrum(f: Callable[[Tensor], Tensor], F: Tensor) -> tuple[Tensor, Tensor]:
    """-> (sigma (k,) descending, right singular vectors V (N·D, k)), k = min(M, N·D),
    by torch.linalg.svd of the dense Jacobian."""
    J = dense_jacobian(f, F)
    _, sigma, Vh = torch.linalg.svd(J, full_matrices=False)
    return sigma, Vh.T
