"""The interface a backbone + decoders offers to probe maps.

A host is a ViT cut at its transformer-block boundaries: ``embed`` makes the
tokens entering block 0, ``block(i, ·)`` runs block i, and ``decode`` runs a
task decoder on the block outputs it reads. "State i" is the output of block i,
a (B, T, D) tensor (T tokens including CLS / register / camera tokens).
Every zoo model and every adapter for the paper's models implements it, so one
``ProbeMap`` serves them all.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol, runtime_checkable

from torch import Tensor, nn


@runtime_checkable
class ProbeHost(Protocol):
    """A backbone cut at its block boundaries, with named task decoders (see the module docstring).

    Attributes:
        num_blocks: the transformer blocks.
        decoders: the decoders' names.
    """
    num_blocks: int
    decoders: tuple[str, ...]

    def decoder_layers(self, decoder: str) -> tuple[int, ...]:
        """Indices of the block outputs the decoder reads (the last block when it reads the final state).

        Args:
            decoder: one of ``decoders``.

        Returns:
            Block indices, ascending.
        """
        ...

    def embed(self, images: Tensor) -> tuple[Tensor, Any]:
        """The tokens entering block 0, and the context the blocks and decoders need (e.g. the Grid).

        Args:
            images: (B, 3, H, W), or (B, V, 3, H, W) for multi-view hosts.

        Returns:
            tokens (B, T, D) and ctx.
        """
        ...

    def block(self, i: int, h: Tensor, ctx: Any) -> Tensor:
        """Block i.

        Args:
            i: the block's index.
            h: (B, T, D) the state entering it.
            ctx: ``embed``'s context.

        Returns:
            (B, T, D), state i.
        """
        ...

    def decode(self, decoder: str, states: Mapping[int, Tensor], ctx: Any) -> Tensor:
        """A decoder on the block outputs it reads.

        Args:
            decoder: one of ``decoders``.
            states: {i: (B, T, D)} for i in decoder_layers(decoder).
            ctx: ``embed``'s context.

        Returns:
            The decoder output (B, ...).
        """
        ...


@runtime_checkable
class PrunableHost(Protocol):
    """The one optional hook token reduction reads (``taskgeom.prune.blocks``); a host implements it
    when its blocks read more than the tokens (EVA's rotary embedding of their grid positions) or
    when the pruning code cannot find its blocks by itself (timm ``vit.blocks``, transformers DINOv2
    layers)."""

    def pruning_block(self, i: int, ctx: Any, positions: Tensor | None = None) -> Any:
        """Block i as a ``taskgeom.prune.blocks.AttentionBlock`` (``forward(x, size)`` and
        ``with_stats(x, size)``, proportional attention over merged tokens) for the running tokens
        at ``positions``.

        Args:
            i: the block's index.
            ctx: ``embed``'s context.
            positions: (B, K) the running tokens' indices into the full sequence, prefix first;
                None for the full sequence (or tokens at no single position, which a host whose
                blocks read positions refuses when it sees them).

        Returns:
            The attention block.
        """
        ...


def check_decoder(host: ProbeHost, decoder: str) -> None:
    """Refuse a decoder the host does not have.

    Args:
        host: the model.
        decoder: the decoder's name.

    Raises:
        ValueError: naming the host's decoders.
    """
    if decoder not in host.decoders:
        raise ValueError(f"{type(host).__name__} has no decoder {decoder!r}; it has {list(host.decoders)}")


def forward_states(host: ProbeHost, images: Tensor, upto: int) -> tuple[list[Tensor], Any]:
    """Run blocks 0..upto.

    Args:
        host: the model.
        images: (B, 3, H, W), or (B, V, 3, H, W) for multi-view hosts.
        upto: the last block to run.

    Returns:
        [state_0, …, state_upto], each (B, T, D), and the embedding ctx.
    """
    h, ctx = host.embed(images)
    states = []
    for i in range(upto + 1):
        h = host.block(i, h, ctx)
        states.append(h)
    return states, ctx


def run_decoder(host: ProbeHost, decoder: str, images: Tensor) -> Tensor:
    """The unprobed forward pass: images -> decoder output.

    Args:
        host: the model.
        decoder: one of its decoders.
        images: (B, 3, H, W), or (B, V, 3, H, W) for multi-view hosts.

    Returns:
        (B, ...), the decoder output.
    """
    check_decoder(host, decoder)
    layers = host.decoder_layers(decoder)
    states, ctx = forward_states(host, images, max(layers))
    return host.decode(decoder, {i: states[i] for i in layers}, ctx)


def use_math_attention(module: nn.Module) -> nn.Module:
    """Switch timm attention layers to the explicit softmax path.

    torch.func.jvp has no rule for the fused scaled-dot-product kernels on CPU,
    so probe maps must never reach them.

    Args:
        module: changed in place (every submodule with ``fused_attn``).

    Returns:
        ``module``.
    """
    for m in module.modules():
        if hasattr(m, "fused_attn"):
            m.fused_attn = False
    return module


def freeze(module: nn.Module) -> nn.Module:
    """Eval mode and no parameter gradients, in place.

    Args:
        module: the module.

    Returns:
        ``module``.
    """
    module.eval()
    for p in module.parameters():
        p.requires_grad_(False)
    return module


def param_count(module: nn.Module) -> int:
    """The number of parameter entries.

    Args:
        module: the module.

    Returns:
        Σ numel over its parameters.
    """
    return sum(p.numel() for p in module.parameters())
