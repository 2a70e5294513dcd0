"""Loading and validating params.yaml against the JSON schema, before any work."""

from __future__ import annotations

import copy
from functools import cache
from pathlib import Path
from typing import Any

import yaml
from jsonschema import Draft202012Validator
from jsonschema.exceptions import ValidationError

SCHEMA_PATH = Path(__file__).parents[1] / "params.schema.yaml"
# libyaml's parser where PyYAML was built with it: the same documents as yaml.safe_load, parsed in
# C (the schema and a params file are read by every stage command and every Snakemake call)
SAFE_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
# A YAML alias (*name) stands for the whole node its anchor (&name) names, so a few lines of nested
# aliases can stand for billions of nodes, which validation would visit one by one. The profiles
# repeat a few dozen; a parameters file whose aliases repeat more is refused before anything reads it.
MAX_REPEATED_NODES = 100_000


def parse_yaml(text: str) -> Any:
    """``yaml.safe_load(text)``, through ``SAFE_LOADER``."""
    return yaml.load(text, Loader=SAFE_LOADER)


class ParamsError(ValueError):
    """params.yaml is missing, unreadable, or violates the schema; the message names the key."""


@cache
def schema() -> dict:
    return parse_yaml(SCHEMA_PATH.read_text())


def key_of(error: ValidationError) -> str:
    return ".".join(str(p) for p in error.absolute_path) or "<top level>"


def describe(error: ValidationError) -> str:
    """One line naming the key: unknown keys are named themselves, not their parent."""
    if error.validator == "additionalProperties":
        known = set(error.schema.get("properties", {}))
        unknown = sorted(set(error.instance) - known)
        prefix = key_of(error)
        names = [k if prefix == "<top level>" else f"{prefix}.{k}" for k in unknown]
        return f"unknown key {', '.join(names)}"
    if error.validator == "not":
        return f"{key_of(error)}: not allowed here ({error.schema.get('description', 'see the schema')})"
    return f"{key_of(error)}: {error.message}"


def cross_checks(params: dict) -> list[str]:
    """Constraints the schema cannot express, each naming its key."""
    problems = []
    zoo = params["zoo"]
    for name, cfg in zoo.items():
        if cfg["kind"] == "pretrained":
            continue
        for role, source in cfg["sources"].items():
            spec = params["sources"].get(source, {})
            if spec and (spec["kind"] != "world" or spec.get("domain", "rgb") != "rgb"):
                problems.append(f"zoo.{name}.sources.{role}: {source!r} is not a world source of rgb renders "
                                "(a tiny model trains and is scored on the world's arrays)")
        if cfg["embed_dim"] % cfg["num_heads"]:
            problems.append(f"zoo.{name}.num_heads: {cfg['num_heads']} does not divide embed_dim {cfg['embed_dim']}")
        if any(i >= cfg["depth"] for i in cfg.get("read_layers", ())):
            problems.append(f"zoo.{name}.read_layers: {cfg['read_layers']} must be below depth {cfg['depth']}")
        if cfg["kind"] == "multiview" and cfg.get("read_layers") and sorted(cfg["read_layers"]) != cfg["read_layers"]:
            problems.append(f"zoo.{name}.read_layers: must be increasing")
    decoders = {"cls": ("cls", "logits"), "dpt": ("depth",), "trunk": ("cls", "logits", "depth"),
                "multiview": ("camera", "depth", "pointmap")}
    for name, probe in params["diagnose"]["probes"].items():
        key = f"diagnose.probes.{name}"
        cfg = zoo.get(probe["model"])
        if cfg is None:
            problems.append(f"{key}.model: {probe['model']!r} is not a zoo model (zoo: {list(zoo)})")
            continue
        if cfg["kind"] != "pretrained" and probe["decoder"] not in decoders[cfg["kind"]]:
            problems.append(f"{key}.decoder: a {cfg['kind']} model has decoders {list(decoders[cfg['kind']])}")
        if cfg["kind"] != "pretrained" and any(i >= cfg["depth"] for i in probe["layers"] or ()):
            problems.append(f"{key}.layers: {probe['layers']} must be below depth {cfg['depth']}")
        if probe.get("output_metric") == "so3" and probe["decoder"] != "camera":
            problems.append(f"{key}.output_metric: so3 applies to the camera decoder only")
    problems += source_checks(params) + learn_checks(params) + prune_checks(params) + retrieval_checks(params)
    world = params["world"]
    for key in ("num_objects", "fov_deg", "room_fov_deg"):
        lo, hi = world[key]
        if lo > hi:
            problems.append(f"world.{key}: lower bound {lo} exceeds upper bound {hi}")
    return problems


