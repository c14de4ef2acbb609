"""rally_env: the Gymnasium rally-driving environment.

    import gymnasium as gym
    import rally_env  # registers Rally-v0

    env = gym.make("Rally-v0", stage="opener")
    envs = gym.make_vec("Rally-v0", num_envs=64, vectorization_mode="vector_entry_point")

Importing this package never imports pygame, torch or stable-baselines3.
"""

from __future__ import annotations

from rally_env.config import (
    CONTROL_HZ_CHOICES,
    RallyConfig,
    RandomizeConfig,
    RewardWeights,
    TerminationConfig,
)
from rally_env.env import RallyEnv
from rally_env.errors import ConfigError, RallyEnvError, StateError
from rally_env.info import (
    END_REASONS,
    INFO_KEYS,
    INFO_KEYS_V1,
    REWARD_TERMS,
    checkpoint_times,
    end_reason,
    reward_terms,
)
from rally_env.replay import RecordReplay, ReplayError
from rally_env.spaces import DEFAULT_LAYOUT, DEFAULT_LAYOUT_V1, DISCRETE_ACTIONS, ObsLayout
from rally_env.vector import RallyVectorEnv

ENV_IDS: tuple[str, ...] = ("Rally-v0", "Rally-v1")


def register_envs() -> None:
    """Register ``Rally-v0`` and ``Rally-v1`` with Gymnasium (idempotent; also the
    ``gymnasium.envs`` entry point).

    ``Rally-v1`` is the same env class with ``version=1``: the wheel-speed model, library
    vehicles (``vehicle="truck"``), planets (``planet="moon"``) and the v1 observation.
    """
    from gymnasium.envs.registration import register, registry

    if "Rally-v0" not in registry:
        register(
            id="Rally-v0",
            entry_point="rally_env.env:RallyEnv",
            vector_entry_point="rally_env.vector:RallyVectorEnv",
            kwargs={"stage": "opener"},
        )
    if "Rally-v1" not in registry:
        register(
            id="Rally-v1",
            entry_point="rally_env.env:RallyEnv",
            vector_entry_point="rally_env.vector:RallyVectorEnv",
            kwargs={"stage": "opener", "version": 1},
        )


register_envs()


def render_episode(policy: object, path: str, **kwargs: object) -> object:
    """Run one episode of ``policy`` and write it as a video (MP4, or GIF by extension).

    ``rally_env.render_episode(policy, "run.mp4", stage="opener", seed=0)``; see
    :func:`rally_env.render.video.render_episode` for the options. Needs the ``render`` extra.
    """
    from rally_env.render.video import render_episode as _render_episode

    return _render_episode(policy, path, **kwargs)


__all__ = [
    "CONTROL_HZ_CHOICES",
    "DEFAULT_LAYOUT",
    "DEFAULT_LAYOUT_V1",
    "DISCRETE_ACTIONS",
    "END_REASONS",
    "ENV_IDS",
    "INFO_KEYS",
    "INFO_KEYS_V1",
    "REWARD_TERMS",
    "ConfigError",
    "ObsLayout",
    "RallyConfig",
    "RallyEnv",
    "RallyEnvError",
    "RallyVectorEnv",
    "RandomizeConfig",
    "RecordReplay",
    "ReplayError",
    "RewardWeights",
    "StateError",
    "TerminationConfig",
    "checkpoint_times",
    "end_reason",
    "register_envs",
    "render_episode",
    "reward_terms",
]
