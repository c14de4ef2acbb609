"""Renderer throughput: rgb_array frames per second at 600x400, and video export speed.

    python3 benchmarks/bench_render.py            # full run (about half a minute), JSON to out/
    python3 benchmarks/bench_render.py --quick    # a few seconds

Figures (the line follower drives ``opener``; frames drawn from the env's core the way
``render()`` draws them, so building the car views and the HUD record is included):

- ``frames_per_s_car_up``: the default camera (turns with the car, bilinear background), HUD on.
- ``frames_per_s_north_up``: the north-up camera.
- ``frames_per_s_nearest``: car-up with nearest-neighbour background sampling.
- ``frames_per_s_vector_8``: car-up, a vector env of 8 cars (7 drawn translucent).
- ``stage_bake_s``: baking the opener background (the first frame of a stage; cached after).
- ``export_x_realtime``: ``render_episode`` to an H.264 MP4 at 30 fps: simulated seconds per
  wall-clock second (ffmpeg encodes in its own process).

Target (issue 5): at least 200 frames per second at 600x400. It prints the figures and writes
them as JSON; it never asserts a time.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
os.environ.setdefault("SDL_VIDEODRIVER", "dummy")

import numpy as np

from rally_env import RallyEnv, RallyVectorEnv
from rally_env.policies import LineFollower
from rally_env.render import EnvRenderer, render_episode
from rally_env.render import renderer as R

TARGETS = {"frames_per_s_car_up": 200.0}


def _drive(env, policy, obs, n):
    for _ in range(n):
        obs, _, te, tr, _ = env.step(policy(obs))
        if te or tr:
            obs, _ = env.reset()
    return obs


def bench_frames(seconds: float, **kw) -> float:
    env = RallyEnv(stage="opener")
    pol = LineFollower(env.core.layout)
    obs, _ = env.reset(seed=0)
    obs = _drive(env, pol, obs, 300)  # somewhere interesting, moving
    er = EnvRenderer("rgb_array", 20, width=600, height=400, **kw)
    for _ in range(20):  # warm up (JIT, background bake, text cache)
        er.render(env.core)
    n = 0
    t0 = time.perf_counter()
    spent = 0.0
    while spent < seconds:
        obs = _drive(env, pol, obs, 1)
        t = time.perf_counter()
        f = er.render(env.core)
        spent += time.perf_counter() - t
        n += 1
    assert f.shape == (400, 600, 3)
    del t0
    return n / spent


def bench_vector(seconds: float, n_cars: int = 8) -> float:
    env = RallyVectorEnv(num_envs=n_cars, stage="opener")
    env.reset(seed=0)
    rng = np.random.default_rng(0)
    for _ in range(100):
        a = np.zeros((n_cars, 4), np.float32)
        a[:, 0] = 0.2 * rng.standard_normal(n_cars)
        a[:, 1] = 0.7
        env.step(a)
    er = EnvRenderer("rgb_array", 20, width=600, height=400)
    core = env.core
    for _ in range(20):
        er.render(core)
    n = 0
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        er.render(core)
        n += 1
    return n / (time.perf_counter() - t0)


def bench_bake() -> float:
    import tracks
    from rally_env.render.background import bake_background

    st = tracks.load_stage("opener")
    terr = tracks.bake(st)
    bake_background(st, terr, ppm=7.5, radius_m=60.0)  # compile
    t = time.perf_counter()
    bake_background(st, terr, ppm=7.5, radius_m=60.0)
    return time.perf_counter() - t


def bench_export(max_seconds: float) -> tuple[float, float]:
    with tempfile.TemporaryDirectory() as d:
        render_episode("line", Path(d) / "w.mp4", stage="opener", seed=0, max_seconds=2.0)
        res = render_episode(
            "line", Path(d) / "run.mp4", stage="opener", seed=0, fps=30, max_seconds=max_seconds
        )
    return res.sim_time_s / res.wall_time_s, res.frames / res.wall_time_s


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="a few seconds in all")
    ap.add_argument("--out", default="out/bench_render.json", help="JSON output path")
    args = ap.parse_args(argv)
    sec = 1.0 if args.quick else 4.0
    res: dict[str, float] = {}
    res["frames_per_s_car_up"] = bench_frames(sec)
    res["frames_per_s_north_up"] = bench_frames(sec, camera="north-up")
    res["frames_per_s_nearest"] = bench_frames(sec, smooth=False)
    res["frames_per_s_vector_8"] = bench_vector(sec)
    res["stage_bake_s"] = bench_bake()
    xrt, fps = bench_export(5.0 if args.quick else 20.0)
    res["export_x_realtime"] = xrt
    res["export_frames_per_s"] = fps
    for k, v in res.items():
        tgt = TARGETS.get(k)
        note = f"   (target >= {tgt:g})" if tgt else ""
        print(f"{k:28s} {v:10.2f}{note}")
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(
        json.dumps(
            {
                "figures": res,
                "targets": TARGETS,
                "frame": [600, 400],
                "view_width_m": R.VIEW_WIDTH_M,
                "machine": {"cpus": os.cpu_count(), "python": platform.python_version()},
                "load_avg": os.getloadavg(),
            },
            indent=2,
        )
    )
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
