"""The single-token pullback distance of importance-guided merging, computed without forming the
SPN's mode matrix.

The SPN (``metric.spn``) predicts g(F) ≈ U diag(λ) Uᵀ + εI with U = QR(raw).Q, where raw (N·D, r)
holds its mode projection of every token's encoding z_t (width w): the D×r block of token t is
raw_t[d, j] = Σ_c W̃[d, j, c] z̃_t[c] (``spn.modes(z_t)``), z̃_t = (z_t, 1), W̃ the projection's
weights with its bias as one more input. Merging reads
d(t, s)² = ‖diag(√λ) U_tᵀ (x_s − x_t)‖² + ε‖x_s − x_t‖² from each of the k removed tokens t to
each of the K' kept patch tokens s (``prune.soft_merge.pullback_distance``). Here:

- U = raw R⁻¹ with RᵀR = rawᵀraw (Cholesky; CholeskyQR gives QR's columns up to their signs,
  which d(t, s) does not see), and rawᵀraw[j, J] = Σ_{c,C} M[c, C] G[j, c, J, C] from the
  encodings' second moment M = Σ_t z̃_t z̃_tᵀ and G = W̃ᵀW̃ (once per SPN, ``weights``); M is
  symmetric, so G may be symmetrised in c ↔ C, and the Gram is symmetric in j ↔ J: only the pairs
  j ≤ J, c ≤ C are summed (``gram``);
- U_tᵀ y = R⁻ᵀ raw_tᵀ y, and raw_tᵀ x_s for every pair comes by whichever of two exact routes
  costs fewer multiply-adds for these shapes (``route``):
  ``rows``: the mode rows of the removed tokens only, raw_t = spn.modes(z_t) (k·w·D·r), then
  raw_tᵀ x_s (k·K'·D·r);
  ``tokens``: Q_y[j, c] = Σ_d W̃[d, j, c] y[d] of the kept and removed tokens ((K' + k)·D·r·(w + 1)),
  then raw_tᵀ y = Σ_c z̃_t[c] Q_y[·, c] (k·K'·r·(w + 1));
  the rows route wins when few tokens go, or when D is small against w + 1 + K';
- ‖x_s − x_t‖² = ‖x_s‖² + ‖x_t‖² − 2 x_tᵀx_s.

Invariant: every route gives the reference's d(t, s)² up to rounding (tests/test_patch_overhead.py
holds them to it in float64). A Gram Cholesky cannot factor falls back to QR of raw, as the SPN
does it. Nothing here carries gradients: the distances only choose where each removed token goes.
"""

from __future__ import annotations

import weakref
from typing import NamedTuple

import torch
import torch.nn.functional as F_
from torch import Tensor

from taskgeom.metric.positions import position_table
from taskgeom.metric.spn import SpectralPullbackNetwork
from taskgeom.models.vit import Grid
from taskgeom.prune.select import gather_tokens

_WEIGHTS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


class Weights(NamedTuple):
    """What the distances read of an SPN's mode projection (``weights``).

    Attributes:
        aug: W̃ as a (D, r·(w + 1)) matrix, column j·(w + 1) + c.
        packed: (r(r+1)/2, (w+1)(w+2)/2) float64: (G[j, c, J, C] + G[j, C, J, c]) / 2 for j ≤ J
            (rows, ``torch.triu_indices`` order) and c ≤ C (columns, same order), doubled where c < C.
        rows: (2, r(r+1)/2) the (j, J) of each row.
        cols: (2, (w+1)(w+2)/2) the (c, C) of each column.
    """

    aug: Tensor
    packed: Tensor
    rows: Tensor
    cols: Tensor


def spn_positions(spn: SpectralPullbackNetwork, base: Grid, grid: Grid) -> Tensor:
    """The SPN's position table carried to ``grid`` (``metric.positions.position_table``).

    Args:
        spn: the SPN, trained on ``base``.
        base: its training grid.
        grid: the images' grid.

    Returns:
        (grid.prefix + rows·cols, width).
    """
    return position_table(spn.pos, grid.prefix, (base.rows, base.cols), (grid.rows, grid.cols))


