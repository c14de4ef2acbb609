"""The values of a saved env state, checked before ``set_state`` copies anything.

:meth:`rally_env.core.RallyCore.check_state` checks a state's structure; :func:`check_values`
then checks every value the layout allows (the rules: docs/env.md, "State API").
Every failure is a :class:`~rally_env.errors.StateError` naming the entry, the car and the rule.
"""

from __future__ import annotations

import itertools
import math
from typing import Any

import numpy as np

from physics import layout as L
from rally_env import kernels as K
from rally_env.config import randomized_vehicle
from rally_env.errors import StateError

#: Bounds on the chassis state: |position| (m), |speed| (m/s), |angular rate| (rad/s).
MAX_POSITION_M = 1.0e6
MAX_SPEED_MPS = 1.0e4
MAX_RATE_RADPS = 1.0e4
#: Any other float of the state: |value| at most this.
MAX_ABS = 1.0e15
#: Relative slack on randomized parameter columns (the draws round-trip through floats).
_REL = 1e-9


def _bad_rows(mask: np.ndarray) -> list[int]:
    """The cars (first axis) where ``mask`` is true anywhere."""
    if mask.ndim > 1:
        mask = mask.any(axis=tuple(range(1, mask.ndim)))
    return [int(k) for k in np.flatnonzero(mask)]


def _fail(key: str, rows: list[int], rule: str) -> StateError:
    cars = ", ".join(map(str, rows[:5])) + (" ..." if len(rows) > 5 else "")
    return StateError(f"state[{key!r}] (car {cars}): {rule}")


def _check(key: str, bad: np.ndarray, rule: str) -> None:
    """Fail for the cars where ``bad`` is true anywhere."""
    if bad.any():
        raise _fail(key, _bad_rows(bad), rule)


def _finite(st: dict[str, Any], key: str, nan_ok: np.ndarray | None = None) -> None:
    a = st[key]
    bad = ~np.isfinite(a)
    if nan_ok is not None:
        bad &= ~(np.isnan(a) & nan_ok)
    _check(key, bad, "holds a non-finite value")
    _check(key, np.abs(np.nan_to_num(a)) > MAX_ABS, "holds a value over 1e15")


def _check_chassis(s: np.ndarray) -> None:
    q = s[:, L.QUAT_W : L.QUAT_Z + 1]
    bad = np.abs(np.sqrt((q * q).sum(axis=1)) - 1.0) > 1e-6
    _check("sim_state", bad, "the quaternion is not a unit quaternion")
    checks = (
        (L.POS_X, L.POS_Z + 1, MAX_POSITION_M, "position beyond 1e6 m"),
        (L.VEL_X, L.VEL_Z + 1, MAX_SPEED_MPS, "velocity beyond 1e4 m/s"),
        (L.OMEGA_X, L.OMEGA_Z + 1, MAX_RATE_RADPS, "angular rate beyond 1e4 rad/s"),
        (L.STEER_ANGLE, L.STEER_ANGLE + 1, math.pi, "steer angle beyond pi"),
        (L.CMD_STEER, L.CMD_STEER + 1, 1.0, "steer command outside [-1, 1]"),
    )
    for lo, hi, bound, rule in checks:
        _check("sim_state", np.abs(s[:, lo:hi]) > bound, rule)
    pedals = s[:, L.CMD_THROTTLE : L.CMD_HANDBRAKE + 1]
    _check("sim_state", (pedals < 0.0) | (pedals > 1.0), "pedal outside [0, 1]")
    _check("sim_state", s[:, L.GATE_TIME] < -1.0, "gate time")
    whole = ((L.WL_GROUNDED, 1.0, "grounded flag not 0 or 1"), (L.WL_SURFACE, 255.0, "surface id"))
    for col, top, rule in whole:
        v = s[:, col : col + L.MAX_WHEELS]
        _check("sim_state", (v != np.round(v)) | (v < 0.0) | (v > top), rule)


def _check_istate(core: Any, st: dict[str, Any]) -> None:
    ist, ei = st["sim_istate"], st["eistate"]
    if (ist[:, [L.I_SUBSTEPS, L.I_MISUSE, L.I_FLAGS]] < 0).any():
        raise _fail("sim_istate", _bad_rows(ist < 0), "a counter is negative")
    # the terrain rows against the core's stage bank (its rows do not depend on the stages it
    # holds): the physics indexes the heightfield with them
    rows = core.bank.terrains.meta.shape[0]
    t = ist[:, L.I_TERRAIN]
    _check("sim_istate", (t < 0) | (t >= rows), f"terrain row of {rows}")
    for k in np.flatnonzero(st["ever_reset"]):
        want = core.bank.terrain_row(int(k), int(ei[k, K.EI_SLOT]))
        if t[k] != want or ei[k, K.EI_ROW] != want:
            raise _fail("eistate", [int(k)], f"terrain row {t[k]} is not its slot's row {want}")
    if core.sim.extended and core.config.vehicle.drivetrain is not None:
        n_gears = core.config.vehicle.drivetrain.n_gears
        g = ist[:, L.I_GEAR]
        _check("sim_istate", (g < -1) | (g > n_gears), "gear")
        _check("sim_istate", ist[:, L.I_CLUTCH] < 0, "clutch")


