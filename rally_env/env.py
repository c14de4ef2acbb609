"""``RallyEnv``: the single-car Gymnasium environment (a :class:`RallyCore` with N = 1)."""

from __future__ import annotations

from typing import Any, ClassVar

import gymnasium as gym
import numpy as np
from gymnasium.error import ResetNeeded

from rally_env.actions import validate_continuous, validate_discrete
from rally_env.config import RallyConfig
from rally_env.core import RallyCore, car_seed_sequence, extra_of, rng_from_state, with_extra
from rally_env.errors import StateError
from rally_env.render.envview import RENDER_MODES as _VIEW_RENDER_MODES
from rally_env.spaces import action_space

#: The render modes (the renderer's own list, as Gymnasium's metadata wants it).
RENDER_MODES = list(_VIEW_RENDER_MODES)
_ONE = np.zeros(1, np.int64)


class _EnvShared:
    """What both envs share: the core, the action check and the renderer (made on first use,
    never pickled: pygame surfaces and windows do not pickle, and a copy of an env gets its own
    renderer on its first render)."""

    metadata: ClassVar[dict[str, Any]]
    render_mode: str | None

    def _setup(self, config: RallyConfig, n_cars: int | None, parallel: bool | None) -> None:
        """The core of ``config`` with ``n_cars`` cars (``None``: the single env's one car)."""
        self.config = config
        self.render_mode = config.render_mode
        self.metadata = dict(self.metadata, render_fps=config.control_hz)
        self.core = RallyCore(config, n_cars or 1, parallel=parallel)
        self._n_cars = n_cars
        self._validate = validate_discrete if config.discrete_actions else validate_continuous
        self._cmd = np.zeros((n_cars or 1, 4))  # the validated actions
        self._needs_reset = True
        self._renderer: Any = None

    def _take_actions(self, actions: Any) -> None:
        """Raise ``ResetNeeded`` before the first reset; validate ``actions`` into ``_cmd``."""
        if self._needs_reset:
            raise ResetNeeded("call reset() before step()")
        self._validate(actions, self._n_cars, self._cmd)

    def _show(self, reset: bool) -> None:
        """After a reset (the renderer starts over) or a step: update the "human" window."""
        if reset and self._renderer is not None:
            self._renderer.reset()
        if self.render_mode == "human":
            self.render()

    def _renderer_of(self) -> Any:
        """The renderer, or ``None`` (with Gymnasium's warning) without a ``render_mode``."""
        if self.render_mode is None:
            gym.logger.warn(
                "render() called with render_mode=None; create the env with "
                'render_mode="rgb_array" or "human" to get frames'
            )
            return None
        if self._renderer is None:
            from rally_env.render.envview import EnvRenderer  # pygame loads with it, not on import

            self._renderer = EnvRenderer(self.render_mode, self.metadata["render_fps"])
        return self._renderer

    def _render_car(self, focus: int = 0) -> Any:
        """A frame of car ``focus``, or a window update ("human")."""
        r = self._renderer_of()
        return None if r is None else r.render(self.core, focus=focus)

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_renderer": None}

    def _close_renderer(self) -> None:
        if self._renderer is not None:
            self._renderer.close()
            self._renderer = None