def trunk(spn: SpectralPullbackNetwork, base: Grid, grid: Grid, x: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """The SPN's encodings of every token and its energies, as its ``forward`` computes them.

    Args:
        spn: the SPN, trained on ``base``.
        base: its training grid.
        grid: the images' grid.
        x: (B, N, D) every token, in the SPN's dtype.

    Returns:
        z (B, N, w), λ (B, r) and ε (B,).
    """
    z = spn.encoder(spn.inp(x) + spn_positions(spn, base, grid))
    e = spn.energy(z.mean(dim=1))
    return z, F_.softplus(e[:, :-1]) + 1e-8, F_.softplus(e[:, -1]) + 1e-12


def weights(spn: SpectralPullbackNetwork) -> Weights:
    """W̃ and the packed G = W̃ᵀW̃ (module docstring), kept per SPN until its weights change.

    Args:
        spn: the SPN.

    Returns:
        Its Weights.
    """
    w, b = spn.modes.weight, spn.modes.bias
    try:
        key = (w.data_ptr(), w._version, b._version)
    except RuntimeError:  # inference tensors keep no version: never changed in place outside inference mode
        key = (w.data_ptr(), None, None)
    cached = _WEIGHTS.get(spn)
    if cached is None or cached[0] != key:
        d, r, width = spn.dim, spn.rank, w.shape[1] + 1
        aug = torch.cat([w, b[:, None]], dim=1).detach().reshape(d, r * width)   # modes' output d·r + j
        full = (aug.double().mT @ aug.double()).reshape(r, width, r, width)
        full = (full + full.transpose(1, 3)) / 2                          # symmetric in c ↔ C, as M is
        rows, cols = (torch.triu_indices(n, n, device=w.device) for n in (r, width))
        packed = full[rows[0][:, None], cols[0][None], rows[1][:, None], cols[1][None]]
        packed = packed * torch.where(cols[0] == cols[1], 1.0, 2.0).to(packed)
        _WEIGHTS[spn] = cached = (key, Weights(aug, packed, rows, cols))
    return cached[1]


def gram(spn: SpectralPullbackNetwork, z: Tensor) -> Tensor:
    """rawᵀraw (B, r, r) in float64, from the encodings' second moment (module docstring).

    Args:
        spn: the SPN.
        z: (B, N, w) its encodings of every token.

    Returns:
        The Gram of each item's mode projection.
    """
    wts = weights(spn)
    aug = torch.cat([z, torch.ones_like(z[..., :1])], dim=-1).double()
    m = aug.mT @ aug                                                      # (B, w+1, w+1)
    upper = m[:, wts.cols[0], wts.cols[1]] @ wts.packed.mT                 # (B, r(r+1)/2)
    out = upper.new_zeros(z.shape[0], spn.rank, spn.rank)
    out[:, wts.rows[0], wts.rows[1]] = upper
    out[:, wts.rows[1], wts.rows[0]] = upper
    return out


def _factor(spn: SpectralPullbackNetwork, z: Tensor) -> Tensor | None:
    """R⁻¹ (B, r, r) with RᵀR = rawᵀraw, or None where Cholesky fails for some item."""
    chol, info = torch.linalg.cholesky_ex(gram(spn, z))
    if bool(info.any()):
        return None
    eye = torch.eye(chol.shape[-1], dtype=chol.dtype, device=chol.device).expand_as(chol)
    return torch.linalg.solve_triangular(chol.mT, eye, upper=True).to(z.dtype)


def route_costs(kept: int, removed: int, dim: int, rank: int, width: int) -> dict[str, int]:
    """Multiply-adds of the matrix products of each exact route to raw_tᵀ x_s and raw_tᵀ x_t, per
    item (module docstring): "rows" k·w·D·r + k·(K' + 1)·D·r; "tokens"
    (K' + k)·D·r·(w + 1) + k·(K' + 1)·r·(w + 1).

    Args:
        kept: K', the kept patch tokens.
        removed: k, the removed tokens.
        dim: D.
        rank: r.
        width: w, the SPN's width.

    Returns:
        route -> multiply-adds.
    """
    return {"rows": removed * width * dim * rank + removed * (kept + 1) * dim * rank,
            "tokens": (kept + removed) * dim * rank * (width + 1) + removed * (kept + 1) * rank * (width + 1)}


def route(kept: int, removed: int, dim: int, rank: int, width: int) -> str:
    """The cheaper route of ``route_costs`` ("rows" on a tie).

    Args:
        kept: K', the kept patch tokens.
        removed: k, the removed tokens.
        dim: D.
        rank: r.
        width: w, the SPN's width.

    Returns:
        "rows" or "tokens".
    """
    costs = route_costs(kept, removed, dim, rank, width)
    return "rows" if costs["rows"] <= costs["tokens"] else "tokens"


def mode_rows(spn: SpectralPullbackNetwork, z: Tensor, drop: Tensor) -> Tensor:
    """raw_t (B, k, D, r) of the removed tokens: the SPN's mode projection of their encodings.

    Args:
        spn: the SPN.
        z: (B, N, w) its encodings of every token.
        drop: (B, k) removed positions.

    Returns:
        Their D×r blocks of raw.
    """
    return spn.modes(gather_tokens(z, drop)).unflatten(-1, (spn.dim, spn.rank))


def token_projections(spn: SpectralPullbackNetwork, x: Tensor) -> Tensor:
    """Q_y (module docstring) of tokens y: Q[b, i, j, c] = Σ_d W̃[d, j, c] x[b, i, d].

    Args:
        spn: the SPN.
        x: (B, n, D) tokens.

    Returns:
        (B, n, r, w + 1).
    """
    return (x @ weights(spn).aug).reshape(*x.shape[:2], spn.rank, -1)


def _raw_coordinates(spn: SpectralPullbackNetwork, z: Tensor, xs: Tensor, xt: Tensor,
                     drop: Tensor) -> tuple[Tensor, Tensor]:
    """raw_tᵀ x_s (B, k, K', r) and raw_tᵀ x_t (B, k, 1, r), by ``route``."""
    (b, k, d), kept = xt.shape, xs.shape[1]
    if route(kept, k, d, spn.rank, z.shape[-1]) == "rows":
        rows = mode_rows(spn, z, drop)                                     # (B, k, D, r)
        cross = xs @ rows.movedim(1, 2).reshape(b, d, k * spn.rank)        # (B, K', k·r)
        own = xt[:, :, None] @ rows                                        # (B, k, 1, r)
        return cross.reshape(b, kept, k, spn.rank).movedim(1, 2), own
    q = token_projections(spn, torch.cat([xs, xt], dim=1))                 # (B, K' + k, r, w+1)
    qs, qt = q[:, :kept], q[:, kept:]
    zt = gather_tokens(torch.cat([z, torch.ones_like(z[..., :1])], dim=-1), drop)   # (B, k, w+1)
    cross = qs.flatten(1, 2) @ zt.mT                                       # (B, K'·r, k)
    own = qt @ zt[..., None]                                               # (B, k, r, 1)
    return cross.reshape(b, kept, spn.rank, k).permute(0, 3, 1, 2), own.mT


def _qr_coordinates(spn: SpectralPullbackNetwork, z: Tensor, xs: Tensor, xt: Tensor,
                    drop: Tensor) -> tuple[Tensor, Tensor]:
    """U_tᵀ x_s and U_tᵀ x_t with U from QR of every token's raw, as the SPN does it."""
    b, n, d = z.shape[0], z.shape[1], xt.shape[-1]
    U = torch.linalg.qr(spn.modes(z).reshape(b, n * d, spn.rank)).Q.reshape(b, n, d, spn.rank)
    rows = U.gather(1, drop[..., None, None].expand(-1, -1, d, spn.rank))
    return torch.einsum("bkdr,bsd->bksr", rows, xs), (xt[:, :, None] @ rows)


@torch.no_grad()
def pullback_distance(spn: SpectralPullbackNetwork, base: Grid, grid: Grid, x: Tensor, keep: Tensor, drop: Tensor,
                      prefix: int) -> Tensor:
    """d(t, s)² from each removed token t to each kept patch token s (module docstring), the
    values ``prune.soft_merge.pullback_distance`` gives for ``spn(x)``.

    Args:
        spn: the SPN, trained on ``base``.
        base: its training grid.
        grid: the images' grid.
        x: (B, N, D) every token.
        keep: (B, K) kept positions, prefix first.
        drop: (B, k) removed positions.
        prefix: the leading tokens, left out as destinations.

    Returns:
        (B, k, K − prefix) squared distances.
    """
    x = x.to(spn.modes.weight.dtype)
    z, lam, eps = trunk(spn, base, grid, x)
    xs, xt = gather_tokens(x, keep[:, prefix:]), gather_tokens(x, drop)
    inverse = _factor(spn, z)
    if inverse is None:
        cross, own = _qr_coordinates(spn, z, xs, xt, drop)
        coords = cross - own
    else:
        cross, own = _raw_coordinates(spn, z, xs, xt, drop)
        coords = (cross - own) @ inverse[:, None]                          # U_tᵀ(x_s − x_t), (B, k, K', r)
    low_rank = (coords.pow(2) * lam[:, None, None]).sum(dim=-1)
    iso = xs.pow(2).sum(-1)[:, None] + xt.pow(2).sum(-1)[..., None] - 2 * (xt @ xs.mT)
    return low_rank + eps[:, None, None] * iso.clamp_min(0.0)
