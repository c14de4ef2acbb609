"""Throughput of the Gymnasium layer: single env steps/s, vector env car-steps/s, reset cost.

    python3 benchmarks/bench_env.py              # full run (about a minute), JSON to out/
    python3 benchmarks/bench_env.py --quick      # a few seconds per figure

Figures (all at the default 20 Hz control, 24 physics substeps per step, random actions,
episode resets included):

- ``single``: ``gymnasium.make("RallyDirect-v0")`` (with Gymnasium's default wrappers) steps/s.
- ``single_sampled``: ``gymnasium.make("Rally-v0")`` stepped with ``action_space.sample()``,
  steps per wall-clock and per CPU second, best of 5 rounds (``--sampled``: only this, as one
  JSON line, to run alternately in two trees).
- ``vector_<n>``: ``RallyVectorEnv(n)`` car-steps/s (next-step autoreset), for n = 16, 256,
  1024, with the physics threaded (``parallel=True``, the default from 64 cars) and serial.
- ``reset_ms_per_car``: a full reset of the 1024-car env divided by 1024, and one single-env
  reset.
- ``random_<n>``: ``stage="random"`` against ``stage="opener"`` with the same actions (random
  steering, throttle 0.7, no brakes: cars leave the road and reset every ~10 s), measured in
  interleaved rounds in one process (best of each), for n = 16 and 1024 cars, and at 1024 cars
  also with a level set of 256 stages (``random_stage={"num_levels": 256}``, cars share
  stages), and for both with a stage pool (``random_stage={"pool": P, "pool_steps": 200}``,
  P = 4 at 16 cars and 32 at 1024: a fresh window of P stages every 200 steps, shared by the
  cars that reset in it); the ratio random / fixed; the amortized cost of a random reset in a
  single env (extra time per step on random stages times steps per episode); the peak RSS of a
  1024-car env on random stages, plain and with the pool (in a process of its own each). The
  ``random_*`` rows are also given per CPU second (``time.process_time``), of this process
  alone and with the stage prefetch worker's CPU time added: on a machine busy with other
  work, wall-clock ratios mostly measure the scheduler, CPU-time ratios much less so.

It prints the figures and writes them as JSON; it never asserts a time.
"""

from __future__ import annotations

import argparse
import json
import math
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


def bench_sampled(rounds: int = 5, steps: int = 4000) -> dict[str, float]:
    """``gymnasium.make("Rally-v0")`` stepped with ``action_space.sample()`` (resets
    included): the best of ``rounds`` runs of ``steps`` steps, per wall-clock and per CPU
    second (``time.process_time``; on a busy machine it varies less)."""
    env = gym.make("Rally-v0")
    env.action_space.seed(0)
    env.reset(seed=0)

    def run() -> None:
        for _ in range(steps):
            _, _, te, tr, _ = env.step(env.action_space.sample())
            if te or tr:
                env.reset()

    run()  # warm up (JIT compile, caches)
    wall = cpu = math.inf
    for _ in range(rounds):
        t0, c0 = time.perf_counter(), time.process_time()
        run()
        wall = min(wall, time.perf_counter() - t0)
        cpu = min(cpu, time.process_time() - c0)
    env.close()
    return {"steps_per_s": steps / wall, "steps_per_cpu_s": steps / cpu}


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


def _drive_actions(rng: np.random.Generator, n: int) -> np.ndarray:
    a = _random_actions(rng, (n,))
    a[:, 1] = 0.7
    a[:, 2:] = 0.0
    return a


