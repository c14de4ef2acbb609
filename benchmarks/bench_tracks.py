"""Throughput of the tracks package: bake, projection, generation, loading.

Prints the figures and writes them as JSON (default ``out/bench_tracks.json``). Nothing here is
asserted: timings depend on the machine and on what else runs on it.

    python benchmarks/bench_tracks.py [--out PATH] [--n-cars 1024] [--quick]

"Cold" bake is the first bake in this process (numba functions loaded from the on-disk cache,
or compiled if there is none: see ``numba_cache_was_warm``); "warm" is a repeat bake of the
same stage with the bake cache bypassed; "cached" is a cache hit.
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

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def _best(fn, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return min(times)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=str(ROOT / "out" / "bench_tracks.json"))
    ap.add_argument("--n-cars", type=int, default=1024)
    ap.add_argument("--quick", action="store_true", help="fewer repetitions")
    args = ap.parse_args(argv)
    rep = 2 if args.quick else 5

    env_cache = os.environ.get("NUMBA_CACHE_DIR")
    cache_dir = Path(env_cache) if env_cache else ROOT / "tracks" / "__pycache__"
    warm_cache = cache_dir.is_dir() and any(p.suffix == ".nbi" for p in cache_dir.rglob("*"))

    t = time.perf_counter()
    import tracks
    from tracks.bake import bake_uncached

    res: dict[str, object] = {
        "import_s": time.perf_counter() - t,
        "numba_cache_was_warm": warm_cache,
        "python": platform.python_version(),
        "machine": platform.machine(),
        "cpus": os.cpu_count(),
    }

    # --- bake: a 2 km stage -------------------------------------------------------------
    t = time.perf_counter()
    stage = tracks.generate(42)  # 2,000 m timed, ~2.2 km of path
    res["first_generate_s"] = time.perf_counter() - t
    t = time.perf_counter()
    terr = bake_uncached(stage)
    res["bake_2km_cold_s"] = time.perf_counter() - t
    res["bake_2km_warm_s"] = _best(lambda: bake_uncached(stage), rep)
    tracks.bake(stage)
    res["bake_2km_cached_s"] = _best(lambda: tracks.bake(stage), 50)
    res["bake_2km_nodes"] = int(terr.heights_m.size)
    res["bake_2km_path_m"] = stage.length_m
    lib = {n: tracks.load_stage(n) for n in tracks.list_stages()}
    res["bake_library_warm_s"] = {n: _best(lambda s=s: bake_uncached(s), 2) for n, s in lib.items()}

    # --- projection: N cars driving along the stage ---------------------------------------
    n = args.n_cars
    path = stage.path
    rng = np.random.default_rng(0)
    steps = 300 if args.quick else 1000
    ds_step = 0.5  # m per control step (30 m/s at 60 Hz)
    s = rng.uniform(0.0, path.length_m - ds_step * steps - 20.0, n)
    lat = rng.uniform(-0.8, 0.8, n) * path.half_width_at(s)
    proj = tracks.Projector(stage)  # 8 lookahead distances

    def frames(k):
        sk = s + ds_step * k
        x, y = path.point_at(sk)
        tx, ty = path.tangent_at(sk)
        pos = np.stack([x - ty * lat, y + tx * lat], axis=1)
        fwd = np.stack([tx, ty], axis=1)
        return pos, fwd

    pre = [frames(k) for k in range(steps)]  # cars move 0.5 m per step, never teleport
    s_prev = proj.project(pre[0][0], pre[0][1], None).s_m.copy()
    t = time.perf_counter()
    for k in range(steps):
        pos, fwd = pre[k]
        s_prev[:] = proj.project(pos, fwd, s_prev).s_m
    dt = time.perf_counter() - t
    res["projection_warm_per_s"] = steps * n / dt
    res["projection_n_cars"] = n
    res["projection_lookahead_k"] = proj.n_lookahead
    cold_reps = 20 if args.quick else 60
    t = time.perf_counter()
    for _ in range(cold_reps):
        proj.project(pre[0][0], pre[0][1], None)
    res["projection_cold_per_s"] = cold_reps * n / (time.perf_counter() - t)
    one = tracks.Projector(stage)
    p1, f1 = pre[1][0][:1].copy(), pre[1][1][:1].copy()
    s1 = one.project(p1, f1, None).s_m.copy()
    res["projection_single_call_us"] = 1e6 * _best(lambda: one.project(p1, f1, s1), 2000)

    # --- generation ---------------------------------------------------------------------
    m = 40 if args.quick else 200
    t = time.perf_counter()
    for seed in range(m):
        tracks.generate(seed)
    res["generate_ms_per_stage"] = 1e3 * (time.perf_counter() - t) / m
    t = time.perf_counter()
    for seed in range(m // 2):
        tracks.generate(seed, closed=True)
    res["generate_loop_ms_per_stage"] = 1e3 * (time.perf_counter() - t) / (m // 2)
    text = {n: tracks.dumps_stage(s) for n, s in lib.items()}
    res["load_library_ms"] = {
        n: 1e3 * _best(lambda x=x: tracks.loads_stage(x), 5) for n, x in text.items()
    }

    print("tracks benchmark")
    print(f"  numba cache warm at start : {warm_cache}")
    print(
        f"  bake 2 km stage ({res['bake_2km_nodes']:,} nodes): cold {res['bake_2km_cold_s']:.3f}"
        f" s, warm {res['bake_2km_warm_s']:.3f} s, cached {1e6 * res['bake_2km_cached_s']:.1f}"
        " us"
    )
    for name, v in res["bake_library_warm_s"].items():  # type: ignore[union-attr]
        print(f"    bake {name:15s} {v:.3f} s")
    print(
        f"  projection N={n}, K={proj.n_lookahead}: warm "
        f"{res['projection_warm_per_s'] / 1e6:.2f} M car-projections/s, cold (global) "
        f"{res['projection_cold_per_s'] / 1e6:.3f} M/s, one car "
        f"{res['projection_single_call_us']:.1f} us/call"
    )
    print(
        f"  generate: {res['generate_ms_per_stage']:.2f} ms/stage (2 km point to point), "
        f"{res['generate_loop_ms_per_stage']:.2f} ms/stage (2 km loop)"
    )
    for name, v in res["load_library_ms"].items():  # type: ignore[union-attr]
        print(f"    load {name:15s} {v:.2f} ms")
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(res, indent=2) + "\n")
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
