"""The reference-time solver against closed forms."""

from __future__ import annotations

import math

import numpy as np
import pytest

from agents.reference import PointMass, reference_time, speed_profile
from physics import ROVER

G = ROVER.gravity_mps2
MU = ROVER.mu_base


def test_circle_lap_time_is_two_pi_sqrt_r_over_mu_g():
    veh = ROVER.replace(load_sensitivity=0.0)
    for radius in (15.0, 40.0, 120.0):
        n = 2000
        ds = np.full(n - 1, 2 * math.pi * radius / (n - 1))
        v, t = speed_profile(ds, np.full(n, 1.0 / radius), 1.0, 0.0, veh, periodic=True)
        expected = 2 * math.pi * math.sqrt(radius / (MU * G))
        assert t == pytest.approx(expected, rel=1e-9)
        assert np.allclose(v, math.sqrt(MU * G * radius))


def test_surface_grip_scales_the_corner_speed():
    veh = ROVER.replace(load_sensitivity=0.0)
    n, r = 500, 30.0
    ds = np.full(n - 1, 2 * math.pi * r / (n - 1))
    _, t1 = speed_profile(ds, np.full(n, 1 / r), 1.0, 0.0, veh, periodic=True)
    _, t2 = speed_profile(ds, np.full(n, 1 / r), 0.76, 0.0, veh, periodic=True)
    assert t2 / t1 == pytest.approx(math.sqrt(1 / 0.76), rel=1e-9)


def test_load_sensitivity_costs_corner_speed():
    n, r = 500, 30.0
    ds = np.full(n - 1, 2 * math.pi * r / (n - 1))
    k = np.full(n, 1 / r)
    _, t0 = speed_profile(ds, k, 1.0, 0.0, ROVER.replace(load_sensitivity=0.0), periodic=True)
    _, t1 = speed_profile(ds, k, 1.0, 0.0, ROVER, periodic=True)
    _, t2 = speed_profile(ds, k, 1.0, 0.0, ROVER.replace(load_sensitivity=0.5), periodic=True)
    assert t0 < t1 < t2


def test_braking_distance_on_a_straight():
    # v0 = 25 m/s, a wall (speed ~0) at 200 m: v^2 = 2 abs mu g (D - x) where braking governs
    v0, length, n = 25.0, 200.0, 2001
    x = np.linspace(0.0, length, n)
    k = np.zeros(n)
    k[-1] = 1e12  # the corner limit there is ~0
    veh = ROVER.replace(power_w=0.0, drive_force_n=0.0)  # coast: no drive
    v, _ = speed_profile(np.diff(x), k, 1.0, 0.0, veh, v_start_mps=v0)
    b = ROVER.abs_fraction * MU * G
    d_stop = v0**2 / (2 * b)
    brake = np.sqrt(2 * b * (length - x))
    # before the braking point the car coasts on rolling resistance
    coast = np.sqrt(v0**2 - 2 * ROVER.rolling_resistance * G * x)
    assert np.allclose(v, np.minimum(brake, coast), atol=2e-3)
    assert v[-1] < 0.01 and d_stop < length


def test_acceleration_distance_force_limited():
    # standing start, traction-limited: a = drive_cap mu g - crr g until v = P / F
    veh = ROVER.replace(load_sensitivity=0.0)
    n, length = 4001, 400.0
    x = np.linspace(0.0, length, n)
    v, _ = speed_profile(np.diff(x), np.zeros(n), 1.0, 0.0, veh)
    f = min(veh.drive_force_n, veh.drive_cap * MU * veh.mass_kg * G)
    a = f / veh.mass_kg - veh.rolling_resistance * G
    v_switch = veh.power_w / f
    sel = (x > 1.0) & (v < v_switch - 0.5)
    assert sel.sum() > 100
    assert np.allclose(v[sel], np.sqrt(2 * a * x[sel]), rtol=2e-3)


def test_acceleration_distance_power_limited():
    # no traction limit, no resistance: P = m v a  =>  x = m v^3 / (3 P)
    veh = ROVER.replace(load_sensitivity=0.0, rolling_resistance=0.0, drive_force_n=1e6)
    n, length = 8001, 800.0
    x = np.linspace(0.0, length, n)
    v, _ = speed_profile(np.diff(x), np.zeros(n), 100.0, 0.0, veh)
    sel = (x > 20.0) & (v < veh.top_speed_mps - veh.top_speed_band_mps - 1.0)
    assert sel.sum() > 100
    expected = (3 * veh.power_w * x[sel] / veh.mass_kg) ** (1 / 3)
    assert np.allclose(v[sel], expected, rtol=5e-3)


def test_uphill_grade_slows_acceleration():
    n = 1001
    x = np.linspace(0.0, 100.0, n)
    _, t_flat = speed_profile(np.diff(x), np.zeros(n), 1.0, 0.0, ROVER)
    _, t_up = speed_profile(np.diff(x), np.zeros(n), 1.0, 0.05, ROVER)
    assert t_up > t_flat


def test_point_mass_from_the_rover():
    pm = PointMass.from_vehicle(ROVER)
    assert pm.load_ratio_static == pytest.approx(1.0)
    assert 0.5 < pm.transfer_per_g < 1.0


@pytest.mark.parametrize("name", ["opener", "skidpad", "proving-ground"])
def test_stage_reference(name):
    r = reference_time(name)
    c = reference_time(name, "centerline")
    assert r.time_s <= c.time_s + 1e-9
    assert np.all(np.isfinite(r.v_mps)) and r.v_mps[0] == 0.0
    assert r.time_at_s[-1] == pytest.approx(r.time_s)
    assert np.all(np.diff(r.stage_s_m) > 0)


def test_skidpad_centerline_flying_laps_match_the_circle():
    # 3 laps of the 40 m circle from a standing start: slower than 3 flying laps by the launch
    c = reference_time("skidpad", "centerline")
    r = 40.0
    pm = PointMass.from_vehicle(ROVER)
    assert pm.load_sensitivity > 0
    flying = 3 * 2 * math.pi * math.sqrt(r / (MU * G))
    assert flying < c.time_s < flying + 6.0


def test_drivetrain_vehicles_use_their_engine_and_driven_share():
    from benchmarks.physics_validation import small_car
    from physics.drivetrain import SMALL_CAR

    car = small_car()  # rear-driven, SMALL_CAR engine, 0.3 m wheels
    pm = PointMass.from_vehicle(car)
    assert pm.drive_force_n == pytest.approx(200.0 * 3.5 * 3.7 / 0.3)
    assert pm.power_w == pytest.approx(200.0 * SMALL_CAR.rev_limit_rpm * 2 * math.pi / 60)
    top = SMALL_CAR.rev_limit_rpm * 2 * math.pi / 60 / (0.9 * 3.7) * 0.3
    assert pm.vmax_mps == pytest.approx(min(car.top_speed_mps, top))
    loads = car.static_loads_n()
    assert pm.drive_cap == pytest.approx(car.drive_cap * loads[2:].sum() / loads.sum())
    # the basic rover's point mass is what it always was
    assert PointMass.from_vehicle(ROVER) == PointMass.from_vehicle(None)
    assert PointMass.from_vehicle(ROVER).drive_force_n == ROVER.drive_force_n
    assert reference_time("opener", vehicle=car).time_s != reference_time("opener").time_s
