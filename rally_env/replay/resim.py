"""Re-simulation: a replay run again in a private single env, one control step at a time."""

from __future__ import annotations

from typing import Any

import numpy as np

from rally_env.config import LEGACY_ENV_IDS
from rally_env.core import car_seed_sequence
from rally_env.replay.budgets import (
    DEFAULT_BUDGETS,
    Budgets,
    ReplayBudgetError,
    check_stages,
    time_limit_steps,
)
from rally_env.replay.codec import kwargs_to_env_args
from rally_env.replay.errors import ReplayFormatError
from rally_env.replay.format import Replay, generator_from_state
from rally_env.replay.hashing import car_state_hash


def _stages_of(spec: Any) -> list[Any]:
    """The stages a (parsed, whitelisted) stage argument names; none for ``random``."""
    from rally_env.stages import resolve_stage

    if isinstance(spec, str) and spec == "random":
        return []
    specs = spec if isinstance(spec, list) else [spec]
    try:
        return [resolve_stage(x) for x in specs]  # names only: library or gen-<seed>
    except (ValueError, TypeError, OverflowError) as e:
        raise ReplayFormatError(f"env_kwargs.stage cannot be built: {e}") from None


def settings_of(replay: Replay, budgets: Budgets | None = None) -> tuple[dict[str, Any], Any]:
    """The whitelisted ``RallyEnv`` arguments of a replay and the
    :class:`~rally_env.RallyConfig` they make; nothing is baked or generated yet (embedded
    stages are built, after their size is checked).

    Raises:
        ReplayFormatError: the settings are malformed or do not make a config.
        ReplayBudgetError: a stage list or an embedded stage over ``budgets``.
    """
    from rally_env.config import RallyConfig

    budgets = DEFAULT_BUDGETS if budgets is None else budgets
    args = kwargs_to_env_args(replay.env_kwargs, budgets)
    want = LEGACY_ENV_IDS.index(replay.env_id)
    if args.get("version", 0) != want:
        raise ReplayFormatError(
            f"env_kwargs.version {args.get('version', 0)!r} does not match env_id {replay.env_id!r}"
        )
    try:
        config = RallyConfig.build(**args)
    except (ValueError, TypeError, ArithmeticError) as e:
        raise ReplayFormatError(f"the replay's env_kwargs do not build an env: {e}") from None
    return args, config


def build_env(
    replay: Replay,
    budgets: Budgets | None = None,
    settings: tuple[dict[str, Any], Any] | None = None,
) -> Any:
    """The private single env a replay runs in, built from its whitelisted ``env_kwargs``
    (:func:`settings_of`, or ``settings`` already made) after every budget that does not need
    the env is checked: the stages are built, not baked, and measured first; the claimed
    steps are held to the episode's time limit.

    Raises:
        ReplayFormatError: the settings are malformed or do not build an env.
        ReplayBudgetError: the stages or the claimed steps exceed ``budgets``.
    """
    from rally_env.env import RallyEnv

    budgets = DEFAULT_BUDGETS if budgets is None else budgets
    args, config = settings_of(replay, budgets) if settings is None else settings
    stages = _stages_of(args["stage"])
    check_stages(stages, "env_kwargs.stage", budgets)
    if not stages and config.random_stage["length_m"] > budgets.max_stage_length_m:
        raise ReplayBudgetError(
            f"env_kwargs.random_stage.length_m {config.random_stage['length_m']:g} m is over the "
            f"budget of {budgets.max_stage_length_m:g} m"
        )
    limit = time_limit_steps(config, stages)
    if replay.steps > limit:
        raise ReplayBudgetError(
            f"{replay.steps} steps are more than an episode of these settings can last "
            f"({limit} steps at {config.control_hz} Hz before the time limit)"
        )
    try:
        return RallyEnv(**args)
    except (ValueError, TypeError, ArithmeticError) as e:
        raise ReplayFormatError(f"the replay's env_kwargs do not build an env: {e}") from None


def _reset_env(env: Any, reset: dict[str, Any]) -> None:
    core = env.core
    pool = reset.get("pool")
    if (pool is None) != (core.stages.pool_size is None):
        raise ReplayFormatError(
            "reset.pool is there without a stage pool in the settings"
            if core.stages.pool_size is None
            else "the settings have a stage pool (random_stage.pool) but reset.pool is missing"
        )
    try:
        if "seed" in reset and pool is None:
            car = int(reset.get("car_index", 0))
            env.reset(seed=int(reset["seed"]), options={"car_index": car})
            return
        if "seed" in reset:
            ss = car_seed_sequence(int(reset["seed"]), int(reset.get("car_index", 0)))
            gen = np.random.Generator(np.random.PCG64(ss))
        elif "entropy" in reset:
            ss = np.random.SeedSequence(int(reset["entropy"]), spawn_key=tuple(reset["spawn_key"]))
            gen = np.random.Generator(np.random.PCG64(ss))
        else:
            gen = generator_from_state(reset["rng_state"])
    except (ValueError, TypeError, OverflowError) as e:
        raise ReplayFormatError(f"the replay's reset cannot be applied: {e}") from None
    if pool is not None:  # the recorded pool seed and env step decide the stage with the stream
        core.stages.seed_pool(int(pool["seed"]))
        core.stages.clock = int(pool["clock"])
    core.rngs[0] = gen  # reset(seed=None) continues the car's stream: start it from here
    env.reset()


class Resim:
    """A re-simulation of a replay in a private single env, one control step at a time.

    Args:
        replay: the replay.
        budgets: what building its env may cost (:func:`build_env`).
        settings: :func:`settings_of` output, if already made.

    Attributes:
        env: the :class:`rally_env.RallyEnv` (N = 1) running the replay.
        t: control steps done.
        info: the last info dict.
    """

    def __init__(
        self,
        replay: Replay,
        budgets: Budgets | None = None,
        settings: tuple[dict[str, Any], Any] | None = None,
    ):
        self.replay = replay
        self.env = build_env(replay, budgets, settings)
        _reset_env(self.env, replay.reset)
        self.t = 0
        self.done = False
        self.info = self.env.core.info_of(0)

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
        self.done = bool(term or trunc)
        return True
