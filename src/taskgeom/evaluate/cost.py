"""The cost of a forward pass: theoretical FLOPs (torch.utils.flop_counter, which counts matrix
multiplications, convolutions and attention) and measured wall-clock time."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable

import torch
from torch import nn
from torch.utils.flop_counter import FlopCounterMode


def count_flops(fn: Callable[[], object], model: nn.Module | None = None) -> int:
    """FLOPs of one call of ``fn``. The counter has no rule for the fused attention kernels on
    CPU, so ``model``'s timm attention layers run the explicit softmax path while counting.

    Args:
        fn: the call to count, run once without gradients.
        model: the module whose timm attention layers switch to the explicit path (restored after).

    Returns:
        The total FLOPs torch.utils.flop_counter counts.
    """
    fused = [m for m in (model.modules() if model is not None else ()) if getattr(m, "fused_attn", False)]
    for m in fused:
        m.fused_attn = False
    try:
        with FlopCounterMode(display=False) as counter, torch.no_grad():
            fn()
    finally:
        for m in fused:
            m.fused_attn = True
    return int(counter.get_total_flops())


def interleaved_wall_clock(fns: dict[str, Callable[[], object]], repeats: int = 5, warmup: int = 1) -> dict[str, float]:
    """Median seconds of each function, timed round-robin so drift in the machine's speed
    affects every function alike (ratios measured in one run).

    Args:
        fns: name -> call to time (run without gradients; CUDA synchronised around each call).
        repeats: timed rounds.
        warmup: untimed rounds first.

    Returns:
        name -> median seconds per call.
    """
    sync = torch.cuda.synchronize if torch.cuda.is_available() else (lambda: None)
    times: dict[str, list[float]] = {name: [] for name in fns}
    with torch.no_grad():
        for i in range(warmup + repeats):
            for name, fn in fns.items():
                sync()
                start = time.perf_counter()
                fn()
                sync()
                if i >= warmup:
                    times[name].append(time.perf_counter() - start)
    return {name: statistics.median(t) for name, t in times.items()}
