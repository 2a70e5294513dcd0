"""Where importance's overhead goes: the FLOPs a model patched by ``taskgeom.patch(..., "importance")``
spends on choosing and merging tokens, per component, against the unpatched model's FLOPs.

Models with random weights (nothing downloaded; FLOPs do not depend on the weights), each with a
fit directory of random networks of ``taskgeom fit``'s architecture (``fitting.train.HEAD`` and
``SPN`` at ``network_width`` of the model's width, rank ``RANK``, the fit's default r) written by
``fitting.checkpoint.write_fit``:

- ``learned_vit``, ``learned_deit``: ``fixtures.learned_vit``'s architectures (64 px, 8-px
  patches, 4 blocks, width 64), fitted at block 1, the models ``patch_fidelity.py`` judges on;
- ``vit_tiny_64``: timm ``vit_tiny_patch16_224``'s architecture (width 192) at 64 px, 8-px
  patches, 4 blocks, 20 classes, fitted at block 1;
- ``vit_base_224``: timm ``vit_base_patch16_224`` at 224 px, fitted at block 4 (as
  ``patch_speed.py``).

For η in ``RATIOS``, one image's forward of the patched model runs under
``torch.utils.flop_counter`` (as ``evaluate.cost.count_flops`` counts it for ``taskgeom compare``),
after one forward that fills what the patch computes once per fit. Each component's FLOPs are the
counter's increase while its function runs, less what the other components inside it count:

- ``head``: the importance head scoring every token (``patching.reduce.scores_of``);
- ``spn_trunk``: the SPN's encoder and energies (``patching.pullback.trunk``);
- ``mode_rows``: the SPN's mode projection: the removed tokens' mode rows (``pullback.mode_rows``)
  or the tokens' products with its weights (``pullback.token_projections``), by ``pullback.route``
  (the ``route`` column);
- ``solve``: the moment Gram, its Cholesky factor and R⁻¹ (``pullback._factor``);
- ``distance``: the rest of ``pullback.pullback_distance``: U_tᵀ(x_s − x_t), the energies, ε‖·‖²;
- ``merge``: ``merge_into_nearest`` and the owners (gathers and scatters: no counted FLOPs).

``once_per_fit`` is what the patch computes once per SPN and keeps (``pullback.weights``).
Targets (``TARGETS``): head + SPN + merge ≤ 10% of the unpatched FLOPs on the 64-px models and
≤ 3% on ``vit_base_224``, at every η.

Results: results/benchmarks/patch_overhead.{csv,md}.

    python benchmarks/patch_overhead.py [--models learned_vit learned_deit vit_tiny_64 vit_base_224]
"""

from __future__ import annotations

import argparse
import contextlib
import tempfile
import time
from collections import defaultdict
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd
import timm
import torch
from stamp import write_stamped
from torch.utils.flop_counter import FlopCounterMode

import taskgeom
from taskgeom.evaluate.cost import count_flops, counting
from taskgeom.fitting.checkpoint import write_fit
from taskgeom.fitting.identity import describe
from taskgeom.fitting.train import HEAD, SPN, network_width
from taskgeom.fixtures import learned_vit
from taskgeom.metric.head import ImportanceHead
from taskgeom.metric.spn import SpectralPullbackNetwork
from taskgeom.patching import pullback, reduce
from taskgeom.patching.patch import patched
from taskgeom.pipeline.runtime import machine
from taskgeom.prune.select import num_removed

OUT = Path("results/benchmarks")
RATIOS = (0.25, 0.5, 0.75)
RANK = 20
TARGETS = {"learned_vit": 0.10, "learned_deit": 0.10, "vit_tiny_64": 0.10, "vit_base_224": 0.03}
# component -> (module, function) pairs whose FLOPs it holds; names a version of the code lacks are skipped
COMPONENTS: dict[str, list[tuple[object, str]]] = {
    "head": [(reduce, "scores_of")],
    "spn_trunk": [(pullback, "trunk")],
    "mode_rows": [(pullback, "token_projections"), (pullback, "mode_rows")],
    "solve": [(pullback, "_factor")],
    "distance": [(reduce, "pullback_distance")],
    "merge": [(reduce, "merge_into_nearest"), (reduce, "owners")],
}
@dataclass(frozen=True)
class Setting:
    """A model of the benchmark: timm name and overrides, the fit's block, the image side and patch."""

    name: str
    args: dict
    layer: int
    side: int
    patch: int

    @property
    def grid(self) -> int:
        return self.side // self.patch


