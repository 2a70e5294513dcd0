"""What ``taskgeom fit`` costs with its default flags, and the held-out quality it keeps.

Cases (``CASES``), each one ``taskgeom fit`` with its defaults (its layer, decoder, sketch, steps)
run in this process (``taskgeom.pipeline.cli.main``) with ``--threads`` (default 2):

- ``vit_small``: timm ``vit_small_patch16_224``, random weights (seed 0), ``SMALL_IMAGES`` images
  at 224 px;
- ``world_tiny``: ``vit_tiny_patch16_224``'s architecture at 64 px (``TINY_ARGS``: 8-px patches,
  4 blocks, 20 classes), random weights (seed 0), ``TINY_IMAGES`` images.

The images are the embedded world's scenes (``fixtures.world_vit.world_scenes``, from
``world_vit.OTHER_START``), rendered at 64 px, written as PNGs by this benchmark; each model's own
transform resizes them. Each row gives the wall-clock and the process's CPU seconds of the whole
command, the estimate it printed before working, the products per image, and the head's held-out
Spearman ρ against its targets (fit.json ``quality.head.rho.mean``) beside the position-only floor,
and the SPN's held-out V1.

``--reference`` adds the comparison with the defaults ``fit`` had before (``BEFORE``: the
pipeline's Rayleigh–Ritz sketch at q = 2 with oversampling 10 and 32 block-norm probes, 300 head
and 600 SPN steps, the SPN at learning rate 0.002):

- on ``REFERENCE_IMAGES`` images of the ``world_tiny`` architecture, twice on the same images,
  split and seed: once with the defaults, once with ``BEFORE``. Its 20-output classifier is read
  whole by either sketch, so it isolates the training-length and block-norm changes;
- on the ``vit_small`` case's images, split and seed, with ``BEFORE`` and no SPN
  (``SMALL_BEFORE``): its 1000-output head is sketched, so its row compares the targets' sketch.
  The head is trained before the SPN from the fit's seed, so its held-out ρ is the one ``BEFORE``
  gives with its SPN; 600 SPN steps on ViT-S would add tens of minutes and change no ρ.

The sketch's own accuracy is checked against exact spectra in tests/test_fit_cost.py.

Results: results/benchmarks/fit_cost.{csv,md}.

    python benchmarks/fit_cost.py [--reference] [--threads 2] [--quick --out DIR]

``--quick`` runs every case on 8 images with 10 steps of each network, to check that the
benchmark runs (its files say so; write them elsewhere with ``--out``).
"""

from __future__ import annotations

import argparse
import io
import json
import re
import tempfile
import time
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path

import pandas as pd
import torch
from safetensors.torch import save_file
from stamp import write_stamped

from taskgeom.fixtures import world_vit
from taskgeom.pipeline import cli
from taskgeom.pipeline.runtime import machine

OUT = Path("results/benchmarks")
SMALL, TINY = "vit_small_patch16_224", "vit_tiny_patch16_224"
TINY_ARGS = {"img_size": 64, "patch_size": 8, "depth": 4, "num_classes": 20}
SMALL_IMAGES, TINY_IMAGES, REFERENCE_IMAGES, QUICK_IMAGES = 64, 256, 64, 8
RESOLUTION = 64  # the scenes' pixels; each model's transform resizes them
CASES = {"vit_small": (SMALL, {}, SMALL_IMAGES), "world_tiny": (TINY, TINY_ARGS, TINY_IMAGES)}
BEFORE = ["--sketch", "rayleigh-ritz", "--power-iters", "2", "--oversample", "10", "--block-norm-probes", "32",
          "--steps", "300", "--spn-steps", "600", "--spn-lr", "0.002"]
SMALL_BEFORE = [*BEFORE, "--spn", "off"]
ESTIMATE = re.compile(r"estimated (?P<value>[\d.]+) (?P<unit>s|min) \(targets ~[\d.]+ (s|min) for \d+ images at "
                      r"(?P<products>\d+) products each")


def write_model(root: Path, name: str, args: dict) -> list[str]:
    """Random weights of ``name`` built with ``args`` (torch seed 0) in a safetensors file; the flags naming it."""
    import timm

    torch.manual_seed(0)
    path = root / f"{name}.safetensors"
    save_file(timm.create_model(name, pretrained=False, **args).state_dict(), path)
    pairs = [f"{k}={v}" for k, v in args.items()]
    return ["--timm", name, "--weights", str(path), *(["--model-args", *pairs] if pairs else [])]


def write_images(folder: Path, count: int) -> Path:
    """``count`` world scenes at ``RESOLUTION`` px as PNGs under ``folder``."""
    scenes = world_vit.world_scenes(count, start=world_vit.OTHER_START, resolution=RESOLUTION)
    return world_vit.write_scenes(folder, scenes["rgb"], range(count))


