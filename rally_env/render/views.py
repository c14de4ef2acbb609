"""What the renderer draws, as plain data: :class:`CarView` per car (:func:`car_views`) and
:class:`HudInfo` (:func:`hud_from_info`); docs/render.md, "The renderer directly".
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from physics import layout as L
from physics.sim import quat_to_matrix

#: Wear and damage multipliers appear on the HUD once below this (half a percent of grip lost).
HUD_GRIP_SHOWN = 0.995

#: Drawn tire width (m); the physics has no tire width (a wheel is a ray).
WHEEL_WIDTH_M = 0.45


@dataclass(frozen=True, slots=True, eq=False)
class CarView:
    """One car as the renderer sees it (world frame, metres, radians).

    Attributes:
        x_m, y_m, z_m: CG position (m).
        rotation: (3, 3) body -> world rotation (columns: forward, left, up).
        body_front_m, body_rear_m, body_half_width_m: the body box in the body frame (m).
        wheel_xy_m: (W, 2) world x, y of each wheel centre.
        wheel_dir: (W, 2) unit world x, y of each wheel's rolling direction (steer included).
        wheel_radius_m: (W,) wheel radius (m).
        usage: (W,) friction-circle usage |F| / (mu N): 0 = all grip in reserve, 1 = sliding.
        loads_n: (W,) normal load (N).
        grounded: (W,) bool, the wheel carries load.
        static_load_n: m g / W, the load bars' reference (N).
        speed_mps: speed (m/s).
        time_s: simulated time since the car's reset (s).
        steer_rad: road-wheel steer angle (rad, + left).
        height_m: height of the CG above the ground under the wheels (m), for the shadow.
        wheel_width_m: drawn tire width (m).
    """

    x_m: float
    y_m: float
    z_m: float
    rotation: np.ndarray
    body_front_m: float
    body_rear_m: float
    body_half_width_m: float
    wheel_xy_m: np.ndarray
    wheel_dir: np.ndarray
    wheel_radius_m: np.ndarray
    usage: np.ndarray
    loads_n: np.ndarray
    grounded: np.ndarray
    static_load_n: float = 7000.0
    speed_mps: float = 0.0
    time_s: float = 0.0
    steer_rad: float = 0.0
    height_m: float = 0.9
    wheel_width_m: float = WHEEL_WIDTH_M

    @property
    def n_wheels(self) -> int:
        return int(self.wheel_xy_m.shape[0])

    @property
    def heading_rad(self) -> float:
        """Yaw of the body's forward axis projected on the ground (rad, CCW from +x)."""
        r = self.rotation
        return math.atan2(float(r[1, 0]), float(r[0, 0]))

    def body_corners_xy(self) -> np.ndarray:
        """(4, 2) world x, y of the body box's corners: front-left, front-right, rear-right,
        rear-left (the box's top-down footprint at its true attitude)."""
        r = self.rotation
        c = np.array([self.x_m, self.y_m])
        return box_corners(
            c, r[:2, 0], r[:2, 1], self.body_front_m, self.body_rear_m, self.body_half_width_m
        )

    @classmethod
    def from_pose(
        cls,
        x_m: float,
        y_m: float,
        heading_rad: float,
        *,
        z_m: float = 0.0,
        rotation: np.ndarray | None = None,
        steer_rad: float = 0.0,
        speed_mps: float = 0.0,
        time_s: float = 0.0,
        params: Any = None,
    ) -> CarView:
        """A car at a ground pose with straight (or ``steer_rad``-steered front) wheels, neutral
        wheel colours and the geometry of ``params`` (a ``VehicleParams``; default the rover).
        Used for ghosts and tests."""
        if params is None:
            from physics import ROVER

            params = ROVER
        if rotation is None:
            c, s = math.cos(heading_rad), math.sin(heading_rad)
            rotation = np.array([[c, -s, 0.0], [s, c, 0.0], [0.0, 0.0, 1.0]])
        rotation = np.asarray(rotation, np.float64)
        wheels = params.wheels
        xy, d = _wheel_geometry(
            np.array([x_m, y_m]),
            rotation,
            np.array([[w.x_m, w.y_m] for w in wheels], np.float64),
            np.array([steer_rad if w.steerable else 0.0 for w in wheels]),
        )
        nw = len(wheels)
        return cls(
            x_m=float(x_m),
            y_m=float(y_m),
            z_m=float(z_m),
            rotation=rotation,
            body_front_m=float(params.body_front_m),
            body_rear_m=float(params.body_rear_m),
            body_half_width_m=float(params.body_half_width_m),
            wheel_xy_m=xy,
            wheel_dir=d,
            wheel_radius_m=np.array([w.radius_m for w in wheels], np.float64),
            usage=np.zeros(nw),
            loads_n=np.full(nw, params.mass_kg * params.gravity_mps2 / nw),
            grounded=np.ones(nw, np.bool_),
            static_load_n=float(params.mass_kg * params.gravity_mps2 / nw),
            speed_mps=float(speed_mps),
            time_s=float(time_s),
            steer_rad=float(steer_rad),
        )


