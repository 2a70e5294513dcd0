"""The near-duplicate share counts token pairs by their keys' cosine, as defined."""

from __future__ import annotations

import torch

from taskgeom.models.host import freeze
from taskgeom.models.vit import TimmViTHost, tiny_vit
from taskgeom.prune.redundancy import near_duplicate_share


def test_identical_tokens_are_all_near_duplicates_and_noise_is_not():
    torch.manual_seed(0)
    host = TimmViTHost(tiny_vit(32, 4, 2, 8, 32, num_classes=5))
    with torch.no_grad():
        host.vit.pos_embed.zero_()  # without positions, identical patches give identical tokens
    host = freeze(host)
    flat = torch.full((3, 3, 32, 32), 0.3)
    noise = torch.randn(3, 3, 32, 32, generator=torch.Generator().manual_seed(1))
    assert near_duplicate_share(host, flat, layer=2, batch_size=2) == 1.0
    share = near_duplicate_share(host, noise, layer=2, batch_size=2)
    assert 0.0 <= share < 0.5
    # the thresholds at the ends count every pair or none
    assert near_duplicate_share(host, noise, layer=2, batch_size=3, threshold=-1.0) == 1.0
    assert near_duplicate_share(host, noise, layer=2, batch_size=3, threshold=1.0) == 0.0
