"""Gymnasium's own vector wrappers on the native vector env (no extra installs)."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.wrappers import vector as vw

from tests.rally_env.conftest import FULL_THROTTLE


def _venv(n: int = 3, **kw):
    return gym.make_vec(
        "rally_env:RallyDirect-v0",
        num_envs=n,
        vectorization_mode="vector_entry_point",
        termination={"time_limit_s": 1.0},
        **kw,
    )


def test_statistics_normalization_and_action_wrappers():
    env = vw.RecordEpisodeStatistics(_venv())
    env = vw.NormalizeObservation(vw.NormalizeReward(vw.ClipAction(env)))
    env = vw.DtypeObservation(env, np.float64)
    obs, info = env.reset(seed=0)
    assert obs.dtype == np.float64 and obs.shape == (3, 59)
    episodes = 0
    for _ in range(25):  # 1 s at 20 Hz: every car truncates once
        obs, _, _, _, info = env.step(np.tile(FULL_THROTTLE * 2.0, (3, 1)))
        if "episode" in info:
            episodes += int(info["_episode"].sum())
            assert np.all(info["episode"]["l"][info["_episode"]] == 20)
    assert episodes == 3
    env.close()


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_gymnasium_vector_envs_of_single_envs(mode):
    envs = gym.make_vec("rally_env:RallyDirect-v0", num_envs=2, vectorization_mode=mode)
    envs = vw.RecordEpisodeStatistics(envs)
    envs.reset(seed=0)
    _, _, _, _, info = envs.step(np.tile(FULL_THROTTLE, (2, 1)))
    assert all(v.dtype != object for k, v in info.items() if not isinstance(v, dict))
    envs.close()


def test_vector_record_video(tmp_path):
    env = vw.RecordVideo(
        _venv(2, render_mode="rgb_array"),
        str(tmp_path / "v"),
        episode_trigger=lambda e: e == 0,
        video_length=5,
    )
    env.reset(seed=0)
    for _ in range(6):
        env.step(np.tile(FULL_THROTTLE, (2, 1)))
    env.close()
    assert list((tmp_path / "v").glob("*.mp4"))
