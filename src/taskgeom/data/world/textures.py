"""Procedural textures with natural-image statistics, evaluated at arbitrary points.

- ``hash_uniform``: a stateless integer hash (SplitMix64 finaliser, Steele et al. 2014) from
  integer lattice coordinates and a seed to uniforms in [0, 1): the same numbers on every platform
  and at every resolution, so a texture is a function of the surface point alone.
- ``fractal_noise``: spectral synthesis, a sum of cosine waves with random directions and phases
  at log-spaced frequencies, ``per_octave`` waves per octave, all of one amplitude. Equal variance
  per octave is scale invariance: an image of such a surface has a radially averaged power
  spectrum P(f) ∝ f⁻² over the band the octaves cover (Field 1987), like natural images.
- ``dead_leaves``: the dead-leaves model (Matheron 1968; Lee, Mumford & Huang 2001; used for
  pretraining by Baradad et al. 2021): discs of sizes spread over several octaves, each with a
  random colour, stacked in a random order. Occlusion edges at every scale give the f⁻² spectrum
  and the step edges of natural images.
- ``pattern_mask``: the four object texture families of the world's classes (``PATTERNS``).
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np

_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_MIX1 = np.uint64(0xBF58476D1CE4E5B9)
_MIX2 = np.uint64(0x94D049BB133111EB)


def _splitmix(x: np.ndarray) -> np.ndarray:
    """SplitMix64's finaliser on uint64 arrays (wrapping arithmetic)."""
    x = x + _GOLDEN
    x = (x ^ (x >> np.uint64(30))) * _MIX1
    x = (x ^ (x >> np.uint64(27))) * _MIX2
    return x ^ (x >> np.uint64(31))


def hash_uniform(coords: np.ndarray, seed: int, count: int) -> np.ndarray:
    """Integer lattice coordinates and a seed -> uniforms in [0, 1), by chained SplitMix64.

    Args:
        coords: (..., D) integer coordinates.
        seed: the hash's seed.
        count: uniforms per point.

    Returns:
        (..., count) float64 in [0, 1), 53-bit.
    """
    with np.errstate(over="ignore"):
        h = _splitmix(np.full(coords.shape[:-1], np.uint64(seed % 2**64), dtype=np.uint64))
        for i in range(coords.shape[-1]):
            h = _splitmix(h ^ coords[..., i].astype(np.int64).astype(np.uint64))
        out = np.empty((*coords.shape[:-1], count))
        for j in range(count):
            h = _splitmix(h)
            out[..., j] = (h >> np.uint64(11)).astype(np.float64) * 2.0**-53
    return out


@lru_cache(maxsize=4096)
def _waves(seed: int, dims: int, octaves: int, per_octave: int) -> tuple[np.ndarray, np.ndarray]:
    """Wave vectors (K, dims), cycles per unit at base frequency 1, and phases (K,) of one noise."""
    rng = np.random.default_rng(np.random.SeedSequence(seed, spawn_key=(7, dims)))
    k = octaves * per_octave
    direction = rng.normal(size=(k, dims))
    direction /= np.linalg.norm(direction, axis=1, keepdims=True)
    freq = 2.0 ** ((np.arange(k) + rng.uniform(0, 1, k)) / per_octave)
    return direction * freq[:, None], rng.uniform(0, 2 * np.pi, k)


def fractal_noise(points: np.ndarray, seed: int, base_frequency: float, octaves: int = 5,
                  per_octave: int = 3) -> np.ndarray:
    """Scale-invariant noise, zero mean, unit variance: a sum of random plane waves.

    Frequencies run from ``base_frequency`` (cycles per unit) over ``octaves`` octaves.

    Args:
        points: (P, D) points.
        seed: the noise's seed.
        base_frequency: the lowest frequency, cycles per unit.
        octaves: octaves of frequency above it.
        per_octave: waves per octave.

    Returns:
        (P,) values.
    """
    waves, phase = _waves(int(seed), points.shape[-1], octaves, per_octave)
    arg = 2 * np.pi * base_frequency * (points @ waves.T) + phase
    return np.cos(arg).sum(axis=-1) * np.sqrt(2.0 / len(phase))


