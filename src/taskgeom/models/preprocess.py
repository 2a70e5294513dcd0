"""Each host's own input pipeline: resize, centre crop and normalise, as its reference does.

``Preprocess`` maps an image (H, W, 3) uint8 at any size to the host's input (3, S, S) and,
for dense tasks, a depth map (H, W) to (S, S) with the same geometry (nearest neighbour, so
no depth is invented across edges). Modes:

- ``timm``: timm's evaluation transform from the model's data config with its input size set
  to the host's ``img_size``: shorter side to floor(S / crop_pct) (aspect kept, torchvision's
  rounding), centre crop S × S, ToTensor, Normalize(mean, std); interpolation as configured.
- ``lower_bound``: Depth-Anything(-V2)'s reference resize, also its Hugging Face processor's
  settings (S = 518, keep aspect, sides multiples of 14, bicubic, ImageNet mean / std): the
  scale that brings both sides to at least S, each side rounded to the nearest multiple of
  ``multiple`` (up if that falls below S); then a centre crop S × S so that images batch (the
  processor would keep the whole frame; for inputs smaller than S its "scale as little as
  possible" rule could leave a side below S, which no square crop can take). VGGT uses it
  with mean 0, std 1 (the model normalises internally).
- ``world``: the zoo's own: (x / 255 − 0.5) / 0.25 on the central square, resized by bilinear
  interpolation of the tensor only when its side differs from S (the world renders at S).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F_
import torchvision.transforms.functional as TF
from PIL import Image
from torch import Tensor
from torchvision.transforms import InterpolationMode

from taskgeom.data.batches import InputDigest
from taskgeom.data.indexed import open_indexed
from taskgeom.data.real import center_square
from taskgeom.data.sources import Source, SourceError
from taskgeom.data.splits import MEAN as WORLD_MEAN
from taskgeom.data.splits import STD as WORLD_STD

IMAGENET_MEAN, IMAGENET_STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)


@dataclass(frozen=True)
class Preprocess:
    """One host's resize / crop / normalisation (see the module docstring for the modes).

    Attributes:
        mode: timm, lower_bound or world.
        size: S, the input side.
        mean: per-channel mean subtracted (after scaling to [0, 1]).
        std: per-channel std divided by.
        interpolation: the image resize's (torchvision's names); depth is always nearest.
        crop_pct: timm's crop fraction (timm mode).
        multiple: sides are rounded to multiples of it (lower_bound mode).
    """

    mode: str
    size: int
    mean: tuple[float, float, float]
    std: tuple[float, float, float]
    interpolation: str = "bicubic"
    crop_pct: float = 1.0
    multiple: int = 1

    def resized_shape(self, height: int, width: int) -> tuple[int, int]:
        """(h, w) after the resize step, before the centre crop.

        Args:
            height: the image's height.
            width: its width.

        Returns:
            (h, w); (S, S) in world mode.
        """
        if self.mode == "timm":
            short = math.floor(self.size / self.crop_pct)
            long = int(short * max(height, width) / min(height, width))  # torchvision's Resize(int)
            return (short, long) if height <= width else (long, short)
        if self.mode == "lower_bound":
            scale = max(self.size / height, self.size / width)
            return self._multiple(scale * height), self._multiple(scale * width)
        return self.size, self.size

    def _multiple(self, value: float) -> int:
        rounded = round(value / self.multiple) * self.multiple
        return rounded if rounded >= self.size else math.ceil(value / self.multiple) * self.multiple

    def image(self, rgb: np.ndarray) -> Tensor:
        """An image as the host's input.

        Args:
            rgb: (H, W, 3) uint8.

        Returns:
            (3, S, S) float32, normalised.
        """
        if self.mode == "world":
            return self._world(rgb)
        resize = (math.floor(self.size / self.crop_pct) if self.mode == "timm"  # shorter side, as timm's Resize
                  else list(self.resized_shape(*rgb.shape[:2])))
        pil = TF.resize(Image.fromarray(rgb), resize, interpolation=InterpolationMode(self.interpolation))
        x = TF.pil_to_tensor(TF.center_crop(pil, [self.size, self.size])).float() / 255.0
        return TF.normalize(x, list(self.mean), list(self.std))

    def _world(self, rgb: np.ndarray) -> Tensor:
        top, left, side = center_square(*rgb.shape[:2])
        x = torch.from_numpy(np.array(rgb[top:top + side, left:left + side])).movedim(-1, -3).float()
        x = (x / 255.0 - self.mean[0]) / self.std[0]
        if side != self.size:
            x = F_.interpolate(x[None], size=(self.size, self.size), mode="bilinear", align_corners=False)[0]
        return x

    def depth(self, depth: np.ndarray) -> Tensor:
        """(H, W) float metres -> (S, S): the image's geometry, nearest neighbour.

        Args:
            depth: (H, W) metres.

        Returns:
            (S, S) float32 metres.
        """
        height, width = depth.shape
        if self.mode == "world":
            top, left, side = center_square(height, width)
            rows = top + np.floor((np.arange(self.size) + 0.5) * side / self.size).astype(np.int64)
            cols = left + np.floor((np.arange(self.size) + 0.5) * side / self.size).astype(np.int64)
        else:
            h, w = self.resized_shape(height, width)
            top, left = int(round((h - self.size) / 2.0)), int(round((w - self.size) / 2.0))  # center_crop's offsets
            rows = np.floor((top + np.arange(self.size) + 0.5) * height / h).astype(np.int64)
            cols = np.floor((left + np.arange(self.size) + 0.5) * width / w).astype(np.int64)
        return torch.from_numpy(np.ascontiguousarray(depth[rows[:, None], cols[None, :]], dtype=np.float32))

    def describe(self) -> dict:
        """The fields, for provenance.

        Returns:
            field name -> value.
        """
        return asdict(self)


def world(size: int) -> Preprocess:
    """The zoo's preprocessing at input side ``size``.

    Args:
        size: S.

    Returns:
        The world-mode Preprocess.
    """
    return Preprocess("world", size, (WORLD_MEAN,) * 3, (WORLD_STD,) * 3, interpolation="bilinear")


def timm_preprocess(model: torch.nn.Module, size: int) -> Preprocess:
    """timm's data config of ``model`` (its pretrained tag's mean, std, crop, interpolation) at ``size``.

    Args:
        model: the timm model.
        size: S.

    Returns:
        The timm-mode Preprocess.

    Raises:
        ValueError: a crop mode other than center.
    """
    from timm.data import resolve_data_config

    cfg = resolve_data_config({"input_size": (3, size, size)}, model=model)
    if cfg.get("crop_mode", "center") != "center":
        raise ValueError(f"timm data config with crop_mode {cfg['crop_mode']!r}: only 'center' is implemented")
    return Preprocess("timm", size, tuple(cfg["mean"]), tuple(cfg["std"]), cfg["interpolation"],
                      float(cfg["crop_pct"]))


def depth_anything(size: int) -> Preprocess:
    """Depth-Anything-V2's: lower-bound resize to ``size`` in multiples of 14, bicubic, ImageNet mean / std.

    Args:
        size: S.

    Returns:
        The lower_bound-mode Preprocess.
    """
    return Preprocess("lower_bound", size, IMAGENET_MEAN, IMAGENET_STD, "bicubic", multiple=14)


def vggt(size: int) -> Preprocess:
    """VGGT's: as Depth-Anything's geometry, values in [0, 1] (the aggregator normalises).

    Args:
        size: S.

    Returns:
        The lower_bound-mode Preprocess with mean 0, std 1.
    """
    return Preprocess("lower_bound", size, (0.0,) * 3, (1.0,) * 3, "bicubic", multiple=14)


def for_host(host: torch.nn.Module, entry: dict, size: int | None = None) -> Preprocess:
    """The preprocessing of a zoo entry's host (a tiny zoo model's or a paper model's adapter's),
    at its ``img_size`` or at ``size`` (a resolution sweep).

    Args:
        host: the model (a latent host's ``base`` is used for a latent entry).
        entry: its architecture entry (``zoo.entry``).
        size: S; None for the entry's ``img_size``.

    Returns:
        The Preprocess.
    """
    if entry.get("kind") == "latent":  # a VAE before one decoder of a zoo model: the base's input
        return for_host(getattr(host, "base", host), entry["base"], size)
    size = int(size or entry["img_size"])
    if entry.get("kind") != "pretrained":
        return world(size)
    adapter = entry["adapter"]
    if adapter in ("dinov2-b14", "clip-b16"):
        return timm_preprocess(host.vit, size)
    return {"depth-anything-v2": depth_anything, "vggt": vggt}[adapter](size)


def is_multiview(host: torch.nn.Module) -> bool:
    """Whether the host (or a VAE's base) reads view groups.

    Args:
        host: the model.

    Returns:
        True when it has a ``camera`` decoder.
    """
    return "camera" in getattr(host, "base", host).decoders


def open_for_host(index: str | Path, sources: dict, host: torch.nn.Module, entry: dict, what: str,
                  size: int | None = None) -> tuple[Source, Preprocess]:
    """The indexed source (a world source at its ``size`` render) and the host's preprocessing;
    refused, naming ``what``, when the source's items are not what the host reads (single
    images or view groups).

    Args:
        index: the source's index file.
        sources: the params' ``sources`` table.
        host: the model.
        entry: its architecture entry.
        what: names the source in errors.
        size: S; None for the entry's ``img_size``.

    Returns:
        The Source and the Preprocess.

    Raises:
        SourceError: single images for a multi-view host, or view groups for another.
    """
    source = open_indexed(index, sources, size)
    groups = source[0].image.ndim == 4 if len(source) else False
    if groups != is_multiview(host):
        needs = "view groups (a multi-view split)" if is_multiview(host) else "single images"
        raise SourceError(f"{what}: {source.name!r} does not hold {needs}")
    return source, for_host(host, entry, size)


def seen(source: Source, prep: Preprocess, digest: InputDigest) -> dict:
    """What a stage read, for its provenance: the source, the preprocessing, the inputs' digest.

    Args:
        source: the source read.
        prep: the preprocessing applied.
        digest: the digest of every input.

    Returns:
        source, preprocess and input_sha256.
    """
    return {"source": source.describe(), "preprocess": prep.describe(), "input_sha256": digest.hexdigest()}
