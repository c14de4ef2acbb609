"""Recording: every episode of a Rally env (or of each car of the vector env) as a replay.

The recorder registers itself as hooks on the env's core (:meth:`RallyCore.add_hooks`), so it
sees every reset of every car, including the autoresets inside a vector step.
"""

from __future__ import annotations

import copy
import os
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np

from rally_env import kernels as K
from rally_env.config import config_to_kwargs, jsonable
from rally_env.errors import ConfigError
from rally_env.replay.budgets import DEFAULT_BUDGETS
from rally_env.replay.codec import stage_kind
from rally_env.replay.errors import ReplayRecordError
from rally_env.replay.format import DEFAULT_HASH_EVERY, Replay, time_json
from rally_env.replay.hashing import car_state_hash


@dataclass(slots=True, eq=False)
class _Episode:
    """The episode being recorded for one car."""

    reset: dict[str, Any]
    initial_hash: str
    stage: dict[str, Any]
    actions: list[Any] = field(default_factory=list)
    hashes: list[str] = field(default_factory=list)


def _reset_spec(ss: Any, rng: Any) -> dict[str, Any]:
    if isinstance(ss, np.random.SeedSequence):
        ent = ss.entropy
        key = tuple(int(x) for x in ss.spawn_key)
        if isinstance(ent, (int, np.integer)) and len(key) == 1:
            return {"seed": int(ent), "car_index": key[0]}
        if isinstance(ent, (int, np.integer)):
            return {"entropy": int(ent), "spawn_key": list(key)}
        raise ReplayRecordError("a reset seed must be an integer to be recorded")
    return {"rng_state": jsonable(rng.bit_generator.state)}


_PASSTHROUGH = ("PassiveEnvChecker", "OrderEnforcing", "TimeLimit", "RecordEpisodeStatistics")


def _check_chain(env: Any) -> None:
    e = env
    while isinstance(e, gym.Wrapper):
        if isinstance(e, (gym.ActionWrapper,)) or (
            type(e).__name__ not in _PASSTHROUGH and "action" in type(e).__name__.lower()
        ):
            raise ReplayRecordError(
                f"{type(e).__name__} changes actions below RecordReplay: wrap it outside "
                "(RecordReplay must see the actions the env gets)"
            )
        e = e.env


