"""A source's items through a host's preprocessing, as model inputs: batches streamed by a
DataLoader (``batches``), one stacked batch (``read_inputs``, in the images' channels-last
layout), and ``InputDigest``, the sha256 of what a stage saw."""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch import Tensor
from torch.utils.data import DataLoader, Dataset

from taskgeom.data.sources import Source, SourceError


@dataclass
class Batch:
    """Preprocessed items: ``x`` (B, 3, S, S) or (B, V, 3, S, S), ``labels`` (B,), ``depth``
    (B, S, S) / (B, V, S, S) or None, ``keys`` their origins."""

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
        if self.depth is not None:
            if item.depth is None:
                raise SourceError(f"sources.{self.source.name}: {item.key} has no depth (a dense task needs it)")
            out["depth"] = self._each(self.depth, item.depth, views)
        return out


def batches(source: Source, image: Callable[[np.ndarray], Tensor], batch_size: int,
            depth: Callable[[np.ndarray], Tensor] | None = None, workers: int = 0) -> Iterator[Batch]:
    """The source's items in order, preprocessed, ``batch_size`` at a time (``workers`` reader processes)."""
    loader = DataLoader(_Prepared(source, image, depth), batch_size=batch_size, shuffle=False, num_workers=workers)
    for b in loader:
        yield Batch(b["x"], b["label"], b.get("depth"), list(b["key"]))


def read_inputs(source: Source, prep: Any, batch_size: int = 64, depth: bool = False,
                digest: InputDigest | None = None) -> Batch:
    """Every item of ``source`` through ``prep`` (``.image`` and, with ``depth``, ``.depth``) as
    one batch, stored ``channels_last``; ``digest`` sees every input."""
    parts = list(batches(source, prep.image, batch_size, prep.depth if depth else None))
    x = channels_last(torch.cat([p.x for p in parts]))
    if digest is not None:
        digest.update(x)
    return Batch(x, torch.cat([p.labels for p in parts]),
                 torch.cat([p.depth for p in parts]) if depth else None, [k for p in parts for k in p.keys])


def channels_last(x: Tensor) -> Tensor:
    """(..., 3, H, W) with the images' own HWC memory layout (strides (…, 1, 3W, 3)): the layout the
    zoo's inputs have always had, so convolutions take the same path and give the same bits."""
    return x.movedim(-3, -1).contiguous().movedim(-1, -3)


class InputDigest:
    """sha256 over the float32 bytes of every preprocessed input, in order: what a stage saw."""

    def __init__(self) -> None:
        self._hash, self.items = hashlib.sha256(), 0

    def update(self, x: Tensor) -> Tensor:
        self._hash.update(x.detach().to(torch.float32).contiguous().numpy().tobytes())
        self.items += len(x)
        return x

    def hexdigest(self) -> str:
        return self._hash.hexdigest()


def digest_of(x: Tensor) -> str:
    """``InputDigest`` of one batch."""
    digest = InputDigest()
    digest.update(x)
    return digest.hexdigest()
