"""Adapter for timm ViT blocks: the statistics the baselines select tokens by, taken from the
block's own attention, and proportional attention over merged tokens.

The timm implementation behind ``taskgeom.prune.blocks.attention_block`` for hosts whose
transformer is a timm ``VisionTransformer`` at ``host.vit`` (the zoo's CLS and DPT models, the
paper's DINOv2 / CLIP); ``eva_blocks`` serves timm Eva blocks and ``hf_blocks`` transformers
DINOv2 layers. ``AttentionStats`` and ``size_bias`` are shared by all three.
"""

from __future__ import annotations

from dataclasses import dataclass

from timm.models.vision_transformer import Block
from torch import Tensor


@dataclass
class AttentionStats:
    """The attention statistics the baselines select tokens by, from one block's pass.

    Attributes:
        keys: (B, N, head_dim) attention keys averaged over heads (ToMe's metric).
        cls_attn: (B, N) the class token's attention to every token, averaged over heads (EViT's).
    """

    keys: Tensor
    cls_attn: Tensor


def size_bias(size: Tensor | None) -> Tensor | None:
    """Proportional attention (ToMe): log of the tokens each token stands for, added to every
    attention logit.

    Args:
        size: (B, N, 1) the tokens each token stands for, or None.

    Returns:
        (B, 1, 1, N), the additive mask log(size) over the key axis, or None.
    """
    return None if size is None else size.log().transpose(1, 2)[:, None]


def block_forward(block: Block, x: Tensor, size: Tensor | None = None) -> Tensor:
    """One block, with proportional attention when ``size`` is given (fused attention kernels still apply).

    Args:
        block: a timm ViT block.
        x: (B, N, C) tokens entering the block.
        size: (B, N, 1) the tokens each token stands for, or None.

    Returns:
        (B, N, C), the block's output.
    """
    return block(x) if size is None else block(x, attn_mask=size_bias(size))


def block_with_stats(block: Block, x: Tensor, size: Tensor | None = None) -> tuple[Tensor, AttentionStats]:
    """``block_forward`` with the attention computed explicitly so its keys and the class token's
    attention come out of the same pass (scoring fused into the forward).

    Args:
        block: a timm ViT block.
        x: (B, N, C) tokens entering the block.
        size: (B, N, 1) the tokens each token stands for, or None.

    Returns:
        The block's output (B, N, C) and AttentionStats: keys (B, N, head_dim), cls_attn (B, N).
    """
    attn = block.attn
    h = block.norm1(x)
    B, N, C = h.shape
    gate = attn.gate(h).sigmoid() if getattr(attn, "gate", None) is not None else None
    qkv = attn.qkv(h).reshape(B, N, 3, attn.num_heads, attn.head_dim).permute(2, 0, 3, 1, 4)
    q, k, v = qkv.unbind(0)
    q, k = attn.q_norm(q), attn.k_norm(k)
    logits = (q * attn.scale) @ k.transpose(-2, -1)                       # (B, H, N, N)
    if size is not None:
        logits = logits + size_bias(size)
    weights = logits.softmax(dim=-1)
    out = (weights @ v).transpose(1, 2).reshape(B, N, attn.attn_dim)
    out = attn.norm(out)
    if gate is not None:
        out = out * gate
    out = attn.proj(out)
    x = x + block.drop_path1(block.ls1(out))
    x = x + block.drop_path2(block.ls2(block.mlp(block.norm2(x))))
    return x, AttentionStats(keys=k.mean(dim=1), cls_attn=weights[:, :, 0].mean(dim=1))


@dataclass(frozen=True)
class TimmAttentionBlock:
    """One timm block as an attention block (see ``taskgeom.prune.blocks``).

    Attributes:
        block: the timm ViT block.
    """

    block: Block

    def forward(self, x: Tensor, size: Tensor | None = None) -> Tensor:
        """``block_forward``.

        Args:
            x: (B, N, C) tokens entering the block.
            size: (B, N, 1) the tokens each token stands for, or None.

        Returns:
            (B, N, C), the block's output.
        """
        return block_forward(self.block, x, size)

    def with_stats(self, x: Tensor, size: Tensor | None = None) -> tuple[Tensor, AttentionStats]:
        """``block_with_stats``.

        Args:
            x: (B, N, C) tokens entering the block.
            size: (B, N, 1) the tokens each token stands for, or None.

        Returns:
            The block's output (B, N, C) and its AttentionStats.
        """
        return block_with_stats(self.block, x, size)
