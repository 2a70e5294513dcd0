"""Does importance keep a model that learned its task closer to itself than ToMe's score, at the
same ratio and at the same FLOPs? The paper (Table 2, §7.3) says importance-guided merging has
the lowest degradation at every ratio on CLS decoders; this measures it on the user's path.

The models are ``fixtures.learned_vit``'s two architectures (``vit``: a CLS token; ``deit``: CLS
and distillation tokens), each trained once to classify the world's 20 classes; their held-out
top-1 is printed beside every figure. For each model, each block of ``LAYERS`` (``default``:
the block ``taskgeom inspect`` prints, ⌊B/2⌋ − 1; ``late``: the last block after which a block
still runs), each decoder of ``DECODERS`` and each seed of ``SEEDS``, the commands a user runs,
with their defaults: ``taskgeom fit --layers L --decoder D --seed S`` on ``FIT_IMAGES`` scenes (a
new set per seed), then ``taskgeom compare`` with every method and ``importance_keys`` (the
destination ablation: importance's tokens merged as ``tome_score`` merges them, into the kept
token nearest in attention-key cosine) at ``RATIOS`` on the same ``HELD_OUT`` other scenes. The
primary measure is compare's: KL(p_unpatched ‖ p_patched) for logits, 100·(1 − cos) for the CLS
embedding (lower is better).

Chosen before the first run on these models, and not changed after: the models and their recipe,
the seeds, layers, decoders, ratios, budgets, images, the fit's defaults, and the rules.

- *At a ratio* in ``CALLED_RATIOS``: importance *beats* a method when its mean over the
  (seed, image) pairs is lower and the two-sided paired Wilcoxon signed-rank test over those pairs
  gives p < 0.05; it *loses* when higher with p < 0.05; otherwise neither.
- *At a FLOP budget* b in ``BUDGETS``: each method's choice is its ratio with the lowest mean
  over the (seed, image) pairs among those whose FLOPs per image are ≤ b of the unpatched model's
  (FLOPs do not depend on the seed); importance's choice against ToMe's score's by the same rule.
  Where importance does not beat it, the row gives the computed reason: importance's FLOPs above
  ToMe's score's at the same ratio (its overhead: head, SPN and merge), and whether no importance
  setting fits the budget, or one does and its mean is higher.

Results: results/benchmarks/patch_fidelity.{csv,md}.

    python benchmarks/patch_fidelity.py [--archs vit deit] [--seeds 0 1 2]
"""

from __future__ import annotations

import argparse
import io
import json
import tempfile
import time
from contextlib import redirect_stderr, redirect_stdout
from dataclasses import replace
from pathlib import Path

import numpy as np
import pandas as pd
from stamp import write_stamped

from taskgeom.artifacts.tables import read_table
from taskgeom.artifacts.values import read_values
from taskgeom.evaluate.stats import wilcoxon_p
from taskgeom.fixtures import learned_vit, world_vit
from taskgeom.pipeline import cli
from taskgeom.pipeline.runtime import machine
from taskgeom.prune import methods

OUT = Path("results/benchmarks")
RATIOS = [0.1, 0.25, 0.4, 0.5, 0.6, 0.75, 0.9]
CALLED_RATIOS = [0.25, 0.5, 0.75]
BUDGETS = [0.6, 0.7, 0.8, 0.9]
DECODERS = {"logits": "kl", "cls": "degradation"}
FIT_IMAGES, HELD_OUT, SEEDS = 128, 128, [0, 1, 2]
HELD_START, FIT_START = world_vit.OTHER_START + 1000, world_vit.OTHER_START + 2000  # past the accuracy scenes
ABLATION, AGAINST = "importance_keys", ["tome_score", "random", "evit", "tome", "importance_keys"]


def register_ablation() -> None:
    """``importance_keys`` (module docstring) in the method registry, before compare's parser is built."""
    methods.METHODS[ABLATION] = replace(methods.METHODS["importance"], name=ABLATION,
                                        label="importance, merged by key cosine", merge="keys")


def taskgeom(*argv: str) -> str:
    """``taskgeom ARGV`` in this process; its stdout. RuntimeError with its stderr if it fails."""
    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        code = cli.main(list(argv))
    if code:
        raise RuntimeError(f"taskgeom {argv[0]} exited {code}: {err.getvalue()[-2000:]}")
    return out.getvalue()


