"""Does importance keep a briefly trained model closer to itself than ToMe's score and random?
The paper (Table 2, §7.3) says importance-guided merging has the lowest degradation at every
ratio on CLS decoders; this measures it on the user's path, three times.

For each model seed 0, 1, 2: ``fixtures.world_vit.train_world_vit(seed)`` (a timm ViT trained for
300 steps to classify the world's scenes), then the commands a user runs, with their defaults:
``taskgeom fit`` (decoder ``logits``, its default block) on 64 scenes, ``taskgeom inspect`` at
the fit's block on the same scenes, then ``taskgeom compare``
with every method at the paper's ratios (0.05 … 0.5) on 64 other scenes. The fidelity measure is
compare's primary one for logits: KL(p_unpatched ‖ p_patched) per image (lower is better).

Chosen before the first run, and not changed after: the seeds, the ratios, the images, the fit's
defaults, and the rule. Importance *beats* a method at a ratio when its mean KL over the
3 × 64 (seed, image) pairs is lower and the two-sided paired Wilcoxon signed-rank test over those
pairs gives p < 0.05; it *loses* when the mean is higher with p < 0.05; otherwise neither. Each
seed's own means and p are in the CSV, with the model's held-out accuracy (chance is 1/20), the
fit's held-out quality (the head's ρ against its targets and the position-only floor; the SPN's
subspace alignment V1, trained and untrained, whose distance the importance merge uses) and
``taskgeom inspect``'s reading at the fit's block (κ_cap(r), token CV, regime; the inspected
images are the fit's), which say whether a failure lies in the learned scores or in what the
scores are asked to predict.

``--ablation`` (added after the first run, in which importance lost to ToMe's score at every
ratio, to say where the loss comes from) registers one more method, ``importance_keys``:
importance's scores choose the tokens that go, and they are merged as ``random`` and
``tome_score`` merge them (into the kept token nearest in attention-key cosine, size-weighted)
instead of by the SPN's pullback distance with weights exp(score)·size. Its results go to
results/benchmarks/patch_fidelity_ablation.{csv,md}; the rule and everything else are the same.

Results: results/benchmarks/patch_fidelity.{csv,md}.

    python benchmarks/patch_fidelity.py [--seeds 0 1 2] [--ablation]
"""

from __future__ import annotations

import argparse
import io
import json
import tempfile
import time
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path

import numpy as np
import pandas as pd
import torch
from safetensors.torch import save_file
from stamp import write_stamped

from taskgeom.artifacts.values import read_values
from taskgeom.evaluate.stats import wilcoxon_p
from taskgeom.fixtures import world_vit
from taskgeom.inspection.inputs import timm_transform
from taskgeom.pipeline import cli
from taskgeom.pipeline.runtime import machine

OUT = Path("results/benchmarks")
RATIOS = [0.05, 0.10, 0.15, 0.20, 0.30, 0.40, 0.50]  # the paper's Table 2
FIT_IMAGES, HELD_OUT = 64, 64
AGAINST = ["tome_score", "random", "evit", "tome"]
ABLATION = "importance_keys"


def register_ablation() -> None:
    """``importance_keys`` (module docstring) in the method registry, before compare's parser is built."""
    from dataclasses import replace

    from taskgeom.prune import methods

    methods.METHODS[ABLATION] = replace(methods.METHODS["importance"], name=ABLATION,
                                        label="importance, merged by key cosine", merge="keys")
    AGAINST.append(ABLATION)


def taskgeom(*argv: str) -> str:
    """``taskgeom ARGV`` in this process; its stdout. RuntimeError with its stderr if it fails."""
    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        code = cli.main(list(argv))
    if code:
        raise RuntimeError(f"taskgeom {argv[0]} exited {code}: {err.getvalue()[-2000:]}")
    return out.getvalue()


def accuracy(model: torch.nn.Module, rgb: np.ndarray, labels: np.ndarray) -> float:
    """Top-1 accuracy of ``model`` on images rgb (S, H, W, 3) uint8 with their labels (S,)."""
    from PIL import Image

    transform, _ = timm_transform(model)
    x = torch.stack([transform(Image.fromarray(a)) for a in rgb])
    with torch.no_grad():
        return float((model(x).argmax(-1).numpy() == labels).mean())


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