def _worker_cpu_s() -> float:
    """CPU seconds the stage prefetch worker has used so far (0 without one, or off Linux)."""
    from tracks.prefetch import PREFETCHER

    proc = PREFETCHER._proc
    if proc is None:
        return 0.0
    try:
        with open(f"/proc/{proc.pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return 0.0


def _settle_worker(timeout_s: float = 10.0) -> None:
    """Wait (outside any timing) until the prefetch worker has answered every request, so its
    CPU time is counted in the round that asked for the work, not in the next one."""
    from tracks.prefetch import PREFETCHER

    deadline = time.monotonic() + timeout_s
    while PREFETCHER._pending and not PREFETCHER.disabled and time.monotonic() < deadline:
        with PREFETCHER._lock:
            PREFETCHER._drain(0.05)


def _time_vector(
    envs: RallyVectorEnv, acts: list[np.ndarray], seconds: float
) -> tuple[float, int, float, float]:
    """(car-steps per wall second, episodes ended, per CPU second of this process, per CPU
    second of this process and the prefetch worker together)."""
    steps = ends = 0
    t0 = time.perf_counter()
    c0 = time.process_time()
    w0 = _worker_cpu_s()
    while time.perf_counter() - t0 < seconds:
        for a in acts:
            _, _, te, tr, _ = envs.step(a)
            ends += int(te.sum() + tr.sum())
            steps += 1
    wall = time.perf_counter() - t0
    cpu = time.process_time() - c0
    _settle_worker()
    worker = _worker_cpu_s() - w0
    cs = steps * envs.num_envs
    return cs / wall, ends, cs / max(cpu, 1e-9), cs / max(cpu + worker, 1e-9)


#: Steps every env of the random-stage rows drives before it is timed (the random-steering
#: driver ends an episode about every 200 steps).
WARM_STEPS = 300


def bench_random_vector(n: int, seconds: float, rounds: int = 3, **variants: dict) -> dict:
    """Car-steps/s of each variant (env kwargs) in interleaved rounds, best of each: per
    wall-clock second, and per CPU second (of this process alone, and with the prefetch
    worker's CPU time added), which other load on the machine disturbs much less."""
    rng = np.random.default_rng(0)
    acts = [_drive_actions(rng, n) for _ in range(64)]
    envs = {name: RallyVectorEnv(n, **kw) for name, kw in variants.items()}
    for e in envs.values():
        e.reset(seed=0)
        # warm up (compile, first stages, tiles) past the first episode end of most cars:
        # rounds that end no episode would time no random reset at all
        for i in range(WARM_STEPS):
            e.step(acts[i % len(acts)])
    keys = ("car_steps_per_s", "episodes", "car_steps_per_cpu_s", "car_steps_per_cpu_s_all")
    best = {name: dict.fromkeys(keys, 0.0) for name in envs}
    for _ in range(rounds):
        for name, e in envs.items():
            got = dict(zip(keys, _time_vector(e, acts, seconds), strict=True))
            b = best[name]
            if got["car_steps_per_s"] > b["car_steps_per_s"]:
                b["car_steps_per_s"], b["episodes"] = got["car_steps_per_s"], got["episodes"]
            for k in keys[2:]:
                b[k] = max(b[k], got[k])
    return best


def bench_random_single(seconds: float, rounds: int = 3) -> dict:
    """Single env: steps/s on opener and on random stages, and the amortized reset cost."""
    from rally_env import RallyEnv

    rng = np.random.default_rng(1)
    acts = [_drive_actions(rng, 1)[0] for _ in range(512)]
    envs = {"opener": RallyEnv(stage="opener"), "random": RallyEnv(stage="random")}
    res = {k: {"steps_per_s": 0.0} for k in envs}
    cpu_rates: dict[str, float] = {}
    all_rates: dict[str, float] = {}
    for _ in range(rounds + 1):
        for name, env in envs.items():
            env.reset(seed=3)
            steps = resets = 0
            t0 = time.perf_counter()
            c0 = time.process_time()
            w0 = _worker_cpu_s()
            while time.perf_counter() - t0 < seconds:
                for a in acts:
                    _, _, te, tr, _ = env.step(a)
                    steps += 1
                    if te or tr:
                        env.reset()
                        resets += 1
            rate = steps / (time.perf_counter() - t0)
            cpu = time.process_time() - c0
            _settle_worker()
            if rate > res[name]["steps_per_s"]:
                res[name] = {"steps_per_s": rate, "steps_per_episode": steps / max(resets, 1)}
            cpu_rates[name] = max(cpu_rates.get(name, 0.0), steps / max(cpu, 1e-9))
            worker = _worker_cpu_s() - w0
            all_rates[name] = max(all_rates.get(name, 0.0), steps / max(cpu + worker, 1e-9))
    f, r = res["opener"], res["random"]
    extra_s = r["steps_per_episode"] * (1.0 / r["steps_per_s"] - 1.0 / f["steps_per_s"])
    res["reset_ms_amortized"] = 1e3 * extra_s
    for key, rates in (("reset_cpu_ms_amortized", cpu_rates), ("reset_cpu_ms_all", all_rates)):
        extra = r["steps_per_episode"] * (1.0 / rates["random"] - 1.0 / rates["opener"])
        res[key] = 1e3 * extra
    return res


_RSS_SCRIPT = """
import json, resource, sys, numpy as np
sys.path.insert(0, sys.argv[1])
from rally_env import RallyVectorEnv
n, steps = int(sys.argv[2]), int(sys.argv[3])
envs = RallyVectorEnv(n, stage="random", random_stage=json.loads(sys.argv[4]))
envs.reset(seed=0)
rng = np.random.default_rng(0)
for _ in range(steps):
    a = rng.random((n, 4), dtype=np.float32); a[:, 0] = 2 * a[:, 0] - 1; a[:, 1] = 0.7; a[:, 2:] = 0
    envs.step(a)
print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0)
"""


def random_rss_mb(n: int, steps: int, random_stage: dict | None = None) -> float:
    """Peak RSS (MB) of a process stepping an ``n``-car env on random stages (with these
    ``random_stage`` settings)."""
    import subprocess

    root = str(Path(__file__).resolve().parents[1])
    rs = json.dumps(random_stage or {})
    out = subprocess.run(
        [sys.executable, "-c", _RSS_SCRIPT, root, str(n), str(steps), rs],
        capture_output=True,
        text=True,
        check=True,
    )
    return float(out.stdout.split()[-1])


#: The stage pool of the ``pool_<P>`` rows: P stages per window of POOL_STEPS env steps, about
#: four random-action episodes per stage at 16 cars and 33 at 1,024 (the physics takes both
#: cores there, so each new stage costs more of them).
POOL_OF_CARS = {16: 4, 1024: 32}
POOL_STEPS = 200


def random_rows(sec: float, rss: bool = True) -> dict:
    """The ``stage="random"`` rows (see the module docstring)."""
    rows: dict[str, object] = {}
    fixed = {"stage": "opener"}
    rand = {"stage": "random"}
    for n in (16, 1024):
        variants = {"fixed": fixed, "random": rand}
        pool = POOL_OF_CARS[n]
        variants[f"pool_{pool}"] = {
            "stage": "random",
            "random_stage": {"pool": pool, "pool_steps": POOL_STEPS},
        }
        if n >= 256:
            variants["levels_256"] = {"stage": "random", "random_stage": {"num_levels": 256}}
        r = bench_random_vector(n, sec, **variants)
        for name in variants:
            if name != "fixed":
                for what, key in (
                    ("ratio_to_fixed", "car_steps_per_s"),
                    ("cpu_ratio_to_fixed", "car_steps_per_cpu_s"),
                    ("cpu_all_ratio_to_fixed", "car_steps_per_cpu_s_all"),
                ):
                    r[name][what] = r[name][key] / r["fixed"][key]
        rows[f"random_{n}"] = r
        line = ", ".join(
            f"{k} {v['car_steps_per_s']:8.0f}"
            + (f" ({100 * v['ratio_to_fixed']:.0f} %)" if "ratio_to_fixed" in v else "")
            for k, v in r.items()
        )
        print(f"RallyVectorEnv({n:4d}) car-steps/s: {line}")
        line = ", ".join(
            f"{k} {v['car_steps_per_cpu_s']:8.0f}"
            + (
                f" ({100 * v['cpu_ratio_to_fixed']:.0f} %; with the worker's CPU "
                f"{100 * v['cpu_all_ratio_to_fixed']:.0f} %)"
                if "cpu_ratio_to_fixed" in v
                else ""
            )
            for k, v in r.items()
        )
        print(f"RallyVectorEnv({n:4d}) car-steps per CPU s: {line}")
    s = bench_random_single(sec)
    rows["random_single"] = s
    print(
        f"single env: opener {s['opener']['steps_per_s']:.0f} steps/s, random "
        f"{s['random']['steps_per_s']:.0f} steps/s ({s['random']['steps_per_episode']:.0f} steps "
        f"per episode): a random reset costs {s['reset_ms_amortized']:.2f} ms amortized "
        f"(CPU time: {s['reset_cpu_ms_amortized']:.2f} ms of this process, "
        f"{s['reset_cpu_ms_all']:.2f} ms with the prefetch worker's)"
    )
    if rss:
        mb = random_rss_mb(1024, 600)
        rows["random_1024_peak_rss_mb"] = mb
        print(f"peak RSS of a 1024-car env after 600 steps on random stages: {mb:.0f} MB")
        pool = {"pool": POOL_OF_CARS[1024], "pool_steps": POOL_STEPS}
        mb = random_rss_mb(1024, 600, pool)
        rows["random_1024_pool_peak_rss_mb"] = mb
        print(f"the same with random_stage={pool}: {mb:.0f} MB")
    return rows


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="short measurements")
    ap.add_argument("--seconds", type=float, default=None, help="seconds per figure")
    ap.add_argument("--json", default="out/bench_env.json", help="where to write the figures")
    ap.add_argument("--random-only", action="store_true", help="only the stage='random' rows")
    ap.add_argument(
        "--no-rss",
        action="store_true",
        help="skip the 1024-car RSS row (slow on a busy machine)",
    )
    ap.add_argument(
        "--sampled",
        action="store_true",
        help="only gymnasium.make('Rally-v0') with action_space.sample(), one JSON line "
        "(run it alternately in two trees to compare them)",
    )
    args = ap.parse_args(argv)
    if args.sampled:
        print(json.dumps({"load_avg_1min": os.getloadavg()[0], **bench_sampled()}))
        return 0
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
    res.update(random_rows(sec, rss=not args.no_rss))
    if args.random_only:
        return _write(res, args.json)
    s = bench_single(sec)
    res["single"] = s
    res["single_sampled"] = bench_sampled()
    print(
        "gymnasium.make('Rally-v0') with action_space.sample(): "
        f"{res['single_sampled']['steps_per_s']:9.0f} steps/s"
    )
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
    return _write(res, args.json)


def _write(res: dict, path: str) -> int:
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(res, indent=2))
    print(f"figures written to {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
