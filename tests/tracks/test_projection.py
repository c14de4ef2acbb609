"""Projection of cars onto the centerline: exact against brute force, signs, lookahead."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import tracks
from tests.tracks.conftest import brute_force, offset_points


def _brute_s(path: tracks.StagePath, px: float, py: float) -> tuple[float, float]:
    j, t, lat = brute_force(path, px, py)
    s = (j + t) * path.ds_m
    if path.closed and s >= path.length_m:
        s -= path.length_m
    return s, lat


def _cars_near_road(path, rng, n, s_lo=0.0, s_hi=None, extra_m=2.0):
    s_hi = path.length_m if s_hi is None else s_hi
    s = rng.uniform(s_lo, s_hi, n)
    lat = rng.uniform(-1.0, 1.0, n) * (path.half_width_at(s) + extra_m)
    return s, lat, offset_points(path, s, lat)


@pytest.mark.parametrize("name", ["switchbacks", "rallycross", "skidpad", "forest", "opener"])
def test_warm_start_equals_brute_force(library, name):
    """Cars on or near the road, s_prev a few metres off: identical to the exhaustive search."""
    stage = library[name]
    path = stage.path
    rng = np.random.default_rng(11)
    s, lat, pos = _cars_near_road(path, rng, 600)
    fwd = np.stack(path.tangent_at(s), axis=1)
    s_prev = path.wrap(s + rng.uniform(-6.0, 6.0, s.shape))
    if not path.closed:
        s_prev = np.clip(s_prev, 0.0, path.length_m)
    proj = tracks.Projector(stage)
    warm = proj.project(pos, fwd, s_prev)
    warm_s, warm_lat = warm.s_m.copy(), warm.lateral_m.copy()
    cold = proj.project(pos, fwd, None)
    np.testing.assert_array_equal(warm_s, cold.s_m)
    for k in range(pos.shape[0]):
        sb, lb = _brute_s(path, pos[k, 0], pos[k, 1])
        assert warm_s[k] == sb, (k, s[k], warm_s[k], sb)
        assert warm_lat[k] == lb
    # and the constructed offsets are recovered (polyline vs smooth normal: < 0.25 m)
    ds = tracks.delta_s(s, warm_s, path.length_m, path.closed)
    assert np.max(np.abs(ds)) < 0.25
    assert np.max(np.abs(warm_lat - lat)) < 0.01


def test_hairpins_stay_on_their_leg(library):
    """On the inside of every switchback hairpin the car is found on its own leg."""
    stage = library["switchbacks"]
    path = stage.path
    tight = np.flatnonzero(np.abs(path.curvature) > 1.0 / 16.0)
    rng = np.random.default_rng(5)
    idx = rng.choice(tight, 300)
    s = path.s_m[idx]
    side = np.sign(path.curvature[idx])  # inside of the turn
    lat = side * rng.uniform(0.0, 1.0, idx.shape) * (path.half_width_at(s) + 1.5)
    pos = offset_points(path, s, lat)
    fwd = np.stack(path.tangent_at(s), axis=1)
    r = tracks.Projector(stage).project(pos, fwd, s + 3.0)
    assert np.max(np.abs(r.s_m - s)) < 0.3
    for k in range(0, 300, 7):
        assert r.s_m[k] == _brute_s(path, pos[k, 0], pos[k, 1])[0]


@pytest.mark.parametrize("name", ["rallycross", "skidpad"])
def test_loop_closure(library, name):
    """Across the start/finish of a loop: s wraps, s_prev on the other side of the line works."""
    stage = library[name]
    path = stage.path
    L = path.length_m
    rng = np.random.default_rng(3)
    s = np.concatenate([rng.uniform(L - 4.0, L, 100), rng.uniform(0.0, 4.0, 100)])
    s = path.wrap(s)
    lat = rng.uniform(-1.0, 1.0, s.shape) * path.half_width_at(s)
    pos = offset_points(path, s, lat)
    fwd = np.stack(path.tangent_at(s), axis=1)
    s_prev = path.wrap(s[::-1].copy())  # the other side of the closure
    r = tracks.Projector(stage).project(pos, fwd, s_prev)
    assert np.all((r.s_m >= 0.0) & (r.s_m < L))
    for k in range(s.shape[0]):
        assert r.s_m[k] == _brute_s(path, pos[k, 0], pos[k, 1])[0]
    d = tracks.delta_s(s, r.s_m, L, True)
    assert np.max(np.abs(d)) < 0.25
    # progress across the line is small and positive when driving forward
    assert float(tracks.delta_s(L - 1.0, 0.5, L, True)) == pytest.approx(1.5)


def test_far_jump_falls_back_to_global(library):
    """A car far from its s_prev (window border) is found anyway; NaN / negative is cold."""
    stage = library["opener"]
    path = stage.path
    s = np.array([300.0, 900.0, 50.0, 700.0])
    pos = offset_points(path, s, np.zeros(4))
    fwd = np.stack(path.tangent_at(s), axis=1)
    r = tracks.Projector(stage, window_m=20.0).project(
        pos, fwd, np.array([800.0, 100.0, np.nan, -1.0])
    )
    np.testing.assert_allclose(r.s_m, s, atol=1e-6)


def test_signs_edges_heading_on_straight(library):
    """Proving ground runs along +x: left is +y, heading error positive when pointing left."""
    stage = library["proving-ground"]
    hw = float(stage.path.half_width_m[0])
    pos = np.array([[500.0, 3.0], [800.0, -5.0], [1200.0, 0.0]])
    ang = np.array([0.3, -0.2, 0.0])
    fwd = np.stack([np.cos(ang), np.sin(ang)], axis=1)
    r = tracks.Projector(stage, lookahead_m=(10.0, 50.0)).project(pos, fwd, None)
    np.testing.assert_allclose(r.s_m, [500.0, 800.0, 1200.0], atol=1e-9)
    np.testing.assert_allclose(r.lateral_m, [3.0, -5.0, 0.0], atol=1e-9)
    np.testing.assert_allclose(r.heading_error_rad, ang, atol=1e-12)
    np.testing.assert_allclose(r.left_edge_m, hw - np.array([3.0, -5.0, 0.0]), atol=1e-9)
    np.testing.assert_allclose(r.right_edge_m, hw + np.array([3.0, -5.0, 0.0]), atol=1e-9)
    assert r.on_road.all()
    # lookahead in the car frame: world offset (d, -lat) rotated by -heading
    for k in range(3):
        for q, d in enumerate((10.0, 50.0)):
            wx, wy = d, -pos[k, 1]
            c, s_ = math.cos(ang[k]), math.sin(ang[k])
            assert r.lookahead[k, q, 0] == pytest.approx(c * wx + s_ * wy, abs=1e-9)
            assert r.lookahead[k, q, 1] == pytest.approx(-s_ * wx + c * wy, abs=1e-9)
            assert r.lookahead[k, q, 2] == 0.0


def test_lookahead_on_skidpad_circle(library):
    """Skidpad: lookahead points lie on the 40 m circle, curvature 1/40, wrap past the line."""
    stage = library["skidpad"]
    path = stage.path
    la = np.array([5.0, 20.0, 60.0, 300.0])  # 300 m is more than a lap
    s = np.array([0.0, 100.0, path.length_m - 10.0])
    pos = offset_points(path, s, np.zeros(3))
    fwd = np.stack(path.tangent_at(s), axis=1)
    r = tracks.Projector(stage, lookahead_m=la).project(pos, fwd, s)
    np.testing.assert_allclose(r.lookahead_curvature, 1.0 / 40.0, rtol=2e-3)
    for k in range(3):
        yaw = math.atan2(fwd[k, 1], fwd[k, 0])
        c, sn = math.cos(yaw), math.sin(yaw)
        lx, ly = r.lookahead[k, :, 0], r.lookahead[k, :, 1]
        wx = pos[k, 0] + c * lx - sn * ly
        wy = pos[k, 1] + sn * lx + c * ly
        np.testing.assert_allclose(np.hypot(wx, wy), 40.0, atol=0.01)
        # a point 5 m ahead on a left-hand circle is ahead and slightly left
        assert lx[0] > 4.9 and 0.0 < ly[0] < 0.5


def test_lookahead_beyond_the_end_continues_straight(library):
    stage = library["opener"]
    path = stage.path
    s = np.array([path.length_m - 5.0])
    pos = offset_points(path, s, np.zeros(1))
    fwd = np.stack(path.tangent_at(s), axis=1)
    r = tracks.Projector(stage, lookahead_m=(20.0, 100.0)).project(pos, fwd, s)
    np.testing.assert_allclose(r.lookahead[0, :, 0], [20.0, 100.0], atol=0.05)
    np.testing.assert_allclose(r.lookahead[0, :, 1], 0.0, atol=0.05)
    np.testing.assert_array_equal(r.lookahead[0, :, 2], 0.0)


def test_beyond_the_ends_of_an_open_stage(library):
    """Behind the start / past the end: s clamps to 0 / length and the lateral offset is
    measured from the centerline extended straight (as the lookahead continues it)."""
    stage = library["mixed-surface"]
    path = stage.path
    L = path.length_m
    t0 = np.array([path.tx[0], path.ty[0]])
    t1 = np.array([path.tx[-1], path.ty[-1]])
    n0 = np.array([-t0[1], t0[0]])
    n1 = np.array([-t1[1], t1[0]])
    p0 = np.array([path.x_m[0], path.y_m[0]])
    p1 = np.array([path.x_m[-1], path.y_m[-1]])
    pos = np.array([p0, p1, p0 - 5.0 * t0 + 2.0 * n0, p1 + 30.0 * t1 - 3.0 * n1])
    fwd = np.array([t0, t1, t0, t1])
    for s_prev in (None, np.array([0.0, L, 0.0, L])):
        r = tracks.Projector(stage).project(pos, fwd, s_prev)
        np.testing.assert_allclose(r.s_m, [0.0, L, 0.0, L], atol=1e-9)
        np.testing.assert_allclose(r.lateral_m, [0.0, 0.0, 2.0, -3.0], atol=1e-9)
        for k in range(4):
            assert r.s_m[k] == _brute_s(path, pos[k, 0], pos[k, 1])[0]


def test_batch_independence(library):
    """Car k's result does not depend on the other cars in the batch."""
    stage = library["forest"]
    path = stage.path
    rng = np.random.default_rng(8)
    s, _lat, pos = _cars_near_road(path, rng, 64)
    fwd = np.stack(path.tangent_at(s), axis=1)
    proj = tracks.Projector(stage)
    batch = proj.project(pos, fwd, s)
    all_look = batch.lookahead.copy()
    all_s = batch.s_m.copy()
    for k in (0, 17, 63):
        one = proj.project(pos[k : k + 1], fwd[k : k + 1], s[k : k + 1])
        assert one.s_m[0] == all_s[k]
        np.testing.assert_array_equal(one.lookahead[0], all_look[k])


