"""Engine, gearbox, clutch and differential parameters, and the numba helpers the kernel calls.

:class:`Drivetrain` is a frozen, validated dataclass (the model: docs/vehicles.md,
"Drivetrain") that :meth:`Drivetrain.pack_into` writes into a car's packed row. The helpers
read that row (``p[k]``) and the int state (``ist[k]``: ``I_GEAR``, ``I_CLUTCH`` in
:mod:`physics.layout`) with ``+ - * /``, ``abs``, ``min`` and ``max`` only, allocating nothing.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, fields, replace
from typing import Any

import numpy as np

from physics import layout as L
from physics.errors import ParameterError, as_finite, check_ext_row
from physics.jit import njit, njit_inner

#: Rev limit (rpm) column (defined in physics/layout.py).
PX_REV_LIMIT = L.PX_REV_LIMIT

#: rad/s -> rpm, i.e. 60 / (2 pi), as a literal so no transcendental runs in the physics.
RAD_S_TO_RPM = 9.549296585513721

#: Differential names and their packed codes.
DIFF_TYPES = {"open": L.DIFF_OPEN, "limited": L.DIFF_LIMITED, "locked": L.DIFF_LOCKED}

MAX_TORQUE_POINTS = 8
MAX_GEARS = 6
#: Upper bounds that keep every accepted drivetrain finite (engine rpm = wheel speed x gear x
#: final drive stays far below the float range): gear, reverse and final-drive ratios, rpm
#: and torque-curve torque.
MAX_RATIO = 50.0
MAX_RPM = 30_000.0
MAX_TORQUE_NM = 100_000.0

_OWNER = "Drivetrain"


def _col(default: object, column: int) -> Any:
    """A field packed as is into ``column`` of a packed row (Drivetrain's, VehicleParams' and
    WheelParams'): a bool as 1.0 / 0.0, a differential as its code."""
    return field(default=default, metadata={"column": column})


def _real(name: str, value: object, hi: float = math.inf) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float, np.floating, np.integer)):
        raise ParameterError(_OWNER, name, value, "must be a real number")
    v = as_finite(value)
    if v is None:
        raise ParameterError(_OWNER, name, value, "must be finite")
    if v > hi:
        raise ParameterError(_OWNER, name, value, f"must be <= {hi:g}")
    return v


