"""Terrain bake: the road follows its profile flat across the width, continuous edges,
surfaces, features, determinism and the cache."""

from __future__ import annotations

import os
import pickle
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

import tracks
from physics.terrain import (
    TILE,
    TILE_NODES,
    TILE_W,
    TM_TABLE,
    TerrainSet,
    sample_surface,
    tile_grid,
)
from tests.tracks.conftest import offset_points
from tracks import surfaces
from tracks.bake import MARGIN_M, StageTerrain, bake_grid, bake_uncached

# Golden digest of the opener's bake (heights, surfaces, grip, grid). It pins the bake bit for
# bit on every platform; if the bake changes on purpose, print the new value with
#   python -c "import tracks; print(tracks.bake(tracks.load_stage('opener')).digest())"
# and update it here in the same commit, saying why.
GOLDEN_OPENER_BAKE = "8abc78ee45fdf24c6e0328666f357e0d"


def _away_from_jumps(stage, s, margin=3.0):
    ok = np.ones(s.shape, bool)
    for f in stage.features:
        if f.kind == "jump":
            a, b = f.extent_m
            ok &= (s < a - margin) | (s > b + margin)
    return ok


@pytest.mark.parametrize("name", ["opener", "switchbacks", "sweepers", "rallycross", "forest"])
def test_road_follows_profile_flat_across(library, name):
    stage = library[name]
    path = stage.path
    terr = tracks.bake(stage)
    rng = np.random.default_rng(2)
    s = rng.uniform(0.0, path.length_m, 4000)
    s = s[_away_from_jumps(stage, s)]
    hw = path.half_width_at(s)
    lat = rng.uniform(-1.0, 1.0, s.shape) * (hw - 1.5)
    pos = offset_points(path, s, lat)
    h = terr.height_at(pos[:, 0], pos[:, 1])
    z = path.z_at(s)
    assert np.max(np.abs(h - z)) < 0.01
    # across the width at one s: flat (no banking)
    sk = np.repeat(s[:200], 9)
    across = np.tile(np.linspace(-1.0, 1.0, 9), 200) * (path.half_width_at(sk) - 1.5)
    row = offset_points(path, sk, across)
    hh = terr.height_at(row[:, 0], row[:, 1]).reshape(200, 9)
    assert np.ptp(hh, axis=1).max() < 0.01


@pytest.mark.parametrize("name", ["opener", "switchbacks", "forest", "mixed-surface"])
def test_heights_continuous_at_the_road_edge(library, name):
    """Evaluate the bake on a 1 cm grid straddling the edge: no step anywhere (slope < 1)."""
    stage = library[name]
    path = stage.path
    rng = np.random.default_rng(4)
    s_all = rng.uniform(20.0, path.length_m - 20.0, 40)
    s_all = s_all[_away_from_jumps(stage, s_all, 8.0)][:6]
    for s in s_all:
        for side in (-1.0, 1.0):
            lat = side * float(path.half_width_at(s))
            cx, cy = offset_points(path, np.array([s]), np.array([lat]))[0]
            n = 301
            cell = 0.01
            x0, y0 = cx - 1.5, cy - 1.5
            heights, surf = bake_grid(stage, x0, y0, cell, n, n)
            assert (surf == surfaces.OFFROAD_ID).any() and (surf != surfaces.OFFROAD_ID).any()
            d1 = max(np.abs(np.diff(heights, axis=a)).max() for a in (0, 1))
            d2 = max(
                np.abs(heights[2:] - heights[:-2]).max(),
                np.abs(heights[:, 2:] - heights[:, :-2]).max(),
            )
            # No step: differences shrink with the spacing (a step of size d would show as d at
            # any spacing), and slopes stay below 2.5 m/m even on a mountain side.
            assert d1 < 0.025, (name, s, side, d1)
            assert d1 < 0.7 * d2 or d1 < 1e-4, (name, s, side, d1, d2)


@pytest.mark.parametrize("name", ["opener", "switchbacks", "sweepers", "rallycross"])
def test_no_cliffs_at_edges_on_the_full_grid(library, name):
    """Neighbouring nodes across every road/off-road boundary differ by less than 0.8 m/m."""
    terr = tracks.bake(library[name])
    h, sid = terr.heights_m, terr.surface_ids
    road = sid != surfaces.OFFROAD_ID
    for axis in (0, 1):
        dh = np.abs(np.diff(h, axis=axis))
        edge = np.diff(road.astype(np.int8), axis=axis) != 0
        assert edge.any()
        assert dh[edge].max() < 0.8 * terr.cell_m


