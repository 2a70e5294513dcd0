"""Depth-Anything-V2 (transformers ``DepthAnythingForDepthEstimation``) as a probe host."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from torch import Tensor, nn

from taskgeom.artifacts.checkpoints import CheckpointError
from taskgeom.models.adapters.spec import AdapterSpec
from taskgeom.models.host import ProbeHost, freeze
from taskgeom.models.vit import Grid

# Depth-Anything-V2-Base (transformers' conversion of the ViT-B checkpoint): DINOv2-B/14 backbone,
# the DPT head reading the outputs of blocks 2, 5, 8, 11 (out_indices count the embedding as 0).
DEPTH_ANYTHING_BACKBONE = dict(
    image_size=518, patch_size=14, num_channels=3, hidden_size=768, num_hidden_layers=12, num_attention_heads=12,
    mlp_ratio=4, qkv_bias=True, layerscale_value=1.0, use_swiglu_ffn=False, out_indices=[3, 6, 9, 12],
    apply_layernorm=True, reshape_hidden_states=False,
)
DEPTH_ANYTHING_HEAD = dict(
    patch_size=14, reassemble_factors=[4, 2, 1, 0.5], neck_hidden_sizes=[96, 192, 384, 768],
    fusion_hidden_size=128, head_in_index=-1, head_hidden_size=32, depth_estimation_type="relative", max_depth=1,
)


def depth_anything_config(**overrides: Any):
    """A ``DepthAnythingConfig`` (Depth-Anything-V2-Base unless overridden).

    Overrides are flat: keys of the head config go to the head, the rest to the DINOv2 backbone;
    ``patch_size`` goes to both, and the neck's input width follows the backbone's ``hidden_size``.

    Args:
        **overrides: keys of ``DEPTH_ANYTHING_HEAD`` or of ``Dinov2Config``.

    Returns:
        The transformers ``DepthAnythingConfig``.
    """
    from transformers import DepthAnythingConfig, Dinov2Config

    head = {k: overrides.get(k, v) for k, v in DEPTH_ANYTHING_HEAD.items()}
    backbone = {**DEPTH_ANYTHING_BACKBONE, **{k: v for k, v in overrides.items() if k not in head or k == "patch_size"}}
    backbone_config = Dinov2Config(**backbone)
    return DepthAnythingConfig(backbone_config=backbone_config, reassemble_hidden_size=backbone_config.hidden_size,
                               **head)


def _as_list(value: Any) -> Any:
    return list(value) if isinstance(value, (list, tuple)) else value


def _flat(config: Any, key: str) -> Any:
    """The flat key ``key`` of a ``DepthAnythingConfig`` (head keys on it, the rest on its backbone's)."""
    return _as_list(getattr(config if key in DEPTH_ANYTHING_HEAD else config.backbone_config, key, None))


def _check_overrides(config_json: Path, config: Any, overrides: Mapping[str, Any]) -> None:
    """A checkpoint's config.json fixes the architecture: overrides must agree with it."""
    for key, want in overrides.items():
        if (have := _flat(config, key)) != _as_list(want):
            raise CheckpointError(f"{config_json}: {key} is {have!r} where the overrides ask {want!r}; drop "
                                  f"overrides.{key} (the checkpoint's config sets it) or use a checkpoint of that size")


def loaded_overrides(host: ProbeHost) -> dict[str, Any]:
    """The flat overrides that build ``host``'s architecture: its config's keys that differ from
    Depth-Anything-V2-Base (none for Base; e.g. the widths and depth of Small or Large)."""
    config = host.model.config
    return {key: _flat(config, key) for key, base in {**DEPTH_ANYTHING_BACKBONE, **DEPTH_ANYTHING_HEAD}.items()
            if _flat(config, key) != _as_list(base)}


class DepthAnythingHost(nn.Module):
    """ProbeHost over transformers' ``DepthAnythingForDepthEstimation``.

    States are the DINOv2 encoder layers' outputs (B, 1 + rows·cols, D). Decoder ``depth``
    (B, H·W) reproduces the model's forward: the backbone's stage ``k`` in ``out_indices`` is the
    output of layer ``k - 1`` (stage 0 is the embedding), normalised by the backbone's final
    layernorm when ``apply_layernorm``; then the neck (reassemble + fusion) and the head.
    """

    decoders = ("depth",)

    def __init__(self, model: nn.Module):
        """Wrap ``model`` (not copied), reading its backbone's ``out_features`` as the read layers.

        Args:
            model: a ``DepthAnythingForDepthEstimation``.

        Raises:
            ValueError: a backbone that reshapes its hidden states, or a head reading the embedding.
        """
        super().__init__()
        backbone = model.backbone
        cfg = backbone.config
        if cfg.reshape_hidden_states:
            raise ValueError("Depth Anything's neck reads token sequences; "
                             "backbone reshape_hidden_states must be False")
        stages = [backbone.stage_names.index(s) for s in backbone.out_features]
        if 0 in stages:
            raise ValueError("a Depth Anything head reading the embedding (stage 0) has no block state to probe")
        self.model = model
        self.num_blocks = len(backbone.encoder.layer)
        self.read_layers = tuple(s - 1 for s in stages)
        self.apply_layernorm = bool(cfg.apply_layernorm)
        self.patch_size = int(model.config.patch_size)

    def decoder_layers(self, decoder: str) -> tuple[int, ...]:
        """The encoder layers the neck reads (``out_indices`` − 1).

        Args:
            decoder: depth.

        Returns:
            ``read_layers``.
        """
        return self.read_layers

    def embed(self, images: Tensor) -> tuple[Tensor, Grid]:
        """images (B, 3, H, W) -> CLS + patch tokens (B, 1 + rows·cols, D), ctx = their Grid.

        Args:
            images: (B, 3, H, W), sides multiples of the patch size.

        Returns:
            tokens (B, 1 + rows·cols, D) and their Grid.
        """
        rows, cols = (s // self.patch_size for s in images.shape[-2:])
        tokens = self.model.backbone.embeddings(images)
        return tokens, Grid(tokens.shape[1] - rows * cols, rows, cols)

    def block(self, i: int, h: Tensor, ctx: Grid) -> Tensor:
        """Encoder layer i.

        Args:
            i: the layer's index.
            h: (B, T, D).
            ctx: the Grid (unused).

        Returns:
            (B, T, D).
        """
        out = self.model.backbone.encoder.layer[i](h)
        return out[0] if isinstance(out, tuple) else out  # transformers 4.x layers return (h, *extras)

    def decode(self, decoder: str, states: Mapping[int, Tensor], ctx: Grid) -> Tensor:
        """The backbone's final layernorm (when ``apply_layernorm``), the neck and the head.

        Args:
            decoder: depth.
            states: {i: (B, T, D)} for the read layers.
            ctx: ``embed``'s Grid.

        Returns:
            (B, H·W) predicted depth, H = rows·patch, W = cols·patch.
        """
        rows, cols = ctx.rows, ctx.cols
        norm = self.model.backbone.layernorm
        feats = [norm(states[i]) if self.apply_layernorm else states[i] for i in self.read_layers]
        fused = self.model.neck(feats, rows, cols)
        return self.model.head(fused, rows, cols).flatten(1)  # (B, rows·p, cols·p) -> (B, H·W)

    def forward(self, images: Tensor) -> Tensor:
        """The model's own forward: predicted depth (B, H, W).

        Args:
            images: (B, 3, H, W).

        Returns:
            (B, H, W).
        """
        return self.model(pixel_values=images).predicted_depth


def _use_eager_attention(model: nn.Module) -> None:
    """Explicit softmax attention in the model and its backbone (jvp has no rule for fused SDPA on CPU)."""
    if hasattr(model, "set_attn_implementation"):
        model.set_attn_implementation("eager")  # reaches the backbone's config too
    else:  # older transformers
        for config in (model.config, model.backbone.config):
            config._attn_implementation = "eager"


def _build_depth_anything(path: Path | None, overrides: Mapping[str, Any]) -> ProbeHost:
    from transformers import DepthAnythingForDepthEstimation

    spec = DEPTH_ANYTHING_V2
    if path is None:
        model = DepthAnythingForDepthEstimation(depth_anything_config(**overrides))
    else:
        directory = path.parent if path.is_file() else path
        if not (directory / "config.json").is_file():
            raise FileNotFoundError(f"paper model {spec.name!r}: {directory} has no config.json. "
                                    f"Provide {spec.weights}")
        # local_files_only: never reach the hub; eager attention: jvp has no rule for fused SDPA on CPU.
        model = DepthAnythingForDepthEstimation.from_pretrained(
            str(directory), local_files_only=True, attn_implementation="eager")
        _check_overrides(directory / "config.json", model.config, overrides)
    _use_eager_attention(model)
    return freeze(DepthAnythingHost(model))


DEPTH_ANYTHING_V2 = AdapterSpec(
    name="depth-anything-v2", title="Depth-Anything-V2-Base, DPT depth head", library="transformers",
    decoders=("depth",),
    weights="a transformers checkpoint directory (config.json + model.safetensors, as saved by "
            "save_pretrained or downloaded from depth-anything/Depth-Anything-V2-Base-hf).",
    hf_repo="depth-anything/Depth-Anything-V2-Base-hf",
    build=_build_depth_anything,
    loaded=loaded_overrides,
    tiny=dict(image_size=42, hidden_size=32, num_hidden_layers=4, num_attention_heads=2,
              out_indices=[1, 2, 3, 4], neck_hidden_sizes=[8, 16, 32, 32], fusion_hidden_size=16,
              head_hidden_size=8),
)
