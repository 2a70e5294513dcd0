"""DVC's safe YAML parses, each distinct text parsed once per process.

DVC parses the same files again and again within one command: params.yaml once for every stage
that declares a parameter (``read_param_file``), and dvc.lock, which lists every stage's code
files with their hashes, each time it collects stages and each time it records one (``dvc repro``
parses the smoke DAG's lock several times per stage). ruamel's safe loader builds each scalar in
Python even with its C parser, so those parses are much of such a command's own time. Here DVC's
``parse_yaml`` with the safe loader keeps the parse of each of the last ``KEPT`` distinct texts and
hands each caller a deep copy of it; the round-trip loader (dvc.yaml, which people edit and
comment) and a text that fails to parse go to DVC's ``parse_yaml`` as before. A copy of a parse
is equal to a new parse of the same text, aliases included, so DVC sees what it would have read.
"""

from __future__ import annotations

import copy
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

KEPT = 8  # texts: a command alternates between a few files and the lock's successive versions


def parsed_once(original: Callable[..., Any]) -> Callable[..., Any]:
    """DVC's ``parse_yaml(text, path, typ="safe")`` parsing each text once, kept for the last
    ``KEPT`` distinct texts; other loaders go to ``original``."""
    kept: OrderedDict[str, Any] = OrderedDict()

    def parse_yaml(text: str, path: Any, typ: str = "safe") -> Any:
        if typ != "safe":
            return original(text, path, typ)
        if text in kept:
            kept.move_to_end(text)
        else:
            kept[text] = original(text, path, typ)
            if len(kept) > KEPT:
                kept.popitem(last=False)
        return copy.deepcopy(kept[text])

    parse_yaml.parsed_once = True
    parse_yaml.__wrapped__ = original  # inspect.signature reports DVC's (tests/test_tools.py)
    return parse_yaml


def patch_yaml_parse() -> None:
    """Make this process's DVC parse each text once (``_yaml``'s loaders look ``parse_yaml`` up in
    their module at each call; ``strictyaml``, which loads dvc.yaml and dvc.lock, imported the name)."""
    from dvc.utils import strictyaml
    from dvc.utils.serialize import _yaml

    if not getattr(_yaml.parse_yaml, "parsed_once", False):
        _yaml.parse_yaml = parsed_once(_yaml.parse_yaml)
    strictyaml.parse_yaml = _yaml.parse_yaml
