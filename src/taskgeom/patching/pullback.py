"""The single-token pullback distance of importance-guided merging, computed without forming the
SPN's mode matrix.

The SPN (``metric.spn``) predicts g(F) ≈ U diag(λ) Uᵀ + εI with U = QR(raw).Q, where raw (N·D, r)
holds its mode projection of every token's encoding z_t (width w): the D×r block of token t is
raw_t[d, j] = Σ_c W̃[d, j, c] z̃_t[c], z̃_t = (z_t, 1), W̃ the projection's weights with its bias as
one more input. Merging reads d(t, s)² = ‖diag(√λ) U_tᵀ (x_s − x_t)‖² + ε‖x_s − x_t‖² from each
removed token t to each kept patch token s (``prune.soft_merge.pullback_distance``). Here:

- U = raw R⁻¹ with RᵀR = rawᵀraw (Cholesky; CholeskyQR gives QR's columns up to their signs,
  which d(t, s) does not see), and rawᵀraw = Σ_{c,c'} M_{cc'} G_{(j,c),(j',c')} from the
  encodings' second moment M = Σ_t z̃_t z̃_tᵀ and G = W̃ᵀW̃, computed once per SPN (``weights``);
- U_tᵀ y = R⁻ᵀ (Σ_c z̃_t[c] Q_y[·, c]) with Q_y[j, c] = Σ_d W̃[d, j, c] y[d], so one product of
  the tokens with W̃ (N·D·r·(w + 1)) serves every pair, and no (k, D, r) block is formed;
- ‖x_s − x_t‖² = ‖x_s‖² + ‖x_t‖² − 2 x_tᵀx_s.

A Gram Cholesky cannot factor falls back to QR, as the SPN does it. Nothing here carries
gradients: the distances only choose where each removed token goes.
"""

from __future__ import annotations

import weakref

import torch
import torch.nn.functional as F_
from torch import Tensor

from taskgeom.metric.positions import position_table
from taskgeom.metric.spn import SpectralPullbackNetwork
from taskgeom.models.vit import Grid
from taskgeom.prune.select import gather_tokens

_WEIGHTS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


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


def weights(spn: SpectralPullbackNetwork) -> tuple[Tensor, Tensor]:
    """W̃ as a (D, r·(w + 1)) matrix, and G = W̃ᵀW̃ (r, w + 1, r, w + 1) in float64 (module
    docstring); kept per SPN until its weights change.

    Args:
        spn: the SPN.

    Returns:
        (W̃, G).
    """
    w, b = spn.modes.weight, spn.modes.bias
    try:
        key = (w.data_ptr(), w._version, b._version)
    except RuntimeError:  # inference tensors keep no version: never changed in place outside inference mode
        key = (w.data_ptr(), None, None)
    cached = _WEIGHTS.get(spn)
    if cached is None or cached[0] != key:
        d, r, width = spn.dim, spn.rank, w.shape[1] + 1
        aug = torch.cat([w, b[:, None]], dim=1).reshape(d, r * width)   # modes' output d·r + j
        gram = (aug.double().mT @ aug.double()).reshape(r, width, r, width)
        _WEIGHTS[spn] = cached = (key, aug.detach(), gram)
    return cached[1], cached[2]


def _factor(spn: SpectralPullbackNetwork, z: Tensor) -> Tensor | None:
    """R⁻¹ (B, r, r) with RᵀR = rawᵀraw, or None where Cholesky fails for some item."""
    _, gram = weights(spn)
    aug = torch.cat([z, torch.ones_like(z[..., :1])], dim=-1).double()
    chol, info = torch.linalg.cholesky_ex(torch.einsum("bcC,jcJC->bjJ", aug.mT @ aug, gram))
    if bool(info.any()):
        return None
    eye = torch.eye(chol.shape[-1], dtype=chol.dtype, device=chol.device).expand_as(chol)
    return torch.linalg.solve_triangular(chol.mT, eye, upper=True).to(z.dtype)


def token_projections(spn: SpectralPullbackNetwork, x: Tensor) -> Tensor:
    """Q_y (module docstring) of every token: Q[b, i, j, c] = Σ_d W̃[d, j, c] x[b, i, d].

    Args:
        spn: the SPN.
        x: (B, N, D) tokens.

    Returns:
        (B, N, r, w + 1).
    """
    w_aug, _ = weights(spn)
    return (x @ w_aug).reshape(*x.shape[:2], spn.rank, -1)


def _projections(spn: SpectralPullbackNetwork, z: Tensor, x: Tensor, keep: Tensor, drop: Tensor,
                 inverse: Tensor | None) -> tuple[Tensor, Tensor]:
    """U_tᵀ x_s (B, k, K', r) for removed t, kept s, and U_tᵀ x_t (B, k, 1, r)."""
    b, n, d = x.shape
    if inverse is None:                                                   # QR, as the SPN does it
        U = torch.linalg.qr(spn.modes(z).reshape(b, n * d, spn.rank)).Q.reshape(b, n, d, spn.rank)
        rows = U.gather(1, drop[..., None, None].expand(-1, -1, d, spn.rank))
        return torch.einsum("bkdr,bsd->bksr", rows, gather_tokens(x, keep)), \
            torch.einsum("bkdr,bkd->bkr", rows, gather_tokens(x, drop))[:, :, None]
    q = token_projections(spn, x)                                         # Q_y for every token, (B, N, r, w+1)
    zt = gather_tokens(torch.cat([z, torch.ones_like(z[..., :1])], dim=-1), drop)   # (B, k, w+1)
    qs = q.gather(1, keep[..., None, None].expand(-1, -1, *q.shape[2:]))            # (B, K', r, w+1)
    qt = q.gather(1, drop[..., None, None].expand(-1, -1, *q.shape[2:]))            # (B, k, r, w+1)
    cross = torch.einsum("bkc,bsjc->bksj", zt, qs) @ inverse[:, None]     # (B, k, K', r)
    own = torch.einsum("bkc,bkjc->bkj", zt, qt)[:, :, None] @ inverse[:, None]
    return cross, own


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
    kept = keep[:, prefix:]
    cross, own = _projections(spn, z, x, kept, drop, _factor(spn, z))
    low_rank = ((cross - own).pow(2) * lam[:, None, None]).sum(dim=-1)
    xs, xt = gather_tokens(x, kept), gather_tokens(x, drop)
    iso = xs.pow(2).sum(-1)[:, None] + xt.pow(2).sum(-1)[..., None] - 2 * (xt @ xs.mT)
    return low_rank + eps[:, None, None] * iso.clamp_min(0.0)
