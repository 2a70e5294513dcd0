"""Learning the task-induced metric from features alone (paper §5–6).

targets     the Jacobian targets of a probe per image, and the HDF5 store they are cached in
spn         the Spectral Pullback Network: g(F) ≈ U diag(λ) Uᵀ + εI
head        the importance head: one score per token
vae         the VAE bottleneck's objective (its host is ``taskgeom.models.latent``)
fit         training and evaluation loops over the cached targets
checkpoint  heads and SPNs as safetensors + JSON, one network per training seed
positions   the learned networks' position embeddings carried to other token grids
"""
