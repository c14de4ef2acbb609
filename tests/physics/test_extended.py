"""The model beyond the seed: wheel speed, drivetrain, extended rows, and their determinism.

The behavioural figures (braking, launch, air spin-up, 30 Hz clamps, slope hold, gearbox,
differentials) come from ``benchmarks.physics_validation.run_extended``, the same functions the
validation benchmark prints.
"""

import os

import numpy as np
import pytest

from benchmarks import physics_validation as V
from physics import ROVER, VehicleBatch
from physics import layout as L
from physics.drivetrain import SMALL_CAR
from physics.errors import ParameterError

from .conftest import drive, scripted_commands
from .test_determinism import _run_subprocess

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# Golden scenario of the extended model (Rally-v1 physics): the wheel-speed rover and the
# validation small car (drivetrain) on the crest-and-ramp terrain. UPDATE ONLY ON PURPOSE
# (a dynamics change of the extended model; bump the Rally-v1 version), with
#     python3 -c "from tests.physics.test_extended import golden_hash; print(golden_hash())"
GOLDEN_HASH_EXTENDED = "26f52ef6baecd6cd32391891a1349e47 0f3b633b95848e9e0853b2f6bae82ff5"

GOLDEN_SCRIPT = """
import numpy as np
from physics import crest_and_ramp_terrain, VehicleBatch
from benchmarks.physics_validation import WHEEL_SPEED_ROVER, small_car
out = []
for params in (WHEEL_SPEED_ROVER, small_car()):
    sim = VehicleBatch(3, params, [crest_and_ramp_terrain()])
    sim.reset(np.array([[0, -20, 0, 10], [250, 0, 0, 22], [640, 5, 0, 24]], float))
    rng = np.random.default_rng(11)
    cmds = rng.uniform([-1.3, -0.2, -0.2, -0.2], [1.3, 1.2, 0.6, 0.5], size=({steps}, 3, 4))
    for c in cmds:
        sim.set_commands(c)
        sim.step(24)
    out.append(sim.state_hash())
print(" ".join(out))
"""


def golden_hash(steps: int = 100) -> str:
    import contextlib
    import io

    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        exec(GOLDEN_SCRIPT.format(steps=steps), {})
    return buf.getvalue().strip()


def _subprocess_hash(steps: int, env_extra: dict) -> str:
    return _run_subprocess(steps, env_extra, GOLDEN_SCRIPT)


# ------------------------------------------------------------------ rows and compatibility
def test_basic_vehicles_keep_narrow_rows_and_their_repr():
    assert not ROVER.extended
    assert ROVER.pack().shape == (L.N_PARAMS,)
    sim = VehicleBatch(2, ROVER)
    assert sim.state.shape == (2, L.N_STATE) and sim.params.shape == (2, L.N_PARAMS)
    assert "tire_model" not in repr(ROVER) and "spring_hz" not in repr(ROVER)
    ws = ROVER.replace(tire_model="wheel-speed")
    assert ws.extended and "tire_model='wheel-speed'" in repr(ws)
    assert ws.pack().shape == (L.N_PARAMS_EXT,)
    # the first N_PARAMS columns mean the same for both
    np.testing.assert_array_equal(ws.pack()[: L.P_TIRE_MODEL], ROVER.pack()[: L.P_TIRE_MODEL])


def test_a_batch_is_all_basic_or_all_extended():
    with pytest.raises(ParameterError, match="all cars of a batch"):
        VehicleBatch(2, [ROVER, ROVER.replace(tire_model="wheel-speed")])


@pytest.mark.parametrize(
    "changes, field",
    [
        ({"tire_model": "magic"}, "tire_model"),
        ({"tires": "rally"}, "tires"),
        ({"drivetrain": "v8"}, "drivetrain"),
        ({"skid_steer": True, "drivetrain": SMALL_CAR}, "skid_steer"),
        ({"load_blend": 1.5}, "load_blend"),
        ({"traction_control": 1}, "traction_control"),
    ],
)
def test_bad_extension_fields_name_the_field(changes, field):
    with pytest.raises(ParameterError) as e:
        ROVER.replace(**changes)
    assert e.value.field == field


def test_wheel_spring_needs_both_frequency_and_damping():
    from physics import WheelParams

    with pytest.raises(ParameterError, match="set together"):
        WheelParams(1.0, 1.0, spring_hz=1.5)
    with pytest.raises(ParameterError, match="-z axis"):
        WheelParams(1.0, 1.0, direction=(0.0, 0.2, -0.98))


# ------------------------------------------------------------------ behaviour (validation)
@pytest.fixture(scope="module")
def extended_checks():
    return {c.name: c for c in V.run_extended()}


def test_every_extended_validation_check_passes(extended_checks):
    bad = [
        f"{c.name}: {c.measured} vs {c.expected} ({c.kind} {c.tol})"
        for c in extended_checks.values()
        if not c.ok
    ]
    assert not bad, bad


def test_direct_model_reports_zero_slip_ratio_wheel_speed_does_not(extended_checks):
    assert extended_checks["launch slip ratio, direct model"].measured == 0.0
    assert extended_checks["launch slip ratio, no traction control"].measured > 1.0


