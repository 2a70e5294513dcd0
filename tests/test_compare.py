"""``taskgeom compare``: its files and table on a tiny timm model with a fit written here, its one-line
refusals, the fidelity measures against their definitions, and the whole path a user takes on a
small timm ViT trained here on the embedded world: ``taskgeom fit`` -> ``taskgeom compare`` -> the
README's ``taskgeom.patch`` example, which computes what compare measured. Whether importance keeps
such a model closer to itself than random or ToMe's score is a measurement over seeds, not a test:
benchmarks/patch_fidelity.py."""

from __future__ import annotations

import hashlib
import io
import json
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path

import numpy as np
import pytest
import timm
import torch
from PIL import Image
from safetensors.torch import save_file

import taskgeom
from taskgeom.artifacts import provenance
from taskgeom.artifacts.tables import read_table
from taskgeom.artifacts.values import read_values
from taskgeom.comparing.fidelity import fidelity
from taskgeom.fitting.checkpoint import write_fit
from taskgeom.fitting.identity import describe
from taskgeom.fixtures import world_vit
from taskgeom.inspection.inputs import timm_transform
from taskgeom.metric.head import ImportanceHead
from taskgeom.metric.spn import SpectralPullbackNetwork
from taskgeom.models.adapters.timm_any import build_timm
from taskgeom.pipeline import cli
from taskgeom.prune.methods import NAMES

NAME = "vit_tiny_patch16_224"
ARGS = dict(depth=4, embed_dim=32, num_heads=2, img_size=32, patch_size=8, num_classes=5)
QUICK = ["--batch-size", "4", "--repeats", "1", "--threads", "1"]


def command(*argv: str) -> tuple[int, str, str]:
    """``taskgeom ARGV`` in this process: its exit status, stdout and stderr."""
    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        try:
            code = cli.main(list(argv))
        except SystemExit as exc:  # argparse
            code = exc.code
    return code, out.getvalue(), err.getvalue()


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def model_flags(weights: Path, args: dict) -> list[str]:
    return ["--timm", NAME, "--weights", str(weights), "--model-args", *[f"{k}={v}" for k, v in args.items()]]


def write_images(folder: Path, count: int, seed: int = 0) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    g = np.random.default_rng(seed)
    for i in range(count):
        Image.fromarray(g.integers(0, 256, (40, 48, 3), dtype=np.uint8)).save(folder / f"im{i}.png")
    return folder


def fake_fit(model, directory: Path, spn: bool = True, decoder: str = "logits", images: dict | None = None) -> Path:
    """A fit directory of ``model`` at block 1 with random networks (what compare reads of a fit),
    recording ``images`` as its images (training names and their sha256) when given."""
    torch.manual_seed(1)
    arch = {"head": {"kind": "importance_head", "tokens": 17, "dim": 32, "width": 16, "heads": 2, "layers": 1},
            "spn": {"kind": "spn", "tokens": 17, "dim": 32, "rank": 4, "width": 16, "depth": 1, "heads": 2}}
    nets = {"head": (ImportanceHead(17, 32, 16), arch["head"])}
    if spn:
        nets["spn"] = (SpectralPullbackNetwork(17, 32, 4, 16, 1, 2), arch["spn"])
    record = {"layer": 1, "decoder": decoder, "path": "merge", "model": describe(model), "quality": {},
              "layout": {"prefix": 1, "rows": 4, "cols": 4, "tokens": 17, "dim": 32}}
    record |= {"images": images} if images else {}
    write_fit(directory, record, nets, {"stage": "test"})
    return directory


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    root = tmp_path_factory.mktemp("compare")
    torch.manual_seed(0)
    save_file(timm.create_model(NAME, pretrained=False, **ARGS).state_dict(), root / "tiny.safetensors")
    model = build_timm(NAME, root / "tiny.safetensors", **ARGS)
    images = write_images(root / "im", 8)
    # the fit trained on im0.png's bytes under another name, and on other bytes named im1.png
    trained = {"train": ["elsewhere/renamed.png", "im1.png"], "train_sha256": [sha256(images / "im0.png"), "0" * 64]}
    return {"root": root, "flags": model_flags(root / "tiny.safetensors", ARGS), "images": images,
            "fit": fake_fit(model, root / "fit", images=trained), "bare_fit": fake_fit(model, root / "bare", spn=False),
            "linear_fit": fake_fit(model, root / "linear", decoder="linear")}


