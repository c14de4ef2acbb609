"""Typed config errors, reset options, the vector env's autoreset modes and seeds."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.error import ResetNeeded
from gymnasium.vector import AutoresetMode

from rally_env import ConfigError, RallyEnv, RallyVectorEnv, RewardWeights
from rally_env.info import end_reason
from tests.rally_env.conftest import FULL_THROTTLE


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"stage": "no-such-stage"}, "stage"),
        ({"stage": []}, "stage"),
        ({"stage": ["opener", "random"]}, r"stage\[1\]"),
        ({"stage": 3}, "stage"),
        ({"reward_weights": {"progress": -1.0}}, "reward_weights.progress"),
        ({"reward_weights": {"speed": 1.0}}, "reward_weights.speed"),
        ({"reward_weights": "big"}, "reward_weights"),
        ({"termination": {"stuck_time_s": float("nan")}}, "termination.stuck_time_s"),
        ({"termination": {"off_road_max_m": -1}}, "termination.off_road_max_m"),
        ({"vehicle": {"mass_kg": -5.0}}, "vehicle.mass_kg"),
        ({"vehicle": {"wings": 2}}, "vehicle"),
        ({"vehicle": "truck"}, "vehicle"),
        ({"render_mode": "ascii"}, "render_mode"),
        ({"discrete_actions": "yes"}, "discrete_actions"),
        ({"random_stage": {"length_m": 10.0}}, "random_stage.length_m"),
        ({"random_stage": {"difficulty": (0.9, 0.1)}}, "random_stage.difficulty"),
    ],
)
def test_config_errors_name_the_field(kwargs, field):
    with pytest.raises(ConfigError, match=field) as e:
        RallyEnv(**kwargs)
    assert isinstance(e.value, ValueError)


def test_unknown_argument_and_weights_object():
    with pytest.raises(ConfigError, match="unknown argument"):
        RallyVectorEnv(2, colour="red")
    env = RallyEnv(reward_weights=RewardWeights(time=0.0), stage="proving-ground")
    env.reset(seed=0)
    assert env.step(FULL_THROTTLE)[4]["reward_time"] == 0.0
    with pytest.raises(ConfigError, match="num_envs"):
        RallyVectorEnv(0)
    with pytest.raises(ConfigError, match="autoreset_mode"):
        RallyVectorEnv(2, autoreset_mode="Sometimes")


def test_reset_options():
    env = RallyEnv()
    with pytest.raises(ValueError, match="unknown reset options"):
        env.reset(options={"stage": "x"})
    with pytest.raises(ValueError, match="car_index"):
        env.reset(seed=0, options={"car_index": -1})
    venv = RallyVectorEnv(2)
    with pytest.raises(ValueError, match="reset_mask"):
        venv.reset(options={"reset_mask": np.array([False, False])})
    with pytest.raises(ValueError, match="num_envs=2"):
        venv.reset(seed=[1, 2, 3])


def test_vector_seed_forms_match_single_envs():
    venv = RallyVectorEnv(2, stage=["opener", "skidpad", "proving-ground"])
    _, info = venv.reset(seed=[5, 6])
    slots = [
        int(RallyEnv(stage=["opener", "skidpad", "proving-ground"]).reset(seed=s)[1]["stage_index"])
        for s in (5, 6)
    ]
    assert info["stage_index"].tolist() == slots
    _, info = venv.reset(seed=5)
    single = RallyEnv(stage=["opener", "skidpad", "proving-ground"])
    assert (
        info["stage_index"][1] == single.reset(seed=5, options={"car_index": 1})[1]["stage_index"]
    )
    assert venv.core.stage_name(1) == single.core.stage_name(0)


def test_make_vec_passes_arguments_and_modes():
    envs = gym.make_vec(
        "Rally-v0",
        num_envs=2,
        vectorization_mode="vector_entry_point",
        autoreset_mode="SameStep",
        stage="proving-ground",
    )
    assert envs.metadata["autoreset_mode"] == AutoresetMode.SAME_STEP
    assert envs.unwrapped.config.stage == "proving-ground"


def test_disabled_autoreset_and_reset_mask():
    venv = RallyVectorEnv(2, autoreset_mode="Disabled", termination={"time_limit_s": 0.1})
    venv.reset(seed=0)
    a = np.tile(FULL_THROTTLE, (2, 1))
    venv.step(a)
    _, _, _, trunc, _ = venv.step(a)
    assert trunc.all()
    with pytest.raises(ResetNeeded, match="reset_mask"):
        venv.step(a)
    _obs, info = venv.reset(options={"reset_mask": np.array([True, False])})
    assert info["stage_time_s"].tolist() == [0.0, 0.1]
    with pytest.raises(ResetNeeded):
        venv.step(a)
    venv.reset(options={"reset_mask": np.array([False, True])})
    venv.step(a)


def test_next_step_autoreset_returns_reset_obs_with_zero_reward():
    venv = RallyVectorEnv(2, termination={"time_limit_s": 0.1})
    obs0, _ = venv.reset(seed=0)
    a = np.tile(FULL_THROTTLE, (2, 1))
    venv.step(a)
    _, _, _, trunc, info = venv.step(a)
    assert trunc.all() and end_reason(info).tolist() == ["time_limit"] * 2
    obs, rew, term, trunc, info = venv.step(a)
    assert np.array_equal(obs, obs0) and rew.tolist() == [0.0, 0.0]
    assert not term.any() and not trunc.any()
    assert info["stage_time_s"].tolist() == [0.0, 0.0]


@pytest.mark.parametrize(
    "kwargs, field",
    [
        ({"control_hz": 10**400}, "control_hz"),
        ({"reward_weights": {"progress": 10**400}}, "reward_weights.progress"),
        ({"termination": {"time_limit_s": -(10**400)}}, "termination.time_limit_s"),
        ({"random_stage": {"length_m": 10**400}}, "random_stage.length_m"),
        ({"randomize": {"mass": (1, 10**400)}}, "randomize.mass"),
    ],
)
def test_huge_integers_are_config_errors_not_overflows(kwargs, field):
    with pytest.raises(ConfigError) as ei:
        RallyEnv(**kwargs)
    assert ei.value.field == field and len(str(ei.value)) < 300