SOURCE_USERS = ("zoo", "diagnose.probes", "vae", "learn.probes", "prune.cls", "prune.dense", "retrieval")


def source_checks(params: dict) -> list[str]:
    """Every source a stage names (``source``, ``sources.<role>``) is defined under sources."""
    problems, defined = [], params["sources"]
    for section in SOURCE_USERS:
        for name, entry in get(params, section).items():
            named = {"source": entry["source"]} if "source" in entry else entry.get("sources", {})
            for role, source in named.items():
                if source not in defined:
                    where = "source" if role == "source" else f"sources.{role}"
                    problems.append(f"{section}.{name}.{where}: {source!r} is not defined under sources "
                                    f"(defined: {sorted(defined)})")
    return problems


def learn_checks(params: dict) -> list[str]:
    """Cross-references of the vae and learn sections."""
    problems = []
    zoo, learn = params["zoo"], params["learn"]
    for name, cfg in params["vae"].items():
        if cfg["model"] not in zoo:
            problems.append(f"vae.{name}.model: {cfg['model']!r} is not a zoo model")
    for name, probe in learn["probes"].items():
        kind, host = probe["host"].split("/", 1)
        if kind == "zoo" and host not in zoo:
            problems.append(f"learn.probes.{name}.host: {host!r} is not a zoo model")
        if kind == "vae" and host not in params["vae"]:
            problems.append(f"learn.probes.{name}.host: no VAE {host!r} under vae")
        if kind == "vae" and probe["layers"] is not None:
            problems.append(f"learn.probes.{name}.layers: a VAE host is probed at its registers; use null")
    for name in learn["spn"]:
        if name not in learn["probes"]:
            problems.append(f"learn.spn.{name}: not a probe of learn.probes")
    for name, head in learn["heads"].items():
        if head["probe"] not in learn["probes"]:
            problems.append(f"learn.heads.{name}.probe: {head['probe']!r} is not a probe of learn.probes")
        train = {**learn["head_defaults"], **head}["train_images"]
        probe = learn["probes"].get(head["probe"], {})
        if train > {**learn["targets"]["images"], **probe.get("images", {})}["train"]:
            problems.append(f"learn.heads.{name}.train_images: {train} exceeds the probe's training images")
    return problems


