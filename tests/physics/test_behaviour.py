"""Behavioural physics: analytic expectations from the seed model, with tolerances."""

import math

import numpy as np
import pytest

from benchmarks import physics_validation as V
from physics import ROVER, VehicleBatch, flat_terrain
from physics import layout as L
from physics.kernel import lateral_curve, load_sensitivity_factor


def _assert_checks(checks):
    bad = [c for c in checks if not c.ok]
    assert not bad, "\n".join(f"{c.name}: expected {c.expected}, got {c.measured}" for c in bad)


def test_static_load_is_mg_and_sag_is_g_over_nk():
    _assert_checks(V.static_load())


def test_braking_from_100_kmh_takes_about_165_m():
    c = V.braking_distance()
    _assert_checks([c])
    assert 160.0 < c.measured < 172.0


def test_braking_load_transfer_emerges_from_the_springs():
    _assert_checks([V.braking_load_transfer()])


def test_skidpad_lateral_limit_is_mu_g_with_load_sensitivity():
    _assert_checks(V.skidpad(steers=(0.5, 0.7)))


def test_friction_circle_is_never_exceeded():
    _assert_checks([V.friction_circle_random(seconds=8.0)])


def test_abs_leaves_44_percent_of_lateral_grip():
    _assert_checks(V.abs_lateral_reserve())


def test_handbrake_locks_the_rear_and_rotates_the_car():
    _assert_checks(V.handbrake_turn())


def test_full_throttle_does_not_stall_and_reaches_top_speed():
    _assert_checks(V.launch_no_stall())


def test_coasting_loses_speed_only_to_rolling_resistance():
    _assert_checks(V.coast())


def test_drops_settle_with_implicit_damping_and_explain_the_substep_choice():
    _assert_checks(V.drops())


def test_crest_keeps_grip_and_ramp_jump_is_ballistic():
    _assert_checks(V.crest_and_jump())


def test_long_50ms_frames_stay_stable():
    _assert_checks(V.long_frame())


def test_lateral_curve_shape():
    peak, clamp = 0.18, 1.5
    assert lateral_curve(peak, peak, clamp) == 1.0
    assert lateral_curve(-peak, peak, clamp) == -1.0
    floor = 2 * 1.5 / (1 + 1.5**2)
    assert lateral_curve(0.27, peak, clamp) == pytest.approx(floor)
    assert lateral_curve(1.5, peak, clamp) == pytest.approx(floor)  # clamped: never decays
    assert lateral_curve(0.09, peak, clamp) == pytest.approx(2 * 0.5 / 1.25)


def test_load_sensitivity():
    assert load_sensitivity_factor(2790.0, 2790.0, 0.05) == 1.0
    assert load_sensitivity_factor(1000.0, 2790.0, 0.05) == 1.0
    assert load_sensitivity_factor(2 * 2790.0, 2790.0, 0.05) == pytest.approx(0.95)
    assert load_sensitivity_factor(1e9, 2790.0, 0.05) == 0.0


def test_full_lock_at_standstill_still_makes_lateral_force_and_yaw(rover_on):
    sim = rover_on(1)
    sim.reset(np.array([0.0, 0.0, 0.0, 0.3]))
    sim.set_commands(np.array([1.0, 0.3, 0.0, 0.0]))
    sim.step(480)
    assert abs(sim.tire_forces_n[0, 0, 1]) > 10.0  # front-left lateral force
    assert sim.omega_radps[0, 2] > 0.01  # yaws left (steer +1 = left)
    # slip angle uses the 1.0 m/s denominator floor: finite and below pi/2 at crawl speed
    assert np.all(np.abs(sim.slip_angles_rad) < math.pi / 2)


def test_steering_rate_limit_and_lock(rover_on):
    sim = rover_on(1)
    sim.set_commands(np.array([1.0, 0.0, 0.0, 0.0]))
    sim.step(1)
    assert sim.steer_angle_rad[0] == pytest.approx(ROVER.steer_rate_radps * L.DT)
    sim.step(480)
    assert sim.steer_angle_rad[0] == pytest.approx(ROVER.steer_lock_rad)
    sim.set_commands(np.array([-0.5, 0.0, 0.0, 0.0]))
    sim.step(480)
    assert sim.steer_angle_rad[0] == pytest.approx(-0.5 * ROVER.steer_lock_rad)