class _Recorder:
    """Shared per-car recording logic, registered as the core's hooks so every reset of every
    car (explicit, autoreset in NextStep or SameStep mode) closes and opens episodes. Its
    arguments after ``recorder`` are :class:`RecordReplay`'s."""

    def __init__(
        self,
        base: Any,
        recorder: str,
        directory: str | os.PathLike[str] | None = None,
        hash_every: int = DEFAULT_HASH_EVERY,
        keep: int = 1000,
        on_replay: Callable[[Replay], Any] | None = None,
        meta: dict[str, Any] | None = None,
        save_partial: bool = False,
    ):
        from rally_env.env import RallyEnv
        from rally_env.vector import RallyVectorEnv

        if not isinstance(base, (RallyEnv, RallyVectorEnv)):
            raise ReplayRecordError(
                f"RecordReplay records Rally-v0 envs, got {type(base).__name__}"
            )
        if isinstance(hash_every, bool) or not isinstance(hash_every, int) or hash_every < 1:
            raise ValueError(f"hash_every must be an integer >= 1, got {hash_every!r}")
        hz = base.config.control_hz
        if hash_every / hz > DEFAULT_BUDGETS.max_hash_interval_s:
            raise ValueError(
                f"hash_every = {hash_every} steps is {hash_every / hz:g} s at {hz} Hz: a verifier "
                f"wants a hash at least every {DEFAULT_BUDGETS.max_hash_interval_s:g} s"
            )
        self.base = base
        self.core = base.core
        try:
            self.kwargs = config_to_kwargs(base.config)
        except ConfigError as e:
            raise ReplayRecordError(f"this env cannot be recorded: {e}") from None
        self.config_digest = base.config.digest()
        self.vehicle_digest = base.config.vehicle.digest()
        self.env_id = base.config.env_id
        self.stage_kind = stage_kind(self.kwargs["stage"])
        self.discrete = base.config.discrete_actions
        self.directory = None if directory is None else Path(directory)
        self.hash_every = hash_every
        self.replays: deque[Replay] = deque(maxlen=keep)
        self.on_replay = on_replay
        self.meta = dict(meta or {})
        self.save_partial = save_partial
        self.recorder = recorder
        self.saved: list[Path] = []
        self.episodes: list[_Episode | None] = [None] * self.core.n
        self._specs: list[dict[str, Any]] = []
        self.core.add_hooks(self)

    def close(self) -> None:
        for k in range(self.core.n):
            self.finish(k, partial=True)
        self.core.remove_hooks(self)

    def after_set_state(self) -> None:
        """A restored state is not reachable from a recorded reset: drop the open episodes
        (recording resumes at the next reset)."""
        self.episodes = [None] * self.core.n

    def after_set_cars(self, cars: np.ndarray) -> None:
        """Cars whose state was replaced: their open episodes end unrecorded, as above."""
        for k in cars:
            self.episodes[int(k)] = None

    def _stage_of(self, k: int) -> dict[str, Any]:
        st = self.core.bank.slots[int(self.core.eistate[k, K.EI_SLOT])]
        return {"name": st.name, "digest": st.digest(), "kind": self.stage_kind}

    def before_reset(self, cars: np.ndarray, seeds: list[Any]) -> None:
        """Close the cars' open episodes and note how each new one starts (its seed, or the
        car's RNG state when it continues its stream)."""
        core = self.core
        self._specs = []
        for i, k in enumerate(cars):
            k = int(k)
            self.finish(k, partial=True)
            ss = seeds[i]
            if ss is None and core.rngs[k] is None:
                ss = np.random.SeedSequence()  # record fresh entropy instead of losing it
                seeds[i] = ss
            spec = _reset_spec(ss, core.rngs[k])
            pool = core.stages.pool_now()
            if pool is not None:  # a stage pool: the stage also depends on its seed and step
                spec["pool"] = {"seed": pool[0], "clock": pool[1]}
            self._specs.append(spec)

    def after_reset(self, cars: np.ndarray) -> None:
        """Open an episode for every car that just reset."""
        for i, k in enumerate(cars):
            k = int(k)
            ep = _Episode(self._specs[i], car_state_hash(self.core, k), self._stage_of(k))
            self.episodes[k] = ep
        self._specs = []

    def hash_due(self, k: int) -> None:
        """After a step: store the state hash if car ``k`` is at a multiple of hash_every."""
        ep = self.episodes[k]
        if ep is not None and len(ep.hashes) < len(ep.actions) // self.hash_every:
            ep.hashes.append(car_state_hash(self.core, k))

    def step(self, env: Any, actions: Any, single: bool) -> Any:
        """``env.step(actions)`` (one car's action if ``single``), recording the action of
        every car whose episode is open and running; cars that ended last step are reset by
        this step (NextStep) and ignore it. Continuous actions reach the env as float32."""
        core = self.core
        a = actions if self.discrete else _as_f32(actions)
        arr = np.asarray(a)[None] if single else np.asarray(a)
        running = [
            k
            for k in range(core.n)
            if self.episodes[k] is not None and not (core.term[k] or core.trunc[k])
        ]
        try:
            acts = [int(arr[k]) if self.discrete else arr[k].astype(np.float32) for k in running]
        except (IndexError, TypeError, ValueError):
            return env.step(actions)  # let the env raise its own error
        for k, x in zip(running, acts, strict=True):
            self.episodes[k].actions.append(x)
        before = list(self.episodes)
        try:
            out = env.step(a)
        except Exception:  # the actions were not taken: unrecord them
            for ep in (self.episodes[k] for k in running):
                if ep is not None and ep.actions:
                    ep.actions.pop()
            raise
        ended = np.reshape(np.logical_or(out[2], out[3]), -1)
        for k in running:
            self.hash_due(k)
            # NextStep / Disabled: the ended car still holds its final state; SameStep
            # already closed it inside the step (the reset hook)
            if ended[k] and self.episodes[k] is before[k]:
                self.finish(k)
        return out

    def finish(self, k: int, partial: bool = False) -> Replay | None:
        """Close car ``k``'s episode (ended, or cut short by a reset when ``partial``)."""
        ep = self.episodes[k]
        if ep is None:
            return None
        self.hash_due(k)  # SameStep: the car ends inside the step, before the wrapper hashes
        self.episodes[k] = None
        core = self.core
        if partial and not ep.actions:
            return None
        info = core.info_of(k)
        ended = bool(core.term[k] or core.trunc[k])
        if partial and not ended and not self.save_partial:
            return None
        if self.discrete:
            acts = np.asarray(ep.actions, np.int32).reshape(-1)
        else:
            acts = np.asarray(ep.actions, np.float32).reshape(-1, 4)
        meta = dict(self.meta)
        meta.setdefault("created_utc", time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()))
        meta["recorder"] = self.recorder if core.n == 1 else f"{self.recorder} car {k}"
        cps = core.checkpoint_times(k)
        rp = Replay(
            env_kwargs=copy.deepcopy(self.kwargs),
            reset=ep.reset,
            actions=acts,
            hash_every=self.hash_every,
            hashes=ep.hashes,
            initial_hash=ep.initial_hash,
            final_hash=car_state_hash(core, k),
            end_reason=core.end_reason(k) if ended else "",
            finish_time_s=time_json(info["finish_time_s"]),
            checkpoint_times_s=[time_json(c) for c in cps],
            stage=ep.stage,
            vehicle_digest=self.vehicle_digest,
            config_digest=self.config_digest,
            env_id=self.env_id,
            control_hz=int(self.base.config.control_hz),
            stage_time_s=float(info["stage_time_s"]),
            terminated=bool(core.term[k]),
            truncated=bool(core.trunc[k]),
            meta=meta,
        )
        self.replays.append(rp)
        if self.directory is not None:
            self.saved.append(rp.save(self.directory / rp.default_name()))
        if self.on_replay is not None:
            self.on_replay(rp)
        return rp


