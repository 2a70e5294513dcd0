"""How well a distance ranks a gallery by decoder-output distance: Spearman ρ per query,
recall@k of the true nearest neighbours, and MAE after a linear calibration."""

from __future__ import annotations

import numpy as np
from scipy import stats


def spearman_per_query(pred: np.ndarray, true: np.ndarray) -> np.ndarray:
    """Spearman ρ of each query's gallery ranking by ``pred`` against the true distances.

    Args:
        pred: (Q, G) predicted distances, query by gallery item.
        true: (Q, G) decoder-output distances.

    Returns:
        (Q,) Spearman ρ per query (NaN where a row is constant).
    """
    return np.array([stats.spearmanr(p, t).statistic for p, t in zip(pred, true)])


def recall_at_k(pred: np.ndarray, true: np.ndarray, k: int) -> np.ndarray:
    """Share of each query's k truly nearest gallery items among the k nearest by ``pred``.

    Args:
        pred: (Q, G) predicted distances.
        true: (Q, G) decoder-output distances.
        k: the neighbours compared (ties broken by gallery order).

    Returns:
        (Q,) recall@k in [0, 1].
    """
    top_pred = np.argsort(pred, axis=1, kind="stable")[:, :k]
    top_true = np.argsort(true, axis=1, kind="stable")[:, :k]
    return np.array([len(set(a) & set(b)) / k for a, b in zip(top_pred, top_true)])


def fit_calibration(pred: np.ndarray, true: np.ndarray) -> tuple[float, float]:
    """Least-squares a, b with true ≈ a·pred + b, fitted on training pairs.

    Args:
        pred: predicted distances, any shape.
        true: decoder-output distances, the same shape.

    Returns:
        (a, b).
    """
    a, b = np.polyfit(np.ravel(pred), np.ravel(true), 1)
    return float(a), float(b)


def calibrated_mae(pred: np.ndarray, true: np.ndarray, calibration: tuple[float, float]) -> np.ndarray:
    """Mean absolute error of a·pred + b against the true distances, per query.

    Args:
        pred: (Q, G) predicted distances.
        true: (Q, G) decoder-output distances.
        calibration: (a, b) from ``fit_calibration``.

    Returns:
        (Q,) the MAE of each query over its gallery.
    """
    a, b = calibration
    return np.abs(a * pred + b - true).mean(axis=1)


def two_stage(shortlist_by: np.ndarray, rerank_by: np.ndarray, shortlist: int) -> np.ndarray:
    """Distances for a two-stage search: the ``shortlist`` nearest by the first distance keep the
    second distance, the rest are pushed behind them (set to inf).

    Args:
        shortlist_by: (Q, G) the first-stage distances.
        rerank_by: (Q, G) the second-stage distances.
        shortlist: the items kept per query (ties broken by gallery order).

    Returns:
        (Q, G) float distances.
    """
    out = np.full_like(rerank_by, np.inf)
    idx = np.argsort(shortlist_by, axis=1, kind="stable")[:, :shortlist]
    np.put_along_axis(out, idx, np.take_along_axis(rerank_by, idx, axis=1), axis=1)
    return out
