"""``taskgeom inspect``: the tractability diagnostic of a user's own model on a folder of images
(``taskgeom.inspection``; docs/inspect.md). Nothing is downloaded: timm models are built with
``pretrained=False`` and take local weights only, Hugging Face directories load with
``local_files_only`` and the hub offline."""

from __future__ import annotations

import argparse
import copy
import os
import re
import sys
from collections.abc import Callable
from pathlib import Path


def positive_int(text: str) -> int:
    """An argparse type: an integer ≥ 1 (argparse names the flag in its error)."""
    return _int_at_least(text, 1)


def non_negative_int(text: str) -> int:
    """An argparse type: an integer ≥ 0."""
    return _int_at_least(text, 0)


def _int_at_least(text: str, low: int) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer ≥ {low}, got {text!r}") from None
    if value < low:
        raise argparse.ArgumentTypeError(f"expected an integer ≥ {low}, got {value}")
    return value


def power_iters(text: str) -> int | str:
    """An argparse type: ``auto`` or an integer ≥ 0 (``diagnostics.diagnose``'s q)."""
    if text == "auto":
        return text
    try:
        return non_negative_int(text)
    except argparse.ArgumentTypeError:
        raise argparse.ArgumentTypeError(f"expected an integer ≥ 0 or 'auto', got {text!r}") from None


def add_parser(sub) -> None:
    """The ``inspect`` subcommand and its options."""
    p = sub.add_parser("inspect", help="The tractability diagnostic of your own model on a folder of images: "
                                       "κ_cap(r), erank, r_0.90, token CV, the regime and the tool that fits it.",
                       description="Diagnose a timm model (--timm NAME [--weights FILE]) or a local Hugging Face "
                                   "directory (--hf DIR) on the images under --images; see docs/inspect.md.")
    model = p.add_mutually_exclusive_group(required=True)
    model.add_argument("--timm", metavar="NAME", help="a timm model name, built with pretrained=False")
    model.add_argument("--hf", metavar="DIR", help="a local Hugging Face model directory (save_pretrained)")
    p.add_argument("--weights", metavar="FILE", help="local weights for --timm (.safetensors, .pth, .bin)")
    p.add_argument("--model-args", nargs="+", default=[], metavar="KEY=VALUE",
                   help="--timm: timm.create_model arguments, e.g. num_classes=10 depth=6 (values read as YAML)")
    p.add_argument("--input-size", type=positive_int, metavar="S",
                   help="--timm: square input side, a multiple of the patch size (default: the size the model is "
                        "built for)")
    p.add_argument("--images", required=True, metavar="DIR", help="a folder of images, read recursively")
    p.add_argument("--max-images", type=positive_int, default=20, metavar="N",
                   help="the first N images, sorted (default 20)")
    p.add_argument("--decoder", help="cls, logits, depth or linear (default: the model's own head)")
    p.add_argument("--linear", metavar="FILE", help="a linear head (safetensors: weight (K, D), bias (K,)) on the "
                                                    "pooled embedding, as decoder 'linear'")
    p.add_argument("--layers", type=non_negative_int, nargs="+", metavar="L",
                   help="blocks to probe (default: a middle and a late)")
    p.add_argument("--r", type=positive_int, default=20, help="rank budget r (default 20)")
    p.add_argument("--num-probes", type=non_negative_int, default=100, help="most SLQ starts (default 100)")
    p.add_argument("--power-iters", type=power_iters, default=2, help="power iterations q, or 'auto' (default 2)")
    p.add_argument("--seed", type=non_negative_int, default=0)
    p.add_argument("--threads", type=non_negative_int, default=0, help="torch threads (default 0: torch's)")
    p.add_argument("--per-image", action="store_true", help="also print every image's values")
    p.add_argument("--out", default="inspect", metavar="DIR", help="where inspect.json and inspect.png go")
    p.set_defaults(func=run)


