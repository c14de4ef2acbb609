"""``RallyVectorEnv``: the native batched vector env (a :class:`RallyCore` with N cars)."""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np
from gymnasium.error import ResetNeeded
from gymnasium.utils import seeding
from gymnasium.vector import AutoresetMode, VectorEnv
from gymnasium.vector.utils import batch_space

from rally_env import kernels as K
from rally_env.config import RallyConfig, _is_int
from rally_env.core import RallyCore, car_seed_sequence, extra_of, with_extra
from rally_env.env import RENDER_MODES, _EnvShared
from rally_env.errors import ConfigError, StateError
from rally_env.spaces import action_space

#: ``render_view`` values: one frame per car, or one frame with all the cars.
RENDER_VIEWS = ("per_env", "all_cars")


def _masked(d: dict[str, Any], mask: np.ndarray) -> dict[str, Any]:
    """Add Gymnasium's ``_key`` masks to a dict of arrays (recursively)."""
    out: dict[str, Any] = {}
    for k, v in d.items():
        out[k] = _masked(v, mask) if isinstance(v, dict) else v
        out[f"_{k}"] = mask
    return out


class RallyVectorEnv(_EnvShared, VectorEnv):
    """``num_envs`` cars stepped together by one batched physics and env kernel.

    Same settings as :class:`rally_env.RallyEnv`; car ``k`` behaves exactly like a ``RallyEnv``
    reset with ``options={"car_index": k}`` and the same seed. The reference (autoreset modes,
    seeds, rendering, sub-env access, car states): docs/env.md, "Vector env".

    Args:
        num_envs: number of cars.
        autoreset_mode: ``"NextStep"`` (Gymnasium's default), ``"SameStep"`` (SB3's: the
            ending step resets the car; its end is in ``info["final_obs"]`` /
            ``info["final_info"]``) or ``"Disabled"`` (``reset(options={"reset_mask": m})``).
        parallel: step the physics with threads (default: when ``num_envs >= 64``).
        render_view: ``render()`` with ``render_mode="rgb_array"`` returns ``"per_env"``
            (default) one (H, W, 3) frame per car, or ``"all_cars"`` one frame of car 0 with
            the others translucent (what ``render_mode="human"`` shows).
        **kwargs: the ``RallyEnv`` arguments (``stage``, ``vehicle``, ``control_hz``, ...).

    Seeds: ``reset(seed=s)`` gives car ``k`` the stream ``SeedSequence(s).spawn(num_envs)[k]``;
    a list of seeds gives car ``k`` the stream of a ``RallyEnv`` reset with ``seed=seeds[k]``.
    """

    metadata: ClassVar[dict[str, Any]] = {
        "render_modes": RENDER_MODES,
        "render_fps": 20,
        "autoreset_mode": AutoresetMode.NEXT_STEP,
    }

    def __init__(
        self,
        num_envs: int = 1,
        *,
        autoreset_mode: str | AutoresetMode = AutoresetMode.NEXT_STEP,
        parallel: bool | None = None,
        max_episode_steps: int | None = None,
        render_view: str = "per_env",
        **kwargs: Any,
    ):
        if not _is_int(num_envs) or num_envs < 1:
            raise ConfigError("num_envs", num_envs, "must be an integer >= 1")
        try:
            mode = AutoresetMode(autoreset_mode)
        except ValueError:
            modes = [m.value for m in AutoresetMode]
            raise ConfigError("autoreset_mode", autoreset_mode, f"must be one of {modes}") from None
        if max_episode_steps is not None:
            rule = "Rally-v0 truncates itself (termination.time_limit_s)"
            raise ConfigError("max_episode_steps", max_episode_steps, rule)
        if render_view not in RENDER_VIEWS:
            raise ConfigError("render_view", render_view, f"must be one of {list(RENDER_VIEWS)}")
        self.render_view = render_view
        self.num_envs = int(num_envs)
        self.autoreset_mode = mode
        self.metadata = dict(self.metadata, autoreset_mode=mode)
        self._setup(RallyConfig.build(**kwargs), self.num_envs, parallel)
        self.single_observation_space = self.core.layout.space()
        self.single_action_space = action_space(self.config.discrete_actions)
        self.observation_space = batch_space(self.single_observation_space, self.num_envs)
        self.action_space = batch_space(self.single_action_space, self.num_envs)
        self._autoreset = np.zeros(self.num_envs, np.bool_)
        self._all = np.arange(self.num_envs, dtype=np.int64)
        self._single: RallyCore | None = None  # see _single_core

    # ---------------------------------------------------------------------------- API
    def reset(
        self, *, seed: int | list[int | None] | None = None, options: dict[str, Any] | None = None
    ) -> tuple[np.ndarray, dict[str, Any]]:
        """Reset all cars (or those in ``options["reset_mask"]``).

        Args:
            seed: an int (car ``k`` gets stream ``k`` of it), a list of one seed (or None) per
                car, or None (continue each car's stream).
            options: ``{"reset_mask": bool array (num_envs,)}`` to reset only some cars.
        """
        n = self.num_envs
        unknown = set(options or ()) - {"reset_mask"}
        if unknown:
            raise ValueError(f"unknown reset options {sorted(unknown)}; known: reset_mask")
        mask = (options or {}).get("reset_mask")
        if mask is not None:
            mask = np.asarray(mask)
            if mask.shape != (n,) or mask.dtype != np.bool_ or not mask.any():
                raise ValueError(
                    f"options['reset_mask'] must be a bool array of shape ({n},) with at least "
                    "one True"
                )
        if seed is None:
            seeds: list[Any] = [None] * n
        elif isinstance(seed, (int, np.integer)) and not isinstance(seed, bool):
            seeds = [car_seed_sequence(int(seed), k) for k in range(n)]
            self._np_random, self._np_random_seed = seeding.np_random(int(seed))
        else:
            seed = list(seed)
            if len(seed) != n:
                raise ValueError(f"a list of seeds must have num_envs={n} entries, got {len(seed)}")
            seeds = [None if s is None else car_seed_sequence(int(s), 0) for s in seed]
        cars = self._all if mask is None else np.flatnonzero(mask).astype(np.int64)
        if mask is None and isinstance(seed, (int, np.integer)):
            self.core.stages.seed_pool(int(seed))  # as a single env reset with this seed does
        self.core.reset(cars, [seeds[int(k)] for k in cars])
        self._autoreset[cars] = False
        self._needs_reset = False
        info = self._info()
        self._show(reset=True)
        return self.core.obs.copy(), info

    def step(
        self, actions: Any
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, dict[str, Any]]:
        self._take_actions(actions)
        c = self.core
        mode = self.autoreset_mode
        if mode == AutoresetMode.DISABLED and self._autoreset.any():
            bad = np.flatnonzero(self._autoreset)
            raise ResetNeeded(
                f"autoreset is disabled and cars {bad.tolist()} have ended: reset them with "
                "reset(options={'reset_mask': mask})"
            )
        if mode == AutoresetMode.NEXT_STEP and self._autoreset.any():
            resetting = np.flatnonzero(self._autoreset).astype(np.int64)
            stepping = np.flatnonzero(~self._autoreset).astype(np.int64)
            if stepping.size:
                c.step(self._cmd, stepping)
            # these cars ended at the last step: they reset at its count, as a single env
            # reset after that step does (so before this step's tick)
            c.reset(resetting, [None] * len(resetting))
        else:
            c.step(self._cmd)
        c.stages.tick()
        rew = c.rew.copy()
        term = c.term.copy()
        trunc = c.trunc.copy()
        done = term | trunc
        if mode == AutoresetMode.SAME_STEP and done.any():
            ending = np.flatnonzero(done).astype(np.int64)
            final_obs = np.full(self.num_envs, None, dtype=object)
            for k in ending:
                final_obs[k] = c.obs[k].copy()
            final_info = _masked(c.info(), done.copy())
            c.reset(ending, [None] * len(ending))
            info = self._info()
            info["final_obs"] = final_obs
            info["_final_obs"] = done.copy()
            info["final_info"] = final_info
            info["_final_info"] = done.copy()
            self._autoreset[...] = False
        else:
            self._autoreset = done
            info = self._info()
        self._show(reset=False)
        return c.obs.copy(), rew, term, trunc, info

    def _info(self) -> dict[str, Any]:
        """Every car's info (arrays over cars), each key with its all-True ``_key`` mask."""
        return _masked(self.core.info(), np.ones(self.num_envs, np.bool_))

    def render(self) -> Any:
        """Frames of the cars (never changes the simulation).

        Returns:
            ``render_mode="rgb_array"``: a tuple of ``num_envs`` (H, W, 3) uint8 frames, one
            per car as Gymnasium's vector envs return them (``render_view="per_env"``), or one
            frame of car 0 with the others translucent (``render_view="all_cars"``).
            ``"human"``: ``None`` (the window shows car 0 with the others).
        """
        if self.render_mode == "rgb_array" and self.render_view == "per_env":
            return self.render_cars()
        return self._render_car()

    def render_cars(self, cars: Any = None) -> tuple[np.ndarray, ...] | None:
        """One (H, W, 3) uint8 frame per car (all, or the indices ``cars``), each showing only
        that car, as its own ``RallyEnv`` would draw it."""
        r = self._renderer_of()
        if r is None:
            return None
        idx = range(self.num_envs) if cars is None else [int(k) for k in cars]
        others, r.show_others = r.show_others, False
        try:
            return tuple(r.frame(self.core, focus=k) for k in idx)
        finally:
            r.show_others = others

    def render_all_cars(self, focus: int = 0) -> np.ndarray | None:
        """One (H, W, 3) uint8 frame of car ``focus`` with the other cars of the batch drawn
        translucent (the ``render_view="all_cars"`` frame, whatever ``render_view`` is)."""
        r = self._renderer_of()
        if r is None:
            return None
        return r.frame(self.core, focus=int(focus))

    # ------------------------------------------------------------ Gymnasium's sub-env access
    def call(self, name: str, *args: Any, **kwargs: Any) -> tuple[Any, ...]:
        """Call method ``name`` (or read attribute ``name``) for every car, as
        ``SyncVectorEnv.call`` does: a tuple of ``num_envs`` results.

        ``call("render")`` returns one frame per car (:meth:`render_cars`). Other names
        resolve on this env, whose settings every car shares: a method is called once and its
        result repeated for each car.
        """
        if name == "render":
            frames = self.render_cars() if self.render_mode == "rgb_array" else None
            return frames if frames is not None else (None,) * self.num_envs
        value = self._shared_attr(name)
        if callable(value):
            value = value(*args, **kwargs)
        return (value,) * self.num_envs

    def get_attr(self, name: str) -> tuple[Any, ...]:
        """Attribute ``name`` of every car (a tuple of ``num_envs``; the cars share it)."""
        return (self._shared_attr(name),) * self.num_envs

    def set_attr(self, name: str, values: Any) -> None:
        """Set attribute ``name`` for every car: one value, or a list / tuple of
        ``num_envs`` equal values (the cars share this env's attributes, so different values
        per car raise ``ValueError`` and change nothing)."""
        if isinstance(values, (list, tuple)):
            if len(values) != self.num_envs:
                raise ValueError(
                    f"set_attr({name!r}): expected {self.num_envs} values, got {len(values)}"
                )
            first = values[0]
            if not all(_same(v, first) for v in values[1:]):
                raise ValueError(
                    f"set_attr({name!r}): the cars of a RallyVectorEnv share one value; "
                    "got different values per car"
                )
            values = first
        setattr(self, name, values)

    def _shared_attr(self, name: str) -> Any:
        if not isinstance(name, str) or name.startswith("__"):
            raise AttributeError(f"RallyVectorEnv has no public attribute {name!r}")
        try:
            return getattr(self, name)
        except AttributeError:
            raise AttributeError(f"RallyVectorEnv has no attribute {name!r}") from None

    def close_extras(self, **kwargs: Any) -> None:
        self._close_renderer()

    # ---------------------------------------------------------------------- state API
    def get_state(self) -> dict[str, Any]:
        """A plain, picklable snapshot of all cars (see :meth:`RallyEnv.get_state`)."""
        return with_extra(
            self.core.get_state(),
            kind="RallyVectorEnv",
            autoreset=self._autoreset.copy(),
            needs_reset=self._needs_reset,
        )

    def set_state(self, state: dict[str, Any]) -> np.ndarray:
        """Restore :meth:`get_state` output; returns the current observations."""
        extra = extra_of(state, "RallyVectorEnv")
        ar = extra.get("autoreset")
        if not isinstance(ar, np.ndarray) or ar.shape != (self.num_envs,) or ar.dtype != bool:
            raise StateError("state autoreset flags have the wrong shape")
        self.core.set_state(state)
        self._autoreset[...] = ar
        self._needs_reset = bool(extra.get("needs_reset", False))
        return self.core.obs.copy()

    def get_car_state(self, car: int) -> dict[str, Any]:
        """Car ``car``'s state, in the form :meth:`RallyEnv.get_state` returns.

        A :class:`rally_env.RallyEnv` built with the same arguments restores it with
        ``set_state`` and goes on exactly as the car would; :meth:`set_car_states` copies it
        into cars of a vector env with the same arguments.

        Raises:
            ValueError: ``car`` is not a car index of this env.
            StateError: the car has never been reset.
        """
        k = self._car_indices(car, "car")
        if k.size != 1:
            raise ValueError(f"car must be one car index, got {car!r}")
        st = self.core.car_state(int(k[0]), self._single_core())
        return with_extra(
            st, kind="RallyEnv", needs_reset=False, np_random=None, np_random_seed=None
        )

    def set_car_states(self, cars: Any, state: dict[str, Any]) -> np.ndarray:
        """Make every car in ``cars`` a copy of the one car of ``state``; returns their
        observations, shape (len(cars), obs size). Stepped with the same actions, each car
        then gives the source's observations, rewards and infos bit for bit; the other cars,
        the stage pool and the step count are untouched (docs/env.md, "One car's state").

        Args:
            cars: a car index, a sequence of car indices, or a bool mask of shape (num_envs,).
            state: :meth:`RallyEnv.get_state` of an env built with the same arguments as this
                one, or :meth:`get_car_state` of a vector env built so.

        Raises:
            ResetNeeded: this env has not been reset yet.
            ValueError: ``cars`` is empty, repeats a car, or holds an index out of range.
            StateError: ``state`` is not such a snapshot, is corrupt, or comes from an env
                with other settings; nothing changes.
        """
        if self._needs_reset:
            raise ResetNeeded("call reset() before set_car_states()")
        idx = self._car_indices(cars, "cars")
        extra_of(
            state,
            "RallyEnv",
            "set_car_states takes a RallyEnv state (RallyEnv.get_state() or "
            "RallyVectorEnv.get_car_state()): missing or wrong 'extra'",
        )
        stages = self._single_core().check_state(state)
        self.core.put_car_states(idx, state, stages)
        done = int(state["eistate"][0, K.EI_END]) != 0
        self._autoreset[idx] = done and self.autoreset_mode != AutoresetMode.SAME_STEP
        return self.core.obs[idx].copy()

    def _single_core(self) -> RallyCore:
        """A one-car core of this env's settings: what a car's state is checked against."""
        if self._single is None:
            self._single = RallyCore(self.config, 1, parallel=False)
        return self._single

    def _car_indices(self, cars: Any, name: str) -> np.ndarray:
        n = self.num_envs
        a = np.asarray(cars)
        if a.dtype == np.bool_:
            if a.shape != (n,):
                raise ValueError(f"{name} as a mask must have shape ({n},), got {a.shape}")
            a = np.flatnonzero(a)
        elif a.ndim > 1 or not (a.size == 0 or np.issubdtype(a.dtype, np.integer)):
            raise ValueError(f"{name} must be car indices or a bool mask, got {cars!r}")
        idx = a.reshape(-1).astype(np.int64)
        if idx.size == 0:
            raise ValueError(f"{name} names no car")
        if idx.min() < 0 or idx.max() >= n:
            raise ValueError(f"{name} {idx.tolist()} must be in [0, {n})")
        if np.unique(idx).size != idx.size:
            raise ValueError(f"{name} {idx.tolist()} repeats a car")
        return idx


def _same(a: Any, b: Any) -> bool:
    if a is b:
        return True
    try:
        return bool(np.all(a == b))
    except Exception:  # values that do not compare
        return False
