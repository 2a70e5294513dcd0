"""``taskgeom``: one subcommand per pipeline stage, plus parameter and DAG utilities.

Snakemake rules and DVC stages call exactly these subcommands (see stages.py).
"""

from __future__ import annotations

import argparse
import importlib
import json
import logging
import os
import shutil
import sys
import time
from pathlib import Path

from taskgeom import __version__
from taskgeom.pipeline import compare_command, config, fit_command, inspect_command, server
from taskgeom.pipeline.lock import stage_lock
from taskgeom.pipeline.publish import KEPT, staged_outputs
from taskgeom.pipeline.registry import STAGES
from taskgeom.pipeline.stage import Collect, Stage, param_keys, resolve

PROFILES_DIR = Path("params")
# The errors a user fixes (each names the file or key), besides ParamsError and FileNotFoundError:
# one line and exit status 2. Each is looked up once its module is loaded (none was raised before),
# so a command or stage that needs no torch never loads it.
USER_ERRORS = {"taskgeom.artifacts.checkpoints": "CheckpointError", "taskgeom.data.hdf5": "StoreError",
               "taskgeom.data.sources": "SourceError", "taskgeom.finite": "NonFiniteError"}


def user_error(exc: Exception) -> bool:
    """Whether ``exc`` is one of the errors a user fixes (``USER_ERRORS``)."""
    loaded = tuple(getattr(sys.modules[m], name) for m, name in USER_ERRORS.items() if m in sys.modules)
    return isinstance(exc, (config.ParamsError, FileNotFoundError, *loaded))


def missing_inputs(inputs: dict) -> list[str]:
    paths = [p for v in inputs.values() for p in (v if isinstance(v, list) else [v])]
    return [str(p) for p in paths if not p.exists()]


def setup_logging(log_file: str | None) -> logging.Logger:
    log = logging.getLogger("taskgeom")
    log.handlers.clear()
    log.setLevel(logging.INFO)
    log.propagate = False
    fmt = logging.Formatter("%(asctime)s %(levelname)s %(message)s", "%H:%M:%S")
    handlers: list[logging.Handler] = [logging.StreamHandler(sys.stderr)]
    if log_file:
        Path(log_file).parent.mkdir(parents=True, exist_ok=True)
        handlers.append(logging.FileHandler(log_file, mode="w"))
    for h in handlers:
        h.setFormatter(fmt)
        log.addHandler(h)
    return log


def run_stage(stage: Stage, args: argparse.Namespace) -> int:
    from taskgeom.pipeline import identity
    from taskgeom.pipeline.dag import dvc_values, rule_values
    from taskgeom.pipeline.from_lock import from_lock
    from taskgeom.pipeline.made import RERUN, input_sha256, making, record, unchanged
    from taskgeom.pipeline.runtime import StageContext, resolve_device, use_threads

    threads = use_threads(stage.threads)  # before anything imports torch
    setup_logging(None)  # a call refused below writes nothing, its log file included
    params = config.load(args.params)
    value = getattr(args, stage.wildcard) if stage.wildcard else None
    if stage.foreach and value not in (listed := config.get(params, stage.foreach)):
        raise config.ParamsError(f"{args.params}: {stage.wildcard} {value!r} is not listed in {stage.foreach} "
                                 f"(listed: {', '.join(listed) or 'none'})")
    inputs, outputs = resolve(stage, params, value)
    if missing := missing_inputs(inputs):
        raise FileNotFoundError(f"stage {stage.name}: missing input(s): {', '.join(missing)}")
    keys = param_keys(stage, params, value)
    address = stage.address(value)
    with stage_lock(stage.name, value):
        log = setup_logging(args.log)
        ident, read = identity.read(), input_sha256(inputs)
        made = making(read, rule_values(stage, params, value, ident), stage.code)
        values = dvc_values(stage, params, value, ident)
        if unchanged(address, made, outputs) or from_lock(address, made, read, values, outputs):  # pipeline/made.py
            log.info("stage %s: its inputs, parameters and code are those its published outputs were made from; "
                     "kept them (%s=1 runs it anyway)", address, RERUN)
            return 0
        with staged_outputs(outputs, KEPT) as staged:
            device = resolve_device(params["device"]) if "device" in keys else "cpu"
            ctx = StageContext(stage.name, inputs, staged, config.select(params, keys), value, device, log, threads,
                               stage.code)
            start = time.perf_counter()
            log.info("stage %s%s on %s, %d thread(s)", stage.name, f" [{value}]" if value else "", device, threads)
            try:
                importlib.import_module(stage.runner).run(ctx)
                if absent := [str(outputs[k]) for k, p in staged.items() if not p.exists()]:
                    raise RuntimeError(f"stage {stage.name} finished without writing: {', '.join(absent)}")
            except Exception as exc:
                log_failure(log, exc)
                raise
        record(address, made, read, values, outputs)
        log.info("stage %s done in %.1f s", stage.name, time.perf_counter() - start)
    return 0