def prune_checks(params: dict) -> list[str]:
    """Cross-references of the prune section: models, heads, SPNs, resolutions, schedules."""
    problems = []
    zoo, learn, prune, world = params["zoo"], params["learn"], params["prune"], params["world"]
    if not prune["cls"] and not prune["dense"]:
        return problems
    world_roles = {role for kind in ("cls", "dense") for cfg in prune[kind].values()
                   for role, name in cfg["sources"].items() if params["sources"].get(name, {}).get("kind") == "world"}
    rendered = [world["resolution"], *world.get("eval_resolutions", [])]
    if world_roles & {"rgb", "sketch"} and prune["resolutions"][0] != world["resolution"]:
        problems.append("prune.resolutions: must start with the base resolution "
                        f"world.resolution = {world['resolution']} (a domain reads the world)")
    for r in prune["resolutions"] if world_roles & {"rgb", "sketch"} else ():
        if r not in rendered:
            problems.append(f"prune.resolutions: {r} is not rendered "
                            f"(world.resolution + world.eval_resolutions: {rendered})")
    for kind in ("cls", "dense"):
        for name, cfg in prune[kind].items():
            key = f"prune.{kind}.{name}"
            model = zoo.get(cfg["model"])
            if model is None:
                problems.append(f"{key}.model: {cfg['model']!r} is not a zoo model")
                continue
            head = learn["heads"].get(cfg["head"])
            if head is None:
                problems.append(f"{key}.head: {cfg['head']!r} is not an importance head of learn.heads")
            else:
                seeds = {**learn["head_defaults"], **head}["seeds"]
                if missing := [s for s in prune["seeds"] if s not in seeds]:
                    problems.append(f"{key}.head: head {cfg['head']!r} is trained for seeds {seeds}; prune.seeds "
                                    f"also asks for {missing}")
            depth = model.get("depth")
            if kind == "cls":
                if cfg["spn"] not in learn["spn"]:
                    problems.append(f"{key}.spn: {cfg['spn']!r} is not an SPN of learn.spn")
                if depth is not None and not 0 <= cfg["layer"] < depth - 1:
                    problems.append(f"{key}.layer: {cfg['layer']} must be below the final block {depth - 1}")
            else:
                if head is not None and head["probe"] != cfg["probe"]:
                    problems.append(f"{key}.probe: the head {cfg['head']!r} is trained on probe {head['probe']!r}")
                last = max(model.get("read_layers", [0])) if depth is not None else None
                for schedule in cfg["schedules"]:
                    if schedule != sorted(set(schedule)) or (last is not None and schedule[-1] >= last):
                        problems.append(f"{key}.schedules: {schedule} must be strictly increasing blocks below the "
                                        f"decoder's last block {last}")
    if "bank" in world_roles and prune["knn"]["bank_images"] > world["splits"]["train"]:
        problems.append(f"prune.knn.bank_images: {prune['knn']['bank_images']} exceeds world.splits.train")
    if world_roles & {"rgb", "sketch"} and prune["images"] > world["splits"]["test"]:
        problems.append(f"prune.images: {prune['images']} exceeds world.splits.test")
    return problems


def retrieval_checks(params: dict) -> list[str]:
    """Cross-references of the retrieval section."""
    problems = []
    learn, world = params["learn"], params["world"]
    for name, cfg in params["retrieval"].items():
        key = f"retrieval.{name}"
        probe = learn["probes"].get(cfg["probe"])
        if probe is None:
            problems.append(f"{key}.probe: {cfg['probe']!r} is not a probe of learn.probes")
        elif probe["host"] != f"zoo/{cfg['model']}" or probe["layers"] != [cfg["layer"]]:
            problems.append(f"{key}.probe: {cfg['probe']!r} does not probe zoo/{cfg['model']} at layer {cfg['layer']}")
        else:
            train = {**learn["targets"]["images"], **probe.get("images", {})}["train"]
            if cfg["holdout"] >= train - 1:
                problems.append(f"{key}.holdout: {cfg['holdout']} leaves fewer than 2 "
                                f"of the probe's {train} training images")
        head = learn["heads"].get(cfg["head"])
        if head is None or head["probe"] != cfg["probe"]:
            problems.append(f"{key}.head: {cfg['head']!r} is not an importance head of probe {cfg['probe']!r}")
        if cfg["queries"] + cfg["gallery"] > world["splits"]["test"] and any(
                params["sources"].get(cfg["sources"][d], {}).get("kind") == "world" for d in cfg["domains"]):
            problems.append(f"{key}.gallery: queries + gallery exceed world.splits.test ({world['splits']['test']})")
        if max(cfg["recall_k"]) > cfg["gallery"] or cfg["shortlist"] > cfg["gallery"]:
            problems.append(f"{key}.recall_k: k and the shortlist must not exceed the gallery")
        if cfg["examples"] > cfg["queries"]:
            problems.append(f"{key}.examples: more examples than queries")
    return problems


def validate(params: Any, source: str = "params.yaml") -> dict:
    """Raise ParamsError listing every violation (each naming its key); return params."""
    errors = sorted(Draft202012Validator(schema()).iter_errors(params), key=lambda e: list(map(str, e.absolute_path)))
    problems = [describe(e) for e in errors]
    if not problems:
        problems = cross_checks(params)
    if problems:
        raise ParamsError(f"{source}: invalid parameters:\n  " + "\n  ".join(problems))
    return params