@pytest.mark.parametrize("name", ["opener", "mixed-surface", "forest"])
def test_surface_ids(library, name):
    stage = library[name]
    path = stage.path
    terr = tracks.bake(stage)
    rng = np.random.default_rng(9)
    s = rng.uniform(0.0, path.length_m, 1500)
    near_boundary = np.min(np.abs(s[:, None] - path.section_start_m[None, :]), axis=1) < 1.5
    s = s[~near_boundary]
    hw = path.half_width_at(s)
    on = offset_points(path, s, rng.uniform(-1, 1, s.shape) * (hw - 0.8))
    off = offset_points(path, s, np.where(rng.random(s.shape) < 0.5, -1.0, 1.0) * (hw + 1.5))
    want = path.surface_at(s)
    tset = TerrainSet([terr])
    tset.bake_all(0)
    args = (tset.surfaces, tset.tiles, tset.meta, 0)
    got_on = np.array([sample_surface(*args, x, y) for x, y in on])
    got_off = np.array([sample_surface(*args, x, y) for x, y in off])
    np.testing.assert_array_equal(got_on, want)
    assert (got_off == surfaces.OFFROAD_ID).all()


def test_grip_table():
    grip = tracks.bake(tracks.load_stage("opener")).grip
    np.testing.assert_array_equal(grip, surfaces.GRIP)
    road_mu = [s.mu for s in surfaces.ROAD_SURFACES]
    assert min(road_mu) == pytest.approx(0.53, abs=0.01)
    assert max(road_mu) == pytest.approx(0.81, abs=0.01)
    assert surfaces.OFFROAD.grip < min(s.grip for s in surfaces.ROAD_SURFACES)
    assert {s.name for s in surfaces.ROAD_SURFACES} == {"packed-dirt", "gravel", "dust", "sand"}


def test_features_are_shaped(library):
    stage = library["sweepers"]
    path = stage.path
    terr = tracks.bake(stage)
    for f in stage.features:
        a, b = f.extent_m
        s = np.arange(a - 10.0, b + 10.0, 0.25)
        if f.kind == "jump":
            s = s[(s < f.s_m - 0.5) | (s > f.s_m + f.face_m + 1.0)]
        pos = offset_points(path, s, np.zeros_like(s))
        h = terr.height_at(pos[:, 0], pos[:, 1])
        base = np.interp(s, path.s_m, path.z_base_m)
        bump = h - base
        if f.kind == "crest":
            assert bump.max() == pytest.approx(f.height_m, abs=0.02)
        elif f.kind == "compression":
            assert bump.min() == pytest.approx(-f.height_m, abs=0.02)
        else:
            # ramp: lip * u^2 just before the lip, back to the road after the face
            u = (s - (f.s_m - f.length_m)) / f.length_m
            ramp = (u >= 0) & (u <= 1)
            np.testing.assert_allclose(bump[ramp], f.height_m * u[ramp] ** 2, atol=0.03)
            assert np.abs(bump[s > f.s_m + f.face_m + 1.0]).max() < 0.02
            assert f.height_m >= 1.2


def test_measurement_stages_are_flat_and_uniform(library):
    for name in ("proving-ground", "skidpad"):
        terr = tracks.bake(library[name])
        assert np.all(terr.heights_m == 0.0)
        assert np.all(terr.surface_ids == surfaces.GRAVEL.id)


def test_grid_covers_stage_plus_margin(library):
    for name in ("opener", "skidpad"):
        path = library[name].path
        x0, x1, y0, y1 = tracks.bake(library[name]).extent_m
        assert x0 <= path.x_m.min() - MARGIN_M and x1 >= path.x_m.max() + MARGIN_M
        assert y0 <= path.y_m.min() - MARGIN_M and y1 >= path.y_m.max() + MARGIN_M


def test_deterministic_cached_and_seeded(library):
    stage = library["opener"]
    a = bake_uncached(stage)
    b = bake_uncached(stage)
    assert a.heights_m.tobytes() == b.heights_m.tobytes()
    assert a.surface_ids.tobytes() == b.surface_ids.tobytes()
    assert a.digest() == GOLDEN_OPENER_BAKE
    t1 = tracks.bake(stage)
    assert tracks.bake(tracks.load_stage("opener")) is t1  # cached by content
    other = tracks.bake(stage, seed=7)
    assert other is not t1 and other.digest() != t1.digest()
    road = t1.surface_ids != surfaces.OFFROAD_ID
    np.testing.assert_array_equal(other.heights_m[road], t1.heights_m[road])  # road unchanged
    assert not np.array_equal(other.heights_m[~road], t1.heights_m[~road])
    tracks.clear_bake_cache()
    assert tracks.bake(stage) is not t1
    assert tracks.bake(stage).digest() == t1.digest()


