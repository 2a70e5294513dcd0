"""DVC's updates of dvc.lock, parsed with the safe YAML loader.

To record a stage, DVC reads the whole lock file, replaces the stage's entry and writes the file
back (``dvc.dvcfile.Lockfile.dump_stages``, through ``dvc.utils.serialize.modify_yaml``). It
reads with ruamel's round-trip loader, which keeps comments and scalar styles for the dump and is
pure Python, several times slower than ruamel's safe loader (libyaml). A lock file lists every
stage's dependencies, parameters and outputs with their hashes, so ``dvc repro`` and ``dvc commit``
spend much of their own time per stage in that parse. DVC writes dvc.lock itself, from plain
dicts, with no comments: read with the safe loader, the file dumps to the same bytes
(``tests/test_dvc_lock_parse.py`` checks this on lock files DVC wrote), while dvc.yaml, which
people edit and comment, keeps the round trip.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import PurePath
from typing import Any

LOCK_FILE = "dvc.lock"


def lock_parsed_safely(original: Callable[[str, Any], Any]) -> Callable[[str, Any], Any]:
    """DVC's ``parse_yaml_for_update(text, path)`` that parses a file named dvc.lock with
    ``parse_yaml`` (the safe loader) and leaves every other file to ``original``."""
    from dvc.utils.serialize import _yaml

    def parse_yaml_for_update(text: str, path: Any) -> Any:
        if PurePath(str(path)).name == LOCK_FILE:
            return _yaml.parse_yaml(text, path)
        return original(text, path)

    parse_yaml_for_update.lock_parsed_safely = True
    parse_yaml_for_update.__wrapped__ = original  # inspect.signature reports DVC's (tests/test_tools.py)
    return parse_yaml_for_update


def patch_lock_parse() -> None:
    """Make this process's DVC parse dvc.lock with the safe loader when it updates it
    (``modify_yaml`` looks ``parse_yaml_for_update`` up in its module at each call)."""
    from dvc.utils.serialize import _yaml

    if not getattr(_yaml.parse_yaml_for_update, "lock_parsed_safely", False):
        _yaml.parse_yaml_for_update = lock_parsed_safely(_yaml.parse_yaml_for_update)
