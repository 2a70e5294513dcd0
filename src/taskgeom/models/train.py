"""Training the tiny zoo: each task's held-out evaluation against a trivial baseline (its loss
is in ``models.losses``), the learning-rate schedule, the batch of each step, and the training
state that a resumed run restarts from (the loop itself is the ``zoo`` stage's)."""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from safetensors.torch import load_file, save_file
from torch import Tensor, nn

from taskgeom.artifacts.atomic import atomic_path
from taskgeom.data.splits import to_input
from taskgeom.data.world.camera import backproject, relative_pose
from taskgeom.data.world.scene import FAMILIES
from taskgeom.evaluate.tasks import camera_errors, depth_metrics, median_scaled, pose_encoding, valid_depth
from taskgeom.models.losses import cls_loss, dpt_loss, mv_loss, trunk_loss

EVAL_BATCH = 64
WARMUP = 0.05


@dataclass
class Task:
    """How one kind of zoo model is fed, trained and scored.

    Attributes:
        views: it reads view groups (a multi-view split).
        keys: the arrays read from the split.
        loss: (model, batch of tensors) -> scalar (``models.losses``).
        evaluate: (model, test arrays, train arrays, max_depth) -> metrics beside baselines.
        flip: horizontal-flip augmentation.
    """

    views: bool
    keys: tuple[str, ...]
    loss: Callable[[nn.Module, dict[str, Tensor]], Tensor]
    evaluate: Callable[[nn.Module, dict[str, np.ndarray], dict[str, np.ndarray], float], dict[str, float]]
    flip: bool


def batches(data: dict[str, np.ndarray], device: str, size: int = EVAL_BATCH):
    """Consecutive batches of a split's arrays, as tensors on ``device``.

    Args:
        data: name -> (n, ...) array.
        device: where the tensors go.
        size: items per batch.

    Yields:
        name -> (≤ size, ...) tensor.
    """
    n = len(next(iter(data.values())))
    for start in range(0, n, size):
        yield {k: torch.as_tensor(v[start:start + size]).to(device) for k, v in data.items()}


# --- classification (tiny-cls) -----------------------------------------------------------

@torch.no_grad()
def cls_eval(model, test, train, max_depth) -> dict[str, float]:
    """Top-1 accuracy, and the majority class's as the baseline.

    Args:
        model: the trained model (its device is used).
        test: the held-out split's arrays (rgb, label).
        train: the training split's arrays, for the baseline.
        max_depth: the far plane (``valid_depth``).

    Returns:
        accuracy and baseline_accuracy.
    """
    correct = sum(int((model(to_input(b["rgb"])).argmax(1) == b["label"]).sum())
                  for b in batches(test, next(model.parameters()).device.type))
    majority = np.bincount(train["label"]).argmax()
    return {"accuracy": correct / len(test["label"]), "baseline_accuracy": float((test["label"] == majority).mean())}


# --- depth (tiny-dpt) ----------------------------------------------------------------------

def mean_log_depth(depth: np.ndarray) -> Tensor:
    """The trivial baseline: the training set's per-pixel geometric-mean depth.

    Args:
        depth: (N, ...) positive depth maps.

    Returns:
        (...) exp of the mean log depth over the N maps, in ``depth``'s float dtype.
    """
    return torch.as_tensor(np.exp(np.log(depth).mean(axis=0)))


@torch.no_grad()
def dpt_eval(model, test, train, max_depth) -> dict[str, float]:
    """AbsRel and δ1, and the same of ``mean_log_depth`` as the baseline.

    Args:
        model: the trained model (its device is used).
        test: the held-out split's arrays (rgb, depth).
        train: the training split's arrays, for the baseline.
        max_depth: the far plane (``valid_depth``).

    Returns:
        abs_rel, delta1 and their ``baseline_`` twins.
    """
    device = next(model.parameters()).device.type
    pred = torch.cat([model(to_input(b["rgb"])).cpu() for b in batches(test, device)])
    target = torch.as_tensor(test["depth"])
    baseline = mean_log_depth(train["depth"]).expand_as(target)
    ours, base = depth_metrics(pred, target, max_depth), depth_metrics(baseline, target, max_depth)
    return {**ours, **{f"baseline_{k}": v for k, v in base.items()}}


# --- classification and depth on one trunk (tiny-trunk) ----------------------------------

