"""A fit on disk, self-describing, and read back as the learned metric a model is patched with.

A fit directory holds ``fit.json`` and one safetensors file per network: ``head.safetensors``
(the importance head) and, where trained, ``spn.safetensors`` (the SPN). Each safetensors file
carries the provenance in its metadata (``artifacts.checkpoints`` conventions: never pickles);
``fit.json`` records, under ``networks``, each file's name, the architecture that rebuilds it and
its sha256, checked on load. ``fit.json`` holds as well: ``format`` and ``version``, ``layer``,
``decoder``, ``path`` ("merge": soft merging for pooled, CLS, classifier or embedding outputs;
"prune": hard pruning with last-layer fusion for dense outputs), ``layout`` (prefix tokens, grid
rows and cols, tokens, dim, input size and outputs of the training images' probe), ``model``
(family, name, args, the weights' file or directory digest, and ``identity.describe``'s class,
structure and digests), ``images`` (their folder, combined digest, and the training and held-out
names), ``settings``, ``quality`` and ``provenance``. The weights are written first and fit.json
last, each atomically: a reader sees a complete fit or the previous one.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from safetensors.torch import save_file
from torch import nn

from taskgeom.artifacts import checkpoints
from taskgeom.artifacts.atomic import atomic_path, write_json
from taskgeom.artifacts.provenance import KEY as PROVENANCE
from taskgeom.artifacts.provenance import encode
from taskgeom.metric.head import ImportanceHead
from taskgeom.metric.spn import SpectralPullbackNetwork
from taskgeom.models.vit import Grid
from taskgeom.prune.scores import LearnedMetric

FORMAT, VERSION = "taskgeom-fit", 1
FIT_JSON = "fit.json"
FILES = {"head": "head.safetensors", "spn": "spn.safetensors"}
KINDS = {"importance_head": ImportanceHead, "spn": SpectralPullbackNetwork}
RERUN = "write it again with `taskgeom fit`"


@dataclass
class Fitted:
    """A fit read back (``load_fitted``).

    Attributes:
        metric: the importance head on its training grid (``base``) and the SPN, or None.
        layer: the block whose output the networks read.
        decoder: the decoder the targets were taken through.
        path: "merge" or "prune" (module docstring).
        model: the fitted model's identity (fit.json ``model``).
        layout: its token layout at the training images.
        quality: the held-out quality.
        provenance: what made the fit.
        directory: where it was read from.
        record: the whole of fit.json.
    """

    metric: LearnedMetric
    layer: int
    decoder: str
    path: Literal["merge", "prune"]
    model: dict
    layout: dict
    quality: dict
    provenance: dict
    directory: Path
    record: dict


Network = tuple[nn.Module, dict]  # a trained network and the arguments that rebuild it, with its kind


def _save(module: nn.Module, arch: dict, path: Path, provenance: dict) -> dict:
    """The module's weights at ``path`` (provenance in the metadata); its fit.json entry."""
    state = {k: v.detach().contiguous().cpu() for k, v in module.state_dict().items()}
    with atomic_path(path) as tmp:
        save_file(state, str(tmp), metadata={PROVENANCE: encode(provenance)})
        digest = checkpoints.file_sha256(tmp)
    return {"file": path.name, "architecture": arch, checkpoints.WEIGHTS_SHA256: digest}


def write_fit(directory: str | Path, record: dict, networks: dict[str, Network], provenance: dict) -> dict:
    """The networks, then fit.json (``record`` with format, version, networks and provenance).

    Args:
        directory: the fit directory (made if missing).
        record: layer, decoder, path, layout, model, images, settings, quality.
        networks: "head" and optionally "spn" -> (module, architecture with ``kind``); a network
            left out has its earlier file removed.
        provenance: recorded in every file.

    Returns:
        fit.json's content.
    """
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    entries = {name: _save(module, arch, directory / FILES[name], provenance)
               for name, (module, arch) in networks.items()}
    full = {"format": FORMAT, "version": VERSION, **record, "networks": entries, PROVENANCE: provenance}
    write_json(directory / FIT_JSON, full)
    for name in FILES.keys() - networks.keys():
        (directory / FILES[name]).unlink(missing_ok=True)
    return full


def read_record(directory: str | Path) -> dict:
    """fit.json of ``directory``, checked to be a fit this code reads.

    Raises:
        FileNotFoundError: no fit.json.
        CheckpointError: not JSON, not a fit, or another version.
    """
    path = Path(directory) / FIT_JSON
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no such file; {RERUN}")
    try:
        record = json.loads(path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise checkpoints.CheckpointError(f"{path}: unreadable JSON ({err}); {RERUN}") from None
    if not isinstance(record, dict) or record.get("format") != FORMAT:
        raise checkpoints.CheckpointError(f"{path}: not a taskgeom fit (format {FORMAT!r}); {RERUN}")
    if record.get("version") != VERSION:
        raise checkpoints.CheckpointError(f"{path}: fit version {record.get('version')!r}; this code reads version "
                                          f"{VERSION}; {RERUN}")
    return record


def _load(directory: Path, entry: dict) -> nn.Module:
    """One network from its fit.json entry: digest checked, tensors checked against the architecture."""
    weights, config_path = directory / entry["file"], directory / FIT_JSON
    args = {k: v for k, v in entry["architecture"].items() if k != "kind"}
    module = KINDS[entry["architecture"]["kind"]](**args)
    state = checkpoints.read_weights(weights, entry, RERUN)
    checkpoints.check_fit(module, state, weights, config_path, RERUN)
    module.load_state_dict(state)
    return module.eval()


def load_fitted(directory: str | Path) -> Fitted:
    """A fit directory as the learned metric and what it was fitted on.

    Args:
        directory: written by ``taskgeom fit`` (``write_fit``).

    Returns:
        The Fitted: its ``metric`` is a ``LearnedMetric`` (head, the training grid, SPN or None).

    Raises:
        FileNotFoundError: fit.json or a network's file is missing.
        CheckpointError: a file is damaged, from another fit, or not a fit.
    """
    directory = Path(directory)
    record = read_record(directory)
    try:
        networks, layout = record["networks"], record["layout"]
        head = _load(directory, networks["head"])
        spn = _load(directory, networks["spn"]) if "spn" in networks else None
        base = Grid(int(layout["prefix"]), int(layout["rows"]), int(layout["cols"]))
        return Fitted(LearnedMetric(head, base, spn), int(record["layer"]), record["decoder"], record["path"],
                      record["model"], layout, record["quality"], record[PROVENANCE], directory, record)
    except (KeyError, TypeError) as err:
        raise checkpoints.CheckpointError(f"{directory / FIT_JSON}: incomplete fit (no {err}); {RERUN}") from None