def add_inspect_flags(p: argparse.ArgumentParser, shared: tuple[str, ...], changed: dict[str, dict]) -> None:
    """Copies of this parser's model flags (``--timm`` | ``--hf``, one required) and of the flags
    named by ``shared`` (destinations) on ``p``, with ``changed[dest]``'s attributes set on each
    copy: how ``fit`` and ``compare`` take a model exactly as ``inspect`` does."""
    sub = argparse.ArgumentParser(add_help=False).add_subparsers()
    add_parser(sub)
    actions = {a.dest: a for a in sub.choices["inspect"]._actions}
    group = p.add_mutually_exclusive_group(required=True)
    for dest in ("timm", "hf"):
        group._add_action(copy.copy(actions[dest]))
    for dest in shared:
        action = copy.copy(actions[dest])
        for key, value in changed.get(dest, {}).items():
            setattr(action, key, value)
        p._add_action(action)


def _load(args: argparse.Namespace):
    """(model, its transform, the preprocessing config, the zoo adapter it is or None)."""
    if args.timm:
        from taskgeom.inspection.inputs import timm_transform
        from taskgeom.inspection.zoo import timm_adapter

        model = _build_timm(args.timm, args.weights, args.model_args)
        transform, cfg = timm_transform(model, args.input_size)
        return model, transform, cfg, timm_adapter(model)
    if args.weights or args.input_size or args.model_args:
        raise ValueError("--weights, --model-args and --input-size go with --timm; an --hf directory holds its "
                         "weights and its image processor")
    from taskgeom.inspection.inputs import hf_transform
    from taskgeom.inspection.zoo import hf_adapter
    from taskgeom.models.adapters.hf_any import load_hf

    model = load_hf(args.hf)
    transform, cfg = hf_transform(args.hf)
    return model, transform, cfg, hf_adapter(model)


def _build_timm(name: str, weights: str | None, pairs: list[str]):
    """``build_timm`` with the --model-args; what timm refuses becomes one line naming --model-args
    (an unknown key with the keys the model's class accepts)."""
    from taskgeom.models.adapters.timm_any import build_timm

    kwargs = _model_args(pairs)
    try:
        return build_timm(name, weights, **kwargs)
    except TypeError as exc:
        unknown = re.search(r"unexpected keyword argument '(\w+)'", str(exc))
        if unknown:
            raise ValueError(f"--model-args {unknown.group(1)}=…: timm's {name!r} takes no argument "
                             f"{unknown.group(1)!r}; it takes {', '.join(_accepted(name))}") from None
        raise ValueError(f"--model-args {' '.join(pairs)}: timm cannot build {name!r} with them ({exc})") from None
    except (AssertionError, RuntimeError) as exc:
        raise ValueError(f"--model-args {' '.join(pairs) or '(none)'}: timm cannot build {name!r} with them "
                         f"({exc or type(exc).__name__})") from None


def _accepted(name: str) -> list[str]:
    """The keyword arguments of the class timm builds for ``name`` (built on the meta device)."""
    import inspect

    import timm
    import torch

    with torch.device("meta"):
        model = timm.create_model(name, pretrained=False)
    skip = {"self", "device", "dtype", "kwargs", "args"}
    return [k for k in inspect.signature(type(model).__init__).parameters if k not in skip]


def _model_args(pairs: list[str]) -> dict:
    """KEY=VALUE pairs -> create_model kwargs, each value read as YAML (10 -> int, [1, 2] -> list)."""
    import yaml

    out = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key.isidentifier():
            raise ValueError(f"--model-args {pair!r}: expected KEY=VALUE")
        try:
            out[key] = yaml.safe_load(value)
        except yaml.YAMLError as exc:
            raise ValueError(f"--model-args {pair!r}: the value is not YAML ({' '.join(str(exc).split())})") from None
    return out


