"""A decoder's output through the model's own forward, patched or not, and the images in batches.

timm: ``logits`` is ``model(x)``; ``cls`` is ``forward_head(forward_features(x), pre_logits=True)``
(the pooled embedding the ``inspect`` and ``fit`` probes read); ``linear`` is a linear head on it.
transformers: ``logits`` is ``model(pixel_values=x).logits``; ``cls`` the CLS token of the base
model's ``last_hidden_state``; ``depth`` is ``predicted_depth``, flattened per image.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import torch
from torch import Tensor, nn

from taskgeom.patching.families import structure


def decoder_output(model: nn.Module, decoder: str, x: Tensor, linear: nn.Module | None = None) -> Tensor:
    """The decoder's output for images x (B, C, H, W) (module docstring).

    Args:
        model: a model ``taskgeom.patch`` supports.
        decoder: logits, cls, linear or depth.
        x: (B, C, H, W) preprocessed images.
        linear: the linear head of decoder ``linear``.

    Returns:
        (B, M) for logits, cls and linear; (B, H·W) for depth.

    Raises:
        ValueError: a decoder this model has not.
    """
    family = structure(model).family
    if family.startswith("timm"):
        if decoder == "logits":
            return model(x)
        pooled = model.forward_head(model.forward_features(x), pre_logits=True)
    elif decoder == "depth":
        return model(pixel_values=x).predicted_depth.flatten(1)
    elif decoder == "logits":
        return model(pixel_values=x).logits
    else:
        base = getattr(model, model.base_model_prefix, model)
        pooled = base(pixel_values=x).last_hidden_state[:, 0]
    if decoder == "cls":
        return pooled
    if decoder == "linear" and linear is not None:
        return linear(pooled)
    raise ValueError(f"decoder {decoder!r}: not an output of this {family} model"
                     f"{' (give its --linear head)' if decoder == 'linear' else ''}")


def batches(images: Sequence[Tensor], size: int) -> Iterator[tuple[list[int], Tensor]]:
    """Consecutive images of one shape, at most ``size`` at a time.

    Args:
        images: (C, H, W) tensors, in order.
        size: the most images per batch.

    Yields:
        The images' indices and their stack (B, C, H, W).
    """
    group: list[int] = []
    for i, image in enumerate(images):
        if group and (len(group) == size or image.shape != images[group[0]].shape):
            yield group, torch.stack([images[j] for j in group])
            group = []
        group.append(i)
    if group:
        yield group, torch.stack([images[j] for j in group])


def timing_batch(images: Sequence[Tensor], size: int) -> Tensor:
    """``size`` images of the first image's shape (those images, repeated in order to fill the batch).

    Args:
        images: (C, H, W) tensors.
        size: the batch size.

    Returns:
        (size, C, H, W).
    """
    same = [im for im in images if im.shape == images[0].shape]
    return torch.stack([same[i % len(same)] for i in range(size)])
