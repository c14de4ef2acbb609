"""``RallyLearn-v0``: Rally-v0's car and stages with the settings an agent learns from (10 Hz,
the road ahead, crash cost 100, three policy actions in [-1, 1]); its own golden hashes."""

from __future__ import annotations

import hashlib

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.error import InvalidAction
from gymnasium.utils.env_checker import check_env

import rally_env
from rally_env.learn import POLICY_ACTION_NAMES, env_to_policy_action, policy_to_env_action
from rally_env.replay.hashing import car_state_hash

# 40 fixed policy actions of gym.make("RallyLearn-v0") after reset(seed=123): the observation
# hash, the physics state hash and the config digest, computed when the id was released (its
# first draft, in the same change, had the road-ahead block). If one changes, RallyLearn-v0
# changed: that needs a new id, not an update of these values.
LEARN_GOLDEN = {
    "obs_hash": "1194bb03e3b66622b26cca05883df336",
    "state_hash": "5703ff689f568fa094e1a4ab51224327",
    "config_digest": "708f096cb11588d64a8843081e35b1ec",
    "car_state_hash": "93317dcdead31f8a6ca34199723186eb",
}


def _golden_run():
    env = gym.make("RallyLearn-v0")
    o, _ = env.reset(seed=123)
    h = hashlib.blake2b(digest_size=16)
    h.update(o.tobytes())
    rew = []
    for t in range(40):
        a = np.array([0.4 * np.sin(t / 4.0), 1.0 if t < 25 else -0.6, -1.0 if t < 30 else 0.4])
        o, r, *_ = env.step(a.astype(np.float32))
        h.update(o.tobytes())
        rew.append(r)
    h.update(np.asarray(rew, np.float64).tobytes())
    u = env.unwrapped
    return {
        "obs_hash": h.hexdigest(),
        "state_hash": u.core.sim.state_hash(),
        "config_digest": u.config.digest(),
        "car_state_hash": car_state_hash(u.core, 0),
    }, env


def test_rally_learn_golden():
    got, env = _golden_run()
    assert got == LEARN_GOLDEN
    env.close()


def test_settings_and_spaces():
    env = gym.make("RallyLearn-v0")
    u = env.unwrapped
    assert isinstance(u, rally_env.RallyEnv)
    assert u.config.control_hz == 10 and u.config.version == 0
    assert not u.config.road_ahead and u.observation_space.shape == (59,)
    assert u.config.reward_weights.crash == 100.0
    assert u.config.reward_weights.progress == rally_env.RewardWeights().progress
    assert env.action_space == gym.spaces.Box(-1.0, 1.0, (3,), np.float32)
    check_env(env.unwrapped)  # the env underneath; the wrapper's spaces below
    env.close()
    # arguments given to gym.make win; a reward_weights dict is merged over crash = 100
    env = gym.make("RallyLearn-v0", stage="random", control_hz=20, reward_weights={"time": 1.0})
    c = env.unwrapped.config
    assert c.control_hz == 20 and c.reward_weights.crash == 100.0 and c.reward_weights.time == 1.0
    env.close()


def test_gymnasium_env_checker_passes_on_the_wrapped_env():
    env = gym.make("RallyLearn-v0", disable_env_checker=True)
    check_env(env, skip_render_check=True)
    env.close()


def test_policy_actions_map_to_the_env_box():
    a = np.array([[-1.0, -1.0, -1.0], [0.5, 0.0, 0.0], [1.0, 1.0, 1.0], [2.0, -3.0, 0.25]])
    got = policy_to_env_action(a)
    want = np.array([[-1, 0, 0, 0], [0.5, 0.5, 0, 0], [1, 1, 1, 0], [1, 0, 0.25, 0]], np.float32)
    np.testing.assert_allclose(got, want)
    four = policy_to_env_action(np.array([0.0, 0.0, -1.0, 0.5]))
    np.testing.assert_allclose(four, [0.0, 0.5, 0.0, 0.5])
    np.testing.assert_allclose(policy_to_env_action(env_to_policy_action(want)), want)
    with pytest.raises(ValueError, match="last axis must be 3"):
        policy_to_env_action(np.zeros(5))


def test_a_policy_action_reaches_the_car():
    env = gym.make("RallyLearn-v0")
    env.reset(seed=0)
    env.step(np.array([0.5, 0.2, -1.0], np.float32))
    prev = env.unwrapped.core.obs[0, env.unwrapped.core.layout.groups["prev_action"]]
    np.testing.assert_allclose(prev, [0.5, 0.6, 0.0, 0.0], atol=1e-6)
    env.close()


@pytest.mark.parametrize(
    "bad, match",
    [
        (np.zeros(4, np.float32), r"action shape \(4,\) != \(3,\)"),
        (np.array([0.0, np.nan, 0.0]), "non-finite"),
        ("go", "cannot be read as real numbers"),
    ],
)
def test_bad_actions_are_refused_and_change_nothing(bad, match):
    env = gym.make("RallyLearn-v0", disable_env_checker=True)
    env.reset(seed=0)
    before = env.unwrapped.core.sim.state_hash()
    with pytest.raises(InvalidAction, match=match):
        env.step(bad)
    assert env.unwrapped.core.sim.state_hash() == before
    env.close()


def test_vector_env_matches_single_envs():
    envs = gym.make_vec("RallyLearn-v0", num_envs=3, vectorization_mode="vector_entry_point")
    assert envs.single_action_space.shape == (3,) and envs.action_space.shape == (3, 3)
    obs, _ = envs.reset(seed=[5, 6, 7])
    rng = np.random.default_rng(0)
    acts = rng.uniform(-1, 1, size=(12, 3, 3)).astype(np.float32)
    singles = [gym.make("RallyLearn-v0") for _ in range(3)]
    for k, e in enumerate(singles):
        o, _ = e.reset(seed=5 + k)
        np.testing.assert_array_equal(o, obs[k])
    for a in acts:
        obs, rew, *_ = envs.step(a)
        for k, e in enumerate(singles):
            o, r, *_ = e.step(a[k])
            np.testing.assert_array_equal(o, obs[k])
            assert r == rew[k]
    with pytest.raises(InvalidAction, match=r"one row per car \(3\)"):
        envs.step(np.zeros((3, 4), np.float32))
    envs.close()
    assert POLICY_ACTION_NAMES == ("steer", "throttle", "brake")


def test_the_discrete_table_is_refused():
    with pytest.raises(rally_env.ConfigError, match=r"discrete_actions.*three continuous"):
        gym.make("RallyLearn-v0", discrete_actions=True)


def test_each_env_samples_from_a_generator_of_its_own():
    """A wrapper's action space is new, not a copy of the module's box with its generator
    state: after the module's box was seeded, two envs still draw different actions."""
    from rally_env.learn import POLICY_ACTION_SPACE

    POLICY_ACTION_SPACE.seed(0)
    POLICY_ACTION_SPACE.sample()
    a, b = (gym.make("RallyLearn-v0") for _ in range(2))
    try:
        assert not np.array_equal(a.action_space.sample(), b.action_space.sample())
        assert a.action_space is not POLICY_ACTION_SPACE
    finally:
        a.close()
        b.close()
