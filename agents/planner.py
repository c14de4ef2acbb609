"""The oracle planner: sampling model-predictive control (MPPI over closed-loop heuristic
candidates) on the real simulator, seeded per episode (a run is a function of the stage and the
:class:`PlannerSettings`, a replay ``rally verify`` accepts); docs/agents.md, "The oracle
planner"."""

from __future__ import annotations

import dataclasses
import math
import sys
import time
import tomllib
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

import numpy as np

from agents.heuristic import LINE_MAX, TUNE_NEUTRAL, HeuristicDriver, HeuristicParams
from agents.progress import Progress
from rally_env import RallyVectorEnv
from rally_env.kernels import EI_END


class PlannerSettingsError(ValueError):
    """A planner setting is invalid: names the field, the value and the rule."""

    def __init__(self, name: str, value: Any, rule: str):
        self.field = name
        self.value = value
        self.rule = rule
        super().__init__(f"planner setting {name} = {value!r}: {rule}")


@dataclass(frozen=True)
class PlannerSettings:
    """The oracle planner's settings: every field, its default, unit and meaning is the
    settings table of docs/agents.md, "The oracle planner".

    Raises:
        PlannerSettingsError: a count below its minimum, a number not finite or negative
            (``temperature`` and ``finish_speed_mps``: not > 0), ``decay`` outside (0, 1],
            ``replan`` above ``horizon`` or ``threads`` not a bool.
    """

    samples: int = 32
    horizon: int = 40
    tail: int = 160
    iterations: int = 3
    replan: int = 5
    knot: int = 5
    sigma_steer: float = 0.25
    sigma_pedal: float = 0.6
    sigma_tune: float = 0.1
    sigma_line: float = 0.2
    decay: float = 0.6
    temperature: float = 0.1
    off_road_cost_m: float = 20.0
    crash_cost_m: float = 10_000.0
    end_off_road_cost_m: float = 1_000.0
    finish_speed_mps: float = 40.0
    seed: int = 0
    threads: bool = True

    def __post_init__(self) -> None:
        lows = {"samples": 3, "horizon": 1, "iterations": 1, "replan": 1, "knot": 1}  # else 0
        for name in (f.name for f in fields(self) if f.type == "int"):
            lo = lows.get(name, 0)
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < lo:
                raise PlannerSettingsError(name, v, f"must be an integer >= {lo}")
        positive = ("temperature", "finish_speed_mps")
        floats = [f.name for f in fields(self) if f.type == "float"]
        for name in sorted(floats, key=lambda n: n not in positive):  # the positive ones first
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, (int, float, np.integer, np.floating)):
                raise PlannerSettingsError(name, v, "must be a number")
            if not math.isfinite(float(v)) or v < 0 or (name in positive and v == 0):
                rule = "must be finite and > 0" if name in positive else "must be finite, >= 0"
                raise PlannerSettingsError(name, v, rule)
        if not 0.0 < self.decay <= 1.0:
            raise PlannerSettingsError("decay", self.decay, "must be in (0, 1]")
        if self.replan > self.horizon:
            raise PlannerSettingsError(
                "replan", self.replan, f"must not exceed the horizon ({self.horizon})"
            )
        if not isinstance(self.threads, bool):
            raise PlannerSettingsError("threads", self.threads, "must be true or false")

    @classmethod
    def from_mapping(cls, values: dict[str, Any], source: str = "settings") -> PlannerSettings:
        """Settings from a mapping of field names (unknown names refused, naming them)."""
        names = {f.name for f in fields(cls)}
        unknown = sorted(set(values) - names)
        if unknown:
            raise PlannerSettingsError(
                ", ".join(unknown),
                {k: values[k] for k in unknown},
                f"unknown in {source}; known: {', '.join(sorted(names))}",
            )
        return cls(**values)

    @classmethod
    def from_spec(cls, spec: str) -> PlannerSettings:
        """Settings from ``"samples=128,horizon=40"`` or from a TOML file's path (its keys,
        or those of its ``[planner]`` table)."""
        spec = spec.strip()
        if not spec:
            return cls()
        if spec.endswith(".toml"):
            try:
                doc = tomllib.loads(Path(spec).read_text())
            except FileNotFoundError:
                raise PlannerSettingsError("file", spec, "no such file") from None
            except (tomllib.TOMLDecodeError, UnicodeDecodeError) as e:
                raise PlannerSettingsError("file", spec, f"not TOML: {e}") from None
            table = doc.get("planner", doc)
            if not isinstance(table, dict):
                raise PlannerSettingsError("planner", table, "must be a table")
            return cls.from_mapping(table, source=spec)
        kinds = {f.name: f.type for f in fields(cls)}
        values: dict[str, Any] = {}
        for part in spec.split(","):
            key, eq, raw = part.partition("=")
            key, raw = key.strip(), raw.strip()
            if not eq or not key:
                raise PlannerSettingsError(part, part, "must be name=value")
            if key not in kinds:
                raise PlannerSettingsError(key, raw, f"unknown; known: {', '.join(sorted(kinds))}")
            kind = str(kinds[key])  # the annotation's text
            try:
                values[key] = _BOOLS[raw.lower()] if kind == "bool" else _NUMBERS[kind](raw)
            except (KeyError, ValueError):
                raise PlannerSettingsError(key, raw, f"must be a {kind}") from None
        return cls.from_mapping(values)


