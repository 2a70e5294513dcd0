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

from taskgeom.models.host import ProbeHost, check_decoder, forward_states, freeze, use_math_attention
from taskgeom.models.latent import LatentHost


@dataclass
class Probe:
    """One image's probe: F (N, D) and f: (N, D) -> (M,).

    Attributes:
        F: (N, D) the features: the probed layers' tokens stacked (N = k·T), or latent registers.
        f: the rest of the network and the decoder (and output metric), for one image.
        layers: the probed layers, ascending.
        tokens_per_layer: T.
    """

    F: Tensor
    f: Callable[[Tensor], Tensor]
    layers: tuple[int, ...]
    tokens_per_layer: int


class ProbeMap:
    """Probe of ``host`` at ``layers`` through ``decoder``.

    ``layers=None`` probes the layers the decoder reads (the decoder-input probe).
    The host is frozen in place (eval mode, no parameter gradients, math attention).
    ``output_metric``: an (M', M) matrix L, a callable y -> L(y), or "so3" (camera decoders:
    ``so3_camera_metric`` taken at each image's own output).
    """

    def __init__(self, host: ProbeHost, decoder: str, layers: Sequence[int] | None = None,
                 output_metric: Tensor | Callable[[Tensor], Tensor] | None = None):
        """Check the layers against the decoder and freeze the host in place.

        Args:
            host: the model.
            decoder: one of its decoders.
            layers: the probed blocks (deduplicated and sorted); None for those the decoder reads.
            output_metric: an (M', M) matrix L, a callable y -> L(y), "so3", or None for Euclidean.

        Raises:
            ValueError: a layer outside the host's blocks, every layer above the decoder's reads, or an
                unknown named metric.
        """
        check_decoder(host, decoder)
        reads = tuple(host.decoder_layers(decoder))
        layers = tuple(sorted(set(reads if layers is None else layers)))
        if not layers or layers[0] < 0 or layers[-1] >= host.num_blocks:
            raise ValueError(f"probe layers {list(layers)} outside 0..{host.num_blocks - 1}")
        if isinstance(output_metric, str) and output_metric != "so3":
            raise ValueError(f"output_metric {output_metric!r}: the named metric is 'so3'")
        if layers[0] > max(reads):
            raise ValueError(f"decoder {decoder!r} reads layers {list(reads)}; "
                             f"a probe at {list(layers)} does not reach it")
        self.host = freeze(use_math_attention(host))
        self.decoder = decoder
        self.layers = layers
        self.reads = reads
        self.output_metric = output_metric

    def at(self, image: Tensor) -> Probe:
        """The probe at one image.

        Args:
            image: (3, H, W) preprocessed, or (V, 3, H, W) for a multi-view host.

        Returns:
            The Probe: F (k·T, D) the clean states of the probed layers, and f.
        """
        host, layers, reads = self.host, self.layers, self.reads
        with torch.no_grad():
            states, ctx = forward_states(host, image.unsqueeze(0), max(layers))
        fixed = {i: states[i] for i in reads if i < layers[0]}
        F = torch.cat([states[i][0] for i in layers], dim=0)
        tokens = states[layers[0]].shape[1]
        last = max(max(reads), layers[-1])
        run = _blocks_to_run(layers, reads, last)

        def f(features: Tensor) -> Tensor:
            parts = features.unsqueeze(0).split(tokens, dim=1)
            read_states = dict(fixed)
            h = None
            for i in range(layers[0], last + 1):
                if i in layers:
                    h = parts[layers.index(i)]
                elif i in run:
                    h = host.block(i, h, ctx)
                if i in reads:
                    read_states[i] = h
            y = host.decode(self.decoder, read_states, ctx)[0].flatten()
            return self.apply_metric(y, L)

        L = None
        if isinstance(self.output_metric, str):
            with torch.no_grad():
                L = so3_camera_metric(f(F))  # f runs without a metric while L is None
        return Probe(F=F, f=f, layers=layers, tokens_per_layer=tokens)

    def apply_metric(self, y: Tensor, L: Tensor | None = None) -> Tensor:
        """The output metric applied to a decoder output.

        Args:
            y: (M,) the flattened decoder output.
            L: the so3 metric at this image (``so3_camera_metric``); None before it is known.

        Returns:
            (M',) L y (or the callable's value); y itself without a metric.
        """
        if self.output_metric is None or (isinstance(self.output_metric, str) and L is None):
            return y
        if isinstance(self.output_metric, str):
            return L.to(y) @ y
        if callable(self.output_metric):
            return self.output_metric(y)
        return self.output_metric.to(y) @ y


