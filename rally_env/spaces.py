"""Action and observation spaces, and the observation index table.

The observation layout is built here from named constants; the numba kernel that fills the
observation writes the fields in exactly this order, and the docstring and ``docs/env.md``
tables are generated from the same :class:`ObsLayout`, so they cannot drift.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, NamedTuple

import numpy as np
from gymnasium import spaces

from tracks.projection import DEFAULT_LOOKAHEAD_M

# ---------------------------------------------------------------------------------- actions
#: Continuous action: steer [-1, 1] (+ left), throttle, brake, handbrake [0, 1].
ACTION_NAMES: tuple[str, ...] = ("steer", "throttle", "brake", "handbrake")
ACTION_LOW = np.array([-1.0, 0.0, 0.0, 0.0], np.float32)
ACTION_HIGH = np.array([1.0, 1.0, 1.0, 1.0], np.float32)

#: Discrete action variant (for DQN): steer levels x pedal states.
DISCRETE_STEER: tuple[float, ...] = (-1.0, -0.5, 0.0, 0.5, 1.0)
#: (throttle, brake) pairs: full throttle, coast, full brake.
DISCRETE_PEDALS: tuple[tuple[float, float], ...] = ((1.0, 0.0), (0.0, 0.0), (0.0, 1.0))
#: (n, 4) table: action ``i`` = steer ``DISCRETE_STEER[i // 3]``, pedals ``DISCRETE_PEDALS[i % 3]``.
DISCRETE_ACTIONS = np.array(
    [[s, t, b, 0.0] for s in DISCRETE_STEER for (t, b) in DISCRETE_PEDALS], np.float64
)
DISCRETE_ACTIONS.setflags(write=False)


class ActionBox(spaces.Box):
    """A :class:`gymnasium.spaces.Box` whose :meth:`sample` with finite float bounds draws the
    same values as ``Box.sample`` by a direct path (``low + (high - low) * u`` in float64);
    docs/env.md ("Action space") says why."""

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self._uniform = self.dtype.kind == "f" and self.is_bounded("both")

    def sample(self, mask: Any = None, probability: Any = None) -> np.ndarray:
        if mask is not None or probability is not None or not self._uniform:
            return super().sample(mask, probability)
        low = self.low.astype(np.float64)
        u = self.np_random.random(self.shape)
        u *= self.high - low  # (high - low) * u in float64, in place (the same rounding)
        u += low
        return u.astype(self.dtype)


def action_space(discrete: bool = False) -> spaces.Space:
    """The single-car action space."""
    if discrete:
        return spaces.Discrete(DISCRETE_ACTIONS.shape[0])
    return ActionBox(ACTION_LOW.copy(), ACTION_HIGH.copy(), dtype=np.float32)


# ----------------------------------------------------------------------------- observations
#: Scales: observation = physical value / scale (then clipped to the field's bounds).
SPEED_SCALE_MPS = 50.0
LATERAL_SPEED_SCALE_MPS = 20.0
YAW_RATE_SCALE_RADPS = 2.0
SLIP_ANGLE_SCALE_RAD = 0.5
SLIP_RATIO_SCALE = 1.0
EDGE_SCALE_M = 10.0
CURVATURE_SCALE_PER_M = 10.0  # observation = curvature (1/m) * 10
#: v1: wheel rim speed (omega x radius) scale (m/s).
WHEEL_SPEED_SCALE_MPS = 50.0
#: v1: gear scale (the top gear of a six-speed box reads 1).
GEAR_SCALE = 6.0
#: Lookahead distances along the stage (m).
LOOKAHEAD_M: tuple[float, ...] = tuple(float(d) for d in DEFAULT_LOOKAHEAD_M)
#: Bound of the open-ended scaled fields.
OBS_BOUND = 5.0
#: ``road_ahead=True``: bins of road ahead of the car's projected position (m along the
#: stage), each summarised by its sharpest corner, sharpest crest, elevation and lowest grip.
ROAD_AHEAD_BINS_M: tuple[tuple[float, float], ...] = (
    (0.0, 25.0),
    (25.0, 50.0),
    (50.0, 100.0),
    (100.0, 150.0),
    (150.0, 200.0),
    (200.0, 300.0),
    (300.0, 450.0),
    (450.0, 600.0),
)
#: Crest sharpness: vertical convexity -d2z/ds2 (1/m, 0 for a dip) x 100 m.
CREST_SCALE_M = 100.0
#: Elevation change scale (m).
ELEVATION_SCALE_M = 10.0
#: Distance-to-finish scale (m): the field reads 1 at this distance or more.
TO_FINISH_SCALE_M = 600.0

_WHEEL_LABELS_4 = ("FL", "FR", "RL", "RR")


@dataclass(frozen=True)
class ObsField:
    """One observation entry: its index, name, meaning, scaling and bounds."""

    index: int
    name: str
    group: str
    description: str
    low: float
    high: float


def wheel_labels(n_wheels: int) -> tuple[str, ...]:
    return _WHEEL_LABELS_4 if n_wheels == 4 else tuple(f"W{w}" for w in range(n_wheels))


class ObsLayout:
    """The observation vector for a vehicle with ``n_wheels`` wheels: the :data:`OBS_BLOCKS`
    that ``version`` and the switches (``road_ahead``, or any of :data:`OBS_SWITCHES` by
    name) turn on, in order.

    Attributes:
        blocks: the blocks, in order.
        fields: every entry, in index order.
        size: length of the vector.
        low, high: (size,) float32 bounds.
        groups: group name -> slice of indices.
    """

    def __init__(
        self,
        n_wheels: int = 4,
        lookahead_m: tuple[float, ...] = LOOKAHEAD_M,
        version: int = 0,
        road_ahead: bool = False,
        **switches: bool,
    ):
        self.n_wheels = int(n_wheels)
        self.lookahead_m = tuple(float(d) for d in lookahead_m)
        #: 0: the Rally-v0 layout; 1: Rally-v1 (v0's fields, then the drivetrain, wear,
        #: damage, wheel speeds and the surface grip ahead)
        self.version = int(version)
        if self.version not in (0, 1):
            raise ValueError(f"ObsLayout version must be 0 or 1, got {version!r}")
        for name in switches:
            if name not in OBS_SWITCHES:
                raise ValueError(
                    f"ObsLayout: {name!r} switches no observation block; known: "
                    f"{', '.join(OBS_SWITCHES)}"
                )
        settings = {"version": self.version, "road_ahead": bool(road_ahead), **switches}
        #: the :data:`OBS_BLOCKS` this layout has, in order
        self.blocks = tuple(
            b for b in OBS_BLOCKS if b.switch is None or settings.get(b.switch, False)
        )
        #: the road-ahead block follows the version's fields (``RallyEnv(road_ahead=True)``)
        self.road_ahead = bool(road_ahead)
        fields: list[ObsField] = []

        def add(name, group, desc, lo=-OBS_BOUND, hi=OBS_BOUND):
            fields.append(ObsField(len(fields), name, group, desc, float(lo), float(hi)))

        labels = wheel_labels(self.n_wheels)
        for block in self.blocks:
            block.fields(add, labels, self.lookahead_m)
        self.fields = tuple(fields)
        self.size = len(self.fields)
        self.low = np.array([f.low for f in self.fields], np.float32)
        self.high = np.array([f.high for f in self.fields], np.float32)
        self.index = {f.name: f.index for f in self.fields}
        groups: dict[str, list[int]] = {}
        for f in self.fields:
            groups.setdefault(f.group, []).append(f.index)
        self.groups = {g: slice(ix[0], ix[-1] + 1) for g, ix in groups.items()}

    def space(self) -> spaces.Box:
        return spaces.Box(self.low.copy(), self.high.copy(), dtype=np.float32)

    def table_markdown(self, compact: bool = True, start: int = 0) -> str:
        """The index table as Markdown (per-wheel, lookahead, road-ahead and previous-action
        rows grouped if ``compact``; only the fields from index ``start`` on)."""
        per_d = f"per lookahead distance d in ({', '.join(f'{d:g}' for d in self.lookahead_m)}) m"
        bins = ", ".join(f"{a:g}-{b:g}" for a, b in ROAD_AHEAD_BINS_M)
        wheels = ",".join(wheel_labels(self.n_wheels))
        grouped = {  # group -> (name, meaning) of its one row (None: the field's, per wheel)
            "lookahead": (
                "look_{x,y,curv}_{d}m",
                f"{per_d}, 3 values each: centerline point forward / d, left / d (car frame), "
                f"curvature x {CURVATURE_SCALE_PER_M:g} m",
            ),
            "look_grip": (
                "look_grip_{d}m",
                f"{per_d}: grip multiplier of the surface at the centerline point d ahead",
            ),
            "prev_action": (
                "prev_{" + ",".join(ACTION_NAMES) + "}",
                "the previous action (after clipping), 0 after a reset",
            ),
            **{
                g: (f"{g}_{{bin}}", f"per bin ahead ({bins} m): {d}")
                for g, d in _AHEAD_DESC.items()
            },
            **{g: (f"{g}_{{{wheels}}}", None) for g in _WHEEL_GROUPS},
        }
        lines = ["| index | name | meaning | low | high |", "| --- | --- | --- | --- | --- |"]
        done: set[str] = set()
        for f in self.fields[start:]:
            if not (compact and f.group in grouped):
                lines.append(
                    f"| {f.index} | `{f.name}` | {f.description} | {f.low:g} | {f.high:g} |"
                )
            elif f.group not in done:
                done.add(f.group)
                sl = self.groups[f.group]
                name, desc = grouped[f.group]
                desc = desc or f.description + " (per wheel)"
                lo = min(m.low for m in self.fields[sl])
                hi = max(m.high for m in self.fields[sl])
                lines.append(f"| {sl.start}-{sl.stop - 1} | `{name}` | {desc} | {lo:g} | {hi:g} |")
        return "\n".join(lines)


def _scalars(add, *fields: tuple[str, str, float, float]) -> None:
    """Add fields ``(name, description, low, high)`` that are each a group of their own."""
    for name, desc, lo, hi in fields:
        add(name, name, desc, lo, hi)


def _per_wheel(add, labels: list[str], *fields: tuple[str, str, float, float]) -> None:
    """Add per-wheel fields ``(group, description, low, high)``, ``<group>_<wheel>`` each."""
    for group, desc, lo, hi in fields:
        for w in labels:
            add(f"{group}_{w}", group, desc, lo, hi)


def _v0_fields(add, labels: list[str], lookahead_m: tuple[float, ...]) -> None:
    """The Rally-v0 fields: motion, per-wheel state, the road here and ahead, the previous
    action, progress."""
    B = OBS_BOUND
    lateral = f"body-frame lateral velocity (+ left) / {LATERAL_SPEED_SCALE_MPS:g} m/s"
    _scalars(
        add,
        ("speed", f"speed (norm of the CG velocity) / {SPEED_SCALE_MPS:g} m/s", 0.0, B),
        ("v_forward", f"body-frame forward velocity / {SPEED_SCALE_MPS:g} m/s", -B, B),
        ("v_left", lateral, -B, B),
        ("yaw_rate", f"yaw rate (+ left) / {YAW_RATE_SCALE_RADPS:g} rad/s", -B, B),
        ("pitch", "sin(pitch), + nose down (ISO 8855)", -1.0, 1.0),
        ("roll", "sin(roll) cos(pitch), + right side down (ISO 8855)", -1.0, 1.0),
    )
    _per_wheel(
        add,
        labels,
        ("slip_angle", f"slip angle / {SLIP_ANGLE_SCALE_RAD:g} rad", -B, B),
        ("slip_ratio", f"slip ratio / {SLIP_RATIO_SCALE:g}", -B, B),
        ("load", "normal load / static load (m g / wheels)", 0.0, B),
        ("grounded", "1 if the wheel carries load, else 0", 0.0, 1.0),
        ("grip", "grip multiplier of the surface under the wheel", 0.0, 2.0),
    )
    _scalars(
        add,
        ("heading_error", "car heading minus road heading / pi (+ left)", -1.0, 1.0),
        ("lateral_offset", "signed offset from the centerline (+ left) / half width", -B, B),
    )
    for side in ("left", "right"):
        desc = f"distance to the {side} edge (+ on the road) / {EDGE_SCALE_M:g} m"
        add(f"{side}_edge", f"{side}_edge", desc)
    for d in lookahead_m:
        for axis, side in (("x", "forward"), ("y", "left")):
            desc = f"centerline point {d:g} m ahead: {side} (car frame) / {d:g} m"
            add(f"look_{axis}_{d:g}m", "lookahead", desc)
        desc = f"road curvature {d:g} m ahead (+ left) x {CURVATURE_SCALE_PER_M:g} m"
        add(f"look_curv_{d:g}m", "lookahead", desc)
    for name, lo in zip(ACTION_NAMES, ACTION_LOW, strict=True):
        add(f"prev_{name}", "prev_action", f"previous action: {name}", float(lo), 1.0)
    progress = "stage position / stage length (0 at the start, 1 at the finish)"
    add("progress", "progress", progress, -1.0, 2.0)


def _v1_fields(add, labels: list[str], lookahead_m: tuple[float, ...]) -> None:
    """Rally-v1's fields after v0's: the drivetrain, wear, damage, wheel speeds and the
    surface grip ahead."""
    gear = f"selected gear / {GEAR_SCALE:g} (-1 reverse, 0 neutral or no drivetrain)"
    _scalars(
        add,
        ("engine_rpm", "engine speed / rev limit (0 without a drivetrain)", 0.0, 2.0),
        ("gear", gear, -1.0, 1.0),
    )
    _per_wheel(add, labels, ("tire_wear", "tire grip multiplier from wear (1 = new)", 0.0, 1.0))
    add("damage", "damage", "grip multiplier from damage (1 = undamaged)", 0.0, 1.0)
    speed = f"wheel rim speed (spin x radius, + forward) / {WHEEL_SPEED_SCALE_MPS:g} m/s"
    _per_wheel(add, labels, ("wheel_speed", speed, -OBS_BOUND, OBS_BOUND))
    for d in lookahead_m:
        desc = f"grip multiplier of the surface at the centerline point {d:g} m ahead"
        add(f"look_grip_{d:g}m", "look_grip", desc, 0.0, 2.0)


def _road_ahead_fields(add, labels: list[str], lookahead_m: tuple[float, ...]) -> None:
    """The road-ahead block (``road_ahead=True``): per distance bin, the sharpest curvature,
    the sharpest crest, the elevation and the lowest grip; then the distance to the finish."""
    B = OBS_BOUND
    scales = {
        "curv": f"{CURVATURE_SCALE_PER_M:g} m",
        "crest": f"{CREST_SCALE_M:g} m",
        "elev": f"{ELEVATION_SCALE_M:g} m",
    }
    crest = (
        "sharpest crest {a}-{b} m ahead: -d2z/ds2 x {crest} (0 for dips; a jump's lip reads high)"
    )
    for group, desc, lo, hi in (  # each bin a-b m ahead
        ("ahead_curv", "sharpest road curvature {a}-{b} m ahead (signed, + left) x {curv}", -B, B),
        ("ahead_crest", crest, 0.0, B),
        ("ahead_elev", "road elevation {b} m ahead minus here / {elev}", -B, B),
        ("ahead_grip", "lowest road surface grip {a}-{b} m ahead", 0.0, 2.0),
    ):
        for a, b in ROAD_AHEAD_BINS_M:
            text = desc.format(a=f"{a:g}", b=f"{b:g}", **scales)
            add(f"{group}_{a:g}_{b:g}m", group, text, lo, hi)
    finish = f"distance to the finish / {TO_FINISH_SCALE_M:g} m (1 from there on)"
    add("to_finish", "to_finish", finish, 0.0, 1.0)


_AHEAD_DESC = {
    "ahead_curv": f"sharpest road curvature (signed, + left) x {CURVATURE_SCALE_PER_M:g} m",
    "ahead_crest": f"sharpest crest, -d2z/ds2 x {CREST_SCALE_M:g} m (0 for dips)",
    "ahead_elev": f"elevation at the bin's far end minus here / {ELEVATION_SCALE_M:g} m",
    "ahead_grip": "lowest surface grip multiplier of the road",
}
#: The per-wheel groups the compact index table shows as one row each.
_WHEEL_GROUPS = ("slip_angle", "slip_ratio", "load", "grounded", "grip", "tire_wear", "wheel_speed")


def _ahead_apex_fields(add, labels: list[str], lookahead_m: tuple[float, ...]) -> None:
    """The apex block (``ahead_apex=True``): where each road-ahead bin's sharpest corner lies."""
    for a, b in ROAD_AHEAD_BINS_M:
        where = f"where the sharpest corner {a:g}-{b:g} m ahead lies: 0 at {a:g} m to 1 at {b:g} m"
        add(f"ahead_apex_{a:g}_{b:g}m", "ahead_apex", f"{where} (0.5: no curve)", 0.0, 1.0)


