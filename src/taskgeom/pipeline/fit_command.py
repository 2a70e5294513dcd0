"""``taskgeom fit``: a user's own model and images to a trained importance head (and SPN), in one
command (``taskgeom.fitting``; docs/fit.md).

The model flags are ``inspect``'s own (its parser's actions are reused, so both commands take a
model the same way, and ``inspect``'s reading can end with the ``fit`` command line), loaded by
``inspect_command``'s loader with its one-line refusals; then the training flags. Nothing is
downloaded.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from pathlib import Path

from taskgeom.pipeline import inspect_command
from taskgeom.pipeline.inspect_command import non_negative_int, positive_int

SHARED = ("weights", "model_args", "input_size", "images", "max_images", "decoder", "linear", "layers", "r",
          "power_iters", "seed", "threads")
CHANGED = {  # dest -> what differs from inspect's flag
    "max_images": {"default": None, "help": "the first N images, sorted (default: every image)"},
    "layers": {"help": "the block to fit at, one (default: the middle block, ⌊B/2⌋ − 1)"},
    "r": {"help": "rank r of the spectral targets (default 20)"},
    "power_iters": {"type": non_negative_int, "default": 1, "help": "power iterations q of the targets (default 1)"},
    "seed": {"help": "seeds the targets, the held-out choice and training (default 0)"},
}
SPN = {"auto": None, "on": True, "off": False}
SKETCHES = ("projected", "rayleigh-ritz")  # fitting.targets.SKETCHES


def positive_float(text: str) -> float:
    """An argparse type: a finite number > 0."""
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if not 0 < value < float("inf"):
        raise argparse.ArgumentTypeError(f"expected a number > 0, got {text!r}")
    return value


def held_out(text: str) -> int | float:
    """An argparse type: a count ≥ 1, or a fraction in (0, 1) of the images."""
    try:
        return positive_int(text)
    except argparse.ArgumentTypeError:
        pass
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if not 0 < value < 1:
        raise argparse.ArgumentTypeError(f"expected a count ≥ 1 or a fraction in (0, 1), got {text!r}")
    return value


def add_parser(sub) -> None:
    """The ``fit`` subcommand and its options."""
    p = sub.add_parser("fit", help="Fit the learned metric to your own model on a folder of images: spectral "
                                   "targets, the importance head (and SPN), its held-out quality, a checkpoint.",
                       description="Fit an importance head (and SPN) to a timm model (--timm NAME [--weights FILE]) "
                                   "or a local Hugging Face directory (--hf DIR) on the images under --images; "
                                   "see docs/fit.md.")
    inspect_command.add_inspect_flags(p, SHARED, CHANGED)
    p.add_argument("--oversample", type=non_negative_int, default=0, metavar="P",
                   help="the sketch's extra columns, ℓ = r + P (default 0; the pipeline's targets stage takes 10)")
    p.add_argument("--sketch", choices=SKETCHES, default="projected",
                   help="how the targets' triplets are taken: projected, (2q + 1)ℓ products, or rayleigh-ritz, the "
                        "pipeline's targets stage, (2q + 2)ℓ (default projected); J is read whole where no dearer")
    p.add_argument("--block-norm-probes", type=non_negative_int, default=0, metavar="K",
                   help="Rademacher VJPs of the block norms ‖J_t‖_F² (default 0: the sketch's first ℓ VJPs give them; "
                        "rayleigh-ritz needs K ≥ 1)")
    p.add_argument("--held-out", type=held_out, default=0.2, metavar="N|F",
                   help="held-out images: a count, or a fraction of the images (default 0.2; at least 1)")
    p.add_argument("--steps", type=positive_int, default=300, help="importance-head training steps (default 300)")
    p.add_argument("--spn-steps", type=positive_int, default=None,
                   help="SPN training steps (default: 20 passes over the training images, ⌈20 n / batch⌉, at most 600)")
    p.add_argument("--spn-lr", type=positive_float, default=0.005, metavar="LR",
                   help="the SPN's peak learning rate (default 0.005; the pipeline's spn stage takes 0.002)")
    p.add_argument("--batch-size", type=positive_int, default=32, help="images per training step (default 32)")
    p.add_argument("--spn", choices=tuple(SPN), default="auto",
                   help="train the SPN: auto (for pooled outputs, the merge path), on, off (default auto)")
    p.add_argument("--out", default="fit", metavar="DIR", help="the fit directory (default fit/)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    return inspect_command.offline(_run, args)


def _logger() -> logging.Logger:
    log = logging.getLogger("taskgeom.fit")
    log.handlers.clear()
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("taskgeom fit: %(message)s"))
    log.addHandler(handler)
    log.setLevel(logging.INFO)
    log.propagate = False
    return log


def _held_out_count(value: int | float, n: int) -> int:
    if n < 2:
        raise ValueError(f"--images: fit needs at least 2 images (one to train on, one held out); found {n}")
    count = value if isinstance(value, int) else max(1, round(value * n))
    if count >= n:
        raise ValueError(f"--held-out {value}: holds out {count} of the {n} image(s), leaving none to train on")
    return count


def _host(args: argparse.Namespace, model):
    """The probe host, its decoder and the layer (``inspect``'s defaults and refusals)."""
    from taskgeom.inspection.hosts import Unsupported, as_host, default_decoder, default_layers, with_linear

    host = as_host(model)
    if args.linear:
        host = with_linear(host, args.linear)
    decoder = args.decoder or default_decoder(host)
    if decoder not in host.decoders:
        raise Unsupported(f"--decoder {decoder}: this model's decoders are {', '.join(host.decoders)}")
    if args.layers and len(args.layers) > 1:
        raise ValueError(f"--layers {' '.join(map(str, args.layers))}: fit learns at one block; run it once per "
                         f"block, each with its own --out")
    layer = args.layers[0] if args.layers else default_layers(host.num_blocks)[0]
    if layer >= host.num_blocks:
        raise ValueError(f"--layers {layer}: the model has blocks 0..{host.num_blocks - 1}")
    return host, decoder, layer


def _model_record(args: argparse.Namespace, identity: dict, digests: dict, cfg: dict) -> dict:
    """fit.json's ``model``: what the user named, the digests of its files, and ``describe``'s identity."""
    record = {"family": identity["family"], "name": args.timm or Path(args.hf).expanduser().resolve().name,
              "args": inspect_command._model_args(args.model_args), "input_size": args.input_size,
              "preprocess": json.loads(json.dumps(cfg, default=str)), **{k: v for k, v in identity.items()
                                                                          if k != "family"}}
    for key in ("weights", "hf", "linear"):
        if key in digests:
            record[key] = {"path": digests[key]["path"], "sha256": digests[key]["sha256"]}
    return record


def _run(args: argparse.Namespace) -> int:
    import torch
    from tqdm import tqdm

    from taskgeom.fitting.identity import describe
    from taskgeom.fitting.run import fit_model
    from taskgeom.fitting.targets import Images
    from taskgeom.fitting.train import spn_steps
    from taskgeom.inspection.inputs import image_files, read_rgb

    if args.sketch == "rayleigh-ritz" and not args.block_norm_probes:
        raise ValueError("--sketch rayleigh-ritz: its block norms and ‖J‖_F² come from Hutchinson probes; give "
                         "--block-norm-probes K ≥ 1 (the pipeline's targets stage takes 32)")
    if args.threads:
        torch.set_num_threads(args.threads)
    files = image_files(args.images, args.max_images)
    count = _held_out_count(args.held_out, len(files))
    torch.manual_seed(args.seed)  # timm's initialisation, when no --weights are given
    model, transform, cfg, _ = inspect_command._load(args)
    identity = describe(model)  # before the host converts it to float32
    host, decoder, layer = _host(args, model)
    root = Path(args.images).expanduser()
    names = [f.relative_to(root).as_posix() for f in files]
    provenance = {**inspect_command._provenance(args, files, names, cfg), "stage": "fit",
                  "code_version": inspect_command.code_version("taskgeom.fitting.run")}
    digests = provenance["input"]["sha256"]
    images = Images(names, [digests["images"]["files"][n] for n in names], lambda i: transform(read_rgb(files[i])))
    settings = {"sketch": args.sketch, "r": args.r, "power_iters": args.power_iters, "oversample": args.oversample,
                "block_norm_probes": args.block_norm_probes, "seed": args.seed, "held_out": count,
                "steps": args.steps, "spn_steps": args.spn_steps or spn_steps(len(files) - count, args.batch_size),
                "spn_lr": args.spn_lr, "batch_size": args.batch_size}
    progress = lambda it, **kw: tqdm(it, file=sys.stderr, leave=False, disable=None, **kw)  # noqa: E731
    record = fit_model(host, images, args.out, layer=layer, decoder=decoder, settings=settings,
                       model=_model_record(args, identity, digests, cfg), provenance=provenance,
                       spn=SPN[args.spn], log=_logger(), progress=progress)
    print(summary(record, args.out))
    return 0


def _interval(s: dict | None) -> str:
    return "undefined" if s is None else f"{s['mean']:.3f} [{s['low']:.3f}, {s['high']:.3f}]"


def summary(record: dict, out: str) -> str:
    """What ``fit`` prints: the fit, the held-out quality, the verdict, the files."""
    lay, head, spn = record["layout"], record["quality"]["head"], record["quality"]["spn"]
    images = record["images"]
    lines = [f"{record['model']['name']}: block {record['layer']}, decoder {record['decoder']}, path {record['path']}; "
             f"tokens {lay['prefix']} + {lay['rows']}×{lay['cols']} of width {lay['dim']}; {images['count']} images: "
             f"{len(images['train'])} to train on, {len(images['held_out'])} held out",
             f"held-out Spearman ρ against e_t ({head['target']}), mean [95% bootstrap interval]:",
             f"  importance head      {_interval(head['rho'])}",
             f"  position-only floor  {_interval(head['rho_position_only'])}"]
    if head["images_left_out"]:
        lines.append(f"  ({head['images_left_out']} held-out image(s) with a constant row left out)")
    if spn is not None:
        lines.append(f"SPN: held-out V1 {_interval(spn['v1'])} against the {spn['reference']} subspace "
                     f"(untrained {_interval(spn['v1_untrained'])})")
    files = ["fit.json", *(n["file"] for n in record["networks"].values())]
    lines += [f"Verdict: {head['verdict']}.", f"Rule: {head['rule']}.",
              f"wrote {', '.join(str(Path(out) / f) for f in files)} (targets cached under {Path(out) / 'targets'})"]
    return "\n".join(lines)
