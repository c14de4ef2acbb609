"""Vehicle definition files (physics.vehicles) and the built-in vehicle library."""

from __future__ import annotations

import copy
import pickle
import tomllib
from importlib import resources

import numpy as np
import pytest

from physics import ROVER, VehicleBatch, flat_terrain
from physics.drivetrain import RALLY_CAR_DRIVETRAIN
from physics.vehicles import (
    PLANETS,
    VEHICLES,
    VehicleDefError,
    load_vehicle,
    loads_vehicle,
    on_planet,
    vehicle,
    vehicle_from_dict,
)

WHEEL = {
    "anchor": [1.0, 0.5, 0.0],
    "rest_length_m": 0.25,
    "travel_m": 0.2,
    "spring_hz": 1.8,
    "damping_ratio": 0.6,
    "radius_m": 0.3,
    "steerable": True,
    "driven": True,
    "brake_share": 0.25,
}


@pytest.fixture(scope="module")
def flat():
    return flat_terrain(size_m=4000.0, cell_m=4.0)


def doc(n_wheels: int = 4, **wheel_changes) -> dict:
    """A valid four-wheel definition as a dict (wheel 2 gets ``wheel_changes``)."""
    wheels = []
    for i in range(n_wheels):
        w = copy.deepcopy(WHEEL)
        w["anchor"] = [1.0 if i < 2 else -1.0, 0.5 if i % 2 == 0 else -0.5, 0.0]
        w["brake_share"] = 1.0 / n_wheels if n_wheels in (1, 2, 4, 8) else 0.0
        w["steerable"] = i < 2
        wheels.append(w)
    if n_wheels > 2:
        wheels[2].update(wheel_changes)
    return {
        "name": "t",
        "vehicle": {"mass_kg": 1000, "tire_model": "wheel-speed"},
        "wheels": wheels,
    }


# ---------------------------------------------------------------------- the format's errors
def test_valid_dict_loads_and_ints_become_floats():
    p = vehicle_from_dict(doc())
    assert p.mass_kg == 1000.0 and isinstance(p.mass_kg, float)
    assert "mass_kg=1000.0" in repr(p)
    assert p.wheels[0].spring_hz == 1.8 and p.extended


def _err(d, match_field, match_problem=""):
    with pytest.raises(VehicleDefError) as ei:
        vehicle_from_dict(d, source="car.toml")
    e = ei.value
    assert isinstance(e, ValueError)
    assert e.source == "car.toml" and str(e).startswith("car.toml: ")
    assert e.field == match_field, str(e)
    assert match_problem in e.problem, str(e)
    pickle.loads(pickle.dumps(e))
    return e


def test_unknown_keys():
    d = doc()
    d["colour"] = "red"
    _err(d, "colour", "unknown field")
    d = doc()
    d["vehicle"]["mass"] = 1.0
    _err(d, "vehicle.mass", "unknown field")
    _err(doc(springs=1.0), "wheels[2].springs", "unknown field")
    d = doc()
    d["drivetrain"] = {"gear_ratios": [3.0]}
    _err(d, "drivetrain.gear_ratios", "unknown field")


def test_wrong_types():
    d = doc()
    d["vehicle"]["mass_kg"] = "heavy"
    _err(d, "vehicle.mass_kg", "expected a number")
    d = doc()
    d["vehicle"]["skid_steer"] = 1
    _err(d, "vehicle.skid_steer", "expected true or false")
    _err(doc(steerable="yes"), "wheels[2].steerable", "expected true or false")
    _err(doc(anchor=[1.0, 2.0]), "wheels[2].anchor", "3 numbers")
    _err(doc(anchor=[1.0, True, 0.0]), "wheels[2].anchor[1]", "expected a number")
    _err(doc(radius_m=True), "wheels[2].radius_m", "expected a number")
    d = doc()
    d["wheels"] = {"anchor": [0, 0, 0]}
    _err(d, "wheels", "array of tables")
    d = doc()
    d["drivetrain"] = {"torque_curve": [[1000.0, 100.0], [2000.0]]}
    _err(d, "drivetrain.torque_curve[1]", "[rpm, N m]")


def test_missing_fields():
    d = doc()
    del d["wheels"][2]["spring_hz"]
    _err(d, "wheels[2].spring_hz", "missing")
    d = doc()
    del d["wheels"][0]["anchor"]
    _err(d, "wheels[0].anchor", "missing")
    d = doc()
    del d["wheels"]
    _err(d, "wheels", "required")


