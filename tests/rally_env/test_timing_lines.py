"""Timing lines close together: every line crossed inside one control step is timed exactly.

Before, the physics gate timed one line per control step: a checkpoint 0.5 m before the finish
at 10 Hz made the finish missed (the car ran on and rolled), at 20 Hz the finish was timed from
the stage position (35.350 s instead of 35.327 s), and 1,000 checkpoints 1 m apart were never
all crossed, so the finish was never detected. A line's time must not depend on the other lines:
it is compared with the time of the same line on the same road with no close neighbours.
"""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

from rally_env import RallyEnv
from rally_env.info import checkpoint_times, end_reason
from tests.hostile import straight_stage
from tracks import Stage

FINISH_M = 1150.0
FULL = np.array([0.0, 1.0, 0.0, 0.0], np.float32)


def _stage(finish_m: float, checkpoints: tuple[float, ...] = ()) -> Stage:
    return straight_stage(finish_m, checkpoints)


def _run(stage: Stage, hz: int) -> tuple[str, float, tuple[float, ...]]:
    env = RallyEnv(stage=stage, control_hz=hz)
    env.reset(seed=0)
    for _ in range(100_000):
        _, _, term, trunc, info = env.step(FULL)
        if term or trunc:
            break
    return end_reason(info), float(info["finish_time_s"]), tuple(checkpoint_times(info))


def _line_time(s_m: float, hz: int) -> float:
    """The time of a line at ``s_m`` alone (a checkpoint, the finish 50 m further on)."""
    end, _, cps = _run(_stage(s_m + 50.0, (s_m,)), hz)
    assert end == "finished"
    return cps[0]


@pytest.mark.parametrize("hz, gap_m", [(10, 0.5), (20, 0.5), (20, 0.2), (20, 0.05), (60, 0.05)])
def test_a_checkpoint_just_before_the_finish(hz, gap_m):
    end, ref_finish, _ = _run(_stage(FINISH_M), hz)
    assert end == "finished"
    end, finish, cps = _run(_stage(FINISH_M, (FINISH_M - gap_m,)), hz)
    assert end == "finished"
    assert finish == ref_finish
    assert cps == (_line_time(FINISH_M - gap_m, hz),) and cps[0] < finish


def test_a_thousand_checkpoints_one_metre_apart():
    cps_m = tuple(FINISH_M - 1000.0 + i for i in range(1000))
    _, ref_finish, _ = _run(_stage(FINISH_M), 20)
    end, finish, cps = _run(_stage(FINISH_M, cps_m), 20)
    assert end == "finished" and finish == ref_finish
    assert len(cps) == 1000 and all(math.isfinite(t) for t in cps)
    assert all(a < b for a, b in itertools.pairwise(cps))
    for i in (0, 500, 999):
        assert cps[i] == _line_time(cps_m[i], 20)


def test_no_shipped_stage_has_two_lines_within_one_control_step():
    """Why timing every line inside one control step kept the env versions: the substep path
    (``kernels.lines_within_reach``) is never taken on a library or generated stage, at any
    control rate and any speed up to 100 m/s, so their runs are unchanged bit for bit. A
    stage that fails this changes what the fix changed (CHANGELOG, docs/env.md)."""
    import tracks
    from rally_env import CONTROL_HZ_CHOICES
    from rally_env import kernels as K
    from rally_env.config import MIN_RANDOM_LENGTH_M
    from rally_env.stages import timing_lines

    dt = 1.0 / min(CONTROL_HZ_CHOICES)
    reach = 2.0 * (100.0 + K.REACH_ACCEL_MPS2 * dt) * dt + K.REACH_SLACK_M

    def closest(st) -> float:
        race = [0.0] + [r for r, _ in timing_lines(st)]
        return min(b - a for a, b in itertools.pairwise(race))

    stages = [tracks.load_stage(n) for n in tracks.list_stages()]
    stages += [
        tracks.generate(seed, length_m=length, difficulty=d)
        for seed in range(6)
        for length in (MIN_RANDOM_LENGTH_M, 2000.0)
        for d in (0.0, 1.0)
    ]
    near = {st.name: round(closest(st), 1) for st in stages if closest(st) <= reach}
    assert len(stages) > 30 and not near, f"lines closer than {reach:.1f} m: {near}"
