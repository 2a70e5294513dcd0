"""Image sources: where a stage's images come from, named in params.yaml under ``sources``.

A source is an index of items on disk, read one at a time (so nothing loads a whole split).
Kinds and their keys:

- ``world``: a split of the synthetic world (``split``: train / val / test / mv_train /
  mv_test; ``domain``: rgb or sketch; ``resolution``: a rendered resolution, default the
  split's base one; ``family``: outdoor or room, only the scenes of that family, default all;
  ``path``: default ``data/world/<split>.h5``). Labels, depth and, for the multi-view splits,
  (V, H, W, 3) view groups.
- ``imagenet_val``: ImageNet-val, either rearranged in class folders (``path``) or as
  distributed (``path`` to the flat ``ILSVRC2012_val_*.JPEG`` files plus ``labels``, the
  devkit's ground-truth file, and optionally ``meta``, its ``data/meta.mat``).
- ``imagenet_sketch``: ImageNet-Sketch's class folders (labels by sorted folder name).
- ``nyu_depth_v2``: NYU-Depth-V2's labeled ``.mat`` (``path``; ``splits``: its
  ``splits.mat``, with ``split``: train or test), RGB and metric depth.
- ``folder``: any folder of png/jpg images, searched recursively, without labels.
- ``sequences``: a folder of image sequences for a multi-view host (VGGT's input), one
  sub-folder per group, its first ``views`` images by file name as one (V, H, W, 3) item
  (the views of a group share a size); without labels.

``range: [start, stop]`` keeps a window of the items in source order (Python slice bounds,
null for an open end: ``[-16, null]`` is the last 16). ``subset: {count, seed, offset}`` then
keeps a deterministic subset: ranks [offset, offset + count) of a seeded ranking, stratified
with labels (each class's items shuffled by the seed, then taken rank by rank over the
classes), otherwise a seeded permutation; one seed with disjoint windows gives disjoint
subsets. Items stay in their source order. Items: ``Item`` with the image at its native size.
Errors name the source key (``sources.<name>...``) and the file.

Item keys are relative to the source's ``root`` (its folder, or the folder of its file:
``n01440764/ILSVRC2012_val_00000293.JPEG``, ``nyu_depth_v2_labeled.mat[12]``), so a source's
keys, and the digest of its files (``Digests.named_sha256(source.files())``), are the same
wherever its files lie.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import h5py
import numpy as np
from PIL import Image

from taskgeom.data.damage import reading
from taskgeom.data.hdf5 import StoreError, open_store, read_attr_json
from taskgeom.data.real import (
    IMAGE_EXTENSIONS,
    ImageFolderClasses,
    ImageNetValDevkit,
    NYUDepthV2Labeled,
    read_nyu_split,
)
from taskgeom.data.selected import Item, Source, SourceError
from taskgeom.data.world.scene import FAMILIES
from taskgeom.finite import require_finite

KINDS = ("world", "imagenet_val", "imagenet_sketch", "nyu_depth_v2", "folder", "sequences")
WORLD_DIR = "data/world"
NYU_MAX_DEPTH = 10.0  # metres: the evaluation cap of NYU-Depth-V2 (Eigen et al. 2014)


def read_rgb(path: Path) -> np.ndarray:
    """An image file as (H, W, 3) uint8 RGB (greyscale, palette and CMYK converted).

    Args:
        path: a JPEG or PNG file.

    Returns:
        (H, W, 3) uint8.

    Raises:
        SourceError: the file cannot be decoded (unreadable or truncated).
    """
    try:
        with Image.open(path) as image:
            return np.asarray(image.convert("RGB"), dtype=np.uint8)
    except OSError as err:  # unreadable or truncated files
        raise SourceError(f"{path}: expected a JPEG or PNG image, could not decode it ({err})") from err



# --------------------------------------------------------------------------- the kinds


def _need_path(name: str, spec: Mapping[str, Any], key: str = "path", directory: bool | None = None) -> Path:
    value = spec.get(key)
    if not value:
        raise SourceError(f"sources.{name}.{key}: a {spec['kind']} source needs it (null or missing)")
    path = Path(value).expanduser()
    if not path.exists():
        raise SourceError(f"sources.{name}.{key}: {path} does not exist")
    if directory is not None and path.is_dir() != directory:
        raise SourceError(f"sources.{name}.{key}: {path} should be a {'directory' if directory else 'file'}")
    return path


def _world(name: str, spec: Mapping[str, Any]) -> Source:
    path = Path(spec.get("path") or f"{WORLD_DIR}/{spec['split']}.h5")
    domain = spec.get("domain", "rgb")
    try:
        with open_store(path, "world") as f, reading(path, "world"):
            res = int(spec.get("resolution") or f.attrs["base_resolution"])
            if f"r{res}/{domain}" not in f:
                raise SourceError(f"sources.{name}: {path} has no {domain} renders at {res} px")
            labels = f["label"][:].astype(np.int64)
            stored = np.arange(int(f.attrs["num_items"]))
            if spec.get("family"):
                if "family" not in f:
                    raise SourceError(f"sources.{name}.family: {path} records no scene families; rerun fetch")
                stored = np.flatnonzero(f["family"][:] == FAMILIES.index(spec["family"]))
            max_depth = float(read_attr_json(f, "spec")["max_depth"]) if "spec" in f.attrs else None
    except StoreError as err:
        raise SourceError(f"sources.{name}: {err}") from None
    files: dict[str, h5py.File] = {}

    def read(i: int) -> Item:
        f = files.get("f") or files.setdefault("f", h5py.File(path, "r"))  # one handle per worker
        j = int(stored[i])
        with reading(path, "world"):
            return Item(f[f"r{res}/{domain}"][j], int(labels[j]), f[f"r{res}/depth"][j], f"{path.name}[{j}]")

    return Source(name, spec, [f"{path.name}[{j}]" for j in stored], labels[stored], read, None, max_depth, stored,
                  root=path.parent)


def _class_folders(name: str, spec: Mapping[str, Any]) -> Source:
    root = _need_path(name, spec, directory=True)
    try:
        dataset = ImageFolderClasses(root, resolution=1)
    except FileNotFoundError as err:
        raise SourceError(f"sources.{name}.path: {err}") from None
    paths = [p for p, _ in dataset.samples]
    labels = np.array([label for _, label in dataset.samples], dtype=np.int64)
    order = np.argsort([str(p) for p in paths], kind="stable")  # file order, not interleaved
    paths, labels = [paths[i] for i in order], labels[order]
    return _files_source(name, spec, root, paths, labels, dataset.classes)


def _files_source(name: str, spec: Mapping[str, Any], root: Path, paths: list[Path], labels: np.ndarray,
                  classes: list[str] | None) -> Source:
    """A source of one image file per item, keyed by its path relative to ``root``."""
    keys = [Path(p).relative_to(root).as_posix() for p in paths]
    return Source(name, spec, keys, labels, lambda i: Item(read_rgb(paths[i]), int(labels[i]), None, keys[i]),
                  classes, root=root)


def _imagenet_val(name: str, spec: Mapping[str, Any]) -> Source:
    if not spec.get("labels"):
        return _class_folders(name, spec)
    root, labels_file = _need_path(name, spec, directory=True), _need_path(name, spec, "labels", directory=False)
    meta = _need_path(name, spec, "meta", directory=False) if spec.get("meta") else None
    try:
        dataset = ImageNetValDevkit(root, labels_file, resolution=1, meta_file=meta)
    except (FileNotFoundError, ValueError) as err:
        raise SourceError(f"sources.{name}: {err}") from None
    paths = [p for p, _ in dataset.samples]
    labels = np.array([label for _, label in dataset.samples], dtype=np.int64)
    return _files_source(name, spec, root, paths, labels, dataset.classes)


def _nyu(name: str, spec: Mapping[str, Any]) -> Source:
    mat = _need_path(name, spec, directory=False)
    try:
        indices = (read_nyu_split(_need_path(name, spec, "splits", directory=False), spec.get("split", "test"))
                   if spec.get("splits") else None)
        dataset = NYUDepthV2Labeled(mat, resolution=1, split_indices=indices)
    except (FileNotFoundError, ValueError) as err:
        raise SourceError(f"sources.{name}: {err}") from None

    def read(i: int) -> Item:
        rgb, depth = dataset.frame(i)
        return Item(rgb, -1, depth, f"{mat.name}[{int(dataset.indices[i])}]")

    keys = [f"{mat.name}[{int(n)}]" for n in dataset.indices]
    return Source(name, spec, keys, np.full(len(keys), -1, np.int64), read, None, NYU_MAX_DEPTH, root=mat.parent)


def _folder(name: str, spec: Mapping[str, Any]) -> Source:
    root = _need_path(name, spec, directory=True)
    paths = sorted(p for p in root.rglob("*") if p.is_file() and p.suffix.lower() in IMAGE_EXTENSIONS)
    if not paths:
        raise SourceError(f"sources.{name}.path: {root} holds no {'/'.join(IMAGE_EXTENSIONS)} images")
    return _files_source(name, spec, root, paths, np.full(len(paths), -1, np.int64), None)


def _sequences(name: str, spec: Mapping[str, Any]) -> Source:
    root, views = _need_path(name, spec, directory=True), int(spec.get("views", 2))
    groups = []
    for folder in sorted(p for p in root.iterdir() if p.is_dir()):
        frames = sorted(p for p in folder.iterdir() if p.is_file() and p.suffix.lower() in IMAGE_EXTENSIONS)
        if len(frames) < views:
            raise SourceError(f"sources.{name}.views: {folder} holds {len(frames)} images, {views} needed per group")
        groups.append(frames[:views])
    if not groups:
        raise SourceError(f"sources.{name}.path: {root} holds no sub-folders of images (one per sequence)")

    def read(i: int) -> Item:
        frames = [read_rgb(f) for f in groups[i]]
        if len({f.shape for f in frames}) > 1:
            raise SourceError(f"sources.{name}: the views of {groups[i][0].parent} differ in size "
                              f"({sorted({f.shape[:2] for f in frames})})")
        return Item(np.stack(frames), -1, None, keys[i])

    keys = [g[0].parent.relative_to(root).as_posix() for g in groups]
    return Source(name, spec, keys, np.full(len(keys), -1, np.int64), read, None, root=root,
                  item_files=lambda i: [f.relative_to(root).as_posix() for f in groups[i]])


OPENERS: dict[str, Callable[[str, Mapping[str, Any]], Source]] = {
    "world": _world, "imagenet_val": _imagenet_val, "imagenet_sketch": _class_folders, "nyu_depth_v2": _nyu,
    "folder": _folder, "sequences": _sequences,
}


def open_source(name: str, sources: Mapping[str, Mapping[str, Any]] | None) -> Source:
    """The source ``name`` of params.yaml's ``sources`` mapping, indexed and subset (not yet read).

    Args:
        name: its key.
        sources: params.yaml's ``sources``.

    Returns:
        The Source.

    Raises:
        SourceError: undefined, of an unknown kind, unreadable, or with no items.
    """
    sources = sources or {}
    if name not in sources:
        raise SourceError(f"sources.{name}: not defined in params.yaml (defined: {sorted(sources) or 'none'})")
    spec = sources[name]
    if spec.get("kind") not in OPENERS:
        raise SourceError(f"sources.{name}.kind: {spec.get('kind')!r}, expected one of {list(KINDS)}")
    source = OPENERS[spec["kind"]](name, spec)
    if len(source) == 0:
        raise SourceError(f"sources.{name}: no items ({spec.get('path', spec.get('split'))})")
    return source


def world_arrays(source: Source, keys: tuple[str, ...], what: str) -> dict[str, np.ndarray]:
    """The selected items of a world source as whole arrays (``label`` and the render's ``keys``:
    rgb, depth, K, cam_to_world), for the tiny zoo models that train on them; refused, naming
    ``what``, for another kind or domain.

    Args:
        source: a world source of rgb renders.
        keys: the arrays to read: ``label``, ``family`` or a render's (``rgb``, ``depth``, ...).
        what: the params key asking, for errors.

    Returns:
        key -> (n, ...) array of the n selected items, in their order.

    Raises:
        SourceError: not a world source of rgb renders.
        NonFiniteError: an array holds a NaN or infinity (naming the file and row).
    """
    if source.spec["kind"] != "world" or source.spec.get("domain", "rgb") != "rgb":
        raise SourceError(f"{what}: {source.name!r} is not a world source of rgb renders (a tiny model trains "
                          "on the world's arrays)")
    path = Path(source.spec.get("path") or f"{WORLD_DIR}/{source.spec['split']}.h5")
    with open_store(path, "world") as f, reading(path, "world"):
        res = int(source.spec.get("resolution") or f.attrs["base_resolution"])
        rows = source.stored[source.indices]
        out = {k: f[k if k in ("label", "family") else f"r{res}/{k}"][:][rows] for k in keys}
    for k, v in out.items():
        require_finite(v, f"{what}: {k}", lambda i: f"{path}[{rows[i]}]")
    return out


def first_view(image: np.ndarray) -> np.ndarray:
    """An item's image for display: a view group's first view.

    Args:
        image: (H, W, 3), or (V, H, W, 3) for a view group.

    Returns:
        (H, W, 3).
    """
    return image[0] if image.ndim == 4 else image


def need(source: Source, count: int, what: str) -> Source:
    """The source's first ``count`` items; refused, naming the params key ``what``, if it holds fewer.

    Args:
        source: the opened source.
        count: how many items the caller needs.
        what: the params key asking, for errors.

    Returns:
        ``source.first(count)``.

    Raises:
        SourceError: the source holds fewer than ``count`` items.
    """
    if len(source) < count:
        raise SourceError(f"{what}: {count} requested, source {source.name!r} holds {len(source)}")
    return source.first(count)
