"""Weighted k-NN classification on embeddings (Wu et al., 2018; DINO's protocol): cosine
similarity to a labelled bank, the k nearest vote with weight exp(sim / T)."""

from __future__ import annotations

import torch
import torch.nn.functional as F_
from torch import Tensor


def knn_correct(bank: Tensor, bank_labels: Tensor, queries: Tensor, labels: Tensor, k: int = 20,
                temperature: float = 0.07, num_classes: int | None = None) -> Tensor:
    """bank (Nb, C), bank_labels (Nb,), queries (Nq, C), labels (Nq,) -> (Nq,) bool: top-1 correct."""
    if k > bank.shape[0]:
        raise ValueError(f"k-NN: k = {k} exceeds the bank's {bank.shape[0]} embeddings")
    num_classes = num_classes or int(max(bank_labels.max(), labels.max())) + 1
    sim = F_.normalize(queries.double(), dim=1) @ F_.normalize(bank.double(), dim=1).T
    top, idx = sim.topk(k, dim=1)
    votes = torch.zeros(queries.shape[0], num_classes, dtype=torch.float64)
    votes.scatter_add_(1, bank_labels[idx], (top / temperature).exp())
    return votes.argmax(dim=1) == labels
