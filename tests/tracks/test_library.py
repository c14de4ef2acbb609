"""The built-in library: every stage loads, validates and bakes, and has its character."""

from __future__ import annotations

import numpy as np
import pytest

import tracks
from tracks.stage import MIN_RADIUS_M

REQUIRED = {
    "opener",
    "switchbacks",
    "sweepers",
    "mixed-surface",
    "forest",
    "rallycross",
    "proving-ground",
    "skidpad",
}


def _radius(stage: tracks.Stage) -> np.ndarray:
    with np.errstate(divide="ignore"):
        return 1.0 / np.abs(stage.path.curvature)


def _corners(stage: tracks.Stage, k_min: float) -> list[tuple[float, float, float]]:
    """Runs of |curvature| > k_min: (start s, end s, total turn in degrees)."""
    p = stage.path
    on = np.abs(p.curvature) > k_min
    out = []
    i = 0
    while i < on.size:
        if on[i]:
            j = i
            while j < on.size and on[j]:
                j += 1
            turn = float(np.sum(p.curvature[i:j]) * p.ds_m) * 180.0 / np.pi
            out.append((float(p.s_m[i]), float(p.s_m[j - 1]), turn))
            i = j
        else:
            i += 1
    return out


def _share(stage: tracks.Stage, surface: str) -> float:
    p = stage.path
    return float(np.mean(p.surface == tracks.surfaces.surface_id(surface)))


def test_library_lists_the_stages():
    names = tracks.list_stages()
    assert len(names) >= 8
    assert REQUIRED <= set(names)


@pytest.mark.parametrize("name", sorted(REQUIRED))
def test_every_stage_loads_validates_and_bakes(library, name):
    st = library[name]
    assert st.name == name and st.description
    assert st.par_time_s is not None and st.par_time_s > 0.0  # the heuristic driver's time
    assert float(np.min(_radius(st))) >= MIN_RADIUS_M
    assert st.timed_length_m > 0 and st.start_s_m < st.path.length_m
    terr = tracks.bake(st)
    assert np.all(np.isfinite(terr.heights_m))
    assert terr.heights_m.shape == terr.surface_ids.shape


def test_opener(library):
    st = library["opener"]
    assert st.timed_length_m == 1164.0  # as in the source game
    assert not st.closed
    assert _share(st, "gravel") > 0.75  # mostly one surface
    assert [f.kind for f in st.features] == ["crest"]  # one gentle crest
    assert st.features[0].height_m <= 1.5
    corners = _corners(st, 1.0 / 150.0)
    assert 4 <= len(corners) <= 10  # a few
    assert float(np.min(_radius(st))) >= 40.0  # medium, nothing tight


def test_switchbacks(library):
    st = library["switchbacks"]
    hairpins = [c for c in _corners(st, 1.0 / 30.0) if abs(c[2]) > 150.0]
    assert len(hairpins) >= 6
    assert float(np.min(_radius(st))) < 16.0
    assert float(np.ptp(st.path.z_m)) > 80.0  # a mountain climb


def test_sweepers(library):
    st = library["sweepers"]
    p = st.path
    assert float(np.min(_radius(st))) >= 120.0  # fast sweepers only
    jumps = [f for f in st.features if f.kind == "jump"]
    assert jumps and max(f.height_m for f in jumps) >= 1.5  # a big jump
    straight = np.abs(p.curvature) < 1.0 / 3000.0
    runs = np.diff(np.flatnonzero(np.diff(np.r_[0, straight.astype(int), 0])))[::2]
    assert runs.max() * p.ds_m >= 300.0  # long straights
    assert st.timed_length_m >= 3000.0


def test_mixed_surface_changes_mid_corner(library):
    st = library["mixed-surface"]
    assert set(st.surfaces_used) == {"packed-dirt", "gravel", "dust", "sand"}
    k = np.abs(st.path.curvature_at(np.array([sec.s_m for sec in st.sections[1:]])))
    assert np.sum(k > 1.0 / 100.0) >= 5  # surface changes inside corners


def test_forest_is_narrow_and_technical(library):
    st = library["forest"]
    assert float(np.max(st.path.half_width_m)) * 2.0 <= 6.0
    corners = _corners(st, 1.0 / 40.0)
    assert len(corners) >= 25


def test_rallycross_is_a_closed_loop(library):
    st = library["rallycross"]
    assert st.closed and st.laps >= 3
    assert st.finish_s_m == st.start_s_m
    assert st.timed_length_m == pytest.approx(st.laps * st.path.length_m)
    assert any(f.kind == "jump" for f in st.features)
    assert len(st.surfaces_used) >= 2


def test_proving_ground(library):
    st = library["proving-ground"]
    p = st.path
    assert st.timed_length_m >= 3000.0
    assert np.all(p.curvature == 0.0) and np.all(p.z_m == 0.0)
    assert np.all(p.y_m == 0.0)
    assert float(np.min(p.half_width_m)) * 2.0 >= 20.0
    assert st.surfaces_used == ("gravel",)


def test_skidpad(library):
    st = library["skidpad"]
    p = st.path
    r = np.hypot(p.x_m, p.y_m)
    assert st.closed
    np.testing.assert_allclose(r, 40.0, atol=0.005)  # the marked circle
    np.testing.assert_allclose(p.curvature, 1.0 / 40.0, rtol=2e-3)
    assert np.all(p.z_m == 0.0)
    assert st.path.length_m == pytest.approx(2 * np.pi * 40.0, rel=1e-5)


def test_library_stages_carry_par_times_that_do_not_change_their_identity():
    import tracks

    for name in tracks.list_stages():
        st = tracks.load_stage(name)
        assert st.par_time_s is not None and st.par_time_s > 0.0, name
        assert st.replace(par_time_s=None).digest() == st.digest()
        assert st.replace(par_time_s=st.par_time_s + 1.0).digest() == st.digest()
