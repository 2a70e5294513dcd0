"""Top right singular triplets of J from a sketch that ends on a block of VJPs, and the Hutchinson
estimate of diag(JᵀJ) its first block gives for free (``projected_svd``).

Halko, Martinsson & Tropp (2011), Alg. 4.4 (randomized subspace iteration) + Alg. 5.1 (direct
SVD), applied to A = J (M × N·D) with the test matrix JᵀΩ, Ω Gaussian (M, ℓ):

    W_0 = JᵀΩ;  for k = 1..q:  P_k = orth(J orth(W_{k−1})),  W_k = Jᵀ P_k;  (P_0 = orth(Ω))
    J ≈ P_q P_qᵀ J = P_q (W_q)ᵀ,  and the SVD W_q = V S Uᵀ gives σ ≈ S, modes V.

range(W_q) = range((JᵀJ)^q JᵀΩ) is the right subspace ``sketch.randomized_svd`` reaches at the same
q; the triplets are those of the left projection P_q P_qᵀ J instead of the Rayleigh–Ritz image J Z
of the right basis, which costs one block of JVPs more. Products: (2q + 1)·ℓ — (q + 1)·ℓ VJPs and
q·ℓ JVPs — against ``randomized_svd``'s (2q + 2)·ℓ; q = 0 is the one-pass sketch (P_0 = orth(Ω),
W_0 R⁻¹ with Ω = P_0 R, no further product). Each σ_i of P Pᵀ J is at most J's own σ_i (a
projection's singular values interlace below).

diag(JᵀJ) by Hutchinson (Girard 1989; Hutchinson 1989) with Gaussian starts: E ΩΩᵀ = ℓ·I_M, so
E (1/ℓ) Σ_j (JᵀΩ)_{:,j}² = diag(JᵀJ); summed over a token's D coordinates it estimates the block
norm ‖J_t‖_F², over all coordinates ‖J‖_F². W_0 is the sketch's own first block, so the estimate
costs no product beyond it. When min(M, N·D) ≤ (2q + 1)·ℓ, reading J whole is no dearer: J is
read whole instead (``sketch.exact_sketch``, min(M, N·D) products) and every number, diag(JᵀJ)
included, is exact.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from taskgeom.linalg.operator import JacobianOperator
from taskgeom.linalg.sketch import exact_sketch


@dataclass
class ProjectedSketch:
    """Rank-r partial SVD of J from ``projected_svd``.

    Attributes:
        sigma: (r,) the top singular values, descending.
        V: (N·D, r) orthonormal right singular vectors (the modes).
        ritz: (ℓ,) every singular value of the projected J (of J itself when ``exact``), descending.
        diag: (N·D,) the estimate of diag(JᵀJ) (exact when ``exact``), rows ordered as ``F.reshape(-1)``.
        products: JVPs + VJPs spent.
        power_iters: q.
        exact: J was read whole (min(M, N·D) ≤ (2q + 1)·ℓ).
    """

    sigma: Tensor
    V: Tensor
    ritz: Tensor
    diag: Tensor
    products: int
    power_iters: int
    exact: bool = False


def projected_cost(out_dim: int, in_dim: int, r: int, oversample: int, power_iters: int) -> int:
    """Products ``projected_svd`` spends: min(min(M, N·D), (2q + 1)·ℓ), ℓ = min(r + oversample, M, N·D);
    the first when J is read whole."""
    full = min(out_dim, in_dim)
    return min(full, (2 * power_iters + 1) * min(r + max(oversample, 0), full))


def _orth(X: Tensor) -> tuple[Tensor, Tensor]:
    """X (n, k) -> (Q, R) of its reduced Householder QR."""
    out = torch.linalg.qr(X)
    return out.Q, out.R


def projected_svd(op: JacobianOperator, r: int, power_iters: int = 1, oversample: int = 10,
                  seed: int = 0) -> ProjectedSketch:
    """The module docstring's sketch at q = ``power_iters``, with diag(JᵀJ) from its first block.

    Args:
        op: the Jacobian operator.
        r: the rank of the result (≥ 1; clipped to min(M, N·D)).
        power_iters: q ≥ 0.
        oversample: extra sketch columns, ℓ = r + oversample (clipped to min(M, N·D)).
        seed: seeds the Gaussian test matrix Ω (M, ℓ), drawn as ``sketch.randomized_svd`` draws it.

    Returns:
        The ProjectedSketch; ``products`` is ``projected_cost``.

    Raises:
        ValueError: r < 1 or q < 0.
    """
    if r < 1 or power_iters < 0:
        raise ValueError(f"projected_svd needs r ≥ 1 and q ≥ 0; got r={r}, q={power_iters}")
    full = min(op.in_dim, op.out_dim)
    r, ell = min(r, full), min(r + max(oversample, 0), full)
    start = op.products
    if full <= (2 * power_iters + 1) * ell:
        whole = exact_sketch(op, r)
        diag = whole.Q.pow(2) @ whole.ritz.pow(2)
        return ProjectedSketch(whole.sigma, whole.V, whole.ritz, diag, op.products - start, power_iters, True)
    gen = torch.Generator(device=op.device).manual_seed(seed)
    omega = torch.randn(op.out_dim, ell, generator=gen, dtype=op.dtype, device=op.device)
    W = op.rmm(omega)                                   # (N·D, ℓ) = JᵀΩ
    diag = W.pow(2).mean(dim=1)
    P, R = _orth(omega)
    W = torch.linalg.solve_triangular(R, W, upper=True, left=False)     # Jᵀ P_0 = JᵀΩ R⁻¹
    for _ in range(power_iters):
        P = _orth(op.mm(_orth(W)[0]))[0]               # (M, ℓ) = orth(J orth(W))
        W = op.rmm(P)
    V, S, _ = torch.linalg.svd(W, full_matrices=False)
    return ProjectedSketch(S[:r], V[:, :r], S, diag, op.products - start, power_iters)
