"""Replay benchmark: record a full opener run (1,164 m), then time loading and verifying it.

    python3 benchmarks/bench_replay.py [--repeat 5] [--stage opener]

Prints and writes ``out/bench_replay.json``: recording overhead, file size, load time, the
in-process verification time (median of ``--repeat``, env construction included) and the wall
time of ``rally verify FILE`` in a fresh process (imports and numba cache loading included).
It never asserts a time.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from rally_env import DEFAULT_LAYOUT, RallyEnv  # noqa: E402
from rally_env.info import end_reason  # noqa: E402
from rally_env.replay import RecordReplay, load_replay, verify  # noqa: E402

IX = DEFAULT_LAYOUT.index


def drive(obs: np.ndarray, vmax: float = 16.0) -> np.ndarray:
    """Pure pursuit on the 20 m lookahead point with a curvature speed limit."""
    x, y = obs[IX["look_x_20m"]] * 20.0, obs[IX["look_y_20m"]] * 20.0
    steer = float(np.clip(2.5 * np.arctan2(y, x), -1.0, 1.0))
    v = obs[IX["speed"]] * 50.0
    c = max(abs(obs[IX[k]]) for k in ("look_curv_20m", "look_curv_30m", "look_curv_45m")) / 10.0
    vt = min(vmax, float(np.sqrt(0.5 * 3.72 / max(c, 1e-3))))
    thr = float(np.clip((vt - v) * 0.5, 0.0, 1.0))
    brk = float(np.clip((v - vt) * 0.3, 0.0, 1.0))
    return np.array([steer, thr, brk, 0.0], np.float32)


def run(env, seed: int = 3) -> tuple[int, float, dict]:
    obs, info = env.reset(seed=seed)
    t0 = time.perf_counter()
    n = 0
    while True:
        obs, _, term, trunc, info = env.step(drive(obs))
        n += 1
        if term or trunc:
            return n, time.perf_counter() - t0, info


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--stage", default="opener")
    args = ap.parse_args()

    run(RallyEnv(stage=args.stage))  # warm-up (numba cache)
    n, t_plain, _ = run(RallyEnv(stage=args.stage))
    rec = RecordReplay(RallyEnv(stage=args.stage))
    n2, t_rec, info = run(rec)
    rp = rec.replays[-1]
    tmp = Path(tempfile.mkdtemp())
    path = rp.save(tmp / rp.default_name())
    t0 = time.perf_counter()
    load_replay(path)
    t_load = time.perf_counter() - t0
    times = []
    for _ in range(max(1, args.repeat)):
        t0 = time.perf_counter()
        rep = verify(path)
        times.append(time.perf_counter() - t0)
        assert rep.accepted, rep.message
    env = dict(os.environ)
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    t0 = time.perf_counter()
    r = subprocess.run(
        [sys.executable, "-m", "rally_env", "verify", str(path)],
        env=env,
        capture_output=True,
        text=True,
    )
    t_cli = time.perf_counter() - t0
    out = {
        "stage": args.stage,
        "stage_length_m": float(info["stage_length_m"]),
        "end_reason": end_reason(info),
        "finish_time_s": float(info["finish_time_s"]),
        "steps": n2,
        "episode_plain_s": t_plain,
        "episode_recorded_s": t_rec,
        "file_bytes": path.stat().st_size,
        "load_s": t_load,
        "verify_median_s": statistics.median(times),
        "verify_min_s": min(times),
        "cli_verify_wall_s": t_cli,
        "cli_verify_rc": r.returncode,
    }
    assert n == n2
    print(
        f"{args.stage}: {out['stage_length_m']:.0f} m, {out['end_reason']} in "
        f"{out['finish_time_s']:.3f} s, {n2} control steps\n"
        f"  episode without / with RecordReplay: {t_plain * 1e3:.1f} / {t_rec * 1e3:.1f} ms\n"
        f"  replay file: {out['file_bytes'] / 1024:.1f} KiB, load {t_load * 1e3:.1f} ms\n"
        f"  verify (in process, env build + re-simulation + hashes): median "
        f"{out['verify_median_s'] * 1e3:.1f} ms, min {out['verify_min_s'] * 1e3:.1f} ms\n"
        f"  `rally verify FILE` in a fresh process (wall, imports included): {t_cli:.2f} s, "
        f"exit {r.returncode}"
    )
    (ROOT / "out").mkdir(exist_ok=True)
    (ROOT / "out" / "bench_replay.json").write_text(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