def test_tank_commands_only_for_skid_steer_and_refuse_nan():
    sim = VehicleBatch(1, ROVER.replace(tire_model="wheel-speed"))
    with pytest.raises(ParameterError, match="skid_steer"):
        sim.set_tank_commands(np.array([[1.0, -1.0, 0.0]]))
    tank = VehicleBatch(1, ROVER.replace(tire_model="wheel-speed", skid_steer=True))
    before = tank.state.copy()
    assert tank.set_tank_commands(np.array([[np.nan, 1.0, 0.0]])) == 1
    np.testing.assert_array_equal(tank.state, before)
    assert tank.misuse_count[0] == 1
    tank.set_tank_commands(np.array([[-1.0, 0.5, 0.2]]))
    assert tank.commands[0, 1] == pytest.approx(-0.25) and tank.commands[0, 0] == 0.75


def test_set_gear_refuses_bad_requests_and_keeps_the_gear():
    sim = VehicleBatch(1, V.small_car())
    assert sim.gear[0] == 1
    assert not sim.set_gear(7)[0] and sim.gear[0] == 1
    assert sim.set_gear(-1)[0] and sim.gear[0] == -1
    basic = VehicleBatch(1, ROVER)
    assert not basic.set_gear(2)[0]
    with pytest.raises(ParameterError):
        sim.set_gear(1.5)


def test_reverse_gear_drives_backwards():
    sim = VehicleBatch(1, V.small_car(), [V._flat()])
    sim.reset(np.zeros(4))
    sim.step(480)
    sim.set_gear(-1)
    sim.set_commands(np.array([0.0, 1.0, 0.0, 0.0]))
    sim.step(480 * 3)
    assert sim.body_velocity_mps[0, 0] < -2.0


def test_wear_and_damage_reduce_grip_only_when_enabled(crest):
    cmds = scripted_commands(1, 150, seed=3)
    worn = ROVER.replace(tire_model="wheel-speed", wear_rate_per_mj=0.5, damage_rate=0.05)
    fresh = ROVER.replace(tire_model="wheel-speed")
    out = {}
    for name, p in (("worn", worn), ("fresh", fresh)):
        sim = VehicleBatch(1, p, [crest])
        sim.reset(np.array([600.0, 0.0, 0.0, 25.0]))  # over the jump
        drive(sim, cmds)
        out[name] = (sim.tire_wear[0].copy(), float(sim.damage[0]), float(sim.max_impact_mps[0]))
    assert np.all(out["fresh"][0] == 1.0) and out["fresh"][1] == 1.0
    assert np.all(out["worn"][0] < 1.0) and np.all(out["worn"][0] >= worn.wear_floor)
    assert out["worn"][2] > 0.0


# ------------------------------------------------------------------ determinism
@pytest.mark.parametrize("which", ["wheel-speed", "drivetrain"])
def test_car_alone_equals_car_in_a_batch(crest, which):
    p = V.WHEEL_SPEED_ROVER if which == "wheel-speed" else V.small_car()
    cmds = scripted_commands(9, 60, seed=5)
    big = VehicleBatch(9, p, [crest])
    poses = np.array([[0.0, 20.0 * i - 80.0, 0.0, 5.0 * (i % 3)] for i in range(9)])
    big.reset(poses)
    drive(big, cmds)
    alone = VehicleBatch(1, p, [crest])
    alone.reset(poses[4:5])
    drive(alone, cmds[:, 4:5])
    np.testing.assert_array_equal(alone.state[0], big.state[4])
    np.testing.assert_array_equal(alone.istate[0], big.istate[4])


def test_serial_and_parallel_are_bit_identical_extended(crest):
    cmds = scripted_commands(8, 40, seed=9)
    hashes = []
    for par in (False, True):
        sim = VehicleBatch(8, V.small_car(), [crest], parallel=par)
        sim.reset(np.array([[0.0, 10.0 * i, 0.0, 3.0 * i] for i in range(8)]))
        drive(sim, cmds)
        hashes.append(sim.state_hash())
    assert hashes[0] == hashes[1]


def test_extended_golden_hash():
    assert golden_hash() == GOLDEN_HASH_EXTENDED


def test_extended_numba_disabled_and_fresh_process_agree():
    ref = golden_hash(5)
    assert _subprocess_hash(5, {}) == ref
    assert _subprocess_hash(5, {"NUMBA_DISABLE_JIT": "1"}) == ref


def test_extended_snapshot_restore_lockstep(crest):
    sim = VehicleBatch(2, V.small_car(), [crest])
    sim.reset(np.array([[0.0, 0.0, 0.0, 10.0], [0.0, 30.0, 0.0, 0.0]]))
    cmds = scripted_commands(2, 80, seed=2)
    drive(sim, cmds[:40])
    snap = sim.snapshot()
    drive(sim, cmds[40:])
    h1 = sim.state_hash()
    sim.restore(snap)
    drive(sim, cmds[40:])
    assert sim.state_hash() == h1
