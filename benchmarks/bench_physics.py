"""Physics throughput: car-substeps per second, cold compile and warm start (of the physics
alone and of a first Rally-v0 env).

    python3 benchmarks/bench_physics.py [--json out/bench_physics.json] [--quick]

Prints figures and writes JSON; never used as a test gate.
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import sys
import tempfile
import time

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402

from benchmarks.snippet import last_line  # noqa: E402
from physics import ROVER, VehicleBatch, flat_terrain  # noqa: E402

_START = """
import time
t0 = time.perf_counter()
import numpy as np
from physics import VehicleBatch
sim = VehicleBatch(1)
sim.step(8)
print(time.perf_counter() - t0)
"""


# A new user's first env: gym.make + reset + step of Rally-v0, then the first step of a
# threaded vector env (which compiles the prange kernels on top). On a cold cache the first
# env's step kernels compile in a second process meanwhile (rally_env.precompile).
_ENV_START = """
import time
t0 = time.perf_counter()
import gymnasium as gym
import numpy as np
import rally_env  # noqa: F401
env = gym.make("Rally-v0")
env.reset(seed=0)
env.step(env.action_space.sample())
t1 = time.perf_counter()
from rally_env.vector import RallyVectorEnv
v = RallyVectorEnv(num_envs=4, parallel=True)
v.reset(seed=0)
v.step(np.stack([v.single_action_space.sample() for _ in range(4)]))
t2 = time.perf_counter()
print(t1 - t0, t2 - t1)
"""


def _subprocess_seconds(env: dict, script: str = _START) -> list[float]:
    return [float(v) for v in last_line(script, env, ROOT).split()]


def _batch(n: int, parallel: bool, params=ROVER) -> VehicleBatch:
    """``n`` cars on a flat terrain at random poses and speeds, random steering, throttle 0.6."""
    sim = VehicleBatch(n, params, [flat_terrain(4000.0, 4.0)], parallel=parallel)
    rng = np.random.default_rng(0)
    sim.reset(
        np.column_stack(
            [
                rng.uniform(-500, 500, n),
                rng.uniform(-500, 500, n),
                rng.uniform(-3, 3, n),
                rng.uniform(0, 25, n),
            ]
        )
    )
    sim.set_commands(
        np.column_stack([rng.uniform(-0.5, 0.5, n), np.full(n, 0.6), np.zeros(n), np.zeros(n)])
    )
    return sim


def _rate(n: int, parallel: bool, substeps: int, repeats: int, params=ROVER) -> float:
    sim = _batch(n, parallel, params)
    sim.step(substeps)  # warm
    best = float("inf")
    for _ in range(repeats):
        t = time.perf_counter()
        sim.step(substeps)
        best = min(best, time.perf_counter() - t)
    return n * substeps / best


def _rates_interleaved(models: dict, n: int, substeps: int, rounds: int) -> dict[str, float]:
    """Car-substeps/s of each model, serially: the best of ``rounds`` rounds that step every
    model in turn, so a slow spell of the machine hits all models alike."""
    sims = {name: _batch(n, False, params) for name, params in models.items()}
    for sim in sims.values():
        sim.step(4 * substeps)  # warm
    best = dict.fromkeys(sims, float("inf"))
    for _ in range(rounds):
        for name, sim in sims.items():
            t = time.perf_counter()
            sim.step(substeps)
            best[name] = min(best[name], time.perf_counter() - t)
    return {name: n * substeps / b for name, b in best.items()}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--json", default="out/bench_physics.json")
    ap.add_argument("--quick", action="store_true")
    args = ap.parse_args()
    res: dict = {"cpu_count": os.cpu_count()}

    with tempfile.TemporaryDirectory() as cache:
        env = dict(os.environ, PYTHONPATH=str(ROOT), NUMBA_CACHE_DIR=cache)
        res["cold_start_s"] = _subprocess_seconds(env)[0]  # compiles everything
        res["warm_start_s"] = _subprocess_seconds(env)[0]  # loads the cache
    print(f"cold import + compile + first step: {res['cold_start_s']:.2f} s")
    print(f"warm import-to-first-step:          {res['warm_start_s']:.2f} s")
    # the same for a Rally-v0 env, from an empty cache (what a new user waits for)
    with tempfile.TemporaryDirectory() as cache:
        env = dict(os.environ, PYTHONPATH=str(ROOT), NUMBA_CACHE_DIR=cache)
        first, vec = _subprocess_seconds(env, _ENV_START)
        warm, warm_vec = _subprocess_seconds(env, _ENV_START)
    res["rally_v0_cold_start_s"] = first
    res["rally_v0_cold_vector_step_s"] = vec
    res["rally_v0_warm_start_s"] = warm
    res["rally_v0_warm_vector_step_s"] = warm_vec
    for tag, (t, tv) in (("cold", (first, vec)), ("warm", (warm, warm_vec))):
        print(
            f"Rally-v0 {tag} make + reset + step: {t:.2f} s, then a threaded vector step {tv:.2f} s"
        )

    sizes = (1, 64, 1024) if args.quick else (1, 64, 1024, 4096)
    res["car_substeps_per_s"] = {}
    print(
        f"\n{'N':>6} {'serial Mcs/s':>13} {'us/car-substep':>15} {'prange Mcs/s':>13} "
        f"{'speed-up':>9}"
    )
    for n in sizes:
        subs = 480 if n <= 64 else 96
        reps = 20 if n == 1 else 5
        ser = _rate(n, False, subs, reps)
        par = _rate(n, True, subs, reps)
        res["car_substeps_per_s"][str(n)] = {"serial": ser, "prange": par}
        print(f"{n:>6} {ser / 1e6:13.3f} {1e6 / ser:15.3f} {par / 1e6:13.3f} {par / ser:9.2f}x")

    # the model beyond the seed: wheel speed, and wheel speed + drivetrain, against the direct
    # model, serially at N = 1024 (same commands, same terrain)
    from benchmarks.physics_validation import WHEEL_SPEED_ROVER, small_car
    from physics.vehicles import vehicle

    models = {
        "direct (Rally-v0 rover)": ROVER,
        "wheel-speed rover": WHEEL_SPEED_ROVER,
        "wheel-speed + drivetrain (small car)": small_car(),
        "rally-car (4WD, limited-slip diffs)": vehicle("rally-car"),
    }
    res["models_n1024_serial"] = {}
    rates = _rates_interleaved(models, 1024, 24, 20 if args.quick else 60)
    base = rates["direct (Rally-v0 rover)"]
    print(f"\n{'model, N = 1024 serial':<40} {'us/car-substep':>15} {'x direct':>9}")
    for name, r in rates.items():
        res["models_n1024_serial"][name] = {"car_substeps_per_s": r, "cost_vs_direct": base / r}
        print(f"{name:<40} {1e6 / r:15.3f} {base / r:9.2f}")

    # one 60 Hz frame (8 substeps) for a single car, including the Python call
    sim = VehicleBatch(1, ROVER, [flat_terrain(4000.0, 4.0)])
    sim.set_commands(np.array([0.2, 0.5, 0.0, 0.0]))
    sim.step(8)
    reps = 20000
    t = time.perf_counter()
    for _ in range(reps):
        sim.step(8)
    res["frame_60hz_n1_us"] = (time.perf_counter() - t) / reps * 1e6
    print(f"\none 60 Hz frame (8 substeps), N = 1, with the call: {res['frame_60hz_n1_us']:.2f} us")
    out = pathlib.Path(args.json)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(res, indent=2))
    print(f"JSON in {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