def test_same_bits_without_jit():
    """The bake in pure Python (NUMBA_DISABLE_JIT=1) is bit-identical to the compiled one."""
    code = textwrap.dedent("""
        import tracks
        b = tracks.PathBuilder().straight(60).turn(30, 60).straight(40)
        st = tracks.Stage(name="tiny", knots=b.knots(), finish=tracks.Finish(100.0),
                          sections=(tracks.Section(0.0, 8.0, "gravel"),),
                          features=(tracks.Feature("jump", 80.0, 8.0, 0.6),))
        print(tracks.bake(st).digest())
    """)
    here = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
        env=_env(False),
    ).stdout.strip()
    nojit = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
        env=_env(True),
    ).stdout.strip()
    assert here == nojit and len(here) == 32


def _env(disable_jit: bool) -> dict[str, str]:
    env = dict(os.environ)
    root = Path(tracks.__file__).resolve().parent.parent
    env["PYTHONPATH"] = str(root) + os.pathsep + env.get("PYTHONPATH", "")
    if disable_jit:
        env["NUMBA_DISABLE_JIT"] = "1"
    else:
        env.pop("NUMBA_DISABLE_JIT", None)
    return env


def test_bad_arguments(library):
    with pytest.raises(ValueError, match="cell_m"):
        tracks.bake(library["opener"], cell_m=0.0)
    with pytest.raises(ValueError, match="seed"):
        tracks.bake(library["opener"], seed=-3)
    with pytest.raises(TypeError):
        tracks.bake("opener")  # type: ignore[arg-type]


# Golden digest of the opener's section-labelled bake (per-section grip randomisation), from
# the whole-grid labelling pass it replaced. Update with
#   python -c "import tracks; from tracks.bake import StageTerrain as T; \
#              print(T(tracks.load_stage('opener'), sectioned=True).to_terrain().digest())"
GOLDEN_OPENER_SECTIONED = "3d5d76d176e0b1329d7aad0762ce71f3"


def test_section_labels_golden():
    st = tracks.load_stage("opener")
    assert StageTerrain(st, sectioned=True).to_terrain().digest() == GOLDEN_OPENER_SECTIONED


def _check_tiles(stage, sectioned, rng, prebaked=False):
    src = StageTerrain(stage, sectioned=sectioned)
    if prebaked:  # as the prefetch worker hands it over: start tiles baked, then pickled
        src.prebake(src.start_tiles())
        src = pickle.loads(pickle.dumps(src, protocol=pickle.HIGHEST_PROTOCOL))
    dense = src.to_terrain() if sectioned else tracks.bake(stage)
    ts = TerrainSet([src])
    p = stage.path
    s = rng.uniform(0.0, p.length_m, 12)
    x, y = p.point_at(s)
    ts.fill_around(np.zeros(len(s), np.int64), x, y, 35.0)  # road, berm, blend and ground
    tnx, tny = tile_grid(src.shape)
    ts.fill_linear(0, rng.integers(0, tnx * tny, 40))  # and anywhere on the grid
    if prebaked:
        start = src.start_tiles()
        ts.fill_linear(0, start[:, 1] * tnx + start[:, 0])
    ny, nx = src.shape
    filled = np.flatnonzero(ts.tiles[: tnx * tny] >= 0)
    assert len(filled) > 40
    hp = ts.heights.reshape(-1, TILE_NODES)
    sp = ts.surfaces.reshape(-1, TILE_NODES)
    for lin in filled:
        tx, ty = lin % tnx, lin // tnx
        rows = np.clip(ty * TILE - 1 + np.arange(TILE_W), 0, ny - 1)
        cols = np.clip(tx * TILE - 1 + np.arange(TILE_W), 0, nx - 1)
        slot = ts.tiles[lin]
        want_h = dense.heights_m[np.ix_(rows, cols)].ravel()
        want_s = dense.surface_ids[np.ix_(rows, cols)].ravel()
        np.testing.assert_array_equal(hp[slot], want_h)
        np.testing.assert_array_equal(sp[slot], want_s)


