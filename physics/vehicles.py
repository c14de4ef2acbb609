"""Vehicle definition files (TOML, read with ``tomllib``, never executed) and the built-in
library (``physics/vehicles/*.toml``: :data:`VEHICLES`, :func:`vehicle`); the schema:
docs/vehicles.md ("The vehicle library and file format"). Every problem raises
:class:`VehicleDefError` naming the file, the field path (``wheels[2].spring_hz``) and the rule.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Collection
from dataclasses import fields
from importlib import resources
from pathlib import Path
from typing import Any

from physics import layout as L
from physics.curves import TireCurves, tire_set
from physics.drivetrain import Drivetrain
from physics.errors import ParameterError, as_finite, short_repr
from physics.files import parse_toml, read_text
from physics.params import TIRE_MODELS, VehicleParams, WheelParams

__all__ = [
    "PLANETS",
    "VEHICLES",
    "VehicleDefError",
    "load_vehicle",
    "loads_vehicle",
    "on_planet",
    "vehicle",
    "vehicle_from_dict",
]

#: Surface gravity (m/s^2) by planet name.
PLANETS: dict[str, float] = {"mars": 3.72, "earth": 9.81, "moon": 1.62}

#: Names of the built-in vehicles (files ``physics/vehicles/<name>.toml``).
VEHICLES: tuple[str, ...] = ("rover", "rally-car", "truck", "tank", "bike")

FORMAT_VERSION = 1


class VehicleDefError(ValueError):
    """A vehicle definition is invalid. Names the source, the field path and the problem.

    Attributes:
        source: file path, ``"physics/vehicles/<name>.toml"`` or ``"<dict>"``.
        field: path of the field inside the definition (``"wheels[2].spring_hz"``).
        problem: what is wrong.
    """

    def __init__(self, source: str, field: str, problem: str):
        self.source = source
        self.field = field
        self.problem = problem
        super().__init__(f"{source}: {field}: {problem}")

    def __reduce__(self):  # keep pickling working
        return (type(self), (self.source, self.field, self.problem))


# ---------------------------------------------------------------------- readers
#: Largest vehicle file read (bytes): the library's are under 4 KiB.
MAX_FILE_BYTES = 1024 * 1024


def _tname(v: Any) -> str:
    return f"{type(v).__name__} {short_repr(v)}"


def _real(v: Any, src: str, path: str) -> float:
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise VehicleDefError(src, path, f"expected a number, got {_tname(v)}")
    f = as_finite(v)
    if f is None:
        raise VehicleDefError(src, path, f"must be finite, got {short_repr(v)}")
    return f


def _typed(kind: type, what: str) -> Any:
    """A reader of a ``kind`` value (``what`` it is called in the message), returned as is."""

    def read(v: Any, src: str, path: str) -> Any:
        if not isinstance(v, kind):
            raise VehicleDefError(src, path, f"expected {what}, got {_tname(v)}")
        return v

    return read


_str = _typed(str, "a string")
_table = _typed(dict, "a table")
_BY_TYPE = {bool: _typed(bool, "true or false"), str: _str}


def _one_of(v: Any, known: Collection[str], src: str, path: str, what: str) -> str:
    if not isinstance(v, str) or v not in known:
        raise VehicleDefError(src, path, f"unknown {what} {v!r}; known: {', '.join(known)}")
    return v


def _reals(v: Any, src: str, path: str, n: int = 0, what: str = "") -> tuple[float, ...]:
    """An array of numbers (of exactly ``n`` if ``n``; ``what`` it is called in the message)."""
    if not isinstance(v, list) or (n and len(v) != n):
        raise VehicleDefError(
            src, path, f"expected {what or 'an array of numbers'}, got {_tname(v)}"
        )
    return tuple(_real(g, src, f"{path}[{j}]") for j, g in enumerate(v))


def _vec3(v: Any, src: str, path: str) -> tuple[float, ...]:
    return _reals(v, src, path, 3, "an array of 3 numbers")


def _torque_curve(v: Any, src: str, path: str) -> tuple[tuple[float, ...], ...]:
    if not isinstance(v, list):
        raise VehicleDefError(src, path, f"expected an array of [rpm, N m] pairs, got {_tname(v)}")
    return tuple(_reals(pt, src, f"{path}[{j}]", 2, "[rpm, N m]") for j, pt in enumerate(v))


def _tire_model(v: Any, src: str, path: str) -> str:
    return _one_of(_str(v, src, path), sorted(TIRE_MODELS), src, path, "tire model")


def _tires(v: Any, src: str, path: str) -> TireCurves:
    """A tire-set name: the set."""
    try:
        return tire_set(_str(v, src, path))
    except ParameterError as e:
        raise VehicleDefError(src, path, f"{v!r}: {e.rule}") from None


def _readers(cls: type, skip: set[str], **by_name: Any) -> dict[str, Any]:
    """Field -> its reader: ``by_name``'s, else by the type of its default (bool, str, else a
    number), for the fields of ``cls`` not skipped."""
    fs = [f for f in fields(cls) if f.name not in skip]
    return {f.name: by_name.get(f.name, _BY_TYPE.get(type(f.default), _real)) for f in fs}


# ---------------------------------------------------------------------- schema
_TOP_KEYS = {"format", "name", "description", "vehicle", "drivetrain", "wheels"}
#: A file's wheel gives its anchor (WheelParams' x_m, y_m, z_m) as one array.
_WHEEL = {"anchor": _vec3} | _readers(WheelParams, {"x_m", "y_m", "z_m"}, direction=_vec3)
_OPTIONAL_WHEEL = {"direction", "handbrake", "inertia_kgm2", "grip"}
_VEHICLE = _readers(VehicleParams, {"wheels", "drivetrain"}, tire_model=_tire_model, tires=_tires)
_DRIVETRAIN = _readers(Drivetrain, set(), torque_curve=_torque_curve, gears=_reals)


def _check_keys(d: dict[str, Any], allowed: Collection[str], src: str, prefix: str) -> None:
    for k in d:
        if k not in allowed:
            raise VehicleDefError(
                src, prefix + k, f"unknown field; allowed here: {', '.join(sorted(allowed))}"
            )


def _read(
    d: Any, readers: dict[str, Any], src: str, path: str, optional: Collection[str] | None = None
) -> dict[str, Any]:
    """The table ``d`` at ``path``, each field read by its reader (an unknown one refused;
    with ``optional``, a wheel's, every other field is required)."""
    d = _table(d, src, path)
    _check_keys(d, readers, src, f"{path}.")
    for k in readers if optional is not None else ():
        if k not in d and k not in optional:
            raise VehicleDefError(src, f"{path}.{k}", "required wheel field is missing")
    return {k: readers[k](v, src, f"{path}.{k}") for k, v in d.items()}


def _reraise(e: ParameterError, src: str, path: str) -> VehicleDefError:
    return VehicleDefError(src, path, f"{e.value!r}: {e.rule}")


# ---------------------------------------------------------------------- parsing
def _parse_wheel(d: Any, i: int, src: str) -> WheelParams:
    pre = f"wheels[{i}]."
    kw = _read(d, _WHEEL, src, f"wheels[{i}]", _OPTIONAL_WHEEL)
    kw["x_m"], kw["y_m"], kw["z_m"] = kw.pop("anchor")
    try:
        return WheelParams(**kw)
    except ParameterError as e:
        # the file's anchor is WheelParams' x_m, y_m and z_m
        key = "anchor" if e.field in ("x_m", "y_m", "z_m") else e.field
        raise _reraise(e, src, pre + key) from None


def vehicle_from_dict(d: dict[str, Any], source: str = "<dict>") -> VehicleParams:
    """Build a :class:`VehicleParams` from the file schema (a parsed TOML document).

    Raises:
        VehicleDefError: naming ``source``, the field path and the problem.
    """
    src = source
    d = _table(d, src, "<document>")
    _check_keys(d, _TOP_KEYS, src, "")
    if "format" in d:
        fmt = d["format"]
        if isinstance(fmt, bool) or not isinstance(fmt, int):
            raise VehicleDefError(src, "format", f"expected an integer, got {_tname(fmt)}")
        if fmt != FORMAT_VERSION:
            raise VehicleDefError(
                src, "format", f"unsupported format {fmt}; this version reads {FORMAT_VERSION}"
            )
    for k in ("name", "description"):
        if k in d:
            _str(d[k], src, k)
    kw = _read(d.get("vehicle", {}), _VEHICLE, src, "vehicle")
    if "drivetrain" in d:
        try:
            kw["drivetrain"] = Drivetrain(**_read(d["drivetrain"], _DRIVETRAIN, src, "drivetrain"))
        except ParameterError as e:
            raise _reraise(e, src, f"drivetrain.{e.field}") from None
    if "wheels" not in d:
        raise VehicleDefError(src, "wheels", "required: 1 to 8 [[wheels]] tables")
    wl = d["wheels"]
    if not isinstance(wl, list):
        raise VehicleDefError(src, "wheels", f"expected an array of tables, got {_tname(wl)}")
    if not 1 <= len(wl) <= L.MAX_WHEELS:
        raise VehicleDefError(
            src, "wheels", f"a vehicle has 1 to {L.MAX_WHEELS} wheels, got {len(wl)}"
        )
    kw["wheels"] = tuple(_parse_wheel(w, i, src) for i, w in enumerate(wl))
    try:
        return VehicleParams(**kw)
    except ParameterError as e:
        path = "drivetrain" if e.field == "drivetrain" else f"vehicle.{e.field}"
        if e.field == "wheels":
            path = "wheels[*].brake_share" if "brake" in str(e.value) else "wheels"
        raise _reraise(e, src, path) from None


def loads_vehicle(text: str, source: str = "<string>") -> VehicleParams:
    """Parse vehicle TOML text.

    Raises:
        VehicleDefError: the text is not valid TOML or a field is invalid.
    """
    return vehicle_from_dict(parse_toml(text, source, VehicleDefError, "vehicle"), source)


def load_vehicle(path: str | os.PathLike[str]) -> VehicleParams:
    """Load a vehicle definition file.

    Raises:
        VehicleDefError: the file cannot be read, is not UTF-8 TOML, or a field is invalid.
    """
    return loads_vehicle(read_text(path, MAX_FILE_BYTES, VehicleDefError), str(Path(path)))


# ---------------------------------------------------------------------- library and planets
@functools.cache
def _builtin(name: str) -> VehicleParams:
    res = resources.files("physics") / "vehicles" / f"{name}.toml"
    return loads_vehicle(res.read_text(encoding="utf-8"), f"physics/vehicles/{name}.toml")


def on_planet(params: VehicleParams, planet: str) -> VehicleParams:
    """The same vehicle under another planet's gravity (:data:`PLANETS`).

    Sets ``gravity_mps2`` and rescales ``load_ref_n`` to ``mass_kg * g / n_wheels``, the static
    load of an even corner split (so mu at rest stays mu_base; docs/vehicles.md).

    Raises:
        VehicleDefError: unknown planet (the message lists the known ones).
    """
    g = PLANETS[_one_of(planet, PLANETS, "on_planet", "planet", "planet")]
    return params.replace(gravity_mps2=g, load_ref_n=params.mass_kg * g / len(params.wheels))


def vehicle(
    name: str, *, planet: str | None = None, tire_model: str | None = None
) -> VehicleParams:
    """A built-in vehicle by name (:data:`VEHICLES`).

    Args:
        name: one of :data:`VEHICLES`.
        planet: optional :data:`PLANETS` name; see :func:`on_planet`.
        tire_model: optional override ("direct", "wheel-speed", "arcade"). A model other than
            "wheel-speed" drops the authored tire curves (they are a wheel-speed feature).

    Raises:
        VehicleDefError: unknown vehicle, planet or tire model (the message lists the known ones).
    """
    p = _builtin(_one_of(name, VEHICLES, "vehicle", "name", "vehicle"))
    if tire_model is not None:
        _one_of(tire_model, sorted(TIRE_MODELS), "vehicle", "tire_model", "tire model")
        tires = p.tires if tire_model == "wheel-speed" else None
        p = p.replace(tire_model=tire_model, tires=tires)
    if planet is not None:
        p = on_planet(p, planet)
    return p
