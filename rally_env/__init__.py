"""rally_env: the Gymnasium rally-driving environment.

    import gymnasium as gym
    import rally_env

    gym.register_envs(rally_env)  # RallyDirect-v0, RallyWheelSpeed-v1 (+ *Ahead), RallyLearn-v0
    env = gym.make("RallyDirect-v0", stage="opener")  # or "rally_env:RallyDirect-v0", no import
    envs = gym.make_vec("RallyDirect-v0", num_envs=64, vectorization_mode="vector_entry_point")

Importing this package never imports pygame, torch or stable-baselines3.
"""

from __future__ import annotations

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


def register_envs() -> None:
    """Register :data:`ENV_IDS`, :data:`LEGACY_ENV_IDS`, :data:`AHEAD_ENV_IDS` (the same
    envs with ``road_ahead=True``) and :data:`LEARN_ENV_ID` (``RallyLearn-v0``: version 0 with
    the settings an agent learns from, :mod:`rally_env.learn`) with Gymnasium (idempotent; run
    on ``import rally_env``, by ``gym.make("rally_env:RallyDirect-v0")`` and by the
    ``gymnasium.envs`` entry point).

    Both ids of version N are the same env class with ``version=N``; ``version=1`` is the
    wheel-speed model, library vehicles (``vehicle="truck"``), planets (``planet="moon"``)
    and the v1 observation.

    ``Rally-v1`` is a second key of ``RallyWheelSpeed-v1``'s spec in ``gymnasium.registry``
    (``gym.make("Rally-v1").spec.id == "RallyWheelSpeed-v1"``), not a spec of its own:
    Gymnasium calls an id "out of date" when the registry holds a spec of the same name with a
    higher version (``gym.make`` compares the id's version with the highest ``spec.version``
    of that ``spec.name``), and ``Rally-v1`` is another model, not a newer ``Rally-v0``. So no
    spec is named ``Rally`` but ``Rally-v0``'s, and neither first id gets the notice.
    """
    from gymnasium.envs.registration import register, registry

    for version, (new_id, old_id, ahead_id) in enumerate(
        zip(ENV_IDS, LEGACY_ENV_IDS, AHEAD_ENV_IDS, strict=True)
    ):
        for env_id in (new_id, ahead_id) if version else (new_id, old_id, ahead_id):
            kwargs: dict[str, object] = {"stage": "opener"}
            if version:
                kwargs["version"] = version
            if env_id == ahead_id:
                kwargs["road_ahead"] = True
            if env_id not in registry:
                register(
                    id=env_id,
                    entry_point="rally_env.env:RallyEnv",
                    vector_entry_point="rally_env.vector:RallyVectorEnv",
                    kwargs=kwargs,
                )
        if version and old_id not in registry:
            registry[old_id] = registry[new_id]
    if LEARN_ENV_ID not in registry:  # RallyDirect-v0 with the settings an agent learns from
        register(
            id=LEARN_ENV_ID,
            entry_point="rally_env.learn:make_env",
            vector_entry_point="rally_env.learn:make_vector_env",
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
    "policy_to_env_action",
    "register_envs",
    "render_episode",
    "reward_terms",
]
