"""Deterministic subsets of labelled items: a seeded ranking that keeps the classes balanced in
every prefix, and windows of it (``subset: {count, seed, offset}`` of a source, ``data/sources.py``).
"""

from __future__ import annotations

import numpy as np


def stratified_order(labels: np.ndarray, seed: int) -> np.ndarray:
    """Every index, ranked: each label's items shuffled by ``seed``, then taken rank by rank
    across labels (label order shuffled too), so any prefix keeps the classes balanced.

    Args:
        labels: (n,) integer labels.
        seed: seeds the shuffles.

    Returns:
        (n,) int64 indices into ``labels``, a permutation of 0..n − 1.
    """
    rng = np.random.default_rng(seed)
    classes = rng.permutation(np.unique(labels))
    ranked = [(rank, position, index) for position, c in enumerate(classes)
              for rank, index in enumerate(rng.permutation(np.flatnonzero(labels == c)))]
    return np.array([index for _, _, index in sorted(ranked)], dtype=np.int64)


def stratified_subset(labels: np.ndarray, count: int, seed: int, offset: int = 0) -> np.ndarray:
    """Sorted indices of ranks [offset, offset + count) of ``stratified_order``: subsets with one
    seed and disjoint windows are disjoint (train / val / test of one source).

    Args:
        labels: (n,) integer labels.
        count: how many indices (fewer where the window passes n).
        seed: seeds ``stratified_order``.
        offset: the window's first rank.

    Returns:
        (≤ count,) int64 indices into ``labels``, ascending.
    """
    return np.sort(stratified_order(labels, seed)[offset:offset + count])
