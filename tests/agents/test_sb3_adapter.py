"""The SB3 VecEnv adapter against SB3's own contract and DummyVecEnv on the same seeds."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("stable_baselines3")

from stable_baselines3.common.vec_env import DummyVecEnv

from agents.models import from_policy_action, to_policy_action
from agents.sb3 import PolicyActionWrapper, RallyVecEnv
from rally_env import RallyEnv

# a short time limit and a tight stuck rule so episodes end (and autoreset) within the test
ENV_KW = {"stage": "opener", "termination": {"time_limit_s": 3.0}}


def _dummy(n: int) -> DummyVecEnv:
    return DummyVecEnv([lambda: PolicyActionWrapper(RallyEnv(**ENV_KW)) for _ in range(n)])


def _actions(rng: np.random.Generator, n: int) -> np.ndarray:
    return rng.uniform(-1.0, 1.0, size=(n, 4)).astype(np.float32)


def test_action_rescaling_round_trip():
    a = np.array([[-1.0, -1.0, 1.0, 0.0], [0.5, 0.0, 0.25, 1.0]], np.float32)
    env_a = from_policy_action(a)
    assert np.array_equal(env_a[:, 0], a[:, 0])
    assert np.allclose(env_a[:, 1], (a[:, 1] + 1) / 2)
    assert np.allclose(env_a[:, 2:], np.maximum(a[:, 2:], 0))
    assert np.allclose(to_policy_action(env_a), a)
    # the lower half of the brake range is "off": a fresh policy (mean 0) does not brake
    assert from_policy_action(np.array([0.0, 0.0, -0.7, 0.0], np.float32))[2] == 0.0


def test_matches_dummy_vec_env_across_autoresets():
    n = 3
    ours = RallyVecEnv(n, **ENV_KW)
    ref = _dummy(n)
    ours.seed(7)
    ref.seed(7)
    o1, o2 = ours.reset(), ref.reset()
    _same_infos(ours.reset_infos, ref.reset_infos)
    assert o1.dtype == np.float32 and o1.shape == (n, ours.observation_space.shape[0])
    assert np.array_equal(o1, o2)
    rng = np.random.default_rng(0)
    ended = 0
    for _ in range(130):  # 3 s at 20 Hz = 60 steps: two autoresets per car
        a = _actions(rng, n)
        r1 = ours.step(a)
        r2 = ref.step(a)
        assert np.array_equal(r1[0], r2[0])
        assert np.array_equal(r1[1], r2[1].astype(np.float32))
        assert np.array_equal(r1[2], r2[2])
        _same_infos(r1[3], r2[3])  # every car's info, every step, as DummyVecEnv gives it
        for i1, i2, d in zip(r1[3], r2[3], r1[2], strict=True):
            if d:
                ended += 1
                assert np.array_equal(i1["terminal_observation"], i2["terminal_observation"])
                assert i1["TimeLimit.truncated"] == i2["TimeLimit.truncated"]
            else:
                assert "terminal_observation" not in i1
    assert ended >= n * 2
    ours.close()
    ref.close()


def _same_infos(ours: list[dict], ref: list[dict]) -> None:
    assert len(ours) == len(ref)
    for a, b in zip(ours, ref, strict=True):
        assert set(a) == set(b)
        for k, v in b.items():
            assert np.array_equal(a[k], v, equal_nan=True), k


def test_vec_video_recorder_records_the_adapter(tmp_path):
    """Failed before: the adapter had render_mode=None and get_images raised."""
    from stable_baselines3.common.vec_env import VecVideoRecorder

    venv = RallyVecEnv(2, render_mode="rgb_array", **ENV_KW)
    assert venv.get_attr("render_mode") == ["rgb_array", "rgb_array"]
    frames = venv.get_images()
    assert len(frames) == 2 and frames[0].shape == (400, 600, 3)
    rec = VecVideoRecorder(
        venv, str(tmp_path), record_video_trigger=lambda s: s == 0, video_length=5
    )
    rec.reset()
    for _ in range(6):
        rec.step(np.zeros((2, 4), np.float32))
    rec.close()
    videos = list(tmp_path.glob("*.mp4"))
    assert videos and videos[0].stat().st_size > 0


def test_sb3_env_checker_contract():
    from stable_baselines3.common.env_checker import check_env

    # SB3's checker on the single env behind the adapter's action convention
    check_env(PolicyActionWrapper(RallyEnv(stage="opener")), warn=False)
    venv = RallyVecEnv(2, stage="opener")
    assert venv.num_envs == 2
    assert venv.action_space.low.tolist() == [-1.0] * 4
    obs = venv.reset()
    assert venv.observation_space.contains(obs[0])
    assert venv.get_attr("render_mode") == [None, None]
    assert venv.env_is_wrapped(object) == [False, False]
    venv.step_async(np.zeros((2, 4), np.float32))
    obs, rew, done, infos = venv.step_wait()
    assert rew.shape == (2,) and done.dtype == np.bool_ and len(infos) == 2
    venv.close()


def test_seeded_reset_is_repeatable():
    v = RallyVecEnv(2, stage="random", random_stage={"length_m": 600.0})
    v.seed(3)
    a = v.reset()
    v.seed(3)
    b = v.reset()
    assert np.array_equal(a, b)
    v.close()