@torch.no_grad()
def trunk_eval(model, test, train, max_depth) -> dict[str, float]:
    """Accuracy, and depth metrics over all test scenes and per family (outdoor, room); with
    ``delta1_median_scaled``, δ1 after each map is scaled to its target's median, which shows how
    much of the δ1 shortfall is the global scale a monocular model cannot always see.

    Args:
        model: the trained model (its device is used).
        test: the held-out split's arrays (rgb, depth, label, family).
        train: the training split's arrays, for the baseline.
        max_depth: the far plane (``valid_depth``).

    Returns:
        accuracy, abs_rel, delta1, delta1_median_scaled, per-family ``<family>_`` ones, ``baseline_`` twins.
    """
    device = next(model.parameters()).device.type
    outs = [{k: v.cpu() for k, v in model(to_input(b["rgb"])).items()} for b in batches({"rgb": test["rgb"]}, device)]
    pred, logits = torch.cat([o["depth"] for o in outs]), torch.cat([o["logits"] for o in outs])
    target = torch.as_tensor(test["depth"])
    baseline = mean_log_depth(train["depth"]).expand_as(target)
    majority = np.bincount(train["label"]).argmax()
    out = {"accuracy": float((logits.argmax(1).numpy() == test["label"]).mean()),
           "baseline_accuracy": float((test["label"] == majority).mean())}
    parts = [("", np.ones(len(target), bool))] + [(f"{f}_", test["family"] == i) for i, f in enumerate(FAMILIES)]
    for tag, keep in parts:
        if keep.any():
            t = target[keep]
            for prefix, maps in (("", pred[keep]), ("baseline_", baseline[keep])):
                out |= {f"{prefix}{tag}{k}": v for k, v in depth_metrics(maps, t, max_depth).items()}
                scaled = depth_metrics(median_scaled(maps, t, max_depth), t, max_depth)["delta1"]
                out[f"{prefix}{tag}delta1_median_scaled"] = scaled
    return out


# --- multi-view (tiny-mv) ------------------------------------------------------------------

def pointmaps(depth: np.ndarray, K: np.ndarray, cam_to_world: np.ndarray) -> np.ndarray:
    """(S, V, H, W) depth -> (S, V, 3, H, W) points in the first camera's frame (VGGT's world frame),
    back-projected with the world's pixel convention (``backproject``).

    Args:
        depth: (S, V, H, W) z-depth.
        K: (S, V, 3, 3) intrinsics.
        cam_to_world: (S, V, 4, 4) poses.

    Returns:
        (S, V, 3, H, W) float32.
    """
    cam = backproject(depth.astype(np.float64), K)  # (S, V, H, W, 3)
    rel = relative_pose(cam_to_world[:, :1], cam_to_world)  # (S, V, 4, 4)
    pts = np.einsum("svij,svhwj->svhwi", rel[..., :3, :3], cam) + rel[:, :, None, None, :3, 3]
    return pts.transpose(0, 1, 4, 2, 3).astype(np.float32)


