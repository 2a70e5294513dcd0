"""``compare_model``: every method × ratio of ``taskgeom.patch`` against the unpatched model, on
held-out images (docs/patch.md, "taskgeom compare").

For each setting the patched model's own forward runs on every image (batches of one shape), and
its output is held to the unpatched model's by the decoder's measures (``fidelity``), per image;
each measure's mean gets its percentile bootstrap interval (``evaluate.stats.summarize``, 2000
resamples, seed 0) and the paired Wilcoxon signed-rank p against importance at the same ratio
(``evaluate.stats.wilcoxon_p``). Throughput is timed round-robin over every setting and the
unpatched model on one batch (``timing.interleaved``), and each setting's speedup read from the
paired rounds with its call (``timing.speedup``); FLOPs per image by the flop counter
(``evaluate.cost.count_flops``), the fit's networks included. Each setting's random draws start
from ``seed``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd
import torch
from torch import Tensor, nn

from taskgeom.comparing.fidelity import fidelity, measures
from taskgeom.comparing.outputs import batches, decoder_output, timing_batch
from taskgeom.comparing.timing import Throughput, interleaved, speedup
from taskgeom.evaluate.cost import count_flops
from taskgeom.evaluate.stats import summarize, wilcoxon_p
from taskgeom.patching.families import grid_of, structure
from taskgeom.patching.patch import check_fit, check_method, check_ratio, install, unpatch
from taskgeom.prune.methods import METHODS
from taskgeom.prune.select import num_removed

UNPATCHED = "unpatched"
REFERENCE = "importance"
COST_COLUMNS = ("images_per_s", "images_per_s_min", "images_per_s_max", "speedup", "speedup_min", "speedup_max",
                "speedup_call", "flops", "flops_vs_unpatched")


@dataclass
class Comparison:
    """What ``compare_model`` measured.

    Attributes:
        decoder: the fit's decoder, whose measures were taken.
        rows: one dict per setting (the unpatched model first): method, ratio, tokens, each
            measure's summary, p against importance, throughput, FLOPs.
        values: the per-image values, tidy: method, ratio, image, measure, value.
        timing: setting -> its Throughput.
        batch: the timing batch's images.
        notes: what was left out and why.
    """

    decoder: str
    rows: list[dict] = field(default_factory=list)
    values: pd.DataFrame = field(default_factory=pd.DataFrame)
    timing: dict[str, Throughput] = field(default_factory=dict)
    batch: int = 0
    notes: list[str] = field(default_factory=list)


def setting_name(method: str, ratio: float) -> str:
    """The name of one setting, e.g. ``importance@0.5``; the unpatched model's is ``unpatched``."""
    return UNPATCHED if method == UNPATCHED else f"{method}@{ratio:g}"


def _outputs(model: nn.Module, decoder: str, images: Sequence[Tensor], size: int, linear) -> list[Tensor]:
    """The decoder's output per image, batch by batch, under inference mode."""
    out: list[Tensor] = [torch.empty(0)] * len(images)
    with torch.inference_mode():
        for idx, x in batches(images, size):
            y = decoder_output(model, decoder, x, linear)
            for j, i in enumerate(idx):
                out[i] = y[j]
    return out


