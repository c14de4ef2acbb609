"""Environment settings: frozen, validated dataclasses.

Every constructor argument of :class:`rally_env.RallyEnv` ends up in one :class:`RallyConfig`.
Sub-settings (reward weights, termination, randomization) may be given as the dataclass or as a
plain ``dict`` of overrides; unknown keys and bad values raise :class:`ConfigError` naming the
field, the value and the rule.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import hashlib
import json
import math
import os
from dataclasses import dataclass, field, fields
from typing import Any, NamedTuple

import numpy as np

from physics import ROVER, VehicleParams
from physics.errors import ParameterError
from rally_env.errors import ConfigError
from rally_env.spaces import OBS_SWITCHES

#: Control rates the env accepts: divisors of the 480 Hz physics rate from 10 to 60 Hz.
CONTROL_HZ_CHOICES: tuple[int, ...] = tuple(h for h in range(10, 61) if 480 % h == 0)

#: Surfaces of generated stages etc. are drawn from these when ``stage="random"``.
RANDOM_STAGE_DEFAULTS: dict[str, Any] = {"length_m": 2000.0, "difficulty": (0.2, 0.8)}
#: Lengths ``stage="random"`` accepts (m): what the generator builds at every difficulty.
MIN_RANDOM_LENGTH_M = 200.0
#: ``random_stage.laps``: laps of a generated loop at most, and when ``loops`` is set alone.
MAX_RANDOM_LAPS = 10
DEFAULT_RANDOM_LAPS = 2
#: The shortest lap of a generated loop (``tracks.generate``).
MIN_LOOP_LENGTH_M = 400.0
#: ``random_stage.pool``: stages per pool window at most.
MAX_POOL = 65536
#: ``random_stage.pool_steps`` when a pool is set without it: env steps per pool window.
DEFAULT_POOL_STEPS = 200
#: ``random_stage.pool`` at most this many times ``pool_steps``: every window draws its
#: ``pool`` stages' seeds and difficulties (docs/replays.md says what a larger pool cost).
MAX_POOL_PER_STEP = 16
MAX_RANDOM_LENGTH_M = 10000.0


def _short_repr(v: Any) -> Any:
    """``v``, or for a huge integer a short stand-in (its repr would be thousands of digits)."""
    if isinstance(v, int) and abs(v) > 10**30:
        return f"<an integer of {len(str(abs(v)))} digits>"
    return v


def _real(owner: str, name: str, v: Any, lo: float = -math.inf, hi: float = math.inf) -> float:
    if isinstance(v, bool) or not isinstance(v, (int, float, np.integer, np.floating)):
        raise ConfigError(f"{owner}.{name}", v, "must be a real number")
    try:
        f = float(v)
    except OverflowError:  # an integer beyond the float range
        f = math.inf
    if not math.isfinite(f):
        raise ConfigError(f"{owner}.{name}", _short_repr(v), "must be finite")
    if not lo <= f <= hi:
        raise ConfigError(f"{owner}.{name}", v, f"must be in [{lo}, {hi}]")
    return f


def _bounded(default: Any, lo: float, hi: float) -> Any:
    """A dataclass field with its default and its range ``[lo, hi]`` (:func:`_check_fields`)."""
    return field(default=default, metadata={"range": (lo, hi)})


def _check_fields(obj: Any, check: Any, owner: str) -> None:
    """Replace each field of the frozen ``obj`` by ``check(owner, name, value, lo, hi)`` for
    its range (a field whose default is None may be None)."""
    for f in fields(obj):
        v = getattr(obj, f.name)
        if not (v is None and f.default is None):
            object.__setattr__(obj, f.name, check(owner, f.name, v, *f.metadata["range"]))


def _no_unknown(given: dict[str, Any], known: Any, prefix: str, what: str) -> None:
    """Raise :class:`ConfigError` for the first key of ``given`` not in ``known``."""
    for k in given:
        if k not in known:
            raise ConfigError(
                f"{prefix}{k}", given[k], f"unknown {what}; known: {', '.join(sorted(known))}"
            )


def _from(cls: type, value: Any, owner: str) -> Any:
    """Build ``cls`` from an instance, a dict of overrides or None (defaults)."""
    if value is None:
        return cls()
    if isinstance(value, cls):
        return value
    if isinstance(value, dict):
        _no_unknown(value, {f.name for f in fields(cls)}, f"{owner}.", "setting")
        return cls(**value)
    raise ConfigError(owner, value, f"must be a {cls.__name__}, a dict of overrides or None")


class RewardTerm(NamedTuple):
    """One reward term: a row of :data:`REWARD_TABLE`."""

    name: str  # the ``RewardWeights`` field, the ``info["reward_<name>"]`` key
    default: float  # the default weight
    units: str  # what the weight is per
    doc: str  # what the term pays (the docs' reward table and ``RewardWeights``' docstring)


#: The reward terms, in the order the kernel computes them; everything about the terms follows
#: from it (docs/architecture.md, "The env's contract, declared once").
REWARD_TABLE: tuple[RewardTerm, ...] = (
    RewardTerm(
        "progress",
        0.1,
        "per m",
        "``+progress * dp``: ``dp`` is the change of the *credited* stage position (m, signed "
        "arc length along the centerline, wrap-safe on loops). Driving forward on the road "
        "pays; driving backward always costs the same amount; distance gained while off the "
        "road is forfeited (never paid), so the total can never exceed the stage length times "
        "the weight: circles, reversing and shuttling back and forth earn nothing",
    ),
    RewardTerm("time", 0.1, "per s", "``-time * dt`` every step (dt = 1 / control_hz s)"),
    RewardTerm(
        "off_road",
        0.5,
        "per s",
        "``-off_road * dt`` every step the car's centre is beyond a road edge",
    ),
    RewardTerm(
        "crash",
        20.0,
        "once",
        "``-crash`` once, when the episode ends ``off_stage``, ``rolled``, ``stuck`` or "
        "``wrong_way``",
    ),
    RewardTerm("finish", 20.0, "once", "``+finish`` once, on crossing the finish line"),
    RewardTerm(
        "action_change",
        0.0,
        "per unit squared",
        "``-action_change * sum((a_t - a_(t-1))^2)`` over the four action components (smooth "
        "steering; 0 by default)",
    ),
)
#: The reward term names, in :data:`REWARD_TABLE` order.
REWARD_TERMS: tuple[str, ...] = tuple(t.name for t in REWARD_TABLE)
#: The terms every replay form of the config carries, at any weight; a later term only when it
#: is not its default (docs/architecture.md, "The env's contract, declared once").
ALWAYS_RECORDED_TERMS = ("progress", "time", "off_road", "crash", "finish", "action_change")


#: The weights of the reward terms: a frozen dataclass with one float field per row of
#: :data:`REWARD_TABLE` (its default weight), each checked to be in [0, 1e6].
RewardWeights = dataclasses.make_dataclass(
    "RewardWeights",
    [(t.name, float, _bounded(t.default, 0.0, 1e6)) for t in REWARD_TABLE],
    namespace={
        "__module__": __name__,
        "__doc__": "Weights of the named reward terms (see the env docstring for each term).\n\n"
        "    Attributes:\n"
        + "".join(f"        {t.name} ({t.units}): {t.doc}.\n" for t in REWARD_TABLE),
        "__post_init__": lambda self: _check_fields(self, _real, "reward_weights"),
    },
    frozen=True,
    slots=True,
)


def reward_weights_json(w: Any) -> dict[str, float]:
    """The replay form of reward weights: every term of :data:`ALWAYS_RECORDED_TERMS`, and
    any other term whose weight is not its default."""
    return {
        t.name: float(getattr(w, t.name))
        for t in REWARD_TABLE
        if t.name in ALWAYS_RECORDED_TERMS or getattr(w, t.name) != t.default
    }


@dataclass(frozen=True, slots=True)
class TerminationConfig:
    """When an episode ends: distances in m, times in s, ``roll_up_z`` a world z of the car's
    up axis; each setting is checked against its range. A set ``time_limit_s`` replaces the
    limit ``time_limit_base_s + stage_length_m / time_limit_speed_mps``. What each setting
    ends, and its default: docs/env.md ("Episode end", "Arguments")."""

    off_road_max_m: float = _bounded(10.0, 0.0, 1000.0)
    off_road_max_s: float = _bounded(10.0, 0.0, 1e6)
    stuck_time_s: float = _bounded(10.0, 0.05, 1e6)
    stuck_progress_m: float = _bounded(2.0, 0.0, 1e4)
    roll_up_z: float = _bounded(0.3, -1.0, 1.0)
    roll_time_s: float = _bounded(1.0, 0.0, 1e6)
    wrong_way_m: float = _bounded(25.0, 0.0, 1e6)
    cut_ratio: float = _bounded(1.25, 1.0, 100.0)
    cut_slack_m: float = _bounded(10.0, 0.0, 1e4)
    time_limit_base_s: float = _bounded(30.0, 0.0, 1e7)
    time_limit_speed_mps: float = _bounded(5.0, 0.01, 1e4)
    time_limit_s: float | None = _bounded(None, 0.05, 1e7)

    def __post_init__(self) -> None:
        _check_fields(self, _real, "termination")


def _range_pair(owner: str, name: str, v: Any, lo: float, hi: float) -> tuple[float, float]:
    if isinstance(v, (int, float, np.integer, np.floating)) and not isinstance(v, bool):
        a = b = _real(owner, name, v, lo, hi)
    else:
        if isinstance(v, (str, bytes)) or not hasattr(v, "__len__") or len(v) != 2:
            raise ConfigError(f"{owner}.{name}", v, "must be a (low, high) pair or a number")
        a = _real(owner, name, v[0], lo, hi)
        b = _real(owner, name, v[1], lo, hi)
    if a > b:
        raise ConfigError(f"{owner}.{name}", v, "low must be <= high")
    return (a, b)


@dataclass(frozen=True, slots=True)
class RandomizeConfig:
    """Domain randomization: each entry a ``(low, high)`` range of a multiplier on the
    vehicle's (or each road section's) nominal value, drawn uniformly per car at every reset
    from the env's RNG; ``(1, 1)`` turns one off (``None`` for the whole config: all). What
    each multiplies: docs/env.md ("Domain randomization") and :func:`randomized_vehicle`."""

    surface_mu: tuple[float, float] = _bounded((0.85, 1.15), 0.3, 1.7)
    mass: tuple[float, float] = _bounded((0.9, 1.1), 0.5, 2.0)
    power: tuple[float, float] = _bounded((0.85, 1.15), 0.2, 3.0)
    tire_peak: tuple[float, float] = _bounded((0.85, 1.15), 0.5, 2.0)
    load_sensitivity: tuple[float, float] = _bounded((0.5, 1.5), 0.0, 4.0)

    def __post_init__(self) -> None:
        _check_fields(self, _range_pair, "randomize")

    @property
    def randomizes_surfaces(self) -> bool:
        return self.surface_mu != (1.0, 1.0)


def randomized_vehicle(
    base: VehicleParams, f_mass: float, f_power: float, f_peak: float, f_ls: float
) -> VehicleParams:
    """``base`` with the multipliers :class:`RandomizeConfig` draws applied: mass (and the
    inertias with it), power (and the drive force), tire peak slip angle, load sensitivity
    (capped at 1)."""
    return base.replace(
        mass_kg=base.mass_kg * f_mass,
        inertia_roll_kgm2=base.inertia_roll_kgm2 * f_mass,
        inertia_pitch_kgm2=base.inertia_pitch_kgm2 * f_mass,
        inertia_yaw_kgm2=base.inertia_yaw_kgm2 * f_mass,
        power_w=base.power_w * f_power,
        drive_force_n=base.drive_force_n * f_power,
        peak_slip_angle_rad=base.peak_slip_angle_rad * f_peak,
        load_sensitivity=min(1.0, base.load_sensitivity * f_ls),
    )


#: Env versions: 0 = the seed game's direct-force model (the default rover, the 59-value
#: observation), 1 = the wheel-speed model, library vehicles and planets, the wider observation.
ENV_VERSIONS: tuple[int, ...] = (0, 1)

#: The Gymnasium ids, one per env version (``RallyEnv(version=N)``): the name says the model,
#: the number the env version (docs/env.md: why two names).
ENV_IDS: tuple[str, ...] = ("RallyDirect-v0", "RallyWheelSpeed-v1")
#: The first ids, one per env version: what replay files record as ``env_id`` (the only ids a
#: replay may name). Still registered, the same envs (``rally_env.REGISTERED_ENVS``).
LEGACY_ENV_IDS: tuple[str, ...] = ("Rally-v0", "Rally-v1")
#: The same two envs with the road-ahead observation (``road_ahead=True``), under names of
#: their own.
AHEAD_ENV_IDS: tuple[str, ...] = ("RallyDirectAhead-v0", "RallyWheelSpeedAhead-v1")


def _vehicles_module() -> Any:
    from physics import vehicles

    return vehicles


def vehicle_names() -> tuple[str, ...]:
    """The library vehicle names ``vehicle=`` accepts on ``Rally-v1``."""
    return tuple(_vehicles_module().VEHICLES)


def default_vehicle(version: int) -> VehicleParams:
    """The version's default vehicle: the seed rover (v0), the rover on the wheel-speed
    model (v1)."""
    return ROVER if version == 0 else _library_vehicle("rover", None)


@functools.cache
def _library_vehicle(name: str, planet: str | None) -> VehicleParams:
    return _vehicles_module().vehicle(name, planet=planet)


def library_name(vehicle: VehicleParams, planet: str | None) -> str | None:
    """The library name of ``vehicle`` (as built for ``planet``), or None if it is custom."""
    for name in vehicle_names():
        with contextlib.suppress(Exception):  # a broken library definition matches nothing
            if _library_vehicle(name, planet) == vehicle:
                return name
    return None


def _check_planet(planet: Any) -> str | None:
    if planet is None:
        return None
    allowed = tuple(sorted(_vehicles_module().PLANETS))
    if not isinstance(planet, str) or planet not in allowed:
        raise ConfigError("planet", planet, f"must be None or one of {', '.join(allowed)}")
    return planet


def _vehicle(value: Any, version: int = 0, planet: str | None = None) -> VehicleParams:
    """Resolve ``vehicle=`` for an env version, then put it on ``planet`` (if given)."""
    if isinstance(value, VehicleParams):
        v = value
    elif value is None:
        v = default_vehicle(version)
    elif isinstance(value, dict):
        v = _overrides(default_vehicle(version), value)
    else:
        v = _named_vehicle(value, version)
    if planet is not None:
        try:
            v = _vehicles_module().on_planet(v, planet)
        except ParameterError as e:
            raise ConfigError(f"vehicle.{e.field}", e.value, e.rule) from None
        except ValueError as e:
            raise ConfigError("planet", planet, str(e)) from None
    return v


def _overrides(base: VehicleParams, value: dict) -> VehicleParams:
    try:
        return base.replace(**value)
    except TypeError as e:
        raise ConfigError("vehicle", value, f"unknown VehicleParams field ({e})") from None
    except ParameterError as e:
        raise ConfigError(f"vehicle.{e.field}", e.value, e.rule) from None


def _named_vehicle(value: Any, version: int) -> VehicleParams:
    """``vehicle=`` by name: ``"rover"`` on v0, a library vehicle on v1."""
    if version == 0:
        if isinstance(value, str) and value == "rover":
            return ROVER
        rule = (
            "must be 'rover', a VehicleParams or a dict of VehicleParams overrides "
            "(library vehicles need version=1: RallyWheelSpeed-v1, first id Rally-v1)"
        )
        raise ConfigError("vehicle", value, rule)
    names = vehicle_names()
    if isinstance(value, str) and value in names:
        try:
            return _library_vehicle(value, None)
        except _vehicles_module().VehicleDefError as e:  # a broken library definition
            raise ConfigError("vehicle", value, str(e)) from None
    raise ConfigError(
        "vehicle",
        value,
        f"must be one of {', '.join(repr(n) for n in names)}, a VehicleParams or a dict of "
        "VehicleParams overrides (of the 'rover')",
    )


StageSpec = Any  # str | os.PathLike | tracks.Stage | list of those


@dataclass(frozen=True)
class RallyConfig:
    """Everything that defines an environment: one field per :class:`rally_env.RallyEnv`
    argument, checked and resolved when built (``vehicle`` to a :class:`physics.VehicleParams`
    on its ``planet``, the sub-settings to their dataclasses, ``random_stage`` with its
    defaults: see :func:`rally_env.stages.draw_random_stage`). A bad value raises
    :class:`ConfigError`. Each argument, its forms and its default: docs/env.md ("Arguments").
    """

    stage: StageSpec = "opener"
    # "rover" resolves per version (the seed rover on v0, the wheel-speed rover on v1)
    vehicle: VehicleParams = "rover"  # type: ignore[assignment]
    control_hz: int = 20
    reward_weights: RewardWeights = field(default_factory=RewardWeights)
    termination: TerminationConfig = field(default_factory=TerminationConfig)
    randomize: RandomizeConfig | None = None
    random_stage: dict[str, Any] = field(default_factory=lambda: dict(RANDOM_STAGE_DEFAULTS))
    discrete_actions: bool = False
    render_mode: str | None = None
    version: int = 0
    planet: str | None = None
    road_ahead: bool = False
    ahead_apex: bool = False

    @classmethod
    def build(cls, **kw: Any) -> RallyConfig:
        """Build from constructor keyword arguments (dicts and shorthands accepted)."""
        _no_unknown(kw, {f.name for f in fields(cls)}, "", "argument")
        return cls(**kw)

    def __post_init__(self) -> None:
        s = object.__setattr__
        ver = self.version
        if not _is_int(ver) or ver not in ENV_VERSIONS:
            raise ConfigError("version", ver, f"must be one of {', '.join(map(str, ENV_VERSIONS))}")
        s(self, "version", int(ver))
        s(self, "stage", _check_stage_spec(self.stage))
        s(self, "planet", _check_planet(self.planet))
        s(self, "vehicle", _vehicle(self.vehicle, self.version, self.planet))
        hz = self.control_hz
        if isinstance(hz, bool) or not isinstance(hz, (int, float, np.integer, np.floating)):
            raise ConfigError("control_hz", hz, "must be a number")
        if hz not in CONTROL_HZ_CHOICES:
            raise ConfigError(
                "control_hz",
                _short_repr(hz),
                f"must divide the 480 Hz physics rate and lie in 10..60 Hz: one of "
                f"{', '.join(map(str, CONTROL_HZ_CHOICES))}",
            )
        s(self, "control_hz", int(hz))
        s(self, "reward_weights", _from(RewardWeights, self.reward_weights, "reward_weights"))
        s(self, "termination", _from(TerminationConfig, self.termination, "termination"))
        r = RandomizeConfig() if self.randomize is True else self.randomize
        off = r is None or r is False
        s(self, "randomize", None if off else _from(RandomizeConfig, r, "randomize"))
        s(self, "random_stage", _check_random_stage(self.random_stage))
        for name in ("discrete_actions", *OBS_SWITCHES):  # and the observation blocks' switches
            on = getattr(self, name)
            if not isinstance(on, (bool, np.bool_)):
                raise ConfigError(name, on, "must be a bool")
            s(self, name, bool(on))
        if self.render_mode not in (None, "human", "rgb_array"):
            raise ConfigError(
                "render_mode", self.render_mode, "must be None, 'human' or 'rgb_array'"
            )

    @property
    def substeps(self) -> int:
        """Physics substeps per control step."""
        return 480 // self.control_hz

    @property
    def dt_s(self) -> float:
        """Control period (s)."""
        return self.substeps / 480.0

    def digest(self) -> str:
        """Identifies the settings that shape an episode: blake2b of :func:`config_to_kwargs`
        with every stage given by its content digest (so a stage given by path, as a
        :class:`tracks.Stage` or embedded in a replay digests the same). Replays store it and
        ``set_state`` checks it; ``render_mode`` does not count."""
        cached = self.__dict__.get("_digest")
        if cached is None:
            kw = config_to_kwargs(self, for_digest=True)
            text = json.dumps(kw, sort_keys=True, separators=(",", ":"))
            cached = hashlib.blake2b(text.encode(), digest_size=16).hexdigest()
            object.__setattr__(self, "_digest", cached)  # frozen: computed once per config
        return cached

    def replace(self, **changes: Any) -> RallyConfig:
        return dataclasses.replace(self, **changes)

    def __repr__(self) -> str:
        # v0 configs print as they did before ``version`` and ``planet`` existed
        parts = [
            f"{f.name}={getattr(self, f.name)!r}"
            for f in fields(self)
            if f.name not in ("version", "planet", *OBS_SWITCHES)
            or getattr(self, f.name) != f.default
        ]
        return f"RallyConfig({', '.join(parts)})"

    @property
    def env_id(self) -> str:
        """The first registered id of this config's version (:data:`LEGACY_ENV_IDS`
        ``[version]``, ``"Rally-v0"``, ...), what replay files record as ``env_id``;
        :data:`ENV_IDS` ``[version]`` is the id that names the model."""
        return LEGACY_ENV_IDS[self.version]


def _check_one_stage(v: Any, fld: str) -> Any:
    from tracks import Stage

    if fld != "stage" and isinstance(v, str) and v == "random":
        raise ConfigError(fld, v, "'random' cannot be part of a list")
    if isinstance(v, Stage):
        return v
    if isinstance(v, os.PathLike):
        return os.fspath(v)
    if isinstance(v, str) and v:
        return v
    raise ConfigError(
        fld, v, "must be a stage name, 'gen-<seed>', a path to a stage file or a tracks.Stage"
    )


def _check_stage_spec(v: Any) -> Any:
    if isinstance(v, str) and v == "random":
        return v
    if isinstance(v, (list, tuple)):
        if not v:
            raise ConfigError("stage", v, "a list of stages must not be empty")
        return tuple(_check_one_stage(x, f"stage[{i}]") for i, x in enumerate(v))
    return _check_one_stage(v, "stage")


def _is_int(v: Any) -> bool:
    """Whether ``v`` is an integer (Python's or numpy's) and not a bool."""
    return isinstance(v, (int, np.integer)) and not isinstance(v, bool)


def _count(owner: str, name: str, v: Any, lo: int, hi: int) -> int:
    if not _is_int(v):
        raise ConfigError(f"{owner}.{name}", v, "must be an integer")
    if not lo <= int(v) <= hi:
        raise ConfigError(f"{owner}.{name}", v, f"must be in [{lo}, {hi}]")
    return int(v)


#: ``random_stage``'s settings: the check of each and its range.
_RANDOM_STAGE_CHECKS: dict[str, tuple[Any, Any, Any]] = {
    "length_m": (_real, MIN_RANDOM_LENGTH_M, MAX_RANDOM_LENGTH_M),
    "difficulty": (_range_pair, 0.0, 1.0),
    "num_levels": (_count, 1, 2**31),
    "pool": (_count, 1, MAX_POOL),
    "start_level": (_count, 0, 2**31 - 1),
    "pool_steps": (_count, 1, 2**31 - 1),
    "loops": (_real, 0.0, 1.0),
    "laps": (_count, 1, MAX_RANDOM_LAPS),
}


def _check_random_stage(v: Any) -> dict[str, Any]:
    if v is None:
        v = {}
    if not isinstance(v, dict):
        raise ConfigError("random_stage", v, "must be a dict with length_m and/or difficulty")
    out = dict(RANDOM_STAGE_DEFAULTS)
    for k, x in v.items():
        _no_unknown({k: x}, _RANDOM_STAGE_CHECKS, "random_stage.", "setting")
        if x is not None or k not in ("num_levels", "pool"):  # None: no level set, no pool
            check, lo, hi = _RANDOM_STAGE_CHECKS[k]
            out[k] = check("random_stage", k, x, lo, hi)
    out["difficulty"] = _range_pair("random_stage", "difficulty", out["difficulty"], 0.0, 1.0)

    def bad(k: str, rule: str) -> ConfigError:
        return ConfigError(f"random_stage.{k}", out[k], rule)

    levels = out.get("num_levels") is not None
    if "start_level" in out and not levels:
        raise bad("start_level", "needs num_levels (a level set)")
    top = out.get("start_level", 0) + (out["num_levels"] if levels else 0)
    if top > 2**31:
        raise bad(
            "num_levels",
            f"start_level + num_levels = {top} passes the generator's seed range 2**31",
        )
    if out.get("pool") is not None:
        if levels:
            raise bad("pool", "a stage pool and a level set exclude each other")
        n, steps = out["pool"], out.setdefault("pool_steps", DEFAULT_POOL_STEPS)
        if n > MAX_POOL_PER_STEP * steps:
            raise bad(
                "pool",
                f"a window of {n} stages every {steps} env steps draws more than "
                f"{MAX_POOL_PER_STEP} stages a step: make pool_steps at least "
                f"{-(-n // MAX_POOL_PER_STEP)} or the pool at most {MAX_POOL_PER_STEP * steps}",
            )
    elif "pool_steps" in out:
        raise bad("pool_steps", "needs pool (a pool size)")
    # ``loops``: the share of closed loops among random stages, of ``laps`` laps
    if "loops" not in out:
        if "laps" in out:
            raise bad("laps", "needs loops (a share of loops)")
        return out
    if levels:
        raise bad("loops", "a level set has no loops (its levels are fixed)")
    if out["length_m"] < MIN_LOOP_LENGTH_M:
        rule = f"a loop's lap must be at least {MIN_LOOP_LENGTH_M:g} m (random_stage.loops is set)"
        raise bad("length_m", rule)
    out.setdefault("laps", DEFAULT_RANDOM_LAPS)
    return out


def pool_record_problem(p: Any, seed_may_be_none: bool = False) -> str | None:
    """What is wrong with a stage pool's record as a state or a replay keeps it,
    ``{"seed": an int in [0, 2**128), "clock": an int in [0, 2**62)}`` (a state's seed may
    be None: no reset has drawn one yet), or None if nothing is."""

    def whole(v: Any, top: int) -> bool:
        return _is_int(v) and 0 <= v < top

    if not isinstance(p, dict) or set(p) != {"seed", "clock"}:
        return "must be a dict of 'seed' and 'clock'"
    if not ((seed_may_be_none and p["seed"] is None) or whole(p["seed"], 2**128)):
        return f"'seed' must be an integer in [0, 2**128), got {p['seed']!r}"
    if not whole(p["clock"], 2**62):
        return f"'clock' must be an integer in [0, 2**62), got {p['clock']!r}"
    return None


# ----------------------------------------------------------------- the config's JSON form
def jsonable(v: Any) -> Any:
    """``v`` with tuples as lists, dict keys as strings and numpy scalars as Python ones."""
    if isinstance(v, (tuple, list)):
        return [jsonable(x) for x in v]
    if isinstance(v, dict):
        return {str(k): jsonable(x) for k, x in v.items()}
    if isinstance(v, (np.floating, float)):
        return float(v)
    if isinstance(v, (np.integer, np.bool_)):
        return v.item()
    return v


def _stage_json(spec: Any, for_digest: bool) -> Any:
    import tracks
    from tracks.io import is_stage_name, stage_from_dict

    if isinstance(spec, tuple):
        return [_stage_json(s, for_digest) for s in spec]
    if isinstance(spec, tracks.Stage):
        doc = spec.to_dict()
    elif isinstance(spec, str) and not is_stage_name(spec) and os.path.exists(spec):
        doc = tracks.load_stage(spec).to_dict()
    else:
        return spec  # a library name, "gen-<seed>" or "random"
    if for_digest:  # the content digest of the embedded form, as a replay reads it back
        return {"digest": stage_from_dict(doc, "<replay>").digest()}
    return {"embedded": doc}


def _vehicle_diff(v: VehicleParams, base: VehicleParams, v1: bool, for_digest: bool) -> dict:
    """The fields of ``v`` that differ from ``base``, as JSON; on Rally-v1 its tire curves
    by their set's name and its drivetrain as a dict (see :func:`config_to_kwargs`)."""
    out: dict[str, Any] = {}
    for f in fields(v):
        a, b = getattr(v, f.name), getattr(base, f.name)
        if a == b:
            continue
        if f.name == "wheels":
            a = [dataclasses.asdict(w) for w in a]
        elif f.name == "tires" and v1 and a is not None:
            from physics.curves import TIRE_SETS

            if TIRE_SETS.get(a.name) == a:
                a = {"tire_set": a.name}
            elif for_digest:
                a = {"custom": hashlib.blake2b(repr(a).encode(), digest_size=16).hexdigest()}
            else:
                raise ConfigError(
                    "vehicle.tires",
                    a.name,
                    "custom tire curves have no JSON form (use a library set: "
                    f"{', '.join(sorted(TIRE_SETS))})",
                )
        elif f.name == "drivetrain" and v1 and a is not None:
            a = {"drivetrain": dataclasses.asdict(a)}
        out[f.name] = jsonable(a)
    return out


