"""Hard pruning with Last-Layer Fusion for dense decoders (paper §7.2, App. D).

After each block of the ``schedule`` the lowest-scoring patch tokens are removed (the total
P − ceil((1 − η)·P) spread evenly over the stages, earlier stages taking the remainder). A removed
token's features stay frozen at their value when it was removed; the blocks in between run on the
kept tokens only. Every block output the decoder reads is the full token grid: kept tokens at their
current values, removed ones frozen. With LLF, every token is reinserted before the decoder's last
block, which then attends over the full sequence (no parameters, no training); without it, the
last block also runs on the kept tokens and the frozen ones are filled in afterwards.

Which tokens go is the method's score (``prune.methods``); a method that merges by ToMe's
bipartite matching (``tome``) is ToMe's dense usage at the same points: bipartite merging
(proportional attention), and ToMe's unmerge wherever a full grid is needed (read layers, and
before the last block with LLF). Blocks on the kept tokens get their positions (a host whose blocks
read positions, EVA, is given them through its ``pruning_block`` hook).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor

from taskgeom.models.host import ProbeHost, check_decoder
from taskgeom.prune.blocks import attention_block, run_block
from taskgeom.prune.methods import lookup
from taskgeom.prune.scores import LearnedMetric, grid_of, scores_for
from taskgeom.prune.select import gather_tokens, num_removed, scatter_tokens, split_lowest
from taskgeom.prune.tome import bipartite_soft_matching, merge_wavg


def stage_counts(total: int, stages: int) -> list[int]:
    """Removals per stage: ``total`` split evenly, the remainder to the earliest stages.

    Args:
        total: tokens to remove in all.
        stages: the number of pruning points.

    Returns:
        ``stages`` counts that sum to ``total``.
    """
    base, extra = divmod(total, stages)
    return [base + (j < extra) for j in range(stages)]


def check_schedule(schedule: Sequence[int], last: int) -> tuple[int, ...]:
    """Validate a pruning schedule: the blocks after which tokens are removed.

    Args:
        schedule: block indices.
        last: the decoder's last block, which a schedule must stay below.

    Returns:
        The schedule as a tuple.

    Raises:
        ValueError: the indices are not strictly increasing in [0, last).
    """
    schedule = tuple(schedule)
    if not schedule or list(schedule) != sorted(set(schedule)) or schedule[0] < 0 or schedule[-1] >= last:
        raise ValueError(f"prune schedule {list(schedule)}: strictly increasing block indices below the "
                         f"decoder's last block {last}")
    return schedule


class TokenState:
    """The running tokens of one batch under hard pruning: h (B, K, D) at positions keep (B, K),
    and the full grid ``frozen`` (B, N, D) holding every removed token at its frozen value.

    Attributes:
        h: (B, K, D) the current tokens.
        keep: (B, K) their positions in the full sequence, or None before any removal.
        frozen: (B, N, D) the full grid with removed tokens at their frozen values, or None.
    """

    def __init__(self, h: Tensor):
        """Start with every token running.

        Args:
            h: (B, N, D) the full token sequence.
        """
        self.h = h
        self.keep: Tensor | None = None
        self.frozen: Tensor | None = None

    @property
    def pruned(self) -> bool:
        """Whether any token has been removed (and not reinserted)."""
        return self.keep is not None

    def positions(self) -> Tensor:
        """The current tokens' indices in the full token sequence.

        Returns:
            (B, K) indices into N.
        """
        b, n = self.h.shape[:2]
        return self.keep if self.pruned else torch.arange(n, device=self.h.device).expand(b, n)

    def full(self) -> Tensor:
        """Kept tokens current, removed ones frozen.

        Returns:
            (B, N, D), the full token grid.
        """
        return scatter_tokens(self.frozen, self.keep, self.h) if self.pruned else self.h

    def remove(self, keep_local: Tensor) -> None:
        """Keep only rows keep_local of the current tokens; the others freeze here.

        Args:
            keep_local: (B, K') indices into the current K tokens.
        """
        self.frozen = self.full()
        self.keep = self.positions().gather(1, keep_local)
        self.h = gather_tokens(self.h, keep_local)

    def reinsert(self) -> None:
        """Put every removed token back at its frozen value (Last-Layer Fusion)."""
        self.h, self.keep, self.frozen = self.full(), None, None


@torch.no_grad()
def pruned_forward(host: ProbeHost, decoder: str, images: Tensor, schedule: Sequence[int], method: str, ratio: float,
                   llf: bool = True, learned: LearnedMetric | None = None,
                   generator: torch.Generator | None = None) -> Tensor:
    """A frozen dense model's decoder output with patch tokens pruned after the blocks of
    ``schedule`` (see the module docstring).

    Args:
        host: the frozen model.
        decoder: the decoder to run (one of ``host.decoders``).
        images: (B, 3, H, W).
        schedule: strictly increasing block indices below the decoder's last block.
        method: a name in ``prune.methods.METHODS``: hard prune by its scores, or merge (``bipartite``).
        ratio: η, the fraction of patch tokens removed in all, spread over the stages.
        llf: Last-Layer Fusion: reinsert every token before the decoder's last block.
        learned: the trained importance head, for methods with ``learned``.
        generator: draws the scores of seeded methods (random).

    Returns:
        The decoder output, (B, M).

    Raises:
        ValueError: an unknown decoder or method, a bad schedule, η outside [0, 1), or a method
            with ``learned`` without ``learned``.
        TypeError: a method reading attention on a host ``taskgeom.prune.blocks`` has no attention adapter for.
    """
    m = lookup(method)
    check_decoder(host, decoder)
    reads = tuple(host.decoder_layers(decoder))
    last = max(reads)
    schedule = check_schedule(schedule, last)
    h, ctx = host.embed(images)
    grid = grid_of(ctx)
    counts = dict(zip(schedule, stage_counts(num_removed(grid.rows * grid.cols, ratio), len(schedule))))
    if m.merge == "bipartite":
        return _tome_forward(host, decoder, h, ctx, reads, counts, llf, grid.prefix > 0)
    state, states = TokenState(h), {}
    for i in range(last + 1):
        if i == last and llf:
            state.reinsert()
        k = counts.get(i, 0)
        if k and m.reads_attention(merging=False):
            state.h, stats = attention_block(host, i, ctx, state.keep).with_stats(state.h)
        else:
            state.h, stats = run_block(host, i, state.h, ctx, state.keep), None
        if k:
            scores = scores_for(method, state.h, state.positions(), stats, grid, learned, generator)
            keep_local, _ = split_lowest(scores, k, grid.prefix)
            state.remove(keep_local)
        if i in reads:
            states[i] = state.full()
    return host.decode(decoder, states, ctx)


def _tome_forward(host, decoder, h, ctx, reads, counts, llf, class_token) -> Tensor:
    """``pruned_forward`` with ToMe merging at the pruning points, unmerged wherever a full grid is read."""
    unmerges, size, states = [], None, {}
    last = max(reads)

    def full(x: Tensor) -> Tensor:
        for unmerge in reversed(unmerges):
            x = unmerge(x)
        return x

    for i in range(last + 1):
        if i == last and llf and unmerges:
            h, unmerges, size = full(h), [], None
        k = counts.get(i, 0)
        block = attention_block(host, i, ctx)
        if k:
            h, stats = block.with_stats(h, size)
            merge, unmerge = bipartite_soft_matching(stats.keys, k, class_token=class_token)
            h, size = merge_wavg(merge, h, size)
            unmerges.append(unmerge)
        else:
            h = block.forward(h, size)
        if i in reads:
            states[i] = full(h)
    return host.decode(decoder, states, ctx)
