"""Two source trees of the project against each other: per-model physics speed or env speed,
in alternating subprocess rounds (e.g. ``main`` against a worktree of an older commit).

    git worktree add --detach /tmp/before <commit>
    python3 benchmarks/compare_trees.py /tmp/before . [--rounds 6]          # physics
    python3 benchmarks/compare_trees.py /tmp/before . [--rounds 6] --env    # envs

Each round runs one subprocess per tree (the order alternating), each with its own numba
cache (round 0 compiles and is not counted). Physics: every model at N = 1,024 cars serially,
the best of 15 repeats of 24 substeps. Envs: a ``Rally-v0`` env (200 steps, throttle 0.7,
resets included) and a 64-car ``RallyVectorEnv`` (50 steps), the best of 15 repeats. The
best over rounds is reported per tree, with the second tree's time relative to the first's.
Prints figures, never asserts; state the machine load (printed) beside them.
"""

import argparse
import json
import os
import shutil
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.snippet import last_line

CHILD_PHYS = r"""
import json, time, numpy as np
from physics import ROVER, VehicleBatch, flat_terrain
try:
    from benchmarks.physics_validation import WHEEL_SPEED_ROVER, small_car
except ImportError:  # an older tree keeps its validation scenarios in physics/
    from physics.validation import WHEEL_SPEED_ROVER, small_car
from physics.vehicles import vehicle
models = {
    "direct": ROVER,
    "wheel-speed": WHEEL_SPEED_ROVER,
    "drivetrain": small_car(),
    "rally-car": vehicle("rally-car"),
}
n, subs = 1024, 24
sims = {}
for name, p in models.items():
    sim = VehicleBatch(n, p, [flat_terrain(4000.0, 4.0)])
    rng = np.random.default_rng(0)
    u = rng.uniform
    sim.reset(np.column_stack([u(-500, 500, n), u(-500, 500, n), u(-3, 3, n), u(0, 25, n)]))
    z = np.zeros(n)
    sim.set_commands(np.column_stack([u(-0.5, 0.5, n), np.full(n, 0.6), z, z]))
    sim.step(4 * subs)
    sims[name] = sim
best = dict.fromkeys(sims, 1e9)
for _ in range(15):
    for name, sim in sims.items():
        t = time.perf_counter()
        sim.step(subs)
        best[name] = min(best[name], time.perf_counter() - t)
print(json.dumps({k: n * subs / v for k, v in best.items()}))
"""

CHILD_ENV = r"""
import json, time, numpy as np, gymnasium as gym, rally_env
from rally_env.vector import RallyVectorEnv
env = gym.make("Rally-v0").unwrapped
env.reset(seed=0)
a = np.array([0.1, 0.7, 0.0, 0.0], np.float32)
v = RallyVectorEnv(num_envs=64, stage="opener")
v.reset(seed=0)
A = np.tile(a, (64, 1))
for _ in range(200):
    env.step(a); v.step(A)
best1 = bestv = 1e9
for _ in range(15):
    t = time.perf_counter()
    for _ in range(200):
        _, _, te, tr, _ = env.step(a)
        if te or tr: env.reset(seed=0)
    best1 = min(best1, time.perf_counter() - t)
    t = time.perf_counter()
    for _ in range(50):
        v.step(A)
    bestv = min(bestv, time.perf_counter() - t)
print(json.dumps({"single env": 200 / best1, "vector 64 cars": 64 * 50 / bestv}))
"""


def _run(tree: str, cache: str, child: str) -> dict[str, float]:
    # compiled code only: an older tree runs Python first on a cold cache unless told not to
    env = dict(os.environ, PYTHONPATH=tree, NUMBA_CACHE_DIR=cache, RALLY_INTERPRET="0")
    return json.loads(last_line(child, env, tree))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("tree_a")
    ap.add_argument("tree_b")
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--env", action="store_true", help="envs instead of the physics models")
    args = ap.parse_args()
    trees = [str(Path(args.tree_a).resolve()), str(Path(args.tree_b).resolve())]
    child = CHILD_ENV if args.env else CHILD_PHYS
    caches = {t: tempfile.mkdtemp(prefix="nbcache") for t in trees}
    best: dict[str, dict[str, float]] = {t: {} for t in trees}
    try:
        for r in range(args.rounds + 1):  # round 0 compiles and is not counted
            for t in trees if r % 2 == 0 else trees[::-1]:
                res = _run(t, caches[t], child)
                for k, v in res.items():
                    if r:
                        best[t][k] = max(best[t].get(k, 0.0), v)
    finally:
        for c in caches.values():
            shutil.rmtree(c, ignore_errors=True)
    a, b = trees
    unit = "steps/s" if args.env else "car-substeps/s"
    print(f"A = {a}\nB = {b}")
    print(f"{'':<16} {'A ' + unit:>20} {'B ' + unit:>20} {'B time vs A':>12}")
    for k in best[a]:
        rel = best[a][k] / best[b][k] - 1
        print(f"{k:<16} {best[a][k]:20,.0f} {best[b][k]:20,.0f} {rel:+12.1%}")
    print("load average:", " ".join(Path("/proc/loadavg").read_text().split()[:3]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
