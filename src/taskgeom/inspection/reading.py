"""What a probe's regime means and which of the project's tools fits it (paper §4.3 for the
regimes, §5 for the SPN and the importance head, §6 for the VAE bottleneck), ending with the
command that trains it on the user's own model: ``taskgeom fit`` with the model flags the user
gave to ``inspect`` (``fit_command``; docs/fit.md).

The pipeline trains its tools on the hosts of its zoo (``params.yaml`` ``zoo:``): the tiny zoo
and the paper's adapters (``models.adapters.PAPER_MODELS``). A model that matches an adapter also
gets the pipeline's commands and the zoo entry to add (docs/inspect.md, "Training a tool"); the
VAE bottleneck of the rich-spectrum regime is trained by the pipeline only.
"""

from __future__ import annotations

import shlex

MEANING = {
    "rank-bounded": "The decoder has at most r outputs, so J has rank ≤ r and κ_cap(r) = 1 by construction: "
                    "the exact metric JᵀJ costs M VJPs per image, and there is nothing to learn (§4.3, "
                    "VGGT camera).",
    "low-rank-delocalized": "A rank-r metric captures the decoder's sensitivity (κ_cap(r) ≥ 0.9); learning it "
                            "needs cross-token attention, the Spectral Pullback Network trained on RandNLA targets "
                            "(§4.3 Depth Anything V2 depth, §5.2–5.3).",
    "marginal-kappa-high-cv": "No faithful rank-r metric (κ_cap(r) < 0.9), but a few tokens carry the sensitivity "
                              "(high token CV), so per-token scoring works: distil the spectral token energy e_t "
                              "into an importance head (§4.3 DINOv2 CLS, §5.4–5.5, ρ = 0.998 there).",
    "rich-spectrum": "The energy spreads over more directions than rank r holds (effective rank or r_0.90 beyond "
                     "5r, or κ_cap(r) < 0.9 with low token CV): no practical rank budget holds it in this feature "
                     "space. Put a VAE bottleneck on the decoder's "
                     "input and learn the metric in its latent space with an SPN (§6: VGGT depth, effective rank "
                     "282 → 30–53).",
}

TOOL = {"rank-bounded": "nothing (exact metric)", "low-rank-delocalized": "Spectral Pullback Network (SPN)",
        "marginal-kappa-high-cv": "importance head", "rich-spectrum": "VAE bottleneck, then an SPN in its latent"}


CV_NOTE = ("Its modes spread over all tokens (token CV < 1): per-token scores cannot represent the metric and "
           "are weak for pruning.", "Its modes sit on few tokens (token CV ≥ 1), so an importance head can also "
           "carry the token ranking, though the metric itself is the SPN's.")


REDUCE_NOTE = ("To reduce tokens at inference (taskgeom.patch), the exact e_t would cost M VJPs per image; "
               "`taskgeom fit` distils them into an importance head (and, for pooled outputs, an SPN) that "
               "costs a small fraction of a forward (docs/fit.md).")


def command(regime: str, probe: str, decoder: str, layer: int) -> str:
    """The pipeline commands that train the regime's tool for probe entry ``probe``."""
    if regime == "rank-bounded":
        return ("none: J = op.rmm(torch.eye(M)).T with op = taskgeom.linalg.JacobianOperator(probe.f, probe.F) "
                "gives the exact metric")
    learn = f"learn.probes.{probe}: {{host: zoo/MODEL, decoder: {decoder}, layers: [{layer}], sources: …}}"
    if regime == "marginal-kappa-high-cv":
        return f"add {learn} and learn.heads.{probe}: {{probe: {probe}}}; taskgeom targets --probe {probe} && " \
               f"taskgeom head --head {probe}"
    if regime == "low-rank-delocalized":
        return f"add {learn} and learn.spn.{probe}: {{…}}; taskgeom targets --probe {probe} && " \
               f"taskgeom spn --probe {probe}"
    return (f"add vae.{probe}: {{model: MODEL, decoder: {decoder}, …}} and learn.probes.{probe}: "
            f"{{host: vae/{probe}, decoder: {decoder}, layers: null, …}}; taskgeom vae --vae {probe} && "
            f"taskgeom targets --probe {probe} && taskgeom spn --probe {probe}")


