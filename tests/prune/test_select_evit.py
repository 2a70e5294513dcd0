"""Token counts, splits and EViT's fusion."""

from __future__ import annotations

import math

import pytest
import torch

from taskgeom.prune.evit import evit_fuse
from taskgeom.prune.select import num_removed, split_lowest


@pytest.mark.parametrize("ratio", [0.0, 0.05, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5])
@pytest.mark.parametrize("patches", [64, 144, 196, 256])
def test_removed_count_matches_evits_kept_count(ratio, patches):
    assert patches - num_removed(patches, ratio) == math.ceil((1 - ratio) * patches - 1e-9)


def test_bad_ratio_is_rejected():
    with pytest.raises(ValueError, match="pruning ratio"):
        num_removed(64, 1.0)


def test_split_keeps_the_prefix_and_the_highest_scores_in_token_order():
    scores = torch.tensor([[-9.0, 5.0, 1.0, 3.0, 0.0, 4.0]])
    keep, drop = split_lowest(scores, 2, prefix=1)
    assert keep.tolist() == [[0, 1, 3, 5]] and drop.tolist() == [[2, 4]]


@pytest.mark.parametrize("ratio", [0.05, 0.2, 0.5])
def test_evit_keeps_ceil_of_the_kept_share_plus_one_fused_token(ratio):
    g = torch.Generator().manual_seed(0)
    n = 1 + 64
    x = torch.randn(3, n, 8, generator=g, dtype=torch.float64)
    attn = torch.rand(3, n, generator=g, dtype=torch.float64)
    k = num_removed(64, ratio)
    out = evit_fuse(x, attn, k)
    assert out.shape == (3, 1 + math.ceil((1 - ratio) * 64 - 1e-9) + 1, 8)
    keep, drop = split_lowest(attn, k, 1)
    torch.testing.assert_close(out[:, :-1], x.gather(1, keep[..., None].expand(-1, -1, 8)))
    a = attn.gather(1, drop)[..., None]
    fused = (x.gather(1, drop[..., None].expand(-1, -1, 8)) * a).sum(1) / a.sum(1)
    torch.testing.assert_close(out[:, -1], fused)
    assert evit_fuse(x, attn, 0) is x
