"""A deterministic heuristic driver that reads only the observation: one compiled kernel over
the batch, no random state, the same actions on every platform (what it does each step, its
tuning and the vehicle constants it uses: docs/agents.md, "Heuristic driver").

Usage::

    drv = HeuristicDriver()
    drv.reset(n_cars)                # per-episode memory (PI integrator, corners seen)
    actions = drv(obs)               # obs (N, D) or (D,) -> actions (N, 4) or (4,)
"""

from __future__ import annotations

import math
from dataclasses import asdict, astuple, dataclass, fields, replace
from enum import IntEnum
from typing import Any

import numpy as np
from numba import njit

from physics import ROVER, VehicleParams
from physics.jit import njit_inner
from physics.mathx import atan2x
from rally_env.spaces import (
    CURVATURE_SCALE_PER_M,
    DEFAULT_LAYOUT,
    EDGE_SCALE_M,
    LATERAL_SPEED_SCALE_MPS,
    ROAD_AHEAD_BINS_M,
    SPEED_SCALE_MPS,
    YAW_RATE_SCALE_RADPS,
    ObsLayout,
)

_IX = DEFAULT_LAYOUT.index
#: Widths of the observations the driver reads: every four-wheel layout begins with
#: RallyDirect-v0's fields (v1's extra fields and the road-ahead block follow them).
READ_WIDTHS = frozenset(
    ObsLayout(4, version=v, road_ahead=r).size for v in (0, 1) for r in (False, True)
)
#: Lookahead distances of the observation (m).
LOOK_M = np.array(DEFAULT_LAYOUT.lookahead_m, np.float64)
#: Near and far ends (m) of the road-ahead bins.
_BINS = np.array(ROAD_AHEAD_BINS_M, np.float64)
#: Per observation width with a road-ahead block: the columns of its curvature then grip bins.
_AHEAD_COLS = {
    lay.size: np.concatenate(
        [np.arange(lay.size)[lay.groups[g]] for g in ("ahead_curv", "ahead_grip")]
    ).astype(np.int64)
    for lay in (ObsLayout(4, version=v, road_ahead=True) for v in (0, 1))
}


@dataclass(frozen=True, slots=True)
class HeuristicParams:
    """Tuning of the heuristic driver (the vehicle's own constants come from its
    :class:`physics.VehicleParams`). Every field, its default, unit and meaning:
    docs/agents.md, "Heuristic driver", the ``HeuristicParams`` table.

    Raises:
        ValueError: a field not a finite number >= 0, one that must be > 0 not, or a range
            whose upper bound is below its lower one (the message names the fields).
    """

    corner_factor: float = 0.9
    corner_speed_mps: float = 28.0
    brake_factor: float = 0.35
    entry_margin_m: float = 4.0
    entry_margin_s: float = 0.3
    far_grip_cap: float = 1.08
    blind_radius_m: float = 150.0
    blind_grip: float = 0.76
    blind_brake_factor: float = 0.35
    blind_min_radius_m: float = 15.0
    blind_max_radius_m: float = 2000.0
    commit_wide_from_m: float = 11.5
    commit_wide_to_m: float = 12.0
    commit_corner_speed_mps: float = 60.0
    commit_brake_factor: float = 0.6
    v_max_mps: float = 54.0
    pursuit_min_m: float = 7.0
    pursuit_max_m: float = 30.0
    pursuit_time_s: float = 0.9
    yaw_damping: float = 1.0
    front_slip_rad: float = 0.2
    kp: float = 0.5
    ki: float = 0.05
    integral_limit: float = 10.0
    control_hz: float = 20.0
    circle_margin: float = 1.2
    brake_gain: float = 2.0
    brake_floor: float = 0.4
    oversteer_rate: float = 0.08
    oversteer_throttle: float = 0.3
    low_speed_mps: float = 6.0
    low_speed_throttle: float = 0.4
    ahead_commit_brake_factor: float = 0.52
    ahead_wide_from_m: float = 9.75
    ahead_wide_to_m: float = 10.5
    ahead_wide_corner_speed_mps: float = 40.0
    ahead_wide_brake_factor: float = 0.37

    def __post_init__(self) -> None:
        for f in fields(self):
            v = getattr(self, f.name)
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
                raise ValueError(f"HeuristicParams.{f.name} must be a finite number, got {v!r}")
            if v < 0:
                raise ValueError(f"HeuristicParams.{f.name} must be >= 0, got {v!r}")
        for name in (
            "corner_speed_mps",
            "commit_corner_speed_mps",
            "control_hz",
            "blind_radius_m",
            "blind_min_radius_m",
            "pursuit_min_m",
            "ahead_wide_corner_speed_mps",
        ):
            if getattr(self, name) <= 0:
                raise ValueError(f"HeuristicParams.{name} must be > 0, got {getattr(self, name)!r}")
        for hi, op, lo in (
            ("blind_max_radius_m", ">=", "blind_min_radius_m"),
            ("ahead_wide_to_m", ">", "ahead_wide_from_m"),
            ("commit_wide_to_m", ">", "commit_wide_from_m"),
            ("pursuit_max_m", ">=", "pursuit_min_m"),
        ):
            a, b = getattr(self, hi), getattr(self, lo)
            if a < b or (op == ">" and a == b):
                raise ValueError(f"HeuristicParams.{hi} ({a}) must be {op} {lo} ({b})")


