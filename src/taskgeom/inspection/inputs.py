"""Images for ``inspect``: a folder read recursively, every file decoded to 8-bit RGB (grayscale,
palette, CMYK and RGBA alike; alpha is dropped, EXIF orientation applied; high-bit-depth
grayscale rescaled to 8 bits, ``to_8bit``), then the model's own
preprocessing: timm's evaluation transform from the model's data config
(``timm.data.resolve_data_config`` + ``create_transform``), or the Hugging Face image processor
saved in the model's directory (read offline). Inputs keep their own size where the
preprocessing does (e.g. Depth Anything's aspect-preserving resize): each image is probed alone.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import numpy as np
from PIL import Image, ImageOps, UnidentifiedImageError
from torch import Tensor, nn

Transform = Callable[[Image.Image], Tensor]


def image_files(folder: str | Path, limit: int | None = None) -> list[Path]:
    """The image files under ``folder`` (recursively, by the suffixes PIL opens), sorted; the first
    ``limit``. Raises FileNotFoundError when the folder is missing or holds none."""
    root = Path(folder).expanduser()
    if not root.is_dir():
        raise FileNotFoundError(f"--images {root}: not a directory")
    suffixes = {s.lower() for s in Image.registered_extensions()}
    files = sorted(p for p in root.rglob("*") if p.is_file() and p.suffix.lower() in suffixes)
    if not files:
        raise FileNotFoundError(f"--images {root}: no image files ({', '.join(sorted(suffixes)[:8])}, …)")
    return files[:limit] if limit else files


def read_rgb(path: Path) -> Image.Image:
    """One file as an 8-bit RGB image (``to_8bit`` first for high-bit-depth grayscale); ValueError
    naming the file when it does not decode or its values have no known range."""
    try:
        with Image.open(path) as image:
            image = ImageOps.exif_transpose(image)
            if image.mode in ("I", "F") or image.mode.startswith("I;16"):
                image = to_8bit(image, path)
            return image.convert("RGB")
    except (UnidentifiedImageError, OSError) as exc:
        raise ValueError(f"{path}: not a readable image ({exc})") from None


def to_8bit(image: Image.Image, path: Path) -> Image.Image:
    """A single-channel image of more than 8 bits as 8-bit grayscale ("L"), its full range kept:
    16-bit values v (modes ``I;16*``, and 32-bit integer ``I`` images whose values lie in
    [0, 65535], as 16-bit PNG and PGM files decode) become round(255·v / 65535), float ``F``
    values in [0, 1] round(255·v). (``convert("RGB")`` would clip every value above 255 to white;
    16-bit RGB files already decode to 8 bits per channel.) ValueError naming the file otherwise."""
    values = np.asarray(image).astype(np.float64)
    low, high = (float(values.min()), float(values.max())) if values.size else (0.0, 0.0)
    if image.mode.startswith("I;16") or (image.mode == "I" and low >= 0 and high <= 65535):
        full = 65535.0
    elif image.mode == "F" and np.isfinite(values).all() and low >= 0 and high <= 1:
        full = 1.0
    else:
        raise ValueError(f"{path}: a {image.mode!r} image with values in [{low:g}, {high:g}] has no known range; "
                         f"save it as 8- or 16-bit (or a float image in [0, 1])")
    return Image.fromarray(np.rint(values * (255.0 / full)).astype(np.uint8))  # 2-D uint8: mode "L"


def timm_transform(model: nn.Module, input_size: int | None = None) -> tuple[Transform, dict]:
    """timm's evaluation transform from the model's data config, at ``input_size`` (square) or
    else at the size the model was built for (its patch embedding's ``img_size``, which
    ``create_model(img_size=…)`` sets and the pretrained config does not); and the config, for the
    provenance. ValueError when the model cannot take that size (``check_input_size``)."""
    from timm.data import create_transform, resolve_data_config

    built = getattr(getattr(model, "patch_embed", None), "img_size", None)
    if input_size:
        overrides = {"input_size": (3, input_size, input_size)}
    elif built is not None:
        overrides = {"input_size": (3, *tuple(built))}
    else:
        overrides = {}
    cfg = resolve_data_config(overrides, model=model)
    check_input_size(model, tuple(cfg["input_size"][1:]), "--input-size" if input_size else "--model-args img_size")
    return create_transform(**cfg, is_training=False), {k: (list(v) if isinstance(v, tuple) else v)
                                                        for k, v in cfg.items()}


def check_input_size(model: nn.Module, size: tuple[int, int], flag: str) -> None:
    """ValueError naming ``flag`` unless the timm model's patch embedding takes (H, W) = ``size``:
    each side a multiple of its patch side (unless it pads, ``dynamic_img_pad``), and the size it
    was built for when it takes no other (``strict_img_size``, a model without dynamic sizes)."""
    embed = getattr(model, "patch_embed", None)
    if embed is None:
        return
    patch = tuple(getattr(embed, "patch_size", ()) or ())
    shown = size[0] if size[0] == size[1] else f"{size[0]}×{size[1]}"
    if patch and not getattr(embed, "dynamic_img_pad", False):
        for side, p in zip(size, patch):
            if side % p:
                near = [s for s in (side // p * p, side // p * p + p) if s > 0]
                raise ValueError(f"{flag} {shown}: not a multiple of the patch size {p} (the nearest that are: "
                                 f"{' or '.join(map(str, near))})")
    built = tuple(getattr(embed, "img_size", None) or ())
    if getattr(embed, "strict_img_size", False) and built and tuple(size) != built:
        raise ValueError(f"{flag} {shown}: this model takes only {built[0]}×{built[1]} inputs (it has no dynamic "
                         f"image size); build it at your size with --model-args img_size=S")


def hf_transform(directory: str | Path) -> tuple[Transform, dict]:
    """The image processor saved beside the model (preprocessor_config.json), loaded offline."""
    from transformers import AutoImageProcessor

    path = Path(directory).expanduser()
    if not (path / "preprocessor_config.json").is_file():
        raise FileNotFoundError(f"--hf {path}: no preprocessor_config.json (save the model's image processor "
                                f"there: processor.save_pretrained(DIR))")
    os.environ["HF_HUB_OFFLINE"] = "1"
    processor = AutoImageProcessor.from_pretrained(str(path), local_files_only=True)

    def transform(image: Image.Image) -> Tensor:
        return processor(images=image, return_tensors="pt")["pixel_values"][0].float()

    return transform, {"processor": type(processor).__name__, **processor.to_dict()}
