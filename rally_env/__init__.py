"""rally_env: the Gymnasium rally-driving environment.

    import gymnasium as gym
    import rally_env

    gym.register_envs(rally_env)  # RallyDirect-v0, RallyWheelSpeed-v1 (+ *Ahead), RallyLearn-v0
    env = gym.make("RallyDirect-v0", stage="opener")  # or "rally_env:RallyDirect-v0", no import
    envs = gym.make_vec("RallyDirect-v0", num_envs=64, vectorization_mode="vector_entry_point")

Importing this package never imports pygame, torch or stable-baselines3.
"""

from __future__ import annotations

from typing import Any, NamedTuple

from rally_env.config import (
    AHEAD_ENV_IDS,
    CONTROL_HZ_CHOICES,
    ENV_IDS,
    LEGACY_ENV_IDS,
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
from rally_env.learn import LEARN_ENV_ID, LEARN_ENV_KWARGS, policy_to_env_action
from rally_env.replay import RecordReplay, ReplayError
from rally_env.spaces import DEFAULT_LAYOUT, DEFAULT_LAYOUT_V1, DISCRETE_ACTIONS, ObsLayout
from rally_env.vector import RallyVectorEnv


class RegisteredEnv(NamedTuple):
    """One Gymnasium id :func:`register_envs` registers."""

    id: str
    #: ``module:callable`` that makes it, or ``"=OTHER-ID"``: a second registry key of that
    #: id's spec.
    entry_point: str
    kwargs: dict[str, Any]
    what: str


_ENV, _VEC = "rally_env.env:RallyEnv", "rally_env.vector:RallyVectorEnv"
_V0, _V1, _AHEAD = {"stage": "opener"}, {"stage": "opener", "version": 1}, {"road_ahead": True}

#: Every registered id, in registration order: six ids for the two envs (``version`` 0 and 1:
#: the id naming the model, its first id, the road-ahead variant) and the learning setup.
#: Stored replays and users name all of them. :data:`ENV_IDS`, :data:`LEGACY_ENV_IDS` and
#: :data:`AHEAD_ENV_IDS` give the ids by version.
REGISTERED_ENVS: tuple[RegisteredEnv, ...] = (
    RegisteredEnv(ENV_IDS[0], _ENV, _V0, "v0: the direct-force model"),
    RegisteredEnv(LEGACY_ENV_IDS[0], _ENV, _V0, "v0's first id (replays record it)"),
    RegisteredEnv(AHEAD_ENV_IDS[0], _ENV, {**_V0, **_AHEAD}, "v0, road-ahead observation"),
    RegisteredEnv(ENV_IDS[1], _ENV, _V1, "v1: the wheel-speed model, vehicles, planets"),
    RegisteredEnv(AHEAD_ENV_IDS[1], _ENV, {**_V1, **_AHEAD}, "v1, road-ahead observation"),
    RegisteredEnv(LEGACY_ENV_IDS[1], f"={ENV_IDS[1]}", {}, "v1's first id (replays record it)"),
    RegisteredEnv(LEARN_ENV_ID, "rally_env.learn:make_env", {}, "v0 as agents learn on it"),
)


def register_envs() -> None:
    """Register :data:`REGISTERED_ENVS` with Gymnasium (idempotent; run on ``import
    rally_env``, by ``gym.make("rally_env:RallyDirect-v0")`` and by the ``gymnasium.envs``
    entry point). Each env has its vector entry point (``RallyVectorEnv``, or
    :func:`rally_env.learn.make_vector_env`).

    ``Rally-v1`` is a second key of ``RallyWheelSpeed-v1``'s spec, not a spec of its own (why:
    ``docs/env.md``, the env ids).
    """
    from gymnasium.envs.registration import register, registry

    for e in REGISTERED_ENVS:
        if e.id in registry:
            continue
        if e.entry_point.startswith("="):
            registry[e.id] = registry[e.entry_point[1:]]
            continue
        vector = e.entry_point.replace(":make_env", ":make_vector_env")  # the learning env's
        vector = _VEC if e.entry_point == _ENV else vector
        register(
            id=e.id, entry_point=e.entry_point, vector_entry_point=vector, kwargs=dict(e.kwargs)
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
    "AHEAD_ENV_IDS",
    "CONTROL_HZ_CHOICES",
    "DEFAULT_LAYOUT",
    "DEFAULT_LAYOUT_V1",
    "DISCRETE_ACTIONS",
    "END_REASONS",
    "ENV_IDS",
    "INFO_KEYS",
    "INFO_KEYS_V1",
    "LEARN_ENV_ID",
    "LEARN_ENV_KWARGS",
    "LEGACY_ENV_IDS",
    "REGISTERED_ENVS",
    "REWARD_TERMS",
    "ConfigError",
    "ObsLayout",
    "RallyConfig",
    "RallyEnv",
    "RallyEnvError",
    "RallyVectorEnv",
    "RandomizeConfig",
    "RecordReplay",
    "RegisteredEnv",
    "ReplayError",
    "RewardWeights",
    "StateError",
    "TerminationConfig",
    "checkpoint_times",
    "end_reason",
    "policy_to_env_action",
    "register_envs",
    "render_episode",
    "reward_terms",
]
