"""``taskgeom compare``'s files and printout (docs/patch.md, "Files"): the table (CSV, the source
of truth, and Markdown, followed there by the Pareto fronts and the FLOP budgets of ``budget``),
``compare.json`` (settings, the fit, every row, the timing rounds, the measures' definitions, the
fronts and budgets, provenance), the per-image values (``artifacts.values``) and the
fidelity-against-throughput figure (PNG and PDF), each with its provenance."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pandas as pd

from taskgeom.artifacts.atomic import write_json, write_text
from taskgeom.artifacts.figures import save_figure, series_styles
from taskgeom.artifacts.tables import ALPHA, write_table
from taskgeom.artifacts.values import write_values
from taskgeom.comparing import budget, timing
from taskgeom.comparing.fidelity import measures
from taskgeom.comparing.run import REFERENCE, UNPATCHED, Comparison, setting_name, table

FILES = {"csv": "compare.csv", "md": "compare.md", "json": "compare.json", "values": "compare_per_image.csv.gz",
         "png": "compare.png", "pdf": "compare.pdf"}
COLUMNS = {
    "method": "the method (prune.methods), or the unpatched model",
    "ratio": "eta, the fraction of patch tokens removed after the fit's block",
    "tokens": "tokens running after the fit's block (prefix + kept patches; EViT adds its fused token)",
    "*_mean, *_low, *_high": "a fidelity measure's mean over the images and its 95% percentile bootstrap interval",
    f"*_p_vs_{REFERENCE}": "two-sided paired Wilcoxon signed-rank p of the primary measure against importance at "
                           "the same ratio, over the images",
    "images_per_s, images_per_s_min, images_per_s_max": "throughput at the batch size: the median, slowest and "
                                                        "fastest of the timed rounds (warm-up excluded)",
    "speedup, speedup_min, speedup_max": "the median, smallest and largest over the timed rounds of the paired "
                                         "ratio: the setting's images/s over the unpatched model's in the same round",
    "speedup_call": "faster or slower (every round's ratio on one side of 1), within the spread (the ratios reach "
                    "1), or why none is called: the setting's or the unpatched model's rounds spread over 2x "
                    "(max / min), or one timed round",
    "flops": "FLOPs of one image's forward (torch.utils.flop_counter), the fit's networks included",
    "flops_vs_unpatched": "flops over the unpatched model's",
}


def caption(comp: Comparison, model: str) -> str:
    """The table's caption: model, decoder, measures, batch."""
    primary = measures(comp.decoder)[0]
    return (f"{model}: decoder {comp.decoder}; fidelity to the unpatched model (primary: {primary.name}, "
            f"{'lower' if primary.lower_is_better else 'higher'} is better); throughput at batch {comp.batch}, "
            f"median of the timed rounds [min, max]")


def iso_flop(comp: Comparison) -> budget.IsoFlop:
    """The Pareto fronts and FLOP budgets of ``comp`` on its primary measure (``budget``)."""
    primary = measures(comp.decoder)[0]
    seconds = {(r["method"], r["ratio"]): comp.timing[setting_name(r["method"], r["ratio"])].seconds
               for r in comp.rows}
    return budget.iso_flop(table(comp), comp.values, seconds, primary.name, primary.lower_is_better)


def as_json(comp: Comparison, model: str, fit: dict, settings: dict, names: list[str], provenance: dict,
            iso: budget.IsoFlop | None = None) -> dict:
    """Everything ``compare`` measured, JSON-ready; ``iso`` (default: ``iso_flop(comp)``) gives
    the ``pareto`` and ``budgets`` entries."""
    rounds = {name: {"median": t.median, "min": t.low, "max": t.high, "seconds": list(t.seconds),
                     "spread": timing.spread(t)} for name, t in comp.timing.items()}
    record = {"model": model, "decoder": comp.decoder, "fit": fit, "settings": settings, "images": names,
              "batch": comp.batch, "rows": comp.rows, "timing": rounds, "notes": comp.notes,
              "measures": {m.name: {"lower_is_better": m.lower_is_better, "definition": m.definition}
                           for m in measures(comp.decoder)},
              "columns": COLUMNS, **(iso or iso_flop(comp)).as_json(), "provenance": provenance}
    return json.loads(json.dumps(record, default=float), parse_constant=lambda c: None)


def figure(comp: Comparison, model: str, png: Path, pdf: Path, provenance: dict) -> None:
    """The primary measure's mean (bootstrap interval) against images/s (min–max), one curve per method
    over its ratios, each point labelled with its ratio; the unpatched model a black star at 0."""
    import matplotlib.pyplot as plt

    primary = measures(comp.decoder)[0]
    methods = [m for m in dict.fromkeys(r["method"] for r in comp.rows) if m != UNPATCHED]
    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    for method, style in zip(methods, series_styles(len(methods))):
        rows = sorted((r for r in comp.rows if r["method"] == method), key=lambda r: r["ratio"])
        x = np.array([r["images_per_s"] for r in rows])
        s = [r[primary.name] for r in rows]
        y = np.array([v["mean"] for v in s])
        yerr = np.array([[v["mean"] - v["low"] for v in s], [v["high"] - v["mean"] for v in s]])
        xerr = np.array([x - [r["images_per_s_min"] for r in rows], [r["images_per_s_max"] for r in rows] - x])
        ax.errorbar(x, y, yerr=yerr, xerr=xerr, label=method, capsize=2, lw=1.2, ms=5, **style)
        for r, xi, yi in zip(rows, x, y):
            ax.annotate(f"{r['ratio']:g}", (xi, yi), textcoords="offset points", xytext=(4, 3), fontsize=7)
    # the unpatched model is at distance 0 from itself (every primary measure is a distance)
    ax.plot([comp.rows[0]["images_per_s"]], [0.0], marker="*", color="black", ms=10, ls="none", label=UNPATCHED)
    ax.set(xlabel=f"images/s (batch {comp.batch})", ylabel=f"{primary.name} vs the unpatched model",
           title=f"{model}: decoder {comp.decoder}")
    ax.legend(fontsize=7)
    save_figure(fig, png, pdf, provenance=provenance)


