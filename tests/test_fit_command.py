"""``taskgeom fit`` on tiny random-weight models of real architectures (a timm ViT built small, a
transformers ViT classifier and a Depth Anything saved with ``save_pretrained``) and PNG images
written here: the command end to end, the checkpoint read back by ``load_fitted`` and checked
against models by ``check_model``, one-line refusals, an interrupted and a killed target build
resumed to the bytes of an uninterrupted one, and the target cache reused by content."""

from __future__ import annotations

import copy
import hashlib
import io
import os
import re
import shlex
import shutil
import signal
import subprocess
import time
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path

import h5py
import numpy as np
import pytest
import timm
import torch
from conftest import BIN, tool_env
from PIL import Image
from safetensors.torch import save_file

from taskgeom.artifacts import provenance
from taskgeom.artifacts.checkpoints import CheckpointError
from taskgeom.fitting import FitMismatch, check_model, load_fitted
from taskgeom.fitting import targets as fit_targets
from taskgeom.fitting.identity import WeightsDiffer
from taskgeom.inspection.reading import reading
from taskgeom.metric.fit import predict
from taskgeom.metric.head import ImportanceHead
from taskgeom.metric.head_fit import rho_per_image
from taskgeom.metric.targets import TargetFile
from taskgeom.models.adapters.hf_any import load_hf
from taskgeom.models.adapters.timm_any import build_timm
from taskgeom.models.vit import Grid
from taskgeom.pipeline import cli
from taskgeom.pipeline.codedeps import import_closure

NAME = "vit_tiny_patch16_224"
ARGS = dict(depth=2, embed_dim=64, num_heads=2, img_size=32, num_classes=0)
QUICK = ["--r", "8", "--steps", "30", "--spn-steps", "30", "--batch-size", "8", "--held-out", "2", "--threads", "1"]


def fit(*argv: str) -> tuple[int, str, str]:
    """``taskgeom fit ARGV`` in this process: its exit status, stdout and stderr."""
    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        try:
            code = cli.main(["fit", *argv])
        except SystemExit as exc:  # argparse
            code = exc.code
    return code, out.getvalue(), err.getvalue()


def write_images(folder: Path, count: int, shape=(40, 48, 3), seed: int = 0) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    g = np.random.default_rng(seed)
    for i in range(count):
        Image.fromarray(g.integers(0, 256, shape, dtype=np.uint8)).save(folder / f"im{i}.png")
    return folder


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture(scope="module")
def inputs(tmp_path_factory):
    """Seven images and the tiny timm model's weights, with the flags that name the model."""
    mp = pytest.MonkeyPatch()
    root = tmp_path_factory.mktemp("fit")
    mp.setenv("XDG_CACHE_HOME", str(root / "cache"))
    images = write_images(root / "images", 7)
    torch.manual_seed(0)
    save_file(timm.create_model(NAME, pretrained=False, **ARGS).state_dict(), root / "tiny.safetensors")
    model = ["--timm", NAME, "--weights", str(root / "tiny.safetensors"), "--model-args",
             *[f"{k}={v}" for k, v in ARGS.items()]]
    yield {"root": root, "images": images, "model": model}
    mp.undo()


@pytest.fixture(scope="module")
def world(inputs):
    """``inputs`` and one finished fit of them: the reference run."""
    out = inputs["root"] / "fit"
    code, stdout, err = fit(*inputs["model"], "--images", str(inputs["images"]), *QUICK, "--out", str(out))
    assert code == 0, err[-3000:]
    return {**inputs, "out": stdout, "err": err, "fit": out}


def test_fit_writes_a_self_describing_checkpoint(world):
    directory, record = world["fit"], load_fitted(world["fit"]).record
    assert "Verdict: the head" in world["out"] and "Rule: the head beats the position-only floor when" in world["out"]
    assert "targets train: computed 5 image(s)" in world["err"]
    assert record["layer"] == 0 and record["decoder"] == "cls" and record["path"] == "merge"
    assert record["layout"] | {"input": None} == {"prefix": 1, "rows": 2, "cols": 2, "tokens": 5, "dim": 64,
                                                  "outputs": 64, "input": None}
    model = record["model"]
    assert model["family"] == "timm" and model["name"] == NAME and model["args"] == ARGS
    assert model["weights"]["sha256"] == sha256(world["root"] / "tiny.safetensors")
    images = record["images"]
    assert len(images["held_out"]) == 2 and sorted(images["train"] + images["held_out"]) == [
        f"im{i}.png" for i in range(7)]
    head = record["quality"]["head"]
    assert head["rho"]["n"] == 2 and head["rho"]["low"] <= head["rho"]["mean"] <= head["rho"]["high"]
    assert isinstance(head["beats_floor"], bool) and head["verdict"] in world["out"]
    assert set(record["networks"]) == {"head", "spn"} and (directory / "spn.safetensors").is_file()
    assert provenance.read(directory / "fit.json")["stage"] == "fit"
    assert provenance.read(directory / "head.safetensors")["params"]["timm"] == NAME


