"""Property tests: long random action sequences keep everything finite and inside the spaces."""

from __future__ import annotations

import math

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rally_env import RallyEnv
from rally_env.info import end_reason, reward_terms
from tests.rally_env.conftest import random_actions

_ENV = RallyEnv(stage="opener")


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 2**31 - 1), act_seed=st.integers(0, 2**31 - 1))
def test_random_drives_stay_finite_and_in_bounds(seed, act_seed):
    env = _ENV
    w = env.config.reward_weights
    obs, info = env.reset(seed=seed)
    paid = 0.0
    for a in random_actions(400, act_seed):
        obs, r, term, trunc, info = env.step(a)
        assert env.observation_space.contains(obs)
        assert math.isfinite(r)
        assert all(math.isfinite(v) for v in reward_terms(info).values())
        assert np.all(np.isfinite(info["position_m"]))
        paid += info["reward_progress"]
        # the progress paid in an episode never exceeds the furthest credited point
        assert paid <= w.progress * max(info["credited_progress_m"], 0.0) + 1e-9
        if term or trunc:
            assert end_reason(info)
            obs, info = env.reset()
            paid = 0.0
