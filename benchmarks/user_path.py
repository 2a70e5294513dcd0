"""A new user's whole path on two models the project never configured, as commands in a shell:
``taskgeom inspect`` with its defaults, the ``taskgeom fit`` command its reading prints (run as
printed), ``taskgeom compare`` with the same model flags, then the README's three lines
(``taskgeom.patch(model, DIR, ratio=0.5)``; ``model(images)``) in a fresh Python.

The models (random weights, nothing downloaded): timm ``vit_small_patch16_224`` built at 64 px
(``--model-args img_size=64``), weights in a .safetensors file; and a transformers
``Dinov2WithRegistersForImageClassification`` (4 register tokens) saved with its image processor.
The images: 24 of the embedded world's scenes, 16 to inspect and fit, 8 held out to compare.
Every step must exit 0 with no file edited between steps; the table gives each step's command,
exit status, seconds and last line.

Results: results/benchmarks/user_path.{csv,md}.

    python benchmarks/user_path.py
"""

from __future__ import annotations

import shlex
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pandas as pd
from stamp import write_stamped

from taskgeom.fixtures import world_vit
from taskgeom.pipeline.runtime import machine

OUT = Path("results/benchmarks")
BIN = Path(sys.executable).parent
README = """
from pathlib import Path
import torch, taskgeom
from PIL import Image
{load}
images = torch.stack([transform(Image.open(f).convert("RGB")) for f in sorted(Path("held-out").iterdir())])
taskgeom.patch(model, "{fit}", ratio=0.5)
with torch.no_grad():
    logits = {call}
assert torch.isfinite(logits).all(), "non-finite output"
print("patched model(images):", tuple(logits.shape))
"""
TIMM_LOAD = """import timm
from safetensors.torch import load_file
model = timm.create_model("vit_small_patch16_224", pretrained=False, img_size=64).eval()
model.load_state_dict(load_file("vit_small.safetensors"))
cfg = timm.data.resolve_data_config({"input_size": (3, 64, 64)}, model=model)
transform = timm.data.create_transform(**cfg)"""
HF_LOAD = """from transformers import AutoImageProcessor, AutoModelForImageClassification
model = AutoModelForImageClassification.from_pretrained("dinov2_registers").eval()
processor = AutoImageProcessor.from_pretrained("dinov2_registers")
transform = lambda im: processor(images=im, return_tensors="pt")["pixel_values"][0]"""


def make_inputs(root: Path) -> dict[str, list[str]]:
    """The two models' files and the images under ``root``; each model's flags."""
    import timm
    import torch
    from safetensors.torch import save_file
    from transformers import (
        BitImageProcessor,
        Dinov2WithRegistersConfig,
        Dinov2WithRegistersForImageClassification,
    )

    torch.manual_seed(0)
    save_file(timm.create_model("vit_small_patch16_224", pretrained=False, img_size=64).state_dict(),
              root / "vit_small.safetensors")
    config = Dinov2WithRegistersConfig(image_size=56, patch_size=14, hidden_size=96, num_hidden_layers=4,
                                       num_attention_heads=4, intermediate_size=192, num_register_tokens=4,
                                       num_labels=10)
    Dinov2WithRegistersForImageClassification(config).save_pretrained(root / "dinov2_registers")
    BitImageProcessor(size={"shortest_edge": 64}, crop_size={"height": 56, "width": 56}).save_pretrained(
        root / "dinov2_registers")
    scenes = world_vit.world_scenes(24)
    world_vit.write_scenes(root / "images", scenes["rgb"], range(16))
    world_vit.write_scenes(root / "held-out", scenes["rgb"], range(16, 24))
    return {"timm vit_small_patch16_224 at 64 px": ["--timm", "vit_small_patch16_224", "--weights",
                                                    "vit_small.safetensors", "--model-args", "img_size=64"],
            "transformers Dinov2WithRegistersForImageClassification": ["--hf", "dinov2_registers"]}


def step(root: Path, argv: list[str]) -> tuple[dict, str]:
    """Run ``argv`` in ``root`` with the environment's tools first on PATH: its row and stdout."""
    env = {"PATH": f"{BIN}:/usr/bin:/bin", "HOME": str(root), "PYTHONHASHSEED": "0"}
    started = time.perf_counter()
    done = subprocess.run(argv, cwd=root, env=env, capture_output=True, text=True, timeout=1800)
    shown = "python -c <the README's three lines>" if argv[1:2] == ["-c"] else shlex.join(argv)
    last = (done.stdout.strip().splitlines() or done.stderr.strip().splitlines() or [""])[-1]
    return {"command": shown, "exit": done.returncode, "seconds": round(time.perf_counter() - started, 1),
            "last_line": last[:160]}, done.stdout + done.stderr


def user_path(root: Path, model: str, flags: list[str]) -> list[dict]:
    """inspect -> the printed fit command -> compare -> the README's lines, stopping at a failure."""
    rows = []
    row, out = step(root, ["taskgeom", "inspect", *flags, "--images", "images", "--out", f"inspect-{flags[1]}"])
    rows.append(row)
    commands = [line.split("Command: ", 1)[1] for line in out.splitlines() if "Command: taskgeom fit" in line]
    if row["exit"] or not commands:
        return [dict(r, model=model) for r in rows + [{"command": "(no fit command printed)", "exit": -1}]]
    fit = shlex.split(commands[0])
    fit_dir = fit[fit.index("--out") + 1]
    for argv in (fit, ["taskgeom", "compare", *flags, "--images", "held-out", "--fit", fit_dir, "--ratios", "0.25",
                       "0.5", "--out", f"compare-{flags[1]}"],
                 [str(BIN / "python"), "-c", README.format(load=TIMM_LOAD if flags[0] == "--timm" else HF_LOAD,
                                                           fit=fit_dir, call="model(images)" if flags[0] == "--timm"
                                                           else "model(pixel_values=images).logits")]):
        row, out = step(root, argv)
        rows.append(row)
        if row["exit"]:
            print(out[-3000:], file=sys.stderr)
            break
    return [dict(r, model=model) for r in rows]


def main() -> None:
    started = time.perf_counter()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        for model, flags in make_inputs(root).items():
            rows += user_path(root, model, flags)
            print(pd.DataFrame(rows[-4:]).to_string(index=False), flush=True)
    df = pd.DataFrame(rows)[["model", "command", "exit", "seconds", "last_line"]]
    ok = len(df) == 8 and (df.exit == 0).all()
    header = (f"A new user's path on two models the project never configured, on {machine('cpu')}; one run of "
              f"{time.perf_counter() - started:.0f} s. Every step exited 0: {'yes' if ok else 'no'}.\n\n")
    write_stamped(OUT, "user_path", df, header + df.to_markdown(index=False))
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