def test_the_estimate_comes_first_and_counts_the_products_each_row_spends(world):
    """The defaults: the projected sketch at q = 1 without oversampling, no block-norm probes:
    (2q + 1)·r = 24 products (r = 8, M = 64 outputs), as the estimate says before any target is
    computed."""
    lines = world["err"].splitlines()
    estimate = [i for i, line in enumerate(lines) if line.startswith("taskgeom fit: estimated ")]
    assert len(estimate) == 1 and estimate[0] < lines.index(next(x for x in lines if "targets train: computed" in x))
    t = r"(\d+ s|\d+\.\d min)"
    found = re.fullmatch(rf"taskgeom fit: estimated {t} \(targets ~{t} for 7 images at (\d+) products each, "
                         rf"head ~{t}, SPN ~{t}\)", lines[estimate[0]])
    assert found and int(found.group(3)) == 3 * 8, lines[estimate[0]]
    settings = load_fitted(world["fit"]).record["settings"]
    assert [settings[k] for k in ("sketch", "power_iters", "oversample", "block_norm_probes")] == ["projected", 1, 0, 0]
    for split in ("train", "held_out"):
        target = TargetFile.open(world["fit"] / "targets" / f"{split}.h5")
        rows = target.read(("products", "block_norm", "frob2"))
        assert (rows["products"] == 24).all() and (rows["block_norm"] > 0).all()
        np.testing.assert_allclose(rows["frob2"], rows["block_norm"].sum(1), rtol=1e-5)


def test_the_pipelines_targets_are_one_flag_away(world, tmp_path):
    """``--sketch rayleigh-ritz --power-iters 2 --oversample 10 --block-norm-probes 32``: the
    ``targets`` stage's row, (2q + 2)(r + 10) + 32 products; rayleigh-ritz without probes is refused
    (``test_bad_flags_are_one_line``)."""
    out = tmp_path / "fit"
    code, _, err = fit(*world["model"], "--images", str(world["images"]), *QUICK, "--sketch", "rayleigh-ritz",
                       "--power-iters", "2", "--oversample", "10", "--block-norm-probes", "32", "--spn", "off",
                       "--out", str(out))
    assert code == 0 and "at 140 products each" in err, err[-2000:]
    held = TargetFile.open(out / "targets" / "held_out.h5")
    assert held.qs == (2,) and (held.read(("products",))["products"] == 6 * 18 + 32).all()
    assert load_fitted(out).quality["head"]["target"] == "q2/importance"


def test_load_fitted_gives_the_trained_metric(world):
    fitted = load_fitted(world["fit"])
    assert isinstance(fitted.metric.head, ImportanceHead) and fitted.metric.spn is not None
    assert fitted.metric.base == Grid(1, 2, 2) and fitted.layer == 0 and fitted.path == "merge"
    held = TargetFile.open(world["fit"] / "targets" / "held_out.h5")
    truth = held.read(("q1/importance",))["q1/importance"]
    rho = rho_per_image(predict(fitted.metric.head, held, lambda m, F: m(F), "cpu"), truth)
    assert rho.mean() == pytest.approx(fitted.quality["head"]["rho"]["mean"])     # the head that was judged
    scores = fitted.metric.importance(torch.randn(2, 5, 64), torch.arange(5).expand(2, 5), Grid(1, 2, 2))
    assert scores.shape == (2, 5)
    damaged = world["root"] / "damaged"
    shutil.copytree(world["fit"], damaged)
    data = bytearray((damaged / "head.safetensors").read_bytes())
    data[-1] ^= 1
    (damaged / "head.safetensors").write_bytes(bytes(data))
    with pytest.raises(CheckpointError, match="do not match the digest"):
        load_fitted(damaged)