def _vehicle_constants(vehicle: VehicleParams) -> dict[str, float]:
    xs = [w.x_m for w in vehicle.wheels]
    return {
        "mu_base": vehicle.mu_base,
        "g_mps2": vehicle.gravity_mps2,
        "wheelbase_m": max(xs) - min(xs),
        "front_axle_m": max(xs),
        "steer_lock_rad": vehicle.steer_lock_rad,
        "mass_kg": vehicle.mass_kg,
        "drive_force_n": vehicle.drive_force_n,
        "power_w": vehicle.power_w,
        "brake_force_n": vehicle.brake_force_n,
    }


# packed constants: the HeuristicParams fields in order, then the vehicle's; the kernels read
# ``c[_C.name]`` (numba compiles an IntEnum member to its constant index)
_P_NAMES = tuple(f.name for f in fields(HeuristicParams))
_C = IntEnum("_C", [*_P_NAMES, *_vehicle_constants(ROVER)], start=0, module=__name__)
# observation indices handed to the kernel
_O_SPEED, _O_VF, _O_VL, _O_YAW, _O_PITCH, _O_LEFT, _O_RIGHT = range(7)
_O_GRIP = 7  # four wheels
_O_LX = _O_GRIP + 4  # one per lookahead distance each: look_x, look_y, look_curv
_OBS = np.array(
    [
        *(_IX[n] for n in ("speed", "v_forward", "v_left", "yaw_rate", "pitch")),
        *(_IX[n] for n in ("left_edge", "right_edge")),
        *(_IX[f"grip_{w}"] for w in ("FL", "FR", "RL", "RR")),
        *(_IX[f"look_{q}_{int(d)}m"] for q in ("x", "y", "curv") for d in LOOK_M),
    ],
    np.int64,
)
# observation scales: speed, lateral speed, yaw rate, edge distance, curvature
_SCALES = np.array(
    [
        SPEED_SCALE_MPS,
        LATERAL_SPEED_SCALE_MPS,
        YAW_RATE_SCALE_RADPS,
        EDGE_SCALE_M,
        1.0 / CURVATURE_SCALE_PER_M,
    ],
    np.float64,
)
# per-car memory columns
S_INTEGRAL = 0  # integrated speed error (m)
S_KMAX = 1  # tightest road curvature seen on this stage (1/m)
S_BIN_K = 2  # per road-ahead bin: its sharpest curvature at the last step (observation units)
S_BIN_AT = S_BIN_K + len(ROAD_AHEAD_BINS_M)  # per bin: how far ahead that corner is at least (m)
N_STATE = S_BIN_AT + len(ROAD_AHEAD_BINS_M)
# per-car diagnostics, by their names in ``plan``
_DIAG_NAMES = (
    "target_speed_mps",
    "blind_speed_mps",
    "blind_radius_m",
    "commitment",
    "path_curvature_per_m",
)
N_DIAG = len(_DIAG_NAMES)
D_TARGET, D_BLIND, D_RADIUS, D_COMMIT, D_PATH_CURV = range(N_DIAG)
#: A per-car tuning (``driver(obs, tune=...)``, (N, 4)), in its column order: multipliers of
#: the speed plan's corner factor (the share of the lateral grip it uses), of the speed of
#: the grip's fall (``corner_speed_mps`` and its wide-road and committed forms) and of the
#: brake factors it plans with; then the line, where the pursuit target sits across the road
#: as a share of the half width (+ left, within :data:`LINE_MAX`). ``(1, 1, 1, 0)`` is the driver
#: as tuned, to the bit.
TUNE_FIELDS = ("corner_factor", "corner_speed", "brake_factor", "line")
#: A tuned line keeps the pursuit target within this share of the half width of the
#: centerline.
LINE_MAX = 0.6
#: :data:`TUNE_FIELDS` of the driver as tuned.
TUNE_NEUTRAL = (1.0, 1.0, 1.0, 0.0)


