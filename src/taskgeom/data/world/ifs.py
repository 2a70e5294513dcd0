"""Formula-driven shapes: FractalDB's iterated-function-system fractals (Kataoka et al. 2020).

An IFS is a few random contractive affine maps of the plane; its attractor, drawn by the chaos
game, is the fractal. FractalDB draws each map's six parameters uniformly from [-1, 1] and keeps
systems whose attractor fills enough of its box. Here a system is drawn from a seed the same way
(maps rescaled to a contraction when their largest singular value is 0.85 or more), rasterised
into a square occupancy mask over its bounding box, and kept when it fills 15-60% of it; the
world cuts its ``fractal`` primitives out of flat panels with the mask.
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np

GRID = 48            # mask side in cells
CHAINS = 1024        # parallel chaos-game chains
STEPS = 40           # iterations per chain (the first 12 discarded)
FILL = (0.15, 0.6)   # accepted share of filled cells


def _system(rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """2-4 maps: matrices (m, 2, 2), offsets (m, 2), probabilities (m,) ∝ |det|."""
    m = int(rng.integers(2, 5))
    a = rng.uniform(-1, 1, (m, 2, 2))
    b = rng.uniform(-1, 1, (m, 2))
    top = np.linalg.svd(a, compute_uv=False)[:, 0]
    a *= np.minimum(1.0, 0.85 / top)[:, None, None]
    w = np.abs(np.linalg.det(a)) + 1e-3
    return a, b, w / w.sum()


def _rasterise(a: np.ndarray, b: np.ndarray, p: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Chaos game on CHAINS chains -> (GRID, GRID) bool mask of the attractor's bounding box."""
    x = rng.uniform(-1, 1, (CHAINS, 2))
    points = []
    cumulative = np.cumsum(p)
    for step in range(STEPS):
        k = np.minimum(np.searchsorted(cumulative, rng.random(CHAINS)), len(p) - 1)
        x = np.einsum("nij,nj->ni", a[k], x) + b[k]
        if step >= 12:
            points.append(x)
    pts = np.concatenate(points)
    lo, hi = pts.min(axis=0), pts.max(axis=0)
    cells = np.clip(((pts - lo) / np.maximum(hi - lo, 1e-9) * GRID).astype(int), 0, GRID - 1)
    mask = np.zeros((GRID, GRID), dtype=bool)
    mask[cells[:, 1], cells[:, 0]] = True
    return mask


@lru_cache(maxsize=1024)
def fractal_mask(seed: int) -> np.ndarray:
    """(GRID, GRID) bool occupancy of the fractal drawn from ``seed``: [row, column] = [y, x] cell,
    row 0 at the lowest y.

    Systems are drawn until one fills FILL of its box (the last drawn after 50 tries).

    Args:
        seed: the fractal's seed.

    Returns:
        (GRID, GRID) bool, read-only (cached).
    """
    rng = np.random.default_rng(np.random.SeedSequence(seed, spawn_key=(11,)))
    for _ in range(50):
        mask = _rasterise(*_system(rng), rng)
        if FILL[0] <= mask.mean() <= FILL[1]:
            break
    mask.setflags(write=False)
    return mask
