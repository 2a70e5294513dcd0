"""``fit_model``: from a probe host and a user's images to a fit directory (docs/fit.md).

In order: the probe map at (layer, decoder) (``probes.ProbeMap``); its geometry at the first
image; the seeded held-out split; the two target files under ``<out>/targets/``, opened
(``targets.open_split``: reused, resumed or new); the estimate of the fit's time, logged before
any work (``estimate.estimate_fit``); the targets still to compute (``targets.fill_split``); the
importance head; the SPN where the path needs it (``spn=None``: on for the merge path, off for
the prune path); their held-out quality (``train``); and ``checkpoint.write_fit``. The path is
"prune" for a dense decoder (``DENSE_DECODERS``: hard pruning with last-layer fusion) and "merge"
for any pooled one (CLS, classifier, embedding, a linear head: soft merging, which measures
nearness with the SPN).

The target cache is keyed by content (``targets.cache_key``): the model's identity with every
``path`` entry left out, the images' names and sha256, and the target settings (layer, decoder,
sketch, r, q, oversampling, block-norm probes, seed).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

from taskgeom.data.digests import combined
from taskgeom.fitting import checkpoint, estimate, targets, train
from taskgeom.fitting.targets import Images
from taskgeom.models.host import ProbeHost
from taskgeom.probes import ProbeMap

DENSE_DECODERS = ("depth",)
TARGET_KEYS = ("sketch", "r", "power_iters", "oversample", "block_norm_probes", "seed")
TARGETS_DIR = "targets"


def path_of(decoder: str) -> str:
    """"prune" for a dense decoder, "merge" for a pooled one (module docstring)."""
    return "prune" if decoder in DENSE_DECODERS else "merge"


def content(obj: Any) -> Any:
    """``obj`` with every ``path`` entry of its dicts left out, recursively: what identifies it by content."""
    if isinstance(obj, dict):
        return {k: content(v) for k, v in obj.items() if k != "path"}
    if isinstance(obj, list):
        return [content(v) for v in obj]
    return obj


def _layout(geom: targets.Geometry) -> dict:
    return {"prefix": geom.prefix, "rows": geom.rows, "cols": geom.cols, "tokens": geom.tokens, "dim": geom.dim,
            "input": list(geom.input), "outputs": geom.outputs}


def _targets(out: Path, pm: ProbeMap, images: Images, split: dict, geom, settings: dict, model: dict,
             code_version: str, spn: bool, log: logging.Logger, progress: Callable) -> dict:
    """Both splits' target files, split name -> TargetFile, after the estimate is logged. Their
    provenance is the code version and the target settings alone, so that a rerun with other
    training settings resumes them."""
    cache_settings = {"layer": pm.layers[0], "decoder": pm.decoder, **{k: settings[k] for k in TARGET_KEYS}}
    provenance = {"stage": "fit", "code_version": code_version, "settings": cache_settings}
    builds = {name: targets.open_split(out / TARGETS_DIR, name, images, indices, geom, cache_settings,
                                       content(model), provenance, log) for name, indices in split.items()}
    try:
        first, plan = estimate.estimate_fit(list(builds.values()), pm, images, geom, cache_settings,
                                            {**settings, "train_images": len(split["train"]), "spn": spn})
        log.info(plan.line())
        return {name: targets.fill_split(build, pm, images, geom, cache_settings, log, progress, first.get(name))
                for name, build in builds.items()}
    finally:
        for build in builds.values():
            build.close()


def fit_model(host: ProbeHost, images: Images, out: str | Path, *, layer: int, decoder: str, settings: dict,
              model: dict, provenance: dict, spn: bool | None = None, log: logging.Logger | None = None,
              progress: Callable = lambda it, **kw: it) -> dict:
    """Targets, head (and SPN), held-out quality and the fit directory ``out`` (module docstring).

    Args:
        host: the model as a probe host.
        images: the images, their names and sha256 (``targets.Images``).
        out: the fit directory.
        layer: the block whose output is probed.
        decoder: one of the host's decoders.
        settings: sketch, r, power_iters, oversample, block_norm_probes, seed, held_out (a count),
            steps, spn_steps, batch_size.
        model: the model's identity (fit.json ``model``: family, name, args, digests, ``describe``'s).
        provenance: recorded in every file of the fit (its code_version in the target files).
        spn: train the SPN (None: where the path needs it).
        log: says what was reused, resumed or computed.
        progress: wraps the image and step loops (e.g. tqdm).

    Returns:
        fit.json's content.
    """
    log = log or logging.getLogger("taskgeom.fit")
    out = Path(out)
    pm = ProbeMap(host, decoder, [layer])
    geom = targets.geometry(pm, images.load(0), settings["r"])
    train_idx, held_idx = targets.held_out_split(len(images.names), settings["held_out"], settings["seed"])
    path = path_of(decoder)
    trains_spn = path == "merge" if spn is None else spn
    files = _targets(out, pm, images, {"train": train_idx, "held_out": held_idx}, geom, settings, model,
                     provenance.get("code_version", ""), trains_spn, log, progress)
    train_file, held_file = files["train"], files["held_out"]
    key = f"q{settings['power_iters']}/importance"
    head, curve = train.fit_head(train_file, key, settings, progress=progress)
    log.info("head: %d steps, loss %.3f -> %.3f", settings["steps"], curve.points[0][1], curve.points[-1][1])
    networks = {"head": (head, train.head_architecture(train_file))}
    quality = {"head": train.head_quality(head, train_file, held_file, key, [images.names[i] for i in held_idx]),
               "spn": None}
    if trains_spn:
        model_spn, quality["spn"] = train.fit_spn(train_file, held_file, settings, progress=progress)
        networks["spn"] = (model_spn, train.spn_architecture(train_file))
    width = train.network_width(geom.dim)
    record = {"layer": layer, "decoder": decoder, "path": path, "layout": _layout(geom), "model": model,
              "images": {"sha256": combined(dict(zip(images.names, images.sha256))), "count": len(images.names),
                         "train": [images.names[i] for i in train_idx],
                         "train_sha256": [images.sha256[i] for i in train_idx],
                         "held_out": [images.names[i] for i in held_idx]},
              "settings": {**settings, "spn": "spn" in networks, "head": {**train.HEAD, "width": width},
                           "spn_network": {**train.SPN, "width": width}},
              "quality": quality}
    return checkpoint.write_fit(out, record, networks, provenance)
