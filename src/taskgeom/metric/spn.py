"""The Spectral Pullback Network (paper §5.2): from features F (N, D) alone, a rank-r-plus-
isotropic metric g(F) ≈ U diag(λ) Uᵀ + εI with orthonormal modes U (N·D, r) and energies λ > 0.

Cross-token attention lets every mode spread over all tokens (the low-rank delocalized regime,
where a per-token factored metric cannot work: the paper's Thm 2). A metric-vector product costs
O(N·D·r) (``metric_vector_product``), never O((N·D)²).

Training targets are top-r singular triplets (σ_i, v_i) of J (RandNLA or exact, see
``taskgeom.metric.targets``). The mode loss is the σ²-weighted share of the target metric's top-r
energy that span U misses, 1 − Σ σ_i² ‖Uᵀv_i‖² / Σ σ_i² — invariant to rotations within span U,
so the network learns a subspace, not an arbitrary basis (averaged with 1 − V1, see ``spn_loss``).
Energies are regressed in log space
against the target metric's Rayleigh quotients along the predicted modes, λ̂_j = Σ_i σ_i² (u_jᵀv_i)²,
and ε against the mean leftover energy (‖J‖_F² − Σ σ_i²) / (N·D − r).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F_
from torch import Tensor, nn


@dataclass
class PredictedMetric:
    """The SPN's metric g(F) ≈ U diag(λ) Uᵀ + εI for each item of a batch.

    Attributes:
        U: (B, N·D, r) orthonormal columns, the modes.
        lam: (B, r) > 0, the energies λ.
        eps: (B,) > 0, the isotropic floor ε.
    """

    U: Tensor
    lam: Tensor
    eps: Tensor


class SpectralPullbackNetwork(nn.Module):
    """F (B, N, D) -> PredictedMetric. ``width`` w, ``depth`` transformer layers of ``heads``
    heads over the N tokens, a learned position embedding per token slot (``pos`` (B, N, width)
    replaces it, as in ``ImportanceHead``)."""

    def __init__(self, tokens: int, dim: int, rank: int, width: int = 64, depth: int = 2, heads: int = 4):
        """An SPN with ``tokens`` learned position slots.

        Args:
            tokens: N, the token slots of the training grid.
            dim: D, the feature dimension.
            rank: r, the modes predicted.
            width: w, the embedding width.
            depth: transformer layers.
            heads: attention heads per layer.
        """
        super().__init__()
        self.tokens, self.dim, self.rank = tokens, dim, rank
        self.inp = nn.Sequential(nn.LayerNorm(dim), nn.Linear(dim, width))
        self.pos = nn.Parameter(torch.randn(tokens, width) * 0.02)
        layer = nn.TransformerEncoderLayer(width, heads, 2 * width, dropout=0.0, batch_first=True, norm_first=True)
        self.encoder = nn.TransformerEncoder(layer, depth, enable_nested_tensor=False)
        self.modes = nn.Linear(width, dim * rank)
        self.energy = nn.Sequential(nn.LayerNorm(width), nn.Linear(width, rank + 1))

    def forward(self, F: Tensor, pos: Tensor | None = None) -> PredictedMetric:
        """The predicted metric at F: modes from every token (orthonormalised by QR), energies from
        their mean.

        Args:
            F: (B, N, D) features.
            pos: (B, N, width) or (N, width) positions in place of the learned table; None for it.

        Returns:
            PredictedMetric with U (B, N·D, r), lam (B, r), eps (B,).
        """
        b, n, d = F.shape
        h = self.encoder(self.inp(F) + (self.pos if pos is None else pos))                          # (B, N, w)
        raw = self.modes(h).reshape(b, n * d, self.rank)                  # (B, N·D, r)
        U = torch.linalg.qr(raw).Q                                        # orthonormal columns
        e = self.energy(h.mean(dim=1).detach())  # (B, r + 1); energies are read off, not trained into, h
        return PredictedMetric(U=U, lam=F_.softplus(e[:, :-1]) + 1e-8, eps=F_.softplus(e[:, -1]) + 1e-12)


def metric_vector_product(m: PredictedMetric, v: Tensor) -> Tensor:
    """g(F) v = U (λ ⊙ Uᵀv) + ε v, in O(N·D·r).

    Args:
        m: the predicted metric, U (B, N·D, r).
        v: (B, N·D) vectors.

    Returns:
        (B, N·D).
    """
    coeff = torch.einsum("bnr,bn->br", m.U, v) * m.lam
    return torch.einsum("bnr,br->bn", m.U, coeff) + m.eps[:, None] * v


def captured_energy(U: Tensor, V: Tensor, sigma: Tensor) -> Tensor:
    """Share of Σ σ_i² that span U holds: Σ σ_i² ‖Uᵀv_i‖² / Σ σ_i².

    Args:
        U: (B, n, r) orthonormal columns.
        V: (B, n, k) target modes.
        sigma: (B, k) target singular values.

    Returns:
        (B,) shares in [0, 1].
    """
    w = sigma.pow(2)
    proj = torch.einsum("bnr,bnk->brk", U, V).pow(2).sum(dim=1)          # (B, k) = ‖Uᵀ v_i‖²
    return (w * proj).sum(dim=1) / w.sum(dim=1).clamp_min(1e-30)


def spn_loss(m: PredictedMetric, V: Tensor, sigma: Tensor, frob2: Tensor, energy_weight: float = 0.1) -> Tensor:
    """Mode loss + ``energy_weight`` · (log-energy loss + log-ε loss), averaged over the batch.

    The mode loss averages the σ²-weighted miss (what the metric needs most) and the unweighted
    one, 1 − V1 (so the trailing modes of the target subspace are learned too).

    Args:
        m: the predicted metric.
        V: (B, N·D, k) target modes.
        sigma: (B, k) target singular values.
        frob2: (B,) an estimate of ‖J‖_F².
        energy_weight: the weight of the energy terms.

    Returns:
        A scalar.
    """
    mode_loss = 1.0 - 0.5 * captured_energy(m.U, V, sigma) - 0.5 * subspace_alignment_batch(m.U, V)
    with torch.no_grad():
        rayleigh = torch.einsum("bnr,bnk->brk", m.U, V).pow(2) @ sigma.pow(2).unsqueeze(-1)   # (B, r, 1)
        rayleigh = rayleigh.squeeze(-1).clamp_min(1e-6 * float(sigma.max()) ** 2)
        n = V.shape[1]
        rest = (frob2 - sigma.pow(2).sum(dim=1)).clamp_min(1e-12) / max(n - sigma.shape[1], 1)
    energy_loss = (m.lam.log() - rayleigh.log()).pow(2).mean(dim=1) + (m.eps.log() - rest.log()).pow(2)
    return (mode_loss + energy_weight * energy_loss).mean()


def subspace_alignment_batch(U: Tensor, V: Tensor) -> Tensor:
    """‖UᵀV‖_F² / r per item (docs/design.md, "Definitions").

    Args:
        U: (B, n, r') orthonormal columns.
        V: (B, n, r) orthonormal columns; r divides the sum.

    Returns:
        (B,) alignments, 1 when span V ⊆ span U.
    """
    return torch.einsum("bnr,bnk->brk", U, V).pow(2).sum(dim=(1, 2)) / V.shape[-1]
