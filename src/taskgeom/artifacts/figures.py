"""Saving figures as PNG and PDF, atomically and byte-reproducibly; the styles they share: one
distinct colour and marker per series, and the paper's values drawn the same way everywhere."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.colors import to_hex  # noqa: E402

from taskgeom.artifacts.atomic import atomic_path  # noqa: E402
from taskgeom.artifacts.provenance import figure_metadata  # noqa: E402

MARKERS = ("o", "s", "^", "D", "v", "P", "X")          # 7: prime to 20, so (colour, marker) pairs stay distinct
PAPER = {"color": "black", "ls": "--", "lw": 1.0}        # the paper's value: a dashed black line ...
PAPER_POINT = {"color": "black", "marker": "*", "ms": 9, "ls": "none"}   # ... or a black star


def series_styles(n: int) -> list[dict]:
    """``n`` styles (``color`` as hex, ``marker``) with ``n`` distinct colours: tab20's, dark shades
    first, for up to 20 series, evenly spaced along ``turbo`` beyond.

    Args:
        n: the number of series.

    Returns:
        ``n`` dicts with ``color`` and ``marker``, for matplotlib's plot keywords.
    """
    if n <= 20:
        tab = plt.get_cmap("tab20").colors
        colours = [tab[i] for i in (*range(0, 20, 2), *range(1, 20, 2))][:n]
    else:
        cmap = plt.get_cmap("turbo")
        colours = [cmap(0.05 + 0.9 * i / (n - 1)) for i in range(n)]
    return [{"color": to_hex(c), "marker": MARKERS[i % len(MARKERS)]} for i, c in enumerate(colours)]


def save_figure(fig, png: str | Path, pdf: str | Path, *, provenance: dict, dpi: int = 110) -> None:
    """Write ``fig`` to both paths with ``provenance`` in their metadata (no timestamps, so
    reruns give identical bytes) and close it.

    Args:
        fig: the matplotlib figure.
        png: the PNG path.
        pdf: the PDF path.
        provenance: the record for the metadata.
        dpi: the PNG's resolution.
    """
    fig.tight_layout()
    for path, fmt in ((png, "png"), (pdf, "pdf")):
        with atomic_path(path) as tmp:
            fig.savefig(tmp, format=fmt, dpi=dpi, metadata=figure_metadata(provenance, fmt))
    plt.close(fig)