def config_to_kwargs(config: RallyConfig, for_digest: bool = False) -> dict[str, Any]:
    """The JSON form of a config: every constructor argument except ``render_mode`` (which
    does not shape a run), as replays store it.

    Stage files and :class:`tracks.Stage` objects are embedded (their file schema), so the
    form needs nothing but itself; version 0 configs carry no ``version``/``planet`` keys
    (their form predates them).

    Args:
        config: the config.
        for_digest: stages by their content digest instead of embedded, and custom tire
            curves (which have no JSON form) by a digest of their values: the form
            :meth:`RallyConfig.digest` hashes.

    Raises:
        ConfigError: the vehicle has custom tire curves (only when not ``for_digest``).
    """
    rnd, v = config.randomize, config.vehicle
    extra: dict[str, Any] = {}
    if config.version == 0:  # "rover", or the fields that differ from it (gravity included)
        vjson: Any = "rover" if v == ROVER else _vehicle_diff(v, ROVER, False, False)
    else:
        # a library vehicle by name with its planet; any other as its fields that differ from
        # the v1 rover, already on its planet (so the planet is recorded as None, not applied
        # twice)
        planet, vjson = config.planet, library_name(v, config.planet)
        if vjson is None:
            planet, vjson = None, _vehicle_diff(v, default_vehicle(1), True, for_digest)
        extra = {"version": int(config.version), "planet": planet}
    return {
        **extra,
        "stage": _stage_json(config.stage, for_digest),
        "vehicle": vjson,
        "control_hz": int(config.control_hz),
        "reward_weights": reward_weights_json(config.reward_weights),
        "termination": jsonable(dataclasses.asdict(config.termination)),
        "randomize": None if rnd is None else jsonable(dataclasses.asdict(rnd)),
        "random_stage": jsonable(config.random_stage),
        "discrete_actions": bool(config.discrete_actions),
        # observation blocks, not part of a run: recorded only when on (so a form without
        # them keeps its digest)
        **{name: True for name in OBS_SWITCHES if getattr(config, name)},
    }
