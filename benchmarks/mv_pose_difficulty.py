"""How hard the world's relative camera poses are, by the size of the turn between two views.

Run in a repository where the DAG has run (the held-out multi-view groups of zoo.tiny-mv, its
training groups and data/zoo/tiny-mv). Each group of V = 2 views is put in a band by its turn θ,
the geodesic angle of view 1's rotation in view 0's frame. Per band:

- co-visible: the share of view 0's valid pixels (finite depth, as ``valid_depth``) that view 1
  sees: back-projected with their depth, moved into view 1's frame, projected inside its image,
  in front of it, and within ``DEPTH_TOLERANCE`` of the depth view 1 stores at that pixel;
- colour error: the mean |RGB₀ − RGB₁| (of 255) over those pixel pairs, against the same pixels
  paired at random within view 0 (what the error is with no correspondence at all);
- rotation error of tiny-mv's camera head and of the trivial prediction (the training groups'
  mean pose encoding), as ``evaluate.tasks.camera_errors`` scores them.

Results: results/benchmarks/mv_pose_difficulty.{csv,md}.

    python benchmarks/mv_pose_difficulty.py [--bands 0 10 20 30 45 180]
"""

from __future__ import annotations

import argparse
import platform
from pathlib import Path

import numpy as np
import pandas as pd
import torch
from stamp import write_stamped

from taskgeom.data.indexed import open_indexed
from taskgeom.data.sources import world_arrays
from taskgeom.data.world import FAMILIES
from taskgeom.data.world.camera import backproject, relative_pose
from taskgeom.evaluate.tasks import camera_errors, pose_encoding, valid_depth
from taskgeom.models.train import to_input
from taskgeom.models.zoo import load_named
from taskgeom.pipeline import config

OUT = Path("results/benchmarks")
DEPTH_TOLERANCE = 0.05  # relative
KEYS = ("rgb", "depth", "K", "cam_to_world", "family")


def turn_deg(cam_to_world: np.ndarray) -> np.ndarray:
    """(S, V, 4, 4) -> (S,) geodesic angle (degrees) of view 1's rotation in view 0's frame."""
    R = relative_pose(cam_to_world[:, :1], cam_to_world)[:, 1, :3, :3]
    return np.degrees(np.arccos(np.clip((np.trace(R, axis1=1, axis2=2) - 1) / 2, -1.0, 1.0)))


def correspondences(depth: np.ndarray, K: np.ndarray, cam_to_world: np.ndarray, max_depth: float
                    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """One group: depth (V, H, W), K (V, 3, 3), cam_to_world (V, 4, 4). Returns view 0's valid
    pixel indices (P,) into H·W, the flat indices (Q,) into H·W of those view 1 sees, and the
    flat indices (Q,) in view 1 of the same points."""
    H, W = depth.shape[-2:]
    valid = np.flatnonzero(valid_depth(depth[0].reshape(-1), max_depth))
    X0 = backproject(depth[0], K[0]).reshape(-1, 3)[valid]
    T10 = relative_pose(cam_to_world[1], cam_to_world[0])
    q = (X0 @ T10[:3, :3].T + T10[:3, 3]) @ K[1].astype(np.float64).T
    z = q[:, 2]
    with np.errstate(divide="ignore", invalid="ignore"):
        u, v = np.round(q[:, 0] / z), np.round(q[:, 1] / z)
    inside = (z > 0) & (u >= 0) & (u < W) & (v >= 0) & (v < H)
    at = (v[inside] * W + u[inside]).astype(np.int64)
    seen = np.abs(depth[1].reshape(-1)[at] - z[inside]) < DEPTH_TOLERANCE * z[inside]
    return valid, valid[inside][seen], at[seen]


def pose_predictions(rgb: np.ndarray, batch: int = 16) -> np.ndarray:
    """(S, V, H, W, 3) uint8 -> (S, V, 9) tiny-mv's camera encodings."""
    model = load_named("tiny-mv")
    with torch.no_grad():
        out = [model(to_input(torch.as_tensor(rgb[i:i + batch])))["camera"] for i in range(0, len(rgb), batch)]
    return torch.cat(out).numpy().reshape(len(rgb), rgb.shape[1], -1)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bands", type=float, nargs="+", default=[0, 10, 20, 30, 45, 180], help="band edges (degrees)")
    args = ap.parse_args()
    torch.set_num_threads(1)
    params = config.load("params.yaml")
    cfg = params["zoo"]["tiny-mv"]
    sources = {role: open_indexed(f"data/sources/{cfg['sources'][role]}.json", params["sources"])
               for role in ("train", "test")}
    max_depth = sources["test"].max_depth
    test = world_arrays(sources["test"], KEYS, "test")
    size = test["rgb"].shape[-2]
    test["pose"] = pose_encoding(test["cam_to_world"], test["K"], size)
    train = world_arrays(sources["train"], ("K", "cam_to_world"), "train")
    mean_pose = pose_encoding(train["cam_to_world"], train["K"], size).mean(axis=0)
    ours = pose_predictions(test["rgb"])
    turn = turn_deg(test["cam_to_world"])
    rng = np.random.default_rng(0)
    covisible, matched, shuffled = [], [], []
    for g in range(len(turn)):
        valid, seen0, seen1 = correspondences(test["depth"][g], test["K"][g], test["cam_to_world"][g], max_depth)
        covisible.append(len(seen0) / max(len(valid), 1))
        c0 = test["rgb"][g, 0].reshape(-1, 3)[seen0].astype(np.float64)
        c1 = test["rgb"][g, 1].reshape(-1, 3)[seen1].astype(np.float64)
        matched.append(np.abs(c0 - c1).mean() if len(c0) else np.nan)
        shuffled.append(np.abs(c0 - c0[rng.permutation(len(c0))]).mean() if len(c0) else np.nan)
    covisible, matched, shuffled = map(np.asarray, (covisible, matched, shuffled))
    room = test["family"] == FAMILIES.index("room")
    rows = []
    edges = list(zip(args.bands[:-1], args.bands[1:])) + [(args.bands[0], args.bands[-1])]
    for lo, hi in edges:
        k = (turn >= lo) & (turn < hi)
        if not k.any():
            continue
        trivial = np.ascontiguousarray(np.broadcast_to(mean_pose, test["pose"][k].shape))
        rows.append({"turn_deg": f"{lo:g}–{hi:g}", "groups": int(k.sum()), "rooms": int(room[k].sum()),
                     "covisible": covisible[k].mean(), "colour_err": np.nanmean(matched[k]),
                     "colour_err_unmatched": np.nanmean(shuffled[k]),
                     "rot_err_tiny_mv": camera_errors(ours[k], test["pose"][k])["rot_err_deg"],
                     "rot_err_trivial": camera_errors(trivial, test["pose"][k])["rot_err_deg"]})
        print(rows[-1], flush=True)
    table = pd.DataFrame(rows)
    header = (f"# Relative camera pose on the world's held-out multi-view groups, by the turn between views\n\n"
              f"{platform.processor() or platform.machine()}; the last row is every group. "
              f"Co-visible: share of view 0's valid pixels that view 1 sees (depth within "
              f"{DEPTH_TOLERANCE:.0%}); colour errors of 255; rotation errors in degrees.\n\n")
    write_stamped(OUT, "mv_pose_difficulty", table, header + table.to_markdown(index=False, floatfmt=".3g"))


if __name__ == "__main__":
    main()