@dataclass(frozen=True, slots=True)
class Drivetrain:
    """An engine with a torque curve, a gearbox with a clutch, and differentials.

    Defaults: the seed's small car; the model of each field: docs/vehicles.md ("Drivetrain").

    Attributes:
        torque_curve: 2..8 ``(rpm, N m)`` points, rpm > 0 strictly increasing (the first is
            idle), torque >= 0.
        rev_limit_rpm: fuel cut above it; >= the last curve rpm and >= ``shift_up_rpm``.
        gears: 1..6 forward gear ratios, > 0, non-increasing (first gear first).
        reverse_ratio: reverse gear ratio (>= 0; 0 = the car has no reverse).
        final_drive: final drive ratio (> 0); multiplies every gear.
        auto_shift: the gearbox shifts itself (forward gears only).
        shift_up_rpm: automatic upshift above this engine speed, in (idle, rev_limit_rpm].
        shift_down_rpm: automatic downshift below this engine speed, in (idle, shift_up_rpm).
        clutch_s: drive cut per shift (s), a whole number of 1/480 s substeps (never rounded).
        diff_front, diff_rear, diff_centre: ``"open"``, ``"limited"`` or ``"locked"``.
        diff_coupling_n_per_mps: limited-slip / locked coupling (N per m/s), >= 0.
        front_split: the front axle's share of the drive when both are driven, in [0, 1].
        engine_brake: engine braking at zero throttle, a fraction of curve torque, in [0, 1].
    """

    torque_curve: tuple[tuple[float, float], ...] = ((1000.0, 120.0), (3000.0, 200.0))
    rev_limit_rpm: float = _col(6000.0, PX_REV_LIMIT)
    gears: tuple[float, ...] = (3.5, 2.2, 1.5, 1.1, 0.9)
    reverse_ratio: float = _col(3.2, L.PX_REVERSE)
    final_drive: float = _col(3.7, L.PX_FINAL)
    auto_shift: bool = _col(True, L.PX_AUTO_SHIFT)
    shift_up_rpm: float = _col(5500.0, L.PX_SHIFT_UP)
    shift_down_rpm: float = _col(2000.0, L.PX_SHIFT_DOWN)
    clutch_s: float = 0.2
    diff_front: str = _col("open", L.PX_DIFF_FRONT)
    diff_rear: str = _col("open", L.PX_DIFF_REAR)
    diff_centre: str = _col("open", L.PX_DIFF_CENTRE)
    diff_coupling_n_per_mps: float = _col(0.0, L.PX_DIFF_COUPLING)
    front_split: float = _col(0.5, L.PX_FRONT_SPLIT)
    engine_brake: float = _col(0.0, L.PX_ENGINE_BRAKE)

    def __post_init__(self) -> None:
        o = _OWNER
        curve = self.torque_curve
        if not isinstance(curve, (tuple, list)):
            raise ParameterError(o, "torque_curve", curve, "must be a sequence of (rpm, N m)")
        if not 2 <= len(curve) <= MAX_TORQUE_POINTS:
            raise ParameterError(
                o, "torque_curve", curve, f"must have 2 to {MAX_TORQUE_POINTS} points"
            )
        pts = []
        for i, pt in enumerate(curve):
            if not isinstance(pt, (tuple, list)) or len(pt) != 2:
                raise ParameterError(o, "torque_curve", curve, f"point {i} must be (rpm, N m)")
            rpm = _real("torque_curve", pt[0], MAX_RPM)
            tq = _real("torque_curve", pt[1], MAX_TORQUE_NM)
            if rpm <= 0.0:
                raise ParameterError(o, "torque_curve", curve, f"point {i}: rpm must be > 0")
            if tq < 0.0:
                raise ParameterError(o, "torque_curve", curve, f"point {i}: torque must be >= 0")
            if pts and rpm <= pts[-1][0]:
                raise ParameterError(
                    o, "torque_curve", curve, f"point {i}: rpm must be strictly increasing"
                )
            pts.append((rpm, tq))
        object.__setattr__(self, "torque_curve", tuple(pts))
        idle, last = pts[0][0], pts[-1][0]

        gears = self.gears
        if not isinstance(gears, (tuple, list)) or not 1 <= len(gears) <= MAX_GEARS:
            raise ParameterError(o, "gears", gears, f"must be 1 to {MAX_GEARS} forward ratios")
        gs = []
        for i, g in enumerate(gears):
            v = _real("gears", g, MAX_RATIO)
            if v <= 0.0:
                raise ParameterError(o, "gears", gears, f"gear {i + 1}: ratio must be > 0")
            if gs and v > gs[-1]:
                raise ParameterError(o, "gears", gears, "ratios must be non-increasing")
            gs.append(v)
        object.__setattr__(self, "gears", tuple(gs))

        if _real("reverse_ratio", self.reverse_ratio, MAX_RATIO) < 0.0:
            raise ParameterError(o, "reverse_ratio", self.reverse_ratio, "must be >= 0")
        if _real("final_drive", self.final_drive, MAX_RATIO) <= 0.0:
            raise ParameterError(o, "final_drive", self.final_drive, "must be > 0")
        if not isinstance(self.auto_shift, (bool, np.bool_)):
            raise ParameterError(o, "auto_shift", self.auto_shift, "must be a bool")

        rev = _real("rev_limit_rpm", self.rev_limit_rpm, MAX_RPM)
        if rev < last:
            raise ParameterError(
                o, "rev_limit_rpm", rev, f"must be >= the last torque-curve rpm ({last})"
            )
        for name in ("shift_up_rpm", "shift_down_rpm"):
            v = _real(name, getattr(self, name))
            if not idle < v <= rev:
                raise ParameterError(o, name, v, f"must be in (idle {idle}, rev_limit_rpm {rev}]")
        up, down = float(self.shift_up_rpm), float(self.shift_down_rpm)
        if down >= up:
            raise ParameterError(o, "shift_down_rpm", down, f"must be < shift_up_rpm ({up})")

        c = _real("clutch_s", self.clutch_s)
        if not 0.0 <= c <= 10.0:
            raise ParameterError(o, "clutch_s", c, "must be in [0, 10] s")
        n = c * L.SUBSTEP_HZ
        if abs(n - round(n)) > 1e-9:
            raise ParameterError(
                o,
                "clutch_s",
                c,
                f"must be a whole number of 1/{L.SUBSTEP_HZ} s substeps (it is {n!r}); "
                "it is not rounded",
            )

        for name in ("diff_front", "diff_rear", "diff_centre"):
            v = getattr(self, name)
            if not isinstance(v, str) or v not in DIFF_TYPES:
                raise ParameterError(o, name, v, f"must be one of {sorted(DIFF_TYPES)}")
        if _real("diff_coupling_n_per_mps", self.diff_coupling_n_per_mps, 1e6) < 0.0:
            raise ParameterError(
                o, "diff_coupling_n_per_mps", self.diff_coupling_n_per_mps, "must be >= 0"
            )
        if not 0.0 <= _real("front_split", self.front_split) <= 1.0:
            raise ParameterError(o, "front_split", self.front_split, "must be in [0, 1]")
        if not 0.0 <= _real("engine_brake", self.engine_brake) <= 1.0:
            raise ParameterError(o, "engine_brake", self.engine_brake, "must be in [0, 1]")

    @property
    def n_gears(self) -> int:
        """Number of forward gears."""
        return len(self.gears)

    @property
    def clutch_substeps(self) -> int:
        """Drive cut per shift in whole 1/480 s substeps."""
        return int(round(self.clutch_s * L.SUBSTEP_HZ))

    def pack_into(self, row: np.ndarray) -> None:
        """Write every field into the extension columns of ``row`` (e.g. ``params[k]``), in
        place, and set ``row[PX_DRIVETRAIN] = 1.0``; unused torque-curve and gear slots are 0.

        Raises:
            ParameterError: ``row`` is not a 1-D float64 array of at least N_PARAMS_EXT entries
                (:func:`~physics.errors.check_ext_row`).
        """
        check_ext_row(_OWNER, row)
        row[L.PX_DRIVETRAIN] = 1.0
        for f in fields(self):
            if "column" in f.metadata:
                v = getattr(self, f.name)
                row[f.metadata["column"]] = DIFF_TYPES[v] if isinstance(v, str) else float(v)
        row[L.PX_N_TORQUE] = float(len(self.torque_curve))
        row[L.PX_TQ_RPM : L.PX_TQ_RPM + MAX_TORQUE_POINTS] = 0.0
        row[L.PX_TQ_NM : L.PX_TQ_NM + MAX_TORQUE_POINTS] = 0.0
        for i, (rpm, tq) in enumerate(self.torque_curve):
            row[L.PX_TQ_RPM + i] = rpm
            row[L.PX_TQ_NM + i] = tq
        row[L.PX_N_GEARS] = float(len(self.gears))
        row[L.PX_GEARS : L.PX_GEARS + MAX_GEARS] = 0.0
        row[L.PX_GEARS : L.PX_GEARS + len(self.gears)] = self.gears
        row[L.PX_CLUTCH_SUBSTEPS] = float(self.clutch_substeps)

    def replace(self, **changes: object) -> Drivetrain:
        """A validated copy with some fields changed."""
        return replace(self, **changes)


