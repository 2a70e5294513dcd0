"""Randomized sketches of the top right singular vectors of J, and the spectral summaries the
diagnostic reads off them (docs/design.md, "Definitions").

Halko, Martinsson & Tropp (2011), "Finding structure with randomness", Alg. 4.4 (randomized
subspace iteration with re-orthonormalisation) + Alg. 5.1 (direct SVD), applied to A = Jᵀ so
that A's left singular vectors are J's right singular vectors (the modes in R^{N·D}):
``randomized_svd``, ``randomized_svd_path`` and ``adaptive_power_iters``. Musco & Musco (2015),
"Randomized block Krylov methods for stronger and faster approximate SVD": the same passes with
every block kept, ``block_krylov_svd``. ``exact_sketch`` reads J whole when that is no dearer.

The power-iteration passes alternate VJPs and JVPs: Z_0 = orth(JᵀΩ), Z_{q+1} = orth(Jᵀ J Z_q),
each followed by J Z_q. That image both feeds the next round and gives the Rayleigh–Ritz step, so
stopping at any q costs (2q + 2)·ℓ products — Halko et al.'s count for q power iterations — and
the Rayleigh–Ritz result at every q is free.
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

    Attributes:
        sigma: (r,) the top singular values, descending.
        V: (N·D, r) orthonormal right singular vectors (the modes).
        Q: (N·D, ℓ) the orthonormal basis the sketch ended on; its first r columns are V.
        JQ: (M, ℓ) = J Q, known exactly from the last pass, so ‖JQ‖_F² is Hutch++'s exact part
            at no extra cost.
        ritz: (ℓ,) all Ritz values of J on Q (σ estimates), descending.
        products: JVPs + VJPs spent.
        power_iters: the q the sketch ended at.
        exact: True when ℓ = min(M, N·D): the sketch spans J's whole row space and every number
            is exact up to rounding.
        alignments: in adaptive mode, the alignment of the top-r subspace with the previous
            round's after each round.
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
    """Read J whole with min(M, N·D) products (VJPs when M ≤ N·D, else JVPs) and take its SVD.

    Args:
        op: the Jacobian operator.
        r: the rank of ``sigma`` and ``V``.
        chunk: products per block; a block of hundreds is slower on CPU (its intermediates
            leave the cache).

    Returns:
        A Sketch with ``exact=True``, ``Q`` all right singular vectors and ``power_iters=0``.
    """
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

    Each round costs ℓ VJPs + ℓ JVPs, so the total after q rounds is (2q + 2)·ℓ (see the module
    docstring). Ω is Gaussian (M, ℓ), drawn from ``seed``.
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
    """(r, ℓ = r + oversample), both clipped to min(M, N·D); r < 1 is a ValueError."""
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

    Args:
        op: the Jacobian operator.
        r: the rank of the result.
        oversample: extra sketch columns, ℓ = r + oversample.
        power_iters: q, the rounds of power iteration after the first pass.
        seed: seeds the Gaussian test matrix Ω (M, ℓ).

    Returns:
        The Sketch at q = ``power_iters`` (Q and JQ of width ℓ).

    Raises:
        ValueError: r < 1.
    """
    r, ell = _width(op, r, oversample)
    if ell == min(op.in_dim, op.out_dim):
        return exact_sketch(op, r)
    start = op.products
    for q, basis_and_image in enumerate(_power_rounds(op, ell, seed)):
        if q == power_iters:
            Z, Y = basis_and_image
            break
    ritz, V, JV = _rayleigh_ritz(Z, Y)
    return Sketch(sigma=ritz[:r], V=V[:, :r], Q=V, JQ=JV, ritz=ritz, products=op.products - start,
                  power_iters=power_iters)