_BOOLS = {"true": True, "1": True, "yes": True, "false": False, "0": False, "no": False}
_NUMBERS = {"int": int, "float": float}


@dataclass
class PlannerRun:
    """What one episode of the planner cost on a stage: plans made, model car-steps simulated,
    CPU seconds of the planning process (all its threads) and wall-clock seconds."""

    stage: str
    plans: int = 0
    car_steps: int = 0
    cpu_s: float = 0.0
    wall_s: float = 0.0


def _offset(a: np.ndarray, eps: np.ndarray) -> np.ndarray:
    """(N, 4) actions moved by (N, 2) offsets of the steering and of the pedal (throttle
    minus brake), clipped to the box; the handbrake is kept."""
    out = a.copy()
    out[:, 0] = np.clip(a[:, 0] + eps[:, 0], -1.0, 1.0)
    p = np.clip((a[:, 1] - a[:, 2]) + eps[:, 1], -1.0, 1.0)
    out[:, 1] = np.maximum(p, 0.0)
    out[:, 2] = np.maximum(-p, 0.0)
    return out


class _Episode:
    """The planner's state for one env it drives."""

    def __init__(self, env: Any, planner: MPCPlanner):
        self.env = env
        s = planner.settings
        self.model: RallyVectorEnv = planner._model_for(env)
        params = HeuristicParams(control_hz=float(env.config.control_hz))  # at the env's rate
        self.driver, self.batch_driver = HeuristicDriver(params), HeuristicDriver(params)
        self.rng = np.random.default_rng(s.seed)
        self.plan: np.ndarray | None = None  # (horizon, 4) actions from this step on
        self.tune = np.array(TUNE_NEUTRAL, np.float64)  # the plan's driver tuning
        self.eps = np.zeros((s.horizon, 2))  # the plan's (steer, pedal) offsets
        self.cursor = 0  # steps of the plan executed since it was made
        self.run: PlannerRun | None = PlannerRun(stage=env.core.stage_name(0))
        self.last = self.run
        self.length = float(env.core.info_of(0)["stage_length_m"])
        self.bar: Any = None