def test_compare_writes_its_files_with_a_row_per_method_and_ratio(tiny):
    out = tiny["root"] / "out"
    code, stdout, err = command("compare", *tiny["flags"], "--images", str(tiny["images"]), "--fit", str(tiny["fit"]),
                                "--ratios", "0.25:0.5:0.25", "0.5", *QUICK, "--out", str(out))
    assert code == 0, err[-2000:]
    df = read_table(out / "compare.csv")
    assert list(zip(df.method, df.ratio))[0] == ("unpatched", 0.0)
    assert sorted(zip(df.method[1:], df.ratio[1:])) == sorted((m, r) for m in NAMES for r in (0.25, 0.5))
    assert {"kl_mean", "kl_low", "kl_high", "top1_mean", "kl_p_vs_importance", "images_per_s", "images_per_s_min",
            "images_per_s_max", "speedup", "speedup_min", "speedup_max", "speedup_call", "flops",
            "flops_vs_unpatched"} <= set(df.columns)
    assert set(df.speedup_call) == {"reference", "one timed round: no speedup called"}    # --repeats 1
    rows = df.set_index(["method", "ratio"])
    patched = rows.drop(("unpatched", 0.0))
    assert (patched.kl_low <= patched.kl_mean).all() and (patched.kl_mean <= patched.kl_high).all()
    assert rows.kl_mean.isna()[("unpatched", 0.0)] and rows.kl_p_vs_importance.isna()[("importance", 0.5)]
    assert rows.tokens[("unpatched", 0.0)] == 17 and rows.tokens[("random", 0.5)] == 9
    assert rows.tokens[("evit", 0.5)] == 10 and rows.tokens[("tome", 0.5)] == 9
    assert (rows.flops_vs_unpatched[[("tome", 0.5), ("random", 0.5)]] < 1).all()
    values = read_values(out / "compare_per_image.csv.gz")
    assert len(values) == len(NAMES) * 2 * 8 * 2 and set(values.measure) == {"kl", "top1"}
    record = json.loads((out / "compare.json").read_text())
    assert record["decoder"] == "logits" and len(record["rows"]) == 11 and record["fit"]["layer"] == 1
    assert all(len(t["seconds"]) == 1 for t in record["timing"].values()) and record["batch"] == 4
    assert record["settings"]["ratios"] == [0.25, 0.5] and len(record["pareto"]["rows"]) == 10
    assert all(r["throughput_front"] is None for r in record["pareto"]["rows"])        # no speedup called
    assert [c["budget"] for c in record["budgets"]["choices"][::len(NAMES)]] == record["budgets"]["grid"]
    assert len(record["budgets"]["lines"]) == len(record["budgets"]["grid"])
    md = (out / "compare.md").read_text()
    assert "## Pareto fronts" in md and "## At a FLOP budget" in md and record["budgets"]["lines"][0] in md
    for name in ("compare.csv", "compare.md", "compare.json", "compare.png", "compare.pdf", "compare_per_image.csv.gz"):
        assert provenance.read(out / name)["stage"] == "compare"
    assert "importance" in stdout and "p vs importance" in stdout and f"wrote {out / 'compare.csv'}" in stdout
    assert "throughput could not rank its settings" in stdout and "at ≤ 0.9 of the FLOPs: " in stdout
    assert "note: 1 held-out image(s) have the same bytes (sha256)" in stdout     # im0.png, not im1.png
    assert "im0.png = the fit's elsewhere/renamed.png" in stdout


def test_what_compare_cannot_use_is_refused_in_one_line(tiny, tmp_path):
    torch.manual_seed(5)
    deeper = {**ARGS, "depth": 5}
    save_file(timm.create_model(NAME, pretrained=False, **deeper).state_dict(), tmp_path / "deeper.safetensors")
    save_file(timm.create_model(NAME, pretrained=False, **ARGS).state_dict(), tmp_path / "other.safetensors")
    base = ["--images", str(tiny["images"]), "--fit", str(tiny["fit"]), *QUICK, "--out", str(tmp_path / "o")]
    cases = [(model_flags(tmp_path / "deeper.safetensors", deeper), [], "other architecture: this model has 5 blocks"),
             (tiny["flags"], ["--ratios", "1.0"], "--ratios: expected a fraction of patch tokens removed in [0, 1)"),
             (tiny["flags"], ["--methods", "nearest"], "--methods: invalid choice: 'nearest'"),
             (tiny["flags"], ["--fit", str(tmp_path / "none")], "no such file"),
             (tiny["flags"], ["--fit", str(tiny["bare_fit"]), "--methods", "importance"], "--spn on"),
             (tiny["flags"], ["--fit", str(tiny["linear_fit"])], "through a linear head; give its file")]
    for flags, extra, words in cases:
        code, _, err = command("compare", *flags, *base, *extra)
        assert code == 2 and words in err, err
        assert len([line for line in err.splitlines() if line.startswith("taskgeom") or "error" in line]) == 1, err
    code, stdout, err = command("compare", *tiny["flags"], *base[:4], "--ratios", "0.5", "--fit", str(tiny["bare_fit"]),
                                *QUICK, "--out", str(tmp_path / "bare"))
    assert code == 0 and "importance left out" in stdout, err
    assert "importance" not in set(read_table(tmp_path / "bare" / "compare.csv").method)
    # other weights of the fit's architecture and layout: compared, and said so among the notes
    code, stdout, err = command("compare", *model_flags(tmp_path / "other.safetensors", ARGS), *base[:4],
                                "--ratios", "0.5", "--methods", "random", *QUICK, "--out", str(tmp_path / "other"))
    assert code == 0 and "note: " in stdout and "weights differ from the fitted" in stdout, err


