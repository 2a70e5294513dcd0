"""Statistics that tell a world with natural-image statistics from a plain one.

``spectrum_slope``: the slope of the radially averaged power spectrum of grey-level images on
log–log axes. Natural images have P(f) ∝ f^α with α ≈ −2 (Field 1987; van der Schaaf & van
Hateren 1996); flat regions and regular patterns depart from it. Algorithm: grey = mean of RGB;
subtract each image's mean; multiply by a 2-D Hann window (so the image's border does not add a
cross of power along the axes); |FFT|²; average over rings of integer radius r = 1 … S/2 − 1
(S the shorter side), over images; least-squares line through (log r, log P(r)).
"""

from __future__ import annotations

import numpy as np


def radial_power(images: np.ndarray) -> np.ndarray:
    """Mean power per integer frequency radius of the grey, windowed images (module docstring).

    Args:
        images: (N, H, W, 3) uint8.

    Returns:
        (min(H, W) // 2,) float64 power at radius r = 0 … min(H, W)/2 − 1, averaged over images.
    """
    grey = images.astype(np.float64).mean(axis=-1)
    grey -= grey.mean(axis=(1, 2), keepdims=True)
    h, w = grey.shape[1:]
    window = np.outer(np.hanning(h), np.hanning(w))
    power = (np.abs(np.fft.fftshift(np.fft.fft2(grey * window), axes=(1, 2))) ** 2).mean(axis=0)
    yy, xx = np.indices((h, w))
    radius = np.hypot(yy - h // 2, xx - w // 2).round().astype(int)
    top = min(h, w) // 2
    keep = radius < top
    return np.bincount(radius[keep], weights=power[keep], minlength=top) / np.bincount(radius[keep], minlength=top)


def spectrum_slope(images: np.ndarray) -> float:
    """The log–log slope α of the images' radially averaged power spectrum (natural images: ≈ −2).

    Args:
        images: (N, H, W, 3) uint8.

    Returns:
        α, the least-squares slope over radii 1 … min(H, W)/2 − 1.
    """
    power = radial_power(images)
    r = np.arange(1, len(power))
    return float(np.polyfit(np.log(r), np.log(power[1:]), 1)[0])
