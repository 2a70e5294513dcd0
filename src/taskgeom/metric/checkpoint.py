"""Loading learned-metric networks from their checkpoints: safetensors weights + a JSON config,
written by ``taskgeom.models.zoo.save`` (never pickles, DESIGN.md "Conventions")."""

from __future__ import annotations

import json
from pathlib import Path

from safetensors.torch import load_file
from torch import nn


def load(weights: str | Path, config_path: str | Path) -> tuple[nn.Module, dict]:
    """Rebuild an importance head or SPN from its checkpoint (eval mode)."""
    from .head import ImportanceHead
    from .spn import SpectralPullbackNetwork

    for p in (Path(weights), Path(config_path)):
        if not p.is_file():
            raise FileNotFoundError(f"{p}: checkpoint file missing (run the stage that trains it)")
    cfg = json.loads(Path(config_path).read_text())["architecture"]
    args = {k: v for k, v in cfg.items() if k != "kind"}
    model = {"importance_head": ImportanceHead, "spn": SpectralPullbackNetwork}[cfg["kind"]](**args)
    model.load_state_dict(load_file(str(weights)))
    return model.eval(), cfg