MODELS = {
    "learned_vit": Setting(*learned_vit.ARCHITECTURES["vit"], 1, 64, 8),
    "learned_deit": Setting(*learned_vit.ARCHITECTURES["deit"], 1, 64, 8),
    "vit_tiny_64": Setting("vit_tiny_patch16_224", dict(img_size=64, patch_size=8, depth=4, num_classes=20), 1, 64, 8),
    "vit_base_224": Setting("vit_base_patch16_224", {}, 4, 224, 16),
}


def fit_directory(model: torch.nn.Module, s: Setting, directory: Path) -> Path:
    """A fit of ``model`` at block ``s.layer`` with random networks of ``taskgeom fit``'s architecture."""
    torch.manual_seed(0)
    prefix, dim = model.num_prefix_tokens, model.embed_dim
    tokens, width = prefix + s.grid ** 2, network_width(dim)
    head = {"kind": "importance_head", "tokens": tokens, "dim": dim, "width": width, "heads": HEAD["heads"],
            "layers": HEAD["layers"]}
    spn = {"kind": "spn", "tokens": tokens, "dim": dim, "rank": RANK, "width": width, "depth": SPN["depth"],
           "heads": SPN["heads"]}
    nets = {"head": (ImportanceHead(**{k: v for k, v in head.items() if k != "kind"}), head),
            "spn": (SpectralPullbackNetwork(**{k: v for k, v in spn.items() if k != "kind"}), spn)}
    record = {"layer": s.layer, "decoder": "logits", "path": "merge", "model": describe(model), "quality": {},
              "layout": {"prefix": prefix, "rows": s.grid, "cols": s.grid, "tokens": tokens, "dim": dim}}
    write_fit(directory, record, nets, {"benchmark": "patch_overhead", "weights": "random"})
    return directory


@dataclass
class Ledger:
    """Each component's own FLOPs: the counter's increase during its functions, less the nested ones'."""

    counter: FlopCounterMode | None = None
    flops: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    stack: list[int] = field(default_factory=list)

    def wrap(self, name: str, fn: Callable) -> Callable:
        def counted(*args, **kwargs):
            start = self.counter.get_total_flops()
            self.stack.append(0)
            try:
                return fn(*args, **kwargs)
            finally:
                inner, total = self.stack.pop(), self.counter.get_total_flops() - start
                self.flops[name] += total - inner
                if self.stack:
                    self.stack[-1] += total
        return counted


@contextlib.contextmanager
def wrapped(ledger: Ledger) -> Iterator[None]:
    """Every function of ``COMPONENTS`` that exists replaced by its counted version, restored after."""
    saved = []
    for name, functions in COMPONENTS.items():
        for module, attr in functions:
            if hasattr(module, attr):
                saved.append((module, attr, getattr(module, attr)))
                setattr(module, attr, ledger.wrap(name, getattr(module, attr)))
    try:
        yield
    finally:
        for module, attr, fn in reversed(saved):
            setattr(module, attr, fn)


def profile(model: torch.nn.Module, x: torch.Tensor) -> tuple[int, dict[str, int]]:
    """FLOPs of one forward of ``model`` on x (1, C, H, W) and each component's share of them."""
    ledger = Ledger()
    with wrapped(ledger), counting(model) as counter:
        ledger.counter = counter
        model(x)
    return int(counter.get_total_flops()), {name: ledger.flops.get(name, 0) for name in COMPONENTS}


def once_per_fit(model: torch.nn.Module) -> int:
    """FLOPs of what the patch computes once per SPN (``pullback.weights``)."""
    spn = patched(model).learned.spn
    pullback._WEIGHTS.pop(spn, None)
    with FlopCounterMode(display=False) as counter, torch.no_grad():
        pullback.weights(spn)
    return int(counter.get_total_flops())


