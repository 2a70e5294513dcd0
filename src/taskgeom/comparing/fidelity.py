"""How close a patched model's output stays to the unpatched model's, per image, in the decoder's
own terms (docs/patch.md, "The table").

- ``logits`` (a classifier): ``top1``, 1 where the patched model's top class is the unpatched
  one's, else 0 (higher is better); ``kl``, KL(p ‖ q) in nats of the unpatched softmax p from the
  patched one q (lower is better; the primary measure).
- ``cls`` and ``linear`` (an embedding): ``cosine`` between the two outputs (higher is better);
  ``degradation`` = 100·(1 − cosine), the paper's CLS degradation ×100 (lower is better; primary).
- ``depth`` (a dense map): ``silog`` = 100·SILog of the patched depth against the unpatched one
  (``evaluate.tasks.silog``, λ = 0.85: the pipeline's additional SILog ×100; lower is better;
  primary); ``delta1``, the share of pixels whose ratio max(p/u, u/p) < 1.25 (higher is better).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F_
from torch import Tensor

from taskgeom.evaluate.tasks import silog


@dataclass(frozen=True)
class Measure:
    """One fidelity measure.

    Attributes:
        name: its column name.
        lower_is_better: whether a smaller value is closer to the unpatched model.
        definition: what it is, in words.
    """

    name: str
    lower_is_better: bool
    definition: str


MEASURES: dict[str, tuple[Measure, ...]] = {
    "logits": (Measure("kl", True, "KL(p_unpatched || p_patched) of the softmax outputs, nats"),
               Measure("top1", False, "1 if the patched top-1 class is the unpatched one, else 0")),
    "cls": (Measure("degradation", True, "100 * (1 - cos(y_patched, y_unpatched)) of the embeddings"),
            Measure("cosine", False, "cos(y_patched, y_unpatched) of the embeddings")),
    "depth": (Measure("silog", True, "100 * SILog (lambda 0.85) of the patched depth against the unpatched depth"),
              Measure("delta1", False, "share of pixels with max(patched/unpatched, unpatched/patched) < 1.25")),
}
MEASURES["linear"] = MEASURES["cls"]


def measures(decoder: str) -> tuple[Measure, ...]:
    """The measures of ``decoder``'s outputs, the primary one first.

    Args:
        decoder: logits, cls, linear or depth.

    Returns:
        Its Measures.

    Raises:
        ValueError: another decoder.
    """
    if decoder not in MEASURES:
        raise ValueError(f"decoder {decoder!r}: compare measures {', '.join(MEASURES)}")
    return MEASURES[decoder]


def fidelity(decoder: str, full: Tensor, patched: Tensor) -> dict[str, np.ndarray]:
    """Each measure of ``decoder`` per image (module docstring).

    Args:
        decoder: logits, cls, linear or depth.
        full: (B, …) the unpatched model's outputs.
        patched: (B, …) the patched model's outputs for the same images.

    Returns:
        measure name -> (B,) float64 values.
    """
    full, patched = full.double().flatten(1), patched.double().flatten(1)
    if decoder == "logits":
        log_p, log_q = F_.log_softmax(full, dim=1), F_.log_softmax(patched, dim=1)
        out = {"kl": (log_p.exp() * (log_p - log_q)).sum(1).clamp_min(0.0),
               "top1": (full.argmax(1) == patched.argmax(1)).double()}
    elif decoder == "depth":
        p, u = patched.clamp_min(1e-6), full.clamp_min(1e-6)
        out = {"silog": 100.0 * silog(patched, full), "delta1": (torch.maximum(p / u, u / p) < 1.25).double().mean(1)}
    else:
        cosine = F_.cosine_similarity(full, patched, dim=1)
        out = {"degradation": 100.0 * (1.0 - cosine), "cosine": cosine}
    names = [m.name for m in measures(decoder)]
    return {name: out[name].cpu().numpy() for name in names}
