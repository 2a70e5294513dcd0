"""Adapters that present the paper's models as probe hosts.

The paper (Bond et al.) probes four frozen models:

- ``dinov2-b14``: DINOv2 ViT-B/14, CLS embedding (timm ``vit_base_patch14_dinov2``);
- ``clip-b16``: CLIP ViT-B/16 image tower with its projection (timm, OpenAI weights; built as
  ``vit_base_patch16_clip_quickgelu_224``, the QuickGELU variant OpenAI's weights were trained
  with, same weight file as ``vit_base_patch16_clip_224.openai``; ``arch=`` overrides it);
- ``depth-anything-v2``: Depth-Anything-V2 (transformers ``DepthAnythingForDepthEstimation``),
  a DPT head reading four DINOv2 layers;
- ``vggt``: VGGT (the upstream ``vggt`` package), multi-view camera / depth / point-map heads
  reading widely spaced layers of an alternating frame/global aggregator.

``load_paper_model(name, path)`` loads local weights and never downloads: without them it fails
at once, saying what to provide. ``build_paper_model(name, tiny=True)`` builds the same
architecture from a small config with random weights (what the tests use);
``load_paper_model(name, path, **PAPER_MODELS[name].tiny)`` loads such a small checkpoint.

Every host runs attention on the explicit softmax path (``torch.func.jvp`` has no rule for
the fused kernels on CPU) and is frozen (eval mode, no parameter gradients).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn

from taskgeom.models.host import ProbeHost, freeze, use_math_attention
from taskgeom.models.vit import TimmViTHost

WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pth", ".pt", ".pth.tar", ".ckpt")


@dataclass(frozen=True)
class AdapterSpec:
    """How to build and load one paper model.

    ``build(path, overrides)`` returns the host: random weights when ``path`` is None, else the
    weights at ``path`` (already checked to exist). ``tiny``: overrides giving a small config of the
    same architecture. ``hf_repo``: the hub repository whose local cache layout ``path`` may point to.
    """

    name: str
    title: str
    library: str
    decoders: tuple[str, ...]
    weights: str
    hf_repo: str
    build: Callable[[Path | None, Mapping[str, Any]], ProbeHost]
    tiny: Mapping[str, Any] = field(default_factory=dict)


# --------------------------------------------------------------------------- path handling

def _missing_weights(spec: AdapterSpec, path: str | Path | None) -> FileNotFoundError:
    where = "no path was given" if path is None else f"nothing exists at {str(path)!r}"
    return FileNotFoundError(
        f"paper model {spec.name!r} ({spec.title}): weights not found ({where}). "
        f"Provide {spec.weights} Set its location as `path` of the zoo entry with `adapter: {spec.name}` in params.yaml "
        f"(or pass path= to load_paper_model). Weights are never downloaded; fetch them beforehand, "
        f"e.g. `huggingface-cli download {spec.hf_repo}`, and point the path at the file or directory."
    )


def _hf_snapshot(repo_dir: Path) -> Path:
    """A hub cache repository dir (``models--org--name``) -> its snapshot (``refs/main`` or the newest)."""
    ref = repo_dir / "refs" / "main"
    if ref.is_file():
        snap = repo_dir / "snapshots" / ref.read_text().strip()
        if snap.is_dir():
            return snap
    snaps = sorted((p for p in (repo_dir / "snapshots").iterdir() if p.is_dir()), key=lambda p: p.stat().st_mtime)
    if not snaps:
        raise FileNotFoundError(f"hub cache {repo_dir} holds no snapshot")
    return snaps[-1]


def resolve_weights_path(spec: AdapterSpec, path: str | Path | None) -> Path:
    """A user path -> the weight file or the directory holding the weights.

    Accepts a weight file, a directory with the weights, a hub cache repository directory
    (``models--org--name``, resolved to its snapshot) or a hub cache root holding it.
    Raises FileNotFoundError naming the model when nothing is there.
    """
    if path is None or not Path(path).expanduser().exists():
        raise _missing_weights(spec, path)
    p = Path(path).expanduser()
    if p.is_file():
        return p
    cached = p / ("models--" + spec.hf_repo.replace("/", "--"))
    if cached.is_dir():  # the hub cache root
        p = cached
    if (p / "snapshots").is_dir():  # a hub cache repository
        p = _hf_snapshot(p)
    return p


def _weight_files(directory: Path) -> list[Path]:
    return sorted(f for f in directory.iterdir() if f.is_file() and f.name.endswith(WEIGHT_SUFFIXES))


# --------------------------------------------------------------------------- timm ViTs

def _timm_weights_overlay(spec: AdapterSpec, path: Path, num_classes: int) -> dict[str, Any]:
    """timm's own loading route for a local file or directory (its checkpoint filter then converts
    original-format checkpoints and resamples the position embedding to ``img_size``).

    ``num_classes`` is pinned so timm never silently drops a mismatched head (it would load non-strictly).
    """
    if path.is_file():
        return dict(file=str(path), num_classes=num_classes)
    if not _weight_files(path):
        raise FileNotFoundError(f"paper model {spec.name!r}: {path} holds no weight file ({', '.join(WEIGHT_SUFFIXES)}). "
                                f"Provide {spec.weights}")
    return dict(source="local-dir", file=str(path), num_classes=num_classes)


def _timm_builder(name: str, arch: str, defaults: Mapping[str, Any], project_cls: bool
                  ) -> Callable[[Path | None, Mapping[str, Any]], ProbeHost]:
    """Builder for a timm ViT host; overrides are ``timm.create_model`` kwargs (``arch`` swaps the model name)."""

    def build(path: Path | None, overrides: Mapping[str, Any]) -> ProbeHost:
        import timm

        kwargs = {**defaults, **overrides}
        model_name = kwargs.pop("arch", arch)
        if path is not None:
            overlay = _timm_weights_overlay(PAPER_MODELS[name], path, kwargs.get("num_classes", 0))
            kwargs["pretrained_cfg_overlay"] = overlay
        vit = timm.create_model(model_name, pretrained=path is not None, **kwargs)
        return freeze(TimmViTHost(use_math_attention(vit), project_cls=project_cls))

    return build


# --------------------------------------------------------------------------- Depth-Anything-V2

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
    """
    from transformers import DepthAnythingConfig, Dinov2Config

    head = {k: overrides.get(k, v) for k, v in DEPTH_ANYTHING_HEAD.items()}
    backbone = {**DEPTH_ANYTHING_BACKBONE, **{k: v for k, v in overrides.items() if k not in head or k == "patch_size"}}
    backbone_config = Dinov2Config(**backbone)
    return DepthAnythingConfig(backbone_config=backbone_config, reassemble_hidden_size=backbone_config.hidden_size, **head)


