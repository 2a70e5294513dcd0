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
    num_blocks: int
    decoders: tuple[str, ...]

    def decoder_layers(self, decoder: str) -> tuple[int, ...]:
        """Indices of the block outputs the decoder reads (the last block when it reads the final state)."""
        ...

    def embed(self, images: Tensor) -> tuple[Tensor, Any]:
        """images (B, 3, H, W) (or (B, V, 3, H, W) for multi-view hosts) -> tokens (B, T, D) entering block 0, ctx."""
        ...

    def block(self, i: int, h: Tensor, ctx: Any) -> Tensor:
        """(B, T, D) -> (B, T, D): block i."""
        ...

    def decode(self, decoder: str, states: Mapping[int, Tensor], ctx: Any) -> Tensor:
        """Block outputs {i: (B, T, D)} for i in decoder_layers(decoder) -> decoder output (B, ...)."""
        ...


def check_decoder(host: ProbeHost, decoder: str) -> None:
    if decoder not in host.decoders:
        raise ValueError(f"{type(host).__name__} has no decoder {decoder!r}; it has {list(host.decoders)}")


def forward_states(host: ProbeHost, images: Tensor, upto: int) -> tuple[list[Tensor], Any]:
    """Run blocks 0..upto; returns [state_0, …, state_upto] and the embedding ctx."""
    h, ctx = host.embed(images)
    states = []
    for i in range(upto + 1):
        h = host.block(i, h, ctx)
        states.append(h)
    return states, ctx


def run_decoder(host: ProbeHost, decoder: str, images: Tensor) -> Tensor:
    """The unprobed forward pass: images -> decoder output (B, ...)."""
    check_decoder(host, decoder)
    layers = host.decoder_layers(decoder)
    states, ctx = forward_states(host, images, max(layers))
    return host.decode(decoder, {i: states[i] for i in layers}, ctx)


def use_math_attention(module: nn.Module) -> nn.Module:
    """Switch timm attention layers to the explicit softmax path.

    torch.func.jvp has no rule for the fused scaled-dot-product kernels on CPU,
    so probe maps must never reach them.
    """
    for m in module.modules():
        if hasattr(m, "fused_attn"):
            m.fused_attn = False
    return module


def freeze(module: nn.Module) -> nn.Module:
    module.eval()
    for p in module.parameters():
        p.requires_grad_(False)
    return module


def param_count(module: nn.Module) -> int:
    return sum(p.numel() for p in module.parameters())
