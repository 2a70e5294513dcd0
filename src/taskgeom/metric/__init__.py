"""Learning the task-induced metric from features alone (paper §5–6).

spn     the Spectral Pullback Network: g(F) ≈ U diag(λ) Uᵀ + εI
head    the importance head: one score per token
vae     the VAE bottleneck and the latent host it makes (rich-spectrum probes)
fit     training and evaluation loops over the cached targets
"""
