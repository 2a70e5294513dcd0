"""Where importance's pullback merge sends the tokens it removes, on the world's ViT
(``fixtures.world_vit``, model seed 0, fitted by ``taskgeom fit`` with its defaults, as in
``patch_fidelity.py``), on 64 held-out scenes at η 0.05 and 0.5.

The merge sends a removed token t to the kept patch token s minimising
d(t, s)² = ‖diag(√λ) U_tᵀ (x_s − x_t)‖² + ε‖x_s − x_t‖² (``patching.pullback``): t's own block
U_t of the SPN's modes, and the SPN's ε. Importance removes the tokens whose energy
e_t = Σ_i λ_i ‖U_{t,i}‖² is lowest, so the low-rank term may be small for exactly those tokens.
Per removed token this reports: its score and its share exp(score_t) / (exp(score_t) + exp(score_s))
of the merged token (one token each; merging by key cosine gives each 1/2); the low-rank term's
share of d(t, s)² at the chosen s; whether
the chosen s is also t's nearest kept token in features (Euclidean); and how far the chosen s is
in features, over the nearest kept token's distance (1 = the nearest).

Results: results/benchmarks/merge_distance.{csv,md}.

    python benchmarks/merge_distance.py
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd
import torch
import torch.nn.functional as F_
from patch_fidelity import taskgeom
from PIL import Image
from safetensors.torch import save_file
from stamp import write_stamped

from taskgeom.fitting import load_fitted
from taskgeom.fixtures import world_vit
from taskgeom.inspection.inputs import timm_transform
from taskgeom.models.vit import Grid
from taskgeom.patching.pullback import pullback_distance, spn_positions
from taskgeom.pipeline.runtime import machine
from taskgeom.prune.select import gather_tokens, num_removed, split_lowest

OUT = Path("results/benchmarks")
RATIOS = (0.05, 0.5)
FIT_IMAGES, HELD_OUT = 64, 64


def fit_world_model(seed: int, root: Path) -> tuple[dict[str, np.ndarray], torch.nn.Module, list[str], Path]:
    """The world's ViT with model seed ``seed``, its weights under ``root``, fitted there by
    ``taskgeom fit`` with its defaults (decoder logits) on the first ``FIT_IMAGES`` scenes into
    ``root/fit``: the scenes (fit's, then the held-out ones), the model, its model flags, and the
    folder of the fit's images."""
    scenes = world_vit.world_scenes(FIT_IMAGES + HELD_OUT)
    fit_images = world_vit.write_scenes(root / "fit-images", scenes["rgb"], range(FIT_IMAGES))
    model = world_vit.train_world_vit(seed)
    save_file(model.state_dict(), root / "model.safetensors")
    flags = ["--timm", world_vit.NAME, "--weights", str(root / "model.safetensors"), "--model-args",
             *world_vit.model_args(), "--threads", "1"]
    taskgeom("fit", *flags, "--images", str(fit_images), "--decoder", "logits", "--out", str(root / "fit"))
    return scenes, model, flags, fit_images


def block_output(model: torch.nn.Module, layer: int, x: torch.Tensor) -> torch.Tensor:
    """The tokens block ``layer`` outputs for images x, (B, N, D)."""
    seen = {}
    hook = model.blocks[layer].register_forward_hook(lambda m, a, out: seen.__setitem__("h", out))
    with torch.no_grad():
        model(x)
    hook.remove()
    return seen["h"]


def where_they_go(fitted, h: torch.Tensor, grid: Grid, ratio: float) -> pd.DataFrame:
    """One row per removed token: the low-rank share of d(t, s)² at the chosen s, whether s is the
    nearest kept token in features, and the chosen over the nearest feature distance."""
    learned, prefix = fitted.metric, grid.prefix
    idx = torch.arange(h.shape[1]).expand(h.shape[0], -1)
    with torch.no_grad():
        scores = learned.importance(h, idx, grid)
        keep, drop = split_lowest(scores, num_removed(grid.rows * grid.cols, ratio), prefix)
        d2 = pullback_distance(learned.spn, learned.base, grid, h, keep, drop, prefix)       # (B, k, K')
        spn = learned.spn
        z = spn.encoder(spn.inp(h) + spn_positions(spn, learned.base, grid))
        eps = F_.softplus(spn.energy(z.mean(dim=1))[:, -1]) + 1e-12
    xs, xt = gather_tokens(h, keep[:, prefix:]), gather_tokens(h, drop)
    feature = torch.cdist(xt, xs)                                                               # (B, k, K')
    chosen = d2.argmin(dim=-1, keepdim=True)
    iso = eps[:, None, None] * feature.pow(2)
    share = 1 - (iso.gather(-1, chosen) / d2.gather(-1, chosen).clamp_min(1e-30))
    far = feature.gather(-1, chosen) / feature.min(dim=-1, keepdim=True).values.clamp_min(1e-30)
    nearest = chosen == feature.argmin(dim=-1, keepdim=True)
    w_t = scores.gather(1, drop).exp()                                                          # (B, k)
    w_s = scores.gather(1, keep[:, prefix:]).exp().gather(1, chosen[..., 0])
    return pd.DataFrame({"ratio": ratio, "score_removed": scores.gather(1, drop).flatten().numpy(),
                         "removed_weight_share": (w_t / (w_t + w_s)).flatten().numpy(),
                         "low_rank_share": share.flatten().numpy(),
                         "nearest_in_features": nearest.flatten().numpy(), "feature_distance_over_nearest":
                         far.flatten().numpy()})


def main() -> None:
    started = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        scenes, model, _, _ = fit_world_model(0, root)
        fitted = load_fitted(root / "fit")
        fitted.metric.head.eval()
        fitted.metric.spn.eval()
    transform, _ = timm_transform(model)
    x = torch.stack([transform(Image.fromarray(a)) for a in scenes["rgb"][FIT_IMAGES:]])
    side = world_vit.WORLD_VIT["img_size"] // world_vit.WORLD_VIT["patch_size"]
    h = block_output(model, fitted.layer, x)
    rows = pd.concat([where_they_go(fitted, h, Grid(1, side, side), r) for r in RATIOS], ignore_index=True)
    table = rows.groupby("ratio").agg(removed=("low_rank_share", "size"),
                                      score_removed_median=("score_removed", "median"),
                                      removed_weight_share_median=("removed_weight_share", "median"),
                                      low_rank_share_median=("low_rank_share", "median"),
                                      nearest_in_features=("nearest_in_features", "mean"),
                                      feature_distance_over_nearest_median=("feature_distance_over_nearest", "median"),
                                      feature_distance_over_nearest_p90=("feature_distance_over_nearest",
                                                                         lambda v: v.quantile(0.9))).reset_index()
    header = (f"Importance's pullback merge on the world's ViT (model seed 0), block {fitted.layer}, {HELD_OUT} "
              f"held-out scenes, on {machine('cpu')}; one run of {time.perf_counter() - started:.0f} s. Per removed "
              "token t and its chosen kept token s: t's score and its weight's share of the merge, the low-rank "
              "term's share of d(t, s)², whether s is t's nearest kept token in features, and ‖x_s − x_t‖ over the "
              "nearest kept token's distance.\n\n")
    write_stamped(OUT, "merge_distance", table, header + table.to_markdown(index=False, floatfmt=".3g"),
                  float_format="%.6g")
    print(table.to_string(index=False))


if __name__ == "__main__":
    main()
