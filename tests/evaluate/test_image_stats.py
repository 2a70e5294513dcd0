"""The power-spectrum slope recovers the exponent of images synthesised with a known spectrum."""

from __future__ import annotations

import numpy as np
import pytest

from taskgeom.evaluate.image_stats import spectrum_slope


def noise_images(alpha: float, n: int = 8, size: int = 64, seed: int = 0) -> np.ndarray:
    """Grey noise with power ∝ f^alpha (random phases), scaled to uint8, as RGB."""
    rng = np.random.default_rng(seed)
    f = np.hypot(*np.meshgrid(np.fft.fftfreq(size), np.fft.fftfreq(size), indexing="ij"))
    f[0, 0] = 1.0
    amplitude = f ** (alpha / 2)
    field = np.fft.ifft2(amplitude * np.exp(2j * np.pi * rng.random((n, size, size)))).real
    field = (field - field.min()) / (field.max() - field.min()) * 255
    return np.repeat(field.round().astype(np.uint8)[..., None], 3, axis=-1)


@pytest.mark.parametrize("alpha", [-2.0, -1.0, 0.0])
def test_the_slope_of_noise_with_a_known_spectrum(alpha):
    assert spectrum_slope(noise_images(alpha)) == pytest.approx(alpha, abs=0.25)


def test_flat_images_with_one_edge_fall_off_faster_than_natural_ones():
    images = np.zeros((4, 64, 64, 3), np.uint8)
    images[:, 20:] = 200  # a horizon: flat sky above, flat ground below
    assert spectrum_slope(images) < -2.5