def _blocks_to_run(layers: tuple[int, ...], reads: tuple[int, ...], last: int) -> set[int]:
    """The blocks between layers[0] and ``last`` whose output reaches the decoder: a block's output
    is overwritten wherever the next layer is probed, so e.g. the decoder-input probe runs none.
    Skipping the others changes no output, and their tangents cost nothing in a JVP."""
    run: set[int] = set()
    for i in range(last, layers[0], -1):
        if i not in layers and (i in reads or i + 1 in run):
            run.add(i)
    return run


def probe_map(host, decoder: str, layers: Sequence[int] | None = None,
              output_metric: Tensor | Callable[[Tensor], Tensor] | str | None = None):
    """The probe map of any host: a ``ProbeMap``, or for a host with a VAE bottleneck
    (``taskgeom.models.latent.LatentHost``) the probe at its latent registers.

    Args:
        host: the model.
        decoder: one of its decoders.
        layers: the probed blocks; None for those the decoder reads (must be None for a latent host).
        output_metric: see ``ProbeMap`` (must be None for a latent host).

    Returns:
        A ProbeMap or LatentProbeMap.

    Raises:
        ValueError: layers or an output metric given for a latent host.
    """
    if isinstance(host, LatentHost):
        if layers is not None or output_metric is not None:
            raise ValueError("a latent probe reads the VAE registers: layers and output_metric must be null")
        return LatentProbeMap(host, decoder)
    return ProbeMap(host, decoder, layers, output_metric)


class LatentProbeMap:
    """The latent probe: F = posterior mean z (K, d) of one image, f(z) = decoder(VAE decode(z)) (M,)."""

    def __init__(self, host: LatentHost, decoder: str):
        """Freeze the latent host in place.

        Args:
            host: the frozen model with its VAE.
            decoder: the decoder the VAE was trained for.

        Raises:
            ValueError: another decoder.
        """
        if decoder != host.decoder:
            raise ValueError(f"this VAE was trained for decoder {host.decoder!r}, not {decoder!r}")
        self.host = freeze(use_math_attention(host))
        self.decoder = decoder
        self.layers = host.reads

    def at(self, image: Tensor) -> Probe:
        """The latent probe at one image.

        Args:
            image: (3, H, W) preprocessed, or (V, 3, H, W) for a multi-view host.

        Returns:
            The Probe: F = z (K, d), the posterior mean, and f(z) (M,).
        """
        with torch.no_grad():
            X, ctx = self.host.features(image.unsqueeze(0))
            mu, _ = self.host.vae.encode(X)

        def f(z: Tensor) -> Tensor:
            return self.host.decode_latent(z.unsqueeze(0), ctx)[0]

        return Probe(F=mu[0], f=f, layers=self.layers, tokens_per_layer=self.host.vae.registers)


def so3_camera_metric(y0: Tensor) -> Tensor:
    """The SO(3)-aware output metric at the camera encodings y0, block diagonal.

    An SO(3)-aware output metric: ‖L dy‖ measures a small change of the rotation by its geodesic
    angle instead of the Euclidean change of the raw quaternion. The head's quaternion q is
    normalised before use, so only its part tangent to the sphere moves the rotation, and the
    angle between unit quaternions is twice their arc: dθ = 2 ‖(I − q̂q̂ᵀ) dq‖ / ‖q‖. Translation
    (metres) and field of view (radians) keep the Euclidean metric.

    Args:
        y0: (V·9,) camera encodings (translation 3, quaternion 4, field of view 2 per view, see
            ``taskgeom.evaluate.tasks.pose_encoding``).

    Returns:
        L (V·9, V·9).

    Raises:
        ValueError: y0 is not a vector of V·9 entries.
    """
    if y0.ndim != 1 or y0.numel() % 9:
        raise ValueError(f"so3 output metric: expects (V·9,) camera encodings, got shape {tuple(y0.shape)}")
    blocks = []
    for v in y0.detach().reshape(-1, 9):
        q = v[3:7]
        qh = q / q.norm().clamp_min(1e-12)
        rot = 2.0 * (torch.eye(4, dtype=y0.dtype, device=y0.device) - torch.outer(qh, qh)) / q.norm().clamp_min(1e-12)
        blocks.append(torch.block_diag(torch.eye(3, dtype=y0.dtype, device=y0.device), rot,
                                       torch.eye(2, dtype=y0.dtype, device=y0.device)))
    return torch.block_diag(*blocks)
