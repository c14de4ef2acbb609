"""The heuristic driver finishes stages, deterministically."""

from __future__ import annotations

import numpy as np

from agents.evaluate import run_episode
from agents.heuristic import HeuristicDriver
from agents.reference import reference_time


def test_finishes_opener_deterministically():
    a = run_episode(HeuristicDriver(), "opener", 0)
    b = run_episode(HeuristicDriver(), "opener", 0)
    assert a.finished, a.end_reason
    assert a.stage_time_s == b.stage_time_s
    assert np.array_equal(a.actions, b.actions)
    # a reference is faster than any driver of this car, and the target: within 25 %
    ref = reference_time("opener").time_s
    assert ref < a.stage_time_s <= 1.25 * ref


def test_finishes_a_generated_stage():
    r = run_episode(HeuristicDriver(), "gen-2147483648", 0)  # the first held-out stage
    assert r.finished, r.end_reason
    assert r.off_road_s < 5.0


def test_batched_actions_match_single():
    from rally_env import RallyEnv

    env = RallyEnv(stage="opener")
    obs, _ = env.reset(seed=0)
    d1, d2 = HeuristicDriver(), HeuristicDriver()
    batch = np.stack([obs, obs])
    a1 = d1(obs)
    a2 = d2(batch)
    assert a1.shape == (4,) and a2.shape == (2, 4)
    assert np.array_equal(a2[0], a1) and np.array_equal(a2[1], a1)
