"""A source's items through a host's preprocessing, as model inputs: batches streamed by a
DataLoader (``batches``), one stacked batch (``read_inputs``, in the images' channels-last
layout), and ``InputDigest``, the sha256 of what a stage saw.

``read_inputs`` holds a stacked batch in memory up to ``SPILL_BYTES``; a larger one (the
paper's 2000 images at 448 px are 4.8 GB of float32) is written batch by batch to an unnamed
temporary file (under ``$TMPDIR``) and mapped from it, so memory holds one batch while
reading and the pages a computation touches afterwards. Both give the same values in the
same layout.
"""

from __future__ import annotations

import hashlib
import itertools
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch import Tensor
from torch.utils.data import DataLoader, Dataset

from taskgeom.data.sources import Source, SourceError
from taskgeom.finite import require_finite


@dataclass
class Batch:
    """Preprocessed items, S the model's input side and V the views of a multi-view item.

    Attributes:
        x: (B, 3, S, S) or (B, V, 3, S, S) float inputs.
        labels: (B,) integer labels.
        depth: (B, S, S) / (B, V, S, S) depth, or None.
        keys: their origins, one per item.
    """

    x: Tensor
    labels: Tensor
    depth: Tensor | None
    keys: list[str]


class _Prepared(Dataset):
    """A source's items through a host's image (and depth) transform."""

    def __init__(self, source: Source, image: Callable[[np.ndarray], Tensor],
                 depth: Callable[[np.ndarray], Tensor] | None) -> None:
        self.source, self.image, self.depth = source, image, depth

    def __len__(self) -> int:
        return len(self.source)

    def _each(self, fn: Callable[[np.ndarray], Tensor], array: np.ndarray, views: bool) -> Tensor:
        return torch.stack([fn(a) for a in array]) if views else fn(array)

    def __getitem__(self, index: int) -> dict[str, Any]:
        item = self.source[index]
        views = item.image.ndim == 4
        out = {"x": self._each(self.image, item.image, views), "label": item.label, "key": item.key}
        where = str(self.source.root / item.key)  # the file (and row) on this machine
        if self.depth is not None:
            if item.depth is None:
                raise SourceError(f"sources.{self.source.name}: {where} has no depth (a dense task needs it)")
            require_finite(np.asarray(item.depth)[None], f"sources.{self.source.name}: depth", lambda _: where)
            out["depth"] = self._each(self.depth, item.depth, views)
        require_finite(np.asarray(item.image)[None], f"sources.{self.source.name}: image", lambda _: where)
        return out


def batches(source: Source, image: Callable[[np.ndarray], Tensor], batch_size: int,
            depth: Callable[[np.ndarray], Tensor] | None = None, workers: int = 0) -> Iterator[Batch]:
    """The source's items in order, preprocessed, ``batch_size`` at a time (``workers`` reader processes).

    Args:
        source: the items.
        image: one image (H, W, 3) uint8 -> (3, S, S) input; applied per view.
        batch_size: items per batch.
        depth: one depth map (H, W) -> (S, S); None to read no depth.
        workers: DataLoader worker processes.

    Yields:
        Batches of up to ``batch_size`` items.

    Raises:
        SourceError: depth was asked and an item has none.
        NonFiniteError: an image or depth map holds a NaN or an infinity.
    """
    loader = DataLoader(_Prepared(source, image, depth), batch_size=batch_size, shuffle=False, num_workers=workers)
    for b in loader:
        yield Batch(b["x"], b["label"], b.get("depth"), list(b["key"]))


SPILL_BYTES = 512 * 2**20  # a stacked batch larger than this is mapped from a temporary file


class _Stack:
    """``count`` items' arrays filled part by part, in memory or (over ``SPILL_BYTES``) in a
    mapped temporary file; ``tensor`` is the whole, with images in channels-last layout."""

    def __init__(self, first: Tensor, count: int, images: bool) -> None:
        self.images, self.filled = images, 0
        shape = (count, *(first.movedim(-3, -1) if images else first).shape[1:])
        if count * first[0].numel() * first.element_size() > SPILL_BYTES:
            dtype = torch.empty(0, dtype=first.dtype).numpy().dtype
            self.store = torch.from_numpy(np.memmap(tempfile.TemporaryFile(), dtype=dtype, mode="w+", shape=shape))
        else:
            self.store = torch.empty(shape, dtype=first.dtype)

    def add(self, part: Tensor) -> None:
        self.store[self.filled:self.filled + len(part)] = part.movedim(-3, -1) if self.images else part
        self.filled += len(part)

    @property
    def tensor(self) -> Tensor:
        return self.store.movedim(-1, -3) if self.images else self.store


def read_inputs(source: Source, prep: Any, batch_size: int = 64, depth: bool = False,
                digest: InputDigest | None = None) -> Batch:
    """Every item of ``source`` through ``prep`` (``.image`` and, with ``depth``, ``.depth``) as
    one batch (mapped from a temporary file over ``SPILL_BYTES``); ``digest`` sees every input.
    Images keep their own HWC memory layout, strides (…, 1, 3W, 3): the layout the zoo's inputs
    have always had, so convolutions take the same path and give the same bits.

    Args:
        source: the items.
        prep: the host's preprocessing (``image``, ``depth`` transforms).
        batch_size: items per read.
        depth: read depth too.
        digest: updated with every input.

    Returns:
        The Batch of all ``len(source)`` items.
    """
    stream = batches(source, prep.image, batch_size, prep.depth if depth else None)
    first = next(stream)
    x = _Stack(first.x, len(source), images=True)
    d = _Stack(first.depth, len(source), images=False) if depth else None
    labels, keys = [], []
    for part in itertools.chain([first], stream):
        x.add(part.x)
        if d is not None:
            d.add(part.depth)
        labels.append(part.labels)
        keys += part.keys
    if digest is not None:
        digest.update(x.tensor)
    return Batch(x.tensor, torch.cat(labels), d.tensor if d is not None else None, keys)


class InputDigest:
    """sha256 over the float32 bytes of every preprocessed input, in order: what a stage saw."""

    def __init__(self) -> None:
        """An empty digest."""
        self._hash, self.items = hashlib.sha256(), 0

    def update(self, x: Tensor, chunk: int = 64) -> Tensor:
        """Hash ``x`` ``chunk`` items at a time (the bytes of the contiguous whole, as float32).

        Args:
            x: (B, ...) inputs.
            chunk: items per update.

        Returns:
            ``x``, unchanged.
        """
        for start in range(0, len(x), chunk):
            self._hash.update(x[start:start + chunk].detach().to(torch.float32).contiguous().numpy().tobytes())
        self.items += len(x)
        return x

    def hexdigest(self) -> str:
        """The sha256 so far.

        Returns:
            64 hex characters.
        """
        return self._hash.hexdigest()


def digest_of(x: Tensor) -> str:
    """``InputDigest`` of one batch.

    Args:
        x: (B, ...) inputs.

    Returns:
        The hex sha256.
    """
    digest = InputDigest()
    digest.update(x)
    return digest.hexdigest()
