"""What a probe's regime means and which of the project's tools fits it (paper §4.3 for the
regimes, §5 for the SPN and the importance head, §6 for the VAE bottleneck), with the pipeline
commands that train it.

The pipeline trains its tools on the hosts of its zoo (``params.yaml`` ``zoo:``): the tiny zoo
and the paper's adapters (``models.adapters.PAPER_MODELS``). A model that matches an adapter gets
the zoo entry to add; for any other model the reading says so (docs/inspect.md, "Training a tool").
"""

from __future__ import annotations

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


def zoo_hint(adapter: str | None) -> str:
    """How MODEL above becomes a zoo host for this model."""
    if adapter:
        return (f"MODEL is a zoo entry {{kind: pretrained, adapter: {adapter}, path: YOUR_WEIGHTS, img_size: …}} "
                f"in params.yaml.")
    return ("The pipeline's zoo hosts the tiny zoo and the paper's adapters (dinov2-b14, clip-b16, "
            "depth-anything-v2, vggt); this model is none of them, so train the tool from the library "
            "(taskgeom.metric.targets, .head, .spn, .vae) on its probe map.")


def reading(regime: str, probe: str, decoder: str, layer: int, summary: dict, adapter: str | None) -> str:
    """One paragraph: the measured values, what the regime means, the tool and its command."""
    kappa, cv, erank = (summary[k]["mean"] for k in ("kappa_cap", "cv", "erank"))
    r90 = summary["r90"]["mean"]
    cmd = command(regime, probe, decoder, layer)
    hint = "" if regime == "rank-bounded" else " " + zoo_hint(adapter)
    meaning = MEANING[regime] + (" " + CV_NOTE[cv >= 1.0] if regime == "low-rank-delocalized" else "")
    return (f"Layer {layer}, decoder {decoder}: κ_cap(r) {kappa:.3f}, token CV {cv:.2f}, erank {erank:.1f}, "
            f"r_0.90 {r90:.1f} -> {regime}. {meaning} Tool: {TOOL[regime]}. Command: {cmd}.{hint}")
