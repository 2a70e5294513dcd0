"""Bilinear resizing of feature maps as two small matrix products, for the maps that the
diagnostic differentiates.

Same map as ``F.interpolate(x, size, mode="bilinear", align_corners=...)`` (PyTorch's source-
index rule, so trained weights carry over), but vmap-friendly: under ``vmap(jvp(...))`` on CPU,
``upsample_bilinear2d``'s forward-mode rule copies its batched output, a cost every JVP block
through a DPT head would pay; two matrix products have no such copy. A resize to the map's own
size is the identity and costs nothing.

A map stored channels-last (the DPT head's maps are: a (B, N, D) token sequence viewed as
(B, D, rows, cols)) is resized in that layout, as products over its (B, H, W·C) and (B·h, W, C)
views, and stays channels-last; resized as (…, H, W) matrices it would come back channels-first,
and every convolution after it would run in the slower layout or convert. A map batched by ``vmap``,
whose layout cannot be queried, takes the (…, H, W) products.
"""

from __future__ import annotations

from functools import lru_cache

import torch
from torch import Tensor


@lru_cache(maxsize=64)
def _weights(n_in: int, n_out: int, align_corners: bool, dtype: torch.dtype, device: torch.device) -> Tensor:
    """(n_out, n_in) linear-interpolation weights along one axis, PyTorch's source index:
    align_corners: s = i·(n_in − 1)/(n_out − 1); else s = max(0, (i + ½)·n_in/n_out − ½)."""
    i = torch.arange(n_out, dtype=torch.float64)
    if align_corners:
        src = i * ((n_in - 1) / (n_out - 1)) if n_out > 1 else torch.zeros_like(i)
    else:
        src = ((i + 0.5) * (n_in / n_out) - 0.5).clamp(min=0.0)
    lo = src.floor().long().clamp(max=n_in - 1)
    hi = (lo + 1).clamp(max=n_in - 1)
    frac = src - lo
    W = torch.zeros(n_out, n_in, dtype=torch.float64)
    rows = torch.arange(n_out)
    W.index_put_((rows, lo), 1 - frac, accumulate=True)
    W.index_put_((rows, hi), frac, accumulate=True)
    return W.to(dtype=dtype, device=device)


def resize_bilinear(x: Tensor, size: tuple[int, int], align_corners: bool) -> Tensor:
    """Bilinear resize, as ``F.interpolate`` with that ``align_corners``.

    Args:
        x: (..., H, W) maps; a channels-last (B, C, H, W) map is resized in its layout.
        size: (h, w).
        align_corners: PyTorch's source-index rule.

    Returns:
        (..., h, w); ``x`` itself when the size is its own.
    """
    (H, W), (h, w) = x.shape[-2:], tuple(size)
    if (H, W) == (h, w):
        return x
    rows = _weights(H, h, align_corners, x.dtype, x.device)
    cols = _weights(W, w, align_corners, x.dtype, x.device)
    if _channels_last(x):
        b, c = x.shape[:2]
        y = rows @ x.permute(0, 2, 3, 1).reshape(b, H, W * c)  # (B, h, W·C)
        y = cols @ y.reshape(b * h, W, c)  # (B·h, w, C)
        return y.reshape(b, h, w, c).permute(0, 3, 1, 2)
    return rows @ x @ cols.T


def _channels_last(x: Tensor) -> bool:
    """Whether a (B, C, H, W) map is stored channels-last (and not also channels-first, as when
    C = 1 or H = W = 1); False for a tensor batched by ``vmap``, which cannot be asked."""
    if x.dim() != 4 or x.is_contiguous():
        return False
    try:
        return x.is_contiguous(memory_format=torch.channels_last)
    except RuntimeError:
        return False
