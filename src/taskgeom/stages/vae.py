"""The ``vae`` stage (paper §6): train the VAE bottleneck on a frozen host's decoder-input
features, then report what it costs and what it buys.

- Training: features of the training groups (``sources.train``, every item) and the frozen decoder's output on
  them (``frozen_pass``: computed once where they fit in memory, else per batch);
  loss = standardised feature MSE + task_weight · |log depth(X̂) − log depth(X)| + beta · KL.
- Reconstruction quality of the task output on held-out groups: δ1 and AbsRel of the depth
  decoded from the reconstructed features (posterior mean) against the depth from the original ones.
- The diagnostic (κ_cap, erank, r_0.90, CV) of the latent probe against the original probe (the
  decoder's own input layers) on the same held-out groups.

The saved checkpoint is a self-contained zoo host of kind ``latent`` (host weights + VAE), so
``taskgeom.probes.probe_map`` probes it at the registers like any other probe.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import asdict

import numpy as np
import pandas as pd
import torch

from taskgeom.artifacts import metrics as dvc_files
from taskgeom.artifacts.atomic import write_json
from taskgeom.artifacts.tables import write_table
from taskgeom.data.batches import InputDigest, read_inputs
from taskgeom.data.sources import need
from taskgeom.diagnostics import diagnose
from taskgeom.evaluate.stats import summarize
from taskgeom.finite import check_step
from taskgeom.metric.fit import LOG_EVERY
from taskgeom.metric.vae import feature_statistics, vae_loss
from taskgeom.models import preprocess, zoo
from taskgeom.models.host import freeze, param_count, use_math_attention
from taskgeom.models.latent import FeatureVAE, LatentHost, TokenLayout, decoder_features, token_layout
from taskgeom.models.train import learning_rate
from taskgeom.pipeline.runtime import StageContext
from taskgeom.probes import LatentProbeMap, ProbeMap

STAT_GROUPS = 64  # training groups whose features set the standardisation
TERMS = ("loss", "recon", "task", "kl")  # the training curve's series (registry.VAE_TERMS)


def depth_agreement(pred: torch.Tensor, reference: torch.Tensor) -> dict[str, float]:
    """δ1 and AbsRel of ``pred`` against ``reference`` (both positive, (B, M))."""
    ratio = torch.maximum(pred / reference, reference / pred)
    return {"delta1": float((ratio < 1.25).float().mean()),
            "abs_rel": float(((pred - reference).abs() / reference).mean())}


def diagnosis_summary(pm, images: torch.Tensor, est: dict, boot: dict) -> dict:
    out = {k: [] for k in ("kappa_cap", "erank", "r90", "cv")}
    for i, image in enumerate(images):
        probe = pm.at(image)
        d = diagnose(probe.f, probe.F, r=est["r"], num_probes=est["num_probes"], power_iters=est["power_iters"],
                     seed=est["seed"] + i)
        for k in out:
            out[k].append(float(getattr(d, k)))
    n, dim = probe.F.shape
    return {"tokens": n, "dim": dim, **{k: summarize(v, boot["resamples"], boot["level"], boot["seed"]).as_dict()
                                        for k, v in out.items()}}


def build_vae(ctx: StageContext, cfg: dict, base, train_x: torch.Tensor
              ) -> tuple[LatentHost, FeatureVAE, TokenLayout, torch.Tensor]:
    """The VAE on ``base``'s decoder-input features, standardised by the first training groups'
    statistics, and the latent host around it; also returns the layout and those features."""
    torch.manual_seed(cfg["seed"])
    reads = tuple(base.decoder_layers(cfg["decoder"]))
    with torch.no_grad():
        X, sctx = decoder_features(base, reads, train_x[:STAT_GROUPS].to(ctx.device))
    layout = token_layout(sctx, len(reads))
    vae = FeatureVAE(layout, X.shape[2], cfg["token_dim"], cfg["width"], cfg["stride"]).to(ctx.device)
    mean, std = feature_statistics(X)
    vae.mean.copy_(mean)
    vae.std.copy_(std)
    host = LatentHost(base, cfg["decoder"], vae)
    ctx.log.info("VAE on %s/%s: %d tokens × %d -> %d registers × %d (%d latent dims), %d parameters", cfg["model"],
                 cfg["decoder"], X.shape[1], X.shape[2], vae.registers, cfg["token_dim"],
                 vae.registers * cfg["token_dim"], param_count(vae))
    return host, vae, layout, X


FROZEN_CACHE_BYTES = 2 << 30  # the frozen pass over every training group is kept when it fits here


def frozen_pass(host: LatentHost, train_x: torch.Tensor, batch_size: int, device: str
                ) -> Callable[[torch.Tensor], tuple[torch.Tensor, torch.Tensor, object]]:
    """What the frozen host gives a training batch of group indices idx: its decoder-input features
    X (B, T, D), the frozen decoder's output on them (B, M), and the embedding ctx.

    When every group's X and output fit in FROZEN_CACHE_BYTES they are computed once, in consecutive
    batches of ``batch_size`` groups (a training batch's size), and indexed: a group's rows depend on
    that group alone, and a host's ctx on the batch's shape alone (views, token grid, image size),
    which every training batch shares, so the first batch's serves. Otherwise each call runs the host.
    """
    def run(images: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, object]:
        with torch.no_grad():
            Xb, bctx = host.features(images.to(device))
            return Xb, host.decode_features(Xb, bctx), bctx

    first = run(train_x[:batch_size])
    per_group = sum(t[0].numel() * t.element_size() for t in first[:2])
    if per_group * len(train_x) > FROZEN_CACHE_BYTES:
        return lambda idx: run(train_x[idx])
    parts = [first] + [run(train_x[i:i + batch_size]) for i in range(batch_size, len(train_x), batch_size)]
    X, out = torch.cat([p[0] for p in parts]), torch.cat([p[1] for p in parts])
    return lambda idx: (X[idx], out[idx], first[2])


def train_vae(ctx: StageContext, cfg: dict, host: LatentHost, vae: FeatureVAE, train_x: torch.Tensor) -> list[dict]:
    """Train the VAE on random batches of training groups; returns the curve (means over each window)."""
    frozen = frozen_pass(host, train_x, cfg["batch_size"], ctx.device)
    opt = torch.optim.AdamW(vae.parameters(), lr=cfg["lr"], weight_decay=0.01)
    gen = torch.Generator(device=ctx.device).manual_seed(cfg["seed"])
    curve, window, t0 = [], [], time.perf_counter()
    vae.train()
    for step in ctx.progress(range(cfg["steps"]), desc="vae", total=cfg["steps"]):
        rng = np.random.default_rng([cfg["seed"], step])
        idx = torch.as_tensor(np.sort(rng.choice(len(train_x), size=cfg["batch_size"], replace=False)))
        for group in opt.param_groups:
            group["lr"] = learning_rate(step, cfg["steps"], cfg["lr"])
        Xb, reference, bctx = frozen(idx)
        loss, parts = vae_loss(host, Xb, bctx, reference, cfg["beta"], cfg["task_weight"], gen)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        norm = torch.nn.utils.clip_grad_norm_(vae.parameters(), 1.0)
        check_step(f"vae {ctx.wildcard}", step, loss, norm, lambda: f"of training groups {idx.tolist()}")
        opt.step()
        window.append([loss.item(), parts["recon"], parts["task"], parts["kl"]])
        if (step + 1) % LOG_EVERY == 0 or step + 1 == cfg["steps"]:
            mean = np.mean(window, axis=0)
            curve.append({"step": step + 1, "loss": mean[0], "recon": mean[1], "task": mean[2], "kl": mean[3]})
            window = []
            if (step + 1) % (LOG_EVERY * 8) == 0:
                ctx.log.info("step %d: %s", step + 1, {k: round(float(v), 4) for k, v in curve[-1].items()})
    freeze(vae)
    ctx.log.info("trained in %.1f s", time.perf_counter() - t0)
    return curve


def write_dvc_files(ctx: StageContext, quality: dict, latent: dict, original: dict, curve: list[dict]) -> None:
    """The erank ratio (original / latent), both eranks and r_0.90, and the reconstruction's δ1 and
    AbsRel (a DVC metric); the loss and its terms (a DVC plot)."""
    dvc_files.write_metrics(ctx.outputs.get("headline"), {
        "erank_ratio": original["erank"]["mean"] / latent["erank"]["mean"],
        "erank_original": original["erank"]["mean"], "erank_latent": latent["erank"]["mean"],
        "r90_original": original["r90"]["mean"], "r90_latent": latent["r90"]["mean"], **quality}, ctx.provenance())
    dvc_files.write_plot(ctx.outputs.get("loss_plot"), [{"step": c["step"], **{k: c[k] for k in TERMS}} for c in curve],
                         ctx.provenance())


def run(ctx: StageContext) -> None:
    cfg = ctx.params["vae"][ctx.wildcard]
    boot = ctx.params["learn"]["bootstrap"]
    base_config = zoo.entry(ctx.inputs["config"])
    base = freeze(use_math_attention(zoo.load(ctx.inputs["weights"], ctx.inputs["config"], ctx.device)))
    if cfg["decoder"] not in base.decoders or cfg["decoder"] == "camera":
        raise ValueError(f"vae.decoder: {cfg['decoder']!r} is not a dense decoder of {cfg['model']}")
    seen, inputs = {}, {}
    for role, count in (("train", None), ("test", cfg["eval_images"])):
        what = f"vae.{ctx.wildcard}.sources.{role}"
        source, prep = preprocess.open_for_host(ctx.inputs[f"source_{role}"], ctx.params["sources"], base, base_config,
                                                what)
        digest = InputDigest()
        inputs[role] = read_inputs(source if count is None else need(source, count, "vae.eval_images"), prep,
                                   digest=digest).x
        seen[role] = preprocess.seen(source, prep, digest)
    train_x, test_x = inputs["train"], inputs["test"]
    host, vae, layout, X = build_vae(ctx, cfg, base, train_x)
    latent_dim = vae.registers * cfg["token_dim"]
    curve = train_vae(ctx, cfg, host, vae, train_x)

    with torch.no_grad():
        Xt, tctx = host.features(test_x.to(ctx.device))
        original = host.decode_features(Xt, tctx)
        reconstructed = host.decode_latent(vae.encode(Xt)[0], tctx)
    quality = depth_agreement(reconstructed, original)
    ctx.log.info("held-out reconstruction of the %s output: %s", cfg["decoder"], quality)
    est = ctx.params["diagnose"]["estimator"]
    images = test_x[:cfg["diagnose_images"]].to(ctx.device)
    latent = diagnosis_summary(LatentProbeMap(host, cfg["decoder"]), images, est, boot)
    original_probe = diagnosis_summary(ProbeMap(base, cfg["decoder"], None), images, est, boot)
    ctx.log.info("erank %.1f -> %.1f, r90 %.1f -> %.1f", original_probe["erank"]["mean"], latent["erank"]["mean"],
                 original_probe["r90"]["mean"], latent["r90"]["mean"])
    config = {"kind": "latent", "base": base_config, "decoder": cfg["decoder"],
              "vae": {"layout": asdict(layout), "dim": X.shape[2], "token_dim": cfg["token_dim"], "width": cfg["width"],
                      "stride": cfg["stride"]}}
    zoo.save(host, config, ctx.outputs["weights"], ctx.outputs["config"],
             ctx.provenance(), {"parameters": param_count(vae)})
    write_json(ctx.outputs["metrics"], {
        "model": cfg["model"], "decoder": cfg["decoder"], "latent_dim": latent_dim,
        "registers": vae.registers, "token_dim": cfg["token_dim"], "feature_tokens": X.shape[1],
        "feature_dim": X.shape[2], "parameters": param_count(vae), "eval_groups": len(test_x),
        "reconstruction": quality, "diagnose_groups": len(images), "latent_probe": latent,
        "original_probe": original_probe, "erank_reduction": original_probe["erank"]["mean"] / latent["erank"]["mean"],
        "provenance": {**ctx.provenance(), "input": seen}})
    write_table(pd.DataFrame(curve), ctx.outputs["curve"], provenance=ctx.provenance())
    write_dvc_files(ctx, quality, latent, original_probe, curve)