SMALL_CAR = Drivetrain()

RALLY_CAR_DRIVETRAIN = Drivetrain(
    torque_curve=((1000.0, 180.0), (3000.0, 290.0), (5000.0, 320.0), (6500.0, 280.0)),
    rev_limit_rpm=7200.0,
    gears=(3.2, 2.1, 1.6, 1.3, 1.05, 0.85),
    reverse_ratio=3.0,
    final_drive=4.1,
    shift_up_rpm=6800.0,
    shift_down_rpm=3200.0,
    diff_front="open",
    diff_rear="limited",
    diff_centre="limited",
    diff_coupling_n_per_mps=400.0,
    front_split=0.45,
)


# ---------------------------------------------------------------------- numba helpers
@njit_inner(_nrt=False)
def _curve_torque_nm(p: np.ndarray, k: int, r: float) -> float:
    """Curve torque (N m) at ``r`` rpm (``r`` >= idle), held past the last point; no rev cut."""
    n = int(p[k, L.PX_N_TORQUE])
    for i in range(1, n):
        r1 = p[k, L.PX_TQ_RPM + i]
        if r <= r1:
            r0 = p[k, L.PX_TQ_RPM + i - 1]
            t0 = p[k, L.PX_TQ_NM + i - 1]
            t1 = p[k, L.PX_TQ_NM + i]
            return t0 + (t1 - t0) * ((r - r0) / (r1 - r0))
    return p[k, L.PX_TQ_NM + n - 1]


@njit(cache=True, _nrt=False)
def engine_torque_nm(p: np.ndarray, k: int, rpm: float) -> float:
    """Full-throttle engine torque (N m) of car ``k`` at ``rpm``, clamped below at idle (the
    first curve point): linear on the torque curve, held at the last point's torque past it,
    0.0 when the (clamped) speed is above the rev limit."""
    r = max(rpm, p[k, L.PX_TQ_RPM])
    if r > p[k, PX_REV_LIMIT]:
        return 0.0
    return _curve_torque_nm(p, k, r)


@njit(cache=True, _nrt=False)
def gear_ratio(p: np.ndarray, k: int, gear: int) -> float:
    """Overall (gear x final drive) ratio of ``gear``, signed: ``gears[gear-1] * final`` for
    1 <= gear <= n_gears, ``-reverse * final`` for gear -1 (0.0 if the car has no reverse), 0.0
    for neutral (0) and for any gear out of range."""
    if gear >= 1:
        if gear > int(p[k, L.PX_N_GEARS]):
            return 0.0
        return p[k, L.PX_GEARS + gear - 1] * p[k, L.PX_FINAL]
    if gear == -1:
        return -(p[k, L.PX_REVERSE] * p[k, L.PX_FINAL])
    return 0.0


