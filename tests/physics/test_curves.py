"""Authored friction curves: validation, packed layout, kernels vs the Python reference."""

import itertools
import math
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from physics import layout as L
from physics.curves import (
    DEFAULT_TIRE_SET,
    TIRE_SETS,
    Curve,
    CurveFamily,
    TireCurves,
    curve_eval,
    curve_offset,
    family_eval,
    tire_set,
)
from physics.errors import ParameterError

ROOT = Path(__file__).resolve().parents[2]
XS = np.concatenate(
    [np.linspace(-1.5, 1.5, 301), [0.0, 1e-9, -1e-9, 2.0, -3.0, 10.0, 1e6, -1e6, math.inf]]
)
SELS = np.array([0.0, 0.01, 0.1, 0.15, 0.2, 0.3, 0.5, 0.75, 1.0, 1.3, 5.0, -0.2, -2.0, math.inf])


def packed(tc: TireCurves, n_cars: int = 1, k: int = 0) -> np.ndarray:
    p = np.zeros((n_cars, L.N_PARAMS_EXT))
    tc.pack_into(p[k])
    return p


def seed_lateral(alpha: float, peak: float = 0.18, clamp: float = 1.5) -> float:
    s = min(abs(alpha) / peak, clamp)
    return math.copysign(2 * s / (1 + s * s), alpha)


# ---------------------------------------------------------------- validation


@pytest.mark.parametrize(
    ("x", "y", "field"),
    [
        ((0.0,), (0.0,), "x"),  # too few knots
        (tuple(range(L.CURVE_KNOTS + 1)), (0.0,) * (L.CURVE_KNOTS + 1), "x"),  # too many
        ((0.0, 0.1, 0.2), (0.0, 1.0), "y"),  # lengths differ
        ((0.0, math.nan), (0.0, 1.0), "x"),  # not finite
        ((0.0, 0.1), (0.0, math.inf), "y"),
        ((0.0, "0.1"), (0.0, 1.0), "x"),  # not a number
        ((0.0, True), (0.0, 1.0), "x"),  # bool is not a number here
        ((0.0, 0.1), (0.0, None), "y"),
        ("01", (0.0, 1.0), "x"),  # a string is not a sequence of numbers
        ((0.05, 0.1), (0.0, 1.0), "x"),  # x[0] != 0
        ((0.0, 0.1), (0.1, 1.0), "y"),  # y[0] != 0
        ((0.0, 0.2, 0.1), (0.0, 1.0, 1.0), "x"),  # decreasing
        ((0.0, 0.1, 0.1), (0.0, 1.0, 1.0), "x"),  # repeated
        ((0.0, 0.1), (0.0, -0.1), "y"),  # below 0
        ((0.0, 0.1), (0.0, 1.6), "y"),  # above 1.5
    ],
)
def test_curve_validation_names_the_field(x, y, field):
    with pytest.raises(ParameterError) as e:
        Curve(x, y)
    assert e.value.owner == "Curve"
    assert e.value.field == field
    assert field in str(e.value)


def test_valid_curve_is_coerced_to_float_tuples():
    c = Curve([0, np.float32(0.5), 1], [0, 1, np.int64(1)])
    assert c.x == (0.0, 0.5, 1.0) and c.y == (0.0, 1.0, 1.0)
    assert all(type(v) is float for v in c.x + c.y)
    assert c.peak == 1.0 and c.peak_x == 0.5
    assert Curve((0.0, 0.1), (0.0, 1.5)).peak == 1.5  # bounds inclusive


UNIT = Curve((0.0, 0.1), (0.0, 1.0))


@pytest.mark.parametrize(
    ("selectors", "curves", "field"),
    [
        ((), (), "curves"),  # no curves
        ((0.0,) * 5, (UNIT,) * (L.CURVE_FAMILY + 1), "curves"),  # too many
        ((0.0, 0.1), (UNIT,), "selectors"),  # lengths differ
        ((0.0,), ("curve",), "curves"),  # not a Curve
        ((0.0,), UNIT, "curves"),  # not a sequence
        ((0.1,), (UNIT,), "selectors"),  # selectors[0] != 0
        ((0.0, math.inf), (UNIT, UNIT), "selectors"),  # not finite
        ((0.0, 0.2, 0.1), (UNIT,) * 3, "selectors"),  # decreasing
        ((0.0, 0.0), (UNIT, UNIT), "selectors"),  # repeated
    ],
)
def test_family_validation_names_the_field(selectors, curves, field):
    with pytest.raises(ParameterError) as e:
        CurveFamily(selectors, curves)
    assert e.value.owner == "CurveFamily"
    assert e.value.field == field