def _as_list(value: Any) -> Any:
    return list(value) if isinstance(value, (list, tuple)) else value


def _check_overrides(name: str, config: Any, overrides: Mapping[str, Any]) -> None:
    """A checkpoint's config.json fixes the architecture: overrides must agree with it."""
    for key, want in overrides.items():
        owner = config if key in DEPTH_ANYTHING_HEAD else config.backbone_config
        have = getattr(owner, key, None)
        if _as_list(have) != _as_list(want):
            raise ValueError(f"paper model {name!r}: override {key}={want!r} disagrees with the checkpoint's "
                             f"config.json ({key}={have!r})")


class DepthAnythingHost(nn.Module):
    """ProbeHost over transformers' ``DepthAnythingForDepthEstimation``.

    States are the DINOv2 encoder layers' outputs (B, 1 + rows·cols, D). Decoder ``depth``
    (B, H·W) reproduces the model's forward: the backbone's stage ``k`` in ``out_indices`` is the
    output of layer ``k - 1`` (stage 0 is the embedding), normalised by the backbone's final
    layernorm when ``apply_layernorm``; then the neck (reassemble + fusion) and the head.
    """

    decoders = ("depth",)

    def __init__(self, model: nn.Module):
        super().__init__()
        backbone = model.backbone
        cfg = backbone.config
        if cfg.reshape_hidden_states:
            raise ValueError("Depth Anything's neck reads token sequences; backbone reshape_hidden_states must be False")
        stages = [backbone.stage_names.index(s) for s in backbone.out_features]
        if 0 in stages:
            raise ValueError("a Depth Anything head reading the embedding (stage 0) has no block state to probe")
        self.model = model
        self.num_blocks = len(backbone.encoder.layer)
        self.read_layers = tuple(s - 1 for s in stages)
        self.apply_layernorm = bool(cfg.apply_layernorm)
        self.patch_size = int(model.config.patch_size)

    def decoder_layers(self, decoder: str) -> tuple[int, ...]:
        return self.read_layers

    def embed(self, images: Tensor) -> tuple[Tensor, tuple[int, int]]:
        """images (B, 3, H, W) -> CLS + patch tokens (B, 1 + rows·cols, D), ctx = (rows, cols)."""
        h, w = images.shape[-2:]
        return self.model.backbone.embeddings(images), (h // self.patch_size, w // self.patch_size)

    def block(self, i: int, h: Tensor, ctx: tuple[int, int]) -> Tensor:
        out = self.model.backbone.encoder.layer[i](h)
        return out[0] if isinstance(out, tuple) else out  # transformers 4.x layers return (h, *extras)

    def decode(self, decoder: str, states: Mapping[int, Tensor], ctx: tuple[int, int]) -> Tensor:
        rows, cols = ctx
        norm = self.model.backbone.layernorm
        feats = [norm(states[i]) if self.apply_layernorm else states[i] for i in self.read_layers]
        fused = self.model.neck(feats, rows, cols)
        return self.model.head(fused, rows, cols).flatten(1)  # (B, rows·p, cols·p) -> (B, H·W)

    def forward(self, images: Tensor) -> Tensor:
        """The model's own forward: predicted depth (B, H, W)."""
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

    spec = PAPER_MODELS["depth-anything-v2"]
    if path is None:
        model = DepthAnythingForDepthEstimation(depth_anything_config(**overrides))
    else:
        directory = path.parent if path.is_file() else path
        if not (directory / "config.json").is_file():
            raise FileNotFoundError(f"paper model {spec.name!r}: {directory} has no config.json. Provide {spec.weights}")
        # local_files_only: never reach the hub; eager attention: jvp has no rule for fused SDPA on CPU.
        model = DepthAnythingForDepthEstimation.from_pretrained(
            str(directory), local_files_only=True, attn_implementation="eager")
        _check_overrides(spec.name, model.config, overrides)
    _use_eager_attention(model)
    return freeze(DepthAnythingHost(model))


# --------------------------------------------------------------------------- VGGT

VGGT_INSTALL = ("the upstream `vggt` package is not installed; it is not on PyPI. Install it from its "
                "repository: `pip install git+https://github.com/facebookresearch/vggt` (or clone it and "
                "`pip install -e .`).")


def _import_vggt():
    try:
        from vggt.heads.camera_head import CameraHead
        from vggt.heads.dpt_head import DPTHead
        from vggt.heads.head_act import activate_pose
        from vggt.models.aggregator import Aggregator, slice_expand_and_flatten
        from vggt.models.vggt import VGGT
    except ImportError as e:
        raise ImportError(f"paper model 'vggt': {VGGT_INSTALL} ({e})") from e
    return dict(VGGT=VGGT, Aggregator=Aggregator, CameraHead=CameraHead, DPTHead=DPTHead,
                activate_pose=activate_pose, slice_expand_and_flatten=slice_expand_and_flatten)


@dataclass(frozen=True)
class VGGTCtx:
    views: int
    tokens_per_view: int
    patch_start: int
    pos: Tensor | None  # (B·V, T, 2) RoPE positions, or None without RoPE
    size: tuple[int, int]


class VGGTHost(nn.Module):
    """ProbeHost over upstream VGGT (Wang et al., 2025).

    The aggregator alternates a frame-attention block (tokens of one view) and a global-attention
    block (all views); host block ``2j`` is frame block ``j`` and ``2j + 1`` global block ``j``.
    States are (B, V·T, C): each view's camera token, register tokens and patch tokens, views end
    to end. The heads read aggregator output ``j`` = [frame_j ‖ global_j] (channel concat), so a
    decoder reading aggregator layers J reads host states {2j, 2j + 1 : j ∈ J}.

    Decoders: ``camera`` (B, V·9) (the last refinement's pose encoding), ``depth`` (B, V·H·W),
    ``pointmap`` (B, V·H·W·3); confidences are dropped. The camera head refines its pose estimate
    iteratively and upstream detaches the previous estimate between iterations, a training device
    that would drop part of the derivative: the host runs the same iterations without the detach
    (same values, the full Jacobian) unless ``detach_camera_refinement``.
    """

    def __init__(self, model: nn.Module, detach_camera_refinement: bool = False):
        super().__init__()
        self._vggt = _import_vggt()
        agg = model.aggregator
        if agg.aa_block_size != 1 or list(agg.aa_order) != ["frame", "global"]:
            raise ValueError("VGGTHost expects aa_order ['frame', 'global'] and aa_block_size 1 (the released VGGT)")
        self.model = model
        self.depth = agg.depth
        self.num_blocks = 2 * agg.depth
        heads = (("camera", model.camera_head), ("depth", model.depth_head), ("pointmap", model.point_head))
        self.decoders = tuple(name for name, head in heads if head is not None)
        self.detach_camera_refinement = detach_camera_refinement

    def _aggregator_layers(self, decoder: str) -> tuple[int, ...]:
        if decoder == "camera":
            return (self.depth - 1,)
        head = self.model.depth_head if decoder == "depth" else self.model.point_head
        return tuple(j % self.depth for j in head.intermediate_layer_idx)

    def decoder_layers(self, decoder: str) -> tuple[int, ...]:
        return tuple(sorted({k for j in self._aggregator_layers(decoder) for k in (2 * j, 2 * j + 1)}))

    def embed(self, images: Tensor) -> tuple[Tensor, VGGTCtx]:
        """images (B, V, 3, H, W) in [0, 1] -> (B, V·T, C), as the aggregator's forward up to its first block."""
        agg, expand = self.model.aggregator, self._vggt["slice_expand_and_flatten"]
        b, v, c, hgt, wid = images.shape
        x = ((images - agg._resnet_mean) / agg._resnet_std).reshape(b * v, c, hgt, wid)
        patches = agg.patch_embed(x)
        if isinstance(patches, dict):  # the DINOv2 patch embedder returns its normalised outputs
            patches = patches["x_norm_patchtokens"]
        tokens = torch.cat([expand(agg.camera_token, b, v), expand(agg.register_token, b, v), patches], dim=1)
        pos = None
        if agg.rope is not None:
            pos = agg.position_getter(b * v, hgt // agg.patch_size, wid // agg.patch_size, device=images.device)
            if agg.patch_start_idx > 0:  # special tokens sit at position 0, patches from 1
                special = torch.zeros(b * v, agg.patch_start_idx, 2, device=images.device, dtype=pos.dtype)
                pos = torch.cat([special, pos + 1], dim=1)
        t, d = tokens.shape[1:]
        return tokens.reshape(b, v * t, d), VGGTCtx(v, t, agg.patch_start_idx, pos, (hgt, wid))

    def block(self, i: int, h: Tensor, ctx: VGGTCtx) -> Tensor:
        agg = self.model.aggregator
        b, n, d = h.shape
        if i % 2 == 0:  # frame attention: each view on its own
            frames = h.reshape(b * ctx.views, ctx.tokens_per_view, d)
            return agg.frame_blocks[i // 2](frames, pos=ctx.pos).reshape(b, n, d)
        pos = None if ctx.pos is None else ctx.pos.reshape(b, n, 2)
        return agg.global_blocks[i // 2](h, pos=pos)

    def _tokens_list(self, layers: Sequence[int], states: Mapping[int, Tensor], ctx: VGGTCtx) -> list[Tensor | None]:
        """The aggregator's output list, filled at ``layers``: entry j (B, V, T, 2C)."""
        out: list[Tensor | None] = [None] * self.depth
        for j in layers:
            f, g = states[2 * j], states[2 * j + 1]
            b, _, d = f.shape
            out[j] = torch.cat([f.reshape(b, ctx.views, -1, d), g.reshape(b, ctx.views, -1, d)], dim=-1)
        return out

    def decode(self, decoder: str, states: Mapping[int, Tensor], ctx: VGGTCtx) -> Tensor:
        tokens = self._tokens_list(self._aggregator_layers(decoder), states, ctx)
        b = states[self.decoder_layers(decoder)[0]].shape[0]
        if decoder == "camera":
            head = self.model.camera_head
            if self.detach_camera_refinement:
                return head(tokens)[-1].reshape(b, -1)
            return self._camera(tokens[-1]).reshape(b, -1)
        head = self.model.depth_head if decoder == "depth" else self.model.point_head
        # the DPT head reads only the images' shape: a zero-stride stand-in costs nothing
        ref = tokens[self._aggregator_layers(decoder)[0]]
        images = ref.new_zeros(()).expand(b, ctx.views, 3, *ctx.size)
        preds, _conf = head(tokens, images=images, patch_start_idx=ctx.patch_start)
        return preds.reshape(b, -1)  # (B, V, H, W, C) -> (B, V·H·W·C)

    def _camera(self, tokens: Tensor, iterations: int = 4) -> Tensor:
        """CameraHead.forward without the detach: (B, V, T, 2C) -> pose encoding (B, V, 9)."""
        head, activate_pose = self.model.camera_head, self._vggt["activate_pose"]
        pose_tokens = head.token_norm(tokens[:, :, 0])  # the camera token of each view
        b, v, _ = pose_tokens.shape
        pred = None
        for _ in range(iterations):
            source = head.empty_pose_tokens.expand(b, v, -1) if pred is None else pred
            shift, scale, gate = head.poseLN_modulation(head.embed_pose(source)).chunk(3, dim=-1)
            modulated = gate * (head.adaln_norm(pose_tokens) * (1 + scale) + shift) + pose_tokens
            delta = head.pose_branch(head.trunk_norm(head.trunk(modulated)))
            pred = delta if pred is None else pred + delta
        return activate_pose(pred, trans_act=head.trans_act, quat_act=head.quat_act, fl_act=head.fl_act)

    def forward(self, images: Tensor) -> dict[str, Tensor]:
        """The model's own forward (B, V, 3, H, W) -> its prediction dict."""
        return self.model(images)


# Small VGGT: the aggregator + heads of the released architecture, without the 300M-parameter
# DINOv2-L patch embedder (``patch_embed="conv"``) and without the tracking head.
VGGT_DEFAULTS = dict(img_size=518, patch_size=14, embed_dim=1024)
VGGT_PARTS = ("depth", "num_heads", "num_register_tokens", "patch_embed", "head_features", "head_out_channels",
              "intermediate_layer_idx", "camera_trunk_depth", "camera_num_heads")


class _AssembledVGGT(nn.Module):
    """VGGT's modules under their upstream names, run by upstream ``VGGT.forward``."""

    def __init__(self, vggt: Mapping[str, Any], img_size: int, patch_size: int, embed_dim: int, depth: int = 24,
                 num_heads: int = 16, num_register_tokens: int = 4, patch_embed: str = "dinov2_vitl14_reg",
                 head_features: int = 256, head_out_channels: Sequence[int] = (256, 512, 1024, 1024),
                 intermediate_layer_idx: Sequence[int] = (4, 11, 17, 23), camera_trunk_depth: int = 4,
                 camera_num_heads: int = 16):
        super().__init__()
        self.aggregator = vggt["Aggregator"](
            img_size=img_size, patch_size=patch_size, embed_dim=embed_dim, depth=depth, num_heads=num_heads,
            num_register_tokens=num_register_tokens, patch_embed=patch_embed)
        dim = 2 * embed_dim
        self.camera_head = vggt["CameraHead"](dim_in=dim, trunk_depth=camera_trunk_depth, num_heads=camera_num_heads)
        dpt = dict(dim_in=dim, patch_size=patch_size, features=head_features, out_channels=list(head_out_channels),
                   intermediate_layer_idx=list(intermediate_layer_idx))
        self.point_head = vggt["DPTHead"](output_dim=4, activation="inv_log", conf_activation="expp1", **dpt)
        self.depth_head = vggt["DPTHead"](output_dim=2, activation="exp", conf_activation="expp1", **dpt)
        self.track_head = None
        self._forward = vggt["VGGT"].forward

    def forward(self, images: Tensor) -> dict[str, Tensor]:
        return self._forward(self, images)


def _vggt_state_dict(path: Path) -> dict[str, Tensor]:
    """A VGGT checkpoint (``model.pt`` / ``model.safetensors`` file, or a directory holding one)."""
    spec = PAPER_MODELS["vggt"]
    if path.is_dir():
        files = _weight_files(path)
        if not files:
            raise FileNotFoundError(f"paper model 'vggt': {path} holds no weight file. Provide {spec.weights}")
        path = next((f for f in files if f.suffix == ".safetensors"), files[0])
    if path.suffix == ".safetensors":
        from safetensors.torch import load_file
        state = load_file(str(path))
    else:
        state = torch.load(str(path), map_location="cpu", weights_only=True)
        state = state.get("model", state) if isinstance(state, dict) else state
    # tracking is not a probe decoder; its weights are not needed
    return {k: v for k, v in state.items() if not k.startswith("track_head.")}


def _build_vggt(path: Path | None, overrides: Mapping[str, Any]) -> ProbeHost:
    vggt = _import_vggt()
    kwargs = {**VGGT_DEFAULTS, **overrides}
    if any(k in VGGT_PARTS for k in overrides):
        model = _AssembledVGGT(vggt, **kwargs)
    else:
        model = vggt["VGGT"](enable_track=False, **kwargs)
    if path is not None:
        model.load_state_dict(_vggt_state_dict(path), strict=True)
    return freeze(VGGTHost(use_math_attention(model)))


# --------------------------------------------------------------------------- the registry

TINY_VIT = dict(embed_dim=32, depth=3, num_heads=2)

PAPER_MODELS: dict[str, AdapterSpec] = {
    "dinov2-b14": AdapterSpec(
        name="dinov2-b14", title="DINOv2 ViT-B/14, CLS embedding", library="timm", decoders=("cls",),
        weights="the timm DINOv2 ViT-B/14 weights: a .safetensors/.bin/.pth file (timm's model.safetensors or "
                "Meta's dinov2_vitb14_pretrain.pth), or a directory / hub cache holding one.",
        hf_repo="timm/vit_base_patch14_dinov2.lvd142m",
        # 224×224 input as in the paper; timm resamples the 518-pixel position embedding on load
        build=_timm_builder("dinov2-b14", "vit_base_patch14_dinov2", dict(img_size=224, dynamic_img_size=True, num_classes=0),
                            project_cls=False),
        tiny=dict(TINY_VIT, img_size=42),
    ),
    "clip-b16": AdapterSpec(
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
    ),
    "depth-anything-v2": AdapterSpec(
        name="depth-anything-v2", title="Depth-Anything-V2-Base, DPT depth head", library="transformers",
        decoders=("depth",),
        weights="a transformers checkpoint directory (config.json + model.safetensors, as saved by "
                "save_pretrained or downloaded from depth-anything/Depth-Anything-V2-Base-hf).",
        hf_repo="depth-anything/Depth-Anything-V2-Base-hf",
        build=_build_depth_anything,
        tiny=dict(image_size=42, hidden_size=32, num_hidden_layers=4, num_attention_heads=2,
                  out_indices=[1, 2, 3, 4], neck_hidden_sizes=[8, 16, 32, 32], fusion_hidden_size=16,
                  head_hidden_size=8),
    ),
    "vggt": AdapterSpec(
        name="vggt", title="VGGT-1B, camera / depth / point-map heads", library="vggt",
        decoders=("camera", "depth", "pointmap"),
        weights="the VGGT-1B checkpoint: model.pt or model.safetensors (from facebook/VGGT-1B), or a directory / "
                "hub cache holding it; the upstream `vggt` package must be installed from its repository.",
        hf_repo="facebook/VGGT-1B",
        build=_build_vggt,
        tiny=dict(img_size=28, patch_size=14, embed_dim=16, depth=4, num_heads=2, num_register_tokens=2,
                  patch_embed="conv", head_features=16, head_out_channels=(8, 16, 32, 32),
                  intermediate_layer_idx=(0, 1, 2, 3), camera_trunk_depth=1, camera_num_heads=2),
    ),
}

def _spec(name: str) -> AdapterSpec:
    if name not in PAPER_MODELS:
        raise KeyError(f"unknown paper model {name!r}; known: {sorted(PAPER_MODELS)}")
    return PAPER_MODELS[name]


def load_paper_model(name: str, path: str | Path | None = None, **overrides: Any) -> ProbeHost:
    """The paper model ``name`` with the local weights at ``path``, as a frozen probe host.

    ``path``: a weight file, a directory holding the weights, or a Hugging Face cache (root or
    repository dir). Nothing is ever downloaded: a missing path raises FileNotFoundError naming the
    model and what to provide. ``overrides`` change the architecture (``PAPER_MODELS[name].tiny``
    loads a small test checkpoint): timm ``create_model`` kwargs for the ViTs, flat config keys for
    Depth Anything (checked against the checkpoint's config.json), Aggregator/head sizes for VGGT.
    """
    spec = _spec(name)
    return spec.build(resolve_weights_path(spec, path), overrides)


def build_paper_model(name: str, tiny: bool = False) -> ProbeHost:
    """The architecture of paper model ``name`` with random weights; ``tiny``: its small test config."""
    spec = _spec(name)
    return spec.build(None, spec.tiny if tiny else {})
