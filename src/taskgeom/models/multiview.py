"""tiny-mv: a multi-view ViT in the VGGT role.

Blocks alternate frame attention (tokens of one view) and global attention
(tokens of all views). Each view carries a camera token; the first view's is
distinct, since poses are expressed in the first camera's frame (as in VGGT).
Heads: a 9-number camera head per view (translation 3, quaternion 4, field of
view 2), and DPT depth and point-map heads reading widely spaced layers.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import torch
from timm.layers import resample_abs_pos_embed
from timm.models.vision_transformer import Block
from torch import Tensor, nn

from taskgeom.models.dpt import DPTHead
from taskgeom.models.vit import ConvStemPatchEmbed, Grid, patch_tokens_to_map

POSE_DIM = 9


@dataclass(frozen=True)
class MultiViewCtx:
    """What ``TinyMultiView.embed`` passes to the blocks and decoders.

    Attributes:
        views: V.
        grid: the token layout of one view (prefix 1: the camera token).
        size: (H, W) of the images.
    """
    views: int
    grid: Grid
    size: tuple[int, int]

    @property
    def tokens_per_view(self) -> int:
        """T, the camera token and the patches of one view."""
        return self.grid.prefix + self.grid.rows * self.grid.cols


class TinyMultiView(nn.Module):
    """ProbeHost decoders: ``camera`` (B, V·9), ``depth`` (B, V·H·W), ``pointmap`` (B, V·3·H·W).

    States are (B, V·T, D): the views' token sequences laid end to end.
    """

    decoders = ("camera", "depth", "pointmap")

    def __init__(self, embed_dim: int, depth: int, num_heads: int, patch_size: int, img_size: int,
                 read_layers: Sequence[int], head_features: int):
        """A tiny multi-view ViT (conv-stem patches, learned positions shared by the views, two camera
        tokens) with a camera head and DPT depth and point-map heads.

        Args:
            embed_dim: D.
            depth: blocks (even: frame attention, odd: global).
            num_heads: attention heads.
            patch_size: the patch side in pixels.
            img_size: the training image side (other sides resample the position embedding).
            read_layers: the four blocks the DPT heads read.
            head_features: the DPT heads' width.

        Raises:
            ValueError: not four read layers below ``depth``.
        """
        super().__init__()
        if len(read_layers) != 4 or max(read_layers) >= depth:
            raise ValueError(f"read_layers must be 4 block indices below depth={depth}, got {list(read_layers)}")
        self.patch_embed = ConvStemPatchEmbed(img_size, patch_size, 3, embed_dim, output_fmt="NHWC",
                                              dynamic_img_pad=False, strict_img_size=False)
        grid = img_size // patch_size
        self.pos_embed = nn.Parameter(torch.randn(1, grid * grid, embed_dim) * 0.02)
        self.camera_tokens = nn.Parameter(torch.randn(2, embed_dim) * 0.02)  # first view, other views
        self.blocks = nn.ModuleList(Block(embed_dim, num_heads, mlp_ratio=4.0, qkv_bias=True) for _ in range(depth))
        self.norm = nn.LayerNorm(embed_dim)
        self.camera_head = nn.Sequential(nn.Linear(embed_dim, embed_dim), nn.GELU(), nn.Linear(embed_dim, POSE_DIM))
        self.depth_head = DPTHead(embed_dim, head_features, out_channels=1, positive=True)
        self.point_head = DPTHead(embed_dim, head_features, out_channels=3, positive=False)
        self.read_layers = tuple(read_layers)
        self.num_blocks = depth

    def is_global(self, i: int) -> bool:
        """Odd blocks attend across views, even blocks within a view.

        Args:
            i: the block's index.

        Returns:
            Whether block i is global.
        """
        return i % 2 == 1

    def decoder_layers(self, decoder: str) -> tuple[int, ...]:
        """The last block for ``camera``, the read layers for ``depth`` and ``pointmap``.

        Args:
            decoder: camera, depth or pointmap.

        Returns:
            Block indices.
        """
        return (self.num_blocks - 1,) if decoder == "camera" else self.read_layers

    def embed(self, images: Tensor) -> tuple[Tensor, MultiViewCtx]:
        """The views' tokens entering block 0, laid end to end, each view's camera token first.

        Args:
            images: (B, V, 3, H, W).

        Returns:
            tokens (B, V·(1 + rows·cols), D) and the MultiViewCtx.
        """
        b, v = images.shape[:2]
        x = self.patch_embed(images.flatten(0, 1))  # (B·V, rows, cols, D)
        rows, cols, d = x.shape[1:]
        pos = self.pos_embed
        if rows * cols != pos.shape[1]:
            base = int(round(pos.shape[1] ** 0.5))
            pos = resample_abs_pos_embed(pos, (rows, cols), (base, base), num_prefix_tokens=0)
        x = x.reshape(b * v, rows * cols, d) + pos
        cam = self.camera_tokens[torch.tensor([0] + [1] * (v - 1), device=images.device)]  # (V, D)
        cam = cam.unsqueeze(0).expand(b, v, d).reshape(b * v, 1, d)
        x = torch.cat([cam, x], dim=1)
        ctx = MultiViewCtx(v, Grid(1, rows, cols), tuple(images.shape[-2:]))
        return x.reshape(b, v * x.shape[1], d), ctx

    def block(self, i: int, h: Tensor, ctx: MultiViewCtx) -> Tensor:
        """Block i: within each view (even i) or across all views (odd i).

        Args:
            i: the block's index.
            h: (B, V·T, D).
            ctx: ``embed``'s context.

        Returns:
            (B, V·T, D).
        """
        if self.is_global(i):
            return self.blocks[i](h)
        b, _, d = h.shape
        frames = h.reshape(b * ctx.views, ctx.tokens_per_view, d)
        return self.blocks[i](frames).reshape(b, -1, d)

    def per_view(self, h: Tensor, ctx: MultiViewCtx) -> Tensor:
        """The states split into views.

        Args:
            h: (B, V·T, D).
            ctx: ``embed``'s context.

        Returns:
            (B·V, T, D).
        """
        return h.reshape(h.shape[0] * ctx.views, ctx.tokens_per_view, h.shape[-1])

    def decode(self, decoder: str, states: Mapping[int, Tensor], ctx: MultiViewCtx) -> Tensor:
        """One decoder on the block outputs it reads.

        Args:
            decoder: camera (from each view's normalised camera token), depth or pointmap (DPT heads).
            states: {i: (B, V·T, D)} for i in decoder_layers(decoder).
            ctx: ``embed``'s context.

        Returns:
            camera (B, V·9), depth (B, V·H·W) or pointmap (B, V·3·H·W), flattened per item.
        """
        if decoder == "camera":
            h = self.norm(self.per_view(states[self.num_blocks - 1], ctx))
            b = h.shape[0] // ctx.views
            return self.camera_head(h[:, 0]).reshape(b, ctx.views * POSE_DIM)
        maps = [patch_tokens_to_map(self.per_view(states[i], ctx), ctx.grid) for i in self.read_layers]
        head = self.depth_head if decoder == "depth" else self.point_head
        out = head(maps, ctx.size)  # (B·V, C, H, W)
        return out.reshape(out.shape[0] // ctx.views, -1)

    def forward(self, images: Tensor) -> dict[str, Tensor]:
        """Every decoder from one pass.

        Args:
            images: (B, V, 3, H, W).

        Returns:
            camera (B, V, 9), depth (B, V, H, W), pointmap (B, V, 3, H, W).
        """
        b, v, _, hgt, wid = images.shape
        h, ctx = self.embed(images)
        states = {}
        for i in range(self.num_blocks):
            h = self.block(i, h, ctx)
            states[i] = h
        return {
            "camera": self.decode("camera", states, ctx).view(b, v, POSE_DIM),
            "depth": self.decode("depth", states, ctx).view(b, v, hgt, wid),
            "pointmap": self.decode("pointmap", states, ctx).view(b, v, 3, hgt, wid),
        }
