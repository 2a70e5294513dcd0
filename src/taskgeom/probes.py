"""Probe maps: the features F at one or more layers, and f: F ↦ y, the rest of the
ViT plus a task decoder (the paper's §3 problem formulation).

For layers L = (l_1 < … < l_k), F ∈ R^{N×D} stacks the k block outputs along the
token axis (N = k·T). Each block of F is an independent input: f overwrites the
running state at l_j with the j-th block and runs the remaining blocks from
there, so the decoder reads a layer i > l_k computed from the deepest block,
and the probed layers themselves directly. Decoder inputs below l_1 stay fixed at
their clean values. A single layer is the case k = 1; probing exactly the layers
a DPT head reads gives the decoder-only probe. An optional output metric L maps
y ↦ L y, so the pullback is JᵀLᵀLJ.

f is written for one image, without in-place ops on its input, so it composes with
torch.func.jvp, vjp and vmap (attention runs on the math path, see
``use_math_attention``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch
from torch import Tensor

from .models.host import ProbeHost, check_decoder, forward_states, freeze, use_math_attention


@dataclass
class Probe:
    """One image's probe: F (N, D) and f: (N, D) -> (M,)."""

    F: Tensor
    f: Callable[[Tensor], Tensor]
    layers: tuple[int, ...]
    tokens_per_layer: int


class ProbeMap:
    """Probe of ``host`` at ``layers`` through ``decoder``.

    ``layers=None`` probes the layers the decoder reads (the decoder-input probe).
    The host is frozen in place (eval mode, no parameter gradients, math attention).
    ``output_metric``: an (M', M) matrix L, or a callable y -> L(y).
    """

    def __init__(self, host: ProbeHost, decoder: str, layers: Sequence[int] | None = None,
                 output_metric: Tensor | Callable[[Tensor], Tensor] | None = None):
        check_decoder(host, decoder)
        reads = tuple(host.decoder_layers(decoder))
        layers = tuple(sorted(set(reads if layers is None else layers)))
        if not layers or layers[0] < 0 or layers[-1] >= host.num_blocks:
            raise ValueError(f"probe layers {list(layers)} outside 0..{host.num_blocks - 1}")
        if layers[0] > max(reads):
            raise ValueError(f"decoder {decoder!r} reads layers {list(reads)}; a probe at {list(layers)} does not reach it")
        self.host = freeze(use_math_attention(host))
        self.decoder = decoder
        self.layers = layers
        self.reads = reads
        self.output_metric = output_metric

    def at(self, image: Tensor) -> Probe:
        """image (3, H, W), or (V, 3, H, W) for a multi-view host -> the probe at that image."""
        host, layers, reads = self.host, self.layers, self.reads
        with torch.no_grad():
            states, ctx = forward_states(host, image.unsqueeze(0), max(layers))
        fixed = {i: states[i] for i in reads if i < layers[0]}
        F = torch.cat([states[i][0] for i in layers], dim=0)
        tokens = states[layers[0]].shape[1]
        last = max(max(reads), layers[-1])

        def f(features: Tensor) -> Tensor:
            parts = features.unsqueeze(0).split(tokens, dim=1)
            read_states = dict(fixed)
            h = None
            for i in range(layers[0], last + 1):
                h = parts[layers.index(i)] if i in layers else host.block(i, h, ctx)
                if i in reads:
                    read_states[i] = h
            y = host.decode(self.decoder, read_states, ctx)[0].flatten()
            return self.apply_metric(y)

        return Probe(F=F, f=f, layers=layers, tokens_per_layer=tokens)

    def apply_metric(self, y: Tensor) -> Tensor:
        if self.output_metric is None:
            return y
        if callable(self.output_metric):
            return self.output_metric(y)
        return self.output_metric.to(y) @ y