def one_line(exc: BaseException) -> str:
    """The error and its notes, on one line."""
    return " ".join([str(exc), *getattr(exc, "__notes__", [])])


def log_failure(log: logging.Logger, exc: Exception) -> None:
    """Write why a stage failed to its log file (not to stderr, where ``main`` says it): the
    one line a user fixes by, or the traceback of an unexpected error. The log is the file
    Snakemake points to, and under SLURM the job's stderr is another file."""
    unexpected = not user_error(exc)
    record = log.makeRecord(log.name, logging.ERROR, __file__, 0, "taskgeom: error: %s", (one_line(exc),),
                            (type(exc), exc, exc.__traceback__) if unexpected else None)
    for handler in log.handlers:
        if isinstance(handler, logging.FileHandler):
            handler.handle(record)


def params_command(args: argparse.Namespace) -> int:
    if args.action == "check":
        config.load(args.file)
        print(f"{args.file}: valid")
        return 0
    profiles = sorted(p.stem for p in PROFILES_DIR.glob("*.yaml"))
    if args.profile not in profiles:
        raise config.ParamsError(f"{args.profile}: not a profile of {PROFILES_DIR}/ (profiles: {', '.join(profiles)}); "
                                 "edit params.yaml itself, or add params/NAME.yaml")
    source = PROFILES_DIR / f"{args.profile}.yaml"
    config.load(source)  # never copy an invalid profile over a working params.yaml
    shutil.copyfile(source, "params.yaml")
    print(f"params.yaml <- {source}; run `snakemake -c2` or `dvc repro` to bring results up to date")
    return 0


def dvc_yaml_command(args: argparse.Namespace) -> int:
    from taskgeom.pipeline.dag import dvc_yaml_text

    text = dvc_yaml_text()
    path = Path(args.path)
    if args.check:
        if not path.is_file() or path.read_text() != text:
            print(f"{path} is stale: regenerate it with `taskgeom dvc-yaml`", file=sys.stderr)
            return 1
        print(f"{path} is up to date")
        return 0
    path.write_text(text)
    print(f"wrote {path}")
    return 0


def provenance_command(args: argparse.Namespace) -> int:
    """Print where each file came from (its provenance record, as JSON)."""
    from taskgeom.artifacts import provenance

    records = {}
    for path in args.files:
        try:
            records[path] = provenance.read(path)
        except ValueError as exc:
            print(f"taskgeom: error: {exc}", file=sys.stderr)
            return 2
    print(json.dumps(records if len(records) > 1 else next(iter(records.values())), indent=2, sort_keys=True))
    return 0


def fixtures_command(args: argparse.Namespace) -> int:
    """Write a fixture set (paper-mini: the paper's data sets and models in miniature, real formats)."""
    from taskgeom.fixtures.paper_mini import MANIFEST, write_paper_mini

    try:
        manifest = write_paper_mini(Path(args.dir))
    except FileExistsError as exc:
        print(f"taskgeom: error: {exc}", file=sys.stderr)
        return 2
    print(f"wrote {len(manifest['files'])} files under {args.dir}; see {Path(args.dir) / MANIFEST}")
    return 0