def read(path: str | Path = "params.yaml") -> Any:
    """The YAML document of the parameters file ``path``, unvalidated: UTF-8 text whose aliases
    repeat at most ``MAX_REPEATED_NODES`` nodes (``repeated_nodes``).

    Raises:
        ParamsError: one line naming ``path`` and what to do: missing, unreadable, not UTF-8 (the
            byte and its offset), not valid YAML (the line and column), or aliases over the limit.
    """
    path = Path(path)
    if not path.is_file():
        raise ParamsError(f"{path}: no such parameters file")
    try:
        text = path.read_bytes().decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ParamsError(f"{path}: not UTF-8 text (byte 0x{exc.object[exc.start]:02x} at offset {exc.start}); "
                          "save it as UTF-8") from None
    except OSError as exc:
        raise ParamsError(f"{path}: cannot be read ({exc.strerror})") from None
    loader = SAFE_LOADER(text)
    try:
        node = loader.get_single_node()
        if node is None:
            return None
        try:
            repeated = repeated_nodes(node)
        except ValueError as exc:
            raise ParamsError(f"{path}: {exc}") from None
        if repeated > MAX_REPEATED_NODES:
            raise ParamsError(f"{path}: its YAML aliases (*name) repeat {repeated} nodes, more than the "
                              f"{MAX_REPEATED_NODES} allowed; write the values out instead of repeating anchors")
        return loader.construct_document(node)
    except yaml.MarkedYAMLError as exc:
        raise ParamsError(f"{path}: not valid YAML: {yaml_problem(exc)}") from None
    except yaml.YAMLError as exc:
        raise ParamsError(f"{path}: not valid YAML: {' '.join(str(exc).split())}") from None
    finally:
        loader.dispose()


def yaml_problem(exc: yaml.MarkedYAMLError) -> str:
    """PyYAML's error on one line: what it found, and where (1-based line and column)."""
    what = ", ".join(filter(None, (exc.context, exc.problem))) or "unreadable"
    mark = exc.problem_mark or exc.context_mark
    return f"{what} (line {mark.line + 1}, column {mark.column + 1})" if mark else what


def repeated_nodes(root: yaml.Node) -> int:
    """How many nodes the aliases under ``root`` repeat: the document's nodes with every alias
    expanded (an alias counts every node of what its anchor names) less the nodes written.

    Raises:
        ValueError: an alias inside the node its anchor names (the document would be infinite).
    """
    sizes: dict[int, int] = {}   # id(node) -> its nodes, aliases expanded
    open_: set[int] = set()      # the nodes whose subtree is being counted
    stack: list[tuple[yaml.Node, bool]] = [(root, False)]
    while stack:
        node, counted = stack.pop()
        below = [n for pair in node.value for n in pair] if isinstance(node, yaml.MappingNode) else (
            node.value if isinstance(node, yaml.SequenceNode) else [])
        if counted:
            open_.discard(id(node))
            sizes[id(node)] = 1 + sum(sizes[id(n)] for n in below)
        elif id(node) in open_:
            raise ValueError(f"a YAML alias (*name) inside the node its anchor names, at line "
                             f"{node.start_mark.line + 1}, repeats it without end; write the values out")
        elif id(node) not in sizes:
            open_.add(id(node))
            stack.append((node, True))
            stack.extend((n, False) for n in below if id(n) not in sizes)
    return sizes[id(root)] - len(sizes)


def load(path: str | Path = "params.yaml") -> dict:
    """``read(path)``, validated (``validate``)."""
    return validate(read(path), str(Path(path)))


def get(params: dict, key: str) -> Any:
    node: Any = params
    for part in key.split("."):
        if not isinstance(node, dict) or part not in node:
            raise KeyError(f"params key {key!r} not found (at {part!r})")
        node = node[part]
    return node


def select(params: dict, keys: tuple[str, ...] | list[str]) -> dict:
    """The nested subset of ``params`` holding only ``keys`` (dotted): what a stage may read."""
    out: dict = {}
    for key in keys:
        parts = key.split(".")
        node = out
        for part in parts[:-1]:
            node = node.setdefault(part, {})
        node[parts[-1]] = copy.deepcopy(get(params, key))
    return out
