"""VGGT (the upstream ``vggt`` package) as a probe host: multi-view camera / depth / point-map heads."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn

from taskgeom.models.adapters.spec import AdapterSpec, weight_files
from taskgeom.models.host import ProbeHost, freeze, use_math_attention

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
    """What ``VGGTHost.embed`` passes to the blocks and decoders.

    Attributes:
        views: V.
        tokens_per_view: T: the camera token, the register tokens and the patches of one view.
        patch_start: the index of a view's first patch token.
        pos: (B·V, T, 2) RoPE positions, or None without RoPE.
        size: (H, W) of the images.
    """
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
        """Wrap ``model`` (not copied); its decoders are the heads it has.

        Args:
            model: upstream ``VGGT`` (or the same modules under their upstream names).
            detach_camera_refinement: run upstream's camera head as it is, detaching between refinements.

        Raises:
            ImportError: the upstream ``vggt`` package is not installed.
            ValueError: an aggregator other than alternating single frame and global blocks.
        """
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
        """The host states a decoder reads: {2j, 2j + 1} for each aggregator layer j its head reads.

        Args:
            decoder: camera, depth or pointmap.

        Returns:
            Block indices, ascending.
        """
        return tuple(sorted({k for j in self._aggregator_layers(decoder) for k in (2 * j, 2 * j + 1)}))

    def embed(self, images: Tensor) -> tuple[Tensor, VGGTCtx]:
        """images (B, V, 3, H, W) in [0, 1] -> (B, V·T, C), as the aggregator's forward up to its first block.

        Args:
            images: (B, V, 3, H, W) in [0, 1], sides multiples of the patch size.

        Returns:
            tokens (B, V·T, C) and the VGGTCtx.
        """
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
        """Host block i: frame block i / 2 (each view alone) for even i, global block (i − 1) / 2 for odd i.

        Args:
            i: the block's index.
            h: (B, V·T, C).
            ctx: ``embed``'s context.

        Returns:
            (B, V·T, C).
        """
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
        """A head on the aggregator outputs built from the states it reads; confidences are dropped.

        Args:
            decoder: camera, depth or pointmap.
            states: {i: (B, V·T, C)} for i in decoder_layers(decoder).
            ctx: ``embed``'s context.

        Returns:
            camera (B, V·9), depth (B, V·H·W) or pointmap (B, V·H·W·3).
        """
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
        """The model's own forward (B, V, 3, H, W) -> its prediction dict.

        Args:
            images: (B, V, 3, H, W) in [0, 1].

        Returns:
            Upstream VGGT's prediction dict.
        """
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
    spec = VGGT_1B
    if path.is_dir():
        files = weight_files(path)
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


VGGT_1B = AdapterSpec(
    name="vggt", title="VGGT-1B, camera / depth / point-map heads", library="vggt",
    decoders=("camera", "depth", "pointmap"),
    weights="the VGGT-1B checkpoint: model.pt or model.safetensors (from facebook/VGGT-1B), or a directory / "
            "hub cache holding it; the upstream `vggt` package must be installed from its repository.",
    hf_repo="facebook/VGGT-1B",
    build=_build_vggt,
    tiny=dict(img_size=28, patch_size=14, embed_dim=16, depth=4, num_heads=2, num_register_tokens=2,
              patch_embed="conv", head_features=16, head_out_channels=(8, 16, 32, 32),
              intermediate_layer_idx=(0, 1, 2, 3), camera_trunk_depth=1, camera_num_heads=2),
)