def layers(depth: int) -> dict[str, int]:
    """The module docstring's blocks of a model with ``depth`` blocks."""
    return {"default": depth // 2 - 1, "late": depth - 2}


def scenes_folder(root: Path, name: str, start: int, count: int) -> Path:
    """``count`` world scenes from ``start`` at the models' resolution, as PNGs under ``root/name``."""
    scenes = world_vit.world_scenes(count, start=start, resolution=learned_vit.RESOLUTION)
    return world_vit.write_scenes(root / name, scenes["rgb"], range(count))


def one_run(flags: list[str], held: Path, root: Path, layer: int, decoder: str, seed: int) -> tuple[pd.DataFrame, dict]:
    """Fit and compare once: the per-image primary values (method, ratio, image, value) with each
    setting's FLOPs share, and the fit's held-out quality."""
    fit_images = scenes_folder(root, "fit-images", FIT_START + seed * FIT_IMAGES, FIT_IMAGES)
    taskgeom("fit", *flags, "--images", str(fit_images), "--layers", str(layer), "--decoder", decoder,
             "--seed", str(seed), "--out", str(root / "fit"))
    taskgeom("compare", *flags, "--images", str(held), "--fit", str(root / "fit"), "--ratios", *map(str, RATIOS),
             "--methods", "importance", *AGAINST, "--repeats", "1", "--out", str(root / "compare"))
    measure = DECODERS[decoder]
    values = read_values(root / "compare" / "compare_per_image.csv.gz")
    values = values[values.measure == measure][["method", "ratio", "image", "value"]]
    flops = read_table(root / "compare" / "compare.csv")[["method", "ratio", "flops_vs_unpatched"]]
    quality = json.loads((root / "fit" / "fit.json").read_text())["quality"]["head"]
    return values.merge(flops, on=["method", "ratio"]), {"rho": quality["rho"]["mean"],
                                                         "rho_floor": quality["rho_position_only"]["mean"]}


def call(mean_importance: float, mean_other: float, p: float) -> str:
    """The module docstring's rule."""
    if not p < 0.05:
        return "neither"
    return "importance beats it" if mean_importance < mean_other else "importance loses"


def paired(values: pd.DataFrame, a: tuple[str, float], b: tuple[str, float]) -> tuple[float, float, float, int]:
    """Means of settings a and b = (method, ratio) over their (seed, image) pairs, the paired p, pairs."""
    def of(s):
        part = values[(values.method == s[0]) & np.isclose(values.ratio, s[1])]
        return part.set_index(["seed", "image"]).value.sort_index()
    x, y = of(a), of(b)
    x, y = x.align(y, join="inner")
    return float(x.mean()), float(y.mean()), wilcoxon_p(x.to_numpy(), y.to_numpy()), len(x)


def at_ratios(values: pd.DataFrame) -> list[dict]:
    """Importance against each method at each ratio of ``CALLED_RATIOS``."""
    rows = []
    for ratio in CALLED_RATIOS:
        for other in AGAINST:
            mi, mo, p, n = paired(values, ("importance", ratio), (other, ratio))
            rows.append({"view": "ratio", "ratio": ratio, "against": other, "pairs": n, "importance": mi,
                         "other": mo, "p": p, "call": call(mi, mo, p)})
    return rows


def choice(values: pd.DataFrame, method: str, budget: float) -> float | None:
    """The method's ratio with the lowest mean among those within ``budget`` of the FLOPs; None if none is."""
    part = values[(values.method == method) & (values.flops_vs_unpatched <= budget + 1e-12)]
    return None if part.empty else float(part.groupby("ratio").value.mean().idxmin())


def overhead(values: pd.DataFrame) -> float:
    """Importance's FLOPs share minus ToMe's score's at the same ratio, the median over ``RATIOS``."""
    f = values.drop_duplicates(["method", "ratio"]).pivot(index="ratio", columns="method", values="flops_vs_unpatched")
    return float((f["importance"] - f["tome_score"]).median())


def at_budgets(values: pd.DataFrame) -> list[dict]:
    """Importance against ToMe's score at each budget of ``BUDGETS`` (module docstring), with the reason."""
    rows, extra = [], overhead(values)
    for budget in BUDGETS:
        ri, rt = choice(values, "importance", budget), choice(values, "tome_score", budget)
        row = {"view": "budget", "budget": budget, "against": "tome_score", "ratio": ri, "ratio_other": rt,
               "overhead": extra}
        if ri is None or rt is None:
            who = "neither method" if ri is None and rt is None else "importance" if ri is None else "tome_score"
            rows.append(row | {"call": f"{who}: no setting within the budget",
                               "reason": f"importance's overhead is {extra:.3f} of the unpatched FLOPs"
                               if ri is None and rt is not None else "neither reaches the budget"})
            continue
        mi, mo, p, n = paired(values, ("importance", ri), ("tome_score", rt))
        verdict = call(mi, mo, p)
        reason = "" if verdict == "importance beats it" else (
            f"tested and contrary: importance η {ri:g} (overhead {extra:.3f} of the FLOPs) has mean {mi:.4g} "
            f"against ToMe score η {rt:g}'s {mo:.4g}, p {p:.2g}")
        rows.append(row | {"pairs": n, "importance": mi, "other": mo, "p": p, "call": verdict, "reason": reason})
    return rows


def one_model(arch: str, seeds: list[int], root: Path) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Every layer × decoder × seed of one learned model: its calls and its fits' quality."""
    learned = learned_vit.learned_model(arch)
    flags = ["--timm", learned.name, "--weights", str(learned.weights), "--model-args", *learned.model_args(),
             "--threads", "1"]
    held = scenes_folder(root, "held-out", HELD_START, HELD_OUT)
    calls, facts = [], []
    for (where, layer) in layers(learned.args["depth"]).items():
        for decoder in DECODERS:
            frames = []
            for seed in seeds:
                values, quality = one_run(flags, held, root / f"{where}-{decoder}-{seed}", layer, decoder, seed)
                frames.append(values.assign(seed=seed))
                facts.append({"arch": arch, "accuracy": learned.accuracy, "layer": layer, "where": where,
                              "decoder": decoder, "seed": seed, **quality})
                print(f"{arch} (top-1 {learned.accuracy:.3f}) block {layer} {decoder} seed {seed}: {quality}",
                      flush=True)
            values = pd.concat(frames, ignore_index=True)
            key = {"arch": arch, "accuracy": learned.accuracy, "layer": layer, "where": where, "decoder": decoder,
                   "measure": DECODERS[decoder]}
            calls += [key | row for row in at_ratios(values) + at_budgets(values)]
    return pd.DataFrame(calls), pd.DataFrame(facts)


def summary(table: pd.DataFrame) -> list[str]:
    """One line per (model, block, decoder): importance against ToMe's score at the ratios and budgets."""
    lines = []
    for (arch, acc, where, layer, decoder), part in table.groupby(["arch", "accuracy", "where", "layer", "decoder"],
                                                                  sort=False):
        ratio = part[(part.view == "ratio") & (part.against == "tome_score")]
        budget = part[part.view == "budget"]
        beats = lambda df: int((df.call == "importance beats it").sum())  # noqa: E731
        lines.append(f"{arch} (held-out top-1 {acc:.3f}), block {layer} ({where}), {decoder}: importance beats "
                     f"ToMe's score at {beats(ratio)} of {len(ratio)} ratios and {beats(budget)} of {len(budget)} "
                     f"FLOP budgets; its destination against key cosine at the same tokens: "
                     + ", ".join(f"η {r.ratio:g} {r.call}" for r in part[(part.view == 'ratio')
                                                                         & (part.against == ABLATION)].itertuples()))
    return lines


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--archs", nargs="+", default=list(learned_vit.ARCHITECTURES), choices=learned_vit.ARCHITECTURES)
    ap.add_argument("--seeds", type=int, nargs="+", default=SEEDS)
    args = ap.parse_args()
    register_ablation()
    started = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        parts = [one_model(arch, args.seeds, Path(tmp) / arch) for arch in args.archs]
    table, facts = (pd.concat(p, ignore_index=True) for p in zip(*parts))
    lines = summary(table)
    header = (f"taskgeom fit and compare, with their defaults, on fixtures.learned_vit's models (held-out top-1 "
              f"printed; chance 0.05) at two blocks and two decoders, fit seeds {', '.join(map(str, args.seeds))}; "
              f"{FIT_IMAGES} scenes to fit (a new set per seed), {HELD_OUT} held-out scenes to compare; the "
              f"primary measure per image, lower is better. On {machine('cpu')}; one run of "
              f"{time.perf_counter() - started:.0f} s. A call needs the paired Wilcoxon p < 0.05 over the "
              f"(seed, image) pairs.\n\n")
    body = (header + "\n".join(f"- {line}" for line in lines)
            + "\n\n## Each fit: the head's held-out ρ against its targets and the position-only floor\n\n"
            + facts.to_markdown(index=False, floatfmt=".3f")
            + "\n\n## Importance against each method at a ratio, and against ToMe's score at a FLOP budget\n\n"
            + table.to_markdown(index=False, floatfmt=".4g"))
    write_stamped(OUT, "patch_fidelity", table, body, float_format="%.6g")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