def _check_eistate(core: Any, st: dict[str, Any], stages: list[Any]) -> None:
    from rally_env import stages as S

    ei = st["eistate"]
    counters = [K.EI_OFF_SUB, K.EI_STUCK_SUB, K.EI_ROLL_SUB, K.EI_LIMIT_SUB, K.EI_STEPS]
    _check("eistate", ei[:, counters] < 0, "a counter is negative")
    end = ei[:, K.EI_END]
    _check("eistate", (end < 0) | (end >= len(K.END_REASONS)), "end code")
    off = ei[:, K.EI_OFF]
    _check("eistate", (off != 0) & (off != 1), "off-road flag")
    for k in range(core.n):
        stg = stages[int(ei[k, K.EI_SLOT])]
        n_lines = len(S.timing_lines(stg)) if stg is not None else 0
        if not 0 <= ei[k, K.EI_NEXT_LINE] <= n_lines:
            raise _fail("eistate", [k], f"next timing line {ei[k, K.EI_NEXT_LINE]} of {n_lines}")


def _param_bounds(core: Any) -> tuple[np.ndarray, np.ndarray]:
    """Per-column [lo, hi] a car's parameter row may hold: the vehicle's row, widened on the
    columns randomization scales to the packed rows at the ends of its ranges."""
    cached = getattr(core, "_param_bounds", None)
    if cached is not None:
        return cached
    base = core.config.vehicle
    row = _pack(core, base)
    lo, hi = row.copy(), row.copy()
    r = core.config.randomize
    if r is not None:
        for f in itertools.product(r.mass, r.power, r.tire_peak, r.load_sensitivity):
            x = _pack(core, randomized_vehicle(base, *f))
            lo, hi = np.minimum(lo, x), np.maximum(hi, x)
        span = np.maximum(np.abs(lo), np.abs(hi)) * _REL
        lo, hi = lo - span, hi + span
    core._param_bounds = (lo, hi)
    return lo, hi


def _pack(core: Any, vehicle: Any) -> np.ndarray:
    row = np.asarray(vehicle.pack(), np.float64)
    out = np.zeros(core.sim.params.shape[1], np.float64)
    out[: row.shape[0]] = row
    return out


def _check_params(core: Any, st: dict[str, Any]) -> None:
    p = st["sim_params"]
    lo, hi = _param_bounds(core)
    bad = ~((p >= lo) & (p <= hi))  # NaN fails too
    if bad.any():
        rows = _bad_rows(bad)
        col = int(np.flatnonzero(bad[rows[0]])[0])
        raise _fail("sim_params", rows, f"column {col} is not this env's vehicle")


def _check_draws(core: Any, st: dict[str, Any]) -> None:
    from rally_env.info import RANDOMIZED_SCALARS

    draws = st["draws"]
    if not isinstance(draws, list) or len(draws) != core.n:
        raise StateError(f"state['draws'] must be a list of {core.n} entries")
    keys = {*RANDOMIZED_SCALARS, "section_mu_scale"}
    for k, d in enumerate(draws):
        if d is None:
            continue
        if not isinstance(d, dict) or set(d) != keys:
            raise _fail("draws", [k], f"must be None or a dict of {', '.join(sorted(keys))}")
        for name in RANDOMIZED_SCALARS:
            v = d[name]
            ok = isinstance(v, (float, int, np.floating)) and not isinstance(v, bool)
            if not ok or not math.isfinite(float(v)):
                raise _fail("draws", [k], f"{name} must be a finite number")
        mu = d["section_mu_scale"]
        ok = isinstance(mu, np.ndarray) and mu.ndim == 1 and mu.size <= core.section_mu.shape[1]
        if not ok or not np.isfinite(mu).all():
            raise _fail("draws", [k], "section_mu_scale must be a finite 1-d array")


def check_values(core: Any, st: dict[str, Any], stages: list[Any]) -> None:
    """Check every value of a structurally valid state (see the module docstring).

    Raises:
        StateError: naming the entry, the car and the rule.
    """
    finite_time = np.zeros(st["estate"].shape, np.bool_)
    finite_time[:, K.E_FINISH_TIME] = True
    for key in ("sim_state", "sim_params", "section_mu", "actions"):
        _finite(st, key)
    _finite(st, "estate", nan_ok=finite_time)
    _finite(st, "etimes", nan_ok=np.ones(st["etimes"].shape, np.bool_))
    obs = st["obs"]
    _check("obs", ~np.isfinite(obs), "holds a non-finite value")
    low, high = core.layout.low, core.layout.high
    _check("obs", (obs < low) | (obs > high), "outside the observation space")
    _check("etimes", np.nan_to_num(st["etimes"], nan=0.0) < 0.0, "a negative time")
    mu = st["section_mu"]
    _check("section_mu", (mu < 0.0) | (mu > 10.0), "grip scale outside [0, 10]")
    a = st["actions"]
    if (np.abs(a[:, 0]) > 1.0).any() or ((a[:, 1:] < 0.0) | (a[:, 1:] > 1.0)).any():
        raise _fail("actions", _bad_rows(np.abs(a) > 1.0), "outside the action box")
    _check_chassis(st["sim_state"])
    _check_istate(core, st)
    _check_eistate(core, st, stages)
    _check_params(core, st)
    _check_draws(core, st)
