"""Training a fit's networks on its target cache, and judging them on its held-out images.

The importance head learns the spectral token energy e_t (``q<q>/importance``) as the ``head``
stage trains it (``metric.head_fit``: ``head_loss`` through ``metric.fit.fit``), with the
pipeline's default architecture and loss weight (``HEAD``, params.yaml ``learn.head_defaults``).
The SPN learns the same cache's top-r triplets as the ``spn`` stage (``metric.spn_fit``, ``SPN``,
params.yaml ``learn.spn``'s architecture) for ``spn_steps`` (``SPN_PASSES`` passes over the
training images by default) at the peak learning rate ``spn_lr`` (default ``SPN_LR``, above the
stage's 0.002, for the shorter run). Both draw their weights after seeding torch with the fit's
seed, and step s's batch from (seed, s).

Held-out quality of the head: per held-out image, Spearman ρ between its scores and e_t, and the
position-only floor's ρ (each token slot scored by its mean training e_t,
``head_fit.position_floor``), as the ``head`` stage measures them. Means come with percentile
bootstrap intervals (``evaluate.stats.summarize``, ``BOOTSTRAP``); the paired Wilcoxon
signed-rank test compares the two image by image. The verdict follows ``RULE``. An image where a
ρ is undefined (a constant row) is left out, and counted. The SPN's quality is V1 of its modes
with the held-out top-r subspace, beside the untrained SPN of the same seed.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Callable

import numpy as np
import torch

from taskgeom.evaluate.stats import summarize, wilcoxon_p
from taskgeom.metric.fit import Curve, predict
from taskgeom.metric.head import ImportanceHead
from taskgeom.metric.head_fit import new_head, position_floor, rho_per_image, score, train_head
from taskgeom.metric.spn import SpectralPullbackNetwork
from taskgeom.metric.spn_fit import new_spn, reference_of, train_spn, v1_per_image
from taskgeom.metric.targets import TargetFile

HEAD = {"width": 64, "heads": 2, "layers": 1, "w_rank": 0.5, "lr": 0.002}
SPN = {"width": 64, "depth": 2, "heads": 4}
SPN_PASSES, SPN_MAX_STEPS, SPN_LR = 20, 600, 0.005  # the SPN's default training (``spn_steps``, ``fit_spn``)
BOOTSTRAP = {"resamples": 2000, "level": 0.95, "seed": 0}
ALPHA = 0.05
RULE = ("the head beats the position-only floor when the 95% bootstrap interval of its mean held-out ρ lies wholly "
        "above the floor's, or when the paired Wilcoxon signed-rank test over the held-out images gives p < 0.05 "
        "with its mean above the floor's; it is below the floor by the same rule reversed")


def network_width(dim: int) -> int:
    """The head's and the SPN's width for features of width ``dim``: ⌊dim / 4⌋ within [16, ``HEAD``'s
    width], so that on a small model the networks that choose and merge its tokens stay a small
    share of its own FLOPs (they run on every token after the fit's block)."""
    return max(16, min(HEAD["width"], dim // 4))


def spn_steps(train_images: int, batch_size: int) -> int:
    """The SPN's default steps: ``SPN_PASSES`` passes over the training images, ⌈passes · n / b⌉ with
    b = min(batch size, n) the rows of a batch, at most ``SPN_MAX_STEPS``."""
    return min(SPN_MAX_STEPS, math.ceil(SPN_PASSES * train_images / min(batch_size, train_images)))


def labelled(progress: Callable, desc: str) -> Callable:
    """``progress`` with its bar named ``desc``, counting steps."""
    return lambda it, **kw: progress(it, desc=desc, unit="step", **kw)


def head_architecture(train: TargetFile) -> dict:
    """What rebuilds the head ``fit_head`` trains on ``train`` (``checkpoint.write_fit``)."""
    return {"kind": "importance_head", "tokens": train.tokens, "dim": train.dim, "width": network_width(train.dim),
            "heads": HEAD["heads"], "layers": HEAD["layers"]}


def spn_architecture(train: TargetFile) -> dict:
    """What rebuilds the SPN ``fit_spn`` trains on ``train``."""
    return {"kind": "spn", "tokens": train.tokens, "dim": train.dim, "rank": train.r, "width": network_width(train.dim),
            "depth": SPN["depth"], "heads": SPN["heads"]}


def fit_head(train: TargetFile, key: str, settings: dict, device: str = "cpu",
             progress: Callable = lambda it, **kw: it) -> tuple[ImportanceHead, Curve]:
    """The importance head trained on ``train``'s dataset ``key`` (module docstring).

    Args:
        train: the training targets.
        key: the target dataset, e.g. "q2/importance".
        settings: steps, batch_size, seed.
        device: where it trains.
        progress: wraps the step range.

    Returns:
        The head (eval mode) and its training curve.
    """
    torch.use_deterministic_algorithms(True, warn_only=True)
    head = new_head(train.tokens, train.dim, network_width(train.dim), HEAD["heads"], HEAD["layers"], settings["seed"],
                    device)
    curve = train_head(head, train, key, HEAD["w_rank"], settings["steps"], settings["batch_size"], HEAD["lr"],
                       settings["seed"], device, progress=labelled(progress, "head"), stage="fit head")
    return head, curve


def _summary(values: np.ndarray) -> dict:
    return summarize(values, BOOTSTRAP["resamples"], BOOTSTRAP["level"], BOOTSTRAP["seed"]).as_dict()


def judge(rho: np.ndarray, floor: np.ndarray) -> dict:
    """The head's held-out ρ against the position-only floor's, paired by image (``RULE``).

    Args:
        rho: (images,) the head's ρ.
        floor: (images,) the floor's ρ.

    Returns:
        rho and rho_position_only (mean, std, low, high, n), paired_p, beats_floor (True, False,
        or None when no image has both ρ defined), below_floor, images_left_out and the verdict line.
    """
    ok = np.isfinite(rho) & np.isfinite(floor)
    out = {"rule": RULE, "images_left_out": int((~ok).sum())}
    if not ok.any():
        return {**out, "rho": None, "rho_position_only": None, "paired_p": None, "beats_floor": None,
                "below_floor": None, "verdict": "no held-out image has a defined ρ (every target or score row is "
                                                "constant); the head cannot be judged"}
    head, base = _summary(rho[ok]), _summary(floor[ok])
    p = wilcoxon_p(rho[ok], floor[ok])
    significant = not math.isnan(p) and p < ALPHA
    beats = head["low"] > base["high"] or (significant and head["mean"] > base["mean"])
    below = head["high"] < base["low"] or (significant and head["mean"] < base["mean"])
    figures = (f"ρ {head['mean']:.3f} [{head['low']:.3f}, {head['high']:.3f}] vs {base['mean']:.3f} "
               f"[{base['low']:.3f}, {base['high']:.3f}], paired p = {p:.3g} over {head['n']} held-out image(s)")
    if beats:
        verdict = f"the head beats the position-only floor: {figures}"
    elif below:
        verdict = (f"the head is below the position-only floor: {figures}; position alone ranks these tokens better "
                   f"(train longer, --steps, or on more images)")
    else:
        verdict = (f"the head does not beat the position-only floor: {figures}; more images or steps (--steps) may "
                   f"settle it")
    return {**out, "rho": head, "rho_position_only": base, "paired_p": None if math.isnan(p) else p,
            "beats_floor": beats, "below_floor": below, "verdict": verdict}


def head_quality(head: ImportanceHead, train: TargetFile, held: TargetFile, key: str, names: list[str],
                 device: str = "cpu") -> dict:
    """``judge`` of the head on the held-out targets, with each image's values by name.

    Args:
        head: the trained head.
        train: the training targets (the floor's mean map).
        held: the held-out targets.
        key: the target dataset.
        names: the held-out images' names, in ``held``'s order.
        device: where the head runs.

    Returns:
        ``judge``'s record plus target, held_out_images and per_image (image, rho, rho_position_only).
    """
    truth = held.read((key,))[key]
    rho = rho_per_image(predict(head, held, score, device), truth)
    floor = position_floor(train, key, train.num_items, truth)
    finite = lambda x: float(x) if np.isfinite(x) else None  # noqa: E731 (JSON holds no NaN)
    per_image = [{"image": n, "rho": finite(a), "rho_position_only": finite(b)} for n, a, b in zip(names, rho, floor)]
    return {"target": key, "held_out_images": held.num_items, **judge(rho, floor), "per_image": per_image}


def fit_spn(train: TargetFile, held: TargetFile, settings: dict, device: str = "cpu",
            progress: Callable = lambda it, **kw: it) -> tuple[SpectralPullbackNetwork, dict]:
    """The SPN trained on ``train``'s RandNLA triplets at the fit's q, and its held-out V1.

    Args:
        train: the training targets.
        held: the held-out targets.
        settings: spn_steps, spn_lr, batch_size, seed, power_iters.
        device: where it trains.
        progress: wraps the step range.

    Returns:
        The SPN (eval mode) and {"v1", "v1_untrained": summaries, "reference": the held-out source,
        "steps", "final_loss"}.
    """
    torch.use_deterministic_algorithms(True, warn_only=True)
    seed = settings["seed"]
    untrained = new_spn(train.tokens, train.dim, train.r, network_width(train.dim), SPN["depth"], SPN["heads"], seed,
                        device)
    source, reference = reference_of(held)
    floor = v1_per_image(untrained, held, reference, device)
    model = copy.deepcopy(untrained)
    curve = train_spn(model, train, f"q{settings['power_iters']}", settings["spn_steps"], settings["batch_size"],
                      settings["spn_lr"], seed, device, progress=labelled(progress, "SPN"), stage="fit spn")
    v1 = v1_per_image(model, held, reference, device)
    return model, {"v1": _summary(v1), "v1_untrained": _summary(floor), "reference": source,
                   "steps": settings["spn_steps"], "final_loss": curve.points[-1][1] if curve.points else None}
