"""DVC's safe YAML parses: each distinct text parsed once, every caller given its own copy, equal
to DVC's parse, aliases included (``pipeline/dvc_yaml_parse.py``)."""

from __future__ import annotations

from dvc.utils.serialize import _yaml

from taskgeom.pipeline.dvc_yaml_parse import KEPT, parsed_once

TEXT = "world: {seed: 0, range: [-4, null], splits: &s {train: a}, again: *s}\nlearn: {r: 8, label: 'κ_cap(r)'}\n"


def counting(calls: list[str]):
    def parse(text, path, typ="safe"):
        calls.append(typ)
        return _yaml.parse_yaml(text, path, typ)
    return parse


def test_each_text_is_parsed_once_and_every_caller_gets_its_own_copy_of_dvcs_parse():
    calls = []
    parse = parsed_once(counting(calls))
    first = parse(TEXT, "params.yaml")
    assert first == _yaml.parse_yaml(TEXT, "params.yaml")
    assert first["world"]["splits"] is first["world"]["again"]  # the alias, as DVC's parse has it
    first["learn"]["r"] = 6  # a caller's copy is its own
    again = parse(TEXT, "params.yaml")
    assert again["learn"]["r"] == 8 and again is not first
    assert calls == ["safe"]
    assert parse(TEXT.replace("r: 8", "r: 6"), "params.yaml")["learn"]["r"] == 6  # another text, parsed anew
    parse(TEXT, "dvc.yaml", typ="rt")
    parse(TEXT, "dvc.yaml", typ="rt")  # the round trip (comments, styles) is never kept
    assert calls == ["safe", "safe", "rt", "rt"]


def test_only_the_last_texts_are_kept():
    calls = []
    parse = parsed_once(counting(calls))
    texts = [f"a: {i}\n" for i in range(KEPT + 1)]
    for text in texts:
        parse(text, "dvc.lock")
    parse(texts[-1], "dvc.lock")
    assert len(calls) == KEPT + 1
    parse(texts[0], "dvc.lock")  # the oldest was dropped
    assert len(calls) == KEPT + 2
