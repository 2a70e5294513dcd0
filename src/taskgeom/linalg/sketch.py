"""Randomized block power iteration for the top right singular vectors of J, and the spectral
summaries the diagnostic reads off them (DESIGN.md, "Definitions").

Halko, Martinsson & Tropp (2011), "Finding structure with randomness", Alg. 4.4 (randomized
subspace iteration with re-orthonormalisation) + Alg. 5.1 (direct SVD), applied to A = Jᵀ so
that A's left singular vectors are J's right singular vectors (the modes in R^{N·D}).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field

import torch
from torch import Tensor

from taskgeom.linalg.deflate import project_out
from taskgeom.linalg.operator import JacobianOperator


@dataclass
class Sketch:
    """Rank-r partial SVD of J from a width-ℓ sketch.

    sigma (r,) descending; V (N·D, r) orthonormal right singular vectors; Q (N·D, ℓ) the
    orthonormal basis the sketch ended on (its first r columns are V); JQ (M, ℓ) = J Q, known
    exactly from the last pass, so ‖JQ‖_F² is Hutch++'s exact part at no extra cost; ritz (ℓ,)
    all Ritz values (σ estimates of Q). ``exact`` is True when ℓ = min(M, N·D), i.e. the sketch
    spans J's whole row space and every number is exact up to rounding.
    """

    sigma: Tensor
    V: Tensor
    Q: Tensor
    JQ: Tensor
    ritz: Tensor
    products: int
    power_iters: int
    exact: bool = False
    alignments: list[float] = field(default_factory=list)


def _orth(X: Tensor) -> Tensor:
    """X (n, k) -> orthonormal basis of its range (n, k); Householder QR stays orthonormal even
    when X is rank-deficient, which is what keeps the power iteration stable."""
    return torch.linalg.qr(X).Q


def _rayleigh_ritz(Q: Tensor, JQ: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """Q (n, ℓ) orthonormal, JQ (M, ℓ) -> (ritz (ℓ,), V = Q W (n, ℓ), J V (M, ℓ)): the SVD of J
    restricted to span Q (Halko et al. 2011, Alg. 5.1)."""
    U, S, Wh = torch.linalg.svd(JQ, full_matrices=False)
    return S, Q @ Wh.T, U * S


def exact_sketch(op: JacobianOperator, r: int, chunk: int = 32) -> Sketch:
    """ℓ ≥ min(M, N·D): read J whole with min(M, N·D) products and take its SVD. Products go in
    blocks of ``chunk`` (a block of hundreds is slower on CPU: its intermediates leave the cache)."""
    n, m = op.in_dim, op.out_dim
    start = op.products
    eye = torch.eye(min(n, m), dtype=op.dtype, device=op.device)
    blocks = [eye[:, i:i + chunk] for i in range(0, eye.shape[1], chunk)]
    J = torch.cat([op.rmm(b) for b in blocks], 1).T if m <= n else torch.cat([op.mm(b) for b in blocks], 1)  # (M, N·D)
    U, S, Vh = torch.linalg.svd(J, full_matrices=False)
    V = Vh.T
    return Sketch(sigma=S[:r], V=V[:, :r], Q=V, JQ=U * S, ritz=S, products=op.products - start,
                  power_iters=0, exact=True)


def _power_rounds(op: JacobianOperator, ell: int, seed: int) -> Iterator[tuple[Tensor, Tensor]]:
    """Yield (Z_q, J Z_q) for q = 0, 1, 2, …; Z_q (N·D, ℓ) orthonormal, span Z_q = range(gᵠ Jᵀ Ω).

    q = 0 costs ℓ VJPs + ℓ JVPs; each further round ℓ VJPs + ℓ JVPs. The J Z_q pass both feeds the
    next round and gives the Rayleigh–Ritz step, so the total after q rounds is (2q + 2)·ℓ —
    Halko et al.'s count for q power iterations. Ω is Gaussian (M, ℓ), drawn from ``seed``.
    """
    gen = torch.Generator(device=op.device).manual_seed(seed)
    omega = torch.randn(op.out_dim, ell, generator=gen, dtype=op.dtype, device=op.device)
    Z = _orth(op.rmm(omega))         # (N·D, ℓ): range of Jᵀ Ω
    Y = op.mm(Z)                     # (M, ℓ)
    yield Z, Y
    while True:
        Z = _orth(op.rmm(Y))         # re-orthonormalise every round: keeps small σ from drowning
        Y = op.mm(Z)
        yield Z, Y


def _width(op: JacobianOperator, r: int, oversample: int) -> tuple[int, int]:
    if r < 1:
        raise ValueError(f"rank r must be ≥ 1, got {r}")
    full = min(op.in_dim, op.out_dim)
    return min(r, full), min(r + max(oversample, 0), full)


def randomized_svd(op: JacobianOperator, r: int, oversample: int = 10, power_iters: int = 2,
                   seed: int = 0) -> Sketch:
    """Top-r singular triplets of J by randomized block power iteration (Halko et al. 2011).

    Products: (2q + 2)·ℓ with ℓ = r + oversample and q = ``power_iters`` — (q+1)·ℓ VJPs and
    (q+1)·ℓ JVPs; 180 at r = 20, oversample = 10, q = 2. r and ℓ are clipped to min(M, N·D); when
    ℓ reaches it, J is read whole instead with min(M, N·D) products and the result is exact.
    """
    r, ell = _width(op, r, oversample)
    if ell == min(op.in_dim, op.out_dim):
        return exact_sketch(op, r)
    start = op.products
    for q, (Z, Y) in enumerate(_power_rounds(op, ell, seed)):
        if q == power_iters:
            break
    ritz, V, JV = _rayleigh_ritz(Z, Y)
    return Sketch(sigma=ritz[:r], V=V[:, :r], Q=V, JQ=JV, ritz=ritz, products=op.products - start,
                  power_iters=power_iters)


def randomized_svd_path(op: JacobianOperator, r: int, qs: tuple[int, ...], oversample: int = 10,
                        seed: int = 0) -> dict[int, Sketch]:
    """``randomized_svd`` at every q in ``qs`` from one run of the power rounds: the result at q is
    the one ``randomized_svd(power_iters=q)`` gives with the same seed, and the whole path costs
    what the largest q alone costs, (2·max(qs) + 2)·ℓ products."""
    r, ell = _width(op, r, oversample)
    if ell == min(op.in_dim, op.out_dim):
        exact = exact_sketch(op, r)
        return {q: exact for q in qs}
    start, out = op.products, {}
    for q, (Z, Y) in enumerate(_power_rounds(op, ell, seed)):
        if q in qs:
            ritz, V, JV = _rayleigh_ritz(Z, Y)
            out[q] = Sketch(sigma=ritz[:r], V=V[:, :r], Q=V, JQ=JV, ritz=ritz, products=op.products - start,
                            power_iters=q)
        if q == max(qs):
            return out
    raise AssertionError("unreachable")


def adaptive_power_iters(op: JacobianOperator, r: int, tol: float = 1e-3, max_iters: int = 15,
                         oversample: int = 10, seed: int = 0) -> Sketch:
    """Raise q until the recovered top-r subspace stops moving: stop at the first q ≥ 1 with
    1 − ‖V_qᵀ V_{q−1}‖_F² / r < tol (subspace alignment, DESIGN.md), or at ``max_iters``.

    The paper chooses q this way (its §4.2 / App. C.3: Halko et al.'s bound is loose at small q).
    Rayleigh–Ritz at every q is free (the J Z_q pass is needed anyway), so stopping at q costs
    exactly what ``randomized_svd(power_iters=q)`` costs: (2q + 2)·ℓ products. The chosen q is
    ``power_iters`` of the result; ``alignments[q-1]`` is the alignment of V_q with V_{q−1}.
    """
    r, ell = _width(op, r, oversample)
    if ell == min(op.in_dim, op.out_dim):
        return exact_sketch(op, r)
    start = op.products
    previous: Tensor | None = None
    alignments: list[float] = []
    for q, (Z, Y) in enumerate(_power_rounds(op, ell, seed)):
        ritz, V, JV = _rayleigh_ritz(Z, Y)
        if previous is not None:
            alignments.append(subspace_alignment(previous, V[:, :r]))
            if 1.0 - alignments[-1] < tol or q >= max_iters:
                break
        previous = V[:, :r]
    return Sketch(sigma=ritz[:r], V=V[:, :r], Q=V, JQ=JV, ritz=ritz, products=op.products - start,
                  power_iters=q, alignments=alignments)


def block_krylov_svd(op: JacobianOperator, r: int, block: int | None = None, power_iters: int = 2,
                     seed: int = 0, tol: float | None = None, max_iters: int = 15) -> Sketch:
    """Top-r singular triplets of J from the block Krylov space
    K = [JᵀΩ, g JᵀΩ, …, gᵠ JᵀΩ] (Musco & Musco 2015, "Randomized block Krylov methods for
    stronger and faster approximate SVD").

    The same passes as ``randomized_svd`` with ℓ = b = ``block`` (default r) and q =
    ``power_iters``, re-orthonormalised every round, but every block is kept: Rayleigh–Ritz runs
    on all (q + 1)·b columns, whose images J K the passes have already computed. Products:
    (2q + 2)·b, half VJPs, half JVPs (120 at r = 20, q = 2, for a 60-column basis). At q = 0 it is
    ``randomized_svd`` at q = 0. Ω is Gaussian (M, b), drawn from ``seed``. When min(M, N·D) is
    at most the (2q + 2)·b products the passes would cost, J is read whole instead (min(M, N·D)
    products) and the result is exact.

    Adaptive mode (``tol`` set; ``power_iters`` is then ignored): add rounds until the top-r
    subspace stops moving — 1 − alignment(V_q, V_{q−1}) < tol — or ``max_iters`` rounds. The
    Rayleigh–Ritz step after each round is free (J K is known), so stopping at q costs what a
    fixed q would. ``power_iters`` of the result is the q reached; ``alignments`` its history.
    """
    b = block or r
    rounds = max_iters if tol is not None else power_iters
    if r < 1 or b < 1 or (rounds + 1) * b < r:
        raise ValueError(f"block Krylov needs r ≥ 1 and (q + 1)·block ≥ r; got r={r}, block={b}, q={rounds}")
    full = min(op.in_dim, op.out_dim)
    r = min(r, full)
    least = 1 if tol is not None else power_iters     # the fewest rounds this call will run
    if full <= (2 * least + 2) * b:  # reading J whole is no dearer than the passes, and exact
        return exact_sketch(op, r)
    start = op.products
    gen = torch.Generator(device=op.device).manual_seed(seed)
    omega = torch.randn(op.out_dim, b, generator=gen, dtype=op.dtype, device=op.device)
    Z = _orth(op.rmm(omega))
    blocks, images = [Z], [op.mm(Z)]                   # K's blocks (N·D, b) and J K's (M, b)
    alignments: list[float] = []
    previous = _rayleigh_ritz(Z, images[0])[1][:, :r] if tol is not None else None
    for q in range(1, rounds + 1):
        K = torch.cat(blocks, 1)
        if K.shape[1] + b > full:                      # the basis cannot grow further
            break
        W = op.rmm(images[-1])                         # g × the newest block
        for _ in range(2):                             # block Gram–Schmidt against K, twice
            W = project_out(K, W)
        Z = _orth(W)
        Z = _orth(project_out(K, Z))                   # a closing Krylov space leaves W ≈ 0
        blocks.append(Z)
        images.append(op.mm(Z))
        if tol is not None:
            current = _rayleigh_ritz(torch.cat(blocks, 1), torch.cat(images, 1))[1][:, :r]
            alignments.append(subspace_alignment(previous, current))
            previous = current
            if 1.0 - alignments[-1] < tol:
                break
    ritz, V, JV = _rayleigh_ritz(torch.cat(blocks, 1), torch.cat(images, 1))
    return Sketch(sigma=ritz[:r], V=V[:, :r], Q=V, JQ=JV, ritz=ritz, products=op.products - start,
                  power_iters=len(blocks) - 1, alignments=alignments)


# -- spectral summaries (DESIGN.md, "Definitions") --------------------------------------------

def subspace_alignment(U: Tensor, Uhat: Tensor) -> float:
    """U, Û (n, r) orthonormal -> ‖UᵀÛ‖_F² / r ∈ [0, 1] (1 = same subspace)."""
    return float((U.T @ Uhat).pow(2).sum() / U.shape[1])


def kappa_curve(sigma: Tensor, frob2: float) -> Tensor:
    """sigma (r,) descending -> κ_cap(1..r) (r,), κ_cap(k) = Σ_{i≤k} σ_i² / ‖J‖_F²."""
    return torch.cumsum(sigma.pow(2), 0) / frob2


def r90(kappa_curve: Tensor, level: float = 0.90) -> int | None:
    """Smallest r with κ_cap(r) ≥ level (1-based), or None when the curve never reaches it."""
    hit = torch.nonzero(kappa_curve >= level - 1e-12)
    return int(hit[0, 0]) + 1 if hit.numel() else None


def token_energy(sigma: Tensor, V: Tensor, N: int, D: int) -> Tensor:
    """sigma (r,), V (N·D, r) -> e (N,), e_t = Σ_{i≤r} σ_i² ‖V_{t,i}‖² (V_{t,i}: token-t block
    of the i-th right singular vector; rows of V ordered as F.reshape(-1))."""
    blocks = V.reshape(N, D, -1).pow(2).sum(1)  # (N, r)
    return blocks @ sigma.pow(2)


def cv(e: Tensor) -> float:
    """Coefficient of variation std_t(e_t) / mean_t(e_t), population std over all N tokens."""
    return float(e.std(unbiased=False) / e.mean())