@njit_inner(_nrt=False)
def _corner_speed(a0: float, kappa: float, vc: float) -> float:
    """Speed v (m/s) with ``v^2 kappa = a0 / (1 + (v / vc)^2)``."""
    k = max(abs(kappa), 1e-6)
    q = k / (vc * vc)
    # the positive root u = v^2 of q u^2 + k u - a0 = 0, in its cancellation-free form
    u = 2.0 * a0 / (k + math.sqrt(k * k + 4.0 * q * a0))
    return math.sqrt(max(u, 0.0))


@njit_inner(_nrt=False)
def _ramp(x: float, x0: float, x1: float) -> float:
    """0 up to ``x0``, 1 from ``x1``, linear between."""
    if x <= x0:
        return 0.0
    if x >= x1:
        return 1.0
    return (x - x0) / (x1 - x0)


@njit_inner(_nrt=False)
def _points_target(k, obs, oi, sc, look, ahead, bins, c, car):
    """Speed target (m/s) of car ``k`` from its lookahead points (docs/agents.md, "Heuristic
    driver": the speed target).

    Args:
        ahead, bins: as for :func:`_drive` (``ahead`` (N, 0): no block).
        car: ``(mu_far, grade, margin, vcs, bf, cf)``: the grip here (mu), the grade's
            deceleration (m/s^2), the entry margin (m), the corner speed of the grip's fall
            (m/s), the brake factor and the corner factor.
    """
    mu_far, grade, margin, vcs, bf, cf = car
    nk = look.shape[0]
    nb = ahead.shape[1] // 2
    mu_base = c[_C.mu_base]
    grav = c[_C.g_mps2]
    tgt = c[_C.v_max_mps]
    for j in range(nk):
        mu_j = mu_far
        for i in range(nb):
            if bins[i, 0] < look[j]:
                mu_j = min(mu_j, mu_base * max(ahead[k, nb + i], 0.3))
        vc = _corner_speed(cf * mu_j * grav, obs[k, oi[_O_LX + 2 * nk + j]] * sc[4], vcs)
        b = max(bf * mu_j * grav - grade, 0.1 * mu_j * grav)
        tgt = min(tgt, math.sqrt(vc * vc + 2.0 * b * max(look[j] - margin, 0.0)))
    return tgt


@njit_inner(_nrt=False)
def _blind_corner(k, look, c, mem, car):
    """The blind driver's corner just beyond the lookahead points (docs/agents.md, "the blind
    corner"): its speed limit (m/s) and the committed driver's radius (m).

    Args:
        car: ``(mu_far, grade, margin, qc, cf, tv, tb)``: the grip here (mu), the grade's
            deceleration (m/s^2), the entry margin (m), the commitment, the corner factor
            and the multipliers of the corner speed and the brake factors (:data:`TUNE_FIELDS`).
    """
    mu_far, grade, margin, qc, cf, tv, tb = car
    nk = look.shape[0]
    mu_base = c[_C.mu_base]
    grav = c[_C.g_mps2]
    reach = max(look[nk - 1] + 10.0 - margin, 0.0)
    mu_b = min(mu_far, mu_base * c[_C.blind_grip])
    vb = _corner_speed(cf * mu_b * grav, 1.0 / c[_C.blind_radius_m], c[_C.corner_speed_mps] * tv)
    bb = max(c[_C.blind_brake_factor] * tb * mu_b * grav - grade, 0.1 * mu_b * grav)
    v_blind = math.sqrt(vb * vb + 2.0 * bb * reach)
    rb = 1.0 / max(mem[k, S_KMAX], 1e-9)
    rb = min(max(rb, c[_C.blind_min_radius_m]), c[_C.blind_max_radius_m])
    vb = _corner_speed(cf * mu_far * grav, 1.0 / rb, 1e9)
    bb = max(c[_C.commit_brake_factor] * tb * mu_far * grav - grade, 0.1 * mu_far * grav)
    v_blind += qc * (math.sqrt(vb * vb + 2.0 * bb * reach) - v_blind)
    return v_blind, rb