def data_command(args: argparse.Namespace) -> int:
    """Link a data set or checkpoint where this machine keeps it (pipeline/external.py)."""
    from taskgeom.pipeline.external import link

    try:
        where = link(args.name, args.path)
    except (OSError, ValueError) as exc:
        print(f"taskgeom: error: {exc}", file=sys.stderr)
        return 2
    print(f"{where} -> {os.readlink(where)}")
    return 0


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="taskgeom",
        description="Task-induced pullback metrics on ViT features: the pipeline's stages and utilities. "
                    "Each stage reads params.yaml (validated first), its declared inputs, and writes its "
                    "declared outputs atomically. `snakemake -c2` or `dvc repro` runs them all in order.",
    )
    p.add_argument("--version", action="version", version=f"taskgeom {__version__}")
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for s in STAGES:
        sp = sub.add_parser(s.name, help=s.help, description=s.help + _io_help(s),
                            formatter_class=argparse.RawDescriptionHelpFormatter)
        if s.wildcard:
            sp.add_argument(f"--{s.wildcard}", required=True, help=f"which {s.wildcard} (one of params {s.foreach})")
        sp.add_argument("--params", default="params.yaml", help="parameters file (default: params.yaml)")
        sp.add_argument("--log", default=None, help="also write the log to this file")
        sp.set_defaults(func=lambda a, s=s: run_stage(s, a))
    pp = sub.add_parser("params", help="Check a parameters file, or switch params.yaml to a profile.")
    psub = pp.add_subparsers(dest="action", required=True)
    check = psub.add_parser("check", help="Validate a parameters file against the schema.")
    check.add_argument("file", nargs="?", default="params.yaml")
    use = psub.add_parser("use", help="Copy params/PROFILE.yaml over params.yaml (default, smoke, paper, ...).")
    use.add_argument("profile", help="the name of a file params/PROFILE.yaml: default, smoke, paper, ...")
    pp.set_defaults(func=params_command)
    dv = sub.add_parser("dvc-yaml", help="Generate dvc.yaml from the stage registry (or --check it is current).")
    dv.add_argument("--check", action="store_true")
    dv.add_argument("--path", default="dvc.yaml")
    dv.set_defaults(func=dvc_yaml_command)
    pv = sub.add_parser("provenance", help="Print where a result file came from: stage, code version, "
                                           "parameters and machine.")
    pv.add_argument("files", nargs="+", metavar="FILE")
    pv.set_defaults(func=provenance_command)
    fx = sub.add_parser("fixtures", help="Write small fixture files in the real formats of the paper's data "
                                         "sets and models (no downloads).")
    fxsub = fx.add_subparsers(dest="set", required=True)
    mini = fxsub.add_parser("paper-mini", help="ImageNet-val/-Sketch folders, NYU-Depth-V2 .mat files and "
                                               "random-weight mini checkpoints, with a MANIFEST.json.")
    mini.add_argument("dir", metavar="DIR", help="a new or empty directory, or an earlier paper-mini output")
    fx.set_defaults(func=fixtures_command)
    inspect_command.add_parser(sub)
    fit_command.add_parser(sub)
    compare_command.add_parser(sub)
    da = sub.add_parser("data", help="Say where this machine keeps a data set or checkpoint (data/external/NAME).")
    dasub = da.add_subparsers(dest="action", required=True)
    ln = dasub.add_parser("link", help="Point data/external/NAME at PATH (a folder or file), replacing an earlier "
                                       "link; the pipeline tracks the files by content, not location.")
    ln.add_argument("name", metavar="NAME", help="the name profiles read it by, e.g. imagenet-val or paper-mini")
    ln.add_argument("path", metavar="PATH", help="where this machine keeps it")
    da.set_defaults(func=data_command)
    sv = sub.add_parser("serve", help="Import every stage once and run the taskgeom commands of every process "
                                      f"whose environment has {server.ENV}=SOCKET (see pipeline/server.py).")
    sv.add_argument("--socket", required=True, help="the Unix socket to listen on")
    sv.set_defaults(func=lambda a: server.serve(a.socket, main))
    return p


def _io_help(s: Stage) -> str:
    deps = [d.template.replace("{item}", "<each>") if isinstance(d, Collect) else d for d in s.deps.values()]
    lines = ["", "", "inputs:  " + (", ".join(deps) or "none"), "outputs: " + ", ".join(s.outs.values()),
             "params:  " + ", ".join(s.params)]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    try:
        return args.func(args)
    except Exception as exc:
        if not user_error(exc):
            raise
        print(f"taskgeom: error: {one_line(exc)}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
