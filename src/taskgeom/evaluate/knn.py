"""Weighted k-NN classification on embeddings (Wu et al., 2018; DINO's protocol): cosine
similarity to a labelled bank, the k nearest vote with weight exp(sim / T)."""

from __future__ import annotations

import torch
import torch.nn.functional as F_
from torch import Tensor


def knn_correct(bank: Tensor, bank_labels: Tensor, queries: Tensor, labels: Tensor, k: int = 20,
                temperature: float = 0.07, num_classes: int | None = None) -> Tensor:
    """Whether each query's weighted k-NN vote (in float64) picks its label.

    Args:
        bank: (Nb, C) labelled embeddings.
        bank_labels: (Nb,) integer labels.
        queries: (Nq, C) embeddings to classify.
        labels: (Nq,) their integer labels.
        k: neighbours that vote, at most Nb.
        temperature: T of the vote weight exp(sim / T).
        num_classes: classes; None for 1 + the largest label seen.

    Returns:
        (Nq,) bool, top-1 correct.

    Raises:
        ValueError: k exceeds the bank's size.
    """
    if k > bank.shape[0]:
        raise ValueError(f"k-NN: k = {k} exceeds the bank's {bank.shape[0]} embeddings")
    num_classes = num_classes or int(max(bank_labels.max(), labels.max())) + 1
    sim = F_.normalize(queries.double(), dim=1) @ F_.normalize(bank.double(), dim=1).T
    top, idx = sim.topk(k, dim=1)
    votes = torch.zeros(queries.shape[0], num_classes, dtype=torch.float64)
    votes.scatter_add_(1, bank_labels[idx], (top / temperature).exp())
    return votes.argmax(dim=1) == labels
