"""How much a host's tokens repeat one another where it is pruned: the share of patch-token pairs
whose attention keys (averaged over heads: ToMe's similarity) at block ``layer`` have cosine
above ``threshold``. Near 1, any token stands for any other and every method removes tokens at
little cost; natural images keep it low."""

from __future__ import annotations

import torch
import torch.nn.functional as F_
from torch import Tensor

from taskgeom.models.host import ProbeHost
from taskgeom.prune.blocks import attention_block
from taskgeom.prune.scores import grid_of

NEAR_DUPLICATE = 0.99  # key cosine above which two tokens count as near-duplicates


@torch.no_grad()
def near_duplicate_share(host: ProbeHost, images: Tensor, layer: int, batch_size: int, device: str = "cpu",
                         threshold: float = NEAR_DUPLICATE) -> float:
    """The share of patch-token pairs (i < j, per image) whose keys at block ``layer`` have cosine
    above ``threshold``, over all images.

    Args:
        host: the frozen model.
        images: (B, 3, H, W) preprocessed images.
        layer: the block whose attention keys are compared.
        batch_size: images per forward pass.
        device: where the host runs.
        threshold: the key cosine above which a pair counts.

    Returns:
        The share in [0, 1].
    """
    dtype = next(host.parameters()).dtype
    near, pairs = 0, 0
    for start in range(0, len(images), batch_size):
        h, ctx = host.embed(images[start:start + batch_size].to(device, dtype))
        for i in range(layer):
            h = host.block(i, h, ctx)
        _, stats = attention_block(host, layer, ctx).with_stats(h)
        keys = F_.normalize(stats.keys[:, grid_of(ctx).prefix:], dim=-1)
        upper = torch.ones(keys.shape[1], keys.shape[1], dtype=torch.bool, device=keys.device).triu(1)
        cosine = (keys @ keys.transpose(1, 2))[:, upper]
        near += int((cosine > threshold).sum())
        pairs += cosine.numel()
    return near / pairs