@njit_inner(_nrt=False)
def _bins_target(k, sc, look, ahead, bins, c, mem, car):
    """Speed target (m/s) of car ``k`` from the road-ahead block beyond the lookahead points
    (docs/agents.md, "the road ahead"); updates the car's bin memory and returns the target,
    the blind-corner limit (m/s) and the committed driver's radius (m).

    Args:
        ahead: (N, 2 B) the bins' curvature (observation units) then their lowest grip.
        bins: (B, 2) near and far end of each bin (m).
        car: ``(mu_far, grade, margin, vcs, bf, cf, qc, ds)``: as for
            :func:`_points_target`, then the commitment and the distance driven since the
            last step (m).
    """
    mu_far, grade, margin, vcs, bf, cf, qc, ds = car
    nk = look.shape[0]
    nb = bins.shape[0]
    mu_base = c[_C.mu_base]
    grav = c[_C.g_mps2]
    tgt = c[_C.v_max_mps]
    gmin = mu_far
    for j in range(nb):
        # where in its bin the sharpest corner is: a sharper one than the bin held at the last
        # step has just come in over the bin's far end; the same one has come closer by the
        # distance driven; else it may be anywhere in the bin
        kj = ahead[k, j]
        at = bins[j, 0]
        if kj == mem[k, S_BIN_K + j]:
            at = max(mem[k, S_BIN_AT + j] - ds, at)
        elif abs(kj) > abs(mem[k, S_BIN_K + j]):
            at = max(bins[j, 1] - ds, at)
        mem[k, S_BIN_K + j] = kj
        mem[k, S_BIN_AT + j] = at
        mem[k, S_KMAX] = max(mem[k, S_KMAX], abs(kj) * sc[4])
        gmin = min(gmin, mu_base * max(ahead[k, nb + j], 0.3))
        if bins[j, 1] <= look[nk - 1]:
            continue  # the lookahead points show this stretch point by point
        vc = _corner_speed(cf * gmin * grav, kj * sc[4], vcs)
        b = max(bf * gmin * grav - grade, 0.1 * gmin * grav)
        tgt = min(tgt, math.sqrt(vc * vc + 2.0 * b * max(at - margin, 0.0)))
    reach = max(bins[nb - 1, 1] + 10.0 - margin, 0.0)
    b = max(bf * gmin * grav - grade, 0.1 * gmin * grav)
    rb = min(
        max(1.0 / max(mem[k, S_KMAX], 1e-9), c[_C.blind_min_radius_m]), c[_C.blind_max_radius_m]
    )
    vb = _corner_speed(cf * gmin * grav, 1.0 / c[_C.blind_min_radius_m], vcs)
    v_blind = math.sqrt(vb * vb + 2.0 * b * reach)
    vb = _corner_speed(cf * gmin * grav, 1.0 / rb, vcs)
    v_blind += qc * (math.sqrt(vb * vb + 2.0 * b * reach) - v_blind)
    return min(tgt, v_blind), v_blind, rb


