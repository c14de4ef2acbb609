"""Vehicle parameters: frozen, validated dataclasses packed once into float64 rows.

The defaults are the seed rally game's Mars rover (the choices the seed leaves open: README);
units are in the field names. Construction validates every field and raises
:class:`~physics.errors.ParameterError` naming the field, the value and the bound.
"""

from __future__ import annotations

import math
from dataclasses import MISSING, dataclass, field, fields, replace
from typing import Any, ClassVar

import numpy as np

from physics import layout as L
from physics.curves import TireCurves, tire_set
from physics.drivetrain import Drivetrain, _col
from physics.errors import ParameterError, as_finite


def _check(
    owner: str, name: str, value: float, lo: float, hi: float, lo_open: bool = False
) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float, np.floating, np.integer)):
        raise ParameterError(owner, name, value, "must be a real number")
    v = as_finite(value)
    if v is None:
        raise ParameterError(owner, name, value, "must be finite")
    if (v <= lo if lo_open else v < lo) or v > hi:
        left = "(" if lo_open else "["
        raise ParameterError(owner, name, value, f"must be in {left}{lo}, {hi}]")


def _num(default: Any, column: int | None, lo: float, hi: float, lo_open: bool = False) -> Any:
    """A real field: construction checks it is in [lo, hi] (``(lo, hi]`` if ``lo_open``) and
    :meth:`VehicleParams.pack` writes it into ``column`` of the packed row (if not None)."""
    meta: dict[str, Any] = {"bounds": (lo, hi, lo_open)}
    if column is not None:
        meta["column"] = column
    return field(default=default, metadata=meta)


def _check_fields(obj: Any) -> None:
    """Check every field with bounds (:func:`_num`) and that every bool field is a bool."""
    o = type(obj).__name__
    for f in fields(obj):
        v = getattr(obj, f.name)
        if "bounds" in f.metadata:
            _check(o, f.name, v, *f.metadata["bounds"])
        elif isinstance(f.default, bool) and not isinstance(v, (bool, np.bool_)):
            raise ParameterError(o, f.name, v, "must be a bool")


#: Longest lever arm about an axis over the radius of gyration about it (see
#: ``VehicleParams._check_inertias``).
MAX_LEVER_RATIO = 8.0
MIN_LEVER_RATIO = 0.5
#: Smallest per-wheel spring frequency (Hz) and damping ratio when they are set (not 0).
MIN_SPRING_HZ = 0.1
MIN_DAMPING_RATIO = 0.01


class _SeedFields:
    """A parameter class whose fields from ``_EXT`` on (name -> default) go beyond the seed
    model (:func:`_ext_defaults`)."""

    __slots__ = ()
    _EXT: ClassVar[dict[str, object]] = {}

    def __repr__(self) -> str:
        """dataclass-style, leaving out extension fields at their defaults: replays and saved
        env states identify a vehicle by this text, so a basic vehicle's stays what it was."""
        values = ((f.name, getattr(self, f.name)) for f in fields(self))  # type: ignore[arg-type]
        parts = [f"{n}={v!r}" for n, v in values if not (n in self._EXT and v == self._EXT[n])]
        return f"{type(self).__name__}({', '.join(parts)})"

    @property
    def extended(self) -> bool:
        """True when a field beyond the seed model differs from its default."""
        return any(getattr(self, n) != v for n, v in self._EXT.items())


