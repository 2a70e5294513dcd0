"""What every paper-model adapter shares: its spec and the weight files it may load."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from taskgeom.models.host import ProbeHost

WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pth", ".pt", ".pth.tar", ".ckpt")


@dataclass(frozen=True)
class AdapterSpec:
    """How to build and load one paper model.

    ``build(path, overrides)`` returns the host: random weights when ``path`` is None, else the
    weights at ``path`` (already checked to exist). ``tiny``: overrides giving a small config of the
    same architecture. ``hf_repo``: the hub repository whose local cache layout ``path`` may point to.

    Attributes:
        name: the registry key, e.g. "dinov2-b14".
        title: the model's name in words.
        library: what builds it (timm, transformers, vggt).
        decoders: the host's decoders.
        weights: what to provide, for the missing-weights message.
        hf_repo: the hub repository.
        build: (path, overrides) -> host.
        tiny: overrides for a small test config.
        loaded: for a checkpoint whose own config fixes the architecture, ``loaded(host)`` gives the
            overrides that build a host of it (what a copy of the host records); None where the
            overrides given build it.
    """

    name: str
    title: str
    library: str
    decoders: tuple[str, ...]
    weights: str
    hf_repo: str
    build: Callable[[Path | None, Mapping[str, Any]], ProbeHost]
    tiny: Mapping[str, Any] = field(default_factory=dict)
    loaded: Callable[[ProbeHost], dict[str, Any]] | None = None


def weight_files(directory: Path) -> list[Path]:
    """The weight files (by suffix, see ``WEIGHT_SUFFIXES``) directly in ``directory``, sorted.

    Args:
        directory: the directory searched (not recursively).

    Returns:
        The files.
    """
    return sorted(f for f in directory.iterdir() if f.is_file() and f.name.endswith(WEIGHT_SUFFIXES))
