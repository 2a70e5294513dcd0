"""The importance head (paper §5.4, App. F): per-token importance predicted from the features
alone — no Jacobian, no SPN call at inference.

Architecture: a linear embedding of width w with a learned position per token slot, ``layers``
pre-norm attention layers of ``heads`` heads, and an MLP to one score per token. The paper's head
has about 310K parameters at D = 768; the ``head`` stage reports ours.

Loss: regression of the per-image standardised log target (the target spans orders of
magnitude; Spearman ρ, the evaluation, only sees ranks) plus ``w_rank`` times a pairwise logistic
ranking loss over every token pair (RankNet, Burges et al. 2005), weighted by how far apart the
two targets are so ties cost nothing.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F_
from torch import Tensor, nn


class ImportanceHead(nn.Module):
    """F (B, N, D) -> scores (B, N). ``pos`` (B, N, width) replaces the learned position of each
    token slot: a subset of tokens, or another grid (``taskgeom.metric.positions``)."""

    def __init__(self, tokens: int, dim: int, width: int = 64, heads: int = 2, layers: int = 1):
        """A head with ``tokens`` learned position slots.

        Args:
            tokens: N, the token slots of the training grid.
            dim: D, the feature dimension.
            width: w, the embedding width.
            heads: attention heads per layer.
            layers: pre-norm attention layers.
        """
        super().__init__()
        self.inp = nn.Sequential(nn.LayerNorm(dim), nn.Linear(dim, width))
        self.pos = nn.Parameter(torch.randn(tokens, width) * 0.02)
        layer = nn.TransformerEncoderLayer(width, heads, 2 * width, dropout=0.0, batch_first=True, norm_first=True)
        self.encoder = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
        self.out = nn.Sequential(nn.LayerNorm(width), nn.Linear(width, width), nn.GELU(), nn.Linear(width, 1))

    def forward(self, F: Tensor, pos: Tensor | None = None) -> Tensor:
        """Per-token scores, trained to regress the standardised log target (``head_loss``).

        Args:
            F: (B, N, D) features.
            pos: (B, N, width) or (N, width) positions in place of the learned table; None for it.

        Returns:
            (B, N) scores (higher = more important).
        """
        return self.out(self.encoder(self.inp(F) + (self.pos if pos is None else pos))).squeeze(-1)


def standardized_log(target: Tensor) -> Tensor:
    """Per-row z-scores of the logs of positive targets (clamped at 1e-30).

    Args:
        target: (B, N) positive targets.

    Returns:
        (B, N) standardised logs.
    """
    t = target.clamp_min(1e-30).log()
    return (t - t.mean(dim=1, keepdim=True)) / t.std(dim=1, keepdim=True).clamp_min(1e-6)


def ranking_loss(scores: Tensor, target: Tensor) -> Tensor:
    """Pairwise logistic loss: for every pair with target_i > target_j, softplus(−(s_i − s_j)),
    weighted by |z_i − z_j| of the standardised log targets.

    Args:
        scores: (B, N) predicted scores.
        target: (B, N) positive targets.

    Returns:
        A scalar, the weighted mean over pairs, averaged over the batch.
    """
    z = standardized_log(target)
    dz = z[:, :, None] - z[:, None, :]
    ds = scores[:, :, None] - scores[:, None, :]
    weight = dz.clamp_min(0.0)
    return (weight * F_.softplus(-ds)).sum(dim=(1, 2)).div(weight.sum(dim=(1, 2)).clamp_min(1e-12)).mean()


def head_loss(scores: Tensor, target: Tensor, w_rank: float) -> Tensor:
    """Regression on standardised log targets + w_rank · ranking loss.

    Args:
        scores: (B, N) predicted scores.
        target: (B, N) positive targets.
        w_rank: the ranking loss's weight (0 leaves it out).

    Returns:
        A scalar.
    """
    loss = F_.mse_loss(scores, standardized_log(target))
    return loss + w_rank * ranking_loss(scores, target) if w_rank else loss

