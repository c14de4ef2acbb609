"""Ray / RLlib figures (docs/ray.md): sampling throughput, distributed evaluation, memory.

Needs the ray extra. Starts its own two-node cluster on this machine on loopback only (the test
suite's ``tests/ray/conftest.py::two_node_cluster``: a head and a second node of one CPU each,
every process on ``127.0.0.1``) and stops it at the end.

* **sampling**: env steps/s that RLlib's env runners collect (``EnvRunnerGroup.sample``, the
  policy's forward pass included, no learning) for K = 1, 2 runners x M = 1, 64, 256 cars per
  runner (one native ``RallyVectorEnv`` each), against the single-process native vector env
  stepped with random actions (no policy: the env's own ceiling);
* **eval**: ``rally eval --agent heuristic`` of N held-out stages (``random:N``, 1 episode
  each) locally and over the cluster, wall time, and whether the results are identical;
* **memory**: RSS of each Ray worker process after the runs (``/proc``).

    python3 benchmarks/bench_ray.py --quick      # M up to 64, N = 6
    python3 benchmarks/bench_ray.py              # M up to 256, N = 20

Interleaved rounds, best of each, on a shared machine: say the load (``uptime``) with figures.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def native_steps_per_s(m: int, seconds: float) -> float:
    from rally_env.vector import RallyVectorEnv

    env = RallyVectorEnv(num_envs=m, stage="opener")
    env.reset(seed=0)
    rng = np.random.default_rng(0)
    a = rng.uniform(-1, 1, (m, 4)).astype(np.float32)
    a[:, 1] = 0.8
    a[:, 2:] = 0.0
    n, t0 = 0, time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        env.step(a)
        n += m
    rate = n / (time.perf_counter() - t0)
    env.close()
    return rate


def rllib_steps_per_s(k: int, m: int, seconds: float) -> float:
    from agents.rllib import ppo_config

    cfg = ppo_config("opener", num_env_runners=k, envs_per_runner=m)
    cfg = cfg.env_runners(rollout_fragment_length=max(1, 2048 // max(1, m)))
    algo = cfg.build_algo()
    try:
        group = algo.env_runner_group

        def sample() -> int:  # the episodes come back to the driver, as for PPO's learner
            parts = group.foreach_env_runner(lambda r: r.sample(), local_env_runner=False)
            return sum(len(e) for part in parts for e in part)

        sample()  # warm up (numba cache, module build)
        n, t0 = 0, time.perf_counter()
        while time.perf_counter() - t0 < seconds:
            n += sample()
        return n / (time.perf_counter() - t0)
    finally:
        algo.stop()


def worker_rss_mb() -> list[float]:
    out = []
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            cmd = (d / "cmdline").read_bytes()
            if not cmd.startswith(b"ray::"):
                continue
            for line in (d / "status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    out.append(int(line.split()[1]) / 1024)
        except OSError:
            continue
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--seconds", type=float, default=None, help="per sampling measurement")
    ap.add_argument("--stages", type=int, default=None, help="N of the evaluation")
    ap.add_argument("--no-sampling", action="store_true", help="only the evaluation and memory")
    args = ap.parse_args()
    seconds = args.seconds or (3.0 if args.quick else 8.0)
    ms = (1, 64) if args.quick else (1, 64, 256)
    n_stages = args.stages or (6 if args.quick else 20)

    from tests.ray.conftest import two_node_cluster

    with two_node_cluster() as (_, address):
        print(f"load: {os.getloadavg()}")
        print(f"sampling (best of interleaved rounds, {seconds:.0f} s each), env steps/s:")
        best: dict[str, float] = {}
        for _ in range(0 if args.no_sampling else 1 if args.quick else 2):
            for m in ms:
                key = f"native vector env, 1 process, M={m}"
                best[key] = max(best.get(key, 0.0), native_steps_per_s(m, seconds))
                for k in (1, 2):
                    key = f"RLlib K={k} runner(s) x M={m}"
                    best[key] = max(best.get(key, 0.0), rllib_steps_per_s(k, m, seconds))
        for key, v in best.items():
            print(f"  {key:40s} {v:12,.0f}")

        from agents.distributed import evaluate_distributed
        from agents.evaluate import evaluate
        from agents.reference import clear_reference_cache

        spec = f"random:{n_stages}"
        # the driver computes every stage's reference time (cached per stage): each run
        # starts without the other's
        clear_reference_cache()
        t0 = time.perf_counter()
        local = evaluate("heuristic", spec, [0])
        t_local = time.perf_counter() - t0
        clear_reference_cache()
        t0 = time.perf_counter()
        dist = evaluate_distributed("heuristic", spec, [0], address=address)
        t_dist = time.perf_counter() - t0
        a, b = local.to_dict(), dist.to_dict()
        a.pop("wall_time_s"), b.pop("wall_time_s")
        print(
            f"eval of {n_stages} held-out stages (heuristic, 1 episode each): local "
            f"{t_local:.1f} s, 2-node cluster {t_dist:.1f} s, identical: {a == b}"
        )
        rss = worker_rss_mb()
        if rss:
            print(
                f"Ray worker processes: {len(rss)}, RSS median {np.median(rss):.0f} MB, "
                f"max {max(rss):.0f} MB"
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
