"""The dense reference's spectrum: ``torch.linalg.svd`` of J against ``linalg.gram_spectrum``.

For every probe of params.yaml with min(M, N·D) ≤ ``diagnose.dense.max_dim`` (the probes whose
``diagnose`` stage runs ``diagnose_exact``), on its first test image (the trained zoo model when
``data/zoo/<model>`` exists, else seeded random weights; see ``diagnose_cost.py``): the dense
Jacobian once, then the seconds of each decomposition (median of --repeats), and what
``diagnose_exact`` reports from each — κ_cap(r), erank, r_0.90, ‖J‖_F², CV — with their relative
differences from what the float64 SVD of the same J gives (the exact spectrum of the float32 J).
Results: results/benchmarks/dense_spectrum.{csv,md}; the speedups are ratios within this run.

    python benchmarks/dense_spectrum.py [--repeats 3] [--probes NAME ...]
"""

from __future__ import annotations

import argparse
import math
import platform
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd
import torch

sys.path.insert(0, str(Path(__file__).parent))
from diagnose_cost import host_for, inputs_for  # noqa: E402
from stamp import write_stamped  # noqa: E402

from taskgeom.diagnostics import R90_LEVEL, _summaries  # noqa: E402
from taskgeom.linalg.dense import dense_jacobian, gram_spectrum  # noqa: E402
from taskgeom.linalg.lanczos import xlogx  # noqa: E402
from taskgeom.linalg.sketch import r90 as first_reaching  # noqa: E402
from taskgeom.pipeline import config  # noqa: E402
from taskgeom.probes import ProbeMap  # noqa: E402

OUT = Path("results/benchmarks")


def reported(S: torch.Tensor, V: torch.Tensor, r: int, N: int, D: int) -> dict[str, float]:
    """What diagnose_exact reports from every singular value S and the top-r right vectors V."""
    lam = S.double().pow(2)
    frob2 = float(lam.sum())
    out = _summaries(S[:r], V, frob2, N, D)
    return {"kappa": out["kappa_cap"], "erank": math.exp(-float(xlogx(lam / frob2).sum())),
            "r90": first_reaching(torch.cumsum(lam, 0) / frob2, R90_LEVEL) or S.numel(), "frob2": frob2,
            "cv": out["cv"]}


def median_seconds(fn, repeats: int):
    times, out = [], None
    for _ in range(repeats):
        start = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - start)
    return out, float(np.median(times)), float(min(times)), float(max(times))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--probes", nargs="*", help="these probes of diagnose.probes only")
    args = ap.parse_args()
    torch.set_num_threads(1)  # as a stage runs
    params = config.load("params.yaml")
    d = params["diagnose"]
    r = d["estimator"]["r"]
    rows = []
    for name, spec in d["probes"].items():
        if args.probes and name not in args.probes:
            continue
        host, weights = host_for(params, spec["model"], "cpu")
        pm = ProbeMap(host, spec["decoder"], spec.get("layers"))
        probe = pm.at(inputs_for(host, params, 1, name)[0])
        N, D = probe.F.shape
        with torch.no_grad():
            if min(probe.f(probe.F).numel(), N * D) > d["dense"]["max_dim"]:
                continue
        J = dense_jacobian(probe.f, probe.F)
        k = min(r, *J.shape)
        (_, S0, Vh0), svd_s, svd_lo, svd_hi = median_seconds(lambda: torch.linalg.svd(J, full_matrices=False),
                                                             args.repeats)
        (S1, V1), gram_s, gram_lo, gram_hi = median_seconds(lambda: gram_spectrum(J, k), args.repeats)
        _, S64, Vh64 = torch.linalg.svd(J.double(), full_matrices=False)
        exact = reported(S64, Vh64[:k].T, k, N, D)
        errors = {}
        for method, (S, V) in {"svd": (S0, Vh0[:k].T), "gram": (S1, V1)}.items():
            got = reported(S.double(), V.double(), k, N, D)
            errors |= {f"{key}_rel_{method}": abs(got[key] - v) / abs(v) if v else abs(got[key])
                       for key, v in exact.items()}
            errors[f"top_r_sigma_rel_{method}"] = float(((S[:k].double() - S64[:k]).abs() / S64[:k]).max())
        rows.append({"probe": name, "weights": weights, "M": J.shape[0], "ND": J.shape[1], "dtype": str(J.dtype),
                     "svd_s": svd_s, "svd_min_s": svd_lo, "svd_max_s": svd_hi, "gram_s": gram_s,
                     "gram_min_s": gram_lo, "gram_max_s": gram_hi, "speedup": svd_s / gram_s, **errors})
        print(f"{name}: J {tuple(J.shape)} svd {svd_s:.1f} s, gram {gram_s:.1f} s; "
              + ", ".join(f"{key} {v:.1e}" for key, v in errors.items()), flush=True)
    table = pd.DataFrame(rows)
    header = (f"# The dense reference's spectrum: SVD against the Gram eigendecomposition\n\n"
              f"{platform.processor() or platform.machine()}, 1 thread, "
              f"median of {args.repeats} (min and max in the CSV); first test image per probe.\n\n")
    write_stamped(OUT, "dense_spectrum", table, header + table.to_markdown(index=False, floatfmt=".3g"))


if __name__ == "__main__":
    main()
