"""Re-simulation: a replay run again in a private single env, one control step at a time."""

from __future__ import annotations

from typing import Any

import numpy as np

from rally_env.replay.codec import kwargs_to_env_args
from rally_env.replay.errors import ReplayError, ReplayFormatError
from rally_env.replay.format import ENV_IDS, Replay, generator_from_state
from rally_env.replay.hashing import car_state_hash


def _make_env(replay: Replay) -> Any:
    from rally_env.env import RallyEnv

    args = kwargs_to_env_args(replay.env_kwargs)
    want = ENV_IDS.index(replay.env_id) if replay.env_id in ENV_IDS else 0
    if args.get("version", 0) != want:
        raise ReplayFormatError(
            f"env_kwargs.version {args.get('version', 0)!r} does not match env_id {replay.env_id!r}"
        )
    try:
        return RallyEnv(**args)
    except ReplayError:
        raise
    except (ValueError, TypeError, OSError) as e:
        raise ReplayFormatError(f"the replay's env_kwargs do not build an env: {e}") from None


def _reset_env(env: Any, reset: dict[str, Any]) -> None:
    core = env.core
    if "seed" in reset:
        env.reset(seed=int(reset["seed"]), options={"car_index": int(reset.get("car_index", 0))})
        return
    if "entropy" in reset:
        ss = np.random.SeedSequence(int(reset["entropy"]), spawn_key=tuple(reset["spawn_key"]))
        gen = np.random.Generator(np.random.PCG64(ss))
    else:
        gen = generator_from_state(reset["rng_state"])
    core.rngs[0] = gen  # reset(seed=None) continues the car's stream: start it from here
    env.reset()


class Resim:
    """A re-simulation of a replay in a private single env, one control step at a time.

    Attributes:
        env: the :class:`rally_env.RallyEnv` (N = 1) running the replay.
        t: control steps done.
        info: the last info dict.
    """

    def __init__(self, replay: Replay):
        self.replay = replay
        self.env = _make_env(replay)
        _reset_env(self.env, replay.reset)
        self.t = 0
        self.done = False
        self.info = self.env.core.info_of(0)
        self.terminated = False
        self.truncated = False

    @property
    def core(self) -> Any:
        return self.env.core

    def state_hash(self) -> str:
        return car_state_hash(self.env.core, 0)

    def step(self) -> bool:
        """Apply the next recorded action; False when the actions are exhausted or the
        episode ended."""
        if self.done or self.t >= self.replay.steps:
            return False
        a = self.replay.actions[self.t]
        if a.ndim == 0:
            a = int(a)
        _, _, term, trunc, info = self.env.step(a)
        self.t += 1
        self.info = info
        self.terminated, self.truncated = term, trunc
        if term or trunc:
            self.done = True
        return True
