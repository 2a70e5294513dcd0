"""What a probe's importance targets leave a head to learn, measured on the targets alone.

Two measurements decide whether a run can tell the spectral target from the block-norm one, or a
head from the position-only floor (paper §5.4–5.5):

- ``targets_agreement``: each image's Spearman ρ between the spectral target e_t and the
  block-norm target ‖J_t‖_F². Where the two rank tokens alike, no head trained on one can rank
  the other's tokens worse, so the comparison of the two heads is empty.
- ``position_share``: the share of the target's within-image rank variance that the token slot
  explains (η² of a one-way ANOVA of the per-image ranks on the slot). Near 1, position alone
  ranks the tokens and a head has little beyond it to learn.
"""

from __future__ import annotations

import numpy as np
from scipy import stats

from taskgeom.evaluate.stats import spearman


def targets_agreement(spectral: np.ndarray, block_norm: np.ndarray) -> np.ndarray:
    """Each image's Spearman ρ between its two importance targets.

    Args:
        spectral: (images, tokens) spectral target e_t.
        block_norm: (images, tokens) block-norm target.

    Returns:
        (images,) float64 ρ.
    """
    return np.array([spearman(a, b) for a, b in zip(spectral, block_norm)], dtype=np.float64)


def position_share(target: np.ndarray) -> float:
    """η² of the token slot on the within-image ranks of ``target``.

    The ranks of each image (average ranks for ties) are the observations and the slot the factor:
    between-slot sum of squares over the total sum of squares.

    Args:
        target: (images, tokens) an importance target.

    Returns:
        The share in [0, 1]; NaN with fewer than two images.
    """
    ranks = stats.rankdata(target, axis=1)
    if ranks.shape[0] < 2:
        return float("nan")
    total = ((ranks - ranks.mean()) ** 2).sum()
    between = ranks.shape[0] * ((ranks.mean(axis=0) - ranks.mean()) ** 2).sum()
    return float(between / total) if total > 0 else float("nan")
