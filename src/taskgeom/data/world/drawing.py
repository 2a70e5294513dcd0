"""Pencil line drawing of a rendered view: the world's ImageNet-Sketch."""

from __future__ import annotations

import numpy as np

from taskgeom.data.world.raycast import Render

PAPER = np.array([246, 243, 234], dtype=np.uint8)
INK = np.array([28, 28, 38], dtype=np.uint8)  # contours and creases
PENCIL = np.array([120, 118, 125], dtype=np.uint8)  # texture pattern boundaries
HATCH = np.array([182, 180, 184], dtype=np.uint8)  # shading strokes
_CREASE_COS = np.cos(np.radians(35.0))


def _thicken(mask: np.ndarray, width: int) -> np.ndarray:
    """Grow 1-pixel lines (H,W) to about `width` pixels (right and down)."""
    out = mask.copy()
    for s in range(1, width):
        out[s:, :] |= mask[:-s, :]
        out[:, s:] |= mask[:, :-s]
    return out


def sketch(view: Render) -> np.ndarray:
    """Pencil line drawing of a rendered view.

    Dark contours where object ids change (drawn on the nearer side, so they
    hug occluding silhouettes at depth discontinuities) and at creases
    (normals turning by > 35 deg); lighter lines at texture pattern boundaries,
    so the class (shape x pattern) stays recognisable; diagonal hatching on
    objects' shaded sides (cross-hatching where darkest); paper elsewhere.
    Line widths and hatch spacing scale with resolution / 64.

    Args:
        view: the rendered view (its object ids, depth, normals, pattern and shade, (H, W)).

    Returns:
        (H, W, 3) uint8.
    """
    ids, depth, normal, pattern = view.object_id, view.depth, view.normal, view.pattern
    h, w = ids.shape
    contour = np.zeros((h, w), dtype=bool)
    texture = np.zeros((h, w), dtype=bool)
    for a, b in (((slice(None, -1), slice(None)), (slice(1, None), slice(None))),
                 ((slice(None), slice(None, -1)), (slice(None), slice(1, None)))):
        same = ids[a] == ids[b]
        a_nearer = depth[a] <= depth[b]
        contour[a] |= ~same & a_nearer
        contour[b] |= ~same & ~a_nearer
        on_object = same & (ids[a] >= 1)
        contour[a] |= on_object & (np.einsum("hwc,hwc->hw", normal[a], normal[b]) < _CREASE_COS)
        texture[a] |= on_object & (pattern[a] != pattern[b])

    scale = w / 64
    width, period = max(1, round(scale)), max(3, round(4 * scale))
    rows, cols = np.arange(h)[:, None], np.arange(w)[None, :]
    objects = ids >= 1
    hatch = objects & (view.shade < 0.6) & ((rows + cols) % period < width)
    hatch |= objects & (view.shade < 0.45) & ((rows - cols) % period < width)

    out = np.broadcast_to(PAPER, (h, w, 3)).copy()
    out[hatch] = HATCH
    out[_thicken(texture, width)] = PENCIL
    out[_thicken(contour, width)] = INK
    return out