@njit_inner(_nrt=False)
def _steer(k, obs, oi, look, c, car):
    """Steering (in [-1, 1]) of car ``k`` and the curvature of its pursuit arc (1/m)
    (docs/agents.md, "steering").

    Args:
        car: ``(v, vf, vl, yaw, lock, off)``: speed, forward and leftward speed (m/s), yaw
            rate (rad/s), the steering lock (rad) and how far (m, + left) the pursuit target
            sits beside the centerline (across the road's direction there).
    """
    v, vf, vl, yaw, lock, off = car
    nk = look.shape[0]
    ld = min(max(v * c[_C.pursuit_time_s], c[_C.pursuit_min_m]), c[_C.pursuit_max_m])
    j1 = nk - 1
    for j in range(1, nk):
        if look[j] >= ld:
            j1 = j
            break
    d0 = look[j1 - 1]
    d1 = look[j1]
    u = min(max((ld - d0) / (d1 - d0), 0.0), 1.0)
    x0 = obs[k, oi[_O_LX + j1 - 1]] * d0
    x1 = obs[k, oi[_O_LX + j1]] * d1
    y0 = obs[k, oi[_O_LX + nk + j1 - 1]] * d0
    y1 = obs[k, oi[_O_LX + nk + j1]] * d1
    if ld <= look[0]:
        tx = obs[k, oi[_O_LX]] * look[0]
        ty = obs[k, oi[_O_LX + nk]] * look[0]
    else:
        tx = x0 + u * (x1 - x0)
        ty = y0 + u * (y1 - y0)
    if off != 0.0:  # a line beside the centerline: the target moves across the road
        dx = x1 - x0
        dy = y1 - y0
        dl = math.sqrt(dx * dx + dy * dy)
        if dl > 1e-6:
            tx -= dy / dl * off
            ty += dx / dl * off
    # pure pursuit: curvature of the arc to the target point = 2 y / d^2
    curv = 2.0 * ty / max(tx * tx + ty * ty, 1.0)
    delta = atan2x(c[_C.wheelbase_m] * curv, 1.0)
    # damp the yaw rate beyond what the path needs (stops fishtailing on loose ground)
    delta -= c[_C.yaw_damping] * (yaw - v * curv)
    # keep the front wheels near the front axle's direction of travel
    if vf > 3.0:
        beta_f = atan2x(vl + c[_C.front_axle_m] * yaw, max(vf, 1.0))
        delta = min(max(delta, beta_f - c[_C.front_slip_rad]), beta_f + c[_C.front_slip_rad])
    # the target behind the car (spun round): full lock towards it
    if tx < 0.0:
        delta = lock if ty + 1e-9 >= 0.0 else -lock
    return min(max(delta / lock, -1.0), 1.0), curv


