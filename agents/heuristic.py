"""A deterministic heuristic driver that reads only the observation.

Steering: pure pursuit on the lookahead points of the observation (the centerline ahead in the
car frame), with a lookahead distance that grows with speed, aimed slightly to the inside of
the coming corner. Speed: a target from the curvature ahead and the surface grip under the
wheels (the corner speed ``sqrt(c mu g / |kappa|)`` each lookahead point allows, reached by
braking at a fraction of the friction limit), tracked by a PID that outputs throttle or brake.
No random state: the same observations give the same actions.

Usage::

    drv = HeuristicDriver()
    drv.reset(n_cars)                # per-episode state (PID integrators)
    actions = drv(obs)               # obs (N, 59) or (59,) -> actions (N, 4) or (4,)
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from rally_env.spaces import DEFAULT_LAYOUT

_IX = DEFAULT_LAYOUT.index
_LOOK_M = np.array([5.0, 10.0, 20.0, 30.0, 45.0, 60.0, 80.0, 100.0])
_LOOK_X = np.array([_IX[f"look_x_{int(d)}m"] for d in _LOOK_M])
_LOOK_Y = np.array([_IX[f"look_y_{int(d)}m"] for d in _LOOK_M])
_LOOK_K = np.array([_IX[f"look_curv_{int(d)}m"] for d in _LOOK_M])
_GRIP = np.array([_IX[f"grip_{w}"] for w in ("FL", "FR", "RL", "RR")])


@dataclass(frozen=True, slots=True)
class HeuristicParams:
    """Tuning of the heuristic driver (the rover's constants are the driver's own knowledge).

    Attributes:
        mu_base, g_mps2: the tire's base mu and gravity the speed target assumes.
        corner_factor: fraction of the lateral limit used in corners.
        brake_factor: fraction of the friction limit used for braking in the speed target.
        wheelbase_m, steer_lock_rad: pure-pursuit geometry.
        pursuit_min_m, pursuit_max_m, pursuit_time_s: lookahead distance = clip(v t, min, max).
        yaw_damping: steer correction per rad/s of yaw rate beyond the path's (rad).
        kp, ki, kd: speed PID gains (per m/s of speed error).
        control_hz: the env's control rate (for the PID integral and derivative).
        v_max_mps: the highest speed target.
        mass_kg, drive_force_n, power_w, brake_force_n: the rover's drive and brakes (to turn
            the friction circle's share into throttle and brake commands).
        circle_margin: scales the lateral share of the circle the pedals must leave free.
        corner_speed_mps, corner_exponent: the usable lateral grip falls with speed as
            ``corner_factor mu g / (1 + (v / corner_speed_mps) ** corner_exponent)``.
        blind_radius_m, blind_brake_factor: the corner assumed just beyond the 100 m the
            observation sees, and the braking (fraction of mu g) assumed to reach it.
        entry_margin_m, entry_margin_s: corner speed reached this far (m + s x v) before
            each lookahead point.
        oversteer_rate: yaw rate beyond the path's (rad/s) at which brake and throttle ease.
    """

    mu_base: float = 0.70
    g_mps2: float = 3.72
    corner_factor: float = 0.9
    brake_factor: float = 0.3
    wheelbase_m: float = 3.0
    steer_lock_rad: float = 0.55
    pursuit_min_m: float = 7.0
    pursuit_max_m: float = 30.0
    pursuit_time_s: float = 0.9
    yaw_damping: float = 0.5
    kp: float = 0.5
    ki: float = 0.05
    kd: float = 0.0
    control_hz: float = 20.0
    v_max_mps: float = 54.0
    mass_kg: float = 3000.0
    drive_force_n: float = 8000.0
    power_w: float = 150_000.0
    brake_force_n: float = 24_000.0
    circle_margin: float = 1.2
    corner_speed_mps: float = 15.0
    corner_exponent: float = 1.0
    blind_radius_m: float = 100.0
    blind_brake_factor: float = 0.3
    entry_margin_m: float = 4.0
    entry_margin_s: float = 0.3
    oversteer_rate: float = 0.08


class HeuristicDriver:
    """Pure pursuit + curvature speed target + PID (deterministic, batched)."""

    name = "heuristic"

    def __init__(self, params: HeuristicParams | None = None):
        self.params = params or HeuristicParams()
        self._integral = np.zeros(1)
        self._prev_err = np.zeros(1)

    def reset(self, n: int = 1, mask: np.ndarray | None = None) -> None:
        """Clear the PID state of all cars (or the cars in ``mask``)."""
        if mask is None or self._integral.shape[0] != n:
            self._integral = np.zeros(n)
            self._prev_err = np.zeros(n)
        else:
            self._integral[mask] = 0.0
            self._prev_err[mask] = 0.0

    def target_speed(self, obs: np.ndarray) -> np.ndarray:
        """(N,) speed target from the curvature ahead and the grip under the wheels (m/s)."""
        p = self.params
        grip = np.clip(obs[:, _GRIP].mean(axis=1), 0.3, 2.0)
        mu = p.mu_base * grip
        kappa = np.abs(obs[:, _LOOK_K]) / 10.0  # (N, K), 1/m
        # usable lateral acceleration falls with speed (the soft suspension gets light on the
        # road's undulations): a = corner_factor mu g / (1 + v / corner_speed_mps)
        a0 = p.corner_factor * mu[:, None] * p.g_mps2
        k = np.maximum(kappa, 1e-6)
        v_corner = np.sqrt(a0 / k)
        for _ in range(6):
            v_corner = np.sqrt(
                a0 / (1.0 + (v_corner / p.corner_speed_mps) ** p.corner_exponent) / k
            )
        b = p.brake_factor * mu[:, None] * p.g_mps2
        # distance to each lookahead point, less a reaction margin
        v = obs[:, _IX["speed"]] * 50.0
        margin = p.entry_margin_m + p.entry_margin_s * v
        d = np.maximum(_LOOK_M[None, :] - margin[:, None], 0.0)
        v_allow = np.sqrt(v_corner**2 + 2.0 * b * d)
        # the observation sees 100 m ahead: assume a corner of blind_radius_m just beyond it
        kb = 1.0 / p.blind_radius_m
        vb = np.sqrt(p.corner_factor * mu * p.g_mps2 / kb)
        for _ in range(6):
            vb = np.sqrt(
                p.corner_factor
                * mu
                * p.g_mps2
                / (1.0 + (vb / p.corner_speed_mps) ** p.corner_exponent)
                / kb
            )
        bb = p.blind_brake_factor * mu * p.g_mps2
        v_blind = np.sqrt(vb**2 + 2.0 * bb * np.maximum(_LOOK_M[-1] + 10.0 - margin, 0.0))
        return np.minimum(np.minimum(v_allow.min(axis=1), v_blind), p.v_max_mps)

    def steer(self, obs: np.ndarray) -> np.ndarray:
        """(N,) steer command in [-1, 1] from pure pursuit on the lookahead."""
        p = self.params
        v = obs[:, _IX["speed"]] * 50.0
        ld = np.clip(v * p.pursuit_time_s, p.pursuit_min_m, p.pursuit_max_m)
        xs = obs[:, _LOOK_X] * _LOOK_M[None, :]
        ys = obs[:, _LOOK_Y] * _LOOK_M[None, :]
        n = obs.shape[0]
        tx = np.empty(n)
        ty = np.empty(n)
        for i in range(n):
            tx[i] = np.interp(ld[i], _LOOK_M, xs[i])
            ty[i] = np.interp(ld[i], _LOOK_M, ys[i])
        dist2 = tx * tx + ty * ty
        # pure pursuit: curvature of the arc to the target point = 2 y / d^2
        curv = 2.0 * ty / np.maximum(dist2, 1.0)
        delta = np.arctan(p.wheelbase_m * curv)
        self._last_curv = curv
        yaw_rate = obs[:, _IX["yaw_rate"]] * 2.0
        # damp the yaw rate beyond what the path needs (stops fishtailing on loose ground)
        want_rate = v * curv
        delta = delta - p.yaw_damping * (yaw_rate - want_rate)
        return np.clip(delta / p.steer_lock_rad, -1.0, 1.0)

    def __call__(self, obs: np.ndarray) -> np.ndarray:
        single = obs.ndim == 1
        o = np.atleast_2d(np.asarray(obs, dtype=np.float64))
        n = o.shape[0]
        if self._integral.shape[0] != n:
            self.reset(n)
        p = self.params
        dt = 1.0 / p.control_hz
        v = o[:, _IX["speed"]] * 50.0
        err = self.target_speed(o) - v
        self._integral = np.clip(self._integral + err * dt, -10.0, 10.0)
        deriv = (err - self._prev_err) / dt
        self._prev_err = err
        u = p.kp * err + p.ki * self._integral + p.kd * deriv
        act = np.zeros((n, 4), dtype=np.float32)
        steer = self.steer(o)
        # friction circle: the tires resolve the longitudinal force first, so throttle or brake
        # beyond what the lateral force leaves would take the grip the corner needs
        grip = np.clip(o[:, _GRIP].mean(axis=1), 0.3, 2.0)
        mu_g = p.mu_base * grip * p.g_mps2
        k_road = np.maximum(np.abs(o[:, _IX["look_curv_5m"]]), np.abs(o[:, _IX["look_curv_10m"]]))
        a_path = v * v * k_road / 10.0
        a_meas = np.abs(v * o[:, _IX["yaw_rate"]] * 2.0)
        yaw_rate = o[:, _IX["yaw_rate"]] * 2.0
        y_thr = np.minimum(np.maximum(a_path, a_meas) / mu_g * p.circle_margin, 1.0)
        y_brk = np.minimum(a_path / mu_g * p.circle_margin, 1.0)
        budget = np.sqrt(np.maximum(1.0 - y_thr**2, 0.0)) * mu_g * p.mass_kg
        budget_b = np.sqrt(np.maximum(1.0 - y_brk**2, 0.0)) * mu_g * p.mass_kg
        f_drive = np.where(
            v > 0.1, np.minimum(p.drive_force_n, p.power_w / np.maximum(v, 0.1)), p.drive_force_n
        )
        thr_max = np.clip(np.maximum(budget, 0.1 * mu_g * p.mass_kg) / f_drive, 0.0, 1.0)
        brk_max = np.clip(np.maximum(budget_b, 0.1 * mu_g * p.mass_kg) / p.brake_force_n, 0.0, 1.0)
        # oversteer (the car rotates faster than the path asks): release the brake, ease off
        curv = self._last_curv
        excess = np.abs(yaw_rate - v * curv)
        over = (excess > p.oversteer_rate) & (np.abs(yaw_rate) > np.abs(v * curv))
        brk_max = np.where(over, 0.0, brk_max)
        thr_max = np.where(over, np.minimum(thr_max, 0.3), thr_max)
        act[:, 0] = steer
        act[:, 1] = np.minimum(np.clip(u, 0.0, 1.0), thr_max)
        act[:, 2] = np.minimum(np.clip(-u, 0.0, 1.0), brk_max)
        return act[0] if single else act


def heuristic_policy(env: object = None, params: HeuristicParams | None = None) -> HeuristicDriver:
    """A fresh :class:`HeuristicDriver` (the ``--agent heuristic`` policy)."""
    return HeuristicDriver(params)
