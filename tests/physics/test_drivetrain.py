"""Drivetrain parameters and the numba engine and gearbox helpers (seed file 003)."""

import os
import subprocess
import sys
from dataclasses import fields

import numpy as np
import pytest

from physics import layout as L
from physics.drivetrain import (
    PX_REV_LIMIT,
    RAD_S_TO_RPM,
    RALLY_CAR_DRIVETRAIN,
    SMALL_CAR,
    Drivetrain,
    drive_torque_nm,
    engine_rpm_from_wheels,
    engine_torque_nm,
    gear_ratio,
    select_gear,
    update_gearbox,
)
from physics.errors import ParameterError

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def packed(dt: Drivetrain = SMALL_CAR) -> np.ndarray:
    p = np.zeros((1, L.N_PARAMS_EXT))
    dt.pack_into(p[0])
    return p


def istate(gear: int = 1, clutch: int = 0) -> np.ndarray:
    ist = np.zeros((1, L.N_ISTATE), np.int64)
    ist[0, L.I_GEAR] = gear
    ist[0, L.I_CLUTCH] = clutch
    return ist


def torque_at(dt: Drivetrain, rpm: float) -> float:
    """Pure-Python reference of engine_torque_nm (bit-identical arithmetic): linear between
    curve points from idle up, held at the last point's value up to the limiter, 0.0 above."""
    r = max(float(rpm), dt.torque_curve[0][0])  # idle: the curve's first point
    if r > dt.rev_limit_rpm:
        return 0.0
    pts = dt.torque_curve
    for i in range(1, len(pts)):
        r1, t1 = pts[i]
        if r <= r1:
            r0, t0 = pts[i - 1]
            return t0 + (t1 - t0) * ((r - r0) / (r1 - r0))
    return pts[-1][1]


def overall_ratio(dt: Drivetrain, gear: int) -> float:
    """Pure-Python reference of gear_ratio: signed gear x final-drive ratio."""
    if gear >= 1:
        return dt.gears[gear - 1] * dt.final_drive if gear <= dt.n_gears else 0.0
    if gear == -1:
        return -(dt.reverse_ratio * dt.final_drive)
    return 0.0


# ---------------------------------------------------------------------- defaults


def test_default_is_the_seeds_small_car():
    d = Drivetrain()
    assert d == SMALL_CAR
    assert d.torque_curve == ((1000.0, 120.0), (3000.0, 200.0))
    assert d.gears == (3.5, 2.2, 1.5, 1.1, 0.9) and d.n_gears == 5
    assert d.reverse_ratio == 3.2 and d.final_drive == 3.7
    assert (d.shift_up_rpm, d.shift_down_rpm) == (5500.0, 2000.0)
    assert d.auto_shift is True
    # the seed's 12-step clutch at 60 Hz = 0.2 s = 96 substeps of 1/480 s
    assert d.clutch_s == pytest.approx(12 / 60) and d.clutch_substeps == 96
    assert (d.diff_front, d.diff_rear, d.diff_centre) == ("open", "open", "open")
    assert d.rev_limit_rpm == 6000.0 and d.engine_brake == 0.0


def test_rally_car_drivetrain():
    d = RALLY_CAR_DRIVETRAIN
    assert d.torque_curve[-1] == (6500.0, 280.0) and d.rev_limit_rpm == 7200.0
    assert d.n_gears == 6 and d.final_drive == 4.1
    assert (d.diff_front, d.diff_rear, d.diff_centre) == ("open", "limited", "limited")
    p = packed(d)
    assert p[0, L.PX_DIFF_CENTRE] == L.DIFF_LIMITED and p[0, L.PX_DIFF_FRONT] == L.DIFF_OPEN
    assert p[0, L.PX_FRONT_SPLIT] == 0.45 and p[0, L.PX_DIFF_COUPLING] == 400.0


def test_lists_are_normalised_to_tuples():
    d = Drivetrain(torque_curve=[[1000, 100], [4000, 150]], gears=[3, 2])
    assert d.torque_curve == ((1000.0, 100.0), (4000.0, 150.0)) and d.gears == (3.0, 2.0)
    hash(d)


# ---------------------------------------------------------------------- validation

