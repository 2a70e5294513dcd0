"""Tests for the world's procedural textures, fractal shapes and surroundings."""

from __future__ import annotations

import numpy as np
import pytest

from taskgeom.data.world import FAMILIES, Primitive, Scene, WorldSpec, look_at, render, render_split
from taskgeom.data.world.ifs import FILL, GRID, fractal_mask
from taskgeom.data.world.textures import dead_leaves, fractal_noise, hash_uniform, pattern_mask
from taskgeom.evaluate.image_stats import spectrum_slope


def test_hash_is_deterministic_uniform_and_seeded():
    coords = np.stack(np.meshgrid(np.arange(-50, 50), np.arange(-50, 50)), -1).reshape(-1, 2)
    a, b, c = hash_uniform(coords, 3, 2), hash_uniform(coords, 3, 2), hash_uniform(coords, 4, 2)
    np.testing.assert_array_equal(a, b)
    assert a.min() >= 0 and a.max() < 1 and abs(a.mean() - 0.5) < 0.01
    assert np.abs(a - c).mean() > 0.2
    assert abs(np.corrcoef(a[:, 0], a[:, 1])[0, 1]) < 0.05


def _noise_image(side: int = 128) -> np.ndarray:
    x = np.stack(np.meshgrid(np.arange(side), np.arange(side)), -1).reshape(-1, 2) / side
    values = fractal_noise(x, seed=5, base_frequency=1.0, octaves=6).reshape(side, side)
    return values


def test_fractal_noise_has_unit_variance_and_equal_power_per_octave():
    """Equal power per octave is what makes a 2-D spectrum fall as f^-2 (scale invariance)."""
    values = _noise_image()
    assert abs(values.mean()) < 0.3 and 0.6 < values.std() < 1.4
    power = np.abs(np.fft.fft2(values - values.mean())) ** 2
    f = np.hypot(*np.meshgrid(np.fft.fftfreq(128) * 128, np.fft.fftfreq(128) * 128))
    bands = [power[(f >= 2**k) & (f < 2 ** (k + 1))].sum() for k in range(1, 6)]
    assert max(bands) < 3 * min(bands)


def test_dead_leaves_cover_the_plane_with_leaves_of_many_sizes():
    xy = np.stack(np.meshgrid(np.linspace(0, 8, 200), np.linspace(0, 8, 200)), -1).reshape(-1, 2)
    colour, shade = dead_leaves(xy, seed=1, sizes=(2.0, 1.0, 0.5, 0.25))
    assert (colour >= 0).mean() > 0.9
    leaves, sizes = np.unique(colour[colour >= 0], return_counts=True)
    assert len(leaves) > 100 and sizes.max() > 20 * np.median(sizes)  # big leaves and many small ones
    np.testing.assert_array_equal(colour, dead_leaves(xy, seed=1, sizes=(2.0, 1.0, 0.5, 0.25))[0])


@pytest.mark.parametrize("pattern", ["stripes", "checker", "spots", "marble"])
def test_patterns_cover_part_of_the_surface(pattern):
    u = np.random.default_rng(0).uniform(0, 4, (5000, 3))
    share = pattern_mask(pattern, u, np.broadcast_to([0.0, 1.0, 0.0], u.shape), seed=2).mean()
    assert 0.03 < share < 0.7
    with pytest.raises(ValueError, match="unknown pattern"):
        pattern_mask("plaid", u, u, seed=0)


def test_fractal_masks_fill_their_box_and_differ_by_seed():
    masks = [fractal_mask(seed) for seed in range(6)]
    for mask in masks:
        assert mask.shape == (GRID, GRID) and FILL[0] <= mask.mean() <= FILL[1]
    assert len({m.tobytes() for m in masks}) == 6
    np.testing.assert_array_equal(fractal_mask(3), masks[3])


def test_cone_centre_pixel_depth_matches_analytic_geometry():
    # At the cone's mid-height its radius is r / 2: the centre ray stops at 5 - 0.25.
    cone = Primitive("cone", (0.0, 1.0, 0.0), (0.5, 0.6, 0.5))
    view = render(Scene(objects=(cone,)), look_at(np.array([0.0, 1.0, -5.0]), np.zeros(3) + [0, 1, 0], 60.0), 65)
    assert view.depth[32, 32] == pytest.approx(4.75, abs=1e-4) and view.object_id[32, 32] == 1


def test_rooms_have_finite_depth_everywhere_and_outdoor_scenes_a_sky():
    rooms = render_split(6, seed=1, resolution=32, spec=WorldSpec(room_share=1.0))
    assert (rooms["family"] == FAMILIES.index("room")).all()
    assert (rooms["depth"] < WorldSpec().max_depth).all() and (rooms["object_id"] >= 0).all()
    outdoor = render_split(6, seed=1, resolution=32)
    assert (outdoor["family"] == FAMILIES.index("outdoor")).all()
    assert 0.0 < (outdoor["object_id"] == -1).mean() < 0.5
    mixed = render_split(40, seed=1, resolution=8, spec=WorldSpec(room_share=0.5))
    assert 0.25 < mixed["family"].mean() < 0.75


def test_rendered_world_has_a_natural_power_spectrum():
    rgb = render_split(24, seed=0, resolution=64, spec=WorldSpec(room_share=0.3))["rgb"][:, 0]
    assert -2.4 < spectrum_slope(rgb) < -1.6


def test_shadows_darken_the_ground_behind_an_object():
    """A tall box with the sun low behind it: ground pixels in its shadow get only ambient light."""
    box = Primitive("box", (0.0, 1.0, 0.0), (0.5, 1.0, 0.5))
    scene = Scene(objects=(box,), light_dir=(0.0, 0.5, 1.0))  # sun towards +z: shadow falls at -z
    view = render(scene, look_at(np.array([4.0, 3.0, -2.0]), np.array([0.0, 0.0, -1.5]), 60.0), 64)
    ground = view.object_id == 0
    assert (view.shade[ground] <= scene.ambient + 1e-6).sum() > 20
    assert (view.shade[ground] > scene.ambient + 0.2).sum() > 200