def randomized_svd_path(op: JacobianOperator, r: int, qs: tuple[int, ...], oversample: int = 10,
                        seed: int = 0) -> dict[int, Sketch]:
    """``randomized_svd`` at every q in ``qs`` from one run of the power rounds.

    The result at q is the one ``randomized_svd(power_iters=q)`` gives with the same seed, and the
    whole path costs what the largest q alone costs, (2·max(qs) + 2)·ℓ products.

    Args:
        op: the Jacobian operator.
        r: the rank of each result.
        qs: the numbers of power iterations to report.
        oversample: extra sketch columns, ℓ = r + oversample.
        seed: seeds the Gaussian test matrix Ω (M, ℓ).

    Returns:
        {q: Sketch} for every q in ``qs`` (one shared exact Sketch when ℓ reaches min(M, N·D);
        ``products`` of each is what the path had spent when it reached q).

    Raises:
        ValueError: r < 1.
    """
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
    """Randomized power iteration that raises q until the recovered top-r subspace stops moving.

    Stops at the first q ≥ 1 with 1 − ‖V_qᵀ V_{q−1}‖_F² / r < tol (subspace alignment,
    docs/design.md, "Definitions"), or at ``max_iters``. The paper chooses q this way (§4.2,
    App. C.3: Halko et al.'s bound is loose at small q). Rayleigh–Ritz at every q is free, so
    stopping at q costs exactly what ``randomized_svd(power_iters=q)`` costs: (2q + 2)·ℓ products.

    Args:
        op: the Jacobian operator.
        r: the rank of the result.
        tol: the alignment error below which the subspace counts as settled.
        max_iters: the largest q.
        oversample: extra sketch columns, ℓ = r + oversample.
        seed: seeds the Gaussian test matrix Ω (M, ℓ).

    Returns:
        The Sketch at the chosen q (its ``power_iters``); ``alignments[q-1]`` is the alignment of
        V_q with V_{q−1}.

    Raises:
        ValueError: r < 1.
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
    """Top-r singular triplets of J from the block Krylov space K = [JᵀΩ, g JᵀΩ, …, gᵠ JᵀΩ]
    (Musco & Musco 2015): the passes of ``randomized_svd`` with ℓ = b, every block kept.

    Rayleigh–Ritz runs on all (q + 1)·b columns, whose images J K the passes already computed:
    (2q + 2)·b products (120 at r = 20, q = 2), or min(M, N·D) to read J whole, exactly, when that
    is no more. Adaptive mode (``tol`` set) adds rounds until 1 − alignment(V_q, V_{q−1}) < tol.

    Args:
        op: the Jacobian operator.
        r: the rank of the result.
        block: b, the columns per block (default r).
        power_iters: q, the rounds after the first block; ignored when ``tol`` is set.
        seed: seeds the Gaussian test matrix Ω (M, b).
        tol: adaptive mode's alignment error threshold; None for a fixed q.
        max_iters: the most rounds in adaptive mode.

    Returns:
        The Sketch on the (q + 1)·b-column basis; ``power_iters`` is the q reached.

    Raises:
        ValueError: r < 1, b < 1, or (q + 1)·b < r.
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
    for _q in range(1, rounds + 1):
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


# -- spectral summaries (docs/design.md, "Definitions") ---------------------------------------

def subspace_alignment(U: Tensor, Uhat: Tensor) -> float:
    """Subspace alignment ‖UᵀÛ‖_F² / r ∈ [0, 1] (1 = the same subspace; 1 minus it is the error).

    Args:
        U: (n, r) orthonormal columns.
        Uhat: Û (n, r') orthonormal columns.

    Returns:
        ‖UᵀÛ‖_F² / r, r the column count of U.
    """
    return float((U.T @ Uhat).pow(2).sum() / U.shape[1])


def kappa_curve(sigma: Tensor, frob2: float) -> Tensor:
    """Captured energy κ_cap(k) = Σ_{i≤k} σ_i² / ‖J‖_F² for k = 1..r.

    Args:
        sigma: (r,) singular values, descending.
        frob2: ‖J‖_F² (exact or estimated), > 0.

    Returns:
        κ_cap(1..r), (r,).
    """
    return torch.cumsum(sigma.pow(2), 0) / frob2


def r90(kappa_curve: Tensor, level: float = 0.90) -> int | None:
    """The smallest r with κ_cap(r) ≥ level (r_0.90 at the default level).

    Args:
        kappa_curve: κ_cap(1..r), (r,), non-decreasing.
        level: the share of ‖J‖_F² to reach (compared with a 1e-12 tolerance).

    Returns:
        r (1-based), or None when the curve never reaches ``level``.
    """
    hit = torch.nonzero(kappa_curve >= level - 1e-12)
    return int(hit[0, 0]) + 1 if hit.numel() else None


def token_energy(sigma: Tensor, V: Tensor, N: int, D: int) -> Tensor:
    """Token energy e_t = Σ_{i≤r} σ_i² ‖V_{t,i}‖², V_{t,i} the token-t block of the i-th mode.

    Args:
        sigma: (r,) singular values.
        V: (N·D, r) right singular vectors, rows ordered as ``F.reshape(-1)``.
        N: tokens.
        D: channels per token.

    Returns:
        e, (N,).
    """
    blocks = V.reshape(N, D, -1).pow(2).sum(1)  # (N, r)
    return blocks @ sigma.pow(2)


def cv(e: Tensor) -> float:
    """Token CV, the coefficient of variation std_t(e_t) / mean_t(e_t).

    Args:
        e: (N,) token energies.

    Returns:
        The population standard deviation over all N tokens divided by their mean.
    """
    return float(e.std(unbiased=False) / e.mean())
