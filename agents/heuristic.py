"""A deterministic heuristic driver that reads only the observation.

Steering: pure pursuit on the lookahead points of the observation (the centerline ahead in the
car frame), with a lookahead distance that grows with speed, yaw-rate damping, and the front
wheels kept within a slip-angle margin of the front axle's direction of travel (steering past
the tire's peak slip angle only ploughs). Speed: a target from the curvature ahead and the
surface grip under the wheels (the corner speed each lookahead point allows, with the usable
lateral grip falling with speed, reached by braking at a fraction of the friction limit less
the grade), tracked by a PID that outputs throttle or brake, both capped by what the measured
lateral acceleration leaves of the friction circle. No random state: the same observations give
the same actions.

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
_GROUNDED = np.array([_IX[f"grounded_{w}"] for w in ("FL", "FR", "RL", "RR")])


@dataclass(frozen=True, slots=True)
class HeuristicParams:
    """Tuning of the heuristic driver (the rover's constants are the driver's own knowledge).

    Attributes:
        mu_base, g_mps2: the tire's base mu and gravity the speed target assumes.
        corner_factor: fraction of the lateral limit used in corners.
        brake_factor: fraction of the friction limit used for braking in the speed target.
        wheelbase_m, front_axle_m, steer_lock_rad: steering geometry.
        pursuit_min_m, pursuit_max_m, pursuit_time_s: lookahead distance = clip(v t, min, max).
        yaw_damping: steer correction per rad/s of yaw rate beyond the path's (rad).
        front_slip_rad: the front wheels stay within this angle of the front axle's direction
            of travel (below the tire's 0.18 rad peak slip angle, plus a little).
        kp, ki: speed PID gains (per m/s of speed error).
        control_hz: the env's control rate (for the PID integral).
        v_max_mps: the highest speed target.
        mass_kg, drive_force_n, power_w, brake_force_n: the rover's drive and brakes (to turn
            the friction circle's share into throttle and brake commands).
        circle_margin: scales the lateral share of the circle the pedals must leave free.
        corner_speed_mps: the usable lateral grip falls with speed as
            ``corner_factor mu g / (1 + (v / corner_speed_mps) ** 2)``.
        far_grip_cap: the grip assumed for corners beyond ``near_m`` is at most this (the
            observation shows no surface ahead).
        near_m: lookahead distance within which the grip under the wheels is trusted.
        blind_radius_m, blind_grip, blind_brake_factor: the corner assumed just beyond the
            100 m the observation sees, its grip, and the braking (fraction of mu g) to reach it.
        entry_margin_m, entry_margin_s: corner speed reached this far (m + s x v) before
            each lookahead point.
        oversteer_rate: yaw rate beyond the path's (rad/s) at which brake and throttle ease.
    """

    mu_base: float = 0.70
    g_mps2: float = 3.72
    corner_factor: float = 0.9
    brake_factor: float = 0.35
    wheelbase_m: float = 3.0
    front_axle_m: float = 1.5
    steer_lock_rad: float = 0.55
    pursuit_min_m: float = 7.0
    pursuit_max_m: float = 30.0
    pursuit_time_s: float = 0.9
    yaw_damping: float = 1.0
    front_slip_rad: float = 0.2
    kp: float = 0.5
    ki: float = 0.05
    control_hz: float = 20.0
    v_max_mps: float = 54.0
    mass_kg: float = 3000.0
    drive_force_n: float = 8000.0
    power_w: float = 150_000.0
    brake_force_n: float = 24_000.0
    circle_margin: float = 1.2
    corner_speed_mps: float = 28.0
    far_grip_cap: float = 1.08
    near_m: float = 0.0
    blind_radius_m: float = 150.0
    blind_grip: float = 0.76
    blind_brake_factor: float = 0.35
    entry_margin_m: float = 4.0
    entry_margin_s: float = 0.3
    oversteer_rate: float = 0.08
    brake_floor: float = 0.4
    low_speed_mps: float = 6.0
    brake_gain: float = 2.0
    low_speed_throttle: float = 0.4


def _corner_speed(a0: np.ndarray, kappa: np.ndarray, vc: float) -> np.ndarray:
    """Speed v with ``v^2 kappa = a0 / (1 + (v / vc)^2)`` (closed form in v^2)."""
    k = np.maximum(kappa, 1e-6)
    q = k / (vc * vc)
    u = (-k + np.sqrt(k * k + 4.0 * q * a0)) / (2.0 * q)
    return np.sqrt(np.maximum(u, 0.0))


class HeuristicDriver:
    """Pure pursuit + curvature speed target + PID (deterministic, batched)."""

    name = "heuristic"

    def __init__(self, params: HeuristicParams | None = None):
        self.params = params or HeuristicParams()
        self._integral = np.zeros(1)

    def reset(self, n: int = 1, mask: np.ndarray | None = None) -> None:
        """Clear the PID state of all cars (or the cars in ``mask``)."""
        if mask is None or self._integral.shape[0] != n:
            self._integral = np.zeros(n)
        else:
            self._integral[mask] = 0.0

    def _mu(self, obs: np.ndarray) -> np.ndarray:
        """(N,) friction coefficient: the lowest grip under the four wheels."""
        return self.params.mu_base * np.clip(obs[:, _GRIP].min(axis=1), 0.3, 2.0)

    def target_speed(self, obs: np.ndarray) -> np.ndarray:
        """(N,) speed target from the curvature ahead and the grip under the wheels (m/s)."""
        p = self.params
        mu = self._mu(obs)
        mu_far = np.minimum(mu, p.mu_base * p.far_grip_cap)
        mu_k = np.where(_LOOK_M[None, :] <= p.near_m, mu[:, None], mu_far[:, None])
        kappa = np.abs(obs[:, _LOOK_K]) / 10.0  # (N, K), 1/m
        v_corner = _corner_speed(p.corner_factor * mu_k * p.g_mps2, kappa, p.corner_speed_mps)
        # braking: a fraction of the friction limit, less the grade (+ pitch = nose down)
        grade = obs[:, _IX["pitch"]] * p.g_mps2
        b = np.maximum(p.brake_factor * mu_far * p.g_mps2 - grade, 0.1 * mu_far * p.g_mps2)
        v = obs[:, _IX["speed"]] * 50.0
        margin = p.entry_margin_m + p.entry_margin_s * v
        d = np.maximum(_LOOK_M[None, :] - margin[:, None], 0.0)
        v_allow = np.sqrt(v_corner**2 + 2.0 * b[:, None] * d)
        # the observation sees 100 m ahead: assume a corner of blind_radius_m just beyond it
        mu_b = np.minimum(mu_far, p.mu_base * p.blind_grip)
        vb = _corner_speed(
            p.corner_factor * mu_b * p.g_mps2,
            np.full_like(mu_b, 1.0 / p.blind_radius_m),
            p.corner_speed_mps,
        )
        bb = np.maximum(p.blind_brake_factor * mu_b * p.g_mps2 - grade, 0.1 * mu_b * p.g_mps2)
        v_blind = np.sqrt(vb**2 + 2.0 * bb * np.maximum(_LOOK_M[-1] + 10.0 - margin, 0.0))
        tgt = np.minimum(np.minimum(v_allow.min(axis=1), v_blind), p.v_max_mps)
        return tgt

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
        # keep the front wheels near the front axle's direction of travel: past the tire's
        # peak slip angle more lock only ploughs
        vf = obs[:, _IX["v_forward"]] * 50.0
        vl = obs[:, _IX["v_left"]] * 20.0
        beta_f = np.arctan2(vl + p.front_axle_m * yaw_rate, np.maximum(vf, 1.0))
        lo = beta_f - p.front_slip_rad
        hi = beta_f + p.front_slip_rad
        delta = np.where(vf > 3.0, np.clip(delta, lo, hi), delta)
        # the target behind the car (spun round): full lock towards it
        delta = np.where(tx < 0.0, np.sign(ty + 1e-9) * p.steer_lock_rad, delta)
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
        u = p.kp * err + p.ki * self._integral
        act = np.zeros((n, 4), dtype=np.float32)
        steer = self.steer(o)
        # friction circle: the tires resolve the longitudinal force first, so throttle or brake
        # beyond what the lateral force leaves would take the grip the corner needs
        mu_g = self._mu(o) * p.g_mps2
        yaw_rate = o[:, _IX["yaw_rate"]] * 2.0
        a_meas = np.abs(v * yaw_rate)
        y = np.minimum(a_meas / mu_g * p.circle_margin, 1.0)
        budget = np.sqrt(np.maximum(1.0 - y**2, 0.0)) * mu_g * p.mass_kg
        budget_b = np.maximum(budget, p.brake_floor * mu_g * p.mass_kg)
        budget = np.maximum(budget, 0.1 * mu_g * p.mass_kg)
        f_drive = np.minimum(p.drive_force_n, p.power_w / np.maximum(v, 0.1))
        thr_max = np.clip(budget / f_drive, 0.0, 1.0)
        brk_max = np.clip(p.brake_gain * budget_b / p.brake_force_n, 0.0, 1.0)
        # oversteer (the car rotates faster than the path asks): release the brake, ease off
        curv = self._last_curv
        excess = np.abs(yaw_rate - v * curv)
        over = (excess > p.oversteer_rate) & (np.abs(yaw_rate) > np.abs(v * curv))
        brk_max = np.where(over, 0.0, brk_max)
        thr_max = np.where(over, np.minimum(thr_max, 0.3), thr_max)
        # at low speed (recovering from a spin or off the road) drive on regardless
        slow = v < p.low_speed_mps
        thr_max = np.where(slow, np.maximum(thr_max, p.low_speed_throttle), thr_max)
        act[:, 0] = steer
        act[:, 1] = np.minimum(np.clip(u, 0.0, 1.0), thr_max)
        act[:, 2] = np.minimum(np.clip(-u, 0.0, 1.0), brk_max)
        return act[0] if single else act


def heuristic_policy(env: object = None, params: HeuristicParams | None = None) -> HeuristicDriver:
    """A fresh :class:`HeuristicDriver` (the ``--agent heuristic`` policy)."""
    return HeuristicDriver(params)