def mv_targets(data: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """A multi-view split's arrays with the targets the model learns.

    Args:
        data: rgb (S, V, H, W, 3), depth (S, V, H, W), label, K (S, V, 3, 3), cam_to_world (S, V, 4, 4).

    Returns:
        rgb, depth, label, pose (S, V, 9) (``pose_encoding``) and points (S, V, 3, H, W).
    """
    size = data["rgb"].shape[-2]
    return {"rgb": data["rgb"], "depth": data["depth"], "label": data["label"],
            "pose": pose_encoding(data["cam_to_world"], data["K"], size),
            "points": pointmaps(data["depth"], data["K"], data["cam_to_world"])}


@torch.no_grad()
def mv_eval(model, test, train, max_depth) -> dict[str, float]:
    """Camera, depth and point-map errors, and those of the training means as the baseline.

    Args:
        model: the trained model (its device is used).
        test: the held-out split's arrays (``mv_targets``).
        train: the training split's arrays, for the baseline.
        max_depth: the far plane (``valid_depth``).

    Returns:
        rot_err_deg, trans_err_m, abs_rel, delta1, point_err_m and their ``baseline_`` twins.
    """
    device = next(model.parameters()).device.type
    outs = [{k: v.cpu() for k, v in model(to_input(b["rgb"])).items()} for b in batches(test, device, 16)]
    pose = torch.cat([o["camera"] for o in outs]).numpy()
    depth = torch.cat([o["depth"] for o in outs])
    target_depth = torch.as_tensor(test["depth"])
    mask = valid_depth(target_depth, max_depth).unsqueeze(2)
    points = torch.cat([o["pointmap"] for o in outs])
    target_points = torch.as_tensor(test["points"])
    mean_pose = np.broadcast_to(train["pose"].mean(axis=0), test["pose"].shape)
    mean_points = torch.as_tensor(train["points"].mean(axis=0)).expand_as(target_points)
    point_err = lambda p: float(((p - target_points).norm(dim=2, keepdim=True) * mask).sum() / mask.sum())
    ours = {**camera_errors(pose, test["pose"]), **depth_metrics(depth, target_depth, max_depth),
            "point_err_m": point_err(points)}
    base = {**camera_errors(np.ascontiguousarray(mean_pose), test["pose"]),
            **depth_metrics(mean_log_depth(train["depth"]).expand_as(target_depth), target_depth, max_depth),
            "point_err_m": point_err(mean_points)}
    return {**ours, **{f"baseline_{k}": v for k, v in base.items()}}


TASKS = {
    "cls": Task(False, ("rgb", "label"), cls_loss, cls_eval, flip=True),
    "dpt": Task(False, ("rgb", "depth", "label"), dpt_loss, dpt_eval, flip=True),
    "trunk": Task(False, ("rgb", "depth", "label", "family"), trunk_loss, trunk_eval, flip=True),
    "multiview": Task(True, ("rgb", "depth", "label", "K", "cam_to_world"), mv_loss, mv_eval, flip=False),
}


# --- the training loop ---------------------------------------------------------------------

def learning_rate(step: int, steps: int, peak: float) -> float:
    """The step's learning rate: linear warm-up over the first ``WARMUP`` of the steps, then cosine
    decay to zero.

    Args:
        step: the 0-based step.
        steps: the run's steps.
        peak: the rate at the end of the warm-up.

    Returns:
        peak · (step + 1) / w for step < w, else ½ · peak · (1 + cos(π (step − w) / (steps − w))),
        w = max(1, ⌊WARMUP · steps⌋) the warm-up steps.
    """
    warm = max(1, int(WARMUP * steps))
    if step < warm:
        return peak * (step + 1) / warm
    return 0.5 * peak * (1 + math.cos(math.pi * (step - warm) / max(1, steps - warm)))


def _items(rng: np.random.Generator, n: int, size: int) -> np.ndarray:
    return np.sort(rng.choice(n, size=min(size, n), replace=False))


def batch_items(data: dict[str, np.ndarray], step: int, seed: int, size: int) -> np.ndarray:
    """The items (rows of ``data``) of ``sample_batch``'s batch of ``step``.

    Args:
        data: name -> (n, ...) array, with ``label``.
        step: the step.
        seed: the run's seed.
        size: items per batch (at most n).

    Returns:
        Sorted distinct row indices.
    """
    return _items(np.random.default_rng([seed, step]), len(data["label"]), size)


def sample_batch(data: dict[str, np.ndarray], step: int, seed: int, size: int, flip: bool) -> dict[str, np.ndarray]:
    """The batch of ``step``: a function of (seed, step) only, so resumed runs see the same data.

    Args:
        data: name -> (n, ...) array, with ``label``.
        step: the step.
        seed: the run's seed.
        size: items per batch (at most n).
        flip: mirror each item's rgb and depth horizontally with probability ½.

    Returns:
        name -> (size, ...) array.
    """
    rng = np.random.default_rng([seed, step])
    idx = _items(rng, len(data["label"]), size)
    batch = {k: v[idx] for k, v in data.items()}
    if flip:
        mirror = rng.random(len(idx)) < 0.5
        for k in ("rgb", "depth"):
            if k in batch:
                batch[k] = np.where(mirror.reshape(-1, *[1] * (batch[k].ndim - 1)), batch[k][:, :, ::-1], batch[k])
    return batch


def save_state(path: Path, model: nn.Module, opt: torch.optim.Optimizer, step: int, curve: list, window: list,
               tag: str) -> None:
    """Write the training state atomically, for ``load_state``.

    Args:
        path: the safetensors file.
        model: its state dict is saved.
        opt: its per-parameter state is saved.
        step: the steps done.
        curve: the loss curve so far.
        window: the losses since the curve's last point.
        tag: identifies the configuration; ``load_state`` resumes only from the same.
    """
    tensors = {f"model.{k}": v.detach().contiguous().cpu() for k, v in model.state_dict().items()}
    for i, state in opt.state_dict()["state"].items():
        tensors |= {f"opt.{i}.{k}": torch.as_tensor(v).contiguous().cpu() for k, v in state.items()}
    meta = {"step": str(step), "curve": json.dumps(curve), "window": json.dumps(window), "tag": tag}
    with atomic_path(path) as tmp:
        save_file(tensors, str(tmp), metadata=meta)


def load_state(path: Path, model: nn.Module, opt: torch.optim.Optimizer, tag: str) -> tuple[int, list, list]:
    """Resume from ``path`` if it was made by the same configuration; else start at step 0.

    Args:
        path: the file ``save_state`` wrote.
        model: loaded in place.
        opt: loaded in place.
        tag: the configuration's tag.

    Returns:
        (steps done, curve, window); (0, [], []) without a usable file.
    """
    if not path.is_file():
        return 0, [], []
    from safetensors import safe_open

    try:
        with safe_open(str(path), "pt") as f:
            meta = f.metadata()
        tensors = load_file(str(path))
    except Exception:  # a checkpoint cut short by a kill: start over
        return 0, [], []
    if meta.get("tag") != tag:
        return 0, [], []
    model.load_state_dict({k.removeprefix("model."): v for k, v in tensors.items() if k.startswith("model.")})
    state = opt.state_dict()
    for key, value in tensors.items():
        if key.startswith("opt."):
            _, i, name = key.split(".", 2)
            state["state"].setdefault(int(i), {})[name] = value
    opt.load_state_dict(state)
    return int(meta["step"]), [tuple(c) for c in json.loads(meta["curve"])], json.loads(meta["window"])