def one_model(key: str) -> list[dict]:
    """Rows of ``key``'s model at every ratio."""
    s = MODELS[key]
    torch.manual_seed(0)
    model = timm.create_model(s.name, pretrained=False, **s.args).eval()
    x = torch.randn(1, 3, s.side, s.side)
    base = profile(model, x)[0]
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        fit = fit_directory(model, s, Path(tmp) / "fit")
        for ratio in RATIOS:
            taskgeom.patch(model, fit, ratio, "tome_score")
            tome = count_flops(lambda: model(x), model)
            taskgeom.patch(model, fit, ratio, "importance")
            with torch.inference_mode():
                model(x)
            once = once_per_fit(model)
            removed, spn = num_removed(s.grid ** 2, ratio), patched(model).learned.spn
            way = pullback.route(s.grid ** 2 - removed, removed, spn.dim, spn.rank, spn.modes.in_features)
            total, parts = profile(model, x)
            if total != count_flops(lambda: model(x), model):
                raise RuntimeError(f"{key} η {ratio}: the profile's count differs from count_flops's")
            rows.append({"model": key, "ratio": ratio, "width": spn.modes.in_features, "removed": removed,
                         "route": way, "unpatched_gflops": base / 1e9, "patched_gflops": total / 1e9,
                         "tome_score_gflops": tome / 1e9, **{f"{name}_mflops": v / 1e6 for name, v in parts.items()},
                         "overhead_share": sum(parts.values()) / base, "target": TARGETS[key],
                         "met": sum(parts.values()) / base <= TARGETS[key], "once_per_fit_mflops": once / 1e6})
            taskgeom.unpatch(model)
    return rows


def summary(df: pd.DataFrame) -> list[str]:
    """One line per model: the overhead share at each η and whether the target holds."""
    lines = []
    for key, part in df.groupby("model", sort=False):
        shares = ", ".join(f"η {r.ratio:g}: {100 * r.overhead_share:.1f}%" for r in part.itertuples())
        target = part.target.iloc[0]
        lines.append(f"{key} (network width {part.width.iloc[0]}): head + SPN + merge {shares} of the unpatched "
                     f"FLOPs; target ≤ {100 * target:.0f}%: {'met' if part.met.all() else 'not met'}"
                     + ("" if part.met.all() else f" (at η {', '.join(f'{r:g}' for r in part[~part.met].ratio)})"))
    return lines


def shares_table(df: pd.DataFrame) -> str:
    """Markdown: each component's share of the unpatched FLOPs, in %, per model and η."""
    parts = [f"{name}_mflops" for name in COMPONENTS]
    view = df[["model", "ratio", "width", "removed", "route"]].copy()
    for col in parts:
        view[col.removesuffix("_mflops")] = 100 * df[col] * 1e6 / (df.unpatched_gflops * 1e9)
    view["total"] = 100 * df.overhead_share
    view["patched_vs_unpatched"] = df.patched_gflops / df.unpatched_gflops
    view["tome_score_vs_unpatched"] = df.tome_score_gflops / df.unpatched_gflops
    return view.to_markdown(index=False, floatfmt=".3g")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", nargs="+", choices=tuple(MODELS), default=list(MODELS))
    args = ap.parse_args()
    started = time.perf_counter()
    df = pd.DataFrame([row for key in args.models for row in one_model(key)])
    lines = summary(df)
    header = (f"FLOPs of importance's head, SPN and merge in one image's forward of a patched model (random weights, "
              f"SPN rank {RANK}), per component, in % of the unpatched model's FLOPs counted alike; on "
              f"{machine('cpu')}, one run of {time.perf_counter() - started:.0f} s, counted as `taskgeom compare` "
              "counts them (`evaluate.cost.count_flops`). `patched_vs_unpatched` and `tome_score_vs_unpatched`: the "
              "whole forward.\n\n")
    once = df.groupby("model").once_per_fit_mflops.first()
    body = (header + "\n".join(f"- {line}" for line in lines) + "\n- once per fit (kept with the SPN): "
            + ", ".join(f"{k} {v:.3g} MFLOPs" for k, v in once.items()) + "\n\n" + shares_table(df)
            + "\n\nMFLOPs per component:\n\n"
            + df.drop(columns=["target", "met"]).to_markdown(index=False, floatfmt=".4g"))
    write_stamped(OUT, "patch_overhead", df, body, float_format="%.6g")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