class MPCPlanner:
    """The oracle planner as a policy of ``rally eval`` / ``rally benchmark``.

    It needs the env it drives: :func:`agents.policies.bind_policy` gives it the envs of a
    batch after their reset (``bind``); then ``planner(obs)`` plans for each of them.

    Args:
        settings: :class:`PlannerSettings` (default settings if None).
        progress: show a progress bar per episode on stderr (a plain line every 30 s when
            stderr is not a terminal).
    """

    name = "mpc"
    #: the heuristic tail reads the road ahead
    env_kwargs: dict[str, Any] = {"road_ahead": True}  # noqa: RUF012

    def __init__(self, settings: PlannerSettings | None = None, progress: bool = False):
        self.settings = settings or PlannerSettings()
        self.progress = bool(progress)
        self._episodes: list[_Episode] = []
        self._models: dict[str, Any] = {}
        #: every finished episode's cost, in order
        self.runs: list[PlannerRun] = []

    # ------------------------------------------------------------------ the policy protocol
    def bind(self, envs: list[Any]) -> None:
        """Start planning for ``envs`` (reset ``RallyEnv`` s, one per observation row)."""
        self._close_episodes()
        keep = {e.config.digest() for e in envs}
        for key in [k for k in self._models if k not in keep]:  # another stage's model
            self._models.pop(key).close()
        self._episodes = [_Episode(e, self) for e in envs]
        if self.progress:
            for ep in self._episodes:
                ep.bar = Progress(round(ep.length), f"mpc {ep.run.stage}", "metre")

    def reset(self, n: int = 1) -> None:
        """A new batch of episodes (``bind`` follows with its envs)."""

    def __call__(self, obs: Any) -> np.ndarray:
        o = np.atleast_2d(np.asarray(obs, np.float32))
        if len(self._episodes) != o.shape[0]:
            raise RuntimeError(
                f"the planner drives {len(self._episodes)} envs (bind them first: "
                f"agents.policies.bind_policy), got {o.shape[0]} observations"
            )
        out = np.zeros((o.shape[0], 4), np.float32)
        for i, ep in enumerate(self._episodes):
            if ep.run is None:  # ended
                continue
            if int(ep.env.core.eistate[0, EI_END]) != 0:  # the episode has ended
                self._end(ep)
                continue
            out[i] = self._act(ep, o[i])
        return out if np.ndim(obs) > 1 else out[0]

    def finish(self) -> list[dict[str, Any]]:
        """The batch is over: close its episodes; returns their cost (:class:`PlannerRun`
        as dicts), in batch order."""
        eps = self._episodes
        self._close_episodes()
        return [dataclasses.asdict(ep.last) for ep in eps]

    def close(self) -> None:
        self._close_episodes()
        for m in self._models.values():
            m.close()
        self._models.clear()

    # ------------------------------------------------------------------ planning
    def _model_for(self, env: Any) -> Any:
        cfg = env.config
        key = cfg.digest()
        if key not in self._models:
            kw = {**{f.name: getattr(cfg, f.name) for f in fields(cfg)}, "render_mode": None}
            model = RallyVectorEnv(self.settings.samples, parallel=self.settings.threads, **kw)
            model.reset(seed=0)
            self._models[key] = model
        return self._models[key]

    def _act(self, ep: _Episode, obs: np.ndarray) -> np.ndarray:
        s = self.settings
        t0, c0 = time.perf_counter(), time.process_time()
        h = ep.driver(obs[None, :])[0]  # the shadow driver sees every real observation
        if ep.plan is None or ep.cursor >= s.replan:
            self._plan(ep, h)
        a = ep.plan[ep.cursor]
        ep.cursor += 1
        ep.run.cpu_s += time.process_time() - c0
        ep.run.wall_s += time.perf_counter() - t0
        if ep.bar is not None:
            ep.bar.update(done=round(ep.env.core.info_of(0)["progress_m"]))
        return a

    def _plan(self, ep: _Episode, h: np.ndarray) -> None:
        """Search from the real car's state; leaves the best drive found in ``ep.plan``."""
        s = self.settings
        k_n, hz, r = s.samples, s.horizon, s.replan
        state = ep.env.get_state()
        mem = ep.driver.memory()
        # the search's mean: the last plan's tuning and input offsets, shifted to now
        mean_tune = ep.tune.copy()
        mean_eps = np.zeros((hz, 2))
        mean_eps[: hz - r] = ep.eps[r:]
        best = (-math.inf, None, None, None)  # score, actions, tuning, offsets
        sig_eps = np.array([s.sigma_steer, s.sigma_pedal])
        sig_tune = np.array([s.sigma_tune, s.sigma_tune, s.sigma_tune, s.sigma_line])
        for it in range(s.iterations):
            scale = s.decay**it
            tune = np.tile(mean_tune, (k_n, 1))
            eps = np.tile(mean_eps, (k_n, 1, 1))
            fixed = np.zeros((k_n, hz), bool)  # steps that replay recorded actions
            acts = np.zeros((k_n, hz, 4), np.float32)
            exact = np.zeros(k_n, bool)  # the heuristic's own actions, no offsets
            first = 1
            if it == 0:
                # candidate 0: the drive already planned, its tail to the tuned heuristic;
                # candidate 1: the heuristic driver as tuned
                if ep.plan is not None:
                    rest = ep.plan[ep.cursor :]
                    acts[0, : len(rest)] = rest
                    fixed[0, : len(rest)] = True
                    eps[0] = 0.0
                tune[1] = TUNE_NEUTRAL
                exact[1] = True
                first = 2
            tune[first:] += ep.rng.normal(size=(k_n - first, 4)) * sig_tune * scale
            eps[first:] += self._noise(ep.rng, k_n - first, sig_eps * scale)
            tune[:, :3] = np.clip(tune[:, :3], 0.5, 2.0)
            tune[:, 3] = np.clip(tune[:, 3], -LINE_MAX, LINE_MAX)
            scores, done = self._rollout(ep, state, mem, acts, fixed, exact, tune, eps)
            ep.run.car_steps += done
            j = int(np.argmax(scores))
            if scores[j] > best[0]:
                best = (float(scores[j]), acts[j].copy(), tune[j].copy(), eps[j].copy())
            ok = np.isfinite(scores)
            spread = float(np.std(scores[ok])) if ok.any() else 1.0
            w = np.exp((scores - scores[j]) / (s.temperature * max(spread, 1e-6)))
            w /= w.sum()
            mean_tune = w @ tune
            mean_eps = np.einsum("k,khd->hd", w, eps)
        _, ep.plan, ep.tune, ep.eps = best
        ep.cursor = 0
        ep.run.plans += 1

    def _noise(self, rng: np.random.Generator, n: int, sigma: np.ndarray) -> np.ndarray:
        s = self.settings
        n_knots = s.horizon // s.knot + 2
        knots = rng.normal(size=(n, n_knots, 2)) * sigma
        t = np.arange(s.horizon) / s.knot
        i0 = np.floor(t).astype(np.int64)
        f = (t - i0)[None, :, None]
        return knots[:, i0] * (1.0 - f) + knots[:, i0 + 1] * f

    def _rollout(
        self,
        ep: _Episode,
        state: dict[str, Any],
        mem: np.ndarray,
        acts: np.ndarray,
        fixed: np.ndarray,
        exact: np.ndarray,
        tune: np.ndarray,
        eps: np.ndarray,
    ) -> tuple[np.ndarray, int]:
        """Drive every candidate from ``state``: for ``horizon`` steps the tuned heuristic's
        action moved by the candidate's offsets (or its recorded action where ``fixed``; the
        plain heuristic's where ``exact``), then the tuned heuristic for ``tail`` steps. The
        actions driven are written into ``acts``. Returns (scores, car-steps simulated)."""
        s = self.settings
        model = ep.model
        k_n = acts.shape[0]
        obs = model.set_car_states(np.arange(k_n), state)
        drv = ep.batch_driver
        drv.set_memory(np.repeat(mem, k_n, axis=0))
        alive = np.ones(k_n, bool)
        off = np.zeros(k_n)
        progress = np.zeros(k_n)
        bonus = np.zeros(k_n)
        dt = 1.0 / model.config.control_hz
        steps = 0
        total = s.horizon + s.tail
        for j in range(total):
            h = drv(obs, tune=tune)
            if j < s.horizon:
                a = _offset(h, eps[:, j])
                a[exact] = h[exact]
                fx = fixed[:, j]
                a[fx] = acts[fx, j]
                acts[:, j] = a
            else:
                a = h
            obs, _, term, trunc, info = model.step(a)
            steps += int(alive.sum())
            off += alive & info["off_road"]
            progress = np.where(alive, info["credited_progress_m"], progress)
            ended = alive & (term | trunc)
            if ended.any():
                fin = ended & info["finished"]
                left = (total - j - 1) * dt
                bonus[fin] = left * s.finish_speed_mps
                bonus[ended & ~fin] = -s.crash_cost_m
                alive &= ~ended
                if not alive.any():
                    break
        # still running off the road when the look-ahead ends: on its way off the stage
        bonus[alive & info["off_road"]] -= s.end_off_road_cost_m
        return progress + bonus - s.off_road_cost_m * off, steps

    # ------------------------------------------------------------------ bookkeeping
    def _end(self, ep: _Episode) -> None:
        if ep.run is not None:
            ep.last = ep.run
            self.runs.append(ep.run)
            if ep.bar is not None:
                ep.bar.close()
                r = ep.run
                print(
                    f"mpc {r.stage}: done, {r.plans} plans, {r.car_steps / 1e6:.1f} M "
                    f"car-steps, {r.cpu_s:.0f} CPU-s",
                    file=sys.stderr,
                    flush=True,
                )
            ep.run = None

    def _close_episodes(self) -> None:
        for ep in self._episodes:
            self._end(ep)
        self._episodes = []


def make_planner(spec: str = "", progress: bool = False) -> MPCPlanner:
    """The planner an ``--agent mpc[:SETTINGS]`` value names (``SETTINGS``: see
    :meth:`PlannerSettings.from_spec`)."""
    return MPCPlanner(PlannerSettings.from_spec(spec), progress=progress)