BAD = [
    ("torque_curve", {"torque_curve": ((1000.0, 100.0),)}),
    ("torque_curve", {"torque_curve": tuple((1000.0 * (i + 1), 100.0) for i in range(9))}),
    ("torque_curve", {"torque_curve": ((1000.0, 100.0), (1000.0, 150.0))}),
    ("torque_curve", {"torque_curve": ((2000.0, 100.0), (1000.0, 150.0))}),
    ("torque_curve", {"torque_curve": ((0.0, 100.0), (3000.0, 150.0))}),
    ("torque_curve", {"torque_curve": ((1000.0, -1.0), (3000.0, 150.0))}),
    ("torque_curve", {"torque_curve": ((1000.0, float("nan")), (3000.0, 150.0))}),
    ("torque_curve", {"torque_curve": ((1000.0, 100.0, 5.0), (3000.0, 150.0))}),
    ("torque_curve", {"torque_curve": "curve"}),
    ("rev_limit_rpm", {"rev_limit_rpm": 2999.0, "shift_up_rpm": 2500.0}),
    ("rev_limit_rpm", {"rev_limit_rpm": float("inf")}),
    ("shift_up_rpm", {"rev_limit_rpm": 5000.0}),
    ("shift_up_rpm", {"shift_up_rpm": 900.0, "shift_down_rpm": 800.0}),
    ("shift_down_rpm", {"shift_down_rpm": 1000.0}),
    ("shift_down_rpm", {"shift_down_rpm": 5500.0}),
    ("gears", {"gears": ()}),
    ("gears", {"gears": (4.0, 3.0, 2.0, 1.5, 1.2, 1.0, 0.8)}),
    ("gears", {"gears": (3.0, 0.0)}),
    ("gears", {"gears": (2.0, 3.0)}),
    ("gears", {"gears": (2.0, True)}),
    ("reverse_ratio", {"reverse_ratio": -0.1}),
    ("final_drive", {"final_drive": 0.0}),
    ("final_drive", {"final_drive": "3.7"}),
    ("auto_shift", {"auto_shift": 1}),
    ("clutch_s", {"clutch_s": 0.2001}),
    ("clutch_s", {"clutch_s": -1 / 480}),
    ("clutch_s", {"clutch_s": float("nan")}),
    ("diff_front", {"diff_front": "welded"}),
    ("diff_rear", {"diff_rear": 0}),
    ("diff_centre", {"diff_centre": "LOCKED"}),
    ("diff_coupling_n_per_mps", {"diff_coupling_n_per_mps": -1.0}),
    ("front_split", {"front_split": 1.01}),
    ("front_split", {"front_split": -0.01}),
    ("engine_brake", {"engine_brake": 1.5}),
    ("engine_brake", {"engine_brake": -0.1}),
]


@pytest.mark.parametrize("field,changes", BAD, ids=[f"{f}-{i}" for i, (f, _) in enumerate(BAD)])
def test_invalid_field_raises_naming_it(field, changes):
    with pytest.raises(ParameterError) as e:
        Drivetrain(**changes)
    assert e.value.field == field
    assert e.value.owner == "Drivetrain"
    assert field in str(e.value) and e.value.rule


def test_every_field_has_a_validation_case():
    assert {f for f, _ in BAD} == {f.name for f in fields(Drivetrain)}


def test_clutch_is_never_rounded_silently():
    with pytest.raises(ParameterError, match="whole number"):
        Drivetrain(clutch_s=0.201)
    assert Drivetrain(clutch_s=5 / 480).clutch_substeps == 5
    assert Drivetrain(clutch_s=0.0).clutch_substeps == 0


def test_pack_into_rejects_short_or_wrong_rows():
    for row in (np.zeros(L.N_PARAMS_EXT - 1), np.zeros(L.N_PARAMS), np.zeros(L.N_PARAMS_EXT, int)):
        with pytest.raises(ParameterError) as e:
            SMALL_CAR.pack_into(row)
        assert e.value.field == "row"
    with pytest.raises(ParameterError):
        SMALL_CAR.pack_into(np.zeros((1, L.N_PARAMS_EXT)))


