"""Adapters that present the paper's models as probe hosts.

The paper (Bond et al.) probes four frozen models:

- ``dinov2-b14``: DINOv2 ViT-B/14, CLS embedding (timm ``vit_base_patch14_dinov2``);
- ``clip-b16``: CLIP ViT-B/16 image tower with its projection (timm, OpenAI weights; built as
  ``vit_base_patch16_clip_quickgelu_224``, the QuickGELU variant OpenAI's weights were trained
  with, same weight file as ``vit_base_patch16_clip_224.openai``; ``arch=`` overrides it);
- ``depth-anything-v2``: Depth-Anything-V2 (transformers ``DepthAnythingForDepthEstimation``),
  a DPT head reading four DINOv2 layers;
- ``vggt``: VGGT (the upstream ``vggt`` package), multi-view camera / depth / point-map heads
  reading widely spaced layers of an alternating frame/global aggregator.

``load_paper_model(name, path)`` loads local weights and never downloads: without them it fails
at once, saying what to provide. ``build_paper_model(name, tiny=True)`` builds the same
architecture from a small config with random weights (what the tests use);
``load_paper_model(name, path, **PAPER_MODELS[name].tiny)`` loads such a small checkpoint.

Every host runs attention on the explicit softmax path (``torch.func.jvp`` has no rule for
the fused kernels on CPU) and is frozen (eval mode, no parameter gradients).

Each model family has its module, which declares its models' ``AdapterSpec`` (from ``spec``) next
to their builder: ``timm_vit`` (DINOv2, CLIP), ``depth_anything`` and ``vggt``. This package
collects them into the registry ``PAPER_MODELS`` and resolves weight paths.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from taskgeom.models.adapters.depth_anything import (
    DEPTH_ANYTHING_BACKBONE,
    DEPTH_ANYTHING_HEAD,
    DEPTH_ANYTHING_V2,
    DepthAnythingHost,
    depth_anything_config,
)
from taskgeom.models.adapters.spec import WEIGHT_SUFFIXES, AdapterSpec
from taskgeom.models.adapters.timm_vit import CLIP_B16, DINOV2_B14, TINY_VIT
from taskgeom.models.adapters.vggt import VGGT_1B, VGGT_DEFAULTS, VGGT_INSTALL, VGGT_PARTS, VGGTCtx, VGGTHost
from taskgeom.models.host import ProbeHost

__all__ = [
    "CLIP_B16", "DEPTH_ANYTHING_BACKBONE", "DEPTH_ANYTHING_HEAD", "DEPTH_ANYTHING_V2", "DINOV2_B14", "PAPER_MODELS",
    "TINY_VIT", "VGGT_1B", "VGGT_DEFAULTS", "VGGT_INSTALL", "VGGT_PARTS", "WEIGHT_SUFFIXES", "AdapterSpec",
    "DepthAnythingHost", "VGGTCtx", "VGGTHost", "build_paper_model", "depth_anything_config", "load_paper_model",
    "resolve_weights_path",
]

# --------------------------------------------------------------------------- path handling

def _missing_weights(spec: AdapterSpec, path: str | Path | None) -> FileNotFoundError:
    where = "no path was given" if path is None else f"nothing exists at {str(path)!r}"
    return FileNotFoundError(
        f"paper model {spec.name!r} ({spec.title}): weights not found ({where}). "
        f"Provide {spec.weights} Set its location as `path` of the zoo entry with `adapter: {spec.name}` "
        f"in params.yaml (or pass path= to load_paper_model). Weights are never downloaded; fetch them beforehand, "
        f"e.g. `huggingface-cli download {spec.hf_repo}`, and point the path at the file or directory."
    )


def _hf_snapshot(repo_dir: Path) -> Path:
    """A hub cache repository dir (``models--org--name``) -> its snapshot (``refs/main`` or the newest)."""
    ref = repo_dir / "refs" / "main"
    if ref.is_file():
        snap = repo_dir / "snapshots" / ref.read_text().strip()
        if snap.is_dir():
            return snap
    snaps = sorted((p for p in (repo_dir / "snapshots").iterdir() if p.is_dir()), key=lambda p: p.stat().st_mtime)
    if not snaps:
        raise FileNotFoundError(f"hub cache {repo_dir} holds no snapshot")
    return snaps[-1]


def resolve_weights_path(spec: AdapterSpec, path: str | Path | None) -> Path:
    """A user path -> the weight file or the directory holding the weights.

    Accepts a weight file, a directory with the weights, a hub cache repository directory
    (``models--org--name``, resolved to its snapshot) or a hub cache root holding it.

    Args:
        spec: the model's spec.
        path: the user's path (``~`` expanded).

    Returns:
        The weight file or directory.

    Raises:
        FileNotFoundError: nothing is there, naming the model and what to provide.
    """
    if path is None or not Path(path).expanduser().exists():
        raise _missing_weights(spec, path)
    p = Path(path).expanduser()
    if p.is_file():
        return p
    cached = p / ("models--" + spec.hf_repo.replace("/", "--"))
    if cached.is_dir():  # the hub cache root
        p = cached
    if (p / "snapshots").is_dir():  # a hub cache repository
        p = _hf_snapshot(p)
    return p


# --------------------------------------------------------------------------- the registry

# each family module declares its models; this is the order the paper presents them in
PAPER_MODELS: dict[str, AdapterSpec] = {spec.name: spec for spec in (DINOV2_B14, CLIP_B16, DEPTH_ANYTHING_V2, VGGT_1B)}


def _spec(name: str) -> AdapterSpec:
    if name not in PAPER_MODELS:
        raise KeyError(f"unknown paper model {name!r}; known: {sorted(PAPER_MODELS)}")
    return PAPER_MODELS[name]


def load_paper_model(name: str, path: str | Path | None = None, **overrides: Any) -> ProbeHost:
    """The paper model ``name`` with the local weights at ``path``, as a frozen probe host.

    Nothing is ever downloaded.

    Args:
        name: a key of ``PAPER_MODELS``.
        path: a weight file, a directory holding the weights, or a Hugging Face cache (root or
            repository dir).
        **overrides: change the architecture (``PAPER_MODELS[name].tiny`` loads a small test
            checkpoint): timm ``create_model`` kwargs for the ViTs, flat config keys for Depth
            Anything (checked against the checkpoint's config.json), Aggregator/head sizes for VGGT.

    Returns:
        The frozen host.

    Raises:
        KeyError: an unknown model.
        FileNotFoundError: a missing path, naming the model and what to provide.
    """
    spec = _spec(name)
    return spec.build(resolve_weights_path(spec, path), overrides)


def build_paper_model(name: str, tiny: bool = False) -> ProbeHost:
    """The architecture of paper model ``name`` with random weights; ``tiny``: its small test config.

    Args:
        name: a key of ``PAPER_MODELS``.
        tiny: use ``PAPER_MODELS[name].tiny``.

    Returns:
        The frozen host.

    Raises:
        KeyError: an unknown model.
    """
    spec = _spec(name)
    return spec.build(None, spec.tiny if tiny else {})