def one_seed(seed: int, root: Path) -> tuple[pd.DataFrame, dict]:
    """Train, fit and compare for one model seed: the per-image KL (method, ratio, image, value) and
    the seed's facts (accuracy, the fit's held-out quality)."""
    scenes, model, flags, fit_images = fit_world_model(seed, root)
    held = range(FIT_IMAGES, FIT_IMAGES + HELD_OUT)
    held_images = world_vit.write_scenes(root / "held-out", scenes["rgb"], held)
    layer = json.loads((root / "fit" / "fit.json").read_text())["layer"]
    taskgeom("inspect", *flags, "--images", str(fit_images), "--layers", str(layer), "--decoder", "logits",
             "--out", str(root / "inspect"))
    taskgeom("compare", *flags, "--images", str(held_images), "--fit", str(root / "fit"), "--ratios",
             *map(str, RATIOS), "--repeats", "1", "--out", str(root / "compare"))
    values = read_values(root / "compare" / "compare_per_image.csv.gz")
    kl = values[values.measure == "kl"][["method", "ratio", "image", "value"]].assign(seed=seed)
    quality = json.loads((root / "fit" / "fit.json").read_text())["quality"]
    spn, quality = quality["spn"], quality["head"]
    probe = json.loads((root / "inspect" / "inspect.json").read_text())["probes"][0]
    facts = {"seed": seed, "accuracy": accuracy(model, scenes["rgb"][list(held)], scenes["label"][list(held)]),
             "layer": layer, "kappa_cap": probe["summary"]["kappa_cap"]["mean"],
             "token_cv": probe["summary"]["cv"]["mean"], "regime": probe["regime"],
             "rho": quality["rho"]["mean"], "rho_floor": quality["rho_position_only"]["mean"],
             "spn_v1": spn["v1"]["mean"], "spn_v1_untrained": spn["v1_untrained"]["mean"],
             "verdict": quality["verdict"]}
    return kl, facts


def call(mean_importance: float, mean_other: float, p: float) -> str:
    """The module docstring's rule."""
    if not p < 0.05:
        return "neither"
    return "importance beats it" if mean_importance < mean_other else "importance loses"


def verdicts(kl: pd.DataFrame, keys: list[str]) -> pd.DataFrame:
    """Per ratio (and per ``keys`` group), importance against each other method on paired images."""
    rows = []
    for group, part in kl.groupby(keys + ["ratio"]):
        wide = part.pivot_table(index=["seed", "image"], columns="method", values="value")
        for other in AGAINST:
            if other not in wide:
                continue
            a, b = wide["importance"].to_numpy(), wide[other].to_numpy()
            p = wilcoxon_p(a, b)
            group = group if isinstance(group, tuple) else (group,)
            rows.append({**dict(zip(keys + ["ratio"], group)), "against": other, "pairs": len(a),
                         "kl_importance": a.mean(), "kl_other": b.mean(), "p": p,
                         "call": call(a.mean(), b.mean(), p)})
    return pd.DataFrame(rows)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--ablation", action="store_true", help="add importance_keys (module docstring)")
    args = ap.parse_args()
    if args.ablation:
        register_ablation()
    started = time.perf_counter()
    kls, facts = [], []
    with tempfile.TemporaryDirectory() as tmp:
        for seed in args.seeds:
            kl, fact = one_seed(seed, Path(tmp) / f"seed{seed}")
            kls.append(kl)
            facts.append(fact)
            print(f"seed {seed}: {fact}", flush=True)
    kl = pd.concat(kls, ignore_index=True)
    pooled = verdicts(kl.assign(pool="all seeds"), ["pool"]).drop(columns="pool").assign(seed="all")
    per_seed = verdicts(kl, ["seed"])
    table = pd.concat([pooled, per_seed], ignore_index=True).astype({"seed": str})
    report(table, pd.DataFrame(facts).astype({"seed": str}), time.perf_counter() - started,
           "patch_fidelity_ablation" if args.ablation else "patch_fidelity")


def report(table: pd.DataFrame, facts: pd.DataFrame, elapsed: float, name: str) -> None:
    """Print the pooled calls and write results/benchmarks/<name>.{csv,md}."""
    pooled = table[table.seed == "all"]
    lines = []
    for other in AGAINST:
        part = pooled[pooled.against == other]
        counts = part.call.value_counts()
        held = ", ".join(f"{r:g}" for r in part[part.call == "importance beats it"].ratio) or "none"
        lines.append(f"importance against {other}: beats it at {counts.get('importance beats it', 0)} of "
                     f"{len(part)} ratios ({held}), loses at {counts.get('importance loses', 0)}")
    paper = pooled[pooled.against == "tome_score"]
    holds = bool((paper.call == "importance beats it").all())
    lines.append("the paper's claim (importance below ToMe's score at every CLS ratio): "
                 + ("holds here" if holds else "does not hold here at every ratio"))
    header = (f"taskgeom fit and compare, with their defaults, on the world's ViT (fixtures.world_vit) trained with "
              f"model seeds {', '.join(map(str, facts.seed))}; {FIT_IMAGES} scenes to fit, {HELD_OUT} held-out scenes "
              f"to compare; KL(unpatched ‖ patched) per image, lower is better. On {machine('cpu')}; one run of "
              f"{elapsed:.0f} s. A call needs the paired Wilcoxon p < 0.05 over the (seed, image) pairs.\n\n")
    body = (header + "\n".join(f"- {line}" for line in lines)
            + "\n\n## Each model: held-out accuracy and the fit's held-out quality\n\n"
            + facts.to_markdown(index=False, floatfmt=".3f")
            + "\n\n## Importance against each method, pooled over the seeds, then per seed\n\n"
            + table.to_markdown(index=False, floatfmt=".4g"))
    write_stamped(OUT, name, table.merge(facts, how="left", on="seed"), body, float_format="%.6g")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