def dead_leaves(xy: np.ndarray, seed: int, sizes: tuple[float, ...]) -> tuple[np.ndarray, np.ndarray]:
    """Dead leaves at 2-D points: per point the index of the covering leaf's colour draw
    (a uniform in [0, 1), -1 where no leaf covers it) and a per-leaf shade uniform.

    One layer of discs per cell size in ``sizes`` (units of ``xy``): each lattice cell holds one
    disc, centre uniform in the cell, radius 0.25-0.7 cells; every disc draws a random stacking
    order, and a point shows the topmost disc covering it (the 3×3 neighbouring cells of each
    layer hold every disc that can reach it).

    Args:
        xy: (P, 2) points.
        seed: the texture's seed.
        sizes: cell sizes, one layer each.

    Returns:
        colour (P,) and shade (P,), both float64.
    """
    best_z = np.full(len(xy), -1.0)
    colour, shade = np.full(len(xy), -1.0), np.zeros(len(xy))
    offsets = np.array([(i, j) for i in (-1, 0, 1) for j in (-1, 0, 1)])
    for layer, size in enumerate(sizes):
        cell = np.floor(xy / size).astype(np.int64)
        for off in offsets:
            c = cell + off
            u = hash_uniform(np.concatenate([c, np.full((len(c), 1), layer)], axis=1), seed, 6)
            centre = (c + u[:, :2]) * size
            radius = (0.25 + 0.45 * u[:, 2]) * size
            covered = np.einsum("pi,pi->p", xy - centre, xy - centre) < radius**2
            top = covered & (u[:, 3] > best_z)
            best_z = np.where(top, u[:, 3], best_z)
            colour = np.where(top, u[:, 4], colour)
            shade = np.where(top, u[:, 5], shade)
    return colour, shade


def spots(u: np.ndarray, seed: int) -> np.ndarray:
    """Polka dots in 3-D: in each unit cell of u, a ball of radius 0.2-0.35 around a
    random point of the cell's central half; True inside (the cells of u's 27 neighbours are not
    needed: a ball stays inside its cell).

    Args:
        u: (P, 3) texture coordinates.
        seed: the texture's seed.

    Returns:
        (P,) bool.
    """
    cell = np.floor(u).astype(np.int64)
    r = hash_uniform(cell, seed, 4)
    centre = cell + 0.25 + 0.5 * r[:, :3]
    radius = 0.2 + 0.15 * r[:, 3]
    return np.linalg.norm(u - centre, axis=1) < radius


def pattern_mask(pattern: str, u: np.ndarray, stripe_dir: np.ndarray, seed: int) -> np.ndarray:
    """Where a texture shows its pattern colour, at texture coordinates u (cycles: object
    frame × frequency). stripes: bands across ``stripe_dir``; checker: unit cubes; spots:
    dots; marble: stripes bent by fractal noise (veins).

    Args:
        pattern: stripes, checker, spots or marble.
        u: (P, 3) texture coordinates.
        stripe_dir: (P, 3) unit stripe directions.
        seed: the texture's seed.

    Returns:
        (P,) bool.

    Raises:
        ValueError: an unknown pattern.
    """
    along = np.einsum("pi,pi->p", u, stripe_dir)
    if pattern == "stripes":
        return np.floor(2.0 * along) % 2 == 1
    if pattern == "checker":
        return np.floor(u).sum(axis=1) % 2 == 1
    if pattern == "spots":
        return spots(u, seed)
    if pattern == "marble":
        return np.sin(2 * np.pi * along + 2.2 * fractal_noise(u, seed, 0.5, octaves=3)) > 0.35
    raise ValueError(f"pattern_mask: unknown pattern {pattern!r}")
