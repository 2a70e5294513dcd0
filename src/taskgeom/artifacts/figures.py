"""Saving figures as PNG and PDF, atomically and byte-reproducibly."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from taskgeom.artifacts.atomic import atomic_path  # noqa: E402
from taskgeom.artifacts.provenance import figure_metadata  # noqa: E402


def save_figure(fig, png: str | Path, pdf: str | Path, *, provenance: dict, dpi: int = 110) -> None:
    """Write ``fig`` to both paths with ``provenance`` in their metadata (no timestamps, so
    reruns give identical bytes) and close it."""
    fig.tight_layout()
    for path, fmt in ((png, "png"), (pdf, "pdf")):
        with atomic_path(path) as tmp:
            fig.savefig(tmp, format=fmt, dpi=dpi, metadata=figure_metadata(provenance, fmt))
    plt.close(fig)
