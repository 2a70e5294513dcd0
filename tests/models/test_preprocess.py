"""Each host's preprocessing: timm hosts' equals timm's own evaluation transform, Depth-Anything's
follows its reference's lower-bound resize, and depth maps follow the image's geometry."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from PIL import Image

from taskgeom.models.adapters import build_paper_model
from taskgeom.models.preprocess import Preprocess, depth_anything, for_host, timm_preprocess

SIZES = [(97, 143), (300, 211), (64, 64), (480, 640)]


@pytest.mark.parametrize("name", ["dinov2-b14", "clip-b16"])
def test_timm_hosts_preprocess_as_timms_own_transform(name: str):
    from timm.data import create_transform, resolve_data_config

    host = build_paper_model(name, tiny=True)
    prep = for_host(host, {"kind": "pretrained", "adapter": name, "img_size": 56})
    reference = create_transform(**resolve_data_config({"input_size": (3, 56, 56)}, model=host.vit))
    rng = np.random.default_rng(0)
    for shape in SIZES:
        rgb = rng.integers(0, 256, (*shape, 3), dtype=np.uint8)
        assert torch.equal(prep.image(rgb), reference(Image.fromarray(rgb))), shape
    assert prep.mean == tuple(host.vit.pretrained_cfg["mean"]) and prep.interpolation == "bicubic"


def test_timm_crop_pct_below_one_matches_too():
    from timm.data import create_transform

    prep = Preprocess("timm", 48, (0.5, 0.4, 0.3), (0.2, 0.2, 0.3), "bilinear", crop_pct=0.875)
    reference = create_transform(input_size=(3, 48, 48), crop_pct=0.875, interpolation="bilinear",
                                 mean=prep.mean, std=prep.std)
    rgb = np.random.default_rng(1).integers(0, 256, (70, 90, 3), dtype=np.uint8)
    assert torch.equal(prep.image(rgb), reference(Image.fromarray(rgb)))
    assert timm_preprocess(build_paper_model("dinov2-b14", tiny=True).vit, 42).size == 42


def test_depth_anything_resize_is_lower_bound_in_multiples_of_14():
    prep = depth_anything(518)
    assert prep.resized_shape(480, 640) == (518, 686)  # the reference's 4:3 input
    assert prep.resized_shape(120, 160) == (518, 686)  # upscaled, both sides at least 518
    assert prep.resized_shape(1000, 700) == (742, 518)
    assert prep.image(np.zeros((120, 160, 3), np.uint8)).shape == (3, 518, 518)


def test_depth_follows_the_images_crop():
    """A depth map equal to its pixel's column index stays monotone across the crop, and a
    vertical edge in the image lands on the same column in the depth map."""
    prep = depth_anything(28)
    rgb = np.zeros((30, 60, 3), np.uint8)
    rgb[:, 30:] = 255  # edge at the frame's centre column
    depth = np.tile(np.arange(60, dtype=np.float32), (30, 1))
    x, d = prep.image(rgb), prep.depth(depth)
    assert d.shape == (28, 28) and (torch.diff(d[0]) >= 0).all()
    bright = (x[0, 0] > x[0, 0].min() + 1).nonzero()[0].item()  # first column past the edge
    assert abs(d[0, bright].item() - 30) <= 2