def test_bad_inputs(library):
    proj = tracks.Projector(library["opener"])
    with pytest.raises(tracks.ProjectionError, match=r"\(N, 2\)"):
        proj.project(np.zeros((3, 3)), np.zeros((3, 3)))
    with pytest.raises(tracks.ProjectionError, match="finite"):
        proj.project(np.array([[np.nan, 0.0]]), np.array([[1.0, 0.0]]))
    with pytest.raises(tracks.ProjectionError, match="s_prev"):
        proj.project(np.zeros((2, 2)), np.ones((2, 2)), np.zeros(3))
    with pytest.raises(tracks.ProjectionError):
        tracks.Projector(library["opener"], window_m=0.0)


@settings(max_examples=60, deadline=None)
@given(s=st.floats(0.0, 1.0), lat=st.floats(-1.0, 1.0), yaw=st.floats(-3.0, 3.0))
def test_property_recovers_offset(library, s, lat, yaw):
    """Any point on the mixed-surface road: s and lateral recovered, heading error wraps."""
    stage = library["mixed-surface"]
    path = stage.path
    s_arr = np.array([s * path.length_m])
    hw = path.half_width_at(s_arr)
    pos = offset_points(path, s_arr, lat * hw)
    tx, ty = path.tangent_at(s_arr)
    road = math.atan2(float(ty[0]), float(tx[0]))
    fwd = np.array([[math.cos(road + yaw), math.sin(road + yaw)]])
    r = tracks.Projector(stage).project(pos, fwd, None)
    assert abs(r.s_m[0] - s_arr[0]) < 0.25
    assert abs(r.lateral_m[0] - lat * hw[0]) < 0.01
    assert abs(r.heading_error_rad[0] - yaw) < 0.01
