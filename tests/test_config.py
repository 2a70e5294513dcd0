"""params.yaml is validated against the schema before any work, naming the offending key."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import yaml

from taskgeom.pipeline import config

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture
def params() -> dict:
    """The smoke profile: its zoo trains the CLS and depth models apart (tiny-cls, tiny-dpt)."""
    return config.load(REPO / "params" / "smoke.yaml")


@pytest.mark.parametrize("profile", ["default", "smoke", "paper"])
def test_every_profile_is_valid(profile: str):
    config.load(REPO / "params" / f"{profile}.yaml")


def test_the_c_parser_reads_every_profile_and_the_schema_as_safe_load_does():
    for path in [*sorted((REPO / "params").glob("*.yaml")), config.SCHEMA_PATH]:
        assert config.parse_yaml(path.read_text()) == yaml.safe_load(path.read_text()), path


def test_params_yaml_is_the_default_profile():
    assert (REPO / "params.yaml").read_text() == (REPO / "params" / "default.yaml").read_text()


@pytest.mark.parametrize("mutate, named", [
    (lambda p: p.update(colour=1), "unknown key colour"),
    (lambda p: p["world"].update(sede=1), "unknown key world.sede"),
    (lambda p: p["zoo"]["tiny-dpt"].update(heads=2), "unknown key zoo.tiny-dpt.heads"),
    (lambda p: p["zoo"]["tiny-cls"].update(steps="100"), "zoo.tiny-cls.steps: '100' is not of type 'integer'"),
    (lambda p: p["world"].update(resolution=65), "world.resolution"),
    (lambda p: p["zoo"]["tiny-cls"].update(lr=-0.1), "zoo.tiny-cls.lr"),
    (lambda p: p["world"]["splits"].update(train=0), "world.splits.train"),
    (lambda p: p.update(device="gpu"), "device"),
    (lambda p: p["zoo"]["tiny-cls"].update(read_layers=[0, 1, 2, 3]), "zoo.tiny-cls.read_layers"),
    (lambda p: p["zoo"]["tiny-dpt"].update(read_layers=[1, 2, 4, 9]), "zoo.tiny-dpt.read_layers"),
    (lambda p: p["zoo"]["tiny-dpt"].update(num_heads=5), "zoo.tiny-dpt.num_heads"),
    (lambda p: p["zoo"]["tiny-cls"]["sources"].update(train="world-test-sketch"), "zoo.tiny-cls.sources.train"),
    (lambda p: p["zoo"]["tiny-cls"]["sources"].update(test="nowhere"), "zoo.tiny-cls.sources.test"),
    (lambda p: p["diagnose"]["probes"]["cls-embed-l4"].update(model="tiny-xl"), "diagnose.probes.cls-embed-l4.model"),
    (lambda p: p["world"].update(fov_deg=[70.0, 45.0]), "world.fov_deg"),
    (lambda p: p["world"].update(room_fov_deg=[60.0, 50.0]), "world.room_fov_deg"),
    (lambda p: p["prune"].update(ratios=[0.2, 1.0]), "prune.ratios"),
    (lambda p: p["prune"]["cls"]["tiny-cls"].update(methods=["tome", "magic"]), "prune.cls.tiny-cls.methods"),
    (lambda p: p["prune"]["cls"]["tiny-cls"].update(head="nope"), "prune.cls.tiny-cls.head"),
    (lambda p: p["prune"]["cls"]["tiny-cls"].update(spn="nope"), "prune.cls.tiny-cls.spn"),
    (lambda p: p["prune"]["cls"]["tiny-cls"].update(layer=5), "prune.cls.tiny-cls.layer"),
    (lambda p: p["prune"]["dense"]["tiny-dpt"].update(schedules=[[3, 1]]), "prune.dense.tiny-dpt.schedules"),
    (lambda p: p["prune"]["dense"]["tiny-dpt"].update(schedules=[[1, 5]]), "prune.dense.tiny-dpt.schedules"),
    (lambda p: p["prune"]["dense"]["tiny-dpt"].update(probe="cls-embed-l4"), "prune.dense.tiny-dpt.probe"),
    (lambda p: p["prune"].update(seeds=[0, 7]), "prune.cls.tiny-cls.head"),
    (lambda p: p["prune"].update(resolutions=[64, 100]), "prune.resolutions"),
    (lambda p: p["prune"].update(domains=["rgb", "infrared"]), "prune.domains"),
    (lambda p: p["retrieval"]["tiny-dpt"].update(layer=3), "retrieval.tiny-dpt.probe"),
    (lambda p: p["retrieval"]["tiny-dpt"].update(head="cls-embed-l4"), "retrieval.tiny-dpt.head"),
    (lambda p: p["retrieval"]["tiny-dpt"].update(gallery=10000), "retrieval.tiny-dpt.gallery"),
    (lambda p: p["retrieval"]["tiny-dpt"].update(holdout=300), "retrieval.tiny-dpt.holdout"),
    (lambda p: p.update(sources={"in": {"kind": "imagenet_val"}}), "sources.in"),
    (lambda p: p.update(sources={"w": {"kind": "world", "split": "test", "labels": "x"}}), "sources.w"),
    (lambda p: p.update(sources={"f": {"kind": "folder", "path": "x", "split": "test"}}), "sources.f"),
    (lambda p: p.update(sources={"n": {"kind": "nyu_depth_v2", "path": "x", "split": "val"}}), "sources.n"),
    (lambda p: p.update(sources={"s": {"kind": "imagenet_sketch", "path": "x", "subset": {"count": 0, "seed": 0}}}),
     "sources.s.subset.count"),
    (lambda p: p.update(sources={"Bad Name": {"kind": "folder", "path": "x"}}), "sources"),
    (lambda p: p.update(sources={"v": {"kind": "folder", "path": "x", "views": 2}}), "sources.v"),
    (lambda p: p["learn"]["probes"]["cls-embed-l4"].update(sources={"train": "nowhere", "val": "world-val",
                                                                      "test": "world-test"}),
     "learn.probes.cls-embed-l4.sources.train"),
    (lambda p: p["prune"]["cls"]["tiny-cls"]["sources"].update(bank="nowhere"), "prune.cls.tiny-cls.sources.bank"),
    (lambda p: p["retrieval"]["tiny-dpt"]["sources"].pop("sketch"), "retrieval.tiny-dpt.sources"),
])
def test_invalid_values_are_rejected_naming_the_key(params: dict, mutate, named: str):
    bad = copy.deepcopy(params)
    mutate(bad)
    with pytest.raises(config.ParamsError) as err:
        config.validate(bad, "params.yaml")
    assert named in str(err.value)
    assert str(err.value).startswith("params.yaml:")


def test_every_source_kind_validates(params: dict):
    params["sources"] |= {
        "world-sketch-96": {"kind": "world", "split": "test", "domain": "sketch", "resolution": 96},
        "imagenet-val": {"kind": "imagenet_val", "path": "/data/val", "labels": "/data/gt.txt",
                         "meta": "/data/meta.mat", "subset": {"count": 2000, "seed": 0}},
        "imagenet-sketch": {"kind": "imagenet_sketch", "path": "/data/sketch"},
        "nyu": {"kind": "nyu_depth_v2", "path": "/data/nyu.mat", "splits": "/data/splits.mat", "split": "test"},
        "mine": {"kind": "folder", "path": "~/photos"},
        "scenes": {"kind": "sequences", "path": "/data/scenes", "views": 4, "range": [0, 100]},
        "held-out": {"kind": "imagenet_val", "path": "/data/val", "subset": {"count": 200, "seed": 0, "offset": 2000}},
    }
    config.validate(params, "params.yaml")


def test_load_names_the_file(tmp_path: Path):
    with pytest.raises(config.ParamsError, match="no such parameters file"):
        config.load(tmp_path / "absent.yaml")
    broken = tmp_path / "broken.yaml"
    broken.write_text("world: [unclosed\n")
    with pytest.raises(config.ParamsError, match=f"{broken}: not valid YAML"):
        config.load(broken)


def test_select_keeps_only_the_declared_keys(params: dict):
    sub = config.select(params, ["zoo.tiny-cls", "device"])
    assert sub == {"zoo": {"tiny-cls": params["zoo"]["tiny-cls"]}, "device": params["device"]}
    sub["zoo"]["tiny-cls"]["lr"] = 99.0
    assert params["zoo"]["tiny-cls"]["lr"] != 99.0  # a copy, not a view
    with pytest.raises(KeyError, match="zoo.tiny-xl"):
        config.select(params, ["zoo.tiny-xl"])


def test_schema_file_is_what_snakemake_validates_with():
    snakefile = (REPO / "Snakefile").read_text()
    assert 'taskgeom_config.validate(config, "params.yaml")' in snakefile
    assert config.SCHEMA_PATH == REPO / "src" / "taskgeom" / "params.schema.yaml"
    assert yaml.safe_load(config.SCHEMA_PATH.read_text())["additionalProperties"] is False
