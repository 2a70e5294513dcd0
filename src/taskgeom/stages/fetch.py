"""The ``fetch`` stage: render the synthetic world's splits into HDF5, summarise them, draw samples.

File layout (every split): one group per resolution, ``r64`` (base) and, for the
test splits, ``r96`` / ``r128``; in each, ``rgb`` and ``sketch`` (S[,V],H,W,3) uint8,
``depth`` (S[,V],H,W) float32 metres, ``object_id`` (S[,V],H,W) int16,
``K`` (S[,V],3,3), ``cam_to_world`` (S[,V],4,4), and at the top ``label`` (S,) and
``family`` (S,) int8 (0 outdoor, 1 room: ``taskgeom.data.world.FAMILIES``). Single-view
splits drop the V axis. The same scene index is the same scene at every resolution.
"""

from __future__ import annotations

from functools import partial

import numpy as np
import pandas as pd

from taskgeom.artifacts.figures import plt, save_figure
from taskgeom.artifacts.tables import write_table
from taskgeom.data.hdf5 import ResumableH5, forget_published, open_store
from taskgeom.data.world import CLASS_NAMES, FAMILIES, WorldSpec, render_split
from taskgeom.evaluate.image_stats import spectrum_slope
from taskgeom.pipeline.pool import ordered_map
from taskgeom.pipeline.runtime import StageContext

SPLIT_IDS = {"train": 0, "val": 1, "test": 2, "mv_train": 3, "mv_test": 4}
ARRAYS = ("rgb", "sketch", "depth", "object_id", "K", "cam_to_world")


def split_seed(world_seed: int, split: str) -> int:
    """Independent, stable seed per split."""
    return int(np.random.SeedSequence([world_seed, SPLIT_IDS[split]]).generate_state(1)[0])


def split_plan(world: dict) -> dict[str, tuple[int, int, list[int]]]:
    """split -> (scenes, views, resolutions)."""
    base, extra = world["resolution"], [r for r in world["eval_resolutions"] if r != world["resolution"]]
    mv = world["multiview"]
    return {
        "train": (world["splits"]["train"], 1, [base]),
        "val": (world["splits"]["val"], 1, [base]),
        "test": (world["splits"]["test"], 1, [base, *extra]),
        "mv_train": (mv["train"], mv["views"], [base]),
        "mv_test": (mv["test"], mv["views"], [base, *extra]),
    }


def layout(views: int, resolutions: list[int]) -> dict[str, tuple[tuple[int, ...], str]]:
    lead = (views,) if views > 1 else ()
    out = {}
    for r in resolutions:
        g = f"r{r}"
        out |= {
            f"{g}/rgb": ((*lead, r, r, 3), "uint8"), f"{g}/sketch": ((*lead, r, r, 3), "uint8"),
            f"{g}/depth": ((*lead, r, r), "float32"), f"{g}/object_id": ((*lead, r, r), "int16"),
            f"{g}/K": ((*lead, 3, 3), "float32"), f"{g}/cam_to_world": ((*lead, 4, 4), "float32"),
        }
    return out | {"label": ((), "int64"), "family": ((), "int8")}


def render_chunk(start: int, *, seed: int, chunk: int, scenes: int, views: int, resolutions: list[int],
                 spec: WorldSpec) -> dict[str, np.ndarray]:
    """Scenes start..start+chunk-1 of a split (fewer at its end) at every resolution, keyed as the
    file stores them."""
    block, n = {}, min(chunk, scenes - start)
    for r in resolutions:
        views_ = render_split(n, seed, r, views=views, spec=spec, start=start)
        for name in ARRAYS:
            block[f"r{r}/{name}"] = views_[name] if views > 1 else views_[name][:, 0]
        block["label"], block["family"] = views_["label"], views_["family"]
    return block


def build_split(ctx: StageContext, split: str, spec: WorldSpec) -> None:
    """Render one split into its resumable store, chunk by chunk, on the stage's threads as
    processes (a chunk is a function of (seed, start) alone and chunks are written in order, so
    a resumed build, or one on any number of processes, writes the same bytes)."""
    world = ctx.params["world"]
    scenes, views, resolutions = split_plan(world)[split]
    seed = split_seed(world["seed"], split)
    attrs = {"split": split, "seed": seed, "world_seed": world["seed"], "views": views, "resolutions": resolutions,
             "base_resolution": world["resolution"], "spec": spec.as_dict(), "class_names": list(CLASS_NAMES),
             "families": list(FAMILIES),
             "depth_units": "metres (camera z)",
             "camera_convention": "OpenCV: x right, y down, z forward; cam_to_world",
             "provenance": ctx.provenance()}
    store = ResumableH5(ctx.outputs[split], layout(views, resolutions), scenes, attrs, kind="world", log=ctx.log)
    if store.done and not store.restored:
        ctx.log.info("%s: resuming at scene %d of %d", split, store.done, scenes)
    chunk = world["chunk"]
    starts = range(store.done, scenes, chunk)
    render = partial(render_chunk, seed=seed, chunk=chunk, scenes=scenes, views=views, resolutions=resolutions,
                     spec=spec)
    try:
        with ordered_map(ctx.threads) as map_:
            for start, block in ctx.progress(zip(starts, map_(render, starts)), desc=f"fetch {split}",
                                             total=len(starts)):
                store.write(start, block)
        store.finish()
    finally:
        store.close()
    ctx.log.info("%s: %d scenes × %d views at %s px -> %s", split, scenes, views, resolutions, ctx.outputs[split])


