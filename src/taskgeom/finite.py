"""Non-finite guards: a NaN or infinity stops the stage where it first appears, named.

- Readers (image sources, world arrays, target caches) check the floating-point values they
  hand on and name the file and item that hold the first non-finite one (``require_finite``).
- Training loops check each step's loss and gradient norm before the optimizer moves
  (``check_step``), and stages check the metrics they are about to publish (``check_metrics``),
  so a run stops at the first step that goes wrong, naming the stage, step and batch, instead
  of training on and failing later in a summary that names neither.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping

import numpy as np
import torch
from torch import Tensor


class NonFiniteError(ValueError):
    """A value read or computed is NaN or infinite; the message names where it came from."""


def first_nonfinite_row(values: np.ndarray | Tensor) -> int | None:
    """The index of the first row holding a NaN or an infinity, or None (integer and boolean arrays
    have none).

    Args:
        values: (n, ...) array or tensor (a scalar counts as one row).

    Returns:
        The row index, or None.
    """
    array = values.detach().cpu().numpy() if isinstance(values, Tensor) else np.asarray(values)
    if not np.issubdtype(array.dtype, np.floating):
        return None
    bad = ~np.isfinite(array.reshape(len(array), -1) if array.ndim else array.reshape(1, 1))
    rows = np.flatnonzero(bad.any(axis=1))
    return int(rows[0]) if rows.size else None


def require_finite(values: np.ndarray | Tensor, what: str, item: Callable[[int], str] = lambda i: f"item {i}") -> None:
    """Raise NonFiniteError naming ``what`` and the first item of ``values`` (n, ...) that holds a
    NaN or an infinity, as ``item(row)`` names it (an origin such as ``file[index]``).

    Args:
        values: (n, ...) array or tensor.
        what: names the values, e.g. the file and dataset.
        item: row -> its name in the message.

    Raises:
        NonFiniteError: a row holds a NaN or an infinity.
    """
    row = first_nonfinite_row(values)
    if row is not None:
        where = item(row)
        raise NonFiniteError(f"{what}: {where} holds a non-finite value (NaN or infinity); "
                             "fix or regenerate the file that holds it")


def check_step(stage: str, step: int, loss: Tensor | float, grad_norm: Tensor | float | None,
               batch: Callable[[], str]) -> None:
    """Raise NonFiniteError naming ``stage``, the training ``step`` and its batch (``batch()``,
    called only then) when the loss or the gradient norm is not finite.

    Args:
        stage: names the stage.
        step: the 0-based step (reported 1-based).
        loss: the step's loss.
        grad_norm: the gradient norm, or None when not checked.
        batch: describes the batch, called only for the message.

    Raises:
        NonFiniteError: the loss or the gradient norm is NaN or infinite.
    """
    for name, value in (("loss", loss), ("gradient norm", grad_norm)):
        value = float(value.detach()) if isinstance(value, Tensor) else value
        if value is not None and not math.isfinite(value):
            raise NonFiniteError(f"{stage}: non-finite {name} ({value}) at step {step + 1}, batch "
                                 f"{batch()}; training stopped before the optimizer step")


def grad_norm(parameters) -> Tensor:
    """The 2-norm of all gradients together (the value ``clip_grad_norm_`` reports), without clipping.

    Args:
        parameters: parameters, those without a gradient skipped.

    Returns:
        A scalar tensor (0 without gradients).
    """
    grads = [p.grad for p in parameters if p.grad is not None]
    return torch.nn.utils.get_total_norm(grads) if grads else torch.zeros(())


def check_metrics(stage: str, metrics: Mapping[str, object]) -> None:
    """Raise NonFiniteError naming ``stage`` and every non-finite number among ``metrics`` (nested
    mappings and lists are searched) before they are published.

    Args:
        stage: names the stage.
        metrics: names -> numbers, nested mappings and lists allowed.

    Raises:
        NonFiniteError: a float among them is NaN or infinite; the message lists their dotted keys.
    """
    bad = [key for key, value in _numbers(metrics) if not math.isfinite(value)]
    if bad:
        raise NonFiniteError(f"{stage}: non-finite metric(s) {', '.join(bad)}; nothing was published")


def _numbers(value: object, key: str = "") -> list[tuple[str, float]]:
    if isinstance(value, Mapping):
        return [pair for k, v in value.items() for pair in _numbers(v, f"{key}.{k}" if key else str(k))]
    if isinstance(value, (list, tuple)):
        return [pair for i, v in enumerate(value) for pair in _numbers(v, f"{key}[{i}]")]
    if isinstance(value, (float, np.floating)):
        return [(key, float(value))]
    return []