@pytest.mark.parametrize(
    "make",
    [
        lambda: tracks.load_stage("switchbacks"),
        lambda: tracks.load_stage("rallycross"),
        lambda: tracks.generate(3, difficulty=0.9),
        lambda: tracks.generate(11, length_m=1200, difficulty=0.8, closed=True),
    ],
)
def test_tiles_baked_alone_equal_the_whole_bake(make):
    """Any tile, baked on its own in any order, holds exactly the whole bake's nodes."""
    stage = make()
    rng = np.random.default_rng(abs(hash(stage.name)) % 2**32)
    _check_tiles(stage, False, rng)
    _check_tiles(stage, True, rng)
    _check_tiles(stage, False, rng, prebaked=True)
    _check_tiles(stage, True, rng, prebaked=True)


def test_start_tiles_cover_the_road_from_the_start_line():
    """The tiles a prebake makes hold the start pose and the road 40 m beyond it, edges
    and a margin included, and nothing far from it."""
    stage = tracks.generate(5)
    src = StageTerrain(stage)
    tiles = src.start_tiles()
    tnx = tile_grid(src.shape)[0]
    lin = set((tiles[:, 1] * tnx + tiles[:, 0]).tolist())
    p = stage.path
    for s in np.arange(stage.start_s_m, stage.start_s_m + 40.0, 1.0):
        x, y = p.point_at(np.array([s]))
        for dx, dy in ((0, 0), (1, 0), (-1, 0), (0, 1), (0, -1)):
            off = float(np.interp(s, p.s_m, p.half_width_m)) + 5.0
            i = int((x[0] + dx * off - src.x0_m) / src.cell_m) // TILE
            j = int((y[0] + dy * off - src.y0_m) / src.cell_m) // TILE
            assert j * tnx + i in lin
    far = np.hypot(
        tiles[:, 0] * TILE * src.cell_m + src.x0_m - stage.start_pose[0],
        tiles[:, 1] * TILE * src.cell_m + src.y0_m - stage.start_pose[1],
    )
    assert far.max() < 40.0 + 30.0


def test_a_pickled_source_carries_its_ground_cells_and_prebaked_tiles():
    """Only the computed ground cells travel (not the NaN rest of the grid), and a prebaked
    tile is handed over, not baked again."""
    stage = tracks.generate(9)
    src = StageTerrain(stage)
    tiles = src.start_tiles()
    src.prebake(tiles)
    g, done = src._geo.g, src._geo.gdone.astype(bool)
    assert 0 < done.sum() < g.size // 10
    blob = pickle.dumps(src, protocol=pickle.HIGHEST_PROTOCOL)
    assert len(blob) < len(pickle.dumps(g, protocol=pickle.HIGHEST_PROTOCOL)) + 200_000
    back = pickle.loads(blob)
    np.testing.assert_array_equal(back._geo.gdone, src._geo.gdone)  # the same cells computed
    np.testing.assert_array_equal(back._geo.g[done], g[done])
    back._geo = back._geo._replace(g=np.full_like(g, -1e9))  # a bake would now read garbage
    h = np.empty((len(tiles), TILE_NODES))
    s = np.empty((len(tiles), TILE_NODES), np.int8)
    back.fill_tiles(tiles, h, s)
    fresh = StageTerrain(stage)
    h2 = np.empty_like(h)
    s2 = np.empty_like(s)
    fresh.fill_tiles(tiles, h2, s2)
    np.testing.assert_array_equal(h, h2)
    np.testing.assert_array_equal(s, s2)


@pytest.mark.parametrize("sectioned", [False, True])
def test_a_pickled_source_loads_with_the_same_kernel_arrays(sectioned):
    """The pickle leaves out the stage's centerline columns and sends the index tables as
    int32; loading rebuilds every kernel array with its dtype, contiguity and values (the
    bake compiles for those types), and the centerline columns are the stage's again."""
    stage = tracks.generate(21, difficulty=0.7)
    src = StageTerrain(stage, sectioned=sectioned)
    src.prebake(src.start_tiles())
    stage_back, back = pickle.loads(pickle.dumps((stage, src), protocol=pickle.HIGHEST_PROTOCOL))
    for name in src._geo._fields:
        a, b = getattr(src._geo, name), getattr(back._geo, name)
        assert b.dtype == a.dtype and b.shape == a.shape and b.flags.c_contiguous, name
        if name == "g":  # the ground field is defined where it is computed (gdone)
            a, b = a[src._geo.gdone == 1], b[src._geo.gdone == 1]
        np.testing.assert_array_equal(b, a, err_msg=name)
    np.testing.assert_array_equal(back._geo.x, stage_back.path.x_m)
    assert back.stage is stage_back


