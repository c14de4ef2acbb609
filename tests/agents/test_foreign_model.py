"""``rally eval`` of a model ``rally train`` did not make: the env's own action space."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest

pytest.importorskip("stable_baselines3")

from stable_baselines3 import PPO

import rally_env  # noqa: F401
from agents.models import from_policy_action, made_by_rally_train
from agents.policies import SB3Policy, make_policy
from rally_env.cli import main


@pytest.fixture(scope="module")
def foreign_zip(tmp_path_factory):
    """A PPO trained with plain SB3 on gym.make("RallyDirect-v0"), no rally train metadata."""
    env = gym.make("RallyDirect-v0", termination={"time_limit_s": 2.0})
    model = PPO("MlpPolicy", env, n_steps=64, batch_size=64, n_epochs=1, seed=0, device="cpu")
    model.learn(64)
    path = tmp_path_factory.mktemp("foreign") / "plain.zip"
    model.save(str(path))
    env.close()
    return path


def test_foreign_model_acts_in_the_env_action_space(foreign_zip):
    """Failed before: every .zip got the [-1, 1] remap (a throttle of 0.0 became 0.5)."""
    pol = SB3Policy(foreign_zip)
    assert not pol.from_rally_train and not pol.remap
    obs = np.zeros((3, 59), np.float32) + np.linspace(-1, 1, 59, dtype=np.float32)
    raw, _ = pol.model.predict(obs, deterministic=True)
    assert np.array_equal(pol(obs), np.asarray(raw, np.float32))
    assert not np.array_equal(pol(obs), from_policy_action(raw))
    forced = make_policy(str(foreign_zip), action_space="policy")
    assert forced.remap and np.array_equal(forced(obs), from_policy_action(raw))
    with pytest.raises(ValueError, match="action_space"):
        SB3Policy(foreign_zip, action_space="sideways")


def test_rally_train_metadata_keeps_the_remap():
    shipped = make_policy("ppo-opener")
    assert shipped.from_rally_train and shipped.remap  # metadata from before `made_by`
    assert made_by_rally_train({"made_by": "rally train"})
    assert not made_by_rally_train({"made_by": "someone else", "algo": "ppo", "obs_norm": {}})
    assert not made_by_rally_train({})


def test_rally_eval_says_which_action_space(foreign_zip, capsys):
    base = ["eval", "--agent", str(foreign_zip), "--stages", "opener", "--plain"]
    assert main(base) == 0
    out = capsys.readouterr().out
    assert "in the env's own action space" in out and "no rally train metadata" in out
    assert main([*base, "--action-space", "policy"]) == 0
    out = capsys.readouterr().out
    assert "mapped to the env's box" in out and "--action-space policy" in out
    assert main(["eval", "--agent", "ppo-opener", "--stages", "opener", "--plain"]) == 0
    assert "its metadata says rally train made it" in capsys.readouterr().out
