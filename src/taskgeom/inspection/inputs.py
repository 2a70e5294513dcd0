"""Images for ``inspect``: a folder read recursively, every file decoded to RGB (grayscale,
palette, CMYK and RGBA alike; alpha is dropped, EXIF orientation applied), then the model's own
preprocessing: timm's evaluation transform from the model's data config
(``timm.data.resolve_data_config`` + ``create_transform``), or the Hugging Face image processor
saved in the model's directory (read offline). Inputs keep their own size where the
preprocessing does (e.g. Depth Anything's aspect-preserving resize): each image is probed alone.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

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
    """One file as an RGB image; ValueError naming the file when it does not decode."""
    try:
        with Image.open(path) as image:
            image = ImageOps.exif_transpose(image)
            return image.convert("RGB")
    except (UnidentifiedImageError, OSError) as exc:
        raise ValueError(f"{path}: not a readable image ({exc})") from None


def timm_transform(model: nn.Module, input_size: int | None = None) -> tuple[Transform, dict]:
    """timm's evaluation transform from the model's data config, at ``input_size`` (square) or
    else at the size the model was built for (its patch embedding's ``img_size``, which
    ``create_model(img_size=…)`` sets and the pretrained config does not); and the config, for the
    provenance."""
    from timm.data import create_transform, resolve_data_config

    built = getattr(getattr(model, "patch_embed", None), "img_size", None)
    if input_size:
        overrides = {"input_size": (3, input_size, input_size)}
    elif built is not None:
        overrides = {"input_size": (3, *tuple(built))}
    else:
        overrides = {}
    cfg = resolve_data_config(overrides, model=model)
    return create_transform(**cfg, is_training=False), {k: (list(v) if isinstance(v, tuple) else v)
                                                        for k, v in cfg.items()}


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