@pytest.mark.parametrize("n", [0, 9])
def test_bad_wheel_count(n):
    d = doc()
    d["wheels"] = [copy.deepcopy(WHEEL) for _ in range(n)]
    _err(d, "wheels", "1 to 8 wheels")


def test_bad_spring():
    _err(doc(spring_hz=80.0), "wheels[2].spring_hz", "must be in")
    # a spring frequency needs a damping ratio (both or neither)
    _err(doc(damping_ratio=0.0), "wheels[2].damping_ratio", "set together")
    _err(doc(travel_m=-0.1), "wheels[2].travel_m", "must be in")


def test_brake_shares_must_sum_to_one():
    _err(doc(brake_share=0.5), "wheels[*].brake_share", "sum to 1")


def test_parameter_errors_get_file_and_path():
    d = doc()
    d["vehicle"]["mass_kg"] = -5.0
    e = _err(d, "vehicle.mass_kg", "must be in")
    assert "-5.0" in str(e)
    _err(doc(anchor=[99.0, 0.0, 0.0]), "wheels[2].anchor", "must be in")
    _err(doc(direction=[0.0, 0.0, 1.0]), "wheels[2].direction", "(0, 0, -1)")
    d = doc()
    d["drivetrain"] = {"gears": [3.0, 3.5]}
    _err(d, "drivetrain.gears", "non-increasing")
    d = doc()
    d["vehicle"]["tires"] = "slicks"
    _err(d, "vehicle.tires", "must be one of")
    d = doc()
    d["vehicle"]["tire_model"] = "magic"
    _err(d, "vehicle.tire_model", "unknown tire model")
    d = doc()
    d["vehicle"]["tire_model"] = "direct"
    d["vehicle"]["tires"] = "rally"
    _err(d, "vehicle.tires", "wheel-speed")
    d = doc()
    d["vehicle"]["skid_steer"] = True
    d["drivetrain"] = {}
    _err(d, "vehicle.skid_steer", "no drivetrain")


def test_toml_text_and_files(tmp_path):
    with pytest.raises(VehicleDefError, match=r"bad\.toml: <toml>: not valid TOML"):
        loads_vehicle("[vehicle\n", "bad.toml")
    f = tmp_path / "car.toml"
    f.write_text(
        "[vehicle]\nmass_kg = 1200.0\n[[wheels]]\nanchor = [0.0, 0.0, 0.0]\nrest_length_m = 0.3\n"
        "travel_m = 0.2\nspring_hz = 2.0\ndamping_ratio = 0.5\nradius_m = 0.3\nsteerable = true\n"
        "driven = true\nbrake_share = 1.0\nunknown = 3\n"
    )
    with pytest.raises(VehicleDefError) as ei:
        load_vehicle(f)
    assert ei.value.source == str(f) and ei.value.field == "wheels[0].unknown"
    f.write_text(f.read_text().replace("unknown = 3\n", ""))
    assert load_vehicle(f).mass_kg == 1200.0
    with pytest.raises(VehicleDefError, match="cannot read"):
        load_vehicle(tmp_path / "missing.toml")


# ---------------------------------------------------------------------- library and planets
@pytest.mark.parametrize("name", VEHICLES)
def test_builtin_loads_extended_wheel_speed(name):
    p = vehicle(name)
    assert p.extended and p.tire_model == "wheel-speed"
    text = (resources.files("physics") / "vehicles" / f"{name}.toml").read_text("utf-8")
    assert text.startswith("#")  # the header comment explaining the numbers
    assert tomllib.loads(text)["name"] == name
    assert abs(sum(w.brake_share for w in p.wheels) - 1.0) < 1e-9


def test_rover_file_is_the_seed_rover_exactly():
    p = vehicle("rover", tire_model="direct")
    assert p == ROVER
    assert repr(p) == repr(ROVER)
    assert p.pack().tobytes() == ROVER.pack().tobytes()
    assert vehicle("rover") == ROVER.replace(tire_model="wheel-speed")


