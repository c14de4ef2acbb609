"""Shared test helpers for the agents tests."""

from __future__ import annotations

import numpy as np

from agents.heuristic import HeuristicDriver
from rally_env import RallyEnv


def heuristic_obs(road_ahead: bool, n: int = 40) -> np.ndarray:
    """The first ``n`` observations (n, D) of the heuristic driver on ``opener``."""
    env = RallyEnv(stage="opener", road_ahead=road_ahead)
    obs, _ = env.reset(seed=0)
    drv = HeuristicDriver()
    out = []
    for _ in range(n):
        out.append(obs)
        obs, *_ = env.step(drv(obs))
    env.close()
    return np.stack(out)
