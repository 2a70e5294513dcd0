"""A source's selected items: ``Source``, the index of a source's items on disk that reads one
at a time, its ``Item``, and how ``range`` and ``subset`` select among them (``data/sources.py``
describes the kinds and their keys).
"""

from __future__ import annotations

import copy
import hashlib
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from torch.utils.data import Dataset

from taskgeom.data.subsets import stratified_subset

DEPTH_KINDS = ("world", "nyu_depth_v2")  # kinds whose items carry ground-truth depth
AUXILIARY = ("labels", "meta", "splits")  # a source's files besides its items' (devkit, NYU's splits)


class SourceError(ValueError):
    """A source that cannot be opened or read; the message names its key and file."""


@dataclass(frozen=True)
class Item:
    """One image of a source.

    Attributes:
        image: (H, W, 3) uint8, or (V, H, W, 3) for a view group.
        label: its class, -1 without labels.
        depth: (H, W) / (V, H, W) float32 metres, or None.
        key: where it came from, relative to the source's root (a file, or ``file[index]``).
    """

    image: np.ndarray
    label: int
    depth: np.ndarray | None
    key: str


def select(name: str, spec: Mapping[str, Any], labels: np.ndarray, subset: Mapping[str, Any]) -> np.ndarray:
    """Positions of ``subset: {count, seed, offset}`` among items with ``labels``: stratified with
    labels (``stratified_subset``), otherwise ranks of one seeded permutation; in item order.

    Args:
        name: the source's key in ``sources``, for errors.
        spec: its params entry, for errors.
        labels: (n,) int64 labels of the items to choose among, -1 without.
        subset: ``count``, ``seed`` and optionally ``offset`` (default 0).

    Returns:
        (count,) int64 positions into ``labels``, ascending.

    Raises:
        SourceError: offset + count passes the n items.
    """
    count, seed, offset = int(subset["count"]), int(subset["seed"]), int(subset.get("offset", 0))
    if offset + count > len(labels):
        raise SourceError(f"sources.{name}.subset.count: {count} requested, the source holds {len(labels) - offset} "
                          f"after offset {offset} ({spec.get('path', spec.get('split'))})")
    if (labels >= 0).any():
        return stratified_subset(labels, count, seed, offset)
    return np.sort(np.random.default_rng(seed).permutation(len(labels))[offset:offset + count])


class Source(Dataset):
    """A named source's selected items. ``keys``, ``labels`` index them; ``read(i)`` loads one.
    Keys are relative to ``root``; ``item_files(i)`` names the files behind item i (relative to
    ``root`` too; by default its key without a ``[row]`` suffix)."""

    def __init__(self, name: str, spec: Mapping[str, Any], keys: list[str], labels: np.ndarray,
                 read: Callable[[int], Item], classes: list[str] | None = None,
                 max_depth: float | None = None, stored: np.ndarray | None = None, *, root: Path,
                 item_files: Callable[[int], list[str]] | None = None) -> None:
        """Select items by ``spec``'s ``range``, then its ``subset`` (module docstring).

        Args:
            name: the source's key in ``sources``.
            spec: its params entry (``kind``, ``range``, ``subset``, ...).
            keys: every item's origin relative to ``root``, in source order.
            labels: (n,) int64 labels, -1 without.
            read: item position -> Item.
            classes: class names by label, or None.
            max_depth: the depth cap of its ground truth (metres), or None.
            stored: (n,) each item's row in its file (default 0..n − 1).
            root: the folder the keys are relative to.
            item_files: item position -> the files behind it, relative to ``root`` (default: its
                key without a ``[row]`` suffix).
        """
        self.name, self.spec, self.classes, self.max_depth = name, dict(spec), classes, max_depth
        self.root = Path(root)
        self._item_files = item_files or (lambda i: [re.sub(r"\[\d+\]$", "", keys[i])])
        # item i's position in its file (a world source of one family skips the other's scenes)
        self.stored = np.arange(len(keys)) if stored is None else stored
        self.has_depth = spec["kind"] in DEPTH_KINDS
        self._keys, self._labels, self._read = keys, labels, read
        self.indices = np.arange(len(keys))
        if spec.get("range"):
            start, stop = spec["range"]
            self.indices = self.indices[slice(start, stop)]
            if not len(self.indices):
                raise SourceError(f"sources.{name}.range: {list(spec['range'])} selects none of its {len(keys)} items")
        subset = spec.get("subset")
        if subset:
            self.indices = self.indices[select(name, spec, labels[self.indices], subset)]

    def __len__(self) -> int:
        """The number of selected items."""
        return len(self.indices)

    def __getitem__(self, index: int) -> Item:
        """Selected item ``index``, read from disk.

        Args:
            index: its position among the selected items.
        """
        return self._read(int(self.indices[index]))

    def first(self, count: int) -> Source:
        """The first ``count`` selected items, as a source of their own.

        Args:
            count: how many (all, where the source holds fewer).

        Returns:
            A copy of this source, reading from the same files.
        """
        return self.window(0, count)

    def window(self, start: int, stop: int) -> Source:
        """Selected items [start, stop), as a source of their own.

        Args:
            start: the first position (Python slice bounds).
            stop: the position after the last.

        Returns:
            A copy of this source, reading from the same files.
        """
        part = copy.copy(self)
        part.indices = self.indices[start:stop]
        return part

    @property
    def keys(self) -> list[str]:
        """The selected items' origins, in order."""
        return [self._keys[i] for i in self.indices]

    @property
    def labels(self) -> np.ndarray:
        """(len,) int64 labels of the selected items (-1 without labels)."""
        return self._labels[self.indices]

    def check(self) -> None:
        """Decode every selected item once (a corrupt file fails here, naming itself)."""
        for i in range(len(self)):
            self[i]

    def files(self) -> list[tuple[str, Path]]:
        """(name, path) of every file behind the selected items, named relative to ``root``,
        then of the auxiliary files (``labels``, ``meta``, ``splits``), named ``<key>``.

        Returns:
            (name, path) pairs, the items' files sorted by name.
        """
        names = sorted({n for i in self.indices for n in self._item_files(int(i))})
        return [(n, self.root / n) for n in names] + [(f"<{k}>", Path(self.spec[k]).expanduser())
                                                        for k in AUXILIARY if self.spec.get(k)]

    def describe(self) -> dict[str, Any]:
        """For provenance: the spec, the count and a digest of the selected keys.

        Returns:
            ``name``, the spec's entries, ``items`` (the count) and ``keys_sha256`` (SHA-256 of the
            keys joined by newlines).
        """
        digest = hashlib.sha256("\n".join(self.keys).encode()).hexdigest()
        return {"name": self.name, **self.spec, "items": len(self), "keys_sha256": digest}