def _tokens(struct, grid_patches: int, method: str, ratio: float) -> int:
    """Tokens running after the fit's block: prefix + patches − removed (+1 for EViT's fused token;
    ToMe's one bipartite matching removes at most half the tokens it may merge, ``prune.tome``)."""
    n = struct.prefix + grid_patches
    if method == UNPATCHED:
        return n
    k = num_removed(grid_patches, ratio)
    if METHODS[method].merge == "bipartite":
        k = min(k, (n - (struct.prefix > 0)) // 2)
    return n - k + (METHODS[method].merge == "fuse")


def _rows(comp: Comparison, values: pd.DataFrame, names: Sequence[str]) -> None:
    """Each setting's summaries and its p against importance at its ratio, into ``comp.rows``."""
    for row in comp.rows:
        if row["method"] == UNPATCHED:
            continue
        mine = values[(values.method == row["method"]) & (values.ratio == row["ratio"])]
        ref = values[(values.method == REFERENCE) & (values.ratio == row["ratio"])]
        for m in measures(comp.decoder):
            a = mine[mine.measure == m.name].set_index("image").value.reindex(names).to_numpy()
            row[m.name] = summarize(a).as_dict()
            b = ref[ref.measure == m.name].set_index("image").value.reindex(names).to_numpy()
            row[f"{m.name}_p_vs_{REFERENCE}"] = (None if row["method"] == REFERENCE or not len(b)
                                                 else wilcoxon_p(a, b))


def compare_model(model: nn.Module, fitted: Any, images: Sequence[Tensor], names: Sequence[str], *,
                  ratios: Sequence[float], methods: Sequence[str], batch_size: int, repeats: int, seed: int = 0,
                  linear: nn.Module | None = None, progress=lambda it, **kw: it) -> Comparison:
    """Fidelity, throughput and FLOPs of every method × ratio (module docstring).

    Args:
        model: the fitted model (``fitting.check_model`` passed), unpatched; left unpatched.
        fitted: its fit.
        images: (C, H, W) preprocessed held-out images.
        names: their names.
        ratios: η values in [0, 1).
        methods: names in ``prune.methods``.
        batch_size: images per forward, for the outputs and the timing batch.
        repeats: timed rounds.
        seed: seeds random's draws.
        linear: decoder ``linear``'s head.
        progress: wraps the loop over settings.

    Returns:
        The Comparison.

    Raises:
        PatchError: a ratio, method or fit ``taskgeom.patch`` refuses (one line).
    """
    decoder, struct = fitted.decoder, structure(model)
    ratios, checked = [check_ratio(r) for r in ratios], [check_method(m) for m in methods]
    for m in checked:
        check_fit(fitted, struct, m)
    unpatch(model)
    comp = Comparison(decoder)
    full = _outputs(model, decoder, images, batch_size, linear)
    rows, cols = grid_of(struct, tuple(images[0].shape))
    patches = rows * cols
    settings = {UNPATCHED: lambda: unpatch(model)}
    comp.rows.append({"method": UNPATCHED, "ratio": 0.0, "tokens": _tokens(struct, patches, UNPATCHED, 0.0)})
    frames = []
    for m, ratio in progress([(m, r) for m in checked for r in ratios], desc="compare", unit="setting"):
        settings[setting_name(m.name, ratio)] = lambda m=m, ratio=ratio: install(model, fitted, ratio, m, seed)
        settings[setting_name(m.name, ratio)]()
        out = _outputs(model, decoder, images, batch_size, linear)
        unpatch(model)
        per = fidelity(decoder, torch.stack(full), torch.stack(out))
        frames += [pd.DataFrame({"method": m.name, "ratio": ratio, "image": list(names), "measure": name,
                                 "value": v}) for name, v in per.items()]
        comp.rows.append({"method": m.name, "ratio": ratio, "tokens": _tokens(struct, patches, m.name, ratio)})
    comp.values = pd.concat(frames, ignore_index=True)
    _rows(comp, comp.values, names)
    _costs(comp, model, settings, timing_batch(images, batch_size), decoder, repeats, linear)
    unpatch(model)
    return comp


def _costs(comp: Comparison, model: nn.Module, settings: dict, x: Tensor, decoder: str, repeats: int,
           linear) -> None:
    """Throughput (interleaved) and FLOPs per image of every setting, into ``comp``."""
    run = lambda: decoder_output(model, decoder, x, linear)   # noqa: E731
    comp.batch = x.shape[0]
    comp.timing = interleaved(settings, run, x.shape[0], repeats)
    base = comp.timing[UNPATCHED]
    for row in comp.rows:
        name = setting_name(row["method"], row["ratio"])
        settings[name]()
        flops = count_flops(lambda: decoder_output(model, decoder, x[:1], linear), model)
        t = comp.timing[name]
        s = speedup(t, base)
        row.update({"images_per_s": t.median, "images_per_s_min": t.low, "images_per_s_max": t.high,
                    "speedup": s.median, "speedup_min": s.low, "speedup_max": s.high, "speedup_call": s.call,
                    "flops": flops})
    unflops = comp.rows[0]["flops"]
    for row in comp.rows:
        row["flops_vs_unpatched"] = row["flops"] / unflops


def measure_columns(decoder: str) -> list[str]:
    """The table's fidelity columns for ``decoder``: per measure its mean, low and high, then the primary's p."""
    cols = [f"{m.name}_{part}" for m in measures(decoder) for part in ("mean", "low", "high")]
    return [*cols, f"{measures(decoder)[0].name}_p_vs_{REFERENCE}"]


def table(comp: Comparison) -> pd.DataFrame:
    """One row per setting (the unpatched model first): method, ratio, tokens, the measures
    (``measure_columns``), images/s (median, min, max), speedup (median, min, max of the paired
    rounds, and its call), FLOPs per image and their ratio.

    Args:
        comp: the Comparison.

    Returns:
        The table.
    """
    rows = []
    for row in comp.rows:
        flat = {k: row[k] for k in ("method", "ratio", "tokens")}
        for m in measures(comp.decoder):
            summary = row.get(m.name) or {}
            flat |= {f"{m.name}_{part}": summary.get(part, np.nan) for part in ("mean", "low", "high")}
        p = row.get(f"{measures(comp.decoder)[0].name}_p_vs_{REFERENCE}")
        flat[f"{measures(comp.decoder)[0].name}_p_vs_{REFERENCE}"] = np.nan if p is None else p
        flat |= {k: row[k] for k in COST_COLUMNS}
        rows.append(flat)
    return pd.DataFrame(rows)