def test_pack_writes_the_named_columns():
    p = packed()
    assert p[0, L.PX_DRIVETRAIN] == 1.0 and p[0, L.PX_AUTO_SHIFT] == 1.0
    assert p[0, L.PX_N_TORQUE] == 2 and p[0, L.PX_N_GEARS] == 5
    assert list(p[0, L.PX_TQ_RPM : L.PX_TQ_RPM + 2]) == [1000.0, 3000.0]
    assert list(p[0, L.PX_GEARS : L.PX_GEARS + 6]) == [3.5, 2.2, 1.5, 1.1, 0.9, 0.0]
    assert p[0, L.PX_CLUTCH_SUBSTEPS] == 96 and p[0, PX_REV_LIMIT] == 6000.0
    assert p[0, L.PX_DIFF_REAR] == L.DIFF_OPEN
    assert PX_REV_LIMIT < L.PX_CURVE_LONG  # the borrowed slot is in the free range
    assert not packed(Drivetrain(auto_shift=False))[0, L.PX_AUTO_SHIFT]
    assert packed(Drivetrain(diff_rear="locked"))[0, L.PX_DIFF_REAR] == L.DIFF_LOCKED
    # only the drivetrain's columns (and the borrowed rev-limit slot) are written
    written = np.flatnonzero(packed(RALLY_CAR_DRIVETRAIN)[0])
    assert written.min() >= L.PX_DRIVETRAIN and written.max() <= PX_REV_LIMIT


# ---------------------------------------------------------------------- engine torque

RPMS = [0.0, 500.0, 999.0, 1000.0, 1000.5, 1777.7, 2500.0, 2999.0, 3000.0, 3000.1, 4200.0]
RPMS += [5000.0, 5999.9, 6000.0, 6000.1, 6400.0, 6500.0, 6500.1, 7199.0, 7200.0, 7200.01, 9e4]


@pytest.mark.parametrize("dt", [SMALL_CAR, RALLY_CAR_DRIVETRAIN], ids=["small", "rally"])
def test_engine_torque_matches_the_python_reference_exactly(dt):
    p = packed(dt)
    for rpm in RPMS:
        assert engine_torque_nm(p, 0, rpm) == torque_at(dt, rpm), rpm


def test_engine_torque_shape():
    d = SMALL_CAR
    assert torque_at(d, 0.0) == 120.0  # a standstill engine reads idle torque
    assert torque_at(d, 2000.0) == pytest.approx(160.0)
    assert torque_at(d, 3000.0) == 200.0 and torque_at(d, 5500.0) == 200.0  # held past the curve
    assert torque_at(d, 6000.0) == 200.0 and torque_at(d, 6000.001) == 0.0  # cut at the limit
    r = RALLY_CAR_DRIVETRAIN
    assert torque_at(r, 4000.0) == pytest.approx(305.0)
    assert torque_at(r, 5750.0) == pytest.approx(300.0)
    assert torque_at(r, 7000.0) == 280.0


# ---------------------------------------------------------------------- ratios and rpm


def test_gear_ratio():
    p = packed()
    assert gear_ratio(p, 0, 1) == pytest.approx(3.5 * 3.7)
    assert gear_ratio(p, 0, 5) == pytest.approx(0.9 * 3.7)
    assert gear_ratio(p, 0, 0) == 0.0
    assert gear_ratio(p, 0, -1) == pytest.approx(-3.2 * 3.7)
    assert gear_ratio(p, 0, 6) == 0.0 and gear_ratio(p, 0, -2) == 0.0
    for g in (-1, 0, 1, 3, 5, 6):
        assert gear_ratio(p, 0, g) == overall_ratio(SMALL_CAR, g)
    assert gear_ratio(packed(Drivetrain(reverse_ratio=0.0)), 0, -1) == 0.0


def test_engine_rpm_from_wheels():
    p = packed()
    omega = 20.0  # rad/s
    expected = 20.0 * 3.5 * 3.7 * 60.0 / (2.0 * np.pi)
    assert engine_rpm_from_wheels(p, 0, omega, 1) == pytest.approx(expected, rel=1e-15)
    assert engine_rpm_from_wheels(p, 0, -omega, 1) == engine_rpm_from_wheels(p, 0, omega, 1)
    assert engine_rpm_from_wheels(p, 0, omega, -1) == pytest.approx(expected * 3.2 / 3.5)
    assert engine_rpm_from_wheels(p, 0, 0.0, 1) == 1000.0  # floored at idle
    assert engine_rpm_from_wheels(p, 0, 50.0, 0) == 1000.0  # neutral idles
    assert RAD_S_TO_RPM == pytest.approx(60.0 / (2.0 * np.pi), rel=1e-16)


# ---------------------------------------------------------------------- gearbox


