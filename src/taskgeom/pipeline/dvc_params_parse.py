"""DVC's reads of a parameters file, each distinct text parsed once per process.

DVC checks a stage's parameters by loading the stage's parameters file whole
(``dvc.dependency.param.read_param_file``, through ``load_path``), once for every stage that
declares any: ``dvc status`` on the smoke DAG parses params.yaml 46 times, a good part of the
command's own time. Here ``param``'s ``load_path`` reads a local YAML file's text as DVC's
``load_yaml`` does (UTF-8) and parses it with DVC's ``parse_yaml`` once per distinct text,
handing each caller its own deep copy; any other file type or file system, and a file that
cannot be read, goes to DVC's ``load_path`` unchanged. Each result is the parse of the text
read at that call, so a file edited while DVC runs is seen as DVC would see it.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from pathlib import Path
from typing import Any

YAML_SUFFIXES = (".yaml", ".yml")


def params_parsed_once(original: Callable[..., Any]) -> Callable[..., Any]:
    """DVC's ``load_path(fs_path, fs, **kwargs)`` that parses a local YAML file's text once per
    distinct (path, text) and returns a deep copy of that parse at each call."""
    from dvc.utils.serialize import _yaml

    parsed: dict[tuple[str, str], Any] = {}

    def load_path(fs_path: Any, fs: Any, **kwargs: Any) -> Any:
        path = str(fs_path)
        if kwargs or "local" not in getattr(fs, "protocol", ()) or not path.lower().endswith(YAML_SUFFIXES):
            return original(fs_path, fs, **kwargs)
        try:
            text = Path(path).read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError):
            return original(fs_path, fs, **kwargs)  # DVC raises its own error for it
        key = (path, text)
        if key not in parsed:
            parsed[key] = _yaml.parse_yaml(text, path)
        return copy.deepcopy(parsed[key])

    load_path.params_parsed_once = True
    load_path.__wrapped__ = original  # inspect.signature reports DVC's (tests/test_tools.py)
    return load_path


def patch_params_parse() -> None:
    """Make this process's DVC parse each text of a parameters file once (``read_param_file``
    looks ``load_path`` up in ``dvc.dependency.param`` at each call)."""
    from dvc.dependency import param

    if not getattr(param.load_path, "params_parsed_once", False):
        param.load_path = params_parsed_once(param.load_path)
