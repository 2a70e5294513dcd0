"""The tractability diagnostic: κ_cap(r), effective rank, r_0.90 and token CV of a probe's
Jacobian, matrix-free (``diagnose``) or from the dense Jacobian (``diagnose_exact``).

Definitions (DESIGN.md, "Definitions"): g = JᵀJ, tr g = ‖J‖_F², σ_i descending;
κ_cap(r) = Σ_{i≤r} σ_i² / ‖J‖_F²; erank = exp(−Σ p_i log p_i), p_i = σ_i² / ‖J‖_F²;
r_0.90 = smallest r with κ_cap(r) ≥ 0.90; e_t = Σ_{i≤r} σ_i² ‖V_{t,i}‖²; CV = std_t(e)/mean_t(e).

How ``diagnose`` spends its products (ℓ = r + oversample, q = power_iters, s = lanczos_steps):

1. Sketch — randomized block power iteration (Halko et al. 2011) on A = Jᵀ:
   (2q + 2)·ℓ products, half JVPs, half VJPs. Gives σ_1..σ_r, the modes, the basis Q (ℓ columns)
   and J Q exactly (its last pass).
2. Residual — ``num_probes`` is the product budget of everything stochastic after the sketch:
   m = max(1, num_probes // (2s)) Rademacher starts, each s Lanczos steps on P g P
   (P = I − QQᵀ, the same sketch deflated): 2·m·s ≤ num_probes products. From those runs:
   - ‖J‖_F² = ‖J Q‖_F² + (1/m) Σ_j ‖J P z_j‖² — Hutch++ (Meyer et al. 2021) with the sketch's
     basis as its exact part (Gauss quadrature is exact for x, so the Lanczos runs yield exactly
     Hutch++'s residual samples); κ_cap's numerator and denominator share one sketch.
   - tr(g log g) = Σ_{i≤ℓ} φ(ritz_i²) + SLQ on P g P (Ubaru, Chen & Saad 2017) -> erank.
Defaults (r = 20, oversample = 10, q = 2, num_probes = 100, s = 5): 180 + 100 = 280 products
(140 JVPs + 140 VJPs; m = 10 starts). Short Lanczos runs and more starts, because the residual
trace (κ_cap's denominator) needs samples more than the deflated tail needs quadrature nodes.
Fewer is possible at some cost in accuracy, e.g. oversample = 5, q = 1, num_probes = 20 -> 120.
Runs stop early (fewer products) when every Lanczos run closes, e.g. on a rank-deficient J.
When ℓ ≥ min(M, N·D), J is read whole with min(M, N·D) products and everything is exact
(κ_cap = 1 once r ≥ rank); no stochastic stage runs.

r_0.90: from the ℓ Ritz values when κ_cap reaches 0.90 within the sketch (``r90_source =
"sketch"``); otherwise estimated beyond ℓ from the SLQ quadrature read as a spectral density —
each node θ stands for (its weight) eigenvalues of size θ — (``r90_source = "slq"``). The SLQ value
is coarse (a handful of nodes per run); treat it as an order of magnitude.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field

import torch
from torch import Tensor

from .linalg.dense import dense_jacobian
from .linalg.lanczos import Quadrature, entropy_from_traces, lanczos_quadrature, xlogx
from .linalg.operator import JacobianOperator
from .linalg.sketch import cv as coefficient_of_variation
from .linalg.sketch import kappa_curve as cumulative_capture
from .linalg.sketch import r90 as first_reaching
from .linalg.sketch import randomized_svd, token_energy
from .linalg.trace import rademacher

R90_LEVEL = 0.90


@dataclass
class Diagnosis:
    """One probe's diagnostic. sigma (r,) descending; modes (N, D, r) orthonormal right singular
    vectors; token_energy (N,); kappa_curve (r,) = κ_cap(1..r); products = JVPs + VJPs used.
    r is clipped to min(M, N·D). ``budget`` splits products by stage."""

    kappa_cap: float
    frob2: float
    erank: float
    r90: int
    cv: float
    sigma: Tensor
    modes: Tensor
    token_energy: Tensor
    products: int
    kappa_curve: Tensor
    jvps: int = 0
    vjps: int = 0
    r90_source: str = "exact"
    exact: bool = False
    budget: dict[str, int] = field(default_factory=dict)


def _summaries(sigma: Tensor, V: Tensor, frob2: float, N: int, D: int) -> dict:
    """Shared tail of both diagnoses: κ curve, modes, token energy and CV from top-r triplets."""
    curve = cumulative_capture(sigma, frob2) if frob2 > 0 else torch.ones_like(sigma)
    curve = curve.clamp(max=1.0)  # rounding only: Σ_{i≤r} σ_i² ≤ ‖J‖_F²
    e = token_energy(sigma, V, N, D)
    return dict(kappa_cap=float(curve[-1]), kappa_curve=curve, sigma=sigma, modes=V.reshape(N, D, -1),
                token_energy=e, cv=coefficient_of_variation(e) if float(e.mean()) > 0 else 0.0)


def diagnose_exact(f: Callable[[Tensor], Tensor], F: Tensor, r: int = 20) -> Diagnosis:
    """The diagnostic from the dense Jacobian (M, N·D) and its full SVD — the reference.
    erank, r90 and frob2 use the full spectrum. products = M (jacrev's VJPs)."""
    N, D = F.shape
    J = dense_jacobian(f, F)
    _, S, Vh = torch.linalg.svd(J, full_matrices=False)
    r = min(r, S.numel())
    lam = S.pow(2)
    frob2 = float(lam.sum())
    p = lam / frob2 if frob2 > 0 else lam
    erank = math.exp(-float(xlogx(p).sum())) if frob2 > 0 else 0.0
    full_curve = torch.cumsum(lam, 0) / frob2 if frob2 > 0 else torch.ones_like(lam)
    out = _summaries(S[:r], Vh[:r].T, frob2, N, D)
    return Diagnosis(frob2=frob2, erank=erank, r90=first_reaching(full_curve, R90_LEVEL) or S.numel(),
                     products=J.shape[0], vjps=J.shape[0], exact=True, r90_source="exact",
                     budget={"dense": J.shape[0]}, **out)


def _r90_from_density(ritz2: Tensor, tail: Quadrature | None, frob2: float) -> tuple[int, str]:
    """r_0.90 from the Ritz values ritz2 (ℓ,) = σ̂_i², continued by the SLQ density of the tail."""
    hit = first_reaching(torch.cumsum(ritz2, 0) / frob2, R90_LEVEL) if frob2 > 0 else 1
    if hit is not None or tail is None:
        return (hit if hit is not None else ritz2.numel() + 1), "sketch"
    need = R90_LEVEL * frob2 - float(ritz2.sum())
    m = tail.nodes.shape[0]
    theta, counts = tail.nodes.flatten(), tail.weights.flatten() / m  # eigenvalues θ, how many
    order = torch.argsort(theta, descending=True)
    theta, counts = theta[order], counts[order]
    energy = torch.cumsum(theta * counts, 0)
    k = int(torch.searchsorted(energy, torch.tensor(need, dtype=energy.dtype)))
    if k >= theta.numel():  # the estimated tail falls short of 0.90 T: count everything it holds
        return ritz2.numel() + math.ceil(float(counts.sum())), "slq"
    before = float(energy[k - 1]) if k > 0 else 0.0
    extra = float(counts[:k].sum()) + (need - before) / float(theta[k])
    return ritz2.numel() + max(1, math.ceil(extra)), "slq"


def diagnose(f: Callable[[Tensor], Tensor], F: Tensor, r: int = 20, num_probes: int = 100,
             power_iters: int = 2, seed: int = 0, *, oversample: int = 10, lanczos_steps: int = 5,
             linearize: bool = False) -> Diagnosis:
    """Matrix-free diagnostic of f: (N, D) -> (M,) at F (N, D); see the module docstring for the
    product budget. Seeds: the sketch draws from ``seed``, the SLQ starts from ``seed + 1``."""
    op = JacobianOperator(f, F, linearize=linearize)
    return diagnose_operator(op, r=r, num_probes=num_probes, power_iters=power_iters, seed=seed,
                             oversample=oversample, lanczos_steps=lanczos_steps)


def diagnose_operator(op: JacobianOperator, r: int = 20, num_probes: int = 100, power_iters: int = 2,
                      seed: int = 0, *, oversample: int = 10, lanczos_steps: int = 5) -> Diagnosis:
    """``diagnose`` on an existing JacobianOperator (its counters keep running)."""
    N, D = op.in_shape
    jvps0, vjps0 = op.jvps, op.vjps
    sk = randomized_svd(op, r, oversample=oversample, power_iters=power_iters, seed=seed)
    ritz2 = sk.ritz.pow(2)
    frob2, glogg = float(ritz2.sum()), float(xlogx(ritz2).sum())
    tail = None
    if not sk.exact and num_probes > 0:
        steps = max(1, min(lanczos_steps, num_probes // 2))
        starts = max(1, num_probes // (2 * steps))
        Z = rademacher(op.in_dim, starts, seed + 1, op.dtype, op.device)
        tail = lanczos_quadrature(op, Z, steps, basis=sk.Q, scale=float(ritz2[0]) if ritz2.numel() else None)
        frob2 += tail.trace(lambda x: x)      # Hutch++ residual: (1/m) Σ ‖J P z_j‖²
        glogg += tail.trace(xlogx)
    erank = math.exp(entropy_from_traces(frob2, glogg)) if frob2 > 0 else 0.0
    r90, source = _r90_from_density(ritz2, tail, frob2)
    if sk.exact:
        source = "exact"
    out = _summaries(sk.sigma, sk.V, frob2, N, D)
    return Diagnosis(frob2=frob2, erank=erank, r90=r90, products=op.products - jvps0 - vjps0,
                     jvps=op.jvps - jvps0, vjps=op.vjps - vjps0, r90_source=source, exact=sk.exact,
                     budget={"sketch": sk.products, "slq": tail.products if tail else 0}, **out)