def test_check_model_accepts_the_fitted_model_and_names_what_differs(world):
    fitted = load_fitted(world["fit"])
    same = build_timm(NAME, world["root"] / "tiny.safetensors", **ARGS)
    check_model(fitted, same)
    check_model(fitted, copy.deepcopy(same).double())      # the same values in another dtype
    torch.manual_seed(1)
    with pytest.warns(WeightsDiffer, match="weights differ"):             # fine-tuned, say: warned, not refused
        assert "weights differ" in check_model(fitted, build_timm(NAME, **ARGS))
    refusals = {"3 blocks": build_timm(NAME, **{**ARGS, "depth": 3}),
                "3×3 position grid": build_timm(NAME, **{**ARGS, "img_size": 48}),
                "the fit is for timm vit_tiny_patch16_224": build_timm("vit_small_patch16_224", **ARGS)}
    for words, model in refusals.items():
        with pytest.raises(FitMismatch) as err:
            check_model(fitted, model)
        assert words in str(err.value) and "\n" not in str(err.value)


def test_rerun_reuses_the_targets_by_content_and_recomputes_a_changed_image(world, tmp_path):
    """A copy of the images and of the fit elsewhere: nothing recomputed; then one held-out image
    changes: only the held-out file is rebuilt."""
    images, out = tmp_path / "photos", tmp_path / "fit"
    shutil.copytree(world["images"], images)
    shutil.copytree(world["fit"], out)
    before = {s: (out / "targets" / f"{s}.h5").stat().st_mtime_ns for s in ("train", "held_out")}
    code, _, err = fit(*world["model"], "--images", str(images), *QUICK, "--out", str(out))
    assert code == 0 and "targets train: reused" in err and "targets held_out: reused" in err, err[-2000:]
    assert {s: (out / "targets" / f"{s}.h5").stat().st_mtime_ns for s in before} == before
    changed = images / load_fitted(out).record["images"]["held_out"][0]
    Image.fromarray(np.full((40, 48, 3), 7, dtype=np.uint8)).save(changed)
    code, _, err = fit(*world["model"], "--images", str(images), *QUICK, "--out", str(out))
    assert code == 0 and "targets train: reused" in err and "targets held_out: computed 2 image(s)" in err
    assert (out / "targets" / "train.h5").stat().st_mtime_ns == before["train"]
    assert sha256(out / "targets" / "held_out.h5") != sha256(world["fit"] / "targets" / "held_out.h5")


def test_an_interrupted_fit_resumes_to_the_bytes_of_an_uninterrupted_one(world, tmp_path, monkeypatch):
    calls = []

    def interrupted(*args, **kwargs):
        if len(calls) == 3:
            raise KeyboardInterrupt
        calls.append(1)
        return real(*args, **kwargs)

    real = fit_targets.target_row
    monkeypatch.setattr(fit_targets, "target_row", interrupted)
    argv = [*world["model"], "--images", str(world["images"]), *QUICK, "--out", str(tmp_path / "fit")]
    with pytest.raises(KeyboardInterrupt):
        fit(*argv)
    assert (tmp_path / "fit" / "targets" / ".partial" / "train.h5").is_file()
    monkeypatch.setattr(fit_targets, "target_row", real)
    code, _, err = fit(*argv)
    assert code == 0 and "targets train: resuming at image 4 of 5" in err, err[-2000:]
    for split in ("train", "held_out"):
        assert sha256(tmp_path / "fit" / "targets" / f"{split}.h5") == sha256(world["fit"] / "targets" / f"{split}.h5")


def partial_done(path: Path) -> int:
    """Images the running build has written to its partial file (0 while it cannot be read)."""
    try:
        with h5py.File(path, "r", locking=False) as f:
            return int(f.attrs.get("items_done", 0))
    except (OSError, KeyError, ValueError):
        return 0


@pytest.mark.slow
def test_a_killed_fit_resumes_to_the_bytes_of_an_uninterrupted_one(world, tmp_path):
    out = tmp_path / "fit"
    argv = [*world["model"], "--images", str(world["images"]), *QUICK, "--out", str(out)]
    env = {**tool_env(warm=False), "XDG_CACHE_HOME": str(world["root"] / "cache")}
    proc = subprocess.Popen([str(BIN / "taskgeom"), "fit", *argv], env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, start_new_session=True)
    partial, deadline = out / "targets" / ".partial" / "train.h5", time.monotonic() + 120
    while partial_done(partial) < 1 and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.02)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    assert not (out / "targets" / "train.h5").exists(), "the build finished before it could be killed"
    code, _, err = fit(*argv)
    # killed while computing an image (nearly always) it resumes; killed inside a write, the damaged
    # partial file is discarded and the build starts over: either way the same bytes
    assert code == 0 and ("targets train: resuming at image" in err or "starting over" in err), err[-2000:]
    for split in ("train", "held_out"):
        assert sha256(out / "targets" / f"{split}.h5") == sha256(world["fit"] / "targets" / f"{split}.h5")


