"""``taskgeom inspect`` on architectures the pipeline never configures, with random weights built
by timm and transformers themselves at reduced sizes: the command line end to end, the library
function on each model (register, CLS and distillation tokens, rotary embeddings, non-square and
mixed input sizes, bf16 weights, parameters requiring grad, fused attention), agreement with
``diagnose_exact``, and the one-line refusal of what it cannot probe."""

from __future__ import annotations

import hashlib
import json
import subprocess
from pathlib import Path

import numpy as np
import pytest
import timm
import torch
from conftest import BIN, tool_env
from PIL import Image
from safetensors.torch import save_file

from taskgeom.artifacts import provenance
from taskgeom.data.digests import combined
from taskgeom.diagnostics import diagnose, diagnose_exact
from taskgeom.inspection.hosts import Unsupported, as_host, with_linear
from taskgeom.inspection.inputs import hf_transform, image_files, read_rgb, timm_transform
from taskgeom.inspection.run import inspect_model
from taskgeom.models.adapters.hf_any import load_hf
from taskgeom.models.adapters.timm_any import build_timm
from taskgeom.models.host import run_decoder
from taskgeom.pipeline import cli
from taskgeom.probes import ProbeMap

SMALL = dict(depth=3, embed_dim=32, num_heads=2)
FAST = dict(r=8, num_probes=16)


@pytest.fixture(scope="module")
def folder(tmp_path_factory) -> Path:
    """JPEGs of mixed sizes and modes (RGB, grayscale, CMYK) in nested folders, and an RGBA PNG."""
    root = tmp_path_factory.mktemp("images")
    (root / "nested").mkdir()
    g = np.random.default_rng(0)
    Image.fromarray(g.integers(0, 256, (40, 60, 3), dtype=np.uint8)).save(root / "wide.jpg")
    Image.fromarray(g.integers(0, 256, (70, 45), dtype=np.uint8)).save(root / "nested" / "gray.jpg")
    Image.fromarray(g.integers(0, 256, (52, 52, 4), dtype=np.uint8), mode="CMYK").save(root / "nested" / "cmyk.jpg")
    Image.fromarray(g.integers(0, 256, (30, 36, 4), dtype=np.uint8), mode="RGBA").save(root / "alpha.png")
    (root / "notes.txt").write_text("not an image")
    return root


def no_grad_anywhere(ins) -> bool:
    arrays = [a for res in ins.results for a in (*res.kappa_curves, *res.spectra)]
    return all(isinstance(a, np.ndarray) for a in arrays)


def test_images_are_read_recursively_as_rgb(folder):
    files = image_files(folder)
    assert [f.relative_to(folder).as_posix() for f in files] == ["alpha.png", "nested/cmyk.jpg", "nested/gray.jpg",
                                                                 "wide.jpg"]
    assert {read_rgb(f).mode for f in files} == {"RGB"}
    with pytest.raises(FileNotFoundError, match="not a directory"):
        image_files(folder / "missing")
    empty = folder.parent / "empty"
    empty.mkdir(exist_ok=True)
    with pytest.raises(FileNotFoundError, match="no image files"):
        image_files(empty)


