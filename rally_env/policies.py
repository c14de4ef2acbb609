"""Policies, and the one resolver of ``--agent`` values (:func:`resolve_policy`, for every
command; ``docs/architecture.md``).

A *policy* is any callable ``policy(obs) -> action``; an optional ``reset(n)`` method is
called at the start of every episode.
"""

from __future__ import annotations

import importlib
import inspect
import math
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import numpy as np
from gymnasium.error import DependencyNotInstalled

from rally_env.errors import RallyEnvError

Policy = Callable[[np.ndarray], Any]
#: ``resolver(spec, seed=..., **options) -> policy or None`` (None: not a name it knows).
Resolver = Callable[..., Any]

#: Agent values ``rally_env`` resolves itself (besides ``module:function`` and a callable).
BUILTIN_AGENTS = ("line", "random")


class PolicyNotInstalledError(RallyEnvError, DependencyNotInstalled):
    """An ``--agent`` value names a driver of a package that is not installed (``heuristic``,
    ``mpc``, a ``.zip`` model or an exported ``policy.json`` need ``agents``).

    Attributes:
        agent: the value.
    """

    def __init__(self, agent: str):
        self.agent = agent
        super().__init__(
            f"agent {agent!r} needs the agents package, which is not installed: "
            'pip install "rally-env[train]" (without it: '
            f"{', '.join(BUILTIN_AGENTS)} or module:function)"
        )

    def __reduce__(self):
        return (type(self), (self.agent,))


class LineFollower:
    """Pure pursuit on the centerline with a curvature-limited target speed.

    Args:
        layout: the env's :class:`rally_env.ObsLayout` (default: 4 wheels).
        lateral_accel_mps2: cornering acceleration it plans with, at grip 1 (m/s^2).
        brake_decel_mps2: deceleration it plans braking with (m/s^2).
        wheelbase_m: for the pursuit geometry (m).
        steer_lock_rad: the car's steering lock (steer command 1 = this angle).
        max_speed_mps: speed cap (m/s).
    """

    def __init__(
        self,
        layout: Any = None,
        lateral_accel_mps2: float = 1.2,
        brake_decel_mps2: float = 1.0,
        wheelbase_m: float = 3.0,
        steer_lock_rad: float = 0.55,
        max_speed_mps: float = 40.0,
    ):
        from rally_env import spaces

        if layout is None:
            layout = spaces.ObsLayout(4)
        ix = layout.index
        self._speed = ix["speed"]
        self._speed_scale = spaces.SPEED_SCALE_MPS
        self._curv_scale = spaces.CURVATURE_SCALE_PER_M
        self._d = np.array(layout.lookahead_m, np.float64)
        self._lx = np.array([ix[f"look_x_{d:g}m"] for d in layout.lookahead_m])
        self._ly = np.array([ix[f"look_y_{d:g}m"] for d in layout.lookahead_m])
        self._lc = np.array([ix[f"look_curv_{d:g}m"] for d in layout.lookahead_m])
        self._grip = np.array([i for n, i in ix.items() if n.startswith("grip_")], np.int64)
        self.a_lat = float(lateral_accel_mps2)
        self.a_brake = float(brake_decel_mps2)
        self.wb = float(wheelbase_m)
        self.lock = float(steer_lock_rad)
        self.vmax = float(max_speed_mps)

    def __call__(self, obs: np.ndarray) -> np.ndarray:
        """The action ``(4,)`` for one observation, or ``(N, 4)`` for a batch ``(N, D)``."""
        if np.ndim(obs) > 1:
            return np.stack([self._act(row) for row in np.asarray(obs)])
        return self._act(obs)

    def _act(self, obs: np.ndarray) -> np.ndarray:
        o = np.asarray(obs, np.float64).reshape(-1)
        v = float(o[self._speed]) * self._speed_scale
        xs = o[self._lx] * self._d
        ys = o[self._ly] * self._d
        # pursuit point at a speed-dependent distance, interpolated between lookahead points
        la = min(max(5.0 + 0.9 * v, self._d[0]), self._d[-1])
        tx = float(np.interp(la, self._d, xs))
        ty = float(np.interp(la, self._d, ys))
        l2 = max(tx * tx + ty * ty, 1.0)
        delta = math.atan(2.0 * self.wb * ty / l2)
        steer = max(-1.0, min(1.0, delta / self.lock))
        # target speed: corner speed limits ahead, reachable by braking from here
        grip = float(np.mean(o[self._grip])) if self._grip.size else 1.0
        grip = min(max(grip, 0.3), 2.0)
        kap = np.maximum(np.abs(o[self._lc]) / self._curv_scale, 1e-4)
        v_corner = np.sqrt(self.a_lat * grip / kap)
        v_reach = np.sqrt(
            v_corner**2 + 2.0 * self.a_brake * grip * np.maximum(self._d - 0.4 * v, 0.0)
        )
        v_t = min(float(v_reach.min()), self.vmax)
        err = v_t - v
        throttle = min(max(0.6 * err, 0.0), 1.0)  # (0 whenever it brakes)
        brake = min(max(-0.5 * err, 0.0), 1.0)
        return np.array([steer, throttle, brake, 0.0], np.float32)