@pytest.mark.parametrize("how", ["construct", "replace"])
def test_a_terrain_set_takes_a_sources_prebaked_tiles_with_the_row(how):
    """The tiles a source made ahead (the prefetch worker's start tiles) go into the pool when
    the source takes a row, in one copy: no fill asks the source for them again, and they hold
    what a fill would have baked."""
    from physics.terrain import flat_terrain

    stage = tracks.generate(9)
    src = StageTerrain(stage)
    tiles = src.start_tiles()
    src.prebake(tiles)
    lin = tiles[:, 1] * tile_grid(src.shape)[0] + tiles[:, 0]
    asked = []
    fill = src.fill_tiles
    src.fill_tiles = lambda t, h, s: (asked.append(len(t)), fill(t, h, s))
    if how == "construct":
        ts = TerrainSet([src])
    else:
        ts = TerrainSet([flat_terrain()])
        ts.fill_linear(0, np.array([0, 1]))
        ts.replace(0, src)
    assert ts.tiles_in_use == len(tiles)
    assert ts.fill_linear(0, lin) == 0 and asked == []
    fresh = TerrainSet([StageTerrain(stage)])
    assert fresh.fill_linear(0, lin) == len(tiles)
    sa, sb = ts.tiles[int(ts.meta[0, TM_TABLE]) + lin], fresh.tiles[lin]
    np.testing.assert_array_equal(
        ts.heights.reshape(-1, TILE_NODES)[sa], fresh.heights.reshape(-1, TILE_NODES)[sb]
    )
    np.testing.assert_array_equal(
        ts.surfaces.reshape(-1, TILE_NODES)[sa], fresh.surfaces.reshape(-1, TILE_NODES)[sb]
    )


def test_a_source_pickled_with_a_nan_marked_ground_field_still_bakes_the_same():
    """Pickles made before the computed-cells flags carried the ground field with NaN where not
    computed (whole, or as its computed cells): both load, and bake the same tiles."""
    stage = tracks.generate(9)
    src = StageTerrain(stage)
    tiles = src.start_tiles()[:6]
    h = np.empty((len(tiles), TILE_NODES))
    s = np.empty((len(tiles), TILE_NODES), np.int8)
    src.fill_tiles(tiles, h, s)
    g = np.where(src._geo.gdone == 1, src._geo.g, np.nan)
    state = src.__getstate__()
    old_cells = dict(state, _geo=state["_geo"]._replace(gdone=None))
    old_whole = dict(old_cells, _geo=old_cells["_geo"]._replace(g=g))
    del old_whole["_g_cells"]
    for st in (old_cells, old_whole):
        back = StageTerrain.__new__(StageTerrain)
        back.__setstate__(dict(st))
        np.testing.assert_array_equal(back._geo.gdone, src._geo.gdone)
        h2, s2 = np.empty_like(h), np.empty_like(s)
        back.fill_tiles(tiles, h2, s2)
        np.testing.assert_array_equal(h2, h)
        np.testing.assert_array_equal(s2, s)


def test_a_terrain_set_refuses_ready_tiles_it_cannot_place():
    """Ready tiles outside the grid, repeated, of the wrong block size or dtype are refused
    with a message naming the source, and the set keeps the terrain it had."""
    from physics.terrain import TerrainError, flat_terrain

    stage = tracks.generate(9)
    src = StageTerrain(stage)
    src.prebake(src.start_tiles()[:3])
    lin, h, s = src.ready_tiles()
    n = int(np.prod(tile_grid(src.shape)))
    ts = TerrainSet([flat_terrain()])
    for bad in (
        (lin[::-1].copy(), h, s),  # not ascending
        (np.array([0, 0, 1]), h, s),  # repeated
        (np.array([0, 1, n]), h, s),  # outside the grid
        (lin, h[:, :50], s),  # wrong block size
        (lin, h.astype(np.float32), s),  # heights the pool would round
        (lin, h, s.astype(np.int64)),  # surfaces the pool would cast
    ):
        src.ready_tiles = lambda bad=bad: bad
        with pytest.raises(TerrainError, match="ready_tiles"):
            ts.replace(0, src)
        assert ts.tiles_in_use == 0 and ts.sources[0] is not src
        with pytest.raises(TerrainError, match="ready_tiles"):
            TerrainSet([src])