def test_command_line_on_a_timm_model_with_local_weights(folder, tmp_path):
    """Distilled DeiT (CLS + distillation token) from a local safetensors file, logits decoder."""
    args = dict(img_size=32, num_classes=12, **SMALL)
    weights = tmp_path / "deit.safetensors"
    save_file(timm.create_model("deit_tiny_distilled_patch16_224", pretrained=False, **args).state_dict(), weights)
    out = tmp_path / "out"
    cmd = [str(BIN / "taskgeom"), "inspect", "--timm", "deit_tiny_distilled_patch16_224", "--weights", str(weights),
           "--model-args", *[f"{k}={v}" for k, v in args.items()], "--input-size", "32", "--images", str(folder),
           "--r", "8", "--num-probes", "16", "--threads", "1", "--per-image", "--out", str(out)]
    proc = subprocess.run(cmd, env=tool_env(warm=False), capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "layers [0, 1] of 3 blocks (default: a middle and a late block)" in proc.stdout
    assert "Tool:" in proc.stdout and "Command:" in proc.stdout
    assert "nested/cmyk.jpg  32×32  1" in proc.stdout           # --per-image: image, input size, layer, values
    record = json.loads((out / "inspect.json").read_text())
    assert record["decoder"] == "logits" and record["layers"] == [0, 1]
    assert len(record["images"]) == 4 and record["probes"][0]["images"][0]["output_dim"] == 12
    assert record["probes"][0]["images"][0]["tokens"] == 2 + 4        # CLS + distillation token + 2×2 patches
    for probe in record["probes"]:
        s = probe["summary"]["kappa_cap"]
        assert s["low"] <= s["mean"] <= s["high"] <= 1.0 and probe["regime"] in probe["reading"]
    assert provenance.read(out / "inspect.json")["stage"] == "inspect"
    assert provenance.read(out / "inspect.png")["params"]["timm"] == "deit_tiny_distilled_patch16_224"
    digests = record["provenance"]["input"]["sha256"]
    assert digests["weights"]["sha256"] == sha256(weights)
    assert digests["images"]["files"] == {name: sha256(folder / name) for name in record["images"]}


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_provenance_ties_the_reading_to_its_exact_inputs(hf_dirs, folder, tmp_path, monkeypatch):
    """inspect.json records the sha256 of every image it read and of every file of the --hf
    directory, each set also as one digest over its sorted (name, sha256) lines."""
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("TRANSFORMERS_OFFLINE", "1")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    out = tmp_path / "out"
    assert cli.main(["inspect", "--hf", str(hf_dirs["vit"]), "--images", str(folder), "--max-images", "2",
                     "--r", "4", "--num-probes", "8", "--layers", "2", "--out", str(out)]) == 0
    digests = provenance.read(out / "inspect.json")["input"]["sha256"]
    images = {"alpha.png": sha256(folder / "alpha.png"), "nested/cmyk.jpg": sha256(folder / "nested" / "cmyk.jpg")}
    assert digests["images"] == {"files": images, "sha256": combined(images)}
    files = {p.name: sha256(p) for p in hf_dirs["vit"].iterdir()}
    assert {"config.json", "model.safetensors", "preprocessor_config.json"} <= set(files)
    assert digests["hf"] == {"path": str(hf_dirs["vit"]), "files": files, "sha256": combined(files)}


@pytest.mark.parametrize("name, kwargs, prefix", [
    ("deit_small_patch16_224", dict(img_size=32, patch_size=16, num_classes=7), 1),
    ("vit_small_patch14_reg4_dinov2", dict(img_size=28, num_classes=0), 5),   # CLS + 4 registers
    ("eva02_tiny_patch14_224", dict(img_size=28, num_classes=6), 1),           # rotary position embedding
])
def test_timm_architectures(name, kwargs, prefix, folder):
    """Each at its own preprocessing; bf16 weights and parameters requiring grad come back as they were."""
    torch.manual_seed(0)
    model = build_timm(name, **SMALL, **kwargs).to(torch.bfloat16)
    model.train()
    transform, cfg = timm_transform(model)                     # at the size it was built for
    assert cfg["input_size"] == [3, kwargs["img_size"], kwargs["img_size"]]
    images = [transform(read_rgb(f)) for f in image_files(folder)[:2]]
    ins = inspect_model(model, images, layers=[1], **FAST)
    row = ins.results[0].rows[0]
    side = kwargs["img_size"] // (16 if "patch16" in name else 14)
    assert row["tokens"] == prefix + side * side and row["dim"] == 32
    assert ins.decoder == ("logits" if kwargs["num_classes"] else "cls")
    assert 0 < row["kappa_cap"] <= 1 and row["erank"] >= 1 and no_grad_anywhere(ins)
    assert all(p.requires_grad for p in model.parameters()) and model.training
    host, x = as_host(model), images[0][None]
    with torch.no_grad():       # the host's decoder is the model's own forward
        ours = run_decoder(host, ins.decoder, x)
        torch.testing.assert_close(ours, model(x))   # logits, or the pooled embedding when num_classes=0


def test_dynamic_and_non_square_inputs_on_rotary_embeddings():
    """EVA-02's rotary embedding follows each input's grid: 28×42 and 42×28 give 6 patches each."""
    model = build_timm("eva02_tiny_patch14_224", img_size=28, num_classes=5, **SMALL)
    images = [torch.randn(3, 28, 42), torch.randn(3, 42, 28), torch.randn(3, 28, 28)]
    ins = inspect_model(model, images, layers=[0, 2], **FAST)
    assert [row["tokens"] for row in ins.results[0].rows] == [7, 7, 5]
    assert [res.layer for res in ins.results] == [0, 2]


def save_hf(model, processor, directory: Path) -> Path:
    model.save_pretrained(directory)
    processor.save_pretrained(directory)
    return directory


@pytest.fixture(scope="module")
def hf_dirs(tmp_path_factory) -> dict[str, Path]:
    """Reduced transformers models with random weights and their image processors, saved locally."""
    from transformers import (
        DepthAnythingForDepthEstimation,
        Dinov2Config,
        Dinov2ForImageClassification,
        Dinov2WithRegistersConfig,
        Dinov2WithRegistersModel,
        DPTImageProcessor,
        ViTConfig,
        ViTForImageClassification,
        ViTImageProcessor,
    )

    from taskgeom.models.adapters import PAPER_MODELS, depth_anything_config

    torch.manual_seed(0)
    root = tmp_path_factory.mktemp("hf")
    small = dict(hidden_size=32, num_hidden_layers=3, num_attention_heads=2, intermediate_size=64)
    square = ViTImageProcessor(size={"height": 28, "width": 28})
    vit = ViTForImageClassification(ViTConfig(image_size=28, patch_size=7, num_labels=9, **small))
    dinov2 = Dinov2ForImageClassification(Dinov2Config(image_size=28, patch_size=7, num_labels=4, **small))
    registers = Dinov2WithRegistersModel(Dinov2WithRegistersConfig(image_size=28, patch_size=7, num_register_tokens=2,
                                                                   **small))
    depth = DepthAnythingForDepthEstimation(depth_anything_config(**PAPER_MODELS["depth-anything-v2"].tiny))
    keep = DPTImageProcessor(size={"height": 28, "width": 28}, keep_aspect_ratio=True, ensure_multiple_of=14)
    return {"vit": save_hf(vit, square, root / "vit"), "dinov2": save_hf(dinov2, square, root / "dinov2"),
            "registers": save_hf(registers, square, root / "registers"),
            "depth": save_hf(depth, keep, root / "depth")}


@pytest.mark.parametrize("which, decoder, tokens", [("vit", "logits", 1 + 16), ("dinov2", "logits", 1 + 16),
                                                    ("registers", "cls", 3 + 16)])
def test_hugging_face_directories(which, decoder, tokens, hf_dirs, folder):
    model = load_hf(hf_dirs[which])
    transform, _ = hf_transform(hf_dirs[which])
    images = [transform(read_rgb(f)) for f in image_files(folder)[:2]]
    ins = inspect_model(model, images, **FAST)
    assert ins.decoder == decoder and ins.layers == [0, 1]
    assert ins.results[0].rows[0]["tokens"] == tokens and no_grad_anywhere(ins)
    assert all(p.requires_grad for p in model.parameters())    # from_pretrained's, given back as they were
    x = images[0][None]
    with torch.no_grad():       # the host's decoder is the model's own forward
        out = model(pixel_values=x)
        theirs = out.logits if decoder == "logits" else out.pooler_output
        torch.testing.assert_close(run_decoder(as_host(model), decoder, x), theirs)


def test_a_model_built_in_memory_with_fused_attention():
    from transformers import ViTConfig, ViTModel

    model = ViTModel(ViTConfig(image_size=28, patch_size=7, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                               intermediate_size=64, attn_implementation="sdpa"))
    ins = inspect_model(model, [torch.randn(3, 28, 35)], **FAST)      # non-square: 4×5 patches
    assert ins.decoder == "cls" and ins.results[0].rows[0]["tokens"] == 1 + 20


def test_depth_head_on_mixed_sizes_agrees_with_the_dense_jacobian(hf_dirs, folder):
    """Depth Anything keeps each image's aspect ratio (sides multiples of 14); on one image the
    matrix-free values agree with diagnose_exact on the same probe within the tolerances
    tests/test_diagnostics.py holds diagnose to (|Δκ| ≤ 0.05, erank within 10%)."""
    model = load_hf(hf_dirs["depth"])
    transform, _ = hf_transform(hf_dirs["depth"])
    images = [transform(read_rgb(f)) for f in image_files(folder)]
    assert len({tuple(x.shape[-2:]) for x in images}) > 1
    ins = inspect_model(model, images[:1] + images[3:], layers=[1], seed=0)
    assert ins.decoder == "depth"
    row = ins.results[0].rows[0]
    probe = ProbeMap(as_host(model), "depth", [1]).at(images[0])
    exact = diagnose_exact(probe.f, probe.F, r=20)
    assert row["output_dim"] == images[0].shape[-2] * images[0].shape[-1] and row["r90_source"] != "exact"
    assert row["kappa_cap"] == pytest.approx(exact.kappa_cap, abs=0.05)
    assert row["erank"] == pytest.approx(exact.erank, rel=0.10)
    assert row["kappa_cap"] == diagnose(probe.f, probe.F, seed=0).kappa_cap      # the same probe, the same seed


def test_a_linear_head_from_safetensors(tmp_path):
    model = build_timm("vit_small_patch14_reg4_dinov2", img_size=28, num_classes=0, **SMALL)
    save_file({"head.weight": torch.randn(3, 32), "head.bias": torch.zeros(3)}, tmp_path / "probe.safetensors")
    host = with_linear(as_host(model), tmp_path / "probe.safetensors")
    ins = inspect_model(host, [torch.randn(3, 28, 28)], **FAST)
    assert ins.decoder == "linear" and ins.results[0].rows[0]["output_dim"] == 3
    assert ins.results[0].regime == "rank-bounded"
    save_file({"weight": torch.randn(3, 16)}, tmp_path / "wrong.safetensors")
    with pytest.raises(ValueError, match="reads 16 features"):
        inspect_model(with_linear(as_host(model), tmp_path / "wrong.safetensors"), [torch.randn(3, 28, 28)], **FAST)


def test_what_it_cannot_probe_is_refused_in_one_line():
    for model in (timm.create_model("resnet18", pretrained=False, num_classes=4), torch.nn.Linear(3, 3)):
        with pytest.raises(Unsupported) as err:
            inspect_model(model, [torch.randn(3, 32, 32)])
        message = str(err.value)
        assert "\n" not in message and "supported are" in message and "diagnose(f, F)" in message
    with pytest.raises(Unsupported, match="^--decoder depth: this model's decoders are cls, logits$"):
        inspect_model(build_timm("deit_small_patch16_224", img_size=32, **SMALL), [torch.randn(3, 32, 32)],
                      decoder="depth")