def test_tire_curves_must_be_normalized():
    low = CurveFamily((0.0,), (Curve((0.0, 0.1), (0.0, 0.9)),))
    ok = CurveFamily((0.0,), (UNIT,))
    for kwargs, field in (
        ({"longitudinal": low, "lateral": ok}, "longitudinal"),
        ({"longitudinal": ok, "lateral": low}, "lateral"),
    ):
        with pytest.raises(ParameterError, match="normalized") as e:
            TireCurves(**kwargs)
        assert e.value.field == field
    # only curve 0 must peak at 1: the others may be lower (or higher)
    fam = CurveFamily((0.0, 0.5), (UNIT, Curve((0.0, 0.1), (0.0, 1.2))))
    assert TireCurves(fam, fam).name == "custom"
    near = CurveFamily((0.0,), (Curve((0.0, 0.1), (0.0, 1.0 + 5e-10)),))
    TireCurves(near, near)
    with pytest.raises(ParameterError) as e:
        TireCurves(ok, "not a family")
    assert e.value.field == "lateral"
    with pytest.raises(ParameterError) as e:
        TireCurves(ok, ok, name="")
    assert e.value.field == "name"


@pytest.mark.parametrize(
    "row",
    [
        np.zeros(L.N_PARAMS_EXT - 1),
        np.zeros(L.N_PARAMS_EXT, dtype=np.float32),
        np.zeros((1, L.N_PARAMS_EXT)),
        [0.0] * L.N_PARAMS_EXT,
    ],
)
def test_pack_into_rejects_bad_rows(row):
    with pytest.raises(ParameterError) as e:
        tire_set("rally").pack_into(row)
    assert e.value.field == "row"


def test_tire_set_lookup():
    assert DEFAULT_TIRE_SET == "rally"
    assert {"rally", "tarmac", "linear"} <= set(TIRE_SETS)
    for name, tc in TIRE_SETS.items():
        assert tire_set(name) is tc and tc.name == name
    with pytest.raises(ParameterError) as e:
        tire_set("gravel-ish")
    assert e.value.field == "name"
    for name in TIRE_SETS:
        assert name in str(e.value)


# ---------------------------------------------------------------- packed layout


def test_pack_layout_columns():
    tc = tire_set("rally")
    row = np.full(L.N_PARAMS_EXT, 7.0)
    tc.pack_into(row)
    for fam, base in ((tc.longitudinal, L.PX_CURVE_LONG), (tc.lateral, L.PX_CURVE_LAT)):
        block = row[base : base + L.CURVE_SET_SIZE]
        assert block[0] == len(fam.curves)
        assert block[1] == (1.0 if len({c.x for c in fam.curves}) == 1 else 0.0)
        sel = block[2 : 2 + L.CURVE_FAMILY]
        assert tuple(sel[: len(fam.selectors)]) == fam.selectors
        assert np.all(sel[len(fam.selectors) :] == 0.0)
        for c in range(L.CURVE_FAMILY):
            off = curve_offset(base, c)
            assert off == base + 2 + 2 * L.CURVE_FAMILY + c * L.CURVE_SIZE
            cv = row[off : off + L.CURVE_SIZE]
            if c >= len(fam.curves):
                assert np.all(cv == 0.0)
                continue
            curve = fam.curves[c]
            n = len(curve.x)
            assert cv[0] == n
            assert tuple(cv[1 : 1 + n]) == curve.x
            assert tuple(cv[1 + L.CURVE_KNOTS : 1 + L.CURVE_KNOTS + n]) == curve.y
            assert np.all(cv[1 + n : 1 + L.CURVE_KNOTS] == 0.0)
            assert np.all(cv[1 + L.CURVE_KNOTS + n : 1 + 2 * L.CURVE_KNOTS] == 0.0)
            # the slope of each piece, packed once for the kernels
            slopes = cv[1 + 2 * L.CURVE_KNOTS :]
            want = np.diff(curve.y) / np.diff(curve.x)
            assert np.array_equal(slopes[: n - 1], want) and np.all(slopes[n - 1 :] == 0.0)
    # nothing outside the two blocks is touched
    untouched = np.ones(L.N_PARAMS_EXT, dtype=bool)
    untouched[L.PX_CURVE_LONG : L.PX_CURVE_LAT + L.CURVE_SET_SIZE] = False
    assert np.all(row[untouched] == 7.0)


