"""Aggregating per-image values: mean, standard deviation and a bootstrap interval.

The paper reports per-probe means over 50 images without spread; every aggregate here comes
with the sample standard deviation and a percentile bootstrap interval of the mean
(scipy.stats.bootstrap), seeded so reruns give identical tables.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import numpy as np
from scipy import stats


@dataclass(frozen=True)
class Summary:
    """mean, std (ddof = 1) and the bootstrap interval [low, high] of the mean over n values.

    Attributes:
        mean: the mean.
        std: the sample standard deviation (0 for one value).
        low: the interval's lower end.
        high: the interval's upper end.
        n: the number of values.
    """

    mean: float
    std: float
    low: float
    high: float
    n: int

    def as_dict(self) -> dict[str, float | int]:
        """The fields by name.

        Returns:
            mean, std, low, high and n.
        """
        return asdict(self)


def summarize(values, resamples: int = 2000, level: float = 0.95, seed: int = 0) -> Summary:
    """Mean, std and percentile bootstrap interval of the mean. With fewer than two distinct values
    the interval is the mean itself (there is nothing to resample); NaN values are an error, not
    silently dropped.

    Args:
        values: (n,) numbers (flattened).
        resamples: bootstrap resamples.
        level: the interval's confidence level.
        seed: seeds the resampling.

    Returns:
        The Summary.

    Raises:
        ValueError: no values, or a non-finite one.
    """
    x = np.asarray(values, dtype=np.float64).ravel()
    if x.size == 0:
        raise ValueError("summarize: no values")
    if not np.all(np.isfinite(x)):
        raise ValueError(f"summarize: {int((~np.isfinite(x)).sum())} non-finite value(s)")
    mean = float(x.mean())
    std = float(x.std(ddof=1)) if x.size > 1 else 0.0
    if x.size < 2 or np.ptp(x) == 0:
        return Summary(mean, std, mean, mean, int(x.size))
    res = stats.bootstrap((x,), np.mean, n_resamples=resamples, confidence_level=level, method="percentile",
                          random_state=np.random.default_rng(seed), vectorized=True)
    low, high = float(res.confidence_interval.low), float(res.confidence_interval.high)
    if math.isnan(low) or math.isnan(high):  # degenerate resamples; the data themselves are fine
        low = high = mean
    return Summary(mean, std, low, high, int(x.size))


def spearman(a, b) -> float:
    """Spearman rank correlation of two score vectors (scipy.stats.spearmanr); NaN if either is constant.

    Args:
        a: (n,) scores (flattened).
        b: (n,) scores.

    Returns:
        ρ in [−1, 1], or NaN.

    Raises:
        ValueError: the shapes differ.
    """
    a, b = np.asarray(a, dtype=np.float64).ravel(), np.asarray(b, dtype=np.float64).ravel()
    if a.shape != b.shape:
        raise ValueError(f"spearman: shapes differ {a.shape} vs {b.shape}")
    if np.ptp(a) == 0 or np.ptp(b) == 0:
        return float("nan")
    return float(stats.spearmanr(a, b).statistic)


def wilcoxon_p(a, b) -> float:
    """Two-sided Wilcoxon signed-rank p-value of paired per-image values a vs b
    (scipy.stats.wilcoxon); NaN when every pair is tied (no evidence either way).

    Args:
        a: (n,) values (flattened).
        b: (n,) values paired with a.

    Returns:
        p, or NaN.

    Raises:
        ValueError: the shapes differ.
    """
    a, b = np.asarray(a, dtype=np.float64).ravel(), np.asarray(b, dtype=np.float64).ravel()
    if a.shape != b.shape:
        raise ValueError(f"wilcoxon_p: shapes differ {a.shape} vs {b.shape}")
    if np.all(a == b):
        return float("nan")
    return float(stats.wilcoxon(a, b, zero_method="wilcox").pvalue)