def test_vehicle_key_numbers():
    car = vehicle("rally-car")
    assert car.drivetrain == RALLY_CAR_DRIVETRAIN
    assert car.gravity_mps2 == 9.81 and car.mass_kg == 1300.0
    assert car.load_ref_n == pytest.approx(car.mass_kg * 9.81 / 4)
    assert [w.handbrake for w in car.wheels] == [False, False, True, True]
    truck = vehicle("truck")
    assert len(truck.wheels) == 6 and all(w.driven for w in truck.wheels)
    assert [w.steerable for w in truck.wheels] == [True, True] + [False] * 4
    tank = vehicle("tank")
    assert tank.skid_steer and len(tank.wheels) == 8
    assert not any(w.steerable for w in tank.wheels) and all(w.driven for w in tank.wheels)
    bike = vehicle("bike")
    assert len(bike.wheels) == 2 and all(w.y_m == 0.0 for w in bike.wheels)
    assert bike.lean_stabilization > 0.0


def test_unknown_names_list_the_known_ones():
    with pytest.raises(VehicleDefError, match="rally-car"):
        vehicle("hovercraft")
    with pytest.raises(VehicleDefError, match="mars, earth, moon"):
        vehicle("rover", planet="venus")
    with pytest.raises(VehicleDefError, match="wheel-speed"):
        vehicle("rover", tire_model="magic")
    with pytest.raises(VehicleDefError, match="earth"):
        on_planet(ROVER, "jupiter")


def test_tire_model_override_drops_curves():
    p = vehicle("rally-car", tire_model="direct")
    assert p.tire_model == "direct" and p.tires is None
    assert vehicle("rally-car", tire_model="wheel-speed") == vehicle("rally-car")


def test_planets(flat):
    assert PLANETS == {"mars": 3.72, "earth": 9.81, "moon": 1.62}
    for planet, g in PLANETS.items():
        p = vehicle("rally-car", planet=planet)
        assert p.gravity_mps2 == g
        assert p.load_ref_n == pytest.approx(p.mass_kg * g / 4)
    assert on_planet(ROVER, "mars") == ROVER  # 2790 N is the seed's m g / 4 already
    rover = vehicle("rover")
    earth = on_planet(rover, "earth")
    ratio = 9.81 / 3.72
    np.testing.assert_allclose(earth.static_loads_n(), rover.static_loads_n() * ratio)
    loads = []
    for p in (rover, earth):
        sim = VehicleBatch(1, p, [flat])
        sim.step(960)
        loads.append(sim.wheel_loads_n[0].copy())
        assert sim.wheel_loads_n[0].sum() == pytest.approx(p.mass_kg * p.gravity_mps2, rel=0.01)
    np.testing.assert_allclose(loads[1], loads[0] * ratio, rtol=0.01)


# ---------------------------------------------------------------------- behaviour
@pytest.mark.parametrize("name", VEHICLES)
def test_settles_drives_and_brakes(name, flat):
    p = vehicle(name)
    sim = VehicleBatch(1, p, [flat])
    mg = p.mass_kg * p.gravity_mps2
    sim.step(960)  # 2 s at rest
    assert sim.wheel_loads_n[0].sum() == pytest.approx(mg, rel=0.01)
    assert sim.body_contacts[0] == 0 and sim.up_z[0] > 0.999
    z = []
    for _ in range(30):
        sim.step(16)
        z.append(sim.position_m[0, 2])
        assert abs(sim.velocity_mps[0, 2]) < 1e-3  # no bounce after 2 s
    assert np.ptp(z) < 1e-3
    sim.set_commands([0.0, 1.0, 0.0, 0.0])
    sim.step_seconds(4.0)
    v = sim.speed_mps[0]
    assert v > 3.0, v
    assert sim.body_velocity_mps[0, 0] > 0.99 * v  # forward, straight
    assert sim.up_z[0] > 0.99 and sim.body_contacts[0] == 0
    sim.set_commands([0.0, 0.0, 1.0, 0.0])
    sim.step_seconds(10.0)
    assert sim.speed_mps[0] < 0.05


@pytest.mark.parametrize("name", ["rover", "rally-car", "truck", "bike"])
def test_turns_left_with_positive_steer(name, flat):
    sim = VehicleBatch(1, vehicle(name), [flat])
    sim.reset(np.array([[0.0, 0.0, 0.0, 8.0]]))
    sim.set_commands([0.2, 0.1, 0.0, 0.0])
    sim.step_seconds(3.0)
    assert sim.omega_radps[0, 2] > 0.05 and sim.position_m[0, 1] > 0.5
    assert sim.body_contacts[0] == 0 and sim.up_z[0] > 0.7