def test_repacking_a_smaller_set_clears_the_old_one():
    row = np.zeros(L.N_PARAMS_EXT)
    tire_set("rally").pack_into(row)
    tire_set("linear").pack_into(row)
    fresh = np.zeros(L.N_PARAMS_EXT)
    tire_set("linear").pack_into(fresh)
    assert np.array_equal(row, fresh)


@pytest.mark.parametrize("name", sorted(TIRE_SETS))
def test_curves_packed_into_a_batch_row_evaluate_as_packed_alone(name):
    # Curve.value / CurveFamily.value pack the curve alone and call the kernels: packed into
    # row 1 of a 3-car batch beside zero rows, every selector and slip gives the same bits
    tc = tire_set(name)
    p = packed(tc, n_cars=3, k=1)
    for fam, base in ((tc.longitudinal, L.PX_CURVE_LONG), (tc.lateral, L.PX_CURVE_LAT)):
        # selectors: the grid above plus every knot selector and midpoints between families
        sels = list(SELS) + list(fam.selectors)
        sels += [0.5 * (a + b) for a, b in itertools.pairwise(fam.selectors)]
        for sel in sels:
            for x in XS:
                got = family_eval(p, 1, base, x, sel)
                assert got == fam.value(x, sel), (name, base, x, sel)
        for c, curve in enumerate(fam.curves):
            off = curve_offset(base, c)
            knots = [*curve.x, *(-v for v in curve.x)]
            for x in [*XS, *knots]:
                assert curve_eval(p, 1, off, x) == curve.value(x)
    # the other car rows are zero: empty families evaluate to 0
    assert family_eval(p, 0, L.PX_CURVE_LONG, 0.1, 0.0) == 0.0


def test_py_func_bit_identical_to_compiled():
    p = packed(tire_set("rally"))
    for base in (L.PX_CURVE_LONG, L.PX_CURVE_LAT):
        a = np.array([family_eval(p, 0, base, x, s) for x in XS for s in SELS])
        b = np.array([family_eval.py_func(p, 0, base, x, s) for x in XS for s in SELS])
        assert a.tobytes() == b.tobytes()
        c = np.array([curve_eval(p, 0, curve_offset(base, 1), x) for x in XS])
        d = np.array([curve_eval.py_func(p, 0, curve_offset(base, 1), x) for x in XS])
        assert c.tobytes() == d.tobytes()


_SCRIPT = """
import hashlib
import numpy as np
from physics import layout as L
from physics.curves import TIRE_SETS, family_eval
xs = np.linspace(-1.3, 1.3, 157)
ss = np.linspace(0.0, 1.2, 23)
h = hashlib.blake2b()
for name in sorted(TIRE_SETS):
    p = np.zeros((1, L.N_PARAMS_EXT))
    TIRE_SETS[name].pack_into(p[0])
    for base in (L.PX_CURVE_LONG, L.PX_CURVE_LAT):
        v = np.array([family_eval(p, 0, base, x, s) for x in xs for s in ss])
        h.update(v.tobytes())
print(h.hexdigest())
"""