@pytest.fixture(scope="module")
def hf_dirs(tmp_path_factory) -> dict[str, Path]:
    """A transformers ViT classifier and a Depth Anything, tiny, saved with their image processors."""
    from transformers import (
        DepthAnythingForDepthEstimation,
        DPTImageProcessor,
        ViTConfig,
        ViTForImageClassification,
        ViTImageProcessor,
    )

    from taskgeom.models.adapters import PAPER_MODELS, depth_anything_config

    torch.manual_seed(0)
    root = tmp_path_factory.mktemp("hf")
    vit = ViTForImageClassification(ViTConfig(image_size=28, patch_size=7, num_labels=5, hidden_size=32,
                                              num_hidden_layers=2, num_attention_heads=2, intermediate_size=64))
    depth = DepthAnythingForDepthEstimation(depth_anything_config(**PAPER_MODELS["depth-anything-v2"].tiny))
    dirs = {"vit": root / "vit", "depth": root / "depth"}
    for (name, model), processor in zip({"vit": vit, "depth": depth}.items(),
                                        (ViTImageProcessor(size={"height": 28, "width": 28}),
                                         DPTImageProcessor(size={"height": 28, "width": 28}, keep_aspect_ratio=True,
                                                           ensure_multiple_of=14))):
        model.save_pretrained(dirs[name])
        processor.save_pretrained(dirs[name])
    return dirs


def test_a_hugging_face_classifier_without_spn(hf_dirs, world, tmp_path):
    out = tmp_path / "fit"
    code, stdout, err = fit("--hf", str(hf_dirs["vit"]), "--images", str(world["images"]), "--decoder", "logits",
                            "--layers", "1", "--spn", "off", *QUICK, "--out", str(out))
    assert code == 0, err[-2000:]
    fitted = load_fitted(out)
    assert fitted.decoder == "logits" and fitted.path == "merge" and fitted.metric.spn is None
    assert not (out / "spn.safetensors").exists() and "SPN:" not in stdout
    assert fitted.model["family"] == "hf" and fitted.model["class"] == "ViTForImageClassification"
    assert fitted.model["hf"]["sha256"] and fitted.layout["rows"] == 4 and fitted.layout["outputs"] == 5
    check_model(fitted, load_hf(hf_dirs["vit"]))
    other = load_hf(hf_dirs["vit"])
    with torch.no_grad():
        other.classifier.weight.add_(1.0)
    with pytest.warns(WeightsDiffer, match="weights differ"):
        check_model(fitted, other)


def test_depth_takes_the_prune_path_and_one_aspect_ratio(hf_dirs, world, tmp_path):
    out = tmp_path / "fit"
    code, _, err = fit("--hf", str(hf_dirs["depth"]), "--images", str(world["images"]), *QUICK, "--out", str(out))
    assert code == 0, err[-2000:]
    fitted = load_fitted(out)
    assert fitted.decoder == "depth" and fitted.path == "prune" and fitted.metric.spn is None
    check_model(fitted, load_hf(hf_dirs["depth"]))
    mixed = write_images(tmp_path / "mixed", 3)
    Image.fromarray(np.zeros((40, 80, 3), dtype=np.uint8)).save(mixed / "im1.png")    # another aspect ratio
    code, _, err = fit("--hf", str(hf_dirs["depth"]), "--images", str(mixed), *QUICK[:-4], "--held-out", "1",
                       "--out", str(tmp_path / "mixed-fit"))
    last = err.strip().splitlines()[-1]      # after transformers' own "Loading weights" bar
    assert code == 2 and last.startswith("taskgeom: error: --images im1.png: its input is 28×56") and \
        "fit learns one token grid" in last and "Traceback" not in err, err