class RandomPolicy:
    """Uniform random actions from a seeded generator (the same seed gives the same actions).

    Continuous: steer uniform in [-1, 1], throttle and brake uniform in [0, 1], handbrake 0 (a
    random handbrake only spins the car). Discrete: an action index uniform in ``[0, n)``.

    Args:
        seed: seeds the generator (``None``: fresh entropy).
        n_discrete: the number of discrete actions, or ``None`` for the continuous ``(4,)``
            action.

    Calling it with one observation ``(obs_dim,)`` gives one action (``(4,)`` float32 or an
    int); with a batch ``(N, obs_dim)``, ``N`` of them.
    """

    name = "random"

    def __init__(self, seed: int | None = 0, n_discrete: int | None = None):
        self.seed = seed
        self.n_discrete = None if n_discrete is None else int(n_discrete)
        self._rng = np.random.default_rng(seed)

    def reset(self, n: int = 1) -> None:
        """Start of an episode (nothing to reset)."""

    def __call__(self, obs: np.ndarray) -> np.ndarray | int:
        o = np.atleast_2d(obs)
        if self.n_discrete is not None:
            idx = self._rng.integers(0, self.n_discrete, size=o.shape[0])
            return idx if np.ndim(obs) > 1 else int(idx[0])
        a = self._rng.random((o.shape[0], 4)).astype(np.float32)
        a[:, 0] = 2.0 * a[:, 0] - 1.0
        a[:, 3] = 0.0
        return a if np.ndim(obs) > 1 else a[0]


def _needs_agents(spec: str) -> bool:
    p = Path(spec)
    return (
        spec in ("heuristic", "mpc")
        or spec.startswith("mpc:")
        or p.suffix in (".zip", ".json")
        or (p / "policy.json").is_file()
    )


def import_policy(spec: str) -> Policy:
    """The user callable ``"package.module:function"`` names: a class is instantiated, a
    function that takes no arguments is a factory (called for the policy), any other
    callable is the policy.

    Raises:
        ValueError: the module or name does not import, or it is not a callable.
    """
    mod_name, _, attr = spec.partition(":")
    try:
        obj = getattr(importlib.import_module(mod_name), attr)
    except (ImportError, AttributeError) as e:
        raise ValueError(f"cannot load policy {spec!r}: {e}") from None
    if inspect.isclass(obj):
        return obj()
    try:
        params = inspect.signature(obj).parameters.values()
        kinds = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
        factory = not any(p.default is p.empty and p.kind in kinds for p in params)
    except (TypeError, ValueError):
        factory = False
    if factory:
        obj = obj()
    if not callable(obj) or isinstance(obj, (str, bytes)):
        raise ValueError(
            f"agent {spec!r} is not a policy: it gives a {type(obj).__name__}, not a "
            "callable of the observation"
        )
    return obj


def resolve_policy(
    spec: str | Policy,
    env: Any = None,
    seed: int | None = 0,
    *,
    resolvers: Iterable[Resolver] | None = None,
    **options: Any,
) -> tuple[Policy, str]:
    """Resolve an ``--agent`` value (or pass a callable through) to ``(policy, label)``.

    Args:
        spec: ``"line"``, ``"random"``, ``"module:function"``, a name a resolver knows, or a
            callable (returned as is).
        env: the env the agent drives (``line`` reads its observation layout, ``random`` its
            action space); ``None``: the defaults (4 wheels, continuous actions).
        seed: seeds the random agent (``None``: 0).
        resolvers: the resolvers to ask, in order; default the installed ``rally_env.policies``
            entry points (:func:`rally_env.plugins.policy_resolvers`).
        options: passed to the resolvers (the ``agents`` package's: ``action_space``,
            ``progress``).

    Raises:
        PolicyNotInstalledError: the value needs a package that is not installed.
        ValueError: an unknown value, or a ``module:function`` that is not a policy.
        FileNotFoundError: a model path that does not exist.
        TypeError: ``spec`` is neither a string nor a callable.
    """
    if callable(spec) and not isinstance(spec, str):
        return spec, getattr(spec, "__name__", type(spec).__name__)
    if not isinstance(spec, str):
        raise TypeError(f"agent must be a name, a path or a callable, got {spec!r}")
    seed = 0 if seed is None else int(seed)
    u = getattr(env, "unwrapped", env)
    if spec == "line":
        return LineFollower(getattr(getattr(u, "core", None), "layout", None)), "line follower"
    if spec == "random":
        n = getattr(getattr(env, "action_space", None), "n", None)
        return RandomPolicy(seed, None if n is None else int(n)), "random"
    if resolvers is None:
        from rally_env.plugins import policy_resolvers

        resolvers = policy_resolvers()
    known = []
    for resolve in resolvers:
        policy = resolve(spec, seed=seed, **options)
        if policy is not None:
            return policy, spec
        known.append(getattr(resolve, "names", ""))
    if _needs_agents(spec):  # the agents package would have resolved it
        raise PolicyNotInstalledError(spec)
    if ":" in spec:
        return import_policy(spec), spec
    names = ", ".join([*BUILTIN_AGENTS, *(k for k in known if k), "module:function"])
    raise ValueError(f"unknown agent {spec!r}: use {names}")


def policy_env_kwargs(policy: Any, env_kwargs: dict[str, Any] | None = None) -> dict[str, Any]:
    """``env_kwargs`` plus the observation settings the policy needs (its ``env_kwargs``
    attribute, e.g. ``{"road_ahead": True}`` for a model trained with the road-ahead block).
    A policy with an ``at_rate`` method (the heuristic driver, a model) is set to the env's
    ``control_hz`` when ``env_kwargs`` names one.

    Raises:
        ValueError: ``env_kwargs`` sets one of those settings to another value.
    """
    out = dict(env_kwargs or {})
    for k, v in (getattr(policy, "env_kwargs", None) or {}).items():
        if k in out and out[k] != v:
            raise ValueError(
                f"the agent drives with {k}={v!r} (its observation settings); it cannot "
                f"drive an env with {k}={out[k]!r}"
            )
        out[k] = v
    if "control_hz" in (env_kwargs or {}) and hasattr(policy, "at_rate"):
        policy.at_rate(out["control_hz"])
    return out
