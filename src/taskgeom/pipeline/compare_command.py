"""``taskgeom compare``: a fitted model patched by every method × ratio against the unpatched model,
on held-out images (``taskgeom.comparing``; docs/patch.md).

The model flags are ``inspect``'s own (its parser's actions are reused, as ``fit`` reuses them),
loaded by ``inspect_command``'s loader with its one-line refusals; ``--fit`` names the fit
directory, whose architecture and token layout the loaded model must have
(``fitting.check_model``; other weights are compared and noted). Nothing is downloaded.
``--ratios`` takes η values and ``START:STOP:STEP`` grids (``ratio_grid``). Held-out images whose
bytes are among the fit's training images are noted (``training_overlap``).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterable, Mapping
from pathlib import Path

from taskgeom.pipeline import inspect_command
from taskgeom.pipeline.inspect_command import non_negative_int, positive_int
from taskgeom.prune.methods import METHODS  # imports no torch

SHARED = ("weights", "model_args", "input_size", "images", "max_images", "linear", "threads")
CHANGED = {"max_images": {"default": None, "help": "the first N images, sorted (default: every image)"},
           "images": {"help": "a folder of held-out images (not the fit's), read recursively"},
           "linear": {"help": "the linear head (safetensors) of a fit through decoder 'linear'"}}


def ratio(text: str) -> float:
    """An argparse type: η in [0, 1)."""
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if not 0.0 <= value < 1.0:
        raise argparse.ArgumentTypeError(f"expected a fraction of patch tokens removed in [0, 1), got {text!r}")
    return value


def ratio_grid(text: str) -> tuple[float, ...]:
    """An argparse type: one η, or ``START:STOP:STEP``, every START + i·STEP ≤ STOP (STOP included
    when the steps reach it; each in [0, 1), rounded to 10 decimals)."""
    if ":" not in text:
        return (ratio(text),)
    try:
        start, stop, step = (float(x) for x in text.split(":"))
    except ValueError:
        start = stop = step = float("nan")
    if not step > 0 or not start <= stop:
        raise argparse.ArgumentTypeError(f"expected START:STOP:STEP with START <= STOP and STEP > 0, got {text!r}")
    count = int((stop - start) / step + 1e-9) + 1
    return tuple(ratio(f"{round(start + i * step, 10)!r}") for i in range(count))


def ratios_of(values: Iterable[float | tuple[float, ...]]) -> list[float]:
    """``--ratios`` flattened (each ``ratio_grid`` expanded), each η once, in the order given."""
    flat = [x for v in values for x in (v if isinstance(v, tuple) else (v,))]
    return list(dict.fromkeys(flat))


def training_overlap(held_out: Mapping[str, str], images: Mapping) -> str | None:
    """A note (one line) on held-out images that are among the fit's training images, or None.

    By content where the fit records each training image's sha256 (``images["train_sha256"]``,
    paired with ``images["train"]``): a held-out image counts when its bytes' sha256 is one of
    them, whatever its name. A fit without them is compared by name, and the note says so.

    Args:
        held_out: each held-out image's name -> its file's sha256.
        images: the fit record's ``images`` entry (``train`` names, maybe ``train_sha256``).

    Returns:
        The note, or None when nothing is found (or the fit records no training images).
    """
    train = list(images.get("train", []))
    digests = images.get("train_sha256")
    if digests is not None:
        by_digest = dict(zip(digests, train))
        same = sorted(name for name, sha in held_out.items() if sha in by_digest)
        if not same:
            return None
        example = f"{same[0]} = the fit's {by_digest[held_out[same[0]]]}"
        return (f"{len(same)} held-out image(s) have the same bytes (sha256) as the fit's training images "
                f"(e.g. {example}); compare on held-out images")
    if not train:
        return None
    named = set(train) & set(held_out)
    found = (f"{len(named)} image name(s) are among them; compare on held-out images" if named
             else "no image name is among them")
    return f"the fit records no sha256 per training image, so they were compared by name only: {found}"


def add_parser(sub) -> None:
    """The ``compare`` subcommand and its options."""
    p = sub.add_parser("compare", help="Patch your fitted model with every token-reduction method and ratio and "
                                       "compare each with the unpatched model: fidelity, throughput, FLOPs.",
                       description="Compare taskgeom.patch's methods on a fitted timm model (--timm NAME [--weights "
                                   "FILE]) or local Hugging Face directory (--hf DIR) over held-out images; see "
                                   "docs/patch.md.")
    inspect_command.add_inspect_flags(p, SHARED, CHANGED)
    p.add_argument("--fit", required=True, metavar="DIR", help="the directory `taskgeom fit` wrote for this model")
    p.add_argument("--ratios", type=ratio_grid, nargs="+", default=[0.25, 0.5, 0.75], metavar="ETA",
                   help="fractions of patch tokens removed, each in [0, 1), or grids START:STOP:STEP "
                        "(0.1:0.9:0.1 is 0.1, 0.2, ..., 0.9) (default 0.25 0.5 0.75)")
    names = tuple(METHODS)  # the registry as it stands when the parser is built (methods added at run time too)
    p.add_argument("--methods", nargs="+", choices=names, metavar="METHOD",
                   help=f"methods to compare (default: every one the model runs: {', '.join(names)})")
    p.add_argument("--batch-size", type=positive_int, default=16, help="images per forward (default 16)")
    p.add_argument("--repeats", type=positive_int, default=5, help="timed rounds per setting (default 5)")
    p.add_argument("--seed", type=non_negative_int, default=0, help="seeds random's draws (default 0)")
    p.add_argument("--out", default="compare", metavar="DIR", help="where the files go (default compare/)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    return inspect_command.offline(_run, args)


def _linear(args: argparse.Namespace, fitted, digests: dict):
    """Decoder ``linear``'s head, the file the fit recorded (by sha256), or None for other decoders."""
    if fitted.decoder != "linear":
        return None
    recorded = fitted.model.get("linear", {}).get("sha256")
    if not args.linear:
        raise ValueError(f"--linear: the fit in {args.fit} is through a linear head; give its file")
    if digests["linear"]["sha256"] != recorded:
        raise ValueError(f"--linear {args.linear}: not the head the fit in {args.fit} was made with (sha256 differs)")
    from torch import nn

    from taskgeom.inspection.hosts import read_linear

    weight, bias = read_linear(args.linear)
    head = nn.Linear(weight.shape[1], weight.shape[0], bias=bias is not None)
    head.weight.data.copy_(weight)
    if bias is not None:
        head.bias.data.copy_(bias)
    return head.eval().requires_grad_(False)