@dataclass(frozen=True, slots=True, repr=False)
class WheelParams(_SeedFields):
    """One wheel: a ray from its anchor along the chassis -z axis, a spring-damper and a tire.

    Attributes:
        x_m, y_m, z_m: suspension anchor in the body frame (x forward, y left, z up; m).
        rest_length_m: suspension length with no load (m).
        travel_m: compression at which the spring stops getting stiffer (m), <= rest + radius.
        radius_m: wheel radius (m); the ray reaches rest_length_m + radius_m.
        steerable: turns with the steering.
        driven: takes a share of the drive force.
        brake_share: share of the vehicle's service-brake force (the shares sum to 1).
        handbrake: the handbrake acts on this wheel (locks it, no ABS).
    """

    x_m: float = _num(MISSING, L.PW_X, -10.0, 10.0)
    y_m: float = _num(MISSING, L.PW_Y, -10.0, 10.0)
    z_m: float = _num(-0.2, L.PW_Z, -5.0, 5.0)
    rest_length_m: float = _num(0.3, L.PW_REST, 0.0, 3.0, lo_open=True)
    travel_m: float = _col(0.25, L.PW_TRAVEL)  # checked after radius_m: it bounds it
    radius_m: float = _num(0.4, L.PW_RADIUS, 0.05, 3.0)
    steerable: bool = _col(False, L.PW_STEER)
    driven: bool = _col(True, L.PW_DRIVEN)
    brake_share: float = _num(0.25, L.PW_BRAKE_SHARE, 0.0, 1.0)
    handbrake: bool = _col(False, L.PW_HANDBRAKE)
    # ---- beyond the seed model, every field from here on (_ext_defaults): extended wheels only
    spring_hz: float = _num(0.0, None, 0.0, 50.0)
    damping_ratio: float = _num(0.0, None, 0.0, 10.0)
    inertia_kgm2: float = _num(2.5, None, 0.01, 1000.0)
    grip: float = _num(1.0, None, 0.0, 3.0)
    direction: tuple[float, float, float] = (0.0, 0.0, -1.0)

    def __post_init__(self) -> None:
        o = "WheelParams"
        _check_fields(self)
        _check(o, "travel_m", self.travel_m, 0.0, self.rest_length_m + self.radius_m, lo_open=True)
        # off (0) or a real spring: a vanishing frequency or ratio divides by ~0 later
        for name, lo in (("spring_hz", MIN_SPRING_HZ), ("damping_ratio", MIN_DAMPING_RATIO)):
            v = getattr(self, name)
            if 0.0 < v < lo:
                raise ParameterError(o, name, v, f"must be 0 (off) or at least {lo}")
        if (self.spring_hz > 0.0) != (self.damping_ratio > 0.0):
            raise ParameterError(
                o,
                "damping_ratio" if self.spring_hz > 0.0 else "spring_hz",
                self.damping_ratio if self.spring_hz > 0.0 else self.spring_hz,
                "spring_hz and damping_ratio are set together (both > 0) or not at all (both 0)",
            )
        d = self.direction
        if (
            not isinstance(d, tuple)
            or len(d) != 3
            or not all(isinstance(c, (int, float)) and as_finite(c) is not None for c in d)
        ):
            raise ParameterError(o, "direction", d, "must be a tuple of 3 finite numbers")
        norm = math.sqrt(sum(c * c for c in d))
        if abs(norm - 1.0) > 0.1:
            raise ParameterError(o, "direction", d, "must be within 10 % of unit length")
        if math.sqrt(d[0] ** 2 + d[1] ** 2) > 1e-9 or d[2] >= 0.0:
            raise ParameterError(
                o,
                "direction",
                d,
                "only suspensions along the chassis -z axis are supported (0, 0, -1)",
            )


def _ext_defaults(cls: type, first: str) -> dict[str, object]:
    """The fields beyond the seed model (``first`` and every field after it) and their
    defaults: a vehicle with all of them at the default (and basic wheels) is "basic" and
    packs into the narrow v0 row."""
    fs = fields(cls)
    at = [f.name for f in fs].index(first)
    return {f.name: f.default for f in fs[at:]}


WheelParams._EXT = _ext_defaults(WheelParams, "spring_hz")


def _abs_slip(curve: object, fraction: float) -> float:
    """Slip ratio where the curve first reaches ``fraction`` of its peak (the ABS target)."""
    xs, ys = curve.x, curve.y  # type: ignore[attr-defined]
    for i in range(1, len(xs)):
        if ys[i] >= fraction:
            t = (fraction - ys[i - 1]) / (ys[i] - ys[i - 1])
            return xs[i - 1] + t * (xs[i] - xs[i - 1])
    return xs[-1]


