"""The cost of a forward pass: theoretical FLOPs (torch.utils.flop_counter, which counts matrix
multiplications, convolutions and attention) and measured wall-clock time."""

from __future__ import annotations

import contextlib
import statistics
import time
from collections.abc import Callable, Iterator

import torch
from torch import nn
from torch.utils.flop_counter import FlopCounterMode, sdpa_flop_count

CPU_ATTENTION = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu


def _cpu_attention(query_shape, key_shape, value_shape, *args, out_shape=None, **kwargs) -> int:
    """The counter's FLOPs of scaled dot-product attention (its rule for the GPU kernels), for the CPU kernel."""
    return sdpa_flop_count(query_shape, key_shape, value_shape)


@contextlib.contextmanager
def counting(model: nn.Module | None = None) -> Iterator[FlopCounterMode]:
    """A FlopCounterMode that counts every layer, under no_grad. The counter has no rule for the
    fused kernels that run on CPU: ``model``'s timm attention layers run the explicit softmax path,
    ``torch.nn``'s transformer fast path (``torch.backends.mha``, which the importance head and the
    SPN take under no_grad) is off, and the CPU attention kernel counts as the GPU ones do, all
    restored after.

    Args:
        model: the module whose timm attention layers switch to the explicit path.

    Yields:
        The counter.
    """
    fused = [m for m in (model.modules() if model is not None else ()) if getattr(m, "fused_attn", False)]
    fast = torch.backends.mha.get_fastpath_enabled()
    for m in fused:
        m.fused_attn = False
    torch.backends.mha.set_fastpath_enabled(False)
    try:
        with FlopCounterMode(display=False, custom_mapping={CPU_ATTENTION: _cpu_attention}) as counter, \
                torch.no_grad():
            yield counter
    finally:
        torch.backends.mha.set_fastpath_enabled(fast)
        for m in fused:
            m.fused_attn = True


def count_flops(fn: Callable[[], object], model: nn.Module | None = None) -> int:
    """FLOPs of one call of ``fn``, every layer counted (``counting``).

    Args:
        fn: the call to count, run once without gradients.
        model: the module whose timm attention layers switch to the explicit path.

    Returns:
        The total FLOPs torch.utils.flop_counter counts.
    """
    with counting(model) as counter:
        fn()
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