def one_fit(model: list[str], images: Path, out: Path, threads: int, extra: list[str]) -> dict:
    """``taskgeom fit`` once: its seconds (wall, CPU), estimate, products per image and quality."""
    stdout, stderr = io.StringIO(), io.StringIO()
    wall, cpu = time.perf_counter(), time.process_time()
    with redirect_stdout(stdout), redirect_stderr(stderr):
        code = cli.main(["fit", *model, "--images", str(images), "--threads", str(threads), "--out", str(out),
                         *extra])
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    if code:
        raise RuntimeError(f"taskgeom fit exited {code}: {stderr.getvalue()[-2000:]}")
    estimate = ESTIMATE.search(stderr.getvalue())
    record = json.loads((out / "fit.json").read_text())
    head, spn, settings = record["quality"]["head"], record["quality"]["spn"], record["settings"]
    estimate_s = float(estimate["value"]) * (60 if estimate["unit"] == "min" else 1)
    return {"wall_s": wall, "cpu_s": cpu, "estimate_s": estimate_s,
            "products_per_image": int(estimate["products"]), "decoder": record["decoder"], "layer": record["layer"],
            "outputs": record["layout"]["outputs"], "sketch": settings["sketch"], "q": settings["power_iters"],
            "oversample": settings["oversample"], "block_norm_probes": settings["block_norm_probes"],
            "head_steps": settings["steps"], "spn_steps": settings["spn_steps"] if spn else 0,
            "spn_lr": settings["spn_lr"],
            "held_out": len(record["images"]["held_out"]), "rho": head["rho"]["mean"],
            "rho_floor": head["rho_position_only"]["mean"], "spn_v1": spn["v1"]["mean"] if spn else float("nan")}


def run(root: Path, threads: int, reference: bool, quick: bool) -> pd.DataFrame:
    """Every case (and the reference pair); one row per fit."""
    rows = []
    fast = ["--steps", "10", "--spn-steps", "10"] if quick else []
    for case, (name, args, count) in CASES.items():
        count = QUICK_IMAGES if quick else count
        model = write_model(root, name, args)
        images = write_images(root / f"{case}-images", count)
        row = one_fit(model, images, root / f"{case}-fit", threads, fast)
        rows.append({"case": case, "model": name, "images": count, "defaults": "now", **row})
        print(f"{case}: {rows[-1]}", flush=True)
        if reference and case == "vit_small":
            row = one_fit(model, images, root / f"{case}-before", threads, SMALL_BEFORE + fast)
            rows.append({"case": case, "model": name, "images": count, "defaults": "before (no SPN)", **row})
            print(f"{case} (before): {rows[-1]}", flush=True)
    if reference:
        count = QUICK_IMAGES if quick else REFERENCE_IMAGES
        model = write_model(root, TINY, TINY_ARGS)
        images = write_images(root / "reference-images", count)
        for defaults, extra in (("now", fast), ("before", BEFORE + fast)):
            row = one_fit(model, images, root / f"reference-{defaults}", threads, extra)
            rows.append({"case": "reference", "model": TINY, "images": count, "defaults": defaults, **row})
            print(f"reference ({defaults}): {rows[-1]}", flush=True)
    return pd.DataFrame(rows)


def report(table: pd.DataFrame, threads: int, quick: bool) -> str:
    """The Markdown: what ran, the table, and the reference's ρ difference where it ran."""
    smoke = " (--quick: 8 images, 10 steps of each network; a smoke run, not a measurement)" if quick else ""
    head = (f"`taskgeom fit` with its default flags, run in-process with `--threads {threads}` on "
            f"{machine('cpu')}{smoke}. "
            f"Random weights (seed 0); world scenes at {RESOLUTION} px resized by each model's transform. wall_s and "
            f"cpu_s: the whole command (cpu_s, every thread of the process); estimate_s: the line it printed before "
            f"working; rho: the head's mean held-out Spearman ρ against its targets, rho_floor the position-only "
            f"floor's; spn_v1: the SPN's held-out V1.\n\n")
    lines = [head, table.drop(columns=["model"]).to_markdown(index=False, floatfmt=".3f")]
    for case in ("reference", "vit_small"):
        ref = table[table.case == case].set_index("defaults")
        before = next((d for d in ref.index if d.startswith("before")), None)
        if "now" in ref.index and before:
            now, old = ref.loc["now"], ref.loc[before]
            lines.append(f"\n{case} ({int(now['images'])} images, the same split and seed): held-out ρ "
                         f"{now['rho']:.3f} with the defaults against {old['rho']:.3f} with the defaults {before} "
                         f"(difference {now['rho'] - old['rho']:+.3f}), in {now['wall_s']:.0f} s against "
                         f"{old['wall_s']:.0f} s.")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--reference", action="store_true", help="compare with the defaults before (BEFORE)")
    ap.add_argument("--threads", type=int, default=2, help="torch threads of every fit (default 2)")
    ap.add_argument("--quick", action="store_true", help="8 images and 10 steps of each network: a smoke run")
    ap.add_argument("--out", type=Path, default=OUT, help=f"where fit_cost.csv and .md go (default {OUT})")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        table = run(Path(tmp), args.threads, args.reference, args.quick)
    write_stamped(args.out, "fit_cost", table, report(table, args.threads, args.quick), float_format="%.6g")
    print(table.to_string(index=False))


if __name__ == "__main__":
    main()
