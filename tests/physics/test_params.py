import math

import numpy as np
import pytest

from physics import ROVER, ParameterError, VehicleParams, WheelParams
from physics import layout as L


def test_defaults_are_the_seed_rover():
    p = ROVER
    assert (p.mass_kg, p.gravity_mps2, p.mu_base) == (3000.0, 3.72, 0.70)
    assert (p.peak_slip_angle_rad, p.post_peak_clamp, p.load_sensitivity) == (0.18, 1.5, 0.05)
    assert (p.load_ref_n, p.abs_fraction, p.drive_cap, p.slip_eps_mps) == (2790.0, 0.9, 0.9, 1.0)
    assert (p.contact_k, p.contact_c, p.soft_contact_k, p.soft_contact_c) == (600, 270, 30, 15)
    assert (p.soft_gap_min_m, p.soft_gap_max_m, p.soft_lift_gate_mps) == (0.18, 0.30, 2.0)
    xs = sorted({w.x_m for w in p.wheels})
    ys = sorted({w.y_m for w in p.wheels})
    assert xs == [-1.5, 1.5] and ys == [-1.25, 1.25]
    # LOAD_REF is one quarter of the rover's weight on Mars
    assert math.isclose(p.mass_kg * p.gravity_mps2 / 4, p.load_ref_n)


@pytest.mark.parametrize(
    ("field", "value", "needle"),
    [
        ("mass_kg", -5.0, "must be in"),
        ("mu_base", float("nan"), "must be finite"),
        ("peak_slip_angle_rad", float("inf"), "must be finite"),
        ("abs_fraction", 1.5, "must be in"),
        ("contact_k", "600", "must be a real number"),
        ("soft_contact", 1, "must be a bool"),
        ("gravity_mps2", 0.0, "must be in (0.0"),
    ],
)
def test_bad_field_names_field_value_and_rule(field, value, needle):
    with pytest.raises(ParameterError) as e:
        ROVER.replace(**{field: value})
    assert e.value.field == field
    assert field in str(e.value) and needle in str(e.value)
    assert isinstance(e.value, ValueError)


def test_cross_field_rules():
    with pytest.raises(ParameterError, match="soft_gap_max_m"):
        ROVER.replace(soft_gap_min_m=0.3, soft_gap_max_m=0.2)
    with pytest.raises(ParameterError, match="body_top_m"):
        ROVER.replace(body_top_m=-1.0)
    with pytest.raises(ParameterError, match="brake_share"):
        ROVER.replace(wheels=(WheelParams(1, 1, brake_share=0.5), WheelParams(-1, 1)))
    with pytest.raises(ParameterError, match="wheels"):
        ROVER.replace(wheels=tuple(WheelParams(0, 0, brake_share=0.0) for _ in range(9)))


def test_wheel_validation():
    with pytest.raises(ParameterError, match="travel_m"):
        WheelParams(1.0, 1.0, travel_m=2.0)
    with pytest.raises(ParameterError, match="radius_m"):
        WheelParams(1.0, 1.0, radius_m=0.0)


def test_pack_layout():
    row = ROVER.pack()
    assert row.shape == (L.N_PARAMS,) and row.dtype == np.float64
    assert row[L.P_MASS] == 3000.0 and row[L.P_N_WHEELS] == 4
    assert row[L.pw(0, L.PW_X)] == 1.5 and row[L.pw(3, L.PW_Y)] == -1.25
    assert row[L.pw(0, L.PW_STEER)] == 1.0 and row[L.pw(2, L.PW_STEER)] == 0.0
    assert row[L.pw(2, L.PW_HANDBRAKE)] == 1.0 and row[L.pw(0, L.PW_HANDBRAKE)] == 0.0
    assert ROVER.digest() == VehicleParams().digest()
    assert ROVER.digest() != ROVER.replace(mass_kg=2999.0).digest()
