"""params/paper-mini.yaml is params/paper.yaml in miniature: the same stages, probes, sources and
roles, differing only in paths, sizes and counts (and in VGGT, which no installable package
loads: every entry that needs it is left out of the mini profile). So the paper profile cannot
rot untested: CI runs the mini one end to end."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from taskgeom.pipeline.config import validate

ROOT = Path(__file__).resolve().parents[1]
VGGT = "vggt"
# what may differ: locations, sizes, counts, training lengths, seeds lists' lengths
FREE = {"path", "labels", "meta", "splits", "subset", "range", "img_size", "batch_size", "overrides", "images",
        "width", "depth", "heads", "steps", "lr", "rank", "holdout", "queries", "gallery", "recall_k",
        "shortlist", "examples", "train_images", "stride", "token_dim", "eval_images", "diagnose_images", "seeds"}


def load(profile: str) -> dict:
    return validate(yaml.safe_load((ROOT / "params" / f"{profile}.yaml").read_text()), profile)


@pytest.fixture(scope="module")
def profiles() -> tuple[dict, dict]:
    return load("paper"), load("paper-mini")


def needs_vggt(paper: dict, section: str, name: str, entry: dict) -> bool:
    """Whether a paper entry runs on VGGT (directly, or through a VAE on it)."""
    model = entry.get("model") or entry.get("host", "").split("/", 1)[-1]
    if section == "learn.probes" and entry["host"].startswith("vae/"):
        model = paper["vae"][model]["model"]
    if section == "learn.spn":
        return needs_vggt(paper, "learn.probes", name, paper["learn"]["probes"][name])
    return model == VGGT


def entries(params: dict, section: str) -> dict:
    node = params
    for key in section.split("."):
        node = node[key]
    return node


def roles(entry: dict) -> dict:
    """An entry with its free values (paths, sizes, counts) left out."""
    return {k: v for k, v in entry.items() if k not in FREE}


@pytest.mark.parametrize("section", ["sources", "zoo", "diagnose.probes", "vae", "learn.probes", "learn.spn",
                                     "learn.heads", "prune.cls", "prune.dense", "retrieval"])
def test_every_paper_entry_has_its_mini_counterpart_with_the_same_roles(profiles, section):
    paper, mini = profiles
    big, small = entries(paper, section), entries(mini, section)
    checked = section not in ("sources", "zoo")
    kept = {name: e for name, e in big.items()
            if name != VGGT and not (checked and needs_vggt(paper, section, name, e))}
    assert list(kept) == list(small), f"{section}: the mini profile's entries differ from the paper's (VGGT aside)"
    for name, entry in kept.items():
        if section == "learn.heads":  # an ablation keeps its probe and the key it varies
            assert entry.keys() == small[name].keys() and entry["probe"] == small[name]["probe"], name
        assert roles(entry) == roles(small[name]), f"{section}.{name}"


def test_the_shared_settings_have_the_same_shape(profiles):
    paper, mini = profiles
    assert set(paper) == set(mini)
    for section in ("diagnose", "learn", "prune"):
        assert set(paper[section]) == set(mini[section]), section
    assert paper["prune"]["domains"] == mini["prune"]["domains"]
    assert len(paper["prune"]["resolutions"]) >= len(mini["prune"]["resolutions"]) > 1
    assert paper["diagnose"]["power_table"]["q"] == mini["diagnose"]["power_table"]["q"]
    assert paper["learn"]["targets"]["power_iters"] == mini["learn"]["targets"]["power_iters"]


def test_both_profiles_read_external_files_where_every_machine_links_them(profiles):
    """data/external/<name> (docs/sharing.md): the mini profile only the fixture files under one link."""
    for profile, prefix in zip(profiles, ("data/external/", "data/external/paper-mini/")):
        for name, spec in profile["sources"].items():
            for key in ("path", "labels", "meta", "splits"):
                if spec.get(key):
                    assert spec[key].startswith(prefix), f"{profile['profile']}: sources.{name}.{key}"
        for name in profile["zoo"]:
            assert profile["zoo"][name]["path"].startswith(prefix), f"{profile['profile']}: zoo.{name}.path"
