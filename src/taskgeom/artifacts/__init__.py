"""Writing artifacts: atomic files, the provenance record every result carries, tables
(CSV, Markdown, LaTeX) and figures (PNG, PDF)."""
