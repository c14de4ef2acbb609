"""A Rally-v0 env compiles only the model it uses.

The physics kernels take compile-time model switches (``physics.kernel.model_switches``): numba
compiles one specialization per switch combination, and a basic (seed-model) car's contains
none of the extended models' code (wheel speed, arcade, drivetrain, skid steer). The check runs
in a fresh interpreter, so only what that interpreter's envs asked for is listed.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from physics import layout as L
from physics.kernel import model_switches

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

SCRIPT = """
import json
import gymnasium as gym
import numpy as np
import rally_env  # noqa: F401
from physics import kernel

def switches(d):
    return sorted({tuple(str(t) for t in sig[-3:]) for sig in d.signatures})

env = gym.make("Rally-v0")
env.reset(seed=0)
for _ in range(3):
    env.step(env.action_space.sample())
out = {"serial": switches(kernel.step_cars), "parallel": switches(kernel.step_cars_parallel)}
import sys
bake = sys.modules["tracks.bake"]  # the package exports a function of that name
out["bake_nodes"] = [str(sig[-1]) for sig in bake._bake_nodes.signatures]
out["bake_block"] = [str(sig[-1]) for sig in bake._bake_block.signatures]
out["fill_tiles"] = [str(sig[4]) for sig in bake._fill_tiles.signatures]
out["csr"] = len(bake._csr.signatures)
if MODE == "bake-control":
    import tracks
    st = tracks.load_stage("skidpad")
    bake.StageTerrain(st).bake_region(0, 80, 0, 80)  # 6,400 nodes: more than one block
    bake.StageTerrain(st, sectioned=True).prebake(np.array([[3, 3]], np.int64))
    out["bake_block"] = sorted(str(sig[-1]) for sig in bake._bake_block.signatures)
    out["fill_tiles"] = sorted(str(sig[4]) for sig in bake._fill_tiles.signatures)
if MODE == "vector":
    from rally_env.vector import RallyVectorEnv
    v = RallyVectorEnv(num_envs=4, parallel=True)
    v.reset(seed=0)
    v.step(np.stack([v.single_action_space.sample() for _ in range(4)]))
    out["parallel"] = switches(kernel.step_cars_parallel)
if MODE == "control":
    from physics import VehicleBatch
    from benchmarks.physics_validation import WHEEL_SPEED_ROVER
    VehicleBatch(2, WHEEL_SPEED_ROVER).step(2)
    out["serial"] = switches(kernel.step_cars)
print(json.dumps(out))
"""


def _run(mode: str) -> dict:
    env = dict(os.environ, PYTHONPATH=ROOT)
    out = subprocess.run(
        [sys.executable, "-c", f"MODE = {mode!r}\n" + SCRIPT],
        env=env,
        capture_output=True,
        text=True,
        check=True,
        cwd=ROOT,
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


BASIC = ["none", "none", "none"]


def test_rally_v0_compiles_only_the_basic_model():
    out = _run("single")
    assert out["serial"] == [BASIC]
    assert out["parallel"] == []


def test_threaded_vector_env_compiles_only_the_basic_model():
    out = _run("vector")
    assert out["parallel"] == [BASIC]


def test_rally_v0_bakes_tiles_without_the_whole_grid_scan_or_section_labels():
    # the tile bake's switches (tracks.bake._bake_nodes, _fill_tiles) are None: the first
    # step does not compile the dense bake (tracks.bake._bake_block)
    # nor the section labelling, and the segment buckets' table (_csr) is compiled for one
    # array layout (_bake_nodes itself is listed only where it was compiled: a warm cache
    # loads _fill_tiles whole)
    out = _run("single")
    assert "bool" not in out["bake_nodes"]
    assert out["bake_block"] == []  # the whole-grid bake's entry point
    assert out["fill_tiles"] == ["none"]
    assert out["csr"] == 1


def test_a_dense_or_sectioned_bake_is_its_own_specialization():
    out = _run("bake-control")
    assert out["bake_block"] == ["none"]  # dense, unsectioned: no labels
    assert out["fill_tiles"] == ["bool", "none"]


COLD = """
import gc
import sys
import gymnasium as gym
import rally_env  # noqa: F401
from numba.core.registry import CPUDispatcher

env = gym.make("Rally-v0")
env.reset(seed=0)
env.step(env.action_space.sample())
for d in gc.get_objects():
    if isinstance(d, CPUDispatcher) and len(d.signatures) > 1:
        f = d.py_func
        print(f"{f.__module__}.{f.__qualname__}", [str(t) for t in d.signatures])
bake = sys.modules["tracks.bake"]
for d in (bake._section_nodes,):  # what the tile bake's switch leaves out
    if d.signatures:
        print("compiled", d.py_func.__qualname__)
print("done")
"""


def test_a_first_rally_v0_step_compiles_no_function_twice(tmp_path):
    # an empty numba cache and no precompile worker: this process compiles everything the
    # first step needs, and no function for two argument types (a literal 0 or False passed
    # to a helper its other callers give an int64 or a bool compiles it again: physics.jit),
    # nor the section labelling the tile bake does not run
    env = dict(os.environ, PYTHONPATH=ROOT, NUMBA_CACHE_DIR=str(tmp_path), RALLY_PRECOMPILE="0")
    out = subprocess.run(
        [sys.executable, "-c", COLD], env=env, capture_output=True, text=True, cwd=ROOT
    )
    assert out.returncode == 0, out.stderr[-2000:]
    lines = out.stdout.strip().splitlines()
    assert lines[-1] == "done"
    assert lines[:-1] == []


def test_another_model_is_its_own_specialization():
    # the control: the listing does see a second model when one is used
    out = _run("control")
    assert BASIC in out["serial"]
    assert ["bool", "bool", "none"] in out["serial"]
    assert len(out["serial"]) == 2


@pytest.mark.parametrize(
    "extended, model, expected",
    [
        (False, L.TIRE_DIRECT, (None, None, None)),
        (False, L.TIRE_WHEEL_SPEED, (None, None, None)),  # a basic row has no tire model
        (True, L.TIRE_DIRECT, (True, None, None)),
        (True, L.TIRE_WHEEL_SPEED, (True, True, None)),
        (True, L.TIRE_ARCADE, (True, None, True)),
    ],
)
def test_model_switches(extended, model, expected):
    assert model_switches(extended, model) == expected
