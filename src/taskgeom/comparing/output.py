"""``taskgeom compare``'s files and printout (docs/patch.md, "Files"): the table (CSV, the source
of truth, and Markdown), ``compare.json`` (settings, the fit, every row, the timing rounds, the
measures' definitions, provenance), the per-image values (``artifacts.values``) and the
fidelity-against-throughput figure (PNG and PDF), each with its provenance."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np

from taskgeom.artifacts.atomic import write_json
from taskgeom.artifacts.figures import save_figure, series_styles
from taskgeom.artifacts.tables import write_table
from taskgeom.artifacts.values import write_values
from taskgeom.comparing.fidelity import measures
from taskgeom.comparing.run import REFERENCE, UNPATCHED, Comparison, table

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
    "speedup": "median images/s over the unpatched model's median images/s",
    "flops": "FLOPs of one image's forward (torch.utils.flop_counter), the fit's networks included",
    "flops_vs_unpatched": "flops over the unpatched model's",
}


def caption(comp: Comparison, model: str) -> str:
    """The table's caption: model, decoder, measures, batch."""
    primary = measures(comp.decoder)[0]
    return (f"{model}: decoder {comp.decoder}; fidelity to the unpatched model (primary: {primary.name}, "
            f"{'lower' if primary.lower_is_better else 'higher'} is better); throughput at batch {comp.batch}, "
            f"median of the timed rounds [min, max]")


def as_json(comp: Comparison, model: str, fit: dict, settings: dict, names: list[str], provenance: dict) -> dict:
    """Everything ``compare`` measured, JSON-ready."""
    timing = {name: {"median": t.median, "min": t.low, "max": t.high, "seconds": list(t.seconds)}
              for name, t in comp.timing.items()}
    record = {"model": model, "decoder": comp.decoder, "fit": fit, "settings": settings, "images": names,
              "batch": comp.batch, "rows": comp.rows, "timing": timing, "notes": comp.notes,
              "measures": {m.name: {"lower_is_better": m.lower_is_better, "definition": m.definition}
                           for m in measures(comp.decoder)},
              "columns": COLUMNS, "provenance": provenance}
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


def write(comp: Comparison, model: str, out: str | Path, fit: dict, settings: dict, names: list[str],
          provenance: dict) -> dict:
    """Every file of ``FILES`` under ``out``; returns the JSON record."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    df = table(comp)
    write_table(df, out / FILES["csv"], out / FILES["md"], caption=caption(comp, model), provenance=provenance)
    write_values(comp.values, out / FILES["values"], provenance=provenance)
    record = as_json(comp, model, fit, settings, names, provenance)
    write_json(out / FILES["json"], record)
    figure(comp, model, out / FILES["png"], out / FILES["pdf"], provenance)
    return record


def _cell(value: float, digits: int = 3) -> str:
    return "—" if value is None or (isinstance(value, float) and math.isnan(value)) else f"{value:.{digits}g}"


def summary(comp: Comparison, model: str) -> str:
    """The printed table: per setting, the primary measure's mean [interval], p against importance,
    images/s median [min, max], speedup and FLOPs."""
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
                      f"{r['speedup']:.2f}", f"{r['flops'] / 1e9:.3g}"])
    widths = [max(len(x[i]) for x in [head, *lines]) for i in range(len(head))]
    fmt = lambda cells: "  ".join(c.ljust(w) for c, w in zip(cells, widths)).rstrip()   # noqa: E731
    return "\n".join([caption(comp, model), fmt(head), *map(fmt, lines), *comp.notes])

