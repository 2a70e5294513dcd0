"""The paper's headline figure of each claim the findings test, as one short phrase.

The findings table (``evaluate.findings``) keeps the paper's figures in full (every probe, η and
method); each function here reads the same tables (the paper's rows, or the paper's columns of
our rows) and says the figure a reader needs to judge the claim at a glance. Each returns ""
when the tables hold none of the paper's figures, and the table then shows the full text.
"""

from __future__ import annotations

import pandas as pd

Tables = dict[str, pd.DataFrame]


def _paper(df: pd.DataFrame, column: str = "source") -> pd.DataFrame:
    return df[df[column] == "paper"] if column in df else df.iloc[0:0]


def _span(values: list[float], fmt: str = "{:.3g}") -> str:
    """"a" for one value (or equal ones), "a–b" for the range of several."""
    low, high = min(values), max(values)
    return fmt.format(low) if low == high else f"{fmt.format(low)}–{fmt.format(high)}"


def regimes(t: Tables) -> str:
    """How many of the paper's probe classes Table 1 places, in how many regimes."""
    rows = _paper(t["diagnose_table1"])
    return f"{rows['decoder'].nunique()} probe classes in {rows['regime'].nunique()} regimes" if len(rows) else ""


def power_iteration(t: Tables) -> str:
    """The factor by which q = 2 cuts the q = 0 subspace error, over the paper's probes."""
    rows = _paper(t["diagnose_power_iterations"])
    rows = rows[rows["error_q2"] > 0] if len(rows) else rows
    if not len(rows):
        return ""
    return f"q = 2 cuts the error {_span(list(rows['error_q0'] / rows['error_q2']), '{:.2g}')}×"


def spectral_targets(t: Tables) -> str:
    """The paper's ρ of a spectral head against a block-norm head of the same probe."""
    heads = t["metric_importance"]
    if "paper_rho" not in heads:
        return ""
    heads = heads[(heads["source"] == "ours") & heads["paper_rho"].notna()]
    heads = heads[heads["probe"].isin(set(heads.loc[heads["target"] == "block_norm", "probe"]))]
    rho = {target: list(heads.loc[heads["target"] == target, "paper_rho"]) for target in ("spectral", "block_norm")}
    if not (rho["spectral"] and rho["block_norm"]):
        return ""
    return f"spectral ρ {_span(rho['spectral'])} vs block norm {_span(rho['block_norm'])}"


def head_learns(t: Tables) -> str:
    """The paper's ρ of the spectral importance heads."""
    heads = t["metric_importance"]
    if "paper_rho" not in heads:
        return ""
    rho = list(heads.loc[(heads["source"] == "ours") & (heads["target"] == "spectral"), "paper_rho"].dropna())
    return f"head ρ {_span(rho)}" if rho else ""


def randnla_supervision(t: Tables) -> str:
    """The share of exact supervision's V1 the paper's SPNs reach on q = 1 targets."""
    rows = _paper(t["metric_table13"])
    shares = list(rows.loc[rows["supervision"] == "q1", "share_of_exact"].dropna()) if len(rows) else []
    return f"q = 1 at {_span(shares)} of exact" if shares else ""


def vae_cut(t: Tables) -> str:
    """The paper's effective rank before and after the VAE bottleneck."""
    rows = t["metric_vae"]
    if "paper_original" not in rows:
        return ""
    rows = rows[(rows["quantity"] == "erank") & rows["paper_original"].notna()]
    return f"erank {rows['paper_original'].iloc[0]} → {rows['paper_latent'].iloc[0]}" if len(rows) else ""


def cls_merging(t: Tables) -> str:
    """Importance against ToMe's score at the paper's largest η, first model."""
    rows = _paper(t["prune_table2"])
    rows = rows[rows["part"] == "cls"] if len(rows) else rows
    if not len(rows):
        return ""
    rows = rows[(rows["model"] == rows["model"].iloc[0]) & (rows["ratio"] == rows["ratio"].max())]
    mean = {r.method: r.mean for r in rows.itertuples()}
    if not {"importance", "tome_score"} <= set(mean):
        return ""
    return f"η {rows['ratio'].iloc[0]:g}: importance {mean['importance']:g} vs ToMe {mean['tome_score']:g}"


def drm(t: Tables, name: str) -> str:
    """The paper's ρ of each method in the retrieval table ``name``."""
    rows = t[name]
    rows = rows[rows["model"] == "paper"] if "model" in rows else rows.iloc[0:0]
    return "ρ " + ", ".join(f"{r.method} {r.rho_mean:g}" for r in rows.itertuples()) if len(rows) else ""
