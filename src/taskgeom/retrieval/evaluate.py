"""How well a distance ranks a gallery by decoder-output distance: Spearman ρ per query,
recall@k of the true nearest neighbours, and MAE after a linear calibration."""

from __future__ import annotations

import numpy as np
from scipy import stats


def spearman_per_query(pred: np.ndarray, true: np.ndarray) -> np.ndarray:
    """pred, true (Q, G) distances -> (Q,) Spearman ρ of each query's gallery ranking."""
    return np.array([stats.spearmanr(p, t).statistic for p, t in zip(pred, true)])


def recall_at_k(pred: np.ndarray, true: np.ndarray, k: int) -> np.ndarray:
    """(Q,) share of each query's k truly nearest gallery items among the k nearest by ``pred``."""
    top_pred = np.argsort(pred, axis=1, kind="stable")[:, :k]
    top_true = np.argsort(true, axis=1, kind="stable")[:, :k]
    return np.array([len(set(a) & set(b)) / k for a, b in zip(top_pred, top_true)])


def fit_calibration(pred: np.ndarray, true: np.ndarray) -> tuple[float, float]:
    """Least-squares a, b with true ≈ a·pred + b, fitted on training pairs."""
    a, b = np.polyfit(np.ravel(pred), np.ravel(true), 1)
    return float(a), float(b)


def calibrated_mae(pred: np.ndarray, true: np.ndarray, calibration: tuple[float, float]) -> np.ndarray:
    """(Q,) mean absolute error of a·pred + b against the true distances, per query."""
    a, b = calibration
    return np.abs(a * pred + b - true).mean(axis=1)


def two_stage(shortlist_by: np.ndarray, rerank_by: np.ndarray, shortlist: int) -> np.ndarray:
    """Distances for a two-stage search: the ``shortlist`` nearest by the first distance keep the
    second distance, the rest are pushed behind them. (Q, G), (Q, G) -> (Q, G)."""
    out = np.full_like(rerank_by, np.inf)
    idx = np.argsort(shortlist_by, axis=1, kind="stable")[:, :shortlist]
    np.put_along_axis(out, idx, np.take_along_axis(rerank_by, idx, axis=1), axis=1)
    return out
