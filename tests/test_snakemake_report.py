"""Snakemake's self-contained HTML report over the smoke run: every figure and table of results/
in it, embedded byte for byte, each captioned and filed under a paper section (rules/common.smk's
REPORT_ITEMS, captions in docs/report/)."""

from __future__ import annotations

import base64
import json
import os
import re
from pathlib import Path

import pytest
from conftest import run

from taskgeom.pipeline.registry import STAGES

pytestmark = pytest.mark.pipeline

# a figure REPORT.md links, [text](figures/x.png), or embeds, ![alt](...) or <img src="...">
FIGURE_REF = re.compile(r"\]\(\s*<?([^)\s>]+\.png)>?[^)]*\)|<img[^>]*\ssrc=[\"']([^\"']+\.png)[\"']")


def embedded(html: str, script: str, name: str):
    """The JSON value the report embeds as ``<script id="SCRIPT"> var NAME = <JSON>;``."""
    start = html.index(f"var {name} = ", html.index(f'<script id="{script}">')) + len(f"var {name} = ")
    return json.JSONDecoder().raw_decode(html, start)[0]


def report_md_figures(repo: Path) -> set[str]:
    """Every figure results/REPORT.md links or embeds, relative to the repository."""
    text = (repo / "results/REPORT.md").read_text()
    refs = {a or b for a, b in FIGURE_REF.findall(text)}
    return {os.path.normpath(os.path.join("results", ref)) for ref in refs}


def test_html_report_holds_every_figure_and_table_captioned(smoke: Path, tmp_path: Path):
    html_path = tmp_path / "report.html"
    run(["snakemake", "--report", str(html_path)], smoke)
    html = html_path.read_text()
    results, categories = embedded(html, "results", "results"), embedded(html, "categories", "categories")

    outs = [set(s.outs.values()) for s in STAGES]
    declared = {p for o in outs for p in o if p.endswith(".png")}
    figures = {str(p.relative_to(smoke)) for p in (smoke / "results/figures").glob("*.png")}
    linked = report_md_figures(smoke)
    assert len(linked) == len(figures) == len(declared) > 0 and linked == figures == declared
    # the tables: every CSV a stage publishes with its Markdown beside it (results/benchmarks/ is
    # written by benchmarks/*.py, not by the pipeline)
    tables = {str(p.relative_to(smoke)) for p in (smoke / "results").rglob("*.csv")
              if p.with_suffix(".md").is_file() and "benchmarks" not in p.parts}
    declared_tables = {p for o in outs for p in o if p.endswith(".csv") and p[:-4] + ".md" in o}
    assert len(tables) == len(declared_tables) > 0 and tables == declared_tables

    for path, mime in [*((f, "image/png") for f in figures), *((t, "text/csv") for t in tables)]:
        assert path in results, f"{path} is not in the report"
        entry = results[path]
        assert entry["mime_type"] == mime, path
        data = entry["data_uri"].split(";base64,", 1)[1]
        assert base64.b64decode(data) == (smoke / path).read_bytes(), f"{path}: the report embeds other bytes"
    assert "results/REPORT.md" in results
    assert len(results) == len(figures) + len(tables) + 1, sorted(set(results) - figures - tables)

    for path, entry in results.items():
        caption = entry["caption"]
        assert len(caption) > 100 and "system-message" not in caption, f"{path}: caption {caption!r}"
        assert "without a caption of its own" not in caption, f"{path}: add it to REPORT_ITEMS"
        assert entry["labels"]["result"], path
    assert "Other" not in categories
    filed = [p for subcats in categories.values() for paths in subcats.values() for p in paths]
    assert sorted(filed) == sorted(results)
    assert {"Data", "Zoo", "§7 Pruning", "App. K Retrieval"} <= set(categories)
    description = embedded(html, "workflow-desc", "workflow_desc")
    assert "Task-Induced Riemannian Metrics" in description and "system-message" not in description
