"""Throughput measured in one run: every setting timed round-robin, so a drift in the machine's speed
touches each alike; warm-up rounds are left out; each setting's images/s is reported as the
median of its rounds with their min and max. FLOPs come from ``torch.utils.flop_counter``
(``evaluate.cost.count_flops``: matrix products, convolutions and attention; the patched forward's
head, SPN and merging included; the r×r Cholesky and triangular solves, which the counter has no
rule for, and the SPN weights' Gram, computed once per fit, left out).

A setting's speedup is read from the rounds themselves (``speedup``): round i's paired ratio is the
setting's images/s over the unpatched model's in that same round. It is called (faster or slower)
only when every round's ratio lies on one side of 1; a setting or unpatched model whose rounds
spread beyond ``SPREAD_LIMIT`` (max / min of its rounds' images/s), or one timed round alone
(no spread to judge), gives no call and says why."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch

Setup = Callable[[], None]    # prepares the model for one setting (patch or unpatch it)
Run = Callable[[], object]    # one forward of the timing batch
SPREAD_LIMIT = 2.0            # max / min of a setting's rounds beyond which no speedup is called
FASTER, SLOWER, WITHIN, REFERENCE = "faster", "slower", "within the spread", "reference"
CALLED = (FASTER, SLOWER)


@dataclass(frozen=True)
class Throughput:
    """One setting's images per second over the timed rounds.

    Attributes:
        median: the median over rounds.
        low: the slowest round's.
        high: the fastest round's.
        seconds: each round's seconds per batch, in order.
    """

    median: float
    low: float
    high: float
    seconds: tuple[float, ...]


def interleaved(settings: dict[str, Setup], run: Run, batch: int, repeats: int, warmup: int = 1
                ) -> dict[str, Throughput]:
    """Time ``run`` under every setting, round-robin: ``warmup`` untimed rounds, then ``repeats`` timed.

    Args:
        settings: name -> the call that puts the model in that setting (not timed).
        run: one forward of a batch of ``batch`` images (run under inference mode).
        batch: the images per call.
        repeats: timed rounds, ≥ 1.
        warmup: untimed rounds first.

    Returns:
        name -> its Throughput in images/s.
    """
    sync = torch.cuda.synchronize if torch.cuda.is_available() else (lambda: None)
    seconds: dict[str, list[float]] = {name: [] for name in settings}
    with torch.inference_mode():
        for i in range(warmup + repeats):
            for name, setup in settings.items():
                setup()
                sync()
                start = time.perf_counter()
                run()
                sync()
                if i >= warmup:
                    seconds[name].append(time.perf_counter() - start)
    return {name: Throughput(batch / statistics.median(s), batch / max(s), batch / min(s), tuple(s))
            for name, s in seconds.items()}


@dataclass(frozen=True)
class Speedup:
    """A setting's speedup over the unpatched model from the paired rounds (module docstring).

    Attributes:
        median: the median over rounds of the paired ratio.
        low: the smallest paired ratio.
        high: the largest paired ratio.
        call: ``FASTER`` or ``SLOWER`` (every ratio > 1, or < 1), ``WITHIN`` (the ratios reach 1),
            ``REFERENCE`` (the unpatched model itself), or why no call was made.
    """

    median: float
    low: float
    high: float
    call: str

    @property
    def called(self) -> bool:
        """Whether the timing ranks this setting against the unpatched model."""
        return self.call in CALLED


def spread(t: Throughput) -> float:
    """max / min of the rounds' images/s (1 when they agree; the same as of their seconds)."""
    return max(t.seconds) / min(t.seconds)


def unstable(t: Throughput, base: Throughput, limit: float = SPREAD_LIMIT) -> str:
    """Why no speedup may be called from these rounds, or "" when one may: one timed round, or
    the setting's or the unpatched model's rounds spread beyond ``limit``, e.g. "rounds spread
    10.4×: no speedup called"."""
    if min(len(t.seconds), len(base.seconds)) < 2:
        return "one timed round: no speedup called"
    parts = [f"rounds spread {spread(t):.1f}×"] if spread(t) > limit else []
    if t is not base and spread(base) > limit:
        parts.append(f"unpatched rounds spread {spread(base):.1f}×")
    return f"{', '.join(parts)}: no speedup called" if parts else ""


def paired_ratios(t: Throughput, base: Throughput) -> tuple[float, ...]:
    """Round i's images/s of ``t`` over the unpatched model's in round i (base seconds / t seconds).

    Raises:
        ValueError: the two were not timed over the same rounds.
    """
    if len(t.seconds) != len(base.seconds):
        raise ValueError(f"paired_ratios: {len(t.seconds)} rounds against {len(base.seconds)}")
    return tuple(b / s for s, b in zip(t.seconds, base.seconds))


def speedup(t: Throughput, base: Throughput, limit: float = SPREAD_LIMIT) -> Speedup:
    """``t``'s speedup over ``base`` (the unpatched model) and its call (module docstring).

    Args:
        t: the setting's rounds.
        base: the unpatched model's rounds, timed round-robin with ``t``.
        limit: the largest spread from which a speedup is called.

    Returns:
        The Speedup; ``t is base`` gives 1 and ``REFERENCE``, or its spread where its rounds
        spread beyond ``limit``.
    """
    ratios = paired_ratios(t, base)
    why = unstable(t, base, limit)
    if t is base:
        call = why if spread(t) > limit else REFERENCE
    elif why:
        call = why
    else:
        call = FASTER if min(ratios) > 1 else SLOWER if max(ratios) < 1 else WITHIN
    return Speedup(statistics.median(ratios), min(ratios), max(ratios), call)


def faster_in_every_round(a: Sequence[float], b: Sequence[float]) -> bool:
    """Whether a setting timed ``a`` (seconds per round) ran faster than one timed ``b`` in each
    round they were timed in together (round-robin, so round i of each ran back to back)."""
    return len(a) == len(b) > 0 and all(x < y for x, y in zip(a, b))
