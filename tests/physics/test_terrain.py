import numpy as np
import pytest

from physics import ROVER, Terrain, TerrainError, TerrainSet, VehicleBatch, flat_terrain
from physics import layout as L
from physics.terrain import TILE_NODES, TM_NX, _heights_many, sample_surface, tile_grid


def _plane(a=0.1, b=-0.05, c=2.0):
    n = 21
    xs = np.arange(n) * 1.0
    h = c + a * xs[None, :] + b * xs[:, None]
    return Terrain(h, np.zeros((n, n), np.int8), np.array([1.0]), 0.0, 0.0, 1.0)


def test_planes_are_reproduced_exactly_inside_the_grid():
    t = _plane()
    rng = np.random.default_rng(0)
    x = rng.uniform(1.0, 19.0, 500)
    y = rng.uniform(1.0, 19.0, 500)
    np.testing.assert_allclose(t.height_at(x, y), 2.0 + 0.1 * x - 0.05 * y, atol=1e-12)


def test_height_and_slope_are_continuous_across_cell_edges():
    rng = np.random.default_rng(1)
    h = rng.normal(size=(12, 12))
    t = Terrain(h, np.zeros((12, 12), np.int8), np.array([1.0]), 0.0, 0.0, 1.0)
    eps = 1e-7
    for edge in (3.5, 4.5, 6.5):  # B-spline knots sit half-way between nodes
        y = 5.2
        lo, hi = t.height_at(edge - eps, y)[0], t.height_at(edge + eps, y)[0]
        assert abs(hi - lo) < 1e-5
        s_lo = (t.height_at(edge - eps, y)[0] - t.height_at(edge - 2e-3, y)[0]) / 2e-3
        s_hi = (t.height_at(edge + 2e-3, y)[0] - t.height_at(edge + eps, y)[0]) / 2e-3
        assert abs(s_hi - s_lo) < 0.05


def test_outside_the_grid_the_edge_continues():
    t = _plane()
    assert t.height_at(-50.0, 10.0)[0] == pytest.approx(t.height_at(0.0, 10.0)[0])


def test_surface_nearest_node():
    s = np.zeros((4, 4), np.int8)
    s[:, 2:] = 1
    t = Terrain(np.zeros((4, 4)), s, np.array([1.0, 0.5]), 0.0, 0.0, 1.0)
    assert t.surface_at(1.4, 1.0) == 0 and t.surface_at(1.6, 1.0) == 1


@pytest.mark.parametrize(
    ("kwargs", "needle"),
    [
        ({"heights_m": np.zeros(4)}, "2-D"),
        ({"heights_m": np.full((3, 3), np.nan)}, "non-finite"),
        ({"surface_ids": np.zeros((2, 2), np.int8)}, "shape"),
        ({"surface_ids": np.full((3, 3), 5, np.int8)}, "surface ids"),
        ({"grip": np.array([-1.0])}, "grip"),
        ({"cell_m": 0.0}, "cell_m"),
        ({"surface_ids": np.zeros((3, 3))}, "integers"),
    ],
)
def test_bad_terrain_arrays(kwargs, needle):
    base = dict(
        heights_m=np.zeros((3, 3)),
        surface_ids=np.zeros((3, 3), np.int8),
        grip=np.array([1.0]),
        x0_m=0.0,
        y0_m=0.0,
        cell_m=1.0,
    )
    base.update(kwargs)
    with pytest.raises(TerrainError, match=needle):
        Terrain(**base)


def test_terrain_set_packs_several():
    a = flat_terrain(100.0, 5.0, height_m=1.0)
    b = flat_terrain(50.0, 2.0, height_m=-3.0, grip=0.6)
    ts = TerrainSet([a, b])
    assert len(ts) == 2
    assert ts.grip[1, 0] == 0.6
    assert ts.tiles_in_use == 0  # nothing is filled before a car needs it
    n_b = ts.bake_all(1)
    tnx, tny = tile_grid(b.shape)
    assert n_b == tnx * tny == ts.tiles_in_use and ts.bake_all(1) == 0
    with pytest.raises(TerrainError):
        TerrainSet([])
    assert a.digest() != b.digest()
    assert a.digest() == flat_terrain(100.0, 5.0, height_m=1.0).digest()


def _noise_terrain(n=57, seed=3):
    rng = np.random.default_rng(seed)
    h = np.cumsum(np.cumsum(rng.normal(0.0, 0.02, (n, n)), 0), 1)
    s = (rng.random((n, n)) < 0.3).astype(np.int8)
    return Terrain(h, s, np.array([1.0, 0.6]), -20.0, -30.0, 1.0, name="noise")