def test_the_fidelity_measures_follow_their_definitions():
    y = torch.tensor([[2.0, 0.0, -1.0], [0.5, 0.4, 0.0]])
    z = torch.tensor([[0.0, 2.0, -1.0], [0.5, 0.4, 0.0]])
    same, moved = fidelity("logits", y, y), fidelity("logits", y, z)
    p, q = torch.softmax(y[0].double(), 0), torch.softmax(z[0].double(), 0)
    assert same["kl"].tolist() == [0.0, 0.0] and same["top1"].tolist() == [1.0, 1.0]
    assert moved["kl"][0] == pytest.approx(float((p * (p / q).log()).sum())) and moved["top1"].tolist() == [0.0, 1.0]
    emb = fidelity("cls", y, -y)
    assert emb["cosine"].tolist() == pytest.approx([-1.0, -1.0])
    assert emb["degradation"].tolist() == pytest.approx([200.0, 200.0])
    depth = torch.rand(2, 6, 5) + 0.5
    d = fidelity("depth", depth, 2 * depth)
    assert d["silog"] == pytest.approx(100 * np.sqrt(0.15) * np.log(2)) and d["delta1"].tolist() == [0.0, 0.0]
    assert fidelity("depth", depth, depth)["delta1"].tolist() == [1.0, 1.0]


@pytest.fixture(scope="module")
def world_model(tmp_path_factory):
    """The world's ViT (``fixtures.world_vit``, model seed 0), its weights, 32 scenes for ``fit`` and
    64 held-out scenes for ``compare``."""
    root = tmp_path_factory.mktemp("world-model")
    other = world_vit.world_scenes(96)
    world_vit.write_scenes(root / "fit-images", other["rgb"], range(32))
    world_vit.write_scenes(root / "held-out", other["rgb"], range(32, 96))
    model = world_vit.train_world_vit(seed=0)
    save_file(model.state_dict(), root / "model.safetensors")
    transform, _ = timm_transform(model)
    return {"root": root, "flags": model_flags(root / "model.safetensors", world_vit.WORLD_VIT), "transform": transform}


@pytest.mark.slow
@pytest.mark.pipeline
def test_fit_then_compare_then_patch_a_model_trained_on_the_world(world_model):
    """The user's path: `taskgeom fit`, `taskgeom compare`, then the README's three lines, whose
    patched logits give the per-image KL that compare wrote for importance at η = 0.5."""
    root, flags = world_model["root"], world_model["flags"]
    code, stdout, err = command("fit", *flags, "--images", str(root / "fit-images"), "--decoder", "logits", "--r", "8",
                                "--power-iters", "1", "--steps", "150", "--spn-steps", "150", "--batch-size", "16",
                                "--held-out", "4", "--threads", "1", "--out", str(root / "fit"))
    assert code == 0 and "Verdict: the head" in stdout, err[-2000:]
    trained = json.loads((root / "fit" / "fit.json").read_text())["images"]
    assert trained["train_sha256"] == [sha256(root / "fit-images" / name) for name in trained["train"]]
    code, stdout, err = command("compare", *flags, "--images", str(root / "held-out"), "--fit", str(root / "fit"),
                                "--ratios", "0.5", "--methods", "random", "importance", "--batch-size", "16",
                                "--repeats", "1", "--threads", "1", "--out", str(root / "compare"))
    assert code == 0, err[-2000:]
    rows = {(r["method"], r["ratio"]): r for r in json.loads((root / "compare" / "compare.json").read_text())["rows"]}
    assert set(rows) == {("unpatched", 0.0), ("importance", 0.5), ("random", 0.5)}
    assert 0 <= rows[("random", 0.5)]["kl_p_vs_importance"] <= 1 and "p vs importance" in stdout

    model = build_timm(NAME, root / "model.safetensors", **world_vit.WORLD_VIT)        # the README: your model, then
    taskgeom.patch(model, root / "fit", ratio=0.5)
    x = torch.stack([world_model["transform"](Image.open(f).convert("RGB"))
                     for f in sorted((root / "held-out").iterdir())])
    with torch.no_grad():
        patched = model(x)
        taskgeom.unpatch(model)
        kl = fidelity("logits", model(x), patched)["kl"]
    values = read_values(root / "compare" / "compare_per_image.csv.gz")
    theirs = values[(values.method == "importance") & (values.measure == "kl")].value.to_numpy()
    np.testing.assert_allclose(kl, theirs, rtol=1e-3, atol=1e-9)
