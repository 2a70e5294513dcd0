"""Training the importance head on a target cache and scoring it on held-out images: what the
``head`` stage and ``taskgeom fit`` share (paper §5.4, App. F).

Training is ``metric.fit.fit`` with ``head.head_loss`` on one target dataset, the network built
after seeding torch with the run's seed, so a (seed, settings, cache) triple gives one head. A
head is judged per held-out image by Spearman ρ between its scores and the target, against the
position-only floor: each token slot scored by its mean training target (what position alone
predicts).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import torch
from torch import Tensor

from taskgeom.evaluate.stats import spearman
from taskgeom.metric.fit import Curve, fit
from taskgeom.metric.head import ImportanceHead, head_loss
from taskgeom.metric.targets import TargetFile


def target_key(kind: str, target: TargetFile, power_iters: int) -> str:
    """The dataset a head learns: spectral, e_t from the RandNLA targets at q = ``power_iters``;
    block_norm, the Hutchinson ‖J_t‖_F².

    Args:
        kind: "spectral" or "block_norm".
        target: the targets file (unused; the key names a dataset of it).
        power_iters: q of the spectral targets.

    Returns:
        The dataset's name, e.g. "q2/importance".

    Raises:
        ValueError: another kind.
    """
    if kind == "spectral":
        return f"q{power_iters}/importance"
    if kind == "block_norm":
        return "block_norm"
    raise ValueError(f"head target {kind!r}: expected 'spectral' or 'block_norm'")


def rho_per_image(pred: np.ndarray, target: np.ndarray) -> np.ndarray:
    """Spearman ρ of each image's scores against its target.

    Args:
        pred: (images, tokens) scores.
        target: (images, tokens) targets.

    Returns:
        (images,) ρ (NaN where either row is constant).
    """
    return np.array([spearman(p, t) for p, t in zip(pred, target)])


def position_floor(train: TargetFile, key: str, images: int, truth: np.ndarray) -> np.ndarray:
    """The floor a head must beat to use the image at all: each test image's ρ when scored by the
    mean training target of its token slot (position alone).

    Args:
        train: the training targets.
        key: the target's dataset.
        images: the training images the head sees (the first ones).
        truth: (images, tokens) the test images' targets.

    Returns:
        (test images,) ρ.
    """
    mean_map = train.read((key,), slice(0, images))[key].mean(axis=0)
    return rho_per_image(np.broadcast_to(mean_map, truth.shape), truth)


def score(model: ImportanceHead, F: Tensor) -> Tensor:
    """The head's scores of features F (B, N, D): (B, N)."""
    return model(F)


def new_head(tokens: int, dim: int, width: int, heads: int, layers: int, seed: int, device: str) -> ImportanceHead:
    """An untrained head, its weights drawn after ``torch.manual_seed(seed)``.

    Args:
        tokens: N, the token slots of the training grid.
        dim: D.
        width: the embedding width.
        heads: attention heads per layer.
        layers: attention layers.
        seed: seeds torch before the weights are drawn.
        device: where the head goes.

    Returns:
        The head (train mode).
    """
    torch.manual_seed(seed)
    return ImportanceHead(tokens, dim, width, heads, layers).to(device)


def train_head(head: ImportanceHead, train: TargetFile, key: str, w_rank: float, steps: int, batch_size: int,
               lr: float, seed: int, device: str, limit: int | None = None,
               progress: Callable = lambda it, **kw: it, stage: str = "head") -> Curve:
    """``fit`` the head in place on dataset ``key`` with ``head_loss`` (regression on the
    standardised log target + ``w_rank`` · the pairwise ranking loss).

    Args:
        head: trained in place (left in eval mode).
        train: the training targets.
        key: the target's dataset (``target_key``).
        w_rank: the ranking loss's weight.
        steps: optimizer steps.
        batch_size: images per step.
        lr: the peak learning rate.
        seed: decides the batches.
        device: where the batches go.
        limit: train on the first ``limit`` images only.
        progress: wraps the step range (``fit``'s).
        stage: named in the error of a non-finite step.

    Returns:
        The training Curve.
    """
    loss = lambda model, b: head_loss(model(b["features"]), b[key], w_rank)
    return fit(head, train, ("features", key), loss, steps, batch_size, lr, seed, device, limit=limit,
               progress=progress, stage=stage)
