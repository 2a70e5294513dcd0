"""The VAE bottleneck's training objective (paper §6): feature reconstruction, the frozen
decoder's output through the bottleneck, and a KL term that leaves unused latent directions
inert. The model is ``taskgeom.models.latent``.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F_
from torch import Tensor

from taskgeom.models.latent import LatentHost


def kl_divergence(mu: Tensor, logvar: Tensor) -> Tensor:
    """KL(q(z|X) ‖ N(0, I)) per item, summed over latent dims.

    Args:
        mu: (B, K, d) posterior means.
        logvar: (B, K, d) posterior log-variances.

    Returns:
        (B,) KL divergences.
    """
    return 0.5 * (mu.pow(2) + logvar.exp() - 1.0 - logvar).sum(dim=(1, 2))


def task_loss(pred: Tensor, reference: Tensor) -> Tensor:
    """Mean |log pred − log reference| of two positive dense outputs (clamped at 1e-6).

    Args:
        pred: (B, M) the output through the bottleneck.
        reference: (B, M) the frozen host's output.

    Returns:
        A scalar.
    """
    return (pred.clamp_min(1e-6).log() - reference.clamp_min(1e-6).log()).abs().mean()


def vae_loss(host: LatentHost, X: Tensor, ctx, reference: Tensor, beta: float, task_weight: float,
             generator: torch.Generator | None = None) -> tuple[Tensor, dict[str, float]]:
    """Feature reconstruction (standardised MSE) + task_weight · log-output L1 + beta · KL / (K·d).

    Args:
        host: the LatentHost whose ``vae`` is trained.
        X: (B, T, D) decoder-input features.
        ctx: the host's embedding context for the batch.
        reference: (B, M) the frozen host's output on the batch.
        beta: the KL weight.
        task_weight: the task-loss weight.
        generator: draws the reparameterisation noise.

    Returns:
        The scalar loss, and its terms recon, task and kl as floats.
    """
    vae = host.vae
    mu, logvar = vae.encode(X)
    noise = torch.randn(mu.shape, generator=generator, device=mu.device, dtype=mu.dtype)
    z = mu + (0.5 * logvar).exp() * noise
    Xhat = vae.decode(z)
    recon = F_.mse_loss(vae.standardize(Xhat), vae.standardize(X))
    task = task_loss(host.decode_features(Xhat, ctx), reference)
    kl = kl_divergence(mu, logvar).mean() / (vae.registers * vae.token_dim)
    loss = recon + task_weight * task + beta * kl
    return loss, {"recon": recon.item(), "task": task.item(), "kl": kl.item()}


def feature_statistics(X: Tensor) -> tuple[Tensor, Tensor]:
    """Per-(token, channel) mean and std (clamped at 1e-3) over a sample of training features.

    Args:
        X: (B, T, D) features.

    Returns:
        mean (T, D) and std (T, D).
    """
    mean = X.mean(dim=0)
    std = X.std(dim=0).clamp_min(1e-3)
    return mean, std
