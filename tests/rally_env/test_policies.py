"""The one ``--agent`` resolver: rally_env's own names, registered resolvers, typed errors."""

from __future__ import annotations

import sys
import types

import numpy as np
import pytest
from gymnasium.error import DependencyNotInstalled

from rally_env import RallyEnv, plugins
from rally_env.errors import RallyEnvError
from rally_env.policies import (
    LineFollower,
    PolicyNotInstalledError,
    RandomPolicy,
    resolve_policy,
)


@pytest.mark.parametrize("spec", ["heuristic", "mpc", "mpc:samples=8", "model.zip", "p.json"])
def test_a_name_of_a_missing_package_is_a_typed_error_not_a_stand_in(spec):
    with pytest.raises(PolicyNotInstalledError, match="needs the agents package") as e:
        resolve_policy(spec, resolvers=[])
    assert e.value.agent == spec
    assert isinstance(e.value, DependencyNotInstalled) and isinstance(e.value, RallyEnvError)


def test_rally_record_heuristic_without_agents_says_so(monkeypatch, tmp_path, capsys):
    from rally_env.cli import main

    monkeypatch.setattr(plugins, "policy_resolvers", lambda: [])
    out = tmp_path / "run.mp4"
    rc = main(["record", "--agent", "heuristic", "--out", str(out), "--no-replay", "--quiet"])
    assert rc == 2
    assert "'heuristic' needs the agents package" in capsys.readouterr().err
    assert not out.exists()


def test_builtin_names_and_labels():
    env = RallyEnv("opener")
    try:
        pol, label = resolve_policy("line", env, resolvers=[])
        assert isinstance(pol, LineFollower) and label == "line follower"
        pol, label = resolve_policy("random", env, seed=3, resolvers=[])
        assert isinstance(pol, RandomPolicy) and label == "random" and pol.seed == 3
        obs, _ = env.reset(seed=0)
        line = resolve_policy("line", env)[0]
        one = line(obs)
        assert one.shape == (4,)
        batch = line(np.stack([obs, obs]))
        assert batch.shape == (2, 4) and np.array_equal(batch[0], one)
    finally:
        env.close()


def test_resolvers_are_asked_in_order_and_get_the_options():
    seen = []

    def first(spec, seed=0, **opts):
        seen.append((spec, seed, opts))
        return None

    def second(spec, seed=0, **opts):
        return "drv" if spec == "mine" else None

    second.names = "mine"
    pol, label = resolve_policy("mine", seed=None, resolvers=[first, second], progress=True)
    assert (pol, label) == ("drv", "mine")
    assert seen == [("mine", 0, {"progress": True})]
    with pytest.raises(ValueError, match="use line, random, mine, module:function"):
        resolve_policy("nope", resolvers=[first, second])


def test_module_function_and_bad_values():
    mod = types.ModuleType("my_policy_mod")

    def drive(obs):
        return np.zeros(4, np.float32)

    mod.drive = drive
    mod.factory = lambda: drive
    mod.text = "not a policy"
    sys.modules["my_policy_mod"] = mod
    try:
        assert resolve_policy("my_policy_mod:drive", resolvers=[]) == (
            drive,
            "my_policy_mod:drive",
        )
        assert resolve_policy("my_policy_mod:factory", resolvers=[])[0] is drive
        with pytest.raises(ValueError, match="is not a policy"):
            resolve_policy("my_policy_mod:text", resolvers=[])
        with pytest.raises(ValueError, match="cannot load policy"):
            resolve_policy("my_policy_mod:missing", resolvers=[])
    finally:
        del sys.modules["my_policy_mod"]
    with pytest.raises(TypeError, match="agent must be"):
        resolve_policy(3, resolvers=[])
    assert resolve_policy(drive)[0] is drive