class RallyEnv(_EnvShared, gym.Env):
    """Rally stage driving: one car, one stage, against the clock.

    ``gym.make("RallyDirect-v0")`` (the default), ``"RallyWheelSpeed-v1"`` (``version=1``) and
    ``"RallyLearn-v0"`` make this env. A vehicle (by default a 3000 kg Mars rover) drives from
    the stage's start line to its finish line as fast as it can without leaving the stage,
    simulated per wheel at a fixed 480 Hz. It is the N = 1 case of the batched code path of
    :class:`rally_env.RallyVectorEnv`.

    - Action: ``Box([-1, 0, 0, 0], [1, 1, 1, 1], (4,), float32)``: steer (+1 = full left),
      throttle, brake, handbrake. Finite out-of-range values are clipped; a NaN/inf entry, a
      wrong shape or a non-numeric dtype raises ``gymnasium.error.InvalidAction`` and changes
      nothing. ``discrete_actions=True``: ``Discrete(15)``.
    - Observation: a ``Box`` of float32 values with finite bounds, scaled to about unit range;
      ``rally_env.ObsLayout`` (``self.core.layout``) names every index and prints the table
      (``table_markdown()``).
    - Reward: the sum of named terms weighted by ``reward_weights``, each reported as
      ``info["reward_<term>"]`` (``rally_env.REWARD_TERMS``).
    - Episode end: ``info["end_code"]``, named by ``rally_env.end_reason(info)``: terminated
      ``finished``, ``off_stage``, ``rolled``, ``stuck`` or ``wrong_way``; truncated
      ``time_limit``.
    - Arguments: ``stage`` (a library name, ``"gen-<seed>"``, a file, a ``tracks.Stage``,
      ``"random"`` or a list), ``vehicle``, ``planet``, ``version``, ``control_hz``,
      ``reward_weights``, ``termination``, ``randomize``, ``random_stage``,
      ``discrete_actions``, ``render_mode``, ``road_ahead`` and ``ahead_apex`` (the switches
      of observation blocks: ``rally_env.spaces.OBS_SWITCHES``); a bad value raises
      ``rally_env.ConfigError`` naming it.

    The full reference, with the observation, reward, episode-end, info and argument tables
    made from the code: docs/env.md.
    """

    metadata: ClassVar[dict[str, Any]] = {"render_modes": RENDER_MODES, "render_fps": 20}

    def __init__(
        self,
        stage: Any = "opener",
        vehicle: Any = "rover",
        control_hz: int = 20,
        reward_weights: Any = None,
        termination: Any = None,
        randomize: Any = None,
        random_stage: dict[str, Any] | None = None,
        discrete_actions: bool = False,
        render_mode: str | None = None,
        version: int = 0,
        planet: str | None = None,
        road_ahead: bool = False,
        ahead_apex: bool = False,
    ):
        config = RallyConfig.build(
            stage=stage,
            vehicle=vehicle,
            control_hz=control_hz,
            reward_weights=reward_weights,
            termination=termination,
            randomize=randomize,
            random_stage=random_stage,
            discrete_actions=discrete_actions,
            render_mode=render_mode,
            version=version,
            planet=planet,
            road_ahead=road_ahead,
            ahead_apex=ahead_apex,
        )
        self._setup(config, None, parallel=False)
        self.observation_space = self.core.layout.space()
        self.action_space = action_space(self.config.discrete_actions)

    # ---------------------------------------------------------------------------- API
    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[np.ndarray, dict[str, Any]]:
        """Start an episode.

        Args:
            seed: reseeds the env's RNG stream (stage choice, randomization); ``None``
                continues the stream.
            options: ``{"car_index": k}`` draws from stream ``k`` of the seed, the one car
                ``k`` of a :class:`RallyVectorEnv` reset with the same seed uses.
        """
        super().reset(seed=seed)
        car = 0
        if options:
            unknown = set(options) - {"car_index"}
            if unknown:
                raise ValueError(f"unknown reset options {sorted(unknown)}; known: car_index")
            car = options.get("car_index", 0)
            if isinstance(car, bool) or not isinstance(car, (int, np.integer)) or car < 0:
                raise ValueError(f"options['car_index'] must be an integer >= 0, got {car!r}")
        ss = None if seed is None else car_seed_sequence(seed, int(car))
        if seed is not None:
            self.core.stages.seed_pool(int(seed))
        self.core.reset(_ONE, [ss])
        self._needs_reset = False
        info = self.core.info_of(0)
        self._show(reset=True)
        return self.core.obs[0].copy(), info

    def step(self, action: Any) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        self._take_actions(action)
        c = self.core
        c.step(self._cmd)
        c.stages.tick()
        if self.render_mode == "human":
            self.render()
        return c.obs[0].copy(), c.rew.item(0), c.term.item(0), c.trunc.item(0), c.info_of(0)

    def render(self) -> Any:
        """An (H, W, 3) uint8 frame ("rgb_array"), or a window update paced to render_fps
        ("human"). Never changes the simulation."""
        return self._render_car()

    def close(self) -> None:
        self._close_renderer()

    # ---------------------------------------------------------------------- state API
    def get_state(self) -> dict[str, Any]:
        """A plain, picklable snapshot of the whole env (physics, stage, timers, RNG).

        ``set_state`` on it (in this env or a new one with the same arguments) continues the
        run bit-identically.
        """
        npr = self._np_random
        return with_extra(
            self.core.get_state(),
            kind="RallyEnv",
            needs_reset=self._needs_reset,
            np_random=None if npr is None else npr.bit_generator.state,
            np_random_seed=self._np_random_seed,
        )

    def set_state(self, state: dict[str, Any]) -> np.ndarray:
        """Restore :meth:`get_state` output; returns the current observation.

        Raises:
            StateError: the state is malformed, corrupt or from an env with other settings;
                the env is unchanged.
        """
        extra = extra_of(state, "RallyEnv")
        self.core.check_state(state)
        try:
            gen = rng_from_state(extra.get("np_random"))
        except Exception as e:
            raise StateError(f"state np_random is malformed: {e}") from None
        self.core.set_state(state)
        self._np_random = gen
        self._np_random_seed = extra.get("np_random_seed")
        self._needs_reset = bool(extra.get("needs_reset", False))
        return self.core.obs[0].copy()