def test_wheel_spin_accumulates_rolling_distance(rover_on):
    sim = rover_on(1, params=ROVER.replace(rolling_resistance=0.0))
    sim.reset(np.array([0.0, 0.0, 0.0, 10.0]))
    sim.step(480)
    dist = sim.position_m[0, 0]
    np.testing.assert_allclose(sim.wheel_spin_rad[0], dist / 0.4, rtol=2e-3)
    assert np.all(sim.slip_ratios == 0.0)  # direct-force model


def test_surface_grip_multiplies_into_mu():
    out = {}
    for grip in (1.0, 0.76):
        sim = VehicleBatch(1, ROVER, [flat_terrain(2000.0, 4.0, grip=grip)])
        sim.reset(np.array([0.0, 0.0, 0.0, 20.0]))
        sim.step(48)
        np.testing.assert_allclose(sim.wheel_mu[0], ROVER.mu_base * grip, rtol=1e-3)
        x0 = sim.position_m[0, 0]
        sim.set_commands(np.array([0.0, 0.0, 1.0, 0.0]))
        while sim.speed_mps[0] > 1e-3:
            sim.step(8)
        out[grip] = sim.position_m[0, 0] - x0
    assert out[0.76] / out[1.0] == pytest.approx(1 / 0.76, rel=0.03)


def test_wear_and_damage_hooks_scale_mu(rover_on):
    sim = rover_on(1, params=ROVER.replace(grip_wear=0.8, grip_damage=0.5))
    sim.step(48)
    np.testing.assert_allclose(sim.wheel_mu[0], 0.7 * 0.8 * 0.5, rtol=1e-3)


def test_per_car_parameter_rows(rover_on):
    sim = rover_on(2, params=[ROVER, ROVER.replace(power_w=50_000.0)])
    sim.set_commands(np.tile([0.0, 1.0, 0.0, 0.0], (2, 1)))
    sim.step(480 * 20)
    assert sim.speed_mps[0] > sim.speed_mps[1] + 5.0


def test_rolled_car_rests_on_its_roof(rover_on):
    sim = rover_on(1)
    sim.step(240)
    # flip it: roll by pi about the forward axis, a metre up
    sim.state[0, L.QUAT_W] = 0.0
    sim.state[0, L.QUAT_X] = 1.0
    sim.state[0, L.POS_Z] = 2.0
    sim.step(480 * 5)
    assert sim.up_z[0] < -0.9
    assert sim.body_contacts[0] >= 3
    assert not sim.grounded[0].any()
    # resting on the roof box (z top 0.9 m above the CG): not sinking into the ground
    assert sim.position_m[0, 2] == pytest.approx(ROVER.body_top_m, abs=0.05)
    assert np.linalg.norm(sim.velocity_mps[0]) < 0.05


def test_a_launched_roll_is_a_full_barrel_roll_and_a_landing(rover_on):
    # six degrees of freedom: thrown up at 3 m/s rolling at 4 rad/s, on Mars it turns over
    # fully in the air and lands back on its wheels
    sim = rover_on(1)
    sim.reset(np.array([0.0, 0.0, 0.0, 5.0]))
    sim.step(48)
    sim.state[0, L.OMEGA_X] = 4.0
    sim.state[0, L.VEL_Z] = 3.0
    lowest = 1.0
    for _ in range(600):
        sim.step(8)
        lowest = min(lowest, sim.up_z[0])
    assert lowest < -0.8  # upside down at the top of the arc
    assert np.all(np.isfinite(sim.state))
    assert sim.up_z[0] > 0.99 and sim.grounded[0].all()
    assert sim.position_m[0, 2] == pytest.approx(ROVER.static_ride_height_m, abs=0.01)


def test_timing_gate_is_interpolated_inside_the_substep(rover_on):
    sim = rover_on(1, params=ROVER.replace(rolling_resistance=0.0))
    v = 13.0
    sim.reset(np.array([0.0, 0.0, 0.0, v]))
    sim.set_gate(np.array([[100.0, 10.0, 100.0, -10.0]]))
    sim.step(480 * 10)
    # constant speed on flat ground: crossing x = 100 at exactly 100 / v
    assert sim.gate_time_s[0] == pytest.approx(100.0 / v, abs=1e-6)
    assert sim.gate_time_s[0] * L.SUBSTEP_HZ % 1 != 0.0  # not rounded to a substep
    # crossing the other way does not count
    sim.reset(np.array([200.0, 0.0, math.pi, v]))
    sim.set_gate(np.array([[100.0, 10.0, 100.0, -10.0]]))
    sim.step(480 * 10)
    assert sim.gate_time_s[0] == -1.0