def test_tiles_filled_on_demand_give_the_dense_samples():
    t = _noise_terrain()
    rng = np.random.default_rng(0)
    xs = rng.uniform(-30.0, 5.0, 400)  # part inside, part outside the grid
    ys = rng.uniform(-40.0, 40.0, 400)
    ts = TerrainSet([t])
    out = np.empty(400)
    _heights_many(ts.heights, ts.tiles, ts.meta, 0, xs, ys, out)
    assert np.isnan(out).all()  # no tile filled: every sample misses
    ts.fill_around(np.zeros(400, np.int64), xs, ys, 0.0)
    _heights_many(ts.heights, ts.tiles, ts.meta, 0, xs, ys, out)
    dense = TerrainSet([t])
    dense.bake_all(0)
    ref = np.empty(400)
    _heights_many(dense.heights, dense.tiles, dense.meta, 0, xs, ys, ref)
    np.testing.assert_array_equal(out, ref)
    assert ts.tiles_in_use < dense.tiles_in_use
    for x, y in zip(xs[:50], ys[:50], strict=True):
        got = sample_surface(ts.surfaces, ts.tiles, ts.meta, 0, x, y)
        assert got == sample_surface(dense.surfaces, dense.tiles, dense.meta, 0, x, y) >= 0


def test_stepping_on_lazily_filled_terrain_is_bit_identical():
    t = _noise_terrain(n=401)
    cmds = np.array([[0.3, 1.0, 0.0, 0.0], [-0.5, 0.8, 0.0, 0.0], [0.0, 1.0, 0.0, 1.0]])
    hashes = []
    for prefill in (False, True):
        ts = TerrainSet([t])
        if prefill:
            ts.bake_all(0)
        sim = VehicleBatch(3, ROVER, ts)
        sim.reset(np.array([[80.0, 50.0, 0.3, 12.0], [150.0, 90.0, 2.0, 20.0], [60, 200, 4, 5]]))
        for i in range(120):
            sim.set_commands(cmds if i % 40 < 30 else cmds[::-1])
            sim.step(24)
        hashes.append(sim.state_hash())
        if not prefill:
            lazy_tiles = ts.tiles_in_use
            assert 0 < lazy_tiles < tile_grid(t.shape)[0] * tile_grid(t.shape)[1]
    assert hashes[0] == hashes[1]


def test_a_nan_position_does_not_crash_the_kernel():
    sim = VehicleBatch(2, ROVER, [_noise_terrain()])
    sim.state[0, L.POS_X] = np.nan
    sim.state[1, L.POS_Y] = np.inf
    sim.set_commands(np.tile([0.0, 1.0, 0.0, 0.0], (2, 1)))
    sim.step(8)  # must return (the values are garbage, the process is alive)


def test_replace_gives_the_tiles_back():
    a, b = _noise_terrain(seed=1), _noise_terrain(n=90, seed=2)
    ts = TerrainSet([a, a], n_variants=1)
    ts.set_variant(2, 1, np.array([0.5, 0.5]))
    ts.bake_all(1)
    used = ts.tiles_in_use
    ts.replace(1, b)
    assert ts.tiles_in_use == 0 and ts.meta[2, TM_NX] == 90  # the variant follows its base
    ts.bake_all(1)
    assert ts.tiles_in_use == tile_grid(b.shape)[0] * tile_grid(b.shape)[1] > used
    assert ts.heights.size // TILE_NODES >= ts.tiles_in_use


def test_variant_rows_share_heights_with_their_own_grip():
    a = flat_terrain(100.0, 5.0, height_m=1.0)
    b = flat_terrain(50.0, 2.0, height_m=-3.0, grip=0.6)
    ts = TerrainSet([a, b], n_variants=2)
    assert len(ts) == 4 and ts.n_base == 2
    ts.set_variant(3, 1, np.array([0.3]))
    np.testing.assert_array_equal(ts.meta[3], ts.meta[1])
    assert ts.grip[3, 0] == 0.3 and ts.grip[1, 0] == 0.6
    for bad in ((1, 0, [1.0]), (4, 0, [1.0]), (2, 2, [1.0]), (2, 0, [np.nan]), (2, 0, [3.0])):
        with pytest.raises(TerrainError):
            ts.set_variant(bad[0], bad[1], np.array(bad[2]))
    assert ts.grip[2, 0] == 1.0  # unchanged by the refused calls
    with pytest.raises(TerrainError):
        TerrainSet([a], n_variants=-1)


def test_fill_requests_are_deduplicated_sorted_and_limited_to_unfilled_grid_tiles():
    from physics.terrain import _new_requests

    a, b = _noise_terrain(n=90, seed=1), _noise_terrain(n=57, seed=2)
    ts = TerrainSet([a, b], n_variants=1)
    ts.set_variant(2, 0, np.array([0.5, 0.5]))  # row 2 reads base 0's tiles
    n0 = tile_grid(a.shape)[0] * tile_grid(a.shape)[1]
    ts.fill_requests(np.array([[0, 1]]))  # tile 1 of base 0 is filled already
    req = np.array([[1, 3], [0, 2], [2, 2], [0, 1], [1, 3], [0, n0], [0, -1], [2, 0], [1, 0]])
    got = _new_requests(ts.tiles, ts.meta, ts._variant_base, req)
    np.testing.assert_array_equal(got, [[0, 0], [0, 2], [1, 0], [1, 3]])
    assert got.dtype == np.int64 and got.shape == (4, 2)
    assert _new_requests(ts.tiles, ts.meta, ts._variant_base, req[3:4]).shape == (0, 2)
    assert ts.fill_requests(req) == 4 and ts.tiles_in_use == 5