def _as_f32(action: Any) -> Any:
    try:
        a = np.asarray(action)
        if a.dtype.kind in "fiu":
            return a.astype(np.float32)
    except Exception:
        pass
    return action


class RecordReplay(gym.Wrapper):
    """Record every episode of a ``Rally-v0`` env as a :class:`Replay` (``docs/replays.md``,
    "Recording"); given a :class:`rally_env.RallyVectorEnv` it returns a
    :class:`RecordVectorReplay`. Continuous actions are cast to float32 before they reach the
    env; a wrapper below this one that changes actions is refused (:class:`ReplayRecordError`).

    Args:
        env: the env.
        directory: if set, every finished replay is saved there (``<stage>-<time>-<id>``).
        hash_every: a state hash every this many control steps.
        keep: how many finished replays :attr:`replays` keeps (oldest dropped).
        on_replay: called with each finished :class:`Replay`.
        meta: extra data stored in each replay's ``meta`` (e.g. ``{"player": "ada"}``).
        save_partial: also keep episodes cut short by a reset or ``close()``.

    Attributes:
        replays, saved: the finished replays (oldest first) and the paths written.
    """

    def __new__(cls, env: Any, *args: Any, **kwargs: Any):
        if isinstance(env, gym.vector.VectorEnv):
            return RecordVectorReplay(env, *args, **kwargs)
        return super().__new__(cls)

    def __init__(self, env: gym.Env, *args: Any, **kwargs: Any):
        super().__init__(env)
        _check_chain(env)
        self._rec = _Recorder(env.unwrapped, "RallyEnv", *args, **kwargs)
        self.replays, self.saved = self._rec.replays, self._rec.saved

    @property
    def config(self) -> Any:
        """The wrapped env's :class:`~rally_env.RallyConfig` (drop-in for code reading it)."""
        return self._rec.base.config

    @property
    def core(self) -> Any:
        """The wrapped env's :class:`~rally_env.core.RallyCore` (read it, never step it)."""
        return self._rec.core

    def step(self, action: Any):
        return self._rec.step(self.env, action, single=True)

    def close(self) -> None:
        self._rec.close()
        super().close()


class RecordVectorReplay(gym.vector.VectorWrapper):
    """:class:`RecordReplay` for a :class:`rally_env.RallyVectorEnv`: one replay per car
    episode (car ``k``'s replay resets like ``RallyEnv.reset(seed, options={"car_index": k})``
    or from the car's recorded RNG state after an autoreset). Same arguments."""

    def __init__(self, env: Any, *args: Any, **kwargs: Any):
        super().__init__(env)
        self._rec = _Recorder(env.unwrapped, "RallyVectorEnv", *args, **kwargs)
        self.replays, self.saved = self._rec.replays, self._rec.saved

    def step(self, actions: Any):
        return self._rec.step(self.env, actions, single=False)

    def close(self, **kwargs: Any) -> None:
        self._rec.close()
        super().close(**kwargs)
