"""``inspect_model``: the tractability diagnostic of a model at one or more layers over images.

For each image and each probed layer l: the probe map ``ProbeMap(host, decoder, [l])`` at the
preprocessed image (F: the l-th block's output, every token, prefix tokens included), then
``diagnostics.diagnose`` at the given estimator settings (seed + image index, as the ``diagnose``
stage). Per layer, the per-image values are aggregated by ``evaluate.stats.summarize`` (mean,
std, percentile bootstrap interval of the mean), and the means sort the probe into a regime
(``diagnostics.regime``, its default thresholds; M the smallest output size seen).
The host is frozen while it runs; a module the caller passed in gets back its parameters'
requires_grad and its train/eval mode (its dtype stays float32). Nothing returned requires grad.
Each row records the ceiling min(M, N·D) on the rank of J and which estimates ``diagnose``
clamped to it (``diagnostics.within_rank``).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import torch
from torch import Tensor, nn

from taskgeom.diagnostics import REGIMES, diagnose, regime
from taskgeom.evaluate.stats import summarize
from taskgeom.inspection.hosts import (
    Unsupported,
    as_host,
    default_decoder,
    default_layers,
    requires_grad_flags,
    restore_flags,
)
from taskgeom.models.host import ProbeHost
from taskgeom.probes import ProbeMap

SCALARS = ("kappa_cap", "erank", "r90", "cv", "frob2", "products")


@dataclass
class LayerResult:
    """One probed layer over every image: per-image rows, κ curves, spectra, aggregates, regime."""

    layer: int
    rows: list[dict] = field(default_factory=list)
    kappa_curves: list[np.ndarray] = field(default_factory=list)
    spectra: list[np.ndarray] = field(default_factory=list)
    summary: dict[str, dict] = field(default_factory=dict)
    regime: str = ""
    architecture: str = ""


@dataclass
class Inspection:
    """What ``inspect_model`` found: the decoder, the layers (and whether they were the default),
    the estimator settings and one LayerResult per layer."""

    decoder: str
    layers: list[int]
    default_layers: bool
    num_blocks: int
    settings: dict
    names: list[str]
    results: list[LayerResult]


def _one(pm: ProbeMap, image: Tensor, name: str, index: int, settings: dict) -> tuple[dict, np.ndarray, np.ndarray]:
    """``diagnose`` at one image: its row, κ_cap(1..r) and σ_i² / ‖J‖_F²."""
    start = time.perf_counter()
    probe = pm.at(image)
    d = diagnose(probe.f, probe.F, r=settings["r"], num_probes=settings["num_probes"],
                 power_iters=settings["power_iters"], seed=settings["seed"] + index)
    with torch.no_grad():
        M = int(probe.f(probe.F).numel())
    N, D = probe.F.shape
    row = {"image": name, "height": int(image.shape[-2]), "width": int(image.shape[-1]), "tokens": int(N),
           "dim": int(D), "output_dim": M, **{k: float(getattr(d, k)) for k in SCALARS},
           "r90_source": d.r90_source, "ceiling": min(M, int(N * D)), "clamped": list(d.clamped),
           "seconds": time.perf_counter() - start}
    sigma = d.sigma.detach().double().cpu()
    share = (sigma ** 2 / d.frob2).numpy() if d.frob2 > 0 else np.zeros(sigma.numel())
    return row, d.kappa_curve.detach().double().cpu().numpy(), share


def _aggregate(result: LayerResult, r: int, bootstrap: dict) -> None:
    """Mean, std and bootstrap interval of every scalar; the regime of the means."""
    result.summary = {k: summarize([row[k] for row in result.rows], bootstrap["resamples"], bootstrap["level"],
                                   bootstrap["seed"]).as_dict() for k in SCALARS}
    mean = {k: result.summary[k]["mean"] for k in SCALARS}
    M = min(row["output_dim"] for row in result.rows)
    result.regime = regime(mean["kappa_cap"], mean["erank"], int(round(mean["r90"])), mean["cv"], M, r)
    result.architecture = REGIMES[result.regime]


def inspect_model(model: nn.Module | ProbeHost, images: Sequence[Tensor], names: Sequence[str] | None = None, *,
                  decoder: str | None = None, layers: Sequence[int] | None = None, r: int = 20,
                  num_probes: int = 100, power_iters: int | str = 2, seed: int = 0,
                  bootstrap: dict | None = None, progress=None) -> Inspection:
    """The tractability diagnostic of ``model`` on ``images`` (see the module docstring).

    Args:
        model: a timm or transformers model (``inspection.hosts.as_host``) or any ProbeHost.
        images: preprocessed inputs, each (3, H, W); sizes may differ.
        names: one name per image (default: its index).
        decoder: one of the host's decoders (default: ``hosts.default_decoder``, the model's own head).
        layers: the blocks to probe, each on its own (default: ``hosts.default_layers``).
        r: the rank budget of κ_cap(r) (``diagnose``'s r).
        num_probes: ``diagnose``'s most SLQ starts.
        power_iters: ``diagnose``'s q, or "auto".
        seed: image i uses seed + i, as the ``diagnose`` stage.
        bootstrap: ``summarize``'s resamples, level and seed (default 2000, 0.95, 0).
        progress: wraps the image loop (e.g. tqdm), or None.

    Returns:
        The Inspection.

    Raises:
        Unsupported: the model, or a decoder the host lacks (one line saying what is supported).
        ValueError: a layer outside the model's blocks, or no images.
    """
    if not len(images):
        raise ValueError("inspect: no images")
    module = model if isinstance(model, nn.Module) else None
    flags, training = (requires_grad_flags(module), module.training) if module is not None else ({}, False)
    host = as_host(model)
    try:
        return _run(host, images, names, decoder, layers, dict(r=r, num_probes=num_probes, power_iters=power_iters,
                                                              seed=seed), bootstrap, progress)
    finally:
        if module is not None:
            restore_flags(module, flags, training)


def _run(host: ProbeHost, images, names, decoder, layers, settings: dict, bootstrap, progress) -> Inspection:
    decoder = decoder or default_decoder(host)
    if decoder not in host.decoders:
        raise Unsupported(f"--decoder {decoder}: this model's decoders are {', '.join(host.decoders)}")
    chosen = sorted(set(layers)) if layers else default_layers(host.num_blocks)
    if chosen[0] < 0 or chosen[-1] >= host.num_blocks:
        raise ValueError(f"--layers {chosen}: the model has blocks 0..{host.num_blocks - 1}")
    names = list(names) if names is not None else [str(i) for i in range(len(images))]
    maps = [ProbeMap(host, decoder, [layer]) for layer in chosen]
    results = [LayerResult(layer) for layer in chosen]
    loop = progress(range(len(images))) if progress else range(len(images))
    for i in loop:
        for pm, result in zip(maps, results):
            row, curve, share = _one(pm, images[i], names[i], i, settings)
            result.rows.append(row)
            result.kappa_curves.append(curve)
            result.spectra.append(share)
    for result in results:
        _aggregate(result, settings["r"], bootstrap or {"resamples": 2000, "level": 0.95, "seed": 0})
    return Inspection(decoder=decoder, layers=chosen, default_layers=not layers, num_blocks=host.num_blocks,
                      settings=settings, names=names, results=results)
