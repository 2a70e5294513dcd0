"""Token scores that decide what is removed (higher = keep), each method's own score function
(``prune.methods``): a scorer sees the current tokens h (B, K, D), their original positions idx
(B, K), and the attention statistics of the block just run (for the methods that read them). Here:
``scores_for``, and the learned metric (importance head, SPN) that importance scores and merges by."""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
from torch import Tensor

from taskgeom.metric.head import ImportanceHead
from taskgeom.metric.positions import position_table
from taskgeom.metric.spn import PredictedMetric, SpectralPullbackNetwork
from taskgeom.models.vit import Grid
from taskgeom.prune.methods import lookup
from taskgeom.prune.timm_blocks import AttentionStats


@dataclass
class LearnedMetric:
    """An importance head (and for soft merging an SPN) trained on ``base`` and used on any grid.

    Attributes:
        head: the importance head.
        base: the token grid the head (and SPN) were trained on.
        spn: the Spectral Pullback Network, for importance-guided merging; else None.
    """

    head: ImportanceHead
    base: Grid
    spn: SpectralPullbackNetwork | None = None
    _tables: dict = field(default_factory=dict, repr=False)

    def _pos(self, net: torch.nn.Module, grid: Grid) -> Tensor:
        key = (id(net), grid.rows, grid.cols)
        if key not in self._tables:
            self._tables[key] = position_table(net.pos, grid.prefix, (self.base.rows, self.base.cols),
                                               (grid.rows, grid.cols))
        return self._tables[key]

    def importance(self, h: Tensor, idx: Tensor, grid: Grid) -> Tensor:
        """Predicted importance of the current tokens, their positions resampled to ``grid``.

        Args:
            h: (B, K, D) the current tokens.
            idx: (B, K) their original positions in the full sequence.
            grid: the token grid of the images.

        Returns:
            (B, K) predicted importance (standardised log scale; higher = keep).
        """
        return self.head(h, self._pos(self.head, grid)[idx])

    def metric(self, h: Tensor, grid: Grid) -> PredictedMetric:
        """The SPN's predicted metric of every token of the grid.

        Args:
            h: (B, N, D) every token of the grid.
            grid: the token grid of the images.

        Returns:
            The PredictedMetric: U (B, N·D, r), lam (B, r), eps (B,).

        Raises:
            ValueError: no SPN was given.
        """
        if self.spn is None:
            raise ValueError("importance-guided merging measures nearness with an SPN; none was given")
        return self.spn(h, self._pos(self.spn, grid)[None].expand(h.shape[0], -1, -1))


def grid_of(ctx) -> Grid:
    """The token grid in a host's embedding ctx (a Grid, or a tuple holding one first).

    Args:
        ctx: the context ``host.embed`` returned.

    Returns:
        The Grid.

    Raises:
        TypeError: ctx holds no Grid.
    """
    grid = ctx[0] if isinstance(ctx, tuple) else ctx
    if not isinstance(grid, Grid):
        raise TypeError(f"pruning needs the token grid in the host's ctx; got {type(ctx).__name__}")
    return grid


def scores_for(method: str, h: Tensor, idx: Tensor, stats: AttentionStats | None, grid: Grid,
               learned: LearnedMetric | None, generator: torch.Generator | None) -> Tensor:
    """Scores of the current tokens under ``method``'s score function (``prune.methods``); higher = keep.

    Args:
        method: a name in ``prune.methods.METHODS`` with a score function (tome merges without scores).
        h: (B, K, D) the current tokens.
        idx: (B, K) their original positions.
        stats: the AttentionStats of the block just run (methods with ``attention``).
        grid: the token grid of the images.
        learned: the importance head (methods with ``learned``).
        generator: draws random's uniform scores (on the CPU).

    Returns:
        (B, K) scores.

    Raises:
        ValueError: an unknown method, one without scores, or importance without a head.
    """
    m = lookup(method)
    if m.score is None:
        raise ValueError(f"method {method!r} merges by {m.merge} matching and scores no tokens")
    return m.score(h, idx, stats, grid, learned, generator)
