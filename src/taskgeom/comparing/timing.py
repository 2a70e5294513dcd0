"""Throughput measured in one run: every setting timed round-robin, so a drift in the machine's speed
touches each alike; warm-up rounds are left out; each setting's images/s is reported as the
median of its rounds with their min and max. FLOPs come from ``torch.utils.flop_counter``
(``evaluate.cost.count_flops``: matrix products, convolutions and attention; the patched forward's
head, SPN and merging included; the r×r Cholesky and triangular solves, which the counter has no
rule for, and the SPN weights' Gram, computed once per fit, left out)."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass

import torch

Setup = Callable[[], None]    # prepares the model for one setting (patch or unpatch it)
Run = Callable[[], object]    # one forward of the timing batch


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
