"""Trace of the pullback metric, tr g = ‖J‖_F² (DESIGN.md, "Definitions"), from JVPs only.

Hutchinson (1989): tr g = E_z zᵀ g z = E_z ‖J z‖², z Rademacher.
Hutch++ (Meyer, Musco, Musco & Woodruff 2021): tr g = tr(Qᵀ g Q) + tr(P g P), P = I − QQᵀ; the
first term is exact (‖J Q‖_F²), Hutchinson only sees the residual, whose variance is far smaller
when Q holds the dominant directions. Here Q is *given* — the power-iteration basis — so κ_cap's
numerator (Σ_{i≤r} σ_i² from that sketch) and denominator share one sketch.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from .operator import JacobianOperator


@dataclass
class TraceEstimate:
    """estimate = exact_part + residual; stderr: standard error of the stochastic part."""

    estimate: float
    exact_part: float
    residual: float
    stderr: float
    num_probes: int
    products: int


def rademacher(n: int, k: int, seed: int, dtype: torch.dtype = torch.float64,
               device: torch.device | str = "cpu") -> Tensor:
    """(n, k) matrix of independent ±1 entries drawn from ``seed``."""
    gen = torch.Generator(device=device).manual_seed(seed)
    return torch.randint(0, 2, (n, k), generator=gen, device=device).to(dtype).mul_(2).sub_(1)


def _mean_and_stderr(samples: Tensor) -> tuple[float, float]:
    k = samples.numel()
    if k == 0:
        return 0.0, 0.0
    err = float(samples.std() / k ** 0.5) if k > 1 else float("inf")
    return float(samples.mean()), err


def hutchinson(op: JacobianOperator, num_probes: int, seed: int = 0) -> TraceEstimate:
    """‖J‖_F² ≈ (1/m) Σ_j ‖J z_j‖², z_j Rademacher (N·D,). Products: m JVPs."""
    start = op.products
    Z = rademacher(op.in_dim, num_probes, seed, op.dtype, op.device)  # (N·D, m)
    samples = op.mm(Z).pow(2).sum(0)                                  # (m,)
    mean, err = _mean_and_stderr(samples)
    return TraceEstimate(mean, 0.0, mean, err, num_probes, op.products - start)


def hutchpp(op: JacobianOperator, basis: Tensor, num_probes: int, seed: int = 0,
            J_basis: Tensor | None = None) -> TraceEstimate:
    """Hutch++ (Meyer et al. 2021) on g = JᵀJ with a given orthonormal basis Q (N·D, k).

    tr g = ‖J Q‖_F² + (1/m) Σ_j ‖J (I − QQᵀ) z_j‖².
    Products: k JVPs for the exact part, or none when ``J_basis`` = J Q (M, k) is passed (e.g.
    ``Sketch.JQ``, already paid for by the power iteration); m JVPs for the residual.
    """
    start = op.products
    JQ = op.mm(basis) if J_basis is None else J_basis
    exact = float(JQ.pow(2).sum())
    Z = rademacher(op.in_dim, num_probes, seed, op.dtype, op.device)
    Z = Z - basis @ (basis.T @ Z)                                     # project out the sketch
    samples = op.mm(Z).pow(2).sum(0)
    mean, err = _mean_and_stderr(samples)
    return TraceEstimate(exact + mean, exact, mean, err, num_probes, op.products - start)