def zoo_hint(adapter: str) -> str:
    """How MODEL above becomes a zoo host for this model."""
    return (f"MODEL is a zoo entry {{kind: pretrained, adapter: {adapter}, path: YOUR_WEIGHTS, img_size: …}} "
            f"in params.yaml.")


def fit_command(flags: dict | None, decoder: str, layer: int, probe: str) -> str:
    """The ``taskgeom fit`` command line for this probe: the model flags ``inspect`` was given
    (``flags``, its parsed arguments: --timm with --weights, --model-args and --input-size, or
    --hf; --images, --linear, and --r when not the default), the probe's --layers and --decoder,
    and --out fit-PROBE; placeholders for the model and images without ``flags``."""
    if not flags:
        return f"taskgeom fit --timm NAME|--hf DIR --images DIR --layers {layer} --decoder {decoder} --out fit-{probe}"
    parts = ["taskgeom", "fit"]
    if flags.get("timm"):
        parts += ["--timm", flags["timm"]]
        parts += ["--weights", flags["weights"]] if flags.get("weights") else []
        parts += ["--model-args", *flags["model_args"]] if flags.get("model_args") else []
        parts += ["--input-size", str(flags["input_size"])] if flags.get("input_size") else []
    else:
        parts += ["--hf", str(flags.get("hf"))]
    parts += ["--images", str(flags.get("images")), "--layers", str(layer), "--decoder", decoder]
    parts += ["--linear", flags["linear"]] if flags.get("linear") else []
    parts += ["--r", str(flags["r"])] if flags.get("r", 20) != 20 else []
    return " ".join(shlex.quote(str(part)) for part in [*parts, "--out", f"fit-{probe}"])


def _training(regime: str, probe: str, decoder: str, layer: int, adapter: str | None, flags: dict | None) -> str:
    """The end of a reading: the pipeline's commands for a zoo host, then the fit command."""
    pipeline = command(regime, probe, decoder, layer)
    fit = fit_command(flags, decoder, layer, probe)
    if regime == "rich-spectrum":
        where = (f"In the pipeline: {pipeline}. {zoo_hint(adapter)}" if adapter else
                 "The pipeline trains it on its zoo hosts only (the tiny zoo and the paper's adapters dinov2-b14, "
                 "clip-b16, depth-anything-v2, vggt).")
        return (f" The VAE bottleneck is the pipeline's: {where} Without it, `taskgeom fit` trains the head and SPN "
                f"on these features (docs/fit.md). Command: {fit}")
    zoo = f" In the pipeline: {pipeline}. {zoo_hint(adapter)}" if adapter else ""
    return f"{zoo} `taskgeom fit` trains it on this model (docs/fit.md). Command: {fit}"


def reading(regime: str, probe: str, decoder: str, layer: int, summary: dict, adapter: str | None,
            flags: dict | None = None) -> str:
    """One paragraph: the measured values, what the regime means, the tool, and last the command
    that trains it (``fit_command``; for a rank-bounded probe, after the exact metric's recipe,
    the head that token reduction needs, since the exact e_t costs M VJPs per image)."""
    kappa, cv, erank = (summary[k]["mean"] for k in ("kappa_cap", "cv", "erank"))
    r90 = summary["r90"]["mean"]
    meaning = MEANING[regime] + (" " + CV_NOTE[cv >= 1.0] if regime == "low-rank-delocalized" else "")
    tail = (f" Exact metric: {command(regime, probe, decoder, layer)}. {REDUCE_NOTE} Command: "
            f"{fit_command(flags, decoder, layer, probe)}" if regime == "rank-bounded" else
            _training(regime, probe, decoder, layer, adapter, flags))
    return (f"Layer {layer}, decoder {decoder}: κ_cap(r) {kappa:.3f}, token CV {cv:.2f}, erank {erank:.1f}, "
            f"r_0.90 {r90:.1f} -> {regime}. {meaning} Tool: {TOOL[regime]}.{tail}")
