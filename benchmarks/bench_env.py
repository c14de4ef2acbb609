"""Throughput of the Gymnasium layer: single env steps/s, vector env car-steps/s, reset cost.

    python3 benchmarks/bench_env.py              # full run (about a minute), JSON to out/
    python3 benchmarks/bench_env.py --quick      # a few seconds per figure

Figures (all at the default 20 Hz control, 24 physics substeps per step, random actions,
episode resets included):

- ``single``: ``gymnasium.make("RallyDirect-v0")`` (with Gymnasium's default wrappers) steps/s.
- ``vector_<n>``: ``RallyVectorEnv(n)`` car-steps/s (next-step autoreset), for n = 16, 256,
  1024, with the physics threaded (``parallel=True``, the default from 64 cars) and serial.
- ``reset_ms_per_car``: a full reset of the 1024-car env divided by 1024, and one single-env
  reset.

It prints the figures and writes them as JSON; it never asserts a time (see DESIGN.md).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import gymnasium as gym

import rally_env  # noqa: F401
from rally_env import RallyVectorEnv

TARGETS = {
    "single_steps_per_s": 10_000,
    "vector_1024_car_steps_per_s": 100_000,
    "reset_ms_per_car": 1.0,
}


def _random_actions(rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
    a = rng.random((*shape, 4), dtype=np.float32)
    a[..., 0] = 2.0 * a[..., 0] - 1.0
    return a


def bench_single(seconds: float, env_id: str = "RallyDirect-v0", **kw: object) -> dict[str, float]:
    env = gym.make(env_id, **kw)
    rng = np.random.default_rng(0)
    acts = _random_actions(rng, (4096,))
    env.reset(seed=0)
    for a in acts[:200]:  # warm up (JIT compile, caches)
        _, _, te, tr, _ = env.step(a)
        if te or tr:
            env.reset()
    env.reset(seed=1)
    steps = resets = 0
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        for a in acts:
            _, _, te, tr, _ = env.step(a)
            if te or tr:
                env.reset()
                resets += 1
        steps += len(acts)
    dt = time.perf_counter() - t0
    t1 = time.perf_counter()
    for s in range(50):
        env.reset(seed=s)
    reset_ms = (time.perf_counter() - t1) / 50 * 1e3
    return {"steps_per_s": steps / dt, "episodes": resets, "reset_ms": reset_ms}


def bench_vector(n: int, seconds: float, parallel: bool | None, **kw: object) -> dict[str, float]:
    envs = RallyVectorEnv(n, parallel=parallel, **kw)
    rng = np.random.default_rng(0)
    acts = [_random_actions(rng, (n,)) for _ in range(64)]
    envs.reset(seed=0)
    for a in acts[:5]:
        envs.step(a)
    t1 = time.perf_counter()
    envs.reset(seed=1)
    reset_s = time.perf_counter() - t1
    steps = ends = 0
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        for a in acts:
            _, _, te, tr, _ = envs.step(a)
            ends += int(te.sum() + tr.sum())
            steps += 1
            if time.perf_counter() - t0 >= seconds:
                break
    dt = time.perf_counter() - t0
    return {
        "car_steps_per_s": steps * n / dt,
        "env_steps_per_s": steps / dt,
        "episodes": ends,
        "reset_ms_per_car": reset_s / n * 1e3,
        "parallel": bool(envs.core.sim.parallel),
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="short measurements")
    ap.add_argument("--seconds", type=float, default=None, help="seconds per figure")
    ap.add_argument("--json", default="out/bench_env.json", help="where to write the figures")
    args = ap.parse_args(argv)
    sec = args.seconds if args.seconds is not None else (1.5 if args.quick else 6.0)

    res: dict[str, object] = {
        "machine": {
            "cpus": os.cpu_count(),
            "python": platform.python_version(),
            "platform": platform.platform(),
            "load_avg_1min": os.getloadavg()[0] if hasattr(os, "getloadavg") else None,
        },
        "control_hz": 20,
        "targets": TARGETS,
    }
    s = bench_single(sec)
    res["single"] = s
    print(
        f"gymnasium.make('RallyDirect-v0'): {s['steps_per_s']:9.0f} steps/s "
        f"({s['episodes']} episodes; reset {s['reset_ms']:.3f} ms)"
    )
    for n in (16, 256, 1024):
        for par in (None,) if n < 64 else (True, False):
            v = bench_vector(n, sec, par)
            key = f"vector_{n}" + ("" if par in (None, True) else "_serial")
            res[key] = v
            print(
                f"RallyVectorEnv({n:4d}) {'threads' if v['parallel'] else 'serial '}: "
                f"{v['car_steps_per_s']:9.0f} car-steps/s "
                f"({v['env_steps_per_s']:.1f} batch steps/s, {v['episodes']} episodes, "
                f"reset {v['reset_ms_per_car']:.4f} ms/car)"
            )
    # Rally-v1 (wheel-speed model) with the rover and the rally car (engine, gearbox, diffs)
    for vehicle in ("rover", "rally-car"):
        s1 = bench_single(sec, "RallyWheelSpeed-v1", vehicle=vehicle)
        v1 = bench_vector(1024, sec, True, version=1, vehicle=vehicle)
        res[f"v1_{vehicle}"] = {"single": s1, "vector_1024": v1}
        print(
            f"Rally-v1 {vehicle:<9}: single {s1['steps_per_s']:9.0f} steps/s; "
            f"RallyVectorEnv(1024) threads {v1['car_steps_per_s']:9.0f} car-steps/s"
        )
    best = max(res["vector_1024"]["car_steps_per_s"], res["vector_1024_serial"]["car_steps_per_s"])
    res["summary"] = {
        "single_steps_per_s": s["steps_per_s"],
        "vector_1024_car_steps_per_s": best,
        "reset_ms_per_car": res["vector_1024"]["reset_ms_per_car"],
    }
    out = Path(args.json)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(res, indent=2))
    print(f"figures written to {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
