"""A new user's first env on an empty numba cache: when the first step comes, and the steps/s
in each window of wall time after it (the first env compiles its step kernels in a background
process while it builds its stage, then steps compiled from its first step).

    python3 benchmarks/cold_start.py [--env RallyDirect-v0] [--seconds 40] [--window 2.5]

Each run is a fresh process with an empty cache of its own (``NUMBA_CACHE_DIR`` in a temporary
directory), so the machine's cache is neither used nor filled.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile

CHILD = r"""
import json, sys, time
t0 = time.perf_counter()
import gymnasium as gym
import numpy as np
import rally_env  # noqa: F401  (registers the ids)
env = gym.make(sys.argv[1])
env.reset(seed=0)
a = np.array([0.0, 0.5, 0.0, 0.0], np.float32)
env.step(a)
first = time.perf_counter() - t0
seconds, window = float(sys.argv[2]), float(sys.argv[3])
rows, n, w0 = [], 0, time.perf_counter()
while time.perf_counter() - t0 < seconds:
    _, _, term, trunc, _ = env.step(a)
    n += 1
    if term or trunc:
        env.reset()
    now = time.perf_counter()
    if now - w0 >= window:
        rows.append([round(w0 - t0, 2), round(now - t0, 2), round(n / (now - w0))])
        n, w0 = 0, now
print(json.dumps({"first_step_s": round(first, 2), "windows": rows}))
"""


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--env", default="RallyDirect-v0")
    ap.add_argument("--seconds", type=float, default=40.0)
    ap.add_argument("--window", type=float, default=2.5)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as cache:
        env = dict(os.environ, NUMBA_CACHE_DIR=cache)
        out = subprocess.run(
            [sys.executable, "-c", CHILD, args.env, str(args.seconds), str(args.window)],
            env=env,
            capture_output=True,
            text=True,
            check=True,
        )
    doc = json.loads(out.stdout.strip().splitlines()[-1])
    print(f"{args.env}, empty numba cache: first step after {doc['first_step_s']} s")
    print("window (s from start) | steps/s")
    for a, b, r in doc["windows"]:
        print(f"{a:6.1f} - {b:6.1f} | {r:,}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
