"""Determinism contract: bit-identical across runs, batches, threads, processes and JIT off."""

import os
import subprocess
import sys

import numpy as np
import pytest

from physics import ROVER, Snapshot, SnapshotError, VehicleBatch

from .conftest import drive, scripted_commands

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# The golden scenario: 4 cars on the crest-and-ramp test terrain, 6 s of scripted commands at
# 20 Hz. UPDATE ONLY ON PURPOSE: when dynamics, the state layout or the test terrain change,
# bump physics.layout.LAYOUT_VERSION (and the env version), run
#     python3 -c "from tests.physics.test_determinism import golden_hash; print(golden_hash())"
# paste the new value here, and say why in the commit message.
GOLDEN_HASH = "9e8e3f61b31fb6daf950813b3e736ccd"

GOLDEN_SCRIPT = """
import numpy as np
from physics import ROVER, VehicleBatch, crest_and_ramp_terrain
sim = VehicleBatch(4, ROVER, [crest_and_ramp_terrain()])
sim.reset(np.array([[0, -20, 0, 10], [250, 0, 0, 22], [640, 5, 0, 24], [0, 30, 1.0, 0]], float))
rng = np.random.default_rng(7)
cmds = rng.uniform([-1.3, -0.2, -0.2, -0.2], [1.3, 1.2, 0.6, 0.5], size=({steps}, 4, 4))
for c in cmds:
    sim.set_commands(c)
    sim.step(24)
print(sim.state_hash())
"""


def golden_hash(steps: int = 120) -> str:
    ns: dict = {}
    import contextlib
    import io

    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        exec(GOLDEN_SCRIPT.format(steps=steps), ns)
    return buf.getvalue().strip()


def _run_subprocess(steps: int, env_extra: dict, script: str = GOLDEN_SCRIPT) -> str:
    """Run a golden ``script`` (formatted with ``steps``) in a fresh interpreter."""
    env = dict(os.environ, PYTHONPATH=ROOT, **env_extra)
    out = subprocess.run(
        [sys.executable, "-c", script.format(steps=steps)],
        env=env,
        capture_output=True,
        text=True,
        check=True,
        cwd=ROOT,
    )
    return out.stdout.strip()


def test_golden_hash():
    assert golden_hash() == GOLDEN_HASH


def test_two_runs_are_bit_identical(crest):
    hashes = []
    for _ in range(2):
        sim = VehicleBatch(3, ROVER, [crest])
        sim.reset(np.array([[0, 0, 0, 5], [240, 10, 0.1, 20], [650, -5, 0, 25]], float))
        drive(sim, scripted_commands(3, 80, seed=3))
        hashes.append(sim.state_hash())
    assert hashes[0] == hashes[1]


def test_car_alone_equals_car_in_a_batch_of_257(crest):
    n = 257
    k = 131
    rng = np.random.default_rng(11)
    poses = np.column_stack(
        [
            rng.uniform(0, 700, n),
            rng.uniform(-50, 50, n),
            rng.uniform(-3, 3, n),
            rng.uniform(0, 25, n),
        ]
    )
    cmds = scripted_commands(n, 60, seed=5)
    batch = VehicleBatch(n, ROVER, [crest], parallel=True)
    batch.reset(poses)
    drive(batch, cmds)
    alone = VehicleBatch(1, ROVER, [crest])
    alone.reset(poses[k : k + 1])
    drive(alone, cmds[:, k : k + 1])
    assert np.array_equal(batch.state[k], alone.state[0])
    assert np.array_equal(batch.istate[k], alone.istate[0])


def test_serial_and_parallel_are_bit_identical(crest):
    out = []
    for par in (False, True):
        sim = VehicleBatch(64, ROVER, [crest], parallel=par)
        sim.reset(
            np.column_stack(
                [np.linspace(0, 700, 64), np.zeros(64), np.zeros(64), np.full(64, 15.0)]
            )
        )
        drive(sim, scripted_commands(64, 40, seed=9))
        out.append(sim.state_hash())
    assert out[0] == out[1]


def test_a_fresh_process_reproduces_the_hash():
    assert _run_subprocess(40, {}) == golden_hash(40)


def test_numba_disabled_reproduces_the_hash():
    assert _run_subprocess(6, {"NUMBA_DISABLE_JIT": "1"}) == golden_hash(6)


def test_snapshot_restore_lockstep_500_steps(crest):
    cmds = scripted_commands(2, 500, seed=21)
    a = VehicleBatch(2, ROVER, [crest])
    a.reset(np.array([[0, 0, 0, 8], [300, 0, 0, 20]], float))
    hashes = []
    snap = None
    for i, c in enumerate(cmds):
        if i == 200:
            snap = a.snapshot()
        a.set_commands(c)
        a.step(24)
        hashes.append(a.state_hash())
    b = VehicleBatch(2, ROVER, [crest])
    b.restore(snap)
    for i in range(200, 500):
        b.set_commands(cmds[i])
        b.step(24)
        assert b.state_hash() == hashes[i], f"diverged at step {i}"


def test_corrupt_or_mismatched_snapshot_is_rejected_and_changes_nothing(crest):
    sim = VehicleBatch(2, ROVER, [crest])
    sim.step(100)
    before = sim.state_hash()
    snap = sim.snapshot()
    bad = Snapshot(snap.version, snap.state.copy(), snap.istate.copy(), snap.digest)
    bad.state[0, 0] += 1.0
    with pytest.raises(SnapshotError, match="corrupt"):
        sim.restore(bad)
    with pytest.raises(SnapshotError, match="version"):
        sim.restore(Snapshot(snap.version + 1, snap.state, snap.istate, snap.digest))
    other = VehicleBatch(3, ROVER, [crest])
    with pytest.raises(SnapshotError, match="shapes"):
        other.restore(snap)
    with pytest.raises(SnapshotError):
        sim.restore("not a snapshot")
    assert sim.state_hash() == before


def test_state_hash_sees_every_byte(crest):
    sim = VehicleBatch(1, ROVER, [crest])
    h0 = sim.state_hash()
    sim.state[0, -1] = np.nextafter(sim.state[0, -1], 1.0)
    assert sim.state_hash() != h0
