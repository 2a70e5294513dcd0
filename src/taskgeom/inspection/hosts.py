"""A user's model and decoder as a probe host: timm and transformers models by family
(``models.adapters.timm_any``, ``models.adapters.hf_any``), any ``ProbeHost`` as it is, and a
linear head from a safetensors file on the model's pooled embedding (decoder ``linear``).

Anything else is refused in one line (``Unsupported``) that says what is supported and how to
write the probe map by hand.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn

from taskgeom.models.adapters.hf_any import HF_FAMILIES, hf_host
from taskgeom.models.adapters.timm_any import TIMM_FAMILIES, timm_family, timm_host
from taskgeom.models.host import ProbeHost, freeze

BY_HAND = ("or write the probe map by hand: f(F) runs your model from features F (N, D) to the output (M,), "
           "then taskgeom.diagnostics.diagnose(f, F) (docs/inspect.md, 'By hand')")


class Unsupported(ValueError):
    """A model or decoder ``inspect`` cannot probe; its message is one line saying what it can."""


def unsupported(what: str) -> Unsupported:
    """The one-line refusal for ``what``: what ``inspect`` supports, and how to write the probe map by hand."""
    return Unsupported(f"{what}: supported are {TIMM_FAMILIES}; {HF_FAMILIES}; {BY_HAND}")


def as_host(model: nn.Module) -> ProbeHost:
    """A timm or transformers model (or a ProbeHost, unchanged) as a frozen float32 probe host."""
    if isinstance(model, ProbeHost) and not _is_library_model(model):
        return model
    if _is_library_model(model) == "timm":
        return timm_host(model)
    if _is_library_model(model) == "transformers":
        try:
            return hf_host(model)
        except TypeError as exc:
            raise unsupported(str(exc)) from None
    raise unsupported(f"{type(model).__name__} is neither a supported timm nor transformers model")


def _is_library_model(model: nn.Module) -> str | None:
    if timm_family(model) is not None:
        return "timm"
    if hasattr(model, "config") and hasattr(model.config, "model_type") and hasattr(model, "base_model_prefix"):
        return "transformers"
    return None


def read_linear(path: str | Path) -> tuple[Tensor, Tensor | None]:
    """A linear head from a safetensors file: ``weight`` (K, D) and optional ``bias`` (K,) (or one
    ``*.weight`` / ``*.bias`` pair, e.g. ``head.weight``). Raises ValueError naming the file."""
    from safetensors.torch import load_file

    path = Path(path).expanduser()
    if not path.is_file():
        raise FileNotFoundError(f"--linear {path}: no such file")
    tensors = load_file(str(path))
    weights = [k for k in tensors if k == "weight" or k.endswith(".weight")]
    if len(weights) != 1 or tensors[weights[0]].ndim != 2:
        raise ValueError(f"{path}: a linear head holds one 2-D 'weight' (K, D) (and 'bias' (K,)); "
                         f"found {sorted(tensors)}")
    weight = tensors[weights[0]].float()
    bias = tensors.get(weights[0][:-len("weight")] + "bias")
    if bias is not None and tuple(bias.shape) != (weight.shape[0],):
        raise ValueError(f"{path}: bias {tuple(bias.shape)} does not match weight {tuple(weight.shape)}")
    return weight, None if bias is None else bias.float()


class LinearHeadHost(nn.Module):
    """A host plus decoder ``linear``: y = W e + b on its pooled embedding e (decoder ``cls``)."""

    def __init__(self, host: ProbeHost, weight: Tensor, bias: Tensor | None = None, source: str = "linear head"):
        """Wrap ``host`` with a frozen linear head.

        Args:
            host: the model's probe host; its decoder ``cls`` gives the pooled embedding (B, D).
            weight: (K, D) head weights.
            bias: (K,) head bias, or None.
            source: where the head came from, named in errors.
        """
        super().__init__()
        self.host = host
        self.linear = nn.Linear(weight.shape[1], weight.shape[0], bias=bias is not None)
        with torch.no_grad():
            self.linear.weight.copy_(weight)
            if bias is not None:
                self.linear.bias.copy_(bias)
        freeze(self.linear)
        self.num_blocks = host.num_blocks
        self.decoders = (*host.decoders, "linear")
        self.source = source

    def decoder_layers(self, decoder: str) -> tuple[int, ...]:
        """The host's layers for ``decoder`` (``linear`` reads what ``cls`` reads)."""
        return self.host.decoder_layers("cls" if decoder == "linear" else decoder)

    def embed(self, images: Tensor) -> tuple[Tensor, Any]:
        """The host's tokens entering block 0 (B, T, D) and its context."""
        return self.host.embed(images)

    def block(self, i: int, h: Tensor, ctx: Any) -> Tensor:
        """The host's block ``i``: (B, T, D) -> (B, T, D)."""
        return self.host.block(i, h, ctx)

    def decode(self, decoder: str, states: Mapping[int, Tensor], ctx: Any) -> Tensor:
        """Decoder ``linear``: W e + b on the pooled embedding e (B, D) -> (B, K); others are the host's.

        Raises:
            ValueError: the head's input width differs from the embedding's, naming the head's file.
        """
        if decoder != "linear":
            return self.host.decode(decoder, states, ctx)
        e = self.host.decode("cls", states, ctx)
        if e.shape[-1] != self.linear.in_features:
            raise ValueError(f"{self.source}: weight reads {self.linear.in_features} features, "
                             f"the model's embedding has {e.shape[-1]}")
        return self.linear(e)


def with_linear(host: ProbeHost, path: str | Path) -> LinearHeadHost:
    """``host`` with the linear head in the safetensors file ``path`` as decoder ``linear``."""
    if "cls" not in host.decoders:
        raise unsupported(f"--linear needs a pooled embedding (decoder 'cls'); {type(host).__name__} has "
                          f"{list(host.decoders)}")
    weight, bias = read_linear(path)
    return LinearHeadHost(host, weight, bias, source=str(path))


def default_decoder(host: ProbeHost) -> str:
    """The model's own head: a linear head, else the depth head, the classifier, the pooled embedding."""
    for name in ("linear", "depth", "logits", "cls"):
        if name in host.decoders:
            return name
    return host.decoders[0]


def default_layers(num_blocks: int) -> list[int]:
    """A middle and a late block: ⌊B/2⌋ − 1 and B − 2 (block 5 and 10 of a 12-block ViT, the
    paper's L05 / L10 neighbourhood); fewer when the model has fewer blocks."""
    return sorted({max(num_blocks // 2 - 1, 0), max(num_blocks - 2, 0)})


def requires_grad_flags(module: nn.Module) -> dict[str, bool]:
    """Each named parameter's ``requires_grad``, to give back with :func:`restore_flags`."""
    return {name: p.requires_grad for name, p in module.named_parameters()}


def restore_flags(module: nn.Module, flags: Mapping[str, bool], training: bool) -> None:
    """Give a user's module back its parameters' requires_grad and its train/eval mode."""
    for name, p in module.named_parameters():
        p.requires_grad_(flags.get(name, p.requires_grad))
    module.train(training)
