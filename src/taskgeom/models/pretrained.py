"""The paper's models in the zoo: import local weights into the zoo's format
(safetensors + JSON config) and evaluate them zero-shot on the synthetic world.

Metrics match the tiny zoo's where the task allows: k-NN top-1 accuracy (k = 5,
cosine, the training split as gallery) from the CLS embedding; depth AbsRel and δ1
after per-image median scaling (the paper's depth models are not metric on this
world); camera rotation / translation error for a camera head.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F_
from torch import Tensor, nn

from taskgeom.data.splits import read_world, to_input
from taskgeom.evaluate.tasks import camera_errors, depth_metrics, pose_encoding, valid_depth
from taskgeom.models.adapters import PAPER_MODELS, load_paper_model
from taskgeom.models.host import run_decoder

KNN = 5


def resize(images: Tensor, size: int) -> Tensor:
    """(..., 3, H, W) -> (..., 3, size, size), bilinear."""
    lead = images.shape[:-3]
    out = F_.interpolate(images.flatten(0, len(lead) - 1), size=(size, size), mode="bilinear", align_corners=False)
    return out.reshape(*lead, 3, size, size)


@torch.no_grad()
def decoder_outputs(host: nn.Module, decoder: str, rgb: np.ndarray, size: int, batch: int, device: str) -> Tensor:
    outs = []
    for start in range(0, len(rgb), batch):
        x = resize(to_input(rgb[start:start + batch]), size).to(device)
        outs.append(run_decoder(host, decoder, x).cpu())
    return torch.cat(outs)


def knn_accuracy(train_emb: Tensor, train_labels: np.ndarray, test_emb: Tensor, test_labels: np.ndarray) -> float:
    sims = F_.normalize(test_emb, dim=1) @ F_.normalize(train_emb, dim=1).T
    nearest = sims.topk(min(KNN, len(train_labels)), dim=1).indices.numpy()
    votes = np.apply_along_axis(lambda row: np.bincount(row, minlength=int(train_labels.max()) + 1).argmax(), 1,
                                train_labels[nearest])
    return float((votes == test_labels).mean())


def median_scaled(pred: Tensor, target: Tensor, max_depth: float) -> Tensor:
    """Scale each predicted depth map so its median over valid pixels matches the target's."""
    mask = valid_depth(target, max_depth)
    scale = torch.stack([t[m].median() / p[m].clamp_min(1e-6).median() for p, t, m in zip(pred, target, mask)])
    return pred * scale.view(-1, *[1] * (pred.ndim - 1))


def evaluate(inputs: dict[str, Path], host: nn.Module, cfg: dict, max_depth: float, device: str) -> dict[str, float]:
    """Zero-shot metrics of ``host`` on the world splits ``inputs`` (train, test, mv_test)."""
    size, batch = cfg["img_size"], cfg["batch_size"]
    metrics: dict[str, float] = {}
    if "cls" in host.decoders:
        train = read_world(inputs["train"], keys=("rgb", "label"))
        test = read_world(inputs["test"], keys=("rgb", "label"))
        emb = [decoder_outputs(host, "cls", d["rgb"], size, batch, device) for d in (train, test)]
        majority = np.bincount(train["label"]).argmax()
        metrics |= {"knn_accuracy": knn_accuracy(emb[0], train["label"], emb[1], test["label"]),
                    "baseline_knn_accuracy": float((test["label"] == majority).mean())}
    if "depth" in host.decoders and "camera" not in host.decoders:
        test = read_world(inputs["test"], keys=("rgb", "depth"))
        target = torch.as_tensor(test["depth"])
        pred = decoder_outputs(host, "depth", test["rgb"], size, batch, device).view(len(target), size, size)
        pred = F_.interpolate(pred.unsqueeze(1), size=target.shape[-2:], mode="bilinear").squeeze(1)
        flat = torch.full_like(target, float(target[valid_depth(target, max_depth)].median()))
        ours = depth_metrics(median_scaled(pred, target, max_depth), target, max_depth)
        base = depth_metrics(flat, target, max_depth)
        metrics |= ours | {f"baseline_{k}": v for k, v in base.items()}
    if "camera" in host.decoders:
        test = read_world(inputs["mv_test"], keys=("rgb", "K", "cam_to_world"))
        target = pose_encoding(test["cam_to_world"], test["K"], test["rgb"].shape[-2])
        pred = decoder_outputs(host, "camera", test["rgb"], size, batch, device).view(*target.shape).numpy()
        identity = np.zeros_like(target)
        identity[..., 6] = 1.0  # the identity rotation, zero translation
        identity[..., 7:] = target[..., 7:]
        metrics |= camera_errors(pred, target) | {f"baseline_{k}": v for k, v in
                                                   camera_errors(identity, target).items()}
    return metrics


def load(cfg: dict, device: str) -> nn.Module:
    """The paper model named by a pretrained zoo entry, from its local weights (clear error if absent)."""
    return load_paper_model(cfg["adapter"], cfg["path"], **cfg.get("overrides", {})).to(device)


def architecture(cfg: dict) -> dict:
    return {"kind": "pretrained", "adapter": cfg["adapter"], "overrides": cfg.get("overrides", {}),
            "img_size": cfg["img_size"], "source": PAPER_MODELS[cfg["adapter"]].title}