class ObsBlock(NamedTuple):
    """One block of the observation: a row of :data:`OBS_BLOCKS`."""

    name: str
    #: adds the block's fields: ``fields(add, wheel labels, lookahead distances)``
    fields: Callable[[Any, list[str], tuple[float, ...]], None]
    #: the :class:`rally_env.RallyConfig` setting that turns the block on (``None``: always on)
    switch: str | None
    #: the ``rally_env.kernels`` function that writes the block's values, in the fields' order
    writer: str


#: The observation's blocks, in the vector's order: the layout (:class:`ObsLayout`), the
#: kernels' switches (:func:`obs_switches`), the precompile fingerprint and the replay form of
#: a config (a block's switch is recorded only when on) follow from it.
OBS_BLOCKS: tuple[ObsBlock, ...] = (
    ObsBlock("base", _v0_fields, None, "_write_obs"),
    ObsBlock("v1", _v1_fields, "version", "_write_obs_v1"),
    ObsBlock("road_ahead", _road_ahead_fields, "road_ahead", "_write_road_ahead"),
    ObsBlock("ahead_apex", _ahead_apex_fields, "ahead_apex", "_write_ahead_apex"),
)
#: The config settings that switch observation blocks on (``version`` aside, which also
#: chooses the vehicle model): booleans, recorded in a config's replay form only when on.
OBS_SWITCHES: tuple[str, ...] = tuple(
    b.switch for b in OBS_BLOCKS if b.switch is not None and b.switch != "version"
)


def obs_switches(config: Any) -> tuple[bool | None, ...]:
    """The env kernels' observation switches for ``config``: per switched block of
    :data:`OBS_BLOCKS`, in order, ``True`` when it is on, else ``None`` (numba then prunes
    its writer)."""
    return tuple(
        True if getattr(config, b.switch) else None for b in OBS_BLOCKS if b.switch is not None
    )


def layout_for(config: Any) -> ObsLayout:
    """The observation layout of an env config (its vehicle's wheels, its blocks)."""
    on = {name: bool(getattr(config, name)) for name in OBS_SWITCHES}
    return ObsLayout(len(config.vehicle.wheels), version=config.version, **on)


DEFAULT_LAYOUT = ObsLayout(4)
#: The Rally-v1 layout of a four-wheeled vehicle (the default rover).
DEFAULT_LAYOUT_V1 = ObsLayout(4, version=1)


def discrete_table_markdown() -> str:
    """The discrete action table as Markdown."""
    lines = ["| action | steer | throttle | brake |", "| --- | --- | --- | --- |"]
    for i, row in enumerate(DISCRETE_ACTIONS):
        lines.append(f"| {i} | {row[0]:+g} | {row[1]:g} | {row[2]:g} |")
    return "\n".join(lines)