def _run(params, cmds_per_car, flat, seconds=3.0):
    n = len(cmds_per_car)
    sim = VehicleBatch(n, params, [flat])
    sim.reset(np.tile([0.0, 0.0, 0.0, 5.0], (n, 1)))
    for t in range(round(seconds * 20)):
        sim.set_commands(np.array([c(t) for c in cmds_per_car]))
        sim.step(24)
    return sim


@pytest.mark.parametrize("name", VEHICLES)
def test_determinism_and_batch_independence(name, flat):
    p = vehicle(name)

    def car0(t):
        return [0.6 * np.sin(0.2 * t), 0.8, 0.3 if t % 17 < 3 else 0.0, 0.0]

    def other(t):
        return [-1.0, 1.0, 0.0, 1.0 if t % 5 == 0 else 0.0]

    def third(t):
        return [0.3, 0.0, 1.0, 0.0]

    a = _run(p, [car0], flat)
    b = _run(p, [car0], flat)
    assert a.state_hash() == b.state_hash()
    c = _run(p, [car0, other, third], flat)
    assert a.state[0].tobytes() == c.state[0].tobytes()
    assert a.istate[0].tobytes() == c.istate[0].tobytes()
    assert c.state[1].tobytes() != c.state[0].tobytes()


def test_tank_turns_on_the_spot(flat):
    sim = VehicleBatch(1, vehicle("tank"), [flat])
    sim.step(480)
    p0 = sim.position_m[0, :2].copy()
    sim.set_tank_commands(np.array([-1.0, 1.0, 0.0]))
    yaw = []
    for _ in range(50):
        sim.step(48)
        yaw.append(sim.omega_radps[0, 2])
    assert min(yaw[10:]) > 0.3  # rad/s, counter-clockwise
    assert np.linalg.norm(sim.position_m[0, :2] - p0) < 1.0
    assert sim.up_z[0] > 0.99 and sim.body_contacts[0] == 0
    # the normal (steer, throttle) command drives it too: steer is the per-side difference
    sim.reset()
    sim.step(480)
    sim.set_commands([1.0, 0.0, 0.0, 0.0])
    sim.step_seconds(5.0)
    assert sim.omega_radps[0, 2] > 0.3
    assert np.linalg.norm(sim.position_m[0, :2]) < 1.0
    sim.set_commands([-0.2, 1.0, 0.0, 0.0])  # right side slower: turns right while driving
    sim.step_seconds(5.0)
    assert sim.speed_mps[0] > 5.0 and sim.omega_radps[0, 2] < 0.0


def _bike_circle(params, flat, steer=0.04, seconds=10.0):
    sim = VehicleBatch(1, params, [flat])
    sim.reset(np.array([[0.0, 0.0, 0.0, 9.0]]))
    sim.set_commands([steer, 0.08, 0.0, 0.0])
    max_roll = 0.0
    contacts = 0
    speeds = []
    for _ in range(round(seconds * 60)):
        sim.step(8)
        max_roll = max(max_roll, float(np.degrees(np.arccos(np.clip(sim.up_z[0], -1, 1)))))
        contacts = max(contacts, int(sim.body_contacts[0]))
        speeds.append(float(sim.speed_mps[0]))
    return sim, max_roll, contacts, speeds


def test_bike_stays_upright_in_a_constant_radius_turn(flat):
    sim, max_roll, contacts, speeds = _bike_circle(vehicle("bike"), flat)
    assert max_roll < 45.0 and max_roll > 3.0  # it leans into the turn
    assert contacts == 0
    assert min(speeds) > 6.0 and 8.0 < speeds[-1] < 14.0
    assert sim.omega_radps[0, 2] > 0.1  # turning left, steadily
    # leaning into the turn: left side down (roll angle about x negative)
    q = sim.quaternion[0]
    assert 2.0 * (q[2] * q[3] + q[0] * q[1]) < 0.0


def test_bike_falls_over_without_lean_stabilization(flat):
    _, max_roll, contacts, _ = _bike_circle(vehicle("bike").replace(lean_stabilization=0.0), flat)
    assert contacts > 0 or max_roll > 60.0
