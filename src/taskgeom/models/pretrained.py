"""The paper's models in the zoo: import local weights into the zoo's format
(safetensors + JSON config) and evaluate them zero-shot on the entry's sources, through the
host's own preprocessing.

Metrics match the tiny zoo's where the task allows: k-NN top-1 accuracy (k = 5, cosine, the
train source as gallery) from the CLS embedding, against the train source's majority class;
depth AbsRel and δ1 over valid pixels after per-image median scaling (the paper's depth
models are not metric on every data set), against a flat map at the median over the train
source's images of each image's median valid depth; camera rotation / translation error of
a camera head on a world multi-view source (the one kind with poses), against the identity
pose. Depth metrics are pixel-weighted means accumulated batch by batch (nothing holds a
whole split).
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import torch
import torch.nn.functional as F_
from torch import Tensor, nn

from taskgeom.data.batches import Batch, InputDigest, batches
from taskgeom.data.sources import Source, SourceError, world_arrays
from taskgeom.evaluate.tasks import camera_errors, depth_metrics, median_scaled, pose_encoding, valid_depth
from taskgeom.models.adapters import PAPER_MODELS, load_paper_model
from taskgeom.models.host import run_decoder
from taskgeom.models.preprocess import Preprocess

KNN = 5


@torch.no_grad()
def decoded(host: nn.Module, decoder: str, source: Source, prep: Preprocess, batch: int, device: str,
            digest: InputDigest, depth: bool = False) -> Iterator[tuple[Batch, Tensor]]:
    """Each preprocessed batch of ``source`` (seen by ``digest``) with the decoder's output.

    Args:
        host: the model.
        decoder: one of its decoders.
        source: the items, in order.
        prep: the host's preprocessing.
        batch: items per batch.
        device: where the host runs.
        digest: updated with every input.
        depth: read ground-truth depth too.

    Yields:
        The Batch and the decoder's output (B, ...) on the CPU.
    """
    for b in batches(source, prep.image, batch, prep.depth if depth else None):
        digest.update(b.x)
        yield b, run_decoder(host, decoder, b.x.to(device)).cpu()


def knn_accuracy(train_emb: Tensor, train_labels: np.ndarray, test_emb: Tensor, test_labels: np.ndarray) -> float:
    """k-NN top-1 accuracy (k = KNN, cosine similarity, majority vote, ties to the lower label).

    Args:
        train_emb: (N, C) gallery embeddings.
        train_labels: (N,) their labels, ≥ 0.
        test_emb: (Q, C) query embeddings.
        test_labels: (Q,) their labels.

    Returns:
        The share of queries voted their label.
    """
    sims = F_.normalize(test_emb, dim=1) @ F_.normalize(train_emb, dim=1).T
    nearest = sims.topk(min(KNN, len(train_labels)), dim=1).indices.numpy()
    votes = np.apply_along_axis(lambda row: np.bincount(row, minlength=int(train_labels.max()) + 1).argmax(), 1,
                                train_labels[nearest])
    return float((votes == test_labels).mean())


def need_depth(source: Source, role: str) -> float:
    """The source's depth cap; refused, naming the role, for a source without ground truth.

    Args:
        source: the source.
        role: "train" or "test", for the message.

    Returns:
        Its max_depth, metres.

    Raises:
        SourceError: the source has no ground-truth depth.
    """
    if not source.has_depth or source.max_depth is None:
        raise SourceError(f"zoo: sources.{role} {source.name!r} has no ground-truth depth (a depth model needs it)")
    return source.max_depth


def as_maps(pred: Tensor, target: Tensor) -> Tensor:
    """Decoder depth (B, S·S) or (B, S, S) -> the target's (B, H, W), bilinear where sizes differ.

    Args:
        pred: (B, S·S) or (B, S, S), square maps.
        target: (B, H, W).

    Returns:
        (B, H, W).
    """
    side = int(round(pred[0].numel() ** 0.5))
    pred = pred.reshape(len(pred), side, side)
    if pred.shape[-2:] != target.shape[-2:]:
        pred = F_.interpolate(pred.unsqueeze(1), size=target.shape[-2:], mode="bilinear").squeeze(1)
    return pred


def depth_evaluation(host: nn.Module, train: Source, test: Source, prep: Preprocess, batch: int, device: str,
                     digest: InputDigest) -> dict[str, float]:
    """AbsRel and δ1 after per-image median scaling, and those of the flat-map baseline (module
    docstring), pixel-weighted over the test source's valid pixels.

    Args:
        host: the model, with a ``depth`` decoder.
        train: its items give the flat map's depth.
        test: the evaluated items.
        prep: the host's preprocessing.
        batch: items per batch.
        device: where the host runs.
        digest: updated with every test input.

    Returns:
        abs_rel, delta1 and their ``baseline_`` twins.
    """
    train_cap, cap = need_depth(train, "train"), need_depth(test, "test")
    medians = [float(d[valid_depth(d, train_cap)].median())
               for b in batches(train, prep.image, batch, prep.depth) for d in b.depth]
    flat = float(np.median(medians))
    sums: dict[str, float] = {}
    for b, pred in decoded(host, "depth", test, prep, batch, device, digest, depth=True):
        target = b.depth
        weight = float(valid_depth(target, cap).sum())
        ours = depth_metrics(median_scaled(as_maps(pred, target), target, cap), target, cap)
        base = depth_metrics(torch.full_like(target, flat), target, cap)
        for k, v in (ours | {f"baseline_{k}": v for k, v in base.items()}).items():
            sums[k] = sums.get(k, 0.0) + v * weight
        sums["pixels"] = sums.get("pixels", 0.0) + weight
    pixels = sums.pop("pixels")
    return {k: v / pixels for k, v in sums.items()}


def camera_evaluation(host: nn.Module, test: Source, prep: Preprocess, batch: int, device: str,
                      digest: InputDigest) -> dict[str, float]:
    """Camera rotation and translation errors on a world multi-view source, and the identity pose's.

    Args:
        host: the model, with a ``camera`` decoder.
        test: a world source of view groups.
        prep: the host's preprocessing.
        batch: items per batch.
        device: where the host runs.
        digest: updated with every input.

    Returns:
        rot_err_deg, trans_err_m and their ``baseline_`` twins.
    """
    poses = world_arrays(test, ("K", "cam_to_world"), "zoo: sources.test (a camera head needs the world's poses)")
    target = pose_encoding(poses["cam_to_world"], poses["K"], test[0].image.shape[-2])
    pred = torch.cat([out for _, out in decoded(host, "camera", test, prep, batch, device, digest)])
    pred = pred.view(*target.shape).numpy()
    identity = np.zeros_like(target)
    identity[..., 6] = 1.0  # the identity rotation, zero translation
    identity[..., 7:] = target[..., 7:]
    return camera_errors(pred, target) | {f"baseline_{k}": v for k, v in camera_errors(identity, target).items()}


def evaluate(host: nn.Module, train: Source, test: Source, prep: Preprocess, batch: int, device: str,
             digest: InputDigest) -> dict[str, float]:
    """Zero-shot metrics of ``host`` on the ``test`` source (``train``: the k-NN gallery and the
    depth baseline), every test input through ``prep`` and ``digest``.

    Args:
        host: the model.
        train: the gallery / baseline source.
        test: the evaluated source.
        prep: the host's preprocessing.
        batch: items per batch.
        device: where the host runs.
        digest: updated with every test input.

    Returns:
        The camera metrics for a camera host; else knn_accuracy (cls decoder) and the depth
        metrics (depth decoder), each with its ``baseline_`` twin.

    Raises:
        SourceError: unlabelled sources for k-NN, or no ground-truth depth for a depth model.
    """
    if "camera" in host.decoders:
        return camera_evaluation(host, test, prep, batch, device, digest)
    metrics: dict[str, float] = {}
    if "cls" in host.decoders:
        bank = [(b.labels, out) for b, out in decoded(host, "cls", train, prep, batch, device, InputDigest())]
        seen = [(b.labels, out) for b, out in decoded(host, "cls", test, prep, batch, device, digest)]
        (train_labels, train_emb), (test_labels, test_emb) = [
            (torch.cat([lab for lab, _ in part]).numpy(), torch.cat([o for _, o in part])) for part in (bank, seen)]
        if (train_labels < 0).any() or (test_labels < 0).any():
            raise SourceError(f"zoo: k-NN accuracy needs labelled sources ({train.name!r}, {test.name!r})")
        majority = np.bincount(train_labels).argmax()
        metrics |= {"knn_accuracy": knn_accuracy(train_emb, train_labels, test_emb, test_labels),
                    "baseline_knn_accuracy": float((test_labels == majority).mean())}
    if "depth" in host.decoders:
        metrics |= depth_evaluation(host, train, test, prep, batch, device, digest)
    return metrics


def load(cfg: dict, device: str) -> nn.Module:
    """The paper model named by a pretrained zoo entry, from its local weights (clear error if absent).

    Args:
        cfg: the zoo entry (``adapter``, ``path``, optional ``overrides``).
        device: where the model goes.

    Returns:
        The frozen host.
    """
    return load_paper_model(cfg["adapter"], cfg["path"], **cfg.get("overrides", {})).to(device)


def architecture(cfg: dict, host: nn.Module) -> dict:
    """What rebuilds ``host``, loaded from the entry ``cfg``: the overrides given, and those of the
    architecture the checkpoint's own config chose (a Depth-Anything-V2 of another size).

    Args:
        cfg: the zoo entry.
        host: the host built from its checkpoint.

    Returns:
        kind "pretrained", adapter, overrides, img_size and the model's title as source.
    """
    spec = PAPER_MODELS[cfg["adapter"]]
    overrides = {**cfg.get("overrides", {}), **(spec.loaded(host) if spec.loaded else {})}
    return {"kind": "pretrained", "adapter": cfg["adapter"], "overrides": overrides,
            "img_size": cfg["img_size"], "source": spec.title}
