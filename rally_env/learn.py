"""``RallyLearn-v0``: ``RallyDirect-v0`` with :data:`LEARN_ENV_KWARGS` (any ``RallyEnv``
argument overrides them) and three policy actions in [-1, 1] (:data:`POLICY_ACTION_NAMES`,
mapped by :func:`policy_to_env_action`); docs/env.md, "RallyLearn-v0", says why each. The env
underneath (``env.unwrapped``) is a plain :class:`rally_env.RallyEnv`.

    env = gym.make("RallyLearn-v0", stage="random")
    envs = gym.make_vec("RallyLearn-v0", num_envs=32, vectorization_mode="vector_entry_point")
"""

from __future__ import annotations

import copy
from typing import Any

import gymnasium as gym
import numpy as np

from rally_env.spaces import ActionBox

#: The id registered for this env (``rally_env.register_envs``).
LEARN_ENV_ID = "RallyLearn-v0"
#: What ``RallyLearn-v0`` sets on ``RallyEnv`` (an argument given to ``gym.make`` wins; a
#: ``reward_weights`` dict given there is merged over these weights).
LEARN_ENV_KWARGS: dict[str, Any] = {
    "stage": "opener",
    "control_hz": 10,
    "reward_weights": {"crash": 100.0},
}
#: The policy actions, each in [-1, 1].
POLICY_ACTION_NAMES: tuple[str, ...] = ("steer", "throttle", "brake")


def policy_action_space() -> ActionBox:
    """A new single-car policy action space of ``RallyLearn-v0`` (its own generator)."""
    return ActionBox(-1.0, 1.0, shape=(3,), dtype=np.float32)


#: The single-car policy action space of ``RallyLearn-v0`` (each env gets a new one).
POLICY_ACTION_SPACE = policy_action_space()


def policy_to_env_action(a: Any) -> np.ndarray:
    """Policy actions in ``[-1, 1]`` -> the env's box, shape ``(..., 4)``.

    Takes ``(..., 3)`` (steer, throttle, brake; the handbrake stays off) or ``(..., 4)``
    (steer, throttle, brake, handbrake). Steer as is; throttle ``(a + 1) / 2``; brake and
    handbrake ``max(a, 0)`` (the lower half of their range is "off").

    Raises:
        ValueError: a last axis other than 3 or 4.
    """
    a = np.clip(np.asarray(a, dtype=np.float32), -1.0, 1.0)
    if a.ndim == 0 or a.shape[-1] not in (3, 4):
        raise ValueError(
            f"policy actions have shape {a.shape}; the last axis must be 3 "
            "(steer, throttle, brake) or 4 (steer, throttle, brake, handbrake)"
        )
    out = np.zeros((*a.shape[:-1], 4), np.float32)
    out[..., 0] = a[..., 0]
    out[..., 1] = (a[..., 1] + np.float32(1.0)) * np.float32(0.5)
    out[..., 2 : a.shape[-1]] = np.maximum(a[..., 2:], np.float32(0.0))
    return out


def env_to_policy_action(a: Any) -> np.ndarray:
    """Env actions ``(..., 4)`` -> policy actions ``(..., 3)`` (a right inverse of
    :func:`policy_to_env_action` where the handbrake is off: a zero brake maps to 0)."""
    a = np.asarray(a, dtype=np.float32)
    out = a[..., :3].copy()
    out[..., 1] = a[..., 1] * np.float32(2.0) - np.float32(1.0)
    return out


def learn_kwargs(kwargs: dict[str, Any]) -> dict[str, Any]:
    """:data:`LEARN_ENV_KWARGS` with ``kwargs`` over them (a ``reward_weights`` dict merged).

    Raises:
        ConfigError: ``discrete_actions=True`` (the policy actions are continuous).
    """
    if kwargs.get("discrete_actions"):
        from rally_env.errors import ConfigError

        raise ConfigError(
            "discrete_actions",
            kwargs["discrete_actions"],
            f"must be False on {LEARN_ENV_ID}, which acts on three continuous policy actions "
            "(RallyDirect-v0 has the discrete table)",
        )
    out = {**copy.deepcopy(LEARN_ENV_KWARGS), **kwargs}
    if isinstance(kwargs.get("reward_weights"), dict):
        out["reward_weights"] = {**LEARN_ENV_KWARGS["reward_weights"], **kwargs["reward_weights"]}
    return out


class PolicyActions(gym.ActionWrapper):
    """A ``RallyEnv`` acting on three policy actions in ``[-1, 1]`` (see the module)."""

    def __init__(self, env: gym.Env):
        super().__init__(env)
        self.action_space = policy_action_space()

    def action(self, action: Any) -> np.ndarray:
        return policy_to_env_action(_checked(action, (3,)))


class VectorPolicyActions(gym.vector.VectorActionWrapper):
    """A ``RallyVectorEnv`` acting on ``(num_envs, 3)`` policy actions (see the module)."""

    def __init__(self, env: gym.vector.VectorEnv):
        super().__init__(env)
        self.single_action_space = policy_action_space()
        self.action_space = gym.vector.utils.batch_space(self.single_action_space, env.num_envs)

    def actions(self, actions: Any) -> np.ndarray:
        return policy_to_env_action(_checked(actions, (self.num_envs, 3)))


def _checked(action: Any, shape: tuple[int, ...]) -> np.ndarray:
    from gymnasium.error import InvalidAction

    try:
        a = np.asarray(action, dtype=np.float64)
    except (TypeError, ValueError) as e:
        raise InvalidAction(f"action cannot be read as real numbers: {e}") from None
    if a.shape != shape:
        raise InvalidAction(
            f"action shape {a.shape} != {shape}: expected "
            + ("" if len(shape) == 1 else f"one row per car ({shape[0]}) of ")
            + f"({', '.join(POLICY_ACTION_NAMES)}), each in [-1, 1]"
        )
    if not np.isfinite(a).all():
        raise InvalidAction("action has a non-finite value; actions must be finite")
    return a


def make_env(**kwargs: Any) -> PolicyActions:
    """``gym.make("RallyLearn-v0", ...)``'s entry point."""
    from rally_env.env import RallyEnv

    return PolicyActions(RallyEnv(**learn_kwargs(kwargs)))


def make_vector_env(num_envs: int = 1, **kwargs: Any) -> VectorPolicyActions:
    """``gym.make_vec("RallyLearn-v0", ...)``'s vector entry point."""
    from rally_env.vector import RallyVectorEnv

    return VectorPolicyActions(RallyVectorEnv(num_envs, **learn_kwargs(kwargs)))