@njit(cache=True)
def _drive(obs, oi, sc, look, c, mem, out, diag, ahead, bins, tune):
    """One control step for every car.

    Args:
        obs: (N, D) float32 observations.
        oi: (7 + 4 + 3 K,) int64 indices of the fields read (see ``_OBS``).
        sc: (5,) observation scales (see ``_SCALES``).
        look: (K,) lookahead distances (m).
        c: packed constants (HeuristicParams fields, then the vehicle's).
        mem: (N, N_STATE) per-car memory, updated.
        out: (N, 4) float32 actions, written.
        diag: (N, N_DIAG) diagnostics, written.
        ahead: (N, 2 B) float32 road-ahead bins (see :func:`_bins_target`), or (N, 0)
            for an observation without them (or a driver that does not read them).
        bins: (B, 2) near and far end of each road-ahead bin (m).
        tune: (N, 4) per car: multipliers of the speed plan's corner factor, corner speed and
            brake factors, and the line (:data:`TUNE_FIELDS`); or (N, 0) for none (the
            driver as tuned).
    """
    n = obs.shape[0]
    tuned = tune.shape[1] > 0
    nk = look.shape[0]
    mu_base = c[_C.mu_base]
    grav = c[_C.g_mps2]
    lock = c[_C.steer_lock_rad]
    dt = 1.0 / c[_C.control_hz]
    for k in range(n):
        v = obs[k, oi[_O_SPEED]] * sc[0]
        vf = obs[k, oi[_O_VF]] * sc[0]
        vl = obs[k, oi[_O_VL]] * sc[1]
        yaw = obs[k, oi[_O_YAW]] * sc[2]
        pitch = obs[k, oi[_O_PITCH]]
        width = (obs[k, oi[_O_LEFT]] + obs[k, oi[_O_RIGHT]]) * sc[3]
        grip = 2.0
        for w in range(4):
            gw = obs[k, oi[_O_GRIP + w]]
            if gw < grip:
                grip = gw
        grip = max(grip, 0.3)
        mu = mu_base * grip
        # memory: the tightest corner seen on this stage
        for j in range(nk):
            ak = abs(obs[k, oi[_O_LX + 2 * nk + j]]) * sc[4]
            if ak > mem[k, S_KMAX]:
                mem[k, S_KMAX] = ak
        # ---------------------------------------------------------------- speed target
        tc, tv, tb = 1.0, 1.0, 1.0  # x 1.0 is exact: untuned, the plan is bit for bit the same
        if tuned:
            tc, tv, tb = tune[k, 0], tune[k, 1], tune[k, 2]
        cf = c[_C.corner_factor] * tc
        qc = _ramp(width, c[_C.commit_wide_from_m], c[_C.commit_wide_to_m])
        mu_far = min(mu, mu_base * c[_C.far_grip_cap])
        grade = pitch * grav  # + pitch = nose down
        vcs = c[_C.corner_speed_mps] + qc * (c[_C.commit_corner_speed_mps] - c[_C.corner_speed_mps])
        margin = c[_C.entry_margin_m] + c[_C.entry_margin_s] * v
        reads_ahead = ahead.shape[1] > 0
        if reads_ahead:
            # the road-ahead block replaces the blind corner (why: docs/agents.md)
            bf = c[_C.brake_factor] + qc * (c[_C.ahead_commit_brake_factor] - c[_C.brake_factor])
            qw = _ramp(width, c[_C.ahead_wide_from_m], c[_C.ahead_wide_to_m]) * (1.0 - qc)
            vcs += qw * (c[_C.ahead_wide_corner_speed_mps] - vcs)
            bf += qw * (c[_C.ahead_wide_brake_factor] - bf)
        else:
            bf = c[_C.brake_factor] + qc * (c[_C.commit_brake_factor] - c[_C.brake_factor])
        vcs *= tv
        bf *= tb
        car = (mu_far, grade, margin, vcs, bf, cf)
        tgt = _points_target(k, obs, oi, sc, look, ahead, bins, c, car)
        if reads_ahead:
            car_b = (mu_far, grade, margin, vcs, bf, cf, qc, max(vf, 0.0) * dt)
            t_bins, v_blind, rb = _bins_target(k, sc, look, ahead, bins, c, mem, car_b)
            tgt = min(tgt, t_bins)
        else:
            v_blind, rb = _blind_corner(k, look, c, mem, (mu_far, grade, margin, qc, cf, tv, tb))
            tgt = min(tgt, v_blind)
        # -------------------------------------------------------------------- steering
        off = 0.0
        if tuned:  # the line: a share of the half width beside the centerline
            off = min(max(tune[k, 3], -LINE_MAX), LINE_MAX) * 0.5 * width
        steer, curv = _steer(k, obs, oi, look, c, (v, vf, vl, yaw, lock, off))
        # ---------------------------------------------------------------------- pedals
        err = tgt - v
        integ = min(max(mem[k, S_INTEGRAL] + err * dt, -c[_C.integral_limit]), c[_C.integral_limit])
        mem[k, S_INTEGRAL] = integ
        u_pi = c[_C.kp] * err + c[_C.ki] * integ
        # the tires resolve the longitudinal force first: throttle or brake beyond what the
        # measured lateral acceleration leaves would take the grip the corner needs
        mu_g = mu * grav
        mass = c[_C.mass_kg]
        y = min(abs(v * yaw) / mu_g * c[_C.circle_margin], 1.0)
        budget = math.sqrt(max(1.0 - y * y, 0.0)) * mu_g * mass
        budget_b = max(budget, c[_C.brake_floor] * mu_g * mass)
        budget = max(budget, 0.1 * mu_g * mass)
        f_drive = min(c[_C.drive_force_n], c[_C.power_w] / max(v, 0.1))
        thr_max = min(max(budget / f_drive, 0.0), 1.0)
        brk_max = min(max(c[_C.brake_gain] * budget_b / c[_C.brake_force_n], 0.0), 1.0)
        # oversteer (the car rotates faster than the path asks): release the brake, ease off
        if abs(yaw - v * curv) > c[_C.oversteer_rate] and abs(yaw) > abs(v * curv):
            brk_max = 0.0
            thr_max = min(thr_max, c[_C.oversteer_throttle])
        if v < c[_C.low_speed_mps]:
            thr_max = max(thr_max, c[_C.low_speed_throttle])
        out[k, 0] = np.float32(steer)
        out[k, 1] = np.float32(min(min(max(u_pi, 0.0), 1.0), thr_max))
        out[k, 2] = np.float32(min(min(max(-u_pi, 0.0), 1.0), brk_max))
        out[k, 3] = np.float32(0.0)
        diag[k, D_TARGET] = tgt
        diag[k, D_BLIND] = v_blind
        diag[k, D_RADIUS] = rb
        diag[k, D_COMMIT] = qc
        diag[k, D_PATH_CURV] = curv


