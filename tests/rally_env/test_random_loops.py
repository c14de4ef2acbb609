"""random_stage={"loops": p, "laps": n}: that share of the random stages are closed loops of n
laps; without it a car's stream draws exactly as before."""

from __future__ import annotations

import numpy as np
import pytest

import tracks
from rally_env import RallyVectorEnv
from rally_env import kernels as K
from rally_env import stages as S
from rally_env.config import RallyConfig
from rally_env.replay import verify
from rally_env.replay.budgets import time_limit_steps
from tests.rally_env.test_replay_support import record_run
from tracks.generator import generate_drawn
from tracks.prefetch import Prefetcher

LOOPY = {"length_m": 1000.0, "loops": 1.0, "laps": 2}


def test_without_loops_a_cars_stream_draws_as_before():
    rs = RallyConfig.build(stage="random").random_stage
    rng, ref = np.random.default_rng(4), np.random.default_rng(4)
    lo, hi = rs["difficulty"]
    for _ in range(20):
        d = S.draw_random_stage(rs, rng)
        seed = int(ref.integers(0, 2**31 - 1))
        assert d == (seed, round(lo + (hi - lo) * float(ref.random()), 6), 0)
    # loops = 0 takes no extra draw either: the same stages as without the setting
    zero = RallyConfig.build(stage="random", random_stage={"loops": 0.0}).random_stage
    a, b = np.random.default_rng(9), np.random.default_rng(9)
    assert [S.draw_random_stage(zero, a) for _ in range(10)] == [
        S.draw_random_stage(rs, b) for _ in range(10)
    ]


def test_a_share_of_the_draws_are_loops():
    rs = RallyConfig.build(stage="random", random_stage={"loops": 0.25, "laps": 3}).random_stage
    rng = np.random.default_rng(1)
    laps = [S.draw_random_stage(rs, rng).laps for _ in range(2000)]
    assert set(laps) == {0, 3}
    assert 0.2 < laps.count(3) / 2000 < 0.3


def test_an_env_with_only_loops_drives_loops():
    env = RallyVectorEnv(3, stage="random", random_stage=LOOPY)
    env.reset(seed=2)
    for k in range(3):
        st = env.core.bank.stage(int(env.core.eistate[k, K.EI_SLOT]))
        assert st.closed and st.finish.laps == 2
        assert env.core.lines_of(k) > 2  # lap lines as well as the finish


def test_a_loop_that_cannot_close_is_the_point_to_point_stage_of_its_seed():
    with pytest.raises(tracks.GenerationError):
        tracks.generate(5, length_m=600.0, difficulty=0.1, closed=True, laps=2)
    st = generate_drawn(5, 600.0, 0.1, 2)
    assert not st.closed
    assert st.digest() == tracks.generate(5, length_m=600.0, difficulty=0.1).digest()


def test_pool_windows_hold_loops_too():
    seeds, diffs, laps = S.pool_stages(3, 0, 50, 0.2, 0.8, 0.5, 2)
    assert set(laps.tolist()) == {0, 2}
    plain = S.pool_stages(3, 0, 50, 0.2, 0.8)
    # the loop flags come after the seeds and difficulties: those are the same
    assert np.array_equal(seeds, plain[0]) and np.array_equal(diffs, plain[1])
    env = RallyVectorEnv(4, stage="random", random_stage={**LOOPY, "pool": 2})
    env.reset(seed=3)
    st = env.core.bank.stage(int(env.core.eistate[0, K.EI_SLOT]))
    assert st.closed


def test_the_prefetch_worker_makes_the_same_loop():
    p = Prefetcher()
    if p.disabled:
        pytest.skip("RALLY_PREFETCH=0")
    try:
        made = None
        for _ in range(400):  # the worker starts and loads its code first
            p.request(41, 1000.0, 0.5, laps=2)
            made = p.take(41, 1000.0, 0.5, laps=2)
            if made is not None:
                break
        assert made is not None, "the worker answered nothing"
        assert made[0].closed
        assert made[0].digest() == generate_drawn(41, 1000.0, 0.5, 2).digest()
        assert p.take(41, 1000.0, 0.5) is None  # the point-to-point stage is another key
    finally:
        p.shutdown()


def test_a_loop_run_verifies_and_its_time_budget_counts_the_laps():
    rp, _ = record_run(seed=6, max_steps=30, stage="random", random_stage=LOOPY)
    assert "loop" in rp.stage["name"] and rp.steps == 30
    assert verify(rp).accepted
    one = RallyConfig.build(stage="random", random_stage={"length_m": 1000.0})
    three = RallyConfig.build(stage="random", random_stage={**LOOPY, "laps": 3})
    assert time_limit_steps(three, []) > time_limit_steps(one, [])