def speedup_cell(row: dict | pd.Series) -> str:
    """A setting's speedup as read: "1.8 [1.6, 2] faster" where the rounds allow a reading, else
    why not (e.g. "rounds spread 10.4×: no speedup called"), never a figure then."""
    call = row["speedup_call"]
    if call not in (*timing.CALLED, timing.WITHIN, timing.REFERENCE):
        return call
    text = f"{row['speedup']:.3g} [{row['speedup_min']:.3g}, {row['speedup_max']:.3g}]"
    return text if call == timing.REFERENCE else f"{text} {call}"


def markdown(comp: Comparison, model: str, iso: budget.IsoFlop) -> str:
    """compare.md: the caption, the table (speedup as ``speedup_cell``), then the Pareto fronts
    and the FLOP budgets."""
    df = table(comp)
    df.insert(df.columns.get_loc("speedup"), "speedup [min, max]", [speedup_cell(r) for _, r in df.iterrows()])
    df = df.drop(columns=["speedup", "speedup_min", "speedup_max", "speedup_call"])
    front = iso.front.assign(speedup=[speedup_cell(r) for _, r in iso.front.iterrows()])
    front = front.drop(columns=["speedup_min", "speedup_max", "speedup_call"])
    front["throughput_front"] = front["throughput_front"].map(lambda x: "not ranked" if x is None else x)
    p = iso.primary
    return "\n\n".join([
        caption(comp, model), df.to_markdown(index=False, floatfmt=".4g"),
        f"## Pareto fronts\n\nPer method over its ratios, {p} mean against FLOPs (`flops_front`) and against "
        "throughput (`throughput_front`: only settings whose speedup is called are ranked, and one leaves the "
        "front only for a setting no worse in the mean and faster in every timed round).",
        front.to_markdown(index=False, floatfmt=".4g"), "\n".join(f"- {x}" for x in iso.front_lines()),
        f"## At a FLOP budget\n\nPer budget (a fraction of the unpatched model's FLOPs per image), each method's "
        f"setting of best {p} mean within it, and whether the winner's lead over the runner-up is significant "
        f"(paired Wilcoxon over the images, p < {ALPHA:g}, one test per budget).",
        "\n".join(f"- {x}" for x in iso.budget_lines()),
        iso.chosen.to_markdown(index=False, floatfmt=".4g")]) + "\n"


def write(comp: Comparison, model: str, out: str | Path, fit: dict, settings: dict, names: list[str],
          provenance: dict) -> dict:
    """Every file of ``FILES`` under ``out``; returns the JSON record."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    iso = iso_flop(comp)
    write_table(table(comp), out / FILES["csv"], provenance=provenance)
    write_text(out / FILES["md"], markdown(comp, model, iso), provenance)
    write_values(comp.values, out / FILES["values"], provenance=provenance)
    record = as_json(comp, model, fit, settings, names, provenance, iso)
    write_json(out / FILES["json"], record)
    figure(comp, model, out / FILES["png"], out / FILES["pdf"], provenance)
    return record


def _cell(value: float, digits: int = 3) -> str:
    return "—" if value is None or (isinstance(value, float) and math.isnan(value)) else f"{value:.{digits}g}"


def summary(comp: Comparison, model: str, iso: budget.IsoFlop | None = None) -> str:
    """The printed table: per setting, the primary measure's mean [interval], p against importance,
    images/s median [min, max], speedup as read (``speedup_cell``) and FLOPs; the notes; then the
    Pareto fronts and one line per FLOP budget (``iso``, default ``iso_flop(comp)``)."""
    primary = measures(comp.decoder)[0].name
    head = ["method", "ratio", "tokens", f"{primary} [95% CI]", f"p vs {REFERENCE}", "images/s [min, max]",
            "speedup", "GFLOPs"]
    lines = []
    for r in comp.rows:
        s = r.get(primary)
        cell = "—" if s is None else f"{_cell(s['mean'])} [{_cell(s['low'])}, {_cell(s['high'])}]"
        lines.append([r["method"], f"{r['ratio']:g}", str(r["tokens"]), cell,
                      _cell(r.get(f"{primary}_p_vs_{REFERENCE}")),
                      f"{r['images_per_s']:.3g} [{r['images_per_s_min']:.3g}, {r['images_per_s_max']:.3g}]",
                      speedup_cell(r), f"{r['flops'] / 1e9:.3g}"])
    widths = [max(len(x[i]) for x in [head, *lines]) for i in range(len(head))]
    fmt = lambda cells: "  ".join(c.ljust(w) for c, w in zip(cells, widths)).rstrip()   # noqa: E731
    iso = iso or iso_flop(comp)
    return "\n".join([caption(comp, model), fmt(head), *map(fmt, lines), *comp.notes,
                      f"Pareto fronts ({iso.primary} mean against FLOPs; against throughput, called speedups only):",
                      *(f"  {x}" for x in iso.front_lines()),
                      f"At a FLOP budget (best {iso.primary} mean within it, per method):",
                      *(f"  {x}" for x in iso.budget_lines())])