@pytest.mark.parametrize("argv, line", [
    (["--layers", "0", "1"], "taskgeom: error: --layers 0 1: fit learns at one block"),
    (["--layers", "2"], "taskgeom: error: --layers 2: the model has blocks 0..1"),
    (["--decoder", "depth"], "taskgeom: error: --decoder depth: this model's decoders are cls"),
    (["--held-out", "7"], "taskgeom: error: --held-out 7: holds out 7 of the 7 image(s)"),
    (["--max-images", "1"], "taskgeom: error: --images: fit needs at least 2 images"),
    (["--held-out", "1.5"], "taskgeom fit: error: argument --held-out: expected a count ≥ 1 or a fraction"),
    (["--spn", "maybe"], "taskgeom fit: error: argument --spn: invalid choice: 'maybe'"),
    (["--steps", "0"], "taskgeom fit: error: argument --steps: expected an integer ≥ 1, got 0"),
    (["--power-iters", "auto"], "taskgeom fit: error: argument --power-iters: expected an integer ≥ 0"),
    (["--sketch", "rayleigh-ritz"], "taskgeom: error: --sketch rayleigh-ritz: its block norms and ‖J‖_F² come from"),
    (["--block-norm-probes", "-1"], "taskgeom fit: error: argument --block-norm-probes: expected an integer ≥ 0"),
    (["--spn-lr", "0"], "taskgeom fit: error: argument --spn-lr: expected a number > 0, got '0'"),
])
def test_bad_flags_are_one_line(inputs, tmp_path, argv, line):
    code, out, err = fit(*inputs["model"], "--images", str(inputs["images"]), *argv, "--out", str(tmp_path / "f"))
    assert code == 2 and not out and err.strip().splitlines()[-1].startswith(line), err
    if line.startswith("taskgeom: error"):
        assert err.count("\n") == 1
    assert not (tmp_path / "f" / "fit.json").exists()


def test_hf_directories_take_no_timm_flags(inputs, tmp_path):
    code, _, err = fit("--hf", str(tmp_path), "--weights", "w.safetensors", "--images", str(inputs["images"]))
    assert code == 2 and err.count("\n") == 1 and err.startswith("taskgeom: error: --weights, --model-args")


def test_the_fitting_package_never_imports_the_pipeline():
    reaching_up = [m for m in import_closure("taskgeom.fitting.run") | import_closure("taskgeom.fitting")
                   if m.startswith(("taskgeom.pipeline", "taskgeom.stages"))]
    assert not reaching_up


def test_the_inspect_reading_ends_with_a_fit_command_that_runs(inputs, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    out = io.StringIO()
    with redirect_stdout(out), redirect_stderr(io.StringIO()):
        assert cli.main(["inspect", *inputs["model"], "--images", str(inputs["images"]), "--max-images", "3",
                         "--r", "8", "--num-probes", "8", "--threads", "1", "--out", "inspect"]) == 0
    reading = [line for line in out.getvalue().splitlines() if line.startswith("Layer 0, decoder cls")][0]
    command = shlex.split(reading.split("Command: ", 1)[1])
    assert command[:2] == ["taskgeom", "fit"] and command[-2:] == ["--out", "fit-vit-tiny-patch16-224-l0"]
    assert command[2:4] == ["--timm", NAME] and "--weights" in command and "--max-images" not in command
    code, _, err = fit(*command[2:], "--steps", "10", "--spn-steps", "10", "--held-out", "2")
    assert code == 0, err[-2000:]
    fitted = load_fitted(tmp_path / "fit-vit-tiny-patch16-224-l0")
    assert (fitted.layer, fitted.decoder, fitted.record["settings"]["r"]) == (0, "cls", 8)


SUMMARY = {k: {"mean": v} for k, v in dict(kappa_cap=0.5, cv=1.5, erank=30.0, r90=40.0).items()}


@pytest.mark.parametrize("regime", ["marginal-kappa-high-cv", "low-rank-delocalized", "rich-spectrum"])
def test_each_regime_ends_with_the_fit_command(regime):
    flags = {"hf": "models/my dir", "images": "photos", "r": 20, "linear": None}
    text = reading(regime, "my-dir-l5", "depth", 5, SUMMARY, None, flags)
    assert text.endswith("Command: taskgeom fit --hf 'models/my dir' --images photos --layers 5 --decoder depth "
                         "--out fit-my-dir-l5")
    assert "In the pipeline" not in text
    zoo = reading(regime, "my-dir-l5", "depth", 5, SUMMARY, "depth-anything-v2", flags)
    assert "In the pipeline: add " in zoo and "adapter: depth-anything-v2" in zoo and zoo.endswith("fit-my-dir-l5")
    exact = reading("rank-bounded", "p", "depth", 5, SUMMARY, None, flags)
    assert "Exact metric: none: J = op.rmm" in exact and "M VJPs per image" in exact
    assert exact.endswith("Command: taskgeom fit --hf 'models/my dir' --images photos --layers 5 --decoder depth "
                          "--out fit-p")
