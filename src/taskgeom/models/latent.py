"""The VAE bottleneck host (paper §6): when a dense decoder's input features have a spectrum
too spread for a rank-r metric, encode them into a few register tokens z (K, d) and decode them
back for the frozen task head. Every path to the output passes through z, so the latent probe's
Jacobian (M, K·d) has rank ≤ K·d. The registers are laid on a coarse grid over each view's patch
tokens (see ``FeatureVAE``).

``LatentHost`` is the frozen host with the VAE inserted before the decoder; its probe at z is
``taskgeom.probes.LatentProbeMap``, and the VAE's training objective is ``taskgeom.metric.vae``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

import torch
from torch import Tensor, nn

from taskgeom.models.host import forward_states
from taskgeom.models.resize import resize_bilinear
from taskgeom.models.vit import Grid


@dataclass(frozen=True)
class TokenLayout:
    """How the decoder-input tokens X (B, T, D) are laid out: T = layers · views · (prefix + rows·cols).

    Attributes:
        layers: L, the read layers, laid end to end.
        views: V per layer.
        prefix: tokens before each view's patches.
        rows: patch rows.
        cols: patch columns.
    """

    layers: int
    views: int
    prefix: int
    rows: int
    cols: int

    @property
    def tokens(self) -> int:
        """T = layers · views · (prefix + rows·cols)."""
        return self.layers * self.views * (self.prefix + self.rows * self.cols)


def token_layout(ctx, layers: int) -> TokenLayout:
    """The layout of a host's embedding ctx (zoo hosts carry a ``Grid``; VGGT a patch offset).

    Args:
        ctx: the context ``embed`` returned.
        layers: the read layers' count L.

    Returns:
        The TokenLayout.
    """
    views = getattr(ctx, "views", 1)
    grid = ctx if isinstance(ctx, Grid) else getattr(ctx, "grid", None)
    if grid is not None:
        return TokenLayout(layers, views, grid.prefix, grid.rows, grid.cols)
    patches = ctx.tokens_per_view - ctx.patch_start
    rows = round(math.sqrt(patches * ctx.size[0] / ctx.size[1]))
    return TokenLayout(layers, views, ctx.patch_start, rows, patches // rows)


class FeatureVAE(nn.Module):
    """Features X (B, T, D) <-> registers z (B, K, d), K = views · ⌈rows/s⌉ · ⌈cols/s⌉.

    Each view's patch tokens, all read layers stacked as channels (L·D, rows, cols), are encoded by
    a small convolutional net with stride s into a coarse grid of registers, each a d-vector
    (s = 2 on an 8×8 grid and two views: 32 registers, the paper's count). The decoder upsamples
    them back to every read layer's patch map. Prefix tokens (CLS, camera, registers of the
    backbone) are not encoded — the dense heads this serves drop them — and decode to their
    training mean. Features are standardised per token and channel with the training statistics
    (buffers ``mean``, ``std`` (T, D)); the networks work in standardised units.
    """

    def __init__(self, layout: TokenLayout, dim: int, token_dim: int, width: int = 64, stride: int = 2):
        """Encoder and decoder convolutions, and identity statistics until ``mean``, ``std`` are set.

        Args:
            layout: the token layout of X.
            dim: D.
            token_dim: d, each register's width.
            width: the convolutions' width.
            stride: s, the encoder's stride.
        """
        super().__init__()
        self.layout, self.dim, self.token_dim, self.stride = layout, dim, token_dim, stride
        self.latent_rows, self.latent_cols = -(-layout.rows // stride), -(-layout.cols // stride)
        self.registers = layout.views * self.latent_rows * self.latent_cols
        self.register_buffer("mean", torch.zeros(layout.tokens, dim))
        self.register_buffer("std", torch.ones(layout.tokens, dim))
        channels = layout.layers * dim
        self.encoder = nn.Sequential(
            nn.Conv2d(channels, width, 1), nn.GELU(),
            nn.Conv2d(width, width, 3, stride=stride, padding=1), nn.GELU(),
            nn.Conv2d(width, width, 3, padding=1), nn.GELU(),
            nn.Conv2d(width, 2 * token_dim, 1))
        self.from_latent = nn.Conv2d(token_dim, width, 1)
        self.decoder = nn.Sequential(
            nn.Conv2d(width, width, 3, padding=1), nn.GELU(),
            nn.Conv2d(width, width, 3, padding=1), nn.GELU(),
            nn.Conv2d(width, channels, 1))

    def standardize(self, X: Tensor) -> Tensor:
        """Per token and channel, (X − mean) / std.

        Args:
            X: (B, T, D).

        Returns:
            (B, T, D) standardised.
        """
        return (X - self.mean) / self.std

    def _split(self, X: Tensor) -> tuple[Tensor, Tensor]:
        """(B, T, D) -> prefix (B, L, V, P, D), patch maps (B·V, L·D, rows, cols)."""
        lay, b = self.layout, X.shape[0]
        X = X.reshape(b, lay.layers, lay.views, lay.prefix + lay.rows * lay.cols, self.dim)
        patches = X[:, :, :, lay.prefix:].permute(0, 2, 1, 4, 3)          # (B, V, L, D, rows·cols)
        return X[:, :, :, :lay.prefix], patches.reshape(b * lay.views, lay.layers * self.dim, lay.rows, lay.cols)

    def encode(self, X: Tensor) -> tuple[Tensor, Tensor]:
        """The posterior of the registers.

        Args:
            X: (B, T, D) features.

        Returns:
            mean and log-variance (clamped to [−12, 8]), each (B, K, d).
        """
        _, maps = self._split(self.standardize(X))
        h = self.encoder(maps)                                              # (B·V, 2d, r', c')
        h = h.flatten(2).transpose(1, 2).reshape(X.shape[0], self.registers, 2 * self.token_dim)
        mu, logvar = h.chunk(2, dim=-1)
        return mu, logvar.clamp(-12.0, 8.0)

    def decode(self, z: Tensor) -> Tensor:
        """Features from registers, in the features' own units (prefix tokens at their training mean).

        Args:
            z: (B, K, d).

        Returns:
            (B, T, D).
        """
        lay, b = self.layout, z.shape[0]
        grid = z.reshape(b * lay.views, self.latent_rows * self.latent_cols, self.token_dim).transpose(1, 2)
        h = self.from_latent(grid.reshape(b * lay.views, self.token_dim, self.latent_rows, self.latent_cols))
        h = resize_bilinear(h, (lay.rows, lay.cols), align_corners=False)
        maps = self.decoder(h).reshape(b, lay.views, lay.layers, self.dim, lay.rows * lay.cols)
        patches = maps.permute(0, 2, 1, 4, 3)                               # (B, L, V, rows·cols, D)
        prefix = torch.zeros(b, lay.layers, lay.views, lay.prefix, self.dim, dtype=z.dtype, device=z.device)
        Xs = torch.cat([prefix, patches], dim=3).reshape(b, lay.tokens, self.dim)
        return Xs * self.std + self.mean


def decoder_features(base: nn.Module, reads: tuple[int, ...], images: Tensor) -> tuple[Tensor, object]:
    """The states of the read layers, laid end to end.

    Args:
        base: the host.
        reads: the layers its decoder reads.
        images: (B, 3, H, W), or (B, V, 3, H, W) for a multi-view host.

    Returns:
        X (B, T, D) and the embedding ctx.
    """
    states, ctx = forward_states(base, images, max(reads))
    return torch.cat([states[i] for i in reads], dim=1), ctx


class LatentHost(nn.Module):
    """A frozen host whose ``decoder`` reads its layers through the VAE.

    ``features(images)`` -> (X (B, T, D) the read layers' states laid end to end, ctx);
    ``decode_features(X, ctx)`` and ``decode_latent(z, ctx)`` -> decoder output (B, M)."""

    def __init__(self, base: nn.Module, decoder: str, vae: FeatureVAE):
        """Insert ``vae`` before ``decoder`` of ``base``.

        Args:
            base: the frozen host.
            decoder: the decoder the VAE serves.
            vae: the VAE over that decoder's read layers.
        """
        super().__init__()
        self.base, self.vae, self.decoder = base, vae, decoder
        self.decoders = (decoder,)
        self.reads = tuple(base.decoder_layers(decoder))

    def features(self, images: Tensor) -> tuple[Tensor, object]:
        """The read layers' states laid end to end (``decoder_features``).

        Args:
            images: (B, 3, H, W), or (B, V, 3, H, W).

        Returns:
            X (B, T, D) and ctx.
        """
        return decoder_features(self.base, self.reads, images)

    def decode_features(self, X: Tensor, ctx) -> Tensor:
        """The base's decoder on features X, split back into its read layers.

        Args:
            X: (B, T, D).
            ctx: the embedding ctx.

        Returns:
            (B, M), flattened.
        """
        parts = X.split(X.shape[1] // len(self.reads), dim=1)
        return self.base.decode(self.decoder, dict(zip(self.reads, parts)), ctx).flatten(1)

    def decode_latent(self, z: Tensor, ctx) -> Tensor:
        """The decoder output through the VAE's decoder.

        Args:
            z: (B, K, d) registers.
            ctx: the embedding ctx.

        Returns:
            (B, M).
        """
        return self.decode_features(self.vae.decode(z), ctx)


def build_latent_host(base: nn.Module, decoder: str, config: Mapping) -> LatentHost:
    """A LatentHost with a fresh VAE from its config.

    Args:
        base: the frozen host.
        decoder: the decoder the VAE serves.
        config: layout (TokenLayout's fields), dim, token_dim, width and stride.

    Returns:
        The LatentHost.
    """
    vae = FeatureVAE(TokenLayout(**config["layout"]), config["dim"], config["token_dim"], config["width"],
                     config["stride"])
    return LatentHost(base, decoder, vae)
