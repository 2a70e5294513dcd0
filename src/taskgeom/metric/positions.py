"""Position embeddings of the learned-metric networks on other token grids.

The importance head and the SPN learn one position vector per token slot of the grid they were
trained on. At another resolution the patch part is resampled bicubically, as timm does for a
ViT's own position embedding (``timm.layers.resample_abs_pos_embed``); prefix slots are kept.
"""

from __future__ import annotations

from timm.layers import resample_abs_pos_embed
from torch import Tensor


def position_table(pos: Tensor, prefix: int, base_grid: tuple[int, int], grid: tuple[int, int]) -> Tensor:
    """A learned position table carried to another grid: prefix slots kept, the patch part resampled.

    Args:
        pos: (prefix + rows·cols, w) position vectors learned on ``base_grid``.
        prefix: the prefix slots (CLS, registers).
        base_grid: (rows, cols) of the training grid.
        grid: (rows, cols) wanted.

    Returns:
        (prefix + grid rows·cols, w); ``pos`` itself when the grids agree.

    Raises:
        ValueError: ``pos`` does not have prefix + rows·cols slots.
    """
    if pos.shape[0] != prefix + base_grid[0] * base_grid[1]:
        raise ValueError(f"position table has {pos.shape[0]} slots; a {base_grid[0]}×{base_grid[1]} grid with "
                         f"{prefix} prefix token(s) needs {prefix + base_grid[0] * base_grid[1]}")
    if tuple(grid) == tuple(base_grid):
        return pos
    return resample_abs_pos_embed(pos[None], list(grid), list(base_grid), num_prefix_tokens=prefix)[0]
