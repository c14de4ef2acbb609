"""Built-in drivers for videos and demos, and ``--agent`` resolution.

- :class:`LineFollower`: pure pursuit on the stage centerline, from the observation's lookahead
  points (the centerline ahead in the car frame), with a target speed from the curvature ahead
  and the grip under the wheels (``--agent line``; the stand-in for ``heuristic`` where the
  ``agents`` package has no driver).
- :class:`RandomPolicy` (from :mod:`rally_env.policies`): seeded random actions.
- :func:`load_agent`: ``--agent`` -> a callable ``policy(obs) -> action``, through the ``agents``
  package's ``make_policy`` when it has one.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from rally_env.policies import RandomPolicy

Policy = Callable[[np.ndarray], np.ndarray]

#: Agent names ``--agent`` accepts besides a path.
AGENT_NAMES = ("heuristic", "line", "random")


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
        throttle = min(max(0.6 * err, 0.0), 1.0)
        brake = min(max(-0.5 * err, 0.0), 1.0)
        if brake > 0.0:
            throttle = 0.0
        return np.array([steer, throttle, brake, 0.0], np.float32)


def _plugin_policy(spec: str, seed: int | None) -> tuple[Policy, str] | None:
    """The first registered ``rally_env.policies`` resolver's answer (the ``agents`` package
    registers the heuristic driver, shipped and ``.zip`` models, ``module:function``), or
    ``None`` when no resolver is installed."""
    from rally_env.plugins import policy_resolvers

    for resolve in policy_resolvers():
        return resolve(spec, seed)
    return None


def load_agent(spec: str | Policy, env: Any, seed: int | None = None) -> tuple[Policy, str]:
    """Resolve ``--agent``.

    Args:
        spec: ``"line"`` (the built-in :class:`LineFollower`), or anything the ``agents``
            package's ``make_policy`` resolves (``"heuristic"``, ``"random"``, a shipped model
            name, a stable-baselines3 ``PATH.zip``, ``module:function``); without that package:
            ``"heuristic"`` (falls back to the line follower) and ``"random"``. A callable is
            returned as is.
        env: the env the agent drives (its spaces and observation layout).
        seed: seeds the random agent.

    Returns:
        ``(policy, label)``.

    Raises:
        ValueError: an unknown name or a file that is not a model.
        FileNotFoundError: the path does not exist.
    """
    if callable(spec):
        return spec, getattr(spec, "__name__", type(spec).__name__)
    u = env.unwrapped if hasattr(env, "unwrapped") else env
    layout = getattr(getattr(u, "core", None), "layout", None)
    if spec == "line":
        return LineFollower(layout), "line follower"
    found = _plugin_policy(spec, seed)
    if found is not None:
        return found
    if spec == "random":
        n = getattr(env.action_space, "n", None)
        return RandomPolicy(seed, None if n is None else int(n)), "random"
    if spec == "heuristic":
        return LineFollower(layout), "line follower"
    if Path(spec).suffix == ".zip":
        from gymnasium.error import DependencyNotInstalled

        raise DependencyNotInstalled(
            f'loading the model {spec} needs the agents package: pip install "rally-env[train]"'
        )
    raise ValueError(f"unknown agent {spec!r}: use {', '.join(AGENT_NAMES)} or a PATH.zip")
