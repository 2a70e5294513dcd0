"""tiny-trunk: one ViT trunk with a CLS classifier and a DPT depth head, trained together (the
relation of DINOv2 and Depth-Anything-V2: one backbone, a CLS probe and a DPT depth probe on it)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from torch import Tensor

from taskgeom.models.dpt import TinyDPT


class TinyTrunk(TinyDPT):
    """ProbeHost decoders: ``cls``, the final-norm CLS embedding; ``logits``, the classifier on
    it; ``depth``, metric depth (B, H·W) from the DPT head reading ``read_layers``."""

    decoders = ("cls", "logits", "depth")

    def __init__(self, embed_dim: int, depth: int, num_heads: int, patch_size: int, img_size: int,
                 read_layers: Sequence[int], head_features: int, num_classes: int):
        """A tiny ViT (conv stem) with a DPT depth head and a ``num_classes``-way classifier.

        Args:
            embed_dim: D.
            depth: blocks.
            num_heads: attention heads.
            patch_size: the patch side in pixels.
            img_size: the training image side.
            read_layers: the four blocks the depth head reads.
            head_features: the DPT head's width.
            num_classes: classes of the classifier.
        """
        super().__init__(embed_dim, depth, num_heads, patch_size, img_size, read_layers, head_features)
        self.vit.reset_classifier(num_classes)

    def decoder_layers(self, decoder: str) -> tuple[int, ...]:
        """The read layers for ``depth``, the last block for ``cls`` and ``logits``.

        Args:
            decoder: cls, logits or depth.

        Returns:
            Block indices.
        """
        return self.read_layers if decoder == "depth" else (self.num_blocks - 1,)

    def decode(self, decoder: str, states: Mapping[int, Tensor], ctx) -> Tensor:
        """One decoder on the block outputs.

        Args:
            decoder: cls, logits or depth.
            states: {i: (B, T, D)} for i in decoder_layers(decoder).
            ctx: ``embed``'s (Grid, (H, W)).

        Returns:
            cls (B, D), logits (B, classes), or depth (B, H·W).
        """
        if decoder == "depth":
            return super().decode(decoder, states, ctx)
        h = self.vit.norm(states[self.num_blocks - 1])
        return self.vit.forward_head(h, pre_logits=decoder == "cls")

    def forward(self, images: Tensor) -> dict[str, Tensor]:
        """Both tasks from one pass through the trunk.

        Args:
            images: (B, 3, H, W).

        Returns:
            {"logits": (B, classes), "depth": (B, H, W)}.
        """
        h, ctx = self.embed(images)
        states = {}
        for i in range(self.num_blocks):
            h = self.block(i, h, ctx)
            states[i] = h
        depth = self.decode("depth", states, ctx).view(images.shape[0], *images.shape[-2:])
        return {"logits": self.decode("logits", states, ctx), "depth": depth}