@njit(cache=True, _nrt=False)
def engine_rpm_from_wheels(p: np.ndarray, k: int, wheel_omega_rad_s: float, gear: int) -> float:
    """Engine speed (rpm) in ``gear`` from the driven wheels' mean angular speed (rad/s, sign
    ignored): ``|omega| * |overall ratio| * 60 / (2 pi)``, floored at idle (so idle in
    neutral)."""
    rpm = abs(wheel_omega_rad_s) * abs(gear_ratio(p, k, gear)) * RAD_S_TO_RPM
    return max(rpm, p[k, L.PX_TQ_RPM])


@njit(cache=True, _nrt=False)
def update_gearbox(p: np.ndarray, k: int, ist: np.ndarray, rpm: float) -> None:
    """One substep of the clutch timer and the automatic gearbox (call once per substep).

    While the clutch is open (``ist[k, I_CLUTCH] > 0``) the timer counts down by one and nothing
    shifts. Otherwise, with auto shift on and a forward gear engaged: above the shift-up speed
    (and below top gear) it shifts up, below the shift-down speed (and above first) it shifts
    down; either shift opens the clutch for ``PX_CLUTCH_SUBSTEPS`` substeps. ``I_GEAR`` and
    ``I_CLUTCH`` of ``ist[k]`` are updated in place.
    """
    if ist[k, L.I_CLUTCH] > 0:
        ist[k, L.I_CLUTCH] -= 1
        return
    if p[k, L.PX_AUTO_SHIFT] == 0.0:
        return
    gear = ist[k, L.I_GEAR]
    if gear < 1:
        return
    if rpm > p[k, L.PX_SHIFT_UP] and gear < int(p[k, L.PX_N_GEARS]):
        ist[k, L.I_GEAR] = gear + 1
        ist[k, L.I_CLUTCH] = int(p[k, L.PX_CLUTCH_SUBSTEPS])
    elif rpm < p[k, L.PX_SHIFT_DOWN] and gear > 1:
        ist[k, L.I_GEAR] = gear - 1
        ist[k, L.I_CLUTCH] = int(p[k, L.PX_CLUTCH_SUBSTEPS])


@njit(cache=True, _nrt=False)
def select_gear(p: np.ndarray, k: int, ist: np.ndarray, gear: int) -> bool:
    """Manually select ``gear`` (-1 reverse, 0 neutral, 1..n_gears).

    Returns False and changes nothing if the gear is out of range or is reverse on a car
    without one, else True. A change of gear opens the clutch for ``PX_CLUTCH_SUBSTEPS``
    substeps; selecting the engaged gear changes nothing.
    """
    if gear < -1 or gear > int(p[k, L.PX_N_GEARS]):
        return False
    if gear == -1 and p[k, L.PX_REVERSE] == 0.0:
        return False
    if gear != ist[k, L.I_GEAR]:
        ist[k, L.I_GEAR] = gear
        ist[k, L.I_CLUTCH] = int(p[k, L.PX_CLUTCH_SUBSTEPS])
    return True


@njit(cache=True, _nrt=False)
def drive_torque_nm(p: np.ndarray, k: int, ist: np.ndarray, rpm: float, throttle: float) -> float:
    """Total drive torque at the driven wheels (N m), before the differentials share it.

    With ``T = engine_torque_nm(rpm)``, ``C`` the curve torque at ``rpm`` without the rev cut
    (the fuel cut removes drive, not engine drag), ``R = gear_ratio(gear)`` (signed),
    ``t = clamp(throttle, 0, 1)`` and ``b = engine_brake``::

        torque = R * (t * T - b * (1 - t) * C)     if rpm > idle
        torque = R * t * T                         at idle (no engine braking at a standstill)

    and 0.0 while the clutch is open or in neutral (negative in reverse under throttle).
    """
    if ist[k, L.I_CLUTCH] > 0:
        return 0.0
    ratio = gear_ratio(p, k, ist[k, L.I_GEAR])
    if ratio == 0.0:
        return 0.0
    t = min(max(throttle, 0.0), 1.0)
    idle = p[k, L.PX_TQ_RPM]
    torque = t * engine_torque_nm(p, k, rpm)
    b = p[k, L.PX_ENGINE_BRAKE]
    if b > 0.0 and rpm > idle:
        torque = torque - b * (1.0 - t) * _curve_torque_nm(p, k, rpm)
    return ratio * torque