def box_corners(c: Any, f: Any, lft: Any, front: Any, rear: Any, half_w: Any) -> np.ndarray:
    """Corners of a box centred on ``c`` along the unit axes ``f`` (forward) and ``lft``,
    ``front`` ahead, ``rear`` behind, ``half_w`` to each side: front-left, front-right,
    rear-right, rear-left (world x, y on the last axis; leading axes broadcast)."""
    a, b, w = front * f, rear * f, half_w * lft
    return np.stack([c + a + w, c + a - w, c - b - w, c - b + w], axis=-2)


def _wheel_geometry(
    xy0: np.ndarray, rotation: np.ndarray, anchors: np.ndarray, steer: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """World x, y of the wheel centres and their unit rolling directions, from the body-plane
    footprint ``anchors`` (W, 2) of the wheels and their steer angles (rad)."""
    zero = np.zeros(len(steer))
    xy = xy0 + (np.stack([anchors[:, 0], anchors[:, 1], zero], axis=1) @ rotation.T)[:, :2]
    d = (np.stack([np.cos(steer), np.sin(steer), zero], axis=1) @ rotation.T)[:, :2]
    return xy, d / np.maximum(np.linalg.norm(d, axis=1, keepdims=True), 1e-9)


def car_views(batch: Any, cars: Sequence[int] | np.ndarray | None = None) -> list[CarView]:
    """:class:`CarView` records of ``cars`` (default: all) of a :class:`physics.VehicleBatch`.

    Reads ``batch.state``, ``batch.istate`` and ``batch.params`` (copies; nothing is written).
    Anything with those three arrays in the physics layout works (e.g. a snapshot).
    """
    state = np.asarray(batch.state)
    istate = np.asarray(batch.istate)
    params = np.asarray(batch.params)
    idx = np.arange(state.shape[0]) if cars is None else np.asarray(cars, np.int64).reshape(-1)
    if idx.size == 0:
        return []
    st = state[idx]
    rot = quat_to_matrix(st[:, L.QUAT_W : L.QUAT_Z + 1])
    out: list[CarView] = []
    for i, (s, p, r) in enumerate(zip(st, params[idx], rot, strict=True)):
        nw = int(p[L.P_N_WHEELS])
        base = L.PW_BASE + np.arange(nw) * L.N_WHEEL_PARAMS
        pos = s[L.POS_X : L.POS_Z + 1]
        steer = float(s[L.STEER_ANGLE])
        xy, d = _wheel_geometry(
            pos[:2],
            r,
            np.stack([p[base + L.PW_X], p[base + L.PW_Y]], axis=1),
            np.where(p[base + L.PW_STEER] > 0.5, steer, 0.0),
        )
        grounded = s[L.WL_GROUNDED : L.WL_GROUNDED + nw] > 0.5
        gz = s[L.WL_GROUND_Z : L.WL_GROUND_Z + nw]
        height = (
            float(pos[2] - gz[grounded].mean())
            if grounded.any()
            else float(pos[2] - gz.mean() if np.all(np.isfinite(gz)) else 0.9)
        )
        v = s[L.VEL_X : L.VEL_Z + 1]
        out.append(
            CarView(
                x_m=float(pos[0]),
                y_m=float(pos[1]),
                z_m=float(pos[2]),
                rotation=r,
                body_front_m=float(p[L.P_BODY_XF]),
                body_rear_m=float(p[L.P_BODY_XR]),
                body_half_width_m=float(p[L.P_BODY_HW]),
                wheel_xy_m=xy,
                wheel_dir=d,
                wheel_radius_m=p[base + L.PW_RADIUS].copy(),
                usage=np.clip(s[L.WL_USAGE : L.WL_USAGE + nw], 0.0, 1.0),
                loads_n=s[L.WL_LOAD : L.WL_LOAD + nw].copy(),
                grounded=grounded,
                static_load_n=float(p[L.P_MASS] * p[L.P_GRAVITY] / max(nw, 1)),
                speed_mps=float(math.sqrt(float(v @ v))),
                time_s=int(istate[idx[i], L.I_SUBSTEPS]) / L.SUBSTEP_HZ,
                steer_rad=steer,
                height_m=height,
            )
        )
    return out


@dataclass(frozen=True, slots=True)
class HudInfo:
    """What the HUD shows (the per-wheel load bars come from the focused :class:`CarView`).

    Attributes:
        speed_mps: speed (m/s), shown in km/h.
        stage_time_s: time since the start (s).
        progress_m: distance along the stage from the start line (m).
        stage_length_m: timed length of the stage (m); 0 hides the progress bar.
        checkpoint_times_s: time at each checkpoint in driving order (NaN = not reached).
        reference_times_s: a reference time per checkpoint (and optionally the finish last),
            e.g. from a ghost or a best run; gives the split's delta. ``None``: no delta.
        finish_time_s: the finish time (NaN = not finished).
        lap, laps: lap counter of closed stages (``laps`` 1 hides it).
        message: a banner across the middle (e.g. ``"FINISH"``; more lines after ``\\n`` are
            drawn smaller), or ``None``.
        title: small text in the top-left corner (stage name, driver), or ``""``.
        checkpoints_m: where the checkpoints are, as progress (m), for the progress bar ticks.
        gear, engine_rpm: shown for vehicles with a drivetrain (``None``: not shown).
        tire_wear, damage: the lowest tire-wear multiplier and the damage multiplier, shown
            once they have cost a visible share of the grip, below :data:`HUD_GRIP_SHOWN`
            (``None``: not shown).
    """

    speed_mps: float = 0.0
    stage_time_s: float = 0.0
    progress_m: float = 0.0
    stage_length_m: float = 0.0
    checkpoint_times_s: tuple[float, ...] = ()
    reference_times_s: tuple[float, ...] | None = None
    finish_time_s: float = math.nan
    lap: int = 1
    laps: int = 1
    message: str | None = None
    title: str = ""
    checkpoints_m: tuple[float, ...] = field(default=())
    gear: int | None = None
    engine_rpm: float | None = None
    tire_wear: float | None = None
    damage: float | None = None

    def last_split(self) -> tuple[int, float, float | None] | None:
        """``(index, time_s, delta_s)`` of the last checkpoint reached (``index`` 0-based,
        ``len(checkpoint_times_s)`` for the finish), delta against the reference or ``None``;
        ``None`` before the first checkpoint."""
        times = list(self.checkpoint_times_s)
        k = max((i for i, t in enumerate(times) if t == t), default=-1)  # the last not NaN
        if self.finish_time_s == self.finish_time_s:
            k, t = len(times), float(self.finish_time_s)
        elif k < 0:
            return None
        else:
            t = float(times[k])
        ref = self.reference_times_s
        has_ref = ref is not None and k < len(ref) and ref[k] == ref[k]
        return k, t, (t - float(ref[k]) if has_ref else None)


def hud_from_info(
    info: Mapping[str, Any],
    *,
    reference_times_s: Sequence[float] | None = None,
    message: str | None = None,
    title: str = "",
    stage: Any = None,
    drivetrain: bool | None = None,
) -> HudInfo:
    """A :class:`HudInfo` from a ``Rally-v0`` step/reset ``info`` dict (one car).

    Args:
        info: the env's info (``speed_mps``, ``stage_time_s``, ``progress_m``,
            ``stage_length_m``, ``checkpoint_times_s``, ``finish_time_s``, ``lap``; missing keys
            default).
        reference_times_s: reference splits (checkpoints, then finish) for the deltas.
        message: a banner.
        title: corner text.
        stage: the :class:`tracks.Stage`, for the checkpoint ticks and the lap count.
        drivetrain: whether the vehicle has an engine and gearbox (shows ``gear`` and
            ``engine_rpm`` from a Rally-v1 info); ``None``: when ``engine_rpm`` > 0.
    """
    cps: tuple[float, ...] = ()
    laps = 1
    if stage is not None:
        start = float(stage.start_s_m)
        length = float(stage.path.length_m)
        cps = tuple(
            (float(c) - start) % length if stage.closed else float(c) - start
            for c in stage.checkpoints_m
        )
        laps = int(stage.laps)
    times = tuple(float(t) for t in np.reshape(info.get("checkpoint_times_s", ()), -1))
    if "n_checkpoints" in info:  # the real checkpoints (the rest is padding)
        times = times[: int(info["n_checkpoints"])]
    v1: dict[str, Any] = {}  # the fields a Rally-v1 info carries (none for Rally-v0)
    if "engine_rpm" in info and "gear" in info:
        rpm = float(info["engine_rpm"])
        if drivetrain if drivetrain is not None else rpm > 0.0:
            v1["gear"] = int(info["gear"])
            v1["engine_rpm"] = rpm
    for k in ("tire_wear", "damage"):  # the lowest tire's wear, the car's damage
        share = float(np.min(info[k])) if k in info and np.size(info[k]) else 1.0
        if share < HUD_GRIP_SHOWN:
            v1[k] = share
    zero_default = ("speed_mps", "stage_time_s", "progress_m", "stage_length_m")
    return HudInfo(
        **{k: float(info.get(k, 0.0)) for k in zero_default},
        checkpoint_times_s=times,
        reference_times_s=None if reference_times_s is None else tuple(reference_times_s),
        finish_time_s=float(info.get("finish_time_s", math.nan)),
        lap=int(info.get("lap", 1)),
        laps=laps,
        message=message,
        title=title,
        checkpoints_m=cps,
        **v1,
    )


def format_time(t: float) -> str:
    """``m:ss.cc`` (``--:--.--`` for NaN)."""
    if t != t:
        return "--:--.--"
    sign = "-" if t < 0 else ""
    t = abs(t)
    m = int(t // 60.0)
    return f"{sign}{m}:{t - 60.0 * m:05.2f}"


def format_delta(d: float) -> str:
    """``+1.23`` / ``-0.45`` seconds."""
    return f"{d:+.2f}"
