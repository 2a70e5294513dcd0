"""What ``inspect`` shows and writes: a terminal table (one row per probed layer: mean and
bootstrap interval of κ_cap(r), erank, r_0.90 and token CV, the regime; then token CV's
definition, ``DEFINITIONS``, and a note for each estimate clamped to its ceiling), the JSON (settings,
per-image rows, κ_cap curves and spectra, aggregates, regime, reading, provenance) and a figure:
κ_cap(1..r) and σ_i² / ‖J‖_F² per layer, the mean over images with the per-image curves faint.
Files are written atomically; the JSON holds its provenance under ``"provenance"``, the PNG in
its metadata (``artifacts.provenance``).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from taskgeom.artifacts.atomic import atomic_path, write_json
from taskgeom.artifacts.provenance import figure_metadata
from taskgeom.inspection.reading import reading
from taskgeom.inspection.run import Inspection

COLUMNS = (("kappa_cap", "κ_cap(r)", "{:.3f}"), ("erank", "erank", "{:.1f}"), ("r90", "r_0.90", "{:.1f}"),
           ("cv", "token CV", "{:.2f}"))
DEFINITIONS = {
    "kappa_cap": "κ_cap(r) = Σ_{i≤r} σ_i² / ‖J‖_F², σ_i the singular values of J = ∂f/∂F",
    "erank": "erank = exp(−Σ p_i log p_i), p_i = σ_i² / ‖J‖_F²",
    "r90": "r_0.90 = the smallest r with κ_cap(r) ≥ 0.90",
    "cv": "token CV = std_t(e_t) / mean_t(e_t) over the N tokens, e_t = Σ_{i≤r} σ_i² ‖V_{t,i}‖² the rank-r token "
          "energy (V_{t,i}: token t's block of the i-th right singular vector), not the full per-token ‖J_t‖_F²",
}


def clamp_notes(ins: Inspection) -> list[str]:
    """One line per layer where ``diagnose`` clamped an estimate to its ceiling min(M, N·D)."""
    notes = []
    for res in ins.results:
        for key, label in (("erank", "erank"), ("r90", "r_0.90")):
            hit = [row for row in res.rows if key in row.get("clamped", ())]
            if hit:
                ceilings = sorted({row["ceiling"] for row in hit})
                notes.append(f"layer {res.layer}: {label} clamped on {len(hit)} of {len(res.rows)} image(s) to what "
                             f"rank J ≤ min(M, N·D) = {'/'.join(map(str, ceilings))} allows (the stochastic "
                             f"estimate exceeded it; diagnostics.within_rank)")
    return notes


def readings(ins: Inspection, model: str, adapter: str | None = None, flags: dict | None = None) -> list[str]:
    """One reading paragraph per probed layer (``reading.reading``), each ending with the ``taskgeom
    fit`` command built from ``flags`` (the command's arguments, as provenance ``params`` holds them)."""
    probe = "".join(c if c.isalnum() else "-" for c in model.lower()).strip("-")[:40] or "model"
    return [reading(res.regime, f"{probe}-l{res.layer}", ins.decoder, res.layer, res.summary, adapter, flags)
            for res in ins.results]


def table(ins: Inspection, model: str) -> str:
    """The terminal table: one row per layer, each value as mean [low, high] over the images."""
    head = ["layer", *[label for _, label, _ in COLUMNS], "regime"]
    rows = []
    for res in ins.results:
        cells = [str(res.layer)]
        for key, _, fmt in COLUMNS:
            s = res.summary[key]
            cells.append(f"{fmt.format(s['mean'])} [{fmt.format(s['low'])}, {fmt.format(s['high'])}]")
        rows.append([*cells, res.regime])
    widths = [max(len(r[i]) for r in [head, *rows]) for i in range(len(head))]
    line = lambda cells: "  ".join(c.ljust(w) for c, w in zip(cells, widths)).rstrip()
    n = len(ins.names)
    which = "default: a middle and a late block" if ins.default_layers else "as asked"
    title = (f"{model}: decoder {ins.decoder}, layers {ins.layers} of {ins.num_blocks} blocks ({which}); "
             f"r = {ins.settings['r']}, {n} image(s), mean [95% bootstrap interval]")
    notes = ["* " + n for n in clamp_notes(ins)]
    return "\n".join([title, line(head), line(["-" * w for w in widths]), *map(line, rows), DEFINITIONS["cv"],
                      *notes])


def per_image(ins: Inspection) -> str:
    """Every image's values at every layer, one line each; * marks a value clamped to its ceiling."""
    head = ["image", "size", "layer", *[label for _, label, _ in COLUMNS]]
    rows = [[row["image"], f"{row['height']}×{row['width']}", str(res.layer),
             *[fmt.format(row[key]) + ("*" if key in row.get("clamped", ()) else "") for key, _, fmt in COLUMNS]]
            for i in range(len(ins.names))
            for res in ins.results for row in [res.rows[i]]]
    widths = [max(len(r[k]) for r in [head, *rows]) for k in range(len(head))]
    line = lambda cells: "  ".join(c.ljust(w) for c, w in zip(cells, widths)).rstrip()
    return "\n".join([line(head), line(["-" * w for w in widths]), *map(line, rows)])


def as_json(ins: Inspection, model: str, provenance: dict, adapter: str | None = None) -> dict:
    """The whole inspection as JSON-ready values."""
    texts = readings(ins, model, adapter, provenance.get("params"))
    layers = [{"layer": res.layer, "summary": res.summary, "regime": res.regime, "architecture": res.architecture,
               "reading": text, "images": res.rows,
               "kappa_curves": [c.tolist() for c in res.kappa_curves], "spectra": [s.tolist() for s in res.spectra]}
              for res, text in zip(ins.results, texts)]
    record = {"model": model, "decoder": ins.decoder, "layers": ins.layers, "default_layers": ins.default_layers,
              "num_blocks": ins.num_blocks, "settings": ins.settings, "images": ins.names, "probes": layers,
              "definitions": DEFINITIONS, "notes": clamp_notes(ins), "provenance": provenance}
    return json.loads(json.dumps(record, default=float))


def _mean_curve(curves: list[np.ndarray]) -> np.ndarray:
    """The mean over images of curves that may differ in length (r is clipped to min(M, N·D))."""
    n = min(len(c) for c in curves)
    return np.mean([c[:n] for c in curves], axis=0)


def figure(ins: Inspection, model: str, path: str | Path, provenance: dict) -> None:
    """κ_cap(r) curves (left) and the normalised spectrum σ_i² / ‖J‖_F² (right, log scale), per layer."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax_k, ax_s) = plt.subplots(1, 2, figsize=(9, 3.6))
    for res, color in zip(ins.results, plt.rcParams["axes.prop_cycle"].by_key()["color"] * 4):
        for c, s in zip(res.kappa_curves, res.spectra):
            ax_k.plot(np.arange(1, len(c) + 1), c, color=color, alpha=0.2, lw=0.8)
            ax_s.semilogy(np.arange(1, len(s) + 1), np.clip(s, 1e-12, None), color=color, alpha=0.2, lw=0.8)
        k, s = _mean_curve(res.kappa_curves), _mean_curve(res.spectra)
        ax_k.plot(np.arange(1, len(k) + 1), k, color=color, lw=2, label=f"layer {res.layer}: {res.regime}")
        ax_s.semilogy(np.arange(1, len(s) + 1), np.clip(s, 1e-12, None), color=color, lw=2)
    ax_k.axhline(0.9, color="grey", ls=":", lw=1)
    ax_k.set(xlabel="r", ylabel="κ_cap(r)", ylim=(0, 1.02), title="captured energy")
    ax_s.set(xlabel="i", ylabel="σ_i² / ‖J‖_F²", title="spectrum")
    ax_k.legend(fontsize=7, loc="lower right")
    fig.suptitle(f"{model}, decoder {ins.decoder}", fontsize=9)
    fig.tight_layout()
    with atomic_path(path) as tmp:
        fig.savefig(tmp, format="png", dpi=120, metadata=figure_metadata(provenance, "png"))
    plt.close(fig)


def write(ins: Inspection, model: str, out: str | Path, provenance: dict, adapter: str | None = None) -> dict:
    """``out``/inspect.json and ``out``/inspect.png; returns the JSON record."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    record = as_json(ins, model, provenance, adapter)
    write_json(out / "inspect.json", record)
    figure(ins, model, out / "inspect.png", provenance)
    return record
