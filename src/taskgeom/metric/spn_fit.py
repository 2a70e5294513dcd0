"""Training the Spectral Pullback Network on a target cache and measuring it on held-out images:
what the ``spn`` stage and ``taskgeom fit`` share (paper §5.2–5.5, App. J).

Training is ``metric.fit.fit`` with ``spn.spn_loss`` against one supervision source of the cache
(``exact`` or ``q<q>``: its modes, singular values and ‖J‖_F² estimate). Held-out quality is the
subspace alignment V1 = ‖UᵀV‖_F² / r of the predicted modes U with the reference top-r subspace V:
the exact one where the cache holds it, else the RandNLA one at the largest q.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import torch

from taskgeom.metric.fit import Curve, fit, predict
from taskgeom.metric.spn import SpectralPullbackNetwork, spn_loss, subspace_alignment_batch
from taskgeom.metric.targets import TargetFile


def v1_per_image(model: SpectralPullbackNetwork, test: TargetFile, reference: np.ndarray, device: str) -> np.ndarray:
    """V1 = ‖UᵀV‖_F² / r per test image.

    Args:
        model: the SPN (or any module returning a PredictedMetric).
        test: the held-out targets, whose features are read.
        reference: (images, N, D, r) the reference modes.
        device: where the features go.

    Returns:
        (images,) V1.
    """
    U = predict(model, test, lambda m, F: m(F).U, device)
    V = torch.as_tensor(reference).flatten(1, 2)
    return subspace_alignment_batch(torch.as_tensor(U), V).numpy()


def reference_of(test: TargetFile) -> tuple[str, np.ndarray]:
    """The reference subspace of a held-out cache: exact where held, else the largest q's.

    Args:
        test: the held-out targets.

    Returns:
        (source name, (images, N, D, r) modes).
    """
    source = "exact" if test.exact else f"q{max(test.qs)}"
    return source, test.read((f"{source}/modes",))[f"{source}/modes"]


def new_spn(tokens: int, dim: int, rank: int, width: int, depth: int, heads: int, seed: int,
            device: str) -> SpectralPullbackNetwork:
    """An untrained SPN in eval mode, its weights drawn after ``torch.manual_seed(seed)``.

    Args:
        tokens: N, the token slots of the training grid.
        dim: D.
        rank: r, the modes predicted.
        width: the embedding width.
        depth: transformer layers.
        heads: attention heads per layer.
        seed: seeds torch before the weights are drawn.
        device: where it goes.

    Returns:
        The SPN.
    """
    torch.manual_seed(seed)
    model = SpectralPullbackNetwork(tokens, dim, rank, width, depth, heads)
    model.to(device).eval()
    return model


def train_spn(model: SpectralPullbackNetwork, train: TargetFile, source: str, steps: int, batch_size: int, lr: float,
              seed: int, device: str, progress: Callable = lambda it, **kw: it, stage: str = "spn") -> Curve:
    """``fit`` the SPN in place against supervision ``source`` with ``spn_loss``.

    Args:
        model: trained in place (left in eval mode).
        train: the training targets.
        source: "exact" or "q<q>", one of ``train.sources()``.
        steps: optimizer steps.
        batch_size: images per step.
        lr: the peak learning rate.
        seed: decides the batches.
        device: where the batches go.
        progress: wraps the step range (``fit``'s).
        stage: named in the error of a non-finite step.

    Returns:
        The training Curve.
    """
    frob2 = "exact/frob2" if source == "exact" else "frob2"
    keys = ("features", f"{source}/modes", f"{source}/sigma", frob2)
    loss = lambda m, b: spn_loss(m(b["features"]), b[keys[1]].flatten(1, 2), b[keys[2]], b[frob2])
    return fit(model, train, keys, loss, steps, batch_size, lr, seed, device, progress=progress, stage=stage)