def test_auto_shift_up_then_clutch_blocks_for_exactly_clutch_substeps():
    p = packed()
    n = SMALL_CAR.clutch_substeps
    ist = istate(gear=1)
    update_gearbox(p, 0, ist, 5500.0)  # not above the threshold
    assert ist[0, L.I_GEAR] == 1 and ist[0, L.I_CLUTCH] == 0
    update_gearbox(p, 0, ist, 5500.5)
    assert ist[0, L.I_GEAR] == 2 and ist[0, L.I_CLUTCH] == n
    for i in range(n):
        update_gearbox(p, 0, ist, 5800.0)
        assert ist[0, L.I_GEAR] == 2 and ist[0, L.I_CLUTCH] == n - 1 - i
    update_gearbox(p, 0, ist, 5800.0)  # clutch closed: the next shift happens
    assert ist[0, L.I_GEAR] == 3 and ist[0, L.I_CLUTCH] == n


def test_auto_shift_down_and_limits():
    p = packed()
    ist = istate(gear=3)
    update_gearbox(p, 0, ist, 2000.0)
    assert ist[0, L.I_GEAR] == 3
    update_gearbox(p, 0, ist, 1999.0)
    assert ist[0, L.I_GEAR] == 2 and ist[0, L.I_CLUTCH] == 96
    ist = istate(gear=1)
    update_gearbox(p, 0, ist, 1000.0)  # no gear below first
    assert ist[0, L.I_GEAR] == 1 and ist[0, L.I_CLUTCH] == 0
    ist = istate(gear=5)
    update_gearbox(p, 0, ist, 6000.0)  # no gear above top
    assert ist[0, L.I_GEAR] == 5 and ist[0, L.I_CLUTCH] == 0
    for g in (0, -1):  # forward gears only
        ist = istate(gear=g)
        update_gearbox(p, 0, ist, 5900.0)
        update_gearbox(p, 0, ist, 1000.0)
        assert ist[0, L.I_GEAR] == g and ist[0, L.I_CLUTCH] == 0


def test_manual_gearbox_does_not_shift_but_clutch_still_closes():
    p = packed(Drivetrain(auto_shift=False))
    ist = istate(gear=2, clutch=2)
    for expected_clutch in (1, 0, 0):
        update_gearbox(p, 0, ist, 5900.0)
        assert ist[0, L.I_GEAR] == 2 and ist[0, L.I_CLUTCH] == expected_clutch


def test_select_gear():
    p = packed()
    ist = istate(gear=1)
    assert select_gear(p, 0, ist, -1) and ist[0, L.I_GEAR] == -1 and ist[0, L.I_CLUTCH] == 96
    ist[0, L.I_CLUTCH] = 7
    assert select_gear(p, 0, ist, -1) and ist[0, L.I_CLUTCH] == 7  # same gear: no new cut
    assert select_gear(p, 0, ist, 0) and ist[0, L.I_GEAR] == 0
    assert select_gear(p, 0, ist, 5) and ist[0, L.I_GEAR] == 5


@pytest.mark.parametrize("gear", [-2, 6, 99, -50])
def test_select_gear_refusals_leave_state_unchanged(gear):
    p = packed()
    ist = istate(gear=3, clutch=4)
    ist[0, L.I_SUBSTEPS] = 17
    before = ist.copy()
    assert not select_gear(p, 0, ist, gear)
    assert np.array_equal(ist, before)


def test_reverse_needs_a_reverse_ratio():
    p = packed(Drivetrain(reverse_ratio=0.0))
    ist = istate(gear=1)
    before = ist.copy()
    assert not select_gear(p, 0, ist, -1)
    assert np.array_equal(ist, before)


# ---------------------------------------------------------------------- drive torque


