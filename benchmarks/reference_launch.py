"""The reference solver's standing start against the simulator's own launch.

On a flat, straight packed-dirt stage the reference time (agents.reference, a point mass) to a
finish line 25-400 m from the start is compared with the finish time of the rover launched at
full throttle in RallyDirect-v0 (steering only to hold the centerline), and of the same launch
with the throttle eased to each of a few constant levels (the best of them is what a driver
could do). Prints the table; asserts nothing.

    python3 benchmarks/reference_launch.py
"""

from __future__ import annotations

import numpy as np

from agents.reference import reference_time
from rally_env import RallyEnv
from tracks import Finish, PathBuilder, Section, Stage, Start

DISTANCES_M = (25.0, 50.0, 100.0, 200.0, 400.0)
THROTTLES = (1.0, 0.9, 0.8)


def straight(finish_m: float) -> Stage:
    b = PathBuilder(knot_spacing_m=10.0)
    b.straight(finish_m + 400.0)
    return Stage(
        name="launch",
        knots=b.knots(),
        sections=(Section(0.0, 10.0, "packed-dirt"),),
        finish=Finish(s_m=10.0 + finish_m),
        start=Start(10.0, 0.0),
    )


def launch(stage: Stage, throttle: float) -> float:
    env = RallyEnv(stage=stage)
    _, info = env.reset(seed=0)
    for _ in range(2000):
        steer = float(
            np.clip(-2.0 * info["heading_error_rad"] - 0.2 * info["lateral_offset_m"], -1, 1)
        )
        _, _, term, trunc, info = env.step(np.array([steer, throttle, 0.0, 0.0], np.float32))
        if term or trunc:
            break
    return float(info["finish_time_s"]) if info["finished"] else float("nan")


def main() -> None:
    print(
        "| distance | reference s | full throttle s | best throttle s | reference optimistic by |"
    )
    print("| ---: | ---: | ---: | ---: | ---: |")
    for d in DISTANCES_M:
        st = straight(d)
        ref = reference_time(st).time_s
        times = {t: launch(st, t) for t in THROTTLES}
        best = min(times.values())
        print(
            f"| {d:.0f} m | {ref:.2f} | {times[1.0]:.2f} | {best:.2f} | "
            f"{100.0 * (1.0 - ref / best):.1f} % |"
        )


if __name__ == "__main__":
    main()
