"""The ``diagnose`` stage: the tractability diagnostic of one probe over its source's images.

For each of the first ``diagnose.images`` items of the probe's source (multi-view groups for a
multi-view host), through the host's own preprocessing: ``diagnose`` at the estimator settings,
timed against one forward of f; on the first ``dense.images`` of them, when min(M, N·D) ≤
``dense.max_dim``, ``diagnose_exact`` beside it;
on the first ``power_table.images``, the alignment error of randomized power iteration at each
q of ``power_table.q`` against the dense modes (or, for larger probes, power iteration at
``reference_q``) — the paper's App. C.3. Per-image values go to HDF5 (one row per image),
their aggregates (mean, std, bootstrap interval) and the probe's regime to JSON.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

import numpy as np
import torch
from torch import Tensor

from taskgeom.artifacts import metrics as dvc_files
from taskgeom.artifacts.atomic import atomic_path, write_json
from taskgeom.data.batches import InputDigest, batches
from taskgeom.data.hdf5 import KIND_ATTR, encode_attrs, new_file
from taskgeom.data.indexed import open_indexed
from taskgeom.diagnostics import REGIMES, Diagnosis, diagnose, diagnose_exact, regime
from taskgeom.evaluate.stats import summarize
from taskgeom.linalg.operator import JacobianOperator
from taskgeom.linalg.sketch import randomized_svd, subspace_alignment
from taskgeom.models import preprocess, zoo
from taskgeom.pipeline.runtime import StageContext
from taskgeom.probes import Probe, ProbeMap

SCALARS = ("kappa_cap", "frob2", "erank", "r90", "cv", "products")  # no timings: reruns give identical bytes
# (wall-clock cost in forward-equivalents is measured by benchmarks/diagnose_cost.py)
POWER_OVERSAMPLE = 10  # the sketch width ℓ = r + 10 of randomized_svd's default


def probe_images(ctx: StageContext, entry: dict, host, count: int) -> tuple[Tensor, dict]:
    """The first ``count`` items of the probe's source through the host's preprocessing: (n, 3, S, S),
    or (n, V, 3, S, S) for a source of view groups; and what was read (source, preprocessing, digest)."""
    source = open_indexed(ctx.inputs["source"], ctx.params["sources"])
    if len(source) < count:
        raise ValueError(f"diagnose.images: {count} requested, source {source.name!r} holds {len(source)}")
    prep, digest = preprocess.for_host(host, entry), InputDigest()
    x = torch.cat([digest.update(b.x) for b in batches(source.first(count), prep.image, batch_size=count)])
    multiview = "camera" in host.decoders
    if multiview != (x.ndim == 5):
        needs = "view groups (a multi-view split)" if multiview else "single images"
        raise ValueError(f"diagnose.probes.{ctx.wildcard}.source: {source.name!r} does not hold {needs}")
    return x, {"source": source.describe(), "preprocess": prep.describe(), "input_sha256": digest.hexdigest()}


def power_errors(probe: Probe, r: int, qs: list[int], reference: Tensor | None, reference_q: int,
                 seed: int) -> dict[str, float]:
    """1 − alignment of randomized_svd's top-r modes at each q (key ``q<q>``) with the reference
    modes (N·D, r); without a dense reference, with randomized_svd at ``reference_q`` (a different
    seed). Also the gap ratio that sets how fast power iteration converges (key ``gap``): with a
    block of l = r + POWER_OVERSAMPLE vectors, the tangent of the angle to the top-r subspace
    shrinks by (σ_{l+1}/σ_r)² per iteration (Halko, Martinsson & Tropp 2011, §10.4; Gu 2015); the
    ratio σ_l/σ_r of the Ritz values at the largest q bounds it from above. A sketch cut short by
    J's shape holds J's whole range (σ_{l+1} = 0); where J's rank is below r (σ_r ≤ 1e-6·σ_1)
    the top-r subspace is not defined and the ratio is taken as 1."""
    op = JacobianOperator(probe.f, probe.F)
    if reference is None:
        reference = randomized_svd(op, r, POWER_OVERSAMPLE, reference_q, seed=seed + 1).V
    k = min(r, reference.shape[1])
    sketches = {q: randomized_svd(op, r, POWER_OVERSAMPLE, q, seed=seed) for q in qs}
    ritz = sketches[max(qs)].ritz.double()
    sigma_r = float(ritz[r - 1]) if len(ritz) >= r else 0.0
    tail = float(ritz[-1]) if len(ritz) >= r + POWER_OVERSAMPLE else 0.0
    gap = tail / sigma_r if sigma_r > 1e-6 * float(ritz[0]) else 1.0
    return {**{f"q{q}": 1.0 - subspace_alignment(reference[:, :k], sk.V[:, :k]) for q, sk in sketches.items()},
            "gap": gap}


def accuracy(d: Diagnosis, e: Diagnosis) -> dict[str, float]:
    """Errors of the matrix-free diagnosis d against the dense one e."""
    rel = lambda a, b: abs(a - b) / abs(b) if b else abs(a - b)
    return {"kappa_abs": abs(d.kappa_cap - e.kappa_cap), "erank_rel": rel(d.erank, e.erank),
            "cv_rel": rel(d.cv, e.cv), "r90_abs": abs(d.r90 - e.r90), "frob2_rel": rel(d.frob2, e.frob2),
            "exact_kappa": e.kappa_cap, "exact_erank": e.erank, "exact_r90": e.r90, "exact_cv": e.cv}


@dataclass
class Sweep:
    """What the per-image loop collects: scalar rows, per-image spectra and the accuracy tables."""

    rows: dict[str, list] = field(default_factory=lambda: {k: [] for k in SCALARS})
    sigma: list[np.ndarray] = field(default_factory=list)
    curves: list[np.ndarray] = field(default_factory=list)
    energy: list[np.ndarray] = field(default_factory=list)
    exact_rows: list[dict] = field(default_factory=list)
    power_rows: list[dict] = field(default_factory=list)


def diagnose_images(ctx: StageContext, pm: ProbeMap, images: Tensor, settings: dict, r: int, use_dense: bool,
                    flat_dim: int) -> Sweep:
    """``diagnose`` on each image, ``diagnose_exact`` and the power table where asked for;
    ``flat_dim`` = N·D, the size of a mode."""
    est, dense, power = settings["estimator"], settings["dense"], settings["power_table"]
    out = Sweep()
    for i, image in enumerate(ctx.progress(images, desc=f"diagnose {ctx.wildcard}")):
        probe = pm.at(image)
        d = diagnose(probe.f, probe.F, r=est["r"], num_probes=est["num_probes"], power_iters=est["power_iters"],
                     seed=est["seed"] + i)
        for k in SCALARS:
            out.rows[k].append(getattr(d, k))
        out.sigma.append(d.sigma.cpu().numpy())
        out.curves.append(d.kappa_curve.cpu().numpy())
        out.energy.append(d.token_energy.cpu().numpy())
        reference = None
        if use_dense and i < dense["images"]:
            e = diagnose_exact(probe.f, probe.F, r=est["r"])
            out.exact_rows.append({"image": i, **accuracy(d, e)})
            reference = e.modes.reshape(flat_dim, -1)
        if i < power["images"]:
            errors = power_errors(probe, r, power["q"], reference, power["reference_q"], est["seed"] + i)
            against = "dense" if reference is not None else f"q={power['reference_q']}"
            out.power_rows.append({"image": i, "reference": against, **errors})
        ctx.log.info("image %d: κ_cap(%d) %.3f erank %.1f r90 %d CV %.3f, %d products",
                     i, r, d.kappa_cap, d.erank, d.r90, d.cv, d.products)
    return out


def write_arrays(ctx: StageContext, sweep: Sweep, count: int) -> None:
    """The per-image values to HDF5, one row per image."""
    arrays = {"sigma": np.stack(sweep.sigma), "kappa_curve": np.stack(sweep.curves),
              "token_energy": np.stack(sweep.energy),
              **{k: np.asarray(v, dtype=np.float64) for k, v in sweep.rows.items()}}
    with atomic_path(ctx.outputs["arrays"]) as tmp:
        layout = {k: (v.shape[1:], v.dtype) for k, v in arrays.items()}
        attrs = encode_attrs({KIND_ATTR: "diagnose", "probe": ctx.wildcard, "provenance": ctx.provenance()})
        with new_file(tmp, attrs, layout, count) as f:
            for k, v in arrays.items():
                f[k][...] = v


def write_dvc_files(ctx: StageContext, sweep: Sweep, summary: dict) -> None:
    """Mean κ_cap, erank, r_0.90 and token CV (a DVC metric); κ_cap(r) and the spectrum σ_i² / ‖J‖_F²,
    means over images (DVC plots, as diagnose-tables draws them)."""
    means = {k: summary[k]["mean"] for k in ("kappa_cap", "erank", "r90", "cv")}
    dvc_files.write_metrics(ctx.outputs.get("headline"), means, ctx.provenance())
    kappa = np.stack(sweep.curves).astype(np.float64).mean(axis=0)
    sigma = np.stack(sweep.sigma).astype(np.float64)
    share = (sigma ** 2 / np.asarray(sweep.rows["frob2"], dtype=np.float64)[:, None]).mean(axis=0)
    dvc_files.write_plot(ctx.outputs.get("kappa_plot"), [{"r": i + 1, "kappa_cap": v} for i, v in enumerate(kappa)],
                         ctx.provenance())
    dvc_files.write_plot(ctx.outputs.get("spectrum_plot"), [{"i": i + 1, "energy": v} for i, v in enumerate(share)],
                         ctx.provenance())


def run(ctx: StageContext) -> None:
    settings = ctx.params["diagnose"]
    name = ctx.wildcard
    spec = settings["probes"][name]
    est, dense, boot = settings["estimator"], settings["dense"], settings["bootstrap"]
    host = zoo.load(ctx.inputs["weights"], ctx.inputs["config"], ctx.device)
    metric = spec.get("output_metric", "euclidean")
    pm = ProbeMap(host, spec["decoder"], spec["layers"], "so3" if metric == "so3" else None)
    entry = zoo.entry(ctx.inputs["config"])
    images, seen = probe_images(ctx, entry, host, settings["images"])
    images = images.to(ctx.device)
    probe0 = pm.at(images[0])
    N, D = probe0.F.shape
    M = int(probe0.f(probe0.F).numel())
    r = min(est["r"], M, N * D)
    use_dense = min(M, N * D) <= dense["max_dim"]
    ctx.log.info("probe %s: %s %s at layers %s, N=%d D=%d M=%d (dense reference: %s)", name, spec["model"],
                 spec["decoder"], list(pm.layers), N, D, M, "yes" if use_dense else "no")

    sweep = diagnose_images(ctx, pm, images, settings, r, use_dense, N * D)

    summary = {k: summarize(v, boot["resamples"], boot["level"], boot["seed"]).as_dict()
               for k, v in sweep.rows.items()}
    means = {k: summary[k]["mean"] for k in ("kappa_cap", "erank", "cv")}
    name_of_regime = regime(means["kappa_cap"], means["erank"], int(round(summary["r90"]["mean"])), means["cv"], M,
                            est["r"], **settings["regimes"])
    result = {
        "probe": name, **spec, "output_metric": metric, "layers": list(pm.layers), "tokens": N, "dim": D,
        "output_dim": M, "r": r, "images": len(images), "summary": summary, "regime": name_of_regime,
        "architecture": REGIMES[name_of_regime], "dense": sweep.exact_rows, "power_table": sweep.power_rows,
        "provenance": {**ctx.provenance(), "input": seen},
    }
    write_arrays(ctx, sweep, len(images))
    write_json(ctx.outputs["summary"], json.loads(json.dumps(result, default=float)))
    write_dvc_files(ctx, sweep, summary)
