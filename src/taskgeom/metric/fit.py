"""Training the SPN and the importance head on streamed targets, and evaluating them on held-out
images. The loop times how long each step waits for its batch from disk (``Curve.wait``)."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import torch
from torch import Tensor, nn

from taskgeom.finite import check_step
from taskgeom.metric.targets import TargetFile, batch_rows, stream_batches
from taskgeom.models.train import learning_rate

LOG_EVERY = 25


@dataclass
class Curve:
    """Training curve (step, mean loss over the last LOG_EVERY steps), and the seconds spent
    waiting on the reader vs the whole loop.

    Attributes:
        points: (step, mean loss) pairs, every LOG_EVERY steps and at the last.
        wait_s: seconds spent waiting for batches from disk.
        total_s: seconds of the whole loop.
    """

    points: list[tuple[int, float]] = field(default_factory=list)
    wait_s: float = 0.0
    total_s: float = 0.0

    @property
    def wait_fraction(self) -> float:
        """wait_s / total_s (0 before the loop has run)."""
        return self.wait_s / self.total_s if self.total_s else 0.0


def fit(model: nn.Module, target: TargetFile, keys: tuple[str, ...],
        loss_fn: Callable[[nn.Module, dict[str, Tensor]], Tensor],
        steps: int, batch_size: int, lr: float, seed: int, device: str, limit: int | None = None,
        progress: Callable = lambda it, **kw: it, stage: str = "fit") -> Curve:
    """AdamW with warm-up and cosine decay on minibatches streamed from ``target``; a non-finite
    loss or gradient stops it (``finite.check_step``, naming ``stage``).

    Args:
        model: trained in place (left in eval mode).
        target: the targets file to stream.
        keys: its datasets each batch holds.
        loss_fn: (model, batch of float tensors by key) -> scalar loss.
        steps: optimizer steps.
        batch_size: rows per step.
        lr: the peak learning rate.
        seed: decides the batches (``batch_rows``).
        device: where the batches go.
        limit: draw only from the first ``limit`` rows.
        progress: wraps the step range (e.g. a tqdm factory).
        stage: named in the error of a non-finite step.

    Returns:
        The training Curve.
    """
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.01)
    curve, window = Curve(), []
    model.train()
    t_start = time.perf_counter()
    batches = stream_batches(target, keys, batch_size, steps, seed, limit)
    for step in progress(range(steps), total=steps):
        t0 = time.perf_counter()
        batch = next(batches)
        curve.wait_s += time.perf_counter() - t0
        b = {k: torch.as_tensor(v).float().to(device) for k, v in batch.items()}
        for group in opt.param_groups:
            group["lr"] = learning_rate(step, steps, lr)
        loss = loss_fn(model, b)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        norm = nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        rows = lambda: batch_rows(target, batch_size, seed, step, limit).tolist()  # noqa: B023 (called at once)
        check_step(stage, step, loss, norm, lambda: f"of rows {rows()} of {target.path}")
        opt.step()
        window.append(loss.item())
        if (step + 1) % LOG_EVERY == 0 or step + 1 == steps:
            curve.points.append((step + 1, float(np.mean(window))))
            window = []
    batches.close()
    curve.total_s = time.perf_counter() - t_start
    model.eval()
    return curve


@torch.no_grad()
def predict(model: nn.Module, target: TargetFile, fn: Callable[[nn.Module, Tensor], Tensor], device: str,
            batch_size: int = 32) -> np.ndarray:
    """fn(model, features) over every row of ``target``, in order, stacked.

    Args:
        model: the network.
        target: the targets file whose ``features`` (n, N, D) are read.
        fn: (model, features (b, N, D) float32) -> (b, ...).
        device: where the features go.
        batch_size: rows per call.

    Returns:
        (n, ...) the outputs of every row.
    """
    out = []
    for start in range(0, target.num_items, batch_size):
        F = torch.as_tensor(target.read(("features",), slice(start, start + batch_size))["features"]).float().to(device)
        out.append(fn(model, F).cpu().numpy())
    return np.concatenate(out)
