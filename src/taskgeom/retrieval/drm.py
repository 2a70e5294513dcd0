"""The Decoder Retrieval Metric (DRM, paper App. K): a learned, feature-dependent rank-k pullback
seminorm that predicts how far apart two feature maps' decoder outputs are.

For feature maps F, F′ ∈ R^{N×D} of the same probe, with Δ = F′ − F,

    m_F(Δ)   = Σ_t w_t(F) ‖A Δ_t‖²                    (the rank-k metric at F)
    d(F, F′) = sqrt( ½ m_F(Δ) + ½ m_F′(Δ) )

w_t(F) = exp(s_t(F)) are per-token weights from an importance head, A ∈ R^{k×D} a learned
projection onto a rank-k subspace of the token space. d is the symmetrised first-order
approximation of the pullback length of the straight segment from F to F′ (the trapezoid rule
on its two ends): d(F, F) = 0, d(F, F′) = d(F′, F), and d grows linearly with the difference
(d(F, F + cΔ) scales with |c| when the weights are held). Since the metric moves with the
features, d need not satisfy the triangle inequality: it is a pseudometric in the retrieval sense
only.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from taskgeom.metric.head import ImportanceHead


class DecoderRetrievalMetric(nn.Module):
    """The Decoder Retrieval Metric: an importance head (per-token log weights) and a projection A.

    Attributes:
        head: the importance head whose scores s_t(F) give the token weights.
        A: (k, D) the learned projection.
        log_scale: log of d's unit, fitted by the regression; it scales every weight by
            exp(2·log_scale).
    """

    def __init__(self, head: ImportanceHead, dim: int, rank: int, seed: int = 0):
        """A DRM with A's rows orthonormal and d's unit 1.

        Args:
            head: the importance head whose scores s_t(F) give the token weights.
            dim: D, the feature dimension.
            rank: k, the rank of the projection A (k, D), initialised with orthonormal rows.
            seed: seeds A's initialisation.
        """
        super().__init__()
        self.head = head
        g = torch.Generator().manual_seed(seed)
        A = torch.linalg.qr(torch.randn(dim, rank, generator=g)).Q.T      # orthonormal rows
        self.A = nn.Parameter(A.contiguous())
        self.log_scale = nn.Parameter(torch.zeros(()))                    # d's unit (fitted by regression)

    def embed(self, F: Tensor) -> tuple[Tensor, Tensor]:
        """Everything a distance needs from one side: the projections and the token weights.

        Args:
            F: (B, N, D) feature maps.

        Returns:
            P = F Aᵀ (B, N, k) and w (B, N) = exp(s_t(F) + 2·log_scale).
        """
        return F @ self.A.T, (self.head(F) + 2.0 * self.log_scale).exp()

    def forward(self, F: Tensor, G: Tensor) -> Tensor:
        """Paired distances d(F_b, G_b).

        Args:
            F: (B, N, D) feature maps.
            G: (B, N, D) feature maps of the same probe.

        Returns:
            (B,) distances.
        """
        (P, w), (Q, v) = self.embed(F), self.embed(G)
        return pair_distance(P, w, Q, v)


def load_drm(weights, config_path) -> DecoderRetrievalMetric:
    """A trained DRM from the ``retrieval`` stage's checkpoint.

    Args:
        weights: the safetensors file.
        config_path: the JSON config beside it (its ``architecture``).

    Returns:
        The DecoderRetrievalMetric, in eval mode.

    Raises:
        FileNotFoundError: either file is missing.
    """
    from pathlib import Path

    from taskgeom.artifacts import checkpoints

    rerun = "rerun the retrieval stage"
    meta = checkpoints.read_config(Path(config_path), rerun)
    cfg = meta["architecture"]
    head = {k: v for k, v in cfg["head"].items() if k != "kind"}
    model = DecoderRetrievalMetric(ImportanceHead(**head), cfg["dim"], cfg["rank"])
    model.load_state_dict(checkpoints.read_weights(Path(weights), meta, rerun))
    return model.eval()


def pair_distance(P: Tensor, w: Tensor, Q: Tensor, v: Tensor) -> Tensor:
    """d for paired items, d_b = sqrt(½ Σ_t (w_t + v_t) ‖q_t − p_t‖²).

    Args:
        P: (B, N, k) projections of the first items.
        w: (B, N) their token weights.
        Q: (B, N, k) projections of the second items.
        v: (B, N) their token weights.

    Returns:
        (B,) distances.
    """
    sq = (Q - P).pow(2).sum(-1)                                            # (B, N) ‖A Δ_t‖²
    return (0.5 * ((w + v) * sq).sum(-1)).clamp_min(0.0).sqrt()


def cross_distance(P: Tensor, w: Tensor, Q: Tensor, v: Tensor) -> Tensor:
    """d between every query and every gallery item, as matrix products (no loop over pairs).

    Σ_t ½(w_t + v_t) ‖q_t − p_t‖² expands into Σ_t w_t‖q_t‖², Σ_t w_t‖p_t‖², Σ_t v_t‖q_t‖²,
    Σ_t v_t‖p_t‖² and the cross terms Σ_t (w_t + v_t) ⟨p_t, q_t⟩, each a (Nq, ·) @ (·, Ng) product.

    Args:
        P: (Nq, N, k) the queries' projections.
        w: (Nq, N) their token weights.
        Q: (Ng, N, k) the gallery's projections.
        v: (Ng, N) its token weights.

    Returns:
        (Nq, Ng) distances.
    """
    a_p, a_q = P.pow(2).sum(-1), Q.pow(2).sum(-1)                          # (Nq, N), (Ng, N)
    own_p = (w * a_p).sum(-1, keepdim=True)                                # Σ w‖p‖²   (Nq, 1)
    own_q = (v * a_q).sum(-1)[None]                                        # Σ v‖q‖²   (1, Ng)
    mixed = w @ a_q.T + a_p @ v.T                                          # Σ w‖q‖² + Σ v‖p‖²
    cross = (w[..., None] * P).flatten(1) @ Q.flatten(1).T + P.flatten(1) @ (v[..., None] * Q).flatten(1).T
    return (0.5 * (own_p + own_q + mixed - 2.0 * cross)).clamp_min(0.0).sqrt()


def l2_distance(F: Tensor, G: Tensor) -> Tensor:
    """The L2 baseline: Euclidean distance of the flattened feature maps.

    Args:
        F: (Nq, N, D) query features.
        G: (Ng, N, D) gallery features.

    Returns:
        (Nq, Ng) distances.
    """
    return torch.cdist(F.flatten(1)[None], G.flatten(1)[None])[0]


def cosine_distance(F: Tensor, G: Tensor) -> Tensor:
    """The cosine baseline: 1 − the cosine of the flattened feature maps.

    Args:
        F: (Nq, N, D) query features.
        G: (Ng, N, D) gallery features.

    Returns:
        (Nq, Ng) distances.
    """
    f = nn.functional.normalize(F.flatten(1), dim=1)
    g = nn.functional.normalize(G.flatten(1), dim=1)
    return 1.0 - f @ g.T


def silog_matrix(log_a: Tensor, log_b: Tensor, lam: float = 0.85) -> Tensor:
    """Scale-invariant log distance between every pair of depth maps (the SILog of
    ``taskgeom.evaluate.tasks.silog``, symmetric in its arguments), the regression target.

    Args:
        log_a: (Na, P) log depths.
        log_b: (Nb, P) log depths.
        lam: SILog's λ.

    Returns:
        (Na, Nb) distances.
    """
    n = log_a.shape[1]
    mean_sq = (log_a.pow(2).sum(1)[:, None] + log_b.pow(2).sum(1)[None] - 2.0 * log_a @ log_b.T) / n
    mean = log_a.mean(1)[:, None] - log_b.mean(1)[None]
    return (mean_sq - lam * mean.pow(2)).clamp_min(0.0).sqrt()
