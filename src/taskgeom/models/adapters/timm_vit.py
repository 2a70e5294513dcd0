"""The paper's timm ViTs (DINOv2 ViT-B/14, CLIP ViT-B/16) as probe hosts."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from taskgeom.artifacts.checkpoints import CheckpointError
from taskgeom.models.adapters.spec import WEIGHT_SUFFIXES, AdapterSpec, weight_files
from taskgeom.models.host import ProbeHost, freeze, use_math_attention
from taskgeom.models.vit import TimmViTHost


def _timm_weights_overlay(spec: AdapterSpec, path: Path, num_classes: int) -> dict[str, Any]:
    """timm's own loading route for a local file or directory (its checkpoint filter then converts
    original-format checkpoints and resamples the position embedding to ``img_size``).

    ``num_classes`` is pinned so timm never silently drops a mismatched head (it would load non-strictly).
    """
    if path.is_file():
        return dict(file=str(path), num_classes=num_classes)
    if not weight_files(path):
        raise FileNotFoundError(f"paper model {spec.name!r}: {path} holds no weight file "
                                f"({', '.join(WEIGHT_SUFFIXES)}). Provide {spec.weights}")
    return dict(source="local-dir", file=str(path), num_classes=num_classes)


def _timm_builder(name: str, arch: str, defaults: Mapping[str, Any], project_cls: bool
                  ) -> Callable[[Path | None, Mapping[str, Any]], ProbeHost]:
    """Builder for a timm ViT host; overrides are ``timm.create_model`` kwargs (``arch`` swaps the model name)."""

    def build(path: Path | None, overrides: Mapping[str, Any]) -> ProbeHost:
        import timm

        kwargs = {**defaults, **overrides}
        model_name = kwargs.pop("arch", arch)
        if path is not None:
            overlay = _timm_weights_overlay(TIMM_MODELS[name], path, kwargs.get("num_classes", 0))
            kwargs["pretrained_cfg_overlay"] = overlay
        try:
            vit = timm.create_model(model_name, pretrained=path is not None, **kwargs)
        except RuntimeError as err:  # load_state_dict's list of every tensor that does not fit
            if path is None or "size mismatch for " not in str(err):
                raise
            first = str(err).split("size mismatch for ", 1)[1].split("\n", 1)[0].rstrip(".")
            raise CheckpointError(f"{path}: a checkpoint of another architecture than {model_name} with the "
                                  f"overrides {dict(overrides)} ({first}); set the zoo entry's overrides to its "
                                  "architecture (e.g. arch: and embed_dim:)") from None
        return freeze(TimmViTHost(use_math_attention(vit), project_cls=project_cls))

    return build


TINY_VIT = dict(embed_dim=32, depth=3, num_heads=2)

DINOV2_B14 = AdapterSpec(
    name="dinov2-b14", title="DINOv2 ViT-B/14, CLS embedding", library="timm", decoders=("cls",),
    weights="the timm DINOv2 ViT-B/14 weights: a .safetensors/.bin/.pth file (timm's model.safetensors or "
            "Meta's dinov2_vitb14_pretrain.pth), or a directory / hub cache holding one.",
    hf_repo="timm/vit_base_patch14_dinov2.lvd142m",
    # 224×224 input as in the paper; timm resamples the 518-pixel position embedding on load
    build=_timm_builder("dinov2-b14", "vit_base_patch14_dinov2",
                        dict(img_size=224, dynamic_img_size=True, num_classes=0), project_cls=False),
    tiny=dict(TINY_VIT, img_size=42),
)

CLIP_B16 = AdapterSpec(
    name="clip-b16", title="CLIP ViT-B/16 (OpenAI), projected CLS embedding", library="timm", decoders=("cls",),
    weights="the OpenAI CLIP ViT-B/16 weights as a state dict: a .safetensors/.bin file (timm's "
            "model.safetensors, or open_clip's open_clip_pytorch_model.bin, which timm converts), or a "
            "directory / hub cache holding one.",
    hf_repo="timm/vit_base_patch16_clip_224.openai",
    # OpenAI CLIP is natively QuickGELU: timm's quickgelu variant reproduces its embeddings
    # (same weights as vit_base_patch16_clip_224.openai); num_classes=512 is the projection.
    build=_timm_builder("clip-b16", "vit_base_patch16_clip_quickgelu_224",
                        dict(img_size=224, dynamic_img_size=True, num_classes=512), project_cls=True),
    tiny=dict(TINY_VIT, img_size=48, num_classes=16),
)

TIMM_MODELS = {spec.name: spec for spec in (DINOV2_B14, CLIP_B16)}
