"""How much of the friction circle a driver uses in the corners.

Re-drives a replay (for example one the oracle planner saved with ``rally eval --agent mpc
--replays DIR``) and the heuristic driver on the replay's stage, and prints, per corner (a
local minimum of speed where the car turns), the lateral acceleration over ``mu g`` (the
surface's grip under the wheels) and the minimum speed of each driver.

    python3 benchmarks/corner_grip.py out/replays/mpc/opener-*.rrp.json.gz
"""

from __future__ import annotations

import sys

import numpy as np


class _Replayed:
    """A policy that plays back a replay's actions."""

    def __init__(self, actions: np.ndarray):
        self.actions = actions
        self.k = 0

    def __call__(self, obs: np.ndarray) -> np.ndarray:
        a = self.actions[min(self.k, len(self.actions) - 1)]
        self.k += 1
        return a[None, :]


def _corners(tel: dict, min_lat_usage: float = 0.3, window_m: float = 15.0) -> list[int]:
    """Indices of speed minima (within +-window_m of progress) where the car is turning."""
    p, v = tel["progress_m"], tel["speed_mps"]
    lat = np.abs(tel["a_lat_mps2"])
    out = []
    for i in range(1, len(v) - 1):
        near = np.abs(p - p[i]) <= window_m
        if v[i] <= v[near].min() and lat[i] > 0 and tel["usage"][i] >= min_lat_usage:
            if not out or p[i] - p[out[-1]] > window_m:
                out.append(i)
    return out


def main(argv: list[str]) -> int:
    from agents.evaluate import run_episode
    from agents.heuristic import HeuristicDriver
    from rally_env.env import RallyEnv
    from rally_env.replay import load_replay

    if len(argv) != 1:
        print(__doc__)
        return 2
    rp = load_replay(argv[0])
    env = RallyEnv(**rp.env_kwargs)
    seed = int(rp.reset.get("seed", 0))
    runs = {
        "replay": run_episode(_Replayed(rp.actions), None, seed, env=env, record=True),
        "heuristic": run_episode(HeuristicDriver(), None, seed, env=env, record=True),
    }
    for name, r in runs.items():
        tel = r.telemetry
        tot = np.hypot(tel["a_long_mps2"], tel["a_lat_mps2"])
        mu_g = tel["usage"] * np.abs(tel["a_lat_mps2"]) / np.maximum(tot, 1e-9)  # lateral / mu g
        idx = _corners(tel)
        print(f"{name}: {r.stage_time_s:.2f} s, {len(idx)} corners (speed minima while turning)")
        print("  progress m | min speed m/s | lateral / mu g | total / mu g")
        for i in idx:
            print(
                f"  {tel['progress_m'][i]:10.0f} | {tel['speed_mps'][i]:13.2f} | "
                f"{mu_g[i]:14.2f} | {tel['usage'][i]:12.2f}"
            )
        lat = mu_g[np.array(idx, dtype=int)] if idx else np.array([np.nan])
        print(
            f"  lateral / mu g at the corners: median {np.median(lat):.2f}, "
            f"max {np.max(lat):.2f}; whole run, 99th percentile {np.nanpercentile(mu_g, 99):.2f}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