def _digests(args: argparse.Namespace, files: list[Path], names: list[str]) -> dict:
    """sha256 of what the reading rests on: each image (by its name under --images) and their
    ``data.digests.combined`` digest, the --weights file, every file of the --hf directory (by its
    path in it) with their combined digest, and the --linear file."""
    from taskgeom.data.digests import Digests, combined, walk_files

    with Digests() as d:
        images = {name: d.file_sha256(f) for name, f in zip(names, files)}
        out = {"images": {"sha256": combined(images), "files": images}}
        if args.weights:
            out["weights"] = {"path": args.weights, "sha256": d.file_sha256(Path(args.weights).expanduser())}
        if args.hf:
            root = Path(args.hf).expanduser()
            hf = {p.relative_to(root).as_posix(): d.file_sha256(p) for p in walk_files(root)}
            out["hf"] = {"path": args.hf, "sha256": combined(hf), "files": hf}
        if args.linear:
            out["linear"] = {"path": args.linear, "sha256": d.file_sha256(Path(args.linear).expanduser())}
    return out


def _provenance(args: argparse.Namespace, files: list[Path], names: list[str], cfg: dict) -> dict:
    import json

    from taskgeom.pipeline.runtime import code_version, machine

    cfg = json.loads(json.dumps(cfg, default=str))  # processor settings may hold enums and other objects
    settings = {k: v for k, v in vars(args).items() if k not in ("func", "command")}
    return {"stage": "inspect", "code_version": code_version(), "params": settings, "device": "cpu",
            "machine": machine("cpu"), "input": {"images": args.images, "files": [str(f) for f in files],
                                                 "preprocess": cfg, "sha256": _digests(args, files, names)}}


def offline(work: Callable[[argparse.Namespace], int], args: argparse.Namespace) -> int:
    """``work(args)`` with the Hugging Face hub offline (nothing is downloaded), a refusal (a
    ValueError, such as ``Unsupported``, or an OSError) printed as one line and exit status 2:
    how ``inspect``, ``fit`` and ``compare`` run."""
    os.environ["HF_HUB_OFFLINE"] = "1"
    os.environ["TRANSFORMERS_OFFLINE"] = "1"
    try:
        return work(args)
    except (ValueError, OSError) as exc:
        print(f"taskgeom: error: {(str(exc).strip().splitlines() or [type(exc).__name__])[0]}", file=sys.stderr)
        return 2


def code_version(module: str) -> str:
    """The package version and the digest of the code ``module`` runs (``codedeps``), as a stage's
    provenance records it: the same code writes the same bytes at any commit."""
    from taskgeom import __version__
    from taskgeom.pipeline.codedeps import code_files
    from taskgeom.pipeline.runtime import code_digest

    return f"{__version__}+code.{code_digest(code_files(module))[:16]}"


def run(args: argparse.Namespace) -> int:
    return offline(_run, args)


def _run(args: argparse.Namespace) -> int:
    import torch
    from tqdm import tqdm

    from taskgeom.inspection import output
    from taskgeom.inspection.hosts import as_host, with_linear
    from taskgeom.inspection.inputs import image_files, read_rgb
    from taskgeom.inspection.run import inspect_model

    if args.threads:
        torch.set_num_threads(args.threads)
    files = image_files(args.images, args.max_images)
    model, transform, cfg, adapter = _load(args)
    host = as_host(model)
    if args.linear:
        host = with_linear(host, args.linear)
    root = Path(args.images).expanduser()
    images = [transform(read_rgb(f)) for f in files]
    names = [str(f.relative_to(root)) for f in files]
    ins = inspect_model(host, images, names, decoder=args.decoder or ("linear" if args.linear else None),
                        layers=args.layers, r=args.r, num_probes=args.num_probes, power_iters=args.power_iters,
                        seed=args.seed, progress=lambda it: tqdm(it, desc="inspect", unit="image", file=sys.stderr))
    label = args.timm or str(Path(args.hf).name)
    record = output.write(ins, label, args.out, _provenance(args, files, names, cfg), adapter)
    print(output.table(ins, label))
    if args.per_image:
        print("\n" + output.per_image(ins))
    for probe in record["probes"]:
        print("\n" + probe["reading"])
    print(f"\nwrote {Path(args.out) / 'inspect.json'} and {Path(args.out) / 'inspect.png'}")
    return 0
