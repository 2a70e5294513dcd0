"""``taskgeom inspect`` at the edges a new user meets: high-bit-depth images, flags with values out
of range, arguments timm refuses, a decoder the model lacks, a model whose name is a zoo
adapter's but whose architecture is not, a stochastic estimate beyond the ceiling min(M, N·D)
on the rank of J, and the definition of token CV the output carries."""

from __future__ import annotations

import argparse
import math
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from taskgeom.diagnostics import diagnose
from taskgeom.inspection.inputs import read_rgb
from taskgeom.inspection.output import table
from taskgeom.inspection.run import inspect_model
from taskgeom.pipeline import cli, inspect_command

TINY = ["--model-args", "depth=1", "embed_dim=32", "num_heads=2", "img_size=32", "num_classes=5"]
FAST = ["--r", "4", "--num-probes", "8", "--threads", "1"]


@pytest.fixture(scope="module")
def photos(tmp_path_factory) -> Path:
    """Two small RGB images."""
    root = tmp_path_factory.mktemp("photos")
    g = np.random.default_rng(1)
    for name in ("a.png", "b.png"):
        Image.fromarray(g.integers(0, 256, (36, 40, 3), dtype=np.uint8)).save(root / name)
    return root


def inspect_cli(argv: list[str], out: Path, capsys, monkeypatch) -> tuple[int, str, str]:
    """``taskgeom inspect ARGV`` in this process: its exit status, stdout and stderr."""
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")       # restored afterwards; the command sets it
    monkeypatch.setenv("TRANSFORMERS_OFFLINE", "1")
    try:
        code = cli.main(["inspect", *argv, "--out", str(out)])
    except SystemExit as exc:                        # argparse's refusal
        code = exc.code
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_a_16_bit_png_keeps_its_range(tmp_path):
    """A 16-bit grayscale PNG (PIL mode I;16) reads as the 8-bit image it scales to, not white."""
    g = np.random.default_rng(0)
    eight = g.integers(0, 256, (24, 30), dtype=np.uint8)
    sixteen = np.minimum(eight.astype(np.int64) * 257 + g.integers(0, 128, eight.shape), 65535).astype(np.uint16)
    Image.fromarray(eight).save(tmp_path / "eight.png")
    Image.fromarray(sixteen).save(tmp_path / "sixteen.png")
    with Image.open(tmp_path / "sixteen.png") as image:
        assert image.mode == "I;16"
    ours = np.asarray(read_rgb(tmp_path / "sixteen.png")).astype(int)
    assert ours.shape == (24, 30, 3)
    assert np.abs(ours - np.asarray(read_rgb(tmp_path / "eight.png")).astype(int)).max() <= 1
    Image.fromarray(np.full((4, 4), 7.5, dtype=np.float32)).save(tmp_path / "float.tiff")
    with pytest.raises(ValueError, match=r"float\.tiff: a 'F' image with values in \[7\.5, 7\.5\]"):
        read_rgb(tmp_path / "float.tiff")


@pytest.mark.parametrize("flag, value", [("--max-images", "0"), ("--max-images", "-2"), ("--power-iters", "foo"),
                                         ("--power-iters", "-1"), ("--r", "0"), ("--num-probes", "-1"),
                                         ("--seed", "1.5"), ("--input-size", "0"), ("--threads", "x"),
                                         ("--layers", "-1")])
def test_a_numeric_flag_out_of_range_is_refused_naming_it(flag, value, photos, tmp_path, capsys, monkeypatch):
    argv = ["--timm", "vit_small_patch16_224", *TINY, "--images", str(photos), *FAST, flag, value]
    code, _, err = inspect_cli(argv, tmp_path / "out", capsys, monkeypatch)
    assert code == 2
    assert err.strip().splitlines()[-1].startswith(f"taskgeom inspect: error: argument {flag}: expected an integer")
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("argv, line", [
    (["--input-size", "100"], "--input-size 100: not a multiple of the patch size 16 (the nearest that are: 96 or "
                              "112)"),
    (["--model-args", "foo=3"], "--model-args foo=…: timm's 'vit_small_patch16_224' takes no argument 'foo'; it takes "
                                "img_size, patch_size"),
    (["--model-args", "embed_dim=33", "num_heads=2"], "--model-args embed_dim=33 num_heads=2: timm cannot build"),
    (["--decoder", "depth"], "--decoder depth: this model's decoders are cls, logits"),
])
def test_what_the_model_cannot_take_is_one_line(argv, line, photos, tmp_path, capsys, monkeypatch):
    """The size, the arguments and the decoder the model cannot take: one line naming the flag (the
    decoder's without the unrelated list of supported model families)."""
    base = ["--timm", "vit_small_patch16_224", *TINY, "--images", str(photos), *FAST]
    code, _, err = inspect_cli(base + argv, tmp_path / "out", capsys, monkeypatch)
    assert code == 2
    assert err.count("\n") == 1 and err.startswith(f"taskgeom: error: {line}"), err[-2000:]
    assert "supported are" not in err


