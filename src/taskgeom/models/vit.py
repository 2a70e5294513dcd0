"""timm VisionTransformer as a probe host: the CLS-embedding role (DINOv2, CLIP, tiny-cls)
and the trunk of the DPT depth models."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from timm.layers import PatchEmbed
from timm.models.vision_transformer import VisionTransformer
from torch import Tensor, nn


@dataclass(frozen=True)
class Grid:
    """Token layout of one image: prefix tokens (CLS, registers) then a rows×cols patch grid.

    Attributes:
        prefix: the tokens before the patches.
        rows: patch rows.
        cols: patch columns.
    """

    prefix: int
    rows: int
    cols: int


class ConvStemPatchEmbed(PatchEmbed):
    """Patch embedding by a convolutional stem ("Early convolutions help transformers
    see better", Xiao et al., 2021): log2(patch) stride-2 3×3 conv + BN + ReLU layers,
    channels doubling up to ``embed_dim``, then a 1×1 projection. Same token grid as
    plain patchify, but far easier to optimise for a tiny ViT trained briefly."""

    def __init__(self, img_size=224, patch_size=16, in_chans=3, embed_dim=768, bias=True, **kwargs):
        """timm's PatchEmbed with its projection replaced by the stem.

        Args:
            img_size: the image side.
            patch_size: a power of two ≥ 2, square.
            in_chans: input channels.
            embed_dim: D.
            bias: whether the final 1×1 projection has a bias.
            **kwargs: passed on to ``PatchEmbed``.

        Raises:
            ValueError: the patch size is not a square power of two ≥ 2.
        """
        super().__init__(img_size=img_size, patch_size=patch_size, in_chans=in_chans, embed_dim=embed_dim,
                         bias=bias, **kwargs)
        p = self.patch_size[0]
        n = p.bit_length() - 1
        if self.patch_size[0] != self.patch_size[1] or p != 1 << n or n < 1:
            raise ValueError(f"ConvStemPatchEmbed: patch size must be a square power of two, got {self.patch_size}")
        widths = [max(8, embed_dim >> (n - 1 - i)) for i in range(n)]
        layers, c = [], in_chans
        for w in widths:
            layers += [nn.Conv2d(c, w, 3, stride=2, padding=1, bias=False), nn.BatchNorm2d(w), nn.ReLU(inplace=True)]
            c = w
        layers.append(nn.Conv2d(c, embed_dim, 1, bias=bias))
        self.proj = nn.Sequential(*layers)


def tiny_vit(embed_dim: int, depth: int, num_heads: int, patch_size: int, img_size: int,
             num_classes: int = 0, conv_stem: bool = True) -> VisionTransformer:
    """A small timm ViT; ``dynamic_img_size`` lets it run at any multiple of the patch size.
    ``conv_stem=False``: plain patchify, as in ViT-B/16.

    Args:
        embed_dim: D.
        depth: blocks.
        num_heads: attention heads.
        patch_size: the patch side in pixels.
        img_size: the image side its position embedding is made for.
        num_classes: classifier outputs; 0 for none.
        conv_stem: embed patches with ``ConvStemPatchEmbed``.

    Returns:
        The VisionTransformer (CLS-token pooling, MLP ratio 4).
    """
    return VisionTransformer(
        img_size=img_size, patch_size=patch_size, embed_dim=embed_dim, depth=depth,
        num_heads=num_heads, mlp_ratio=4.0, num_classes=num_classes, dynamic_img_size=True,
        global_pool="token", embed_layer=ConvStemPatchEmbed if conv_stem else PatchEmbed,
    )


def vit_embed(vit: VisionTransformer, images: Tensor) -> tuple[Tensor, Grid]:
    """images -> tokens entering block 0, with position embeddings.

    Args:
        vit: the ViT.
        images: (B, 3, H, W).

    Returns:
        tokens (B, prefix + rows·cols, D) and their Grid.
    """
    x = vit.patch_embed(images)  # (B, rows, cols, D) with dynamic_img_size
    rows, cols = x.shape[1], x.shape[2]
    x = vit.norm_pre(vit.patch_drop(vit._pos_embed(x)))
    return x, Grid(vit.num_prefix_tokens, rows, cols)


def patch_tokens_to_map(h: Tensor, grid: Grid) -> Tensor:
    """Patch tokens as a feature map, prefix tokens dropped.

    Args:
        h: (B, prefix + rows·cols, D).
        grid: the token layout.

    Returns:
        (B, D, rows, cols), laid out channels-last in memory.
    """
    b, _, d = h.shape
    return h[:, grid.prefix:].transpose(1, 2).reshape(b, d, grid.rows, grid.cols)


class TimmViTHost(nn.Module):
    """ProbeHost over a timm VisionTransformer with decoders on the final state.

    ``cls``: the pooled, normalised embedding before the classifier (DINOv2's CLS
    embedding); with ``project_cls`` the head is included (CLIP's projection).
    ``logits``: the classifier output, when the model has one.
    """

    def __init__(self, vit: VisionTransformer, project_cls: bool = False):
        """Wrap ``vit`` (not copied).

        Args:
            vit: the timm VisionTransformer.
            project_cls: ``cls`` includes the head (CLIP's projection); there is then no ``logits``.
        """
        super().__init__()
        self.vit = vit
        self.project_cls = project_cls
        self.num_blocks = len(vit.blocks)
        has_head = not isinstance(vit.head, nn.Identity)
        self.decoders = ("cls", "logits") if has_head and not project_cls else ("cls",)

    def decoder_layers(self, decoder: str) -> tuple[int, ...]:
        """The last block: every decoder reads the final state.

        Args:
            decoder: cls or logits.

        Returns:
            (num_blocks − 1,).
        """
        return (self.num_blocks - 1,)

    def embed(self, images: Tensor) -> tuple[Tensor, Grid]:
        """images -> tokens entering block 0 (``vit_embed``).

        Args:
            images: (B, 3, H, W).

        Returns:
            tokens (B, T, D) and their Grid.
        """
        return vit_embed(self.vit, images)

    def block(self, i: int, h: Tensor, ctx: Grid) -> Tensor:
        """Block i.

        Args:
            i: the block's index.
            h: (B, T, D).
            ctx: the Grid (unused).

        Returns:
            (B, T, D).
        """
        return self.vit.blocks[i](h)

    def decode(self, decoder: str, states: Mapping[int, Tensor], ctx: Grid) -> Tensor:
        """The final norm, pooling and (for logits or a projected CLS) the head.

        Args:
            decoder: cls or logits.
            states: {num_blocks − 1: (B, T, D)}.
            ctx: the Grid (unused).

        Returns:
            (B, D) for cls (the projection's width with ``project_cls``), (B, classes) for logits.
        """
        h = self.vit.norm(states[self.num_blocks - 1])
        pre_logits = decoder == "cls" and not self.project_cls
        return self.vit.forward_head(h, pre_logits=pre_logits)

    def forward(self, images: Tensor) -> Tensor:
        """The ViT's own forward pass.

        Args:
            images: (B, 3, H, W).

        Returns:
            The ViT's output, (B, classes) or (B, D) without a head.
        """
        return self.vit(images)
