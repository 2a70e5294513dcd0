"""The token-reduction methods, one ``Method`` record each, in ``METHODS`` (the pipeline's order).

Everything that lists or switches on a method reads this table: the scores (``scores.scores_for``),
the CLS reduction (``cls_merge``), hard prune + LLF (``llf``), the seeds a stage runs
(``protocol.seed_runs``), the tables' order and labels (``stages/prune_tables.py``), the stage
registry's plot series, the reductions ToMe's merging is judged against
(``evaluate/pruning_claims.py``); the schema's ``prune_methods`` enum is checked against ``NAMES``
by a test.
``lookup(name)`` is how a caller turns a user's method name into its record.

A method's score function maps the current tokens to one score each, higher = keep:
``score(h, idx, stats, grid, learned, generator) -> (B, K)`` with h (B, K, D) the current tokens,
idx (B, K) their positions in the full sequence, stats the ``AttentionStats`` of the block just
run (None unless ``attention``), grid the token ``Grid``, learned the ``LearnedMetric`` of one
training seed (None unless ``learned``), generator the CPU generator random draws from.

``merge`` says how the CLS reduction folds the removed tokens into the kept ones (dense decoders
hard-prune by the scores, except ``bipartite``, which merges and unmerges there too):

- ``keys``: each removed token averaged into the kept patch token nearest in attention-key
  cosine, size-weighted (the keys are read even when the score is not);
- ``pullback``: the same, nearest in the SPN's single-token pullback distance, weights
  exp(score)·size;
- ``fuse``: every removed token fused into one extra token, weighted by its score (EViT);
- ``bipartite``: ToMe's bipartite soft matching on the keys; no scores.

This module imports neither torch nor the model code at import time (the pipeline's stage table
reads ``NAMES``); the score functions import what they run when called.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal, Protocol

Merge = Literal["keys", "pullback", "fuse", "bipartite"]
# Tensors, the Grid, AttentionStats and LearnedMetric are typed Any here: importing their modules,
# even for type checking only, would make them code of every stage that reads this table.


class Score(Protocol):
    """A method's token scores (the module docstring)."""

    def __call__(self, h: Any, idx: Any, stats: Any, grid: Any, learned: Any, generator: Any) -> Any:
        """(B, K, D) current tokens -> (B, K) scores, higher = keep."""
        ...


@dataclass(frozen=True)
class Method:
    """One token-reduction method.

    Attributes:
        name: the name params.yaml, the CSVs and callers use.
        label: how tables and figures name it.
        score: its score function (module docstring), or None for a method that merges by
            matching (``bipartite``) and scores nothing.
        attention: its score or matching reads the attention statistics of the block where tokens go.
        learned: it needs a training seed's importance head (and, to merge, its SPN).
        seeded: it draws from the random generator.
        merge: how the CLS reduction folds removed tokens in (module docstring).
    """

    name: str
    label: str
    score: Score | None
    attention: bool
    learned: bool
    seeded: bool
    merge: Merge

    @property
    def per_seed(self) -> bool:
        """Whether its output changes with the seed (a random draw, or a head per training seed)."""
        return self.seeded or self.learned

    def reads_attention(self, merging: bool) -> bool:
        """Whether the block where tokens go must return its attention statistics.

        Args:
            merging: the CLS reduction (which finds nearest tokens by key for ``keys``), not hard pruning.

        Returns:
            True where the score, the matching or (merging) the nearness reads them.
        """
        return self.attention or (merging and self.merge == "keys")


def _random(h: Any, idx: Any, stats: Any, grid: Any, learned: Any, generator: Any) -> Any:
    """Uniform scores drawn on the CPU from ``generator``, (B, K)."""
    import torch

    return torch.rand(h.shape[:2], generator=generator, device="cpu").to(h.device)


def _tome_score(h: Any, idx: Any, stats: Any, grid: Any, learned: Any, generator: Any) -> Any:
    """1 − the best key cosine to another token (``prune.tome.tome_score``), (B, K)."""
    from taskgeom.prune.tome import tome_score

    return tome_score(stats.keys)


def _evit(h: Any, idx: Any, stats: Any, grid: Any, learned: Any, generator: Any) -> Any:
    """The class token's attention to each token, averaged over heads, (B, K)."""
    return stats.cls_attn


def _importance(h: Any, idx: Any, stats: Any, grid: Any, learned: Any, generator: Any) -> Any:
    """The importance head's prediction at the tokens' positions, (B, K).

    Raises:
        ValueError: no head was given.
    """
    if learned is None:
        raise ValueError("method 'importance' needs a trained importance head")
    return learned.importance(h, idx, grid)


METHODS: dict[str, Method] = {m.name: m for m in (
    Method("random", "random", _random, attention=False, learned=False, seeded=True, merge="keys"),
    Method("tome_score", "ToMe score (Table 2's ToMe)", _tome_score, attention=True, learned=False, seeded=False,
           merge="keys"),
    Method("evit", "EViT", _evit, attention=True, learned=False, seeded=False, merge="fuse"),
    Method("tome", "ToMe merging (soft, reference)", None, attention=True, learned=False, seeded=False,
           merge="bipartite"),
    Method("importance", "importance", _importance, attention=False, learned=True, seeded=False, merge="pullback"),
)}
NAMES: tuple[str, ...] = tuple(METHODS)


def lookup(name: Any) -> Method:
    """The record of method ``name``.

    Args:
        name: a method's name.

    Returns:
        Its Method.

    Raises:
        ValueError: an unknown name, in one line listing the known ones.
    """
    method = METHODS.get(name) if isinstance(name, str) else None
    if method is None:
        raise ValueError(f"unknown pruning method {name!r}; known: {', '.join(METHODS)}")
    return method