def _check_tune(tune: Any, n: int) -> np.ndarray:
    """The tuning of ``n`` cars as :func:`_drive` takes it ((n, 0) for none).

    Raises:
        ValueError: not (n, 4) or (4,), or a value not finite or a multiplier not > 0 (the
            message names the first such car).
    """
    if tune is None:
        return np.zeros((n, 0))
    width = len(TUNE_FIELDS)
    t = np.asarray(tune, np.float64)
    if t.shape not in ((width,), (n, width)):
        raise ValueError(
            f"the driver's tuning must be ({n}, {width}) or ({width},) ({TUNE_FIELDS}), "
            f"got shape {t.shape}"
        )
    t = np.ascontiguousarray(np.broadcast_to(t, (n, width)))
    bad = ~(np.isfinite(t).all(axis=1) & (t[:, :3] > 0.0).all(axis=1))
    if bad.any():
        k = int(np.flatnonzero(bad)[0])
        raise ValueError(
            f"the driver's tuning must be finite, its multipliers > 0: car {k} has "
            f"{dict(zip(TUNE_FIELDS, t[k].tolist(), strict=True))}"
        )
    return t


class HeuristicDriver:
    """Curvature speed target with a blind-corner assumption or the road ahead, pure pursuit
    and PI pedals (deterministic, batched).

    Args:
        params: the driver's tuning (default :class:`HeuristicParams`).
        vehicle: the vehicle it drives (default :data:`physics.ROVER`, RallyDirect-v0's); its
            friction, gravity, wheelbase, front axle, steering lock, mass, drive force, power
            and brake force go into the speed target, the steering and the pedal limits.
        read_ahead: read the road-ahead block when the observation has one (and ask for it:
            :attr:`env_kwargs`); ``False`` is the blind driver on any observation.
    """

    name = "heuristic"

    @property
    def env_kwargs(self) -> dict[str, Any]:
        """The observation settings the driver asks for (:func:`agents.policies.policy_env_kwargs`):
        the road-ahead block when it reads it."""
        return {"road_ahead": True} if self.read_ahead else {}

    def __init__(
        self,
        params: HeuristicParams | None = None,
        vehicle: VehicleParams | None = None,
        read_ahead: bool = True,
    ):
        self.read_ahead = bool(read_ahead)
        self.vehicle = vehicle or ROVER
        self.params = params or HeuristicParams()
        self.at_rate(self.params.control_hz)
        self._mem = self._fresh(1)
        self._diag = np.zeros((1, N_DIAG))

    def at_rate(self, control_hz: float) -> HeuristicDriver:
        """Drive an env deciding at ``control_hz``: the tuning's rate-dependent terms (its
        integral and look-ahead per step) take that step.
        :func:`rally_env.policies.policy_env_kwargs` calls it with the env's rate. Returns
        self."""
        self.params = replace(self.params, control_hz=control_hz)
        consts = [*astuple(self.params), *_vehicle_constants(self.vehicle).values()]
        self._c = np.array(consts, np.float64)  # in the order of _C
        return self

    def _fresh(self, n: int) -> np.ndarray:
        m = np.zeros((n, N_STATE))
        m[:, S_KMAX] = 1.0 / self.params.blind_max_radius_m
        m[:, S_BIN_K:S_BIN_AT] = np.inf  # no bin seen yet: its corner may be anywhere in it
        m[:, S_BIN_AT:] = _BINS[:, 0]
        return m

    def reset(self, n: int = 1, mask: np.ndarray | None = None) -> None:
        """Start new episodes: clear the memory of all ``n`` cars, or only of the cars where
        the bool array ``mask`` (n,) is set."""
        if mask is None or self._mem.shape[0] != n:
            self._mem = self._fresh(n)
        else:
            self._mem[np.asarray(mask, bool)] = self._fresh(1)[0]

    def memory(self) -> np.ndarray:
        """A copy of the driver's memory, (n cars, :data:`N_STATE`): what it has seen of the
        stage so far (a planner clones it with the car it plans for)."""
        return self._mem.copy()

    def set_memory(self, mem: Any) -> None:
        """Replace the memory with ``mem`` (n cars, :data:`N_STATE`) from :meth:`memory`.

        Raises:
            ValueError: not a finite float array of that width.
        """
        m = np.asarray(mem, np.float64)
        if m.ndim != 2 or m.shape[1] != N_STATE or m.shape[0] < 1:
            raise ValueError(f"the driver's memory must be (n, {N_STATE}), got shape {m.shape}")
        if np.isnan(m).any():
            raise ValueError("the driver's memory must not hold NaN")
        self._mem = np.ascontiguousarray(m).copy()

    def _run(
        self, obs: Any, mem: np.ndarray | None, tune: Any = None
    ) -> tuple[np.ndarray, np.ndarray, bool]:
        o = np.asarray(obs)
        single = o.ndim == 1
        o = np.atleast_2d(o)
        if o.ndim != 2 or o.shape[1] not in READ_WIDTHS:
            raise ValueError(
                "the heuristic driver reads RallyDirect-v0's "
                f"{DEFAULT_LAYOUT.size}-value observation (or a four-wheel layout that begins "
                f"with it: widths {sorted(READ_WIDTHS)}), got an array of shape {np.shape(obs)}"
            )
        if self.read_ahead and o.shape[1] in _AHEAD_COLS:
            ahead = np.ascontiguousarray(o[:, _AHEAD_COLS[o.shape[1]]], dtype=np.float32)
        else:
            ahead = np.zeros((o.shape[0], 0), np.float32)
        o = np.ascontiguousarray(o[:, : DEFAULT_LAYOUT.size], dtype=np.float32)
        n = o.shape[0]
        tune = _check_tune(tune, n)
        if mem is None:
            if self._mem.shape[0] != n:
                self.reset(n)
            mem = self._mem
        if self._diag.shape[0] != n:
            self._diag = np.zeros((n, N_DIAG))
        out = np.zeros((n, 4), np.float32)
        _drive(o, _OBS, _SCALES, LOOK_M, self._c, mem, out, self._diag, ahead, _BINS, tune)
        return out, self._diag, single

    def __call__(self, obs: Any, tune: Any = None) -> np.ndarray:
        """Actions (N, 4) float32 ``[steer, throttle, brake, handbrake]`` for observations
        (N, D) (D one of :data:`READ_WIDTHS`); a single (D,) observation gives (4,).
        ``tune``: per-car tuning (N, 4) (or (4,) for all cars), :data:`TUNE_FIELDS`;
        ``None`` is the driver as tuned."""
        out, _, single = self._run(obs, None, tune)
        return out[0] if single else out

    def plan(self, obs: Any) -> dict[str, np.ndarray]:
        """What the driver makes of observations (N, D), its memory unchanged: per car
        (N,) the actions (N, 4), the speed target and the blind-corner limit (m/s), the
        committed driver's blind-corner radius (m), the commitment (0..1) and the pursuit
        arc's curvature (1/m)."""
        o = np.atleast_2d(np.asarray(obs))
        n = o.shape[0]
        mem = self._mem.copy() if self._mem.shape[0] == n else self._fresh(n)
        out, d, _ = self._run(o, mem)
        return {"actions": out, **{name: d[:, i].copy() for i, name in enumerate(_DIAG_NAMES)}}


def fingerprint(driver: HeuristicDriver | None = None) -> dict[str, Any]:
    """The settings of a driver (default: the ``--agent heuristic`` one) that its stage times
    depend on: its :class:`HeuristicParams` and whether it reads the road ahead. The par times
    and the benchmark baseline record them, and a baseline made with others is not used."""
    d = driver or HeuristicDriver()
    return {**asdict(d.params), "read_ahead": d.read_ahead}