def rover_wheels() -> tuple[WheelParams, ...]:
    """The seed rover's four wheels: FL, FR, RL, RR at +-1.5 m, +-1.25 m, all driven."""
    return (
        WheelParams(1.5, 1.25, steerable=True),
        WheelParams(1.5, -1.25, steerable=True),
        WheelParams(-1.5, 1.25, handbrake=True),
        WheelParams(-1.5, -1.25, handbrake=True),
    )


TIRE_MODELS = {"direct": L.TIRE_DIRECT, "wheel-speed": L.TIRE_WHEEL_SPEED, "arcade": L.TIRE_ARCADE}


@dataclass(frozen=True, slots=True, repr=False)
class VehicleParams(_SeedFields):
    """Everything that defines a vehicle. Defaults: the seed game's Mars rover.

    Units are in the names: ``_kg``, ``_m``, ``_n`` (newtons), ``_w`` (watts), ``_rad``,
    ``_mps`` (m/s), ``_mps2``. ``contact_k``/``contact_c`` are per kg of vehicle mass (the seed's
    "unit-mass terms"): a wheel's spring force is ``mass_kg * (contact_k * pen - contact_c * v)``.
    """

    mass_kg: float = _num(3000.0, L.P_MASS, 1.0, 1e5)
    inertia_roll_kgm2: float = _num(3600.0, L.P_IXX, 0.1, 1e7)
    inertia_pitch_kgm2: float = _num(7200.0, L.P_IYY, 0.1, 1e7)
    inertia_yaw_kgm2: float = _num(8400.0, L.P_IZZ, 0.1, 1e7)
    gravity_mps2: float = _num(3.72, L.P_GRAVITY, 0.0, 30.0, lo_open=True)
    # tire (seed parameter table)
    mu_base: float = _num(0.70, L.P_MU_BASE, 0.0, 3.0, lo_open=True)
    peak_slip_angle_rad: float = _num(0.18, L.P_PEAK_SLIP, 0.01, 1.0)
    post_peak_clamp: float = _num(1.5, L.P_POST_PEAK_CLAMP, 1.0, 10.0)
    peak_slip_ratio: float = _num(0.15, L.P_PEAK_SLIP_RATIO, 0.01, 1.0)
    load_sensitivity: float = _num(0.05, L.P_LOAD_SENS, 0.0, 1.0)
    load_ref_n: float = _num(2790.0, L.P_LOAD_REF, 1.0, 1e6)
    abs_fraction: float = _num(0.90, L.P_ABS, 0.0, 1.0)
    drive_cap: float = _num(0.90, L.P_DRIVE_CAP, 0.0, 1.0)
    slip_eps_mps: float = _num(1.0, L.P_SLIP_EPS, 0.01, 10.0)
    # suspension / contact (per kg of vehicle mass)
    contact_k: float = _num(600.0, L.P_CONTACT_K, 1.0, 1e5)
    contact_c: float = _num(270.0, L.P_CONTACT_C, 0.0, 1e4)
    soft_contact: bool = _col(True, L.P_SOFT_ENABLED)
    soft_contact_k: float = _num(30.0, L.P_SOFT_K, 0.0, 1e3)
    soft_contact_c: float = _num(15.0, L.P_SOFT_C, 0.0, 1e3)
    soft_gap_min_m: float = _num(0.18, L.P_SOFT_GAP_MIN, 0.0, 2.0)
    soft_gap_max_m: float = _num(0.30, L.P_SOFT_GAP_MAX, 0.0, 2.0)
    soft_lift_gate_mps: float = _num(2.0, L.P_SOFT_LIFT_GATE, 0.0, 100.0)
    soft_clamp_fraction: float = _num(0.25, L.P_SOFT_CLAMP, 0.0, 1.0)
    # drive, brakes, steering
    drive_force_n: float = _num(8000.0, L.P_DRIVE_FORCE, 0.0, 1e6)
    power_w: float = _num(150_000.0, L.P_POWER, 0.0, 1e8)
    top_speed_mps: float = _num(56.0, L.P_VMAX, 1.0, 200.0)
    top_speed_band_mps: float = _num(3.0, L.P_VMAX_BAND, 0.1, 50.0)
    rolling_resistance: float = _num(0.015, L.P_CRR, 0.0, 0.5)
    brake_force_n: float = _num(24_000.0, L.P_BRAKE_FORCE, 0.0, 1e6)
    handbrake_force_n: float = _num(12_000.0, L.P_HANDBRAKE_FORCE, 0.0, 1e6)
    steer_lock_rad: float = _num(0.55, L.P_STEER_LOCK, 0.0, 1.2)
    steer_rate_radps: float = _num(2.5, L.P_STEER_RATE, 0.01, 100.0)
    # chassis box for terrain collision, about the CG (m); contact per corner per kg
    body_front_m: float = _num(2.2, L.P_BODY_XF, 0.0, 20.0, lo_open=True)
    body_rear_m: float = _num(2.2, L.P_BODY_XR, 0.0, 20.0, lo_open=True)
    body_half_width_m: float = _num(1.3, L.P_BODY_HW, 0.0, 10.0, lo_open=True)
    body_bottom_m: float = _num(-0.4, L.P_BODY_ZB, -10.0, 10.0)
    body_top_m: float = _num(0.9, L.P_BODY_ZT, -10.0, 10.0)
    body_contact_k: float = _num(100.0, L.P_BODY_K, 0.0, 1e5)
    body_contact_c: float = _num(20.0, L.P_BODY_C, 0.0, 1e4)
    body_friction: float = _num(0.5, L.P_BODY_MU, 0.0, 3.0)
    # grip hooks (tire wear, damage): multiply into the effective mu
    grip_wear: float = _num(1.0, L.P_GRIP_WEAR, 0.0, 1.0)
    grip_damage: float = _num(1.0, L.P_GRIP_DAMAGE, 0.0, 1.0)
    # integration: True = explicit Euler damping (only to show why the default is implicit)
    explicit_damping: bool = _col(False, L.P_EXPLICIT_DAMPING)
    wheels: tuple[WheelParams, ...] = field(default_factory=rover_wheels)
    # ---- beyond the seed model, every field from here on (_ext_defaults).
    # Any of these away from its default makes the vehicle "extended" (see ``extended``).
    #: "direct" (the seed game's shipped model), "wheel-speed" or "arcade" (docs/vehicles.md)
    tire_model: str = "direct"
    #: authored curves for "wheel-speed" (None: the "rally" set)
    tires: object = None
    #: engine + gearbox + differentials (None: the flat electric drive above)
    drivetrain: object = None
    #: slip-ratio denominator floor
    slip_ratio_eps_mps: float = _num(0.5, L.PX_SLIP_RATIO_EPS, 0.01, 10.0)
    #: below this speed, with no throttle, the low-speed hold stops creep
    low_speed_mps: float = _num(0.5, L.PX_LOW_SPEED, 0.0, 5.0)
    #: tire load = (1 - b) x dynamic + b x static
    load_blend: float = _num(0.0, L.PX_LOAD_BLEND, 0.0, 1.0)
    #: scales on the pitch and roll torques of the tire forces
    pitch_force_scale: float = _num(1.0, L.PX_PITCH_SCALE, 0.0, 1.0)
    roll_force_scale: float = _num(1.0, L.PX_ROLL_SCALE, 0.0, 1.0)
    #: anti-roll bar stiffness per kg (N/m/kg)
    anti_roll_front: float = _num(0.0, L.PX_ARB_FRONT, 0.0, 1e4)
    anti_roll_rear: float = _num(0.0, L.PX_ARB_REAR, 0.0, 1e4)
    #: yaw-rate assist gain (1/s) while drifting, 0 = off; the rear slip angle that engages it
    drift_assist: float = _num(0.0, L.PX_DRIFT_ASSIST, 0.0, 100.0)
    drift_slip_rad: float = _num(0.25, L.PX_DRIFT_SLIP, 0.0, 1.5)
    #: tire grip lost per MJ of sliding energy per wheel
    wear_rate_per_mj: float = _num(0.0, L.PX_WEAR_RATE, 0.0, 100.0)
    wear_floor: float = _num(0.6, L.PX_WEAR_FLOOR, 0.0, 1.0)
    #: touchdown speed above which landings damage the car, and the grip lost per m/s above it
    damage_speed_mps: float = _num(8.0, L.PX_DAMAGE_SPEED, 0.0, 100.0)
    damage_rate: float = _num(0.0, L.PX_DAMAGE_RATE, 0.0, 10.0)
    damage_floor: float = _num(0.5, L.PX_DAMAGE_FLOOR, 0.0, 1.0)
    #: two-wheeler lean gain ((rad/s)^2); 0 = off
    lean_stabilization: float = _num(0.0, L.PX_LEAN_GAIN, 0.0, 1e4)
    #: per-side drive: the steer command is the throttle difference
    skid_steer: bool = _col(False, L.PX_SKID_STEER)
    #: wheel-speed model: cap each wheel's drive torque at drive_cap x mu N r (False: wheelspin)
    traction_control: bool = _col(True, L.PX_TRACTION_CONTROL)
    #: wheel-speed model: False turns the friction clamps off (validation only)
    friction_clamps: bool = True
    #: arcade: yaw rate = gain x steer angle x speed / wheelbase
    arcade_yaw_gain: float = _num(1.0, L.PX_ARCADE_YAW, 0.0, 10.0)
    #: arcade: share of lateral velocity scrubbed per second
    arcade_grip_per_s: float = _num(6.0, L.PX_ARCADE_GRIP, 0.0, 100.0)

    @property
    def extended(self) -> bool:
        """True when the vehicle uses anything beyond the seed model (wide rows)."""
        return _SeedFields.extended.fget(self) or any(w.extended for w in self.wheels)

    def __post_init__(self) -> None:
        o = "VehicleParams"
        _check_fields(self)
        if self.tire_model not in TIRE_MODELS:
            raise ParameterError(
                o, "tire_model", self.tire_model, f"must be one of {sorted(TIRE_MODELS)}"
            )
        if self.tires is not None and not isinstance(self.tires, TireCurves):
            raise ParameterError(o, "tires", self.tires, "must be a TireCurves or None")
        if self.tires is not None and self.tire_model != "wheel-speed":
            raise ParameterError(
                o, "tires", self.tires.name, "authored curves need tire_model='wheel-speed'"
            )
        if self.drivetrain is not None and not isinstance(self.drivetrain, Drivetrain):
            raise ParameterError(o, "drivetrain", self.drivetrain, "must be a Drivetrain or None")
        if self.drivetrain is not None and self.skid_steer:
            raise ParameterError(
                o, "skid_steer", True, "a skid-steer vehicle drives each side itself: no drivetrain"
            )
        if self.soft_gap_max_m < self.soft_gap_min_m:
            raise ParameterError(
                o,
                "soft_gap_max_m",
                self.soft_gap_max_m,
                f"must be >= soft_gap_min_m ({self.soft_gap_min_m})",
            )
        if self.body_top_m <= self.body_bottom_m:
            raise ParameterError(
                o, "body_top_m", self.body_top_m, f"must be > body_bottom_m ({self.body_bottom_m})"
            )
        if not isinstance(self.wheels, tuple) or not 1 <= len(self.wheels) <= L.MAX_WHEELS:
            raise ParameterError(
                o, "wheels", self.wheels, f"must be a tuple of 1..{L.MAX_WHEELS} WheelParams"
            )
        for w in self.wheels:
            if not isinstance(w, WheelParams):
                raise ParameterError(o, "wheels", w, "every entry must be a WheelParams")
        share = sum(w.brake_share for w in self.wheels)
        if abs(share - 1.0) > 1e-9 and share != 0.0:
            raise ParameterError(
                o,
                "wheels",
                f"brake shares sum to {share}",
                "brake_share over all wheels must sum to 1 (or all be 0)",
            )
        self._check_inertias()

    def _check_inertias(self) -> None:
        """Each inertia must give a radius of gyration between 1/:data:`MAX_LEVER_RATIO` and
        1/:data:`MIN_LEVER_RATIO` of the longest lever arm about that axis (wheels and body
        box; why: docs/vehicles.md, "Validation and speed")."""
        xs = [abs(w.x_m) for w in self.wheels] + [self.body_front_m, self.body_rear_m]
        ys = [abs(w.y_m) for w in self.wheels] + [self.body_half_width_m]
        zs = [abs(self.body_bottom_m), abs(self.body_top_m)]
        zs += [abs(w.z_m - w.rest_length_m - w.radius_m) for w in self.wheels]
        x, y, z = max(xs), max(ys), max(zs)
        for name, arm in (
            ("inertia_roll_kgm2", math.hypot(y, z)),
            ("inertia_pitch_kgm2", math.hypot(x, z)),
            ("inertia_yaw_kgm2", math.hypot(x, y)),
        ):
            lo = self.mass_kg * (arm / MAX_LEVER_RATIO) ** 2
            hi = self.mass_kg * (arm / MIN_LEVER_RATIO) ** 2
            if not lo <= getattr(self, name) <= hi:
                raise ParameterError(
                    "VehicleParams",
                    name,
                    getattr(self, name),
                    f"must be in [{lo:.4g}, {hi:.4g}] kg m^2: mass x (lever arm {arm:.3g} m / "
                    f"r)^2 for r from {MAX_LEVER_RATIO:g} down to {MIN_LEVER_RATIO:g}",
                )

    def replace(self, **changes: object) -> VehicleParams:
        """A copy with some fields changed (validated again)."""
        return replace(self, **changes)

    def pack(self) -> np.ndarray:
        """The float64 row the kernels read: (N_PARAMS,), or (N_PARAMS_EXT,) if extended."""
        ext = self.extended
        p = np.zeros(L.N_PARAMS_EXT if ext else L.N_PARAMS, np.float64)
        for name, col in _BASIC_COLUMNS.items():
            p[col] = getattr(self, name)
        p[L.P_N_WHEELS] = len(self.wheels)
        for w, wp in enumerate(self.wheels):
            for name, col in _WHEEL_COLUMNS.items():
                p[L.pw(w, col)] = getattr(wp, name)
        if ext:
            self._pack_extension(p)
        return p

    def _pack_extension(self, p: np.ndarray) -> None:
        p[L.P_EXTENDED] = 1.0
        p[L.P_TIRE_MODEL] = TIRE_MODELS[self.tire_model]
        for name, col in _EXT_COLUMNS.items():
            p[col] = getattr(self, name)
        p[L.PX_NO_CLAMPS] = 0.0 if self.friction_clamps else 1.0
        xs = [w.x_m for w in self.wheels]
        p[L.PX_WHEELBASE] = max(max(xs) - min(xs), 0.5)
        dt = self.drivetrain
        diffs = (dt.diff_front, dt.diff_rear, dt.diff_centre) if dt is not None else ()
        # differentials that couple wheels (open ones add nothing per substep)
        coupled = self.tire_model == "wheel-speed" and any(d != "open" for d in diffs)
        terms = (
            self.tire_model == "arcade" or self.drift_assist > 0.0 or self.lean_stabilization > 0.0
        )
        p[L.PX_VEHICLE_TERMS] = 1.0 if terms or coupled else 0.0
        tires = self.tires if self.tires is not None else tire_set("rally")
        tires.pack_into(p)
        p[L.PX_ABS_SLIP] = _abs_slip(tires.longitudinal.curves[0], self.abs_fraction)
        if self.drivetrain is not None:
            self.drivetrain.pack_into(p)
        n = len(self.wheels)
        loads = self.static_loads_n()
        for w, wp in enumerate(self.wheels):
            p[L.pxw(w, L.PXW_INERTIA)] = wp.inertia_kgm2
            p[L.pxw(w, L.PXW_INV_INERTIA)] = 1.0 / wp.inertia_kgm2
            if wp.spring_hz > 0.0:
                # the seed engine's rule: a spring of frequency f on the wheel's share m/n
                om = 2.0 * math.pi * wp.spring_hz
                p[L.pxw(w, L.PXW_K)] = om * om / n
                p[L.pxw(w, L.PXW_C)] = 2.0 * wp.damping_ratio * om / n
            else:
                p[L.pxw(w, L.PXW_K)] = self.contact_k
                p[L.pxw(w, L.PXW_C)] = self.contact_c
            p[L.pxw(w, L.PXW_GRIP)] = wp.grip
            p[L.pxw(w, L.PXW_AXLE)] = self._axle_of(w)
            p[L.pxw(w, L.PXW_SIDE)] = 1.0 if wp.y_m >= 0.0 else -1.0
            p[L.pxw(w, L.PXW_STATIC_LOAD)] = loads[w]

    def _axle_of(self, w: int) -> float:
        """0 front, 1 rear, 2 other: by the wheel's x among the distinct axle positions."""
        xs = sorted({wp.x_m for wp in self.wheels}, reverse=True)
        x = self.wheels[w].x_m
        if x == xs[0]:  # also the only axle position
            return 0.0
        if x == xs[-1]:
            return 1.0
        return 2.0

    def wheel_stiffness(self) -> np.ndarray:
        """Spring stiffness of each wheel (N/m)."""
        n = len(self.wheels)
        out = np.empty(n)
        for w, wp in enumerate(self.wheels):
            if wp.spring_hz > 0.0:
                out[w] = self.mass_kg * (2.0 * math.pi * wp.spring_hz) ** 2 / n
            else:
                out[w] = self.mass_kg * self.contact_k
        return out

    def static_loads_n(self) -> np.ndarray:
        """Each wheel's load at rest on flat ground (N): springs in static equilibrium.

        Solves heave, roll and pitch so the loads carry m g with no moment about the CG
        (least squares, so two-wheelers and in-line layouts work too).
        """
        k = self.wheel_stiffness()
        x = np.array([w.x_m for w in self.wheels])
        y = np.array([w.y_m for w in self.wheels])
        # loads_i = k_i (z + phi y_i - theta x_i); sum = m g, sum y = 0, sum x = 0
        a = np.array(
            [
                [k.sum(), (k * y).sum(), -(k * x).sum()],
                [(k * y).sum(), (k * y * y).sum(), -(k * x * y).sum()],
                [(k * x).sum(), (k * x * y).sum(), -(k * x * x).sum()],
            ]
        )
        b = np.array([self.mass_kg * self.gravity_mps2, 0.0, 0.0])
        sol = np.linalg.lstsq(a, b, rcond=None)[0]
        return k * (sol[0] + sol[1] * y - sol[2] * x)

    def digest(self) -> str:
        """blake2b (128 bit, hex) of the repr: every field, exactly (floats print with their
        shortest round-trip repr). Identifies the vehicle in replays and caches."""
        import hashlib

        return hashlib.blake2b(repr(self).encode(), digest_size=16).hexdigest()

    @property
    def static_ride_height_m(self) -> float:
        """CG height above flat ground at rest (approximate: ignores the ~2 mm static sag)."""
        w = self.wheels[0]
        return -(w.z_m - w.rest_length_m - w.radius_m)

    @property
    def static_sag_m(self) -> float:
        """Static compression of the wheels on flat ground (m): g / (n K) for an even split;
        with per-wheel springs, the mean of each wheel's static load over its stiffness."""
        if not self.extended:
            return self.gravity_mps2 / (len(self.wheels) * self.contact_k)
        return float(np.mean(self.static_loads_n() / self.wheel_stiffness()))


VehicleParams._EXT = _ext_defaults(VehicleParams, "tire_model")
#: field -> (lower bound, upper bound, lower bound open), in field order
_BOUNDS: dict[str, tuple[float, float, bool]] = {
    f.name: f.metadata["bounds"] for f in fields(VehicleParams) if "bounds" in f.metadata
}
#: field -> its column of the packed row: the basic ones, then the extension's
_COLUMNS = {f.name: f.metadata["column"] for f in fields(VehicleParams) if "column" in f.metadata}
_BASIC_COLUMNS = {n: c for n, c in _COLUMNS.items() if c < L.N_PARAMS}
_WHEEL_COLUMNS = {
    f.name: f.metadata["column"] for f in fields(WheelParams) if "column" in f.metadata
}
_EXT_COLUMNS = {n: c for n, c in _COLUMNS.items() if c >= L.N_PARAMS}
ROVER = VehicleParams()
