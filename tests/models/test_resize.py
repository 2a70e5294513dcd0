"""resize_bilinear is F.interpolate's bilinear map, and stays cheap to differentiate under vmap;
the DPT fusion block's projection commutes with it."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F_
from torch.func import jvp, vmap

from taskgeom.models.resize import resize_bilinear


@pytest.mark.parametrize("align_corners", [True, False])
@pytest.mark.parametrize("shape, size", [((2, 3, 8, 8), (16, 16)),     # the DPT head's ×2
                                         ((1, 4, 5, 7), (11, 3)),      # up one axis, down the other
                                         ((2, 2, 6, 6), (4, 9)),       # non-integer ratios
                                         ((1, 2, 1, 6), (3, 6)),       # a one-pixel axis
                                         ((3, 2, 8, 8), (8, 8))])      # its own size: the identity
def test_equals_interpolate(shape, size, align_corners):
    x = torch.randn(*shape, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    expected = F_.interpolate(x, size=size, mode="bilinear", align_corners=align_corners)
    torch.testing.assert_close(resize_bilinear(x, size, align_corners), expected, rtol=0, atol=1e-12)


def test_its_jvp_under_vmap_is_the_resize_of_each_tangent():
    g = torch.Generator().manual_seed(1)
    x, V = torch.randn(1, 3, 4, 4, generator=g), torch.randn(5, 1, 3, 4, 4, generator=g)
    resize = lambda t: resize_bilinear(t, (8, 8), align_corners=True)
    tangents = vmap(lambda v: jvp(resize, (x,), (v,))[1])(V)
    expected = F_.interpolate(V.flatten(0, 1), size=(8, 8), mode="bilinear", align_corners=True).reshape(5, 1, 3, 8, 8)
    torch.testing.assert_close(tangents, expected)


def test_fusion_projects_before_upsampling_as_dpt_does_after():
    """The 1×1 projection and the ×2 align_corners resize commute, bias included."""
    from taskgeom.models.dpt import FusionBlock

    torch.manual_seed(0)
    block = FusionBlock(6).double()
    coarse, skip = torch.randn(2, 6, 5, 7, dtype=torch.float64), torch.randn(2, 6, 5, 7, dtype=torch.float64)
    x = block.out(coarse + block.skip(skip))
    dpt_order = block.project(F_.interpolate(x, size=(10, 14), mode="bilinear", align_corners=True))
    torch.testing.assert_close(block(coarse, skip), dpt_order, rtol=0, atol=1e-12)


@pytest.mark.parametrize("align_corners", [True, False])
def test_a_channels_last_map_is_resized_in_its_layout(align_corners):
    """The DPT head's maps are channels-last views of token sequences; the resize keeps that
    layout (so the convolutions after it need no conversion) and its values, forward and under
    ``vmap(jvp)``."""
    g = torch.Generator().manual_seed(2)
    tokens = torch.randn(2, 5 * 7, 4, dtype=torch.float64, generator=g)
    x = tokens.transpose(1, 2).reshape(2, 4, 5, 7)  # (B, C, H, W) over (B, H·W, C) storage
    assert x.is_contiguous(memory_format=torch.channels_last) and not x.is_contiguous()
    expected = F_.interpolate(x.contiguous(), size=(10, 9), mode="bilinear", align_corners=align_corners)
    out = resize_bilinear(x, (10, 9), align_corners)
    assert out.is_contiguous(memory_format=torch.channels_last)
    torch.testing.assert_close(out, expected, rtol=0, atol=1e-12)
    V = torch.randn(3, 2, 4, 5, 7, dtype=torch.float64, generator=g)
    tangents = vmap(lambda v: jvp(lambda t: resize_bilinear(t, (10, 9), align_corners), (x,), (v,))[1])(V)
    expected = F_.interpolate(V.flatten(0, 1), size=(10, 9), mode="bilinear", align_corners=align_corners)
    torch.testing.assert_close(tangents, expected.reshape(3, 2, 4, 10, 9), rtol=0, atol=1e-12)
