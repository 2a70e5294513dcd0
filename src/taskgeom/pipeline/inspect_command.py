"""``taskgeom inspect``: the tractability diagnostic of a user's own model on a folder of images
(``taskgeom.inspection``; docs/inspect.md). Nothing is downloaded: timm models are built with
``pretrained=False`` and take local weights only, Hugging Face directories load with
``local_files_only`` and the hub offline."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

TIMM_ADAPTERS = {"vit_base_patch14_dinov2": "dinov2-b14", "vit_base_patch16_clip": "clip-b16"}


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
    p.add_argument("--input-size", type=int, metavar="S",
                   help="--timm: square input side (default: the size the model is built for)")
    p.add_argument("--images", required=True, metavar="DIR", help="a folder of images, read recursively")
    p.add_argument("--max-images", type=int, default=20, metavar="N", help="the first N images, sorted (default 20)")
    p.add_argument("--decoder", help="cls, logits, depth or linear (default: the model's own head)")
    p.add_argument("--linear", metavar="FILE", help="a linear head (safetensors: weight (K, D), bias (K,)) on the "
                                                    "pooled embedding, as decoder 'linear'")
    p.add_argument("--layers", type=int, nargs="+", metavar="L", help="blocks to probe (default: a middle and a late)")
    p.add_argument("--r", type=int, default=20, help="rank budget r (default 20)")
    p.add_argument("--num-probes", type=int, default=100, help="most SLQ starts (default 100)")
    p.add_argument("--power-iters", default="2", help="power iterations q, or 'auto' (default 2)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=int, default=0, help="torch threads (default: torch's)")
    p.add_argument("--per-image", action="store_true", help="also print every image's values")
    p.add_argument("--out", default="inspect", metavar="DIR", help="where inspect.json and inspect.png go")
    p.set_defaults(func=run)


def _load(args: argparse.Namespace):
    """(model, its transform, the preprocessing config, the zoo adapter it matches or None)."""
    if args.timm:
        from taskgeom.inspection.inputs import timm_transform
        from taskgeom.models.adapters.timm_any import build_timm

        model = build_timm(args.timm, args.weights, **_model_args(args.model_args))
        transform, cfg = timm_transform(model, args.input_size)
        adapter = next((a for prefix, a in TIMM_ADAPTERS.items() if args.timm.startswith(prefix)), None)
        return model, transform, cfg, adapter
    if args.weights or args.input_size or args.model_args:
        raise ValueError("--weights, --model-args and --input-size go with --timm; an --hf directory holds its "
                         "weights and its image processor")
    from taskgeom.inspection.inputs import hf_transform
    from taskgeom.models.adapters.hf_any import load_hf

    model = load_hf(args.hf)
    transform, cfg = hf_transform(args.hf)
    adapter = "depth-anything-v2" if model.config.model_type == "depth_anything" else None
    return model, transform, cfg, adapter


def _model_args(pairs: list[str]) -> dict:
    """KEY=VALUE pairs -> create_model kwargs, each value read as YAML (10 -> int, [1, 2] -> list)."""
    import yaml

    out = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key.isidentifier():
            raise ValueError(f"--model-args {pair!r}: expected KEY=VALUE")
        out[key] = yaml.safe_load(value)
    return out


def _provenance(args: argparse.Namespace, files: list[Path], cfg: dict) -> dict:
    import json

    from taskgeom.pipeline.runtime import code_version, machine

    cfg = json.loads(json.dumps(cfg, default=str))  # processor settings may hold enums and other objects
    settings = {k: v for k, v in vars(args).items() if k not in ("func", "command")}
    return {"stage": "inspect", "code_version": code_version(), "params": settings, "device": "cpu",
            "machine": machine("cpu"), "input": {"images": args.images, "files": [str(f) for f in files],
                                                 "preprocess": cfg}}


def run(args: argparse.Namespace) -> int:
    os.environ["HF_HUB_OFFLINE"] = "1"
    os.environ["TRANSFORMERS_OFFLINE"] = "1"
    from taskgeom.inspection.hosts import Unsupported

    try:
        return _run(args)
    except (Unsupported, ValueError, FileNotFoundError, OSError) as exc:
        print(f"taskgeom: error: {str(exc).strip().splitlines()[0]}", file=sys.stderr)
        return 2


def _run(args: argparse.Namespace) -> int:
    import torch
    from tqdm import tqdm

    from taskgeom.inspection import output
    from taskgeom.inspection.hosts import as_host, with_linear
    from taskgeom.inspection.inputs import image_files, read_rgb
    from taskgeom.inspection.run import inspect_model

    if args.threads:
        torch.set_num_threads(args.threads)
    power_iters = args.power_iters if args.power_iters == "auto" else int(args.power_iters)
    files = image_files(args.images, args.max_images)
    model, transform, cfg, adapter = _load(args)
    host = as_host(model)
    if args.linear:
        host = with_linear(host, args.linear)
    root = Path(args.images)
    images = [transform(read_rgb(f)) for f in files]
    names = [str(f.relative_to(root)) for f in files]
    ins = inspect_model(host, images, names, decoder=args.decoder or ("linear" if args.linear else None),
                        layers=args.layers, r=args.r, num_probes=args.num_probes, power_iters=power_iters,
                        seed=args.seed, progress=lambda it: tqdm(it, desc="inspect", unit="image", file=sys.stderr))
    label = args.timm or str(Path(args.hf).name)
    record = output.write(ins, label, args.out, _provenance(args, files, cfg), adapter)
    print(output.table(ins, label))
    if args.per_image:
        print("\n" + output.per_image(ins))
    for probe in record["probes"]:
        print("\n" + probe["reading"])
    print(f"\nwrote {Path(args.out) / 'inspect.json'} and {Path(args.out) / 'inspect.png'}")
    return 0