def test_a_zoo_adapter_is_named_by_its_architecture_not_its_name():
    """A ``vit_base_patch16_clip*`` name at depth 3 and width 192 is an ordinary timm model; the
    adapter's own architecture is the adapter's whatever its input size (built on the meta device)."""
    args = argparse.Namespace(timm="vit_base_patch16_clip_224", weights=None, input_size=None, hf=None,
                              model_args=["depth=3", "embed_dim=192", "num_heads=3", "img_size=32"])
    assert inspect_command._load(args)[3] is None

    from taskgeom.inspection.zoo import timm_adapter
    from taskgeom.models.adapters.timm_any import build_timm

    with torch.device("meta"):
        clip = build_timm("vit_base_patch16_clip_quickgelu_224", num_classes=512, img_size=64)
        dinov2 = build_timm("vit_base_patch14_dinov2", img_size=56)
        registers = build_timm("vit_base_patch14_reg4_dinov2")
        gelu = build_timm("vit_base_patch16_clip_224", num_classes=512)
    assert (timm_adapter(clip), timm_adapter(dinov2)) == ("clip-b16", "dinov2-b14")
    assert timm_adapter(registers) is None and timm_adapter(gelu) is None   # 4 registers; GELU, not QuickGELU


class PlantedHost(torch.nn.Module):
    """A probe host whose decoder is a fixed linear map A (M × N·D) with singular values in [1, 1.01]:
    erank and r_0.90 of J = A sit just below their ceilings min(M, N·D) and ⌈0.9·min(M, N·D)⌉."""

    def __init__(self, M: int = 256, N: int = 17, D: int = 32):
        super().__init__()
        g = torch.Generator().manual_seed(0)
        U, _ = torch.linalg.qr(torch.randn(M, M, generator=g))
        V, _ = torch.linalg.qr(torch.randn(N * D, M, generator=g))
        self.register_buffer("A", U @ torch.diag(1 + 0.01 * torch.rand(M, generator=g)) @ V.T)
        self.num_blocks, self.decoders = 1, ("planted",)

    def decoder_layers(self, decoder: str) -> tuple[int, ...]:
        return (0,)

    def embed(self, images: torch.Tensor):
        return images.flatten(2).transpose(1, 2), None          # (B, D, 1, N) -> (B, N, D)

    def block(self, i: int, h: torch.Tensor, ctx) -> torch.Tensor:
        return h

    def decode(self, decoder: str, states, ctx) -> torch.Tensor:
        return states[0].flatten(1) @ self.A.T


def test_stochastic_erank_never_exceeds_the_rank_ceiling():
    """M = 256 outputs, N·D = 544 inputs: no estimate beyond min(M, N·D) = 256 (erank) or
    ⌈0.9·256⌉ = 231 (r_0.90); what was clamped is said in the row, the table and the JSON notes."""
    host = PlantedHost()
    g = torch.Generator().manual_seed(1)
    images = [torch.randn(32, 1, 17, generator=g) for _ in range(6)]
    ins = inspect_model(host, images, r=20)
    rows = ins.results[0].rows
    assert all(row["erank"] <= 256 and row["r90"] <= math.ceil(0.9 * 256) for row in rows)
    assert {row["ceiling"] for row in rows} == {256}
    clamped = [row for row in rows if "erank" in row["clamped"]]
    assert clamped and all(row["erank"] == 256 for row in clamped)
    assert f"* layer 0: erank clamped on {len(clamped)} of 6 image(s)" in table(ins, "planted")
    F = host.embed(images[0][None])[0][0]
    d = diagnose(lambda x: host.decode("planted", {0: x[None]}, None)[0], F, r=20, seed=3)
    assert d.erank <= 256 and d.r90 <= 231 and not d.exact


def test_within_rank_bounds():
    from taskgeom.diagnostics import within_rank

    assert within_rank(258.2, 236, 256) == (256.0, 231, ("erank", "r90"))
    assert within_rank(9.5, 9, 10) == (9.5, 9, ())               # ⌈0.9·10⌉ = 9, not 10 by rounding
    assert within_rank(10.4, 10, 10) == (10.0, 9, ("erank", "r90"))


def test_token_cv_is_defined_where_it_is_shown(photos, tmp_path, capsys, monkeypatch):
    """The table, the JSON and docs/inspect.md say token CV is the CV of the rank-r token energy
    e_t, not of the full per-token ‖J_t‖_F²."""
    import json

    argv = ["--timm", "vit_small_patch16_224", *TINY, "--images", str(photos), *FAST, "--max-images", "1"]
    code, out, err = inspect_cli(argv, tmp_path / "out", capsys, monkeypatch)
    assert code == 0, err[-2000:]
    definition = "token CV = std_t(e_t) / mean_t(e_t) over the N tokens, e_t = Σ_{i≤r} σ_i² ‖V_{t,i}‖²"
    assert definition in out
    record = json.loads((tmp_path / "out" / "inspect.json").read_text())
    assert record["definitions"]["cv"].startswith(definition) and "not the full per-token ‖J_t‖_F²" in \
        record["definitions"]["cv"]
    docs = (Path(__file__).parents[1] / "docs" / "inspect.md").read_text()
    assert "the rank-r token energy e_t = Σ_{i≤r} σ_i² ‖V_{t,i}‖²" in docs
    assert "It is not the CV of the full per-token block norm ‖J_t‖_F²" in docs