SUMMARY_SCENES = 200  # scenes per split that the depth and spectrum statistics read


def summarise(ctx: StageContext, max_depth: float) -> pd.DataFrame:
    """Per split: counts, classes, the room share, depth and far-plane statistics per family
    (the far-plane share of a view: its pixels at ``max_depth``, sky included) and the RGB
    power-spectrum slope, over the first SUMMARY_SCENES scenes."""
    rows = []
    for split in SPLIT_IDS:
        with open_store(ctx.outputs[split], "world") as f:
            base, n = f"r{f.attrs['base_resolution']}", min(SUMMARY_SCENES, int(f.attrs["num_items"]))
            depth, rgb = f[f"{base}/depth"][:n], f[f"{base}/rgb"][:n]
            labels, family = f["label"][:], f["family"][:n]
        far = (depth >= max_depth).reshape(n, -1).mean(axis=1)
        room = family == FAMILIES.index("room")
        rows.append({
            "split": split,
            "scenes": len(labels),
            "views": int(depth.shape[1]) if depth.ndim == 4 else 1,
            "resolutions": " ".join(str(r) for r in split_plan(ctx.params["world"])[split][2]),
            "classes_present": int(len(np.unique(labels))),
            "largest_class_share": round(float(np.bincount(labels).max() / len(labels)), 3),
            "room_share": round(float(room.mean()), 3),
            "depth_median_m": round(float(np.median(depth[depth < max_depth])), 3),
            "far_plane_outdoor": round(float(far[~room].mean()), 3) if (~room).any() else float("nan"),
            "far_plane_room_max": round(float(far[room].max()), 3) if room.any() else float("nan"),
            "spectrum_slope": round(spectrum_slope(rgb.reshape(-1, *rgb.shape[-3:])), 3),
            "mb_on_disk": round(ctx.outputs[split].stat().st_size / 2**20, 2),
        })
    return pd.DataFrame(rows)


def draw_samples(ctx: StageContext, count: int = 4) -> None:
    """RGB, depth and the second (line-drawing) domain for a few test scenes, and one multi-view group."""
    with open_store(ctx.outputs["test"], "world") as f:
        base = f"r{f.attrs['base_resolution']}"
        rgb, depth, sketch = (f[f"{base}/{k}"][:count] for k in ("rgb", "depth", "sketch"))
        labels = f["label"][:count]
    with open_store(ctx.outputs["mv_test"], "world") as f:
        base = f"r{f.attrs['base_resolution']}"
        group = f[f"{base}/rgb"][0]
    views = group.shape[0]
    cols = max(count, views)
    fig, axes = plt.subplots(4, cols, figsize=(2.0 * cols, 8.4), squeeze=False)
    for ax in axes.flat:
        ax.axis("off")
    for i in range(count):
        axes[0, i].imshow(rgb[i])
        axes[0, i].set_title(CLASS_NAMES[labels[i]], fontsize=8)
        axes[1, i].imshow(np.where(depth[i] < 49.0, depth[i], np.nan), cmap="magma_r")
        axes[2, i].imshow(sketch[i])
    for v in range(views):
        axes[3, v].imshow(group[v])
        axes[3, v].set_title(f"view {v}", fontsize=8)
    for row, name in enumerate(("RGB", "depth (m)", "line drawing", "multi-view group")):
        axes[row, 0].text(-0.08, 0.5, name, transform=axes[row, 0].transAxes, rotation=90, va="center", ha="right")
    save_figure(fig, ctx.outputs["figure_png"], ctx.outputs["figure_pdf"], provenance=ctx.provenance())


def run(ctx: StageContext) -> None:
    world = ctx.params["world"]
    spec = WorldSpec(num_objects=tuple(world["num_objects"]), fov_deg=tuple(world["fov_deg"]),
                     room_fov_deg=tuple(world["room_fov_deg"]), room_share=float(world["room_share"]))
    for split in SPLIT_IDS:
        build_split(ctx, split, spec)
    write_table(summarise(ctx, spec.max_depth), ctx.outputs["summary_csv"], ctx.outputs["summary_md"],
                caption=f"Synthetic world: splits as stored. Over the first {SUMMARY_SCENES} scenes of each: depth, "
                        "the share of pixels at the far plane (sky included; outdoor mean, room maximum) and the "
                        "RGB power-spectrum slope (natural images ≈ −2).",
                provenance=ctx.provenance())
    draw_samples(ctx)
    forget_published(ctx.outputs[split] for split in SPLIT_IDS)
