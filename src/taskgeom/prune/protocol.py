"""The protocol by which pruning methods are compared (paper §7): the frozen model and its learned
metric per seed, the evaluation images of each domain and resolution, and per-setting statistics (mean over seeds
and images, bootstrap interval, Wilcoxon signed-rank p of importance against each baseline)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import pandas as pd
import torch
from torch import Tensor

from taskgeom.artifacts.metrics import eta_key, nest, wide, write_metrics, write_plot
from taskgeom.data.batches import Batch, read_inputs
from taskgeom.data.sources import Source, need
from taskgeom.evaluate.stats import summarize, wilcoxon_p
from taskgeom.metric import checkpoint
from taskgeom.models import preprocess, zoo
from taskgeom.models.host import freeze
from taskgeom.models.vit import Grid
from taskgeom.prune.methods import NAMES, lookup
from taskgeom.prune.scores import LearnedMetric

DOMAINS = ("rgb", "sketch")          # a stage entry's sources.rgb / sources.sketch: photographs and their sketches
ROLES = (*DOMAINS, "bank")             # and prune.cls's k-NN bank


def load_host(inputs: dict[str, Path], device: str, dtype: torch.dtype = torch.float32):
    """The frozen zoo model of the stage's ``weights`` / ``config`` inputs and its base token grid
    at its own input side (the zoo's ViT's, or the Grid its embedding reports: Depth-Anything-V2).

    Args:
        inputs: input name -> path; reads ``weights`` and ``config``.
        device: where the model goes.
        dtype: the model's dtype.

    Returns:
        The frozen host and its Grid at the config's ``img_size``.

    Raises:
        TypeError: the host has no timm ViT and its embedding reports no Grid.
    """
    host = freeze(zoo.load(inputs["weights"], inputs["config"], device)).to(dtype)
    size = int(zoo.entry(inputs["config"])["img_size"])
    if hasattr(host, "vit"):
        side = size // int(host.vit.patch_embed.patch_size[0])
        return host, Grid(host.vit.num_prefix_tokens, side, side)
    with torch.no_grad():
        _, grid = host.embed(torch.zeros(1, 3, size, size, dtype=dtype, device=device))
    if not isinstance(grid, Grid):
        raise TypeError(f"{inputs['config']}: its host has no timm ViT and its embedding gives no token Grid")
    return host, grid


def load_learned(inputs: dict[str, Path], seeds: list[int], base: Grid, device: str,
                 dtype: torch.dtype = torch.float32, spn: bool = False) -> dict[int, LearnedMetric]:
    """The importance head of every seed (and the SPN, shared) as LearnedMetrics.

    Args:
        inputs: input name -> path; reads ``head_weights`` / ``head_config`` (and ``spn_weights`` /
            ``spn_config`` with ``spn``).
        seeds: the seeds whose heads to load.
        base: the grid the head was trained on.
        device: where the networks go.
        dtype: their dtype.
        spn: load the SPN too (importance-guided merging).

    Returns:
        seed -> LearnedMetric.

    Raises:
        ValueError: a seed has no head in the checkpoint.
    """
    held = checkpoint.seeds_of(inputs["head_config"])
    missing = [s for s in seeds if s not in held]
    if missing:
        raise ValueError(f"prune.seeds {missing}: {inputs['head_config']} holds heads for seeds {held}; "
                         "list those seeds in the head's learn.heads entry")
    net = None
    if spn:
        net = checkpoint.load(inputs["spn_weights"], inputs["spn_config"])[0].to(device, dtype)
    return {s: LearnedMetric(checkpoint.load(inputs["head_weights"], inputs["head_config"], s)[0].to(device, dtype),
                             base, net) for s in seeds}


def settings(prune: dict) -> list[tuple[str, int]]:
    """(domain, resolution) pairs evaluated: every domain at the base resolution (the first of
    ``prune.resolutions``), then the first domain at each further resolution.

    Args:
        prune: a stage's params with ``domains`` and ``resolutions``.

    Returns:
        The (domain, resolution) pairs, in that order.
    """
    base, *further = prune["resolutions"]
    return [(d, base) for d in prune["domains"]] + [(prune["domains"][0], r) for r in further]


def role_batch(inputs: dict[str, Path], sources: dict, host, role: str, resolution: int, count: int, what: str,
               depth: bool = False) -> tuple[Batch, Source]:
    """The first ``count`` items of the source of ``role`` (input ``source_<role>``: a domain or
    the k-NN bank) through the host's preprocessing at side ``resolution`` (a world source's
    render at that side), with ground-truth ``depth`` where asked and the source has it.

    Args:
        inputs: input name -> path; reads ``source_<role>`` and ``config``.
        sources: the params' ``sources`` table.
        host: the frozen model, whose preprocessing is used.
        role: rgb, sketch or bank (``ROLES``).
        resolution: the image side S.
        count: items to read.
        what: names the params key of the count in errors.
        depth: read ground-truth depth too.

    Returns:
        The Batch (x (B, 3, S, S), labels (B,), depth (B, S, S) or None) and its Source.

    Raises:
        ValueError: an unknown role, or a source with fewer than ``count`` items.
    """
    if role not in ROLES:
        raise ValueError(f"prune.domains: unknown domain {role!r}; known: {sorted(DOMAINS)}")
    source, prep = preprocess.open_for_host(inputs[f"source_{role}"], sources, host, zoo.entry(inputs["config"]),
                                            f"sources of {role}", resolution)
    return read_inputs(need(source, count, what), prep, depth=depth and source.has_depth), source


def batched(fn: Callable[[Tensor], Tensor], x: Tensor, batch_size: int) -> Tensor:
    """``fn`` over ``x`` in batches along the first axis, concatenated.

    Args:
        fn: maps (b, ...) -> (b, ...).
        x: (B, ...) inputs.
        batch_size: rows per call.

    Returns:
        (B, ...), the outputs in order.
    """
    return torch.cat([fn(x[i:i + batch_size]) for i in range(0, len(x), batch_size)])


def seed_runs(method: str, seeds: list[int]) -> Iterator[tuple[int, bool]]:
    """(seed, computed) pairs: a method whose output is the same for every seed (neither seeded nor
    learned, ``prune.methods.Method.per_seed``) runs once and is repeated for the other seeds.

    Args:
        method: the pruning method's name.
        seeds: the seeds, in order.

    Yields:
        (seed, whether to compute it); False for every seed but the first of a method not ``per_seed``.
    """
    per_seed = lookup(method).per_seed
    for j, s in enumerate(seeds):
        yield s, per_seed or j == 0


def generator(seed: int, *key: int) -> torch.Generator:
    """A CPU generator seeded from ``seed`` and further integers by ``numpy.random.SeedSequence``.

    Args:
        seed: the run's seed.
        *key: integers that tell its streams apart (e.g. the ratio in thousandths and the resolution).

    Returns:
        The seeded ``torch.Generator``.
    """
    return torch.Generator().manual_seed(int(np.random.SeedSequence([seed, *key]).generate_state(1)[0]))


def summary_rows(values: dict[str, np.ndarray], boot: dict,
                 references: tuple[str, ...] = ("importance", "tome")) -> list[dict]:
    """One row per method: the mean, the std over seeds of the image means, the bootstrap interval
    over images of the seed-averaged values, and, against each of ``references`` present, the
    Wilcoxon p paired by image and the standard deviation over images of the paired difference
    reference − method (what the smallest difference the test can detect scales with).

    Args:
        values: method -> (seeds, images) per-image metric.
        boot: ``resamples``, ``level`` and ``seed`` of the bootstrap.
        references: the methods every other is tested against: importance (the tables' test) and
            ToMe's merging (the soft-against-hard finding).

    Returns:
        Rows with method, mean, std_seeds, ci_low, ci_high, images and, per reference R present
        other than the method itself, p_vs_R and sd_diff_vs_R.
    """
    rows = []
    for method, v in values.items():
        per_image = v.mean(axis=0)
        s = summarize(per_image, boot["resamples"], boot["level"], boot["seed"])
        row = {"method": method, "mean": s.mean, "std_seeds": float(v.mean(axis=1).std(ddof=1)) if len(v) > 1 else 0.0,
               "ci_low": s.low, "ci_high": s.high, "images": s.n}
        for reference in (r for r in references if r in values and r != method):
            paired = values[reference].mean(axis=0)
            row[f"p_vs_{reference}"] = wilcoxon_p(paired, per_image)
            row[f"sd_diff_vs_{reference}"] = float(np.std(paired - per_image, ddof=1)) if len(paired) > 1 else 0.0
        rows.append(row)
    return rows


KEYS = ("model", "domain", "resolution", "schedule", "llf", "ratio", "metric")  # a setting's columns, in order


def per_image(values: dict[str, np.ndarray], seeds: list[int], setting: dict) -> pd.DataFrame:
    """Tidy per-image values of one setting: its keys (``setting``, in ``KEYS`` order), method,
    seed, image (the position in the source's selection) and value; one row per (method, seed,
    image), the methods in ``values``' order, then the seeds in order, then the images.

    Args:
        values: method -> (seeds, images) per-image metric.
        seeds: the seeds of the rows of each array, in order.
        setting: the setting's key -> value (a subset of ``KEYS``).

    Returns:
        The rows; ``value`` keeps the arrays' dtype.
    """
    frames = []
    for method, v in values.items():
        n = v.shape[1]
        frames.append(pd.DataFrame({**{k: setting[k] for k in KEYS if k in setting}, "method": method,
                                    "seed": np.repeat(np.asarray(seeds), n), "image": np.tile(np.arange(n), len(seeds)),
                                    "value": v.reshape(-1)}))
    return pd.concat(frames, ignore_index=True)


def by_method(frame: pd.DataFrame) -> dict[str, np.ndarray]:
    """The arrays of one setting's ``per_image`` rows: method -> (seeds, images), in the rows'
    dtype and order (the inverse of ``per_image``).

    Args:
        frame: the rows of one setting.

    Returns:
        method -> (seeds, images) values.
    """
    return {method: rows["value"].to_numpy().reshape(rows["seed"].nunique(), -1)
            for method, rows in frame.groupby("method", sort=False)}


def schedule_name(schedule: list[int]) -> str:
    """A dense pruning schedule by its number of stages, e.g. [2, 4] -> "2-stage".

    Args:
        schedule: block indices.

    Returns:
        "<stages>-stage".
    """
    return f"{len(schedule)}-stage"


METHODS = NAMES  # every method a pruning stage compares, in ``prune.methods``' order


def write_degradation(outputs: dict[str, Path], metric: str, rows: list[dict], provenance: dict) -> None:
    """The headline of one degradation ``metric`` over its base-setting ``rows`` (the mean over
    seeds and images per method and η): the DVC metric ``<metric>.<method>.eta<100η>`` to
    ``outputs["headline"]``, and the plot rows against η, a field per method, to
    ``outputs["degradation_plot"]`` (either skipped when absent).

    Args:
        outputs: output name -> path.
        metric: the degradation's name.
        rows: rows with method, ratio and mean.
        provenance: the header both files start with.
    """
    write_metrics(outputs.get("headline"),
                  {metric: nest(rows, ("method", "ratio"), "mean", {"ratio": eta_key})}, provenance)
    write_plot(outputs.get("degradation_plot"), wide(rows, "ratio", "mean", "method", METHODS), provenance)
