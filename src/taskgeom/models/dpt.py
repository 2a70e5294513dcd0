"""A DPT-style dense head (Ranftl et al., 2021) reading several ViT layers, and the
tiny-dpt depth model built from it (the Depth-Anything-V2 role)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import torch
import torch.nn.functional as F_
from torch import Tensor, nn

from taskgeom.models.resize import resize_bilinear
from taskgeom.models.vit import Grid, patch_tokens_to_map, tiny_vit, vit_embed


class ResidualConvUnit(nn.Module):
    """x + conv(relu(conv(relu(x)))), two 3×3 convolutions that keep the channels."""
    def __init__(self, channels: int):
        """Two 3×3 convolutions of ``channels``.

        Args:
            channels: C.
        """
        super().__init__()
        self.conv1 = nn.Conv2d(channels, channels, 3, padding=1)
        self.conv2 = nn.Conv2d(channels, channels, 3, padding=1)

    def forward(self, x: Tensor) -> Tensor:
        """The residual unit.

        Args:
            x: (B, C, H, W).

        Returns:
            (B, C, H, W).
        """
        return x + self.conv2(F_.relu(self.conv1(F_.relu(x))))


class FusionBlock(nn.Module):
    """Adds the skip path to the coarser path, refines, projects, and upsamples ×2.

    DPT upsamples before its 1×1 projection; the two commute (the projection mixes channels, the
    resize pixels, and an align_corners bilinear resize keeps constants, so the bias too), so the
    projection runs on the coarse map: the same map with a quarter of the pixels, which is most of
    what the finest block costs a batch of JVPs or VJPs.
    """

    def __init__(self, channels: int):
        """Two residual units and a 1×1 projection of ``channels``.

        Args:
            channels: C.
        """
        super().__init__()
        self.skip = ResidualConvUnit(channels)
        self.out = ResidualConvUnit(channels)
        self.project = nn.Conv2d(channels, channels, 1)

    def forward(self, coarse: Tensor, skip: Tensor | None = None) -> Tensor:
        """Fuse, refine, project and upsample ×2 (align_corners bilinear).

        Args:
            coarse: (B, C, H, W), the coarser path (already at the skip's size).
            skip: (B, C, H, W), or None for the coarsest block.

        Returns:
            (B, C, 2H, 2W).
        """
        x = coarse if skip is None else coarse + self.skip(skip)
        x = self.project(self.out(x))
        return resize_bilinear(x, (2 * x.shape[-2], 2 * x.shape[-1]), align_corners=True)


class DPTHead(nn.Module):
    """Reassemble four token maps at ×4, ×2, ×1, ×½ of the patch grid, fuse coarse to fine,
    and predict ``out_channels`` maps at the image resolution.

    Input: four (B, D, rows, cols) maps, shallow to deep. Output: (B, out_channels, H, W).
    ``positive`` applies exp so the output is a positive quantity (metric depth).
    """

    def __init__(self, embed_dim: int, features: int, out_channels: int = 1, positive: bool = True):
        """Per-level projections and resamplers, four fusion blocks and the output convolutions.

        Args:
            embed_dim: D of the token maps.
            features: the fusion width.
            out_channels: maps predicted.
            positive: exponentiate the output.
        """
        super().__init__()
        widths = (features // 2, features, features, features)
        self.project = nn.ModuleList(nn.Conv2d(embed_dim, w, 1) for w in widths)
        self.resample = nn.ModuleList([
            nn.ConvTranspose2d(widths[0], widths[0], 4, stride=4),
            nn.ConvTranspose2d(widths[1], widths[1], 2, stride=2),
            nn.Identity(),
            nn.Conv2d(widths[3], widths[3], 3, stride=2, padding=1),
        ])
        self.to_features = nn.ModuleList(nn.Conv2d(w, features, 3, padding=1, bias=False) for w in widths)
        self.fusion = nn.ModuleList(FusionBlock(features) for _ in widths)
        self.out = nn.Sequential(
            nn.Conv2d(features, features // 2, 3, padding=1), nn.ReLU(),
            nn.Conv2d(features // 2, out_channels, 1),
        )
        self.positive = positive

    def forward(self, maps: Sequence[Tensor], size: tuple[int, int]) -> Tensor:
        """Reassemble, fuse coarse to fine and predict at ``size``.

        Args:
            maps: four (B, D, rows, cols) maps, shallow to deep.
            size: (H, W) of the output.

        Returns:
            (B, out_channels, H, W).
        """
        feats = [to_f(res(proj(m))) for m, proj, res, to_f in zip(maps, self.project, self.resample, self.to_features)]
        x = self.fusion[3](feats[3])
        for i in (2, 1, 0):
            x = self.fusion[i](resize_bilinear(x, feats[i].shape[-2:], align_corners=True), feats[i])
        x = resize_bilinear(x, size, align_corners=True)
        x = self.out(x)
        return torch.exp(x) if self.positive else x


class TinyDPT(nn.Module):
    """tiny-dpt: a timm ViT trunk and a DPT depth head reading ``read_layers``.

    ProbeHost decoder ``depth``: metric depth (B, H·W) read from four block outputs.
    """

    decoders = ("depth",)

    def __init__(self, embed_dim: int, depth: int, num_heads: int, patch_size: int, img_size: int,
                 read_layers: Sequence[int], head_features: int, conv_stem: bool = True):
        """A tiny ViT and a DPT head on four of its blocks.

        Args:
            embed_dim: D.
            depth: blocks.
            num_heads: attention heads.
            patch_size: the patch side in pixels.
            img_size: the training image side.
            read_layers: the four blocks the head reads, each below ``depth``.
            head_features: the DPT head's width.
            conv_stem: embed patches with ``ConvStemPatchEmbed``.

        Raises:
            ValueError: not four read layers below ``depth``.
        """
        super().__init__()
        if len(read_layers) != 4 or max(read_layers) >= depth:
            raise ValueError(f"read_layers must be 4 block indices below depth={depth}, got {list(read_layers)}")
        self.vit = tiny_vit(embed_dim, depth, num_heads, patch_size, img_size, conv_stem=conv_stem)
        self.read_layers = tuple(read_layers)
        self.head = DPTHead(embed_dim, head_features)
        self.num_blocks = depth

    def decoder_layers(self, decoder: str) -> tuple[int, ...]:
        """The head's read layers, for ``depth``.

        Args:
            decoder: depth.

        Returns:
            ``read_layers``.
        """
        return self.read_layers

    def embed(self, images: Tensor) -> tuple[Tensor, tuple[Grid, tuple[int, int]]]:
        """images -> tokens entering block 0, and (Grid, (H, W)) as ctx.

        Args:
            images: (B, 3, H, W).

        Returns:
            tokens (B, T, D) and (their Grid, the image size).
        """
        h, grid = vit_embed(self.vit, images)
        return h, (grid, tuple(images.shape[-2:]))

    def block(self, i: int, h: Tensor, ctx) -> Tensor:
        """Block i.

        Args:
            i: the block's index.
            h: (B, T, D).
            ctx: ``embed``'s context (unused).

        Returns:
            (B, T, D).
        """
        return self.vit.blocks[i](h)

    def decode(self, decoder: str, states: Mapping[int, Tensor], ctx) -> Tensor:
        """The DPT head on the read layers' patch maps.

        Args:
            decoder: depth.
            states: {i: (B, T, D)} for the read layers.
            ctx: ``embed``'s (Grid, (H, W)).

        Returns:
            (B, H·W) metric depth, flattened.
        """
        grid, size = ctx
        maps = [patch_tokens_to_map(states[i], grid) for i in self.read_layers]
        return self.head(maps, size).flatten(1)

    def forward(self, images: Tensor) -> Tensor:
        """Depth of each image.

        Args:
            images: (B, 3, H, W).

        Returns:
            (B, H, W) metric depth.
        """
        h, ctx = self.embed(images)
        states = {}
        for i in range(max(self.read_layers) + 1):
            h = self.block(i, h, ctx)
            states[i] = h
        return self.decode("depth", states, ctx).view(images.shape[0], *images.shape[-2:])