def test_bit_identical_with_numba_disabled():
    out = {}
    for flag in ("0", "1"):
        env = dict(os.environ, NUMBA_DISABLE_JIT=flag)
        r = subprocess.run(
            [sys.executable, "-c", _SCRIPT],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert r.returncode == 0, r.stderr
        out[flag] = r.stdout.strip()
    assert out["0"] == out["1"]


# ---------------------------------------------------------------- shape of the curves


@pytest.mark.parametrize("name", sorted(TIRE_SETS))
def test_odd_symmetry_and_saturation(name):
    tc = tire_set(name)
    p = packed(tc)
    for fam, base in ((tc.longitudinal, L.PX_CURVE_LONG), (tc.lateral, L.PX_CURVE_LAT)):
        for sel in SELS:
            for x in XS:
                assert family_eval(p, 0, base, -x, sel) == -family_eval(p, 0, base, x, sel)
        assert family_eval(p, 0, base, 0.0, 0.3) == 0.0
        for c, curve in enumerate(fam.curves):
            off = curve_offset(base, c)
            last_x, last_y = curve.x[-1], curve.y[-1]
            for x in (last_x, last_x * 1.01, last_x + 1.0, 50.0, math.inf):
                assert curve_eval(p, 0, off, x) == last_y
                assert curve_eval(p, 0, off, -x) == -last_y
            # the knots themselves are hit exactly
            for kx, ky in zip(curve.x, curve.y, strict=True):
                assert curve_eval(p, 0, off, kx) == ky


@pytest.mark.parametrize("name", sorted(TIRE_SETS))
def test_curve_zero_peaks_at_one_at_the_documented_slip(name):
    tc = tire_set(name)
    expected = {
        "rally": (0.15, 0.18),
        "tarmac": (0.10, 0.12),
        "linear": (0.15, 0.18),
    }
    p = packed(tc)
    if name in expected:
        kappa, alpha = expected[name]
        assert tc.peak_slip_ratio == pytest.approx(kappa, abs=1e-12)
        assert tc.peak_slip_angle_rad == pytest.approx(alpha, abs=1e-12)
    for base, fam, xp in (
        (L.PX_CURVE_LONG, tc.longitudinal, tc.peak_slip_ratio),
        (L.PX_CURVE_LAT, tc.lateral, tc.peak_slip_angle_rad),
    ):
        assert abs(family_eval(p, 0, base, xp, 0.0) - 1.0) <= 1e-9
        assert abs(family_eval(p, 0, base, -xp, 0.0) + 1.0) <= 1e-9
        grid = np.linspace(-3.0, 3.0, 2001)
        assert max(abs(family_eval(p, 0, base, x, 0.0)) for x in grid) <= 1.0 + 1e-9
        assert fam.curves[0].peak == pytest.approx(1.0, abs=1e-9)


def test_rally_lateral_matches_the_seed_curve():
    lat = tire_set("rally").lateral
    for alpha in np.linspace(0.0, 0.5, 1001):
        assert abs(lat.value(alpha, 0.0) - seed_lateral(alpha)) <= 0.02, alpha
    assert lat.value(0.18, 0.0) == 1.0
    assert lat.value(0.4, 0.0) == pytest.approx(2 * 1.5 / (1 + 2.25), abs=1e-12)


def test_rally_longitudinal_shape():
    lon = tire_set("rally").longitudinal
    assert lon.value(0.15, 0.0) == 1.0
    assert lon.value(1.0, 0.0) == pytest.approx(0.8, abs=0.02)  # a locked wheel slides at 0.8
    assert lon.value(-1.0, 0.0) == pytest.approx(-0.8, abs=0.02)
    # sliding sideways costs longitudinal grip, progressively
    peaks = [max(lon.value(k, a) for k in np.linspace(0, 1, 201)) for a in (0.0, 0.2, 0.5, 1.0)]
    assert peaks[0] == 1.0 and peaks[0] > peaks[1] > peaks[2] and peaks[3] == peaks[2]


def test_combined_slip_costs_lateral_grip():
    tc = tire_set("rally")
    p = packed(tc)
    for alpha in (0.05, 0.1, 0.18, 0.3, 0.6):
        v0 = family_eval(p, 0, L.PX_CURVE_LAT, alpha, 0.0)
        for kappa in (1.0, -1.0, 1.5):  # locked, and wild wheelspin
            assert abs(family_eval(p, 0, L.PX_CURVE_LAT, alpha, kappa)) <= 0.35 * abs(v0)
        # monotone loss of grip as the slip ratio grows
        vals = [family_eval(p, 0, L.PX_CURVE_LAT, alpha, k) for k in np.linspace(0, 1.2, 49)]
        assert all(b <= a for a, b in itertools.pairwise(vals))
    # linear interpolation between the bracketing families
    mid = family_eval(p, 0, L.PX_CURVE_LAT, 0.18, 0.325)
    assert mid == pytest.approx(0.5 * (0.85 + 0.55), abs=1e-12)


def test_linear_set_has_no_coupling():
    tc = tire_set("linear")
    for fam, xp in ((tc.longitudinal, 0.15), (tc.lateral, 0.18)):
        assert len(fam.curves) == 1
        for sel in SELS:
            assert fam.value(0.5 * xp, sel) == 0.5
            assert fam.value(3 * xp, sel) == 1.0


# ---------------------------------------------------------------- property test


@st.composite
def families(draw):
    n_curves = draw(st.integers(1, L.CURVE_FAMILY))
    curves = []
    for _ in range(n_curves):
        n = draw(st.integers(2, L.CURVE_KNOTS))
        steps = draw(st.lists(st.floats(1e-3, 1.0), min_size=n - 1, max_size=n - 1))
        x = [0.0]
        for s in steps:
            x.append(x[-1] + s)
        y = [0.0, *draw(st.lists(st.floats(0.0, 1.5), min_size=n - 1, max_size=n - 1))]
        curves.append(Curve(tuple(x), tuple(y)))
    sel_steps = draw(st.lists(st.floats(1e-3, 1.0), min_size=n_curves - 1, max_size=n_curves - 1))
    sel = [0.0]
    for s in sel_steps:
        sel.append(sel[-1] + s)
    return CurveFamily(tuple(sel), tuple(curves))


@given(
    families(),
    st.floats(allow_nan=False, min_value=-1e6, max_value=1e6),
    st.floats(allow_nan=False, allow_infinity=False, min_value=-10.0, max_value=10.0),
)
@settings(max_examples=300, deadline=None)
def test_random_families_are_finite_odd_and_bounded(fam, x, sel):
    p = np.zeros((2, L.N_PARAMS_EXT))
    fam.pack_into(p[1], L.PX_CURVE_LAT)
    v = family_eval(p, 1, L.PX_CURVE_LAT, x, sel)
    assert math.isfinite(v)
    assert family_eval(p, 1, L.PX_CURVE_LAT, -x, sel) == -v
    assert family_eval(p, 1, L.PX_CURVE_LAT, x, -sel) == v
    assert abs(v) <= fam.peak
    if x != 0.0:
        assert v == 0.0 or math.copysign(1.0, v) == math.copysign(1.0, x)
    assert v == fam.value(x, sel)


def test_family_eval_seg_matches_family_eval_and_its_shared_x_fast_path():
    """The kernel's linear-piece evaluation: the value equals family_eval, the piece is exact
    on [lo, hi], and the shared-knot fast path is bit-identical to the general search."""
    from physics.curves import family_eval_seg

    for name in TIRE_SETS:
        row = np.zeros((1, L.N_PARAMS_EXT))
        tire_set(name).pack_into(row[0])
        general = row.copy()
        general[0, L.PX_CURVE_LONG + 1] = 0.0
        general[0, L.PX_CURVE_LAT + 1] = 0.0
        for base in (L.PX_CURVE_LONG, L.PX_CURVE_LAT):
            for x in np.linspace(-1.2, 1.2, 97):
                for sel in (0.0, 0.03, 0.1, 0.2, 0.35, 0.7, 2.0):
                    v, d, lo, hi = family_eval_seg(row, 0, base, x, sel)
                    assert family_eval_seg(general, 0, base, x, sel) == (v, d, lo, hi)
                    assert v == pytest.approx(family_eval(row, 0, base, x, sel), abs=1e-12)
                    assert lo <= x <= hi
                    for xq in (lo, 0.5 * (lo + hi) if hi < 1e299 else x + 0.5, min(hi, 1e3)):
                        if np.sign(xq) == np.sign(x) or xq == 0.0:
                            want = family_eval(row, 0, base, xq, sel)
                            assert v + d * (xq - x) == pytest.approx(want, abs=1e-9)