def test_drive_torque_forward_reverse_neutral_clutch():
    p = packed()
    rpm = 2000.0
    fwd = drive_torque_nm(p, 0, istate(gear=1), rpm, 1.0)
    assert fwd == pytest.approx(160.0 * 3.5 * 3.7)
    assert drive_torque_nm(p, 0, istate(gear=1), rpm, 0.5) == pytest.approx(fwd / 2)
    assert drive_torque_nm(p, 0, istate(gear=1), rpm, 3.0) == fwd  # throttle clamped
    assert drive_torque_nm(p, 0, istate(gear=1), rpm, -1.0) == 0.0
    rev = drive_torque_nm(p, 0, istate(gear=-1), rpm, 1.0)
    assert rev < 0.0 and rev == pytest.approx(-160.0 * 3.2 * 3.7)
    assert drive_torque_nm(p, 0, istate(gear=0), rpm, 1.0) == 0.0
    assert drive_torque_nm(p, 0, istate(gear=1, clutch=1), rpm, 1.0) == 0.0
    assert drive_torque_nm(p, 0, istate(gear=-1, clutch=5), rpm, 1.0) == 0.0
    assert drive_torque_nm(p, 0, istate(gear=1), 6500.0, 1.0) == 0.0  # past the rev limit
    # standstill: the engine idles and still pulls away
    rpm0 = engine_rpm_from_wheels(p, 0, 0.0, 1)
    assert drive_torque_nm(p, 0, istate(gear=1), rpm0, 1.0) == pytest.approx(120.0 * 3.5 * 3.7)


def test_engine_braking():
    p = packed(Drivetrain(engine_brake=0.25))
    assert drive_torque_nm(packed(), 0, istate(gear=2), 2000.0, 0.0) == 0.0  # default: none
    eb = drive_torque_nm(p, 0, istate(gear=2), 2000.0, 0.0)
    assert eb == pytest.approx(-0.25 * 160.0 * 2.2 * 3.7)  # opposes forward motion
    assert drive_torque_nm(p, 0, istate(gear=-1), 2000.0, 0.0) > 0.0  # opposes reversing
    assert drive_torque_nm(p, 0, istate(gear=2), 2000.0, 1.0) == pytest.approx(160.0 * 2.2 * 3.7)
    # engine drag remains above the rev limit (fuel cut), none at idle (no creep at a standstill)
    assert drive_torque_nm(p, 0, istate(gear=2), 6500.0, 0.0) == pytest.approx(-0.25 * 200 * 8.14)
    assert drive_torque_nm(p, 0, istate(gear=1), 1000.0, 0.0) == 0.0
    assert drive_torque_nm(p, 0, istate(gear=2, clutch=3), 3000.0, 0.0) == 0.0


# ---------------------------------------------------------------------- JIT off

JIT_SCRIPT = """
import numpy as np
from physics import layout as L
from physics.drivetrain import (RALLY_CAR_DRIVETRAIN, SMALL_CAR, Drivetrain, drive_torque_nm,
    engine_rpm_from_wheels, engine_torque_nm, gear_ratio, select_gear, update_gearbox)
out = []
for dt in (SMALL_CAR, RALLY_CAR_DRIVETRAIN, Drivetrain(engine_brake=0.3)):
    p = np.zeros((1, L.N_PARAMS_EXT))
    dt.pack_into(p[0])
    ist = np.zeros((1, L.N_ISTATE), np.int64)
    ist[0, L.I_GEAR] = 1
    for rpm in (0.0, 1234.5678, 2999.9, 4321.0, 6100.0, 7100.0, 8000.0):
        out.append(engine_torque_nm(p, 0, rpm))
    for g in (-1, 0, 1, 2, 7):
        out.append(gear_ratio(p, 0, g))
    for i in range(300):
        omega = 0.37 * i
        rpm = engine_rpm_from_wheels(p, 0, omega, ist[0, L.I_GEAR])
        out.append(rpm)
        out.append(drive_torque_nm(p, 0, ist, rpm, (i % 7) / 6.0))
        update_gearbox(p, 0, ist, rpm)
        out.append(float(ist[0, L.I_GEAR] * 1000 + ist[0, L.I_CLUTCH]))
    out.append(float(select_gear(p, 0, ist, -1)))
    out.append(drive_torque_nm(p, 0, ist, 2500.0, 1.0))
print(" ".join(float(x).hex() for x in out))
"""


def _jit_script_output() -> str:
    import contextlib
    import io

    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        exec(JIT_SCRIPT, {})
    return buf.getvalue().strip()


def test_same_results_with_numba_jit_disabled():
    env = dict(os.environ, PYTHONPATH=ROOT, NUMBA_DISABLE_JIT="1")
    out = subprocess.run(
        [sys.executable, "-c", JIT_SCRIPT],
        env=env,
        capture_output=True,
        text=True,
        check=True,
        cwd=ROOT,
    )
    nojit = out.stdout.strip()
    jit = _jit_script_output()
    assert len(jit.split()) > 900
    assert nojit == jit
