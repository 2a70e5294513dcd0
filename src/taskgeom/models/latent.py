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
    """How the decoder-input tokens X (B, T, D) are laid out: T = layers · views · (prefix + rows·cols)."""

    layers: int
    views: int
    prefix: int
    rows: int
    cols: int

    @property
    def tokens(self) -> int:
        return self.layers * self.views * (self.prefix + self.rows * self.cols)


def token_layout(ctx, layers: int) -> TokenLayout:
    """The layout of a host's embedding ctx (zoo hosts carry a ``Grid``; VGGT a patch offset)."""
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
        return (X - self.mean) / self.std

    def _split(self, X: Tensor) -> tuple[Tensor, Tensor]:
        """(B, T, D) -> prefix (B, L, V, P, D), patch maps (B·V, L·D, rows, cols)."""
        lay, b = self.layout, X.shape[0]
        X = X.reshape(b, lay.layers, lay.views, lay.prefix + lay.rows * lay.cols, self.dim)
        patches = X[:, :, :, lay.prefix:].permute(0, 2, 1, 4, 3)          # (B, V, L, D, rows·cols)
        return X[:, :, :, :lay.prefix], patches.reshape(b * lay.views, lay.layers * self.dim, lay.rows, lay.cols)

    def encode(self, X: Tensor) -> tuple[Tensor, Tensor]:
        """X (B, T, D) -> posterior mean and log-variance (B, K, d)."""
        _, maps = self._split(self.standardize(X))
        h = self.encoder(maps)                                              # (B·V, 2d, r', c')
        h = h.flatten(2).transpose(1, 2).reshape(X.shape[0], self.registers, 2 * self.token_dim)
        mu, logvar = h.chunk(2, dim=-1)
        return mu, logvar.clamp(-12.0, 8.0)

    def decode(self, z: Tensor) -> Tensor:
        """z (B, K, d) -> reconstructed features (B, T, D), in the features' own units."""
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
    """images -> (the states of layers ``reads`` laid end to end (B, T, D), the embedding ctx)."""
    states, ctx = forward_states(base, images, max(reads))
    return torch.cat([states[i] for i in reads], dim=1), ctx


class LatentHost(nn.Module):
    """A frozen host whose ``decoder`` reads its layers through the VAE.

    ``features(images)`` -> (X (B, T, D) the read layers' states laid end to end, ctx);
    ``decode_features(X, ctx)`` and ``decode_latent(z, ctx)`` -> decoder output (B, M)."""

    def __init__(self, base: nn.Module, decoder: str, vae: FeatureVAE):
        super().__init__()
        self.base, self.vae, self.decoder = base, vae, decoder
        self.decoders = (decoder,)
        self.reads = tuple(base.decoder_layers(decoder))

    def features(self, images: Tensor) -> tuple[Tensor, object]:
        return decoder_features(self.base, self.reads, images)

    def decode_features(self, X: Tensor, ctx) -> Tensor:
        parts = X.split(X.shape[1] // len(self.reads), dim=1)
        return self.base.decode(self.decoder, dict(zip(self.reads, parts)), ctx).flatten(1)

    def decode_latent(self, z: Tensor, ctx) -> Tensor:
        return self.decode_features(self.vae.decode(z), ctx)


def build_latent_host(base: nn.Module, decoder: str, config: Mapping) -> LatentHost:
    vae = FeatureVAE(TokenLayout(**config["layout"]), config["dim"], config["token_dim"], config["width"],
                     config["stride"])
    return LatentHost(base, decoder, vae)