def _methods(args: argparse.Namespace, fitted, model) -> tuple[list[str], list[str]]:
    """The methods to run and notes on those left out: every one the model runs, or the ones named
    (a named one it cannot run is refused)."""
    from taskgeom.patching.families import structure
    from taskgeom.patching.patch import PatchError, check_fit, check_method

    struct, chosen, notes = structure(model), [], []
    for name in args.methods or tuple(METHODS):
        try:
            check_fit(fitted, struct, check_method(name))
            chosen.append(name)
        except PatchError as err:
            if args.methods:
                raise
            notes.append(f"{name} left out: {err}")
    if not chosen:
        raise ValueError(f"--fit {args.fit}: no method can run on this model ({'; '.join(notes)})")
    return chosen, notes


def _run(args: argparse.Namespace) -> int:
    import torch
    from tqdm import tqdm

    from taskgeom.comparing import compare_model, output
    from taskgeom.fitting import check_model, load_fitted
    from taskgeom.inspection.inputs import image_files, read_rgb

    if args.threads:
        torch.set_num_threads(args.threads)
    args.ratios = ratios_of(args.ratios)
    fitted = load_fitted(args.fit)
    files = image_files(args.images, args.max_images)
    torch.manual_seed(int(fitted.record.get("settings", {}).get("seed", 0)))  # timm's init, as `fit` built it
    model, transform, cfg, _ = inspect_command._load(args)
    weights = check_model(fitted, model, warn=False)
    model.eval()
    root = Path(args.images).expanduser()
    names = [f.relative_to(root).as_posix() for f in files]
    provenance = {**inspect_command._provenance(args, files, names, cfg), "stage": "compare",
                  "code_version": inspect_command.code_version("taskgeom.comparing.run")}
    linear = _linear(args, fitted, provenance["input"]["sha256"])
    methods, notes = _methods(args, fitted, model)
    overlap = training_overlap(provenance["input"]["sha256"]["images"]["files"], fitted.record.get("images", {}))
    notes += [f"note: {line}" for line in (weights, overlap) if line]
    images = [transform(read_rgb(f)) for f in files]
    progress = lambda it, **kw: tqdm(it, file=sys.stderr, leave=False, disable=None, **kw)  # noqa: E731
    comp = compare_model(model, fitted, images, names, ratios=args.ratios, methods=methods,
                         batch_size=args.batch_size, repeats=args.repeats, seed=args.seed, linear=linear,
                         progress=progress)
    comp.notes += notes
    label = args.timm or Path(args.hf).name
    fit = {"directory": str(args.fit), "layer": fitted.layer, "decoder": fitted.decoder, "path": fitted.path,
           "layout": fitted.layout, "verdict": (fitted.quality.get("head") or {}).get("verdict")}
    settings = {"ratios": args.ratios, "methods": methods, "batch_size": args.batch_size, "repeats": args.repeats,
                "seed": args.seed, "threads": torch.get_num_threads()}
    output.write(comp, label, args.out, fit, settings, names, provenance)
    print(output.summary(comp, label))
    print(f"wrote {', '.join(str(Path(args.out) / f) for f in output.FILES.values())}")
    return 0
