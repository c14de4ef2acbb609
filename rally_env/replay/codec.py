"""The replay's JSON codecs: env settings (both ways: :func:`rally_env.config.config_to_kwargs`
makes the JSON form, :func:`kwargs_to_env_args` reads it back) and actions (bit for bit).
"""

from __future__ import annotations

import base64
import dataclasses
import zlib
from typing import Any

import numpy as np

from rally_env.config import RallyConfig
from rally_env.replay.budgets import DEFAULT_BUDGETS, Budgets, ReplayBudgetError, check_stage_doc
from rally_env.replay.errors import ReplayFormatError, ReplayTooLargeError

#: Longest action sequence the format can hold (control steps): 24 h at 60 Hz. What a verifier
#: accepts is far less (:class:`~rally_env.replay.budgets.Budgets`).
MAX_STEPS = 60 * 3600 * 24

#: The constructor arguments a replay may carry: exactly those that shape a run, i.e. every
#: :class:`~rally_env.config.RallyConfig` setting but ``render_mode`` (so an observation
#: block's switch added to the config is carried with no change here). A verifier builds its
#: env from these and nothing else.
ENV_KWARGS = tuple(f.name for f in dataclasses.fields(RallyConfig) if f.name != "render_mode")
_NOT_A_PATH = "(stage files are embedded in replays, never read from a path)"


def _tuples(v: Any) -> Any:
    if isinstance(v, list):
        return tuple(_tuples(x) for x in v)
    return v


def _fail(where: str, what: str) -> ReplayFormatError:
    return ReplayFormatError(f"env_kwargs.{where} {what}")


def _one_stage(v: Any, where: str, budgets: Budgets) -> Any:
    """A stage name (checked) or an embedded stage (built, after its size is checked)."""
    from tracks.io import is_stage_name, stage_from_dict

    if isinstance(v, str) and v != "random":
        if is_stage_name(v):
            return v
        what = f"{v[:80]!r} is not a library stage, 'gen-<seed>' or 'random' {_NOT_A_PATH}"
        raise _fail(where, what)
    if not isinstance(v, dict):
        raise _fail(where, "must be a stage name or an embedded stage")
    if set(v) != {"embedded"} or not isinstance(v["embedded"], dict):
        raise _fail(where, "must be a stage name or {'embedded': {...}} (an embedded stage)")
    check_stage_doc(v["embedded"], f"env_kwargs.{where}.embedded", budgets)
    try:
        return stage_from_dict(v["embedded"], "<replay>")
    except (ValueError, TypeError, OverflowError, RecursionError) as e:
        raise _fail(where, f"is not a valid stage: {e}") from None


def parse_stage_spec(v: Any, budgets: Budgets) -> Any:
    """``env_kwargs.stage`` as a ``RallyEnv`` stage argument: a library name, ``gen-<seed>``,
    ``random``, an embedded stage (built here) or a flat list of those but ``random``."""
    if not isinstance(v, list):
        if v == "random":
            return v
        if not isinstance(v, (str, dict)):
            what = f"must be a string, an object or a list, not {type(v).__name__}"
            raise _fail("stage", what)
        return _one_stage(v, "stage", budgets)
    if not v:
        raise _fail("stage", "is an empty list")
    if len(v) > budgets.max_stage_list:
        raise ReplayBudgetError(
            f"env_kwargs.stage: a list of {len(v)} stages exceeds the budget of "
            f"{budgets.max_stage_list}"
        )
    return [_one_stage(x, f"stage[{i}]", budgets) for i, x in enumerate(v)]


def _vehicle_parts(veh: dict[str, Any]) -> dict[str, Any]:
    """The nested parts of a vehicle's JSON form (wheels, tire set, drivetrain) as objects."""
    import physics
    from physics.curves import tire_set
    from physics.drivetrain import Drivetrain

    names = {f.name for f in dataclasses.fields(physics.VehicleParams)}
    for k in veh:
        if k not in names:
            raise _fail(f"vehicle.{k}", "is not a vehicle parameter")
    out = dict(veh)
    t = out.get("tires")
    if isinstance(t, dict):
        if set(t) != {"tire_set"} or not isinstance(t["tire_set"], str):
            raise _fail("vehicle.tires", "must be {'tire_set': NAME}")
        try:
            out["tires"] = tire_set(t["tire_set"])
        except (KeyError, ValueError) as e:
            raise _fail("vehicle.tires", f"is invalid: {e}") from None
    d = out.get("drivetrain")
    if isinstance(d, dict):
        if set(d) != {"drivetrain"} or not isinstance(d["drivetrain"], dict):
            raise _fail("vehicle.drivetrain", "must be {'drivetrain': {...}}")
        try:
            out["drivetrain"] = Drivetrain(**{k: _tuples(x) for k, x in d["drivetrain"].items()})
        except (ValueError, TypeError) as e:
            raise _fail("vehicle.drivetrain", f"is invalid: {e}") from None
    if "wheels" in out:
        w = out["wheels"]
        if not isinstance(w, list) or not all(isinstance(x, dict) for x in w):
            raise _fail("vehicle.wheels", "must be a list of objects")
        wcls = type(physics.ROVER.wheels[0])
        try:
            out["wheels"] = tuple(wcls(**{k: _tuples(x) for k, x in e.items()}) for e in w)
        except (ValueError, TypeError) as e:
            raise _fail("vehicle.wheels", f"is invalid: {e}") from None
    for k, x in out.items():
        if isinstance(x, list):
            out[k] = _tuples(x)
    return out


def kwargs_to_env_args(kw: Any, budgets: Budgets | None = None) -> dict[str, Any]:
    """``RallyEnv`` constructor arguments from a replay's ``env_kwargs``
    (:func:`config_to_kwargs` output), from the whitelist :data:`ENV_KWARGS` only; no stage
    file is ever opened, embedded stages are built after their size is checked
    (``docs/replays.md``, "Verification", step 4).

    Raises:
        ReplayFormatError: an unknown or malformed argument (names it).
        ReplayBudgetError: a stage list or an embedded stage over ``budgets``.
    """
    budgets = DEFAULT_BUDGETS if budgets is None else budgets
    if not isinstance(kw, dict):
        raise ReplayFormatError("env_kwargs must be an object")
    for k in kw:
        if k not in ENV_KWARGS:
            known = ", ".join(ENV_KWARGS)
            raise _fail(str(k)[:40], f"is not a setting a replay may carry ({known})")
    out = dict(kw)
    out["stage"] = parse_stage_spec(kw.get("stage", "opener"), budgets)
    veh = kw.get("vehicle", "rover")
    if isinstance(veh, dict):
        out["vehicle"] = _vehicle_parts(veh)
    elif not isinstance(veh, str):
        raise _fail("vehicle", f"must be a name or an object, not {type(veh).__name__}")
    for key in ("reward_weights", "termination", "randomize", "random_stage"):
        v = out.get(key)
        if v is not None and not isinstance(v, dict):
            raise _fail(key, f"must be an object or null, not {type(v).__name__}")
        if isinstance(v, dict):
            out[key] = {str(k): _tuples(x) for k, x in v.items()}
    return out


def stage_kind(spec: Any) -> str:
    """How ``env_kwargs.stage`` chooses the stage: ``library``, ``generated``, ``random``,
    ``list`` or ``embedded``."""
    if not isinstance(spec, str):
        return "list" if isinstance(spec, list) else "embedded"
    if spec == "random":
        return "random"
    return "generated" if spec.startswith("gen-") else "library"


def encode_actions(actions: np.ndarray) -> dict[str, Any]:
    """Exact, compact JSON form: base64 of zlib-compressed little-endian bytes."""
    a = np.ascontiguousarray(actions)
    dt = "<f4" if a.dtype.kind == "f" else "<i4"
    a = a.astype(dt, copy=False)
    return {
        "dtype": dt,
        "shape": list(a.shape),
        "encoding": "zlib+base64",
        "data": base64.b64encode(zlib.compress(a.tobytes(), 9)).decode("ascii"),
    }


def decode_actions(d: Any, where: str = "actions", steps: int | None = None) -> np.ndarray:
    """The actions of :func:`encode_actions`'s form, checked before anything is decompressed
    (``steps``: the claimed count the shape must have)."""
    if not isinstance(d, dict):
        raise ReplayFormatError(f"{where} must be an object with dtype, shape, encoding, data")
    missing = [k for k in ("dtype", "shape", "encoding", "data") if k not in d]
    if missing or len(d) != 4:
        what = f"is missing {', '.join(missing)}" if missing else "has unknown fields"
        raise ReplayFormatError(f"{where} {what}")
    dt, shape, enc, data = d["dtype"], d["shape"], d["encoding"], d["data"]
    if dt not in ("<f4", "<i4"):
        raise ReplayFormatError(f"{where}.dtype {dt!r} is not '<f4' (float32) or '<i4' (int32)")
    if (
        not isinstance(shape, list)
        or not 1 <= len(shape) <= 2
        or not all(isinstance(x, int) and not isinstance(x, bool) and x >= 0 for x in shape)
        or (dt == "<f4" and (len(shape) != 2 or shape[1] != 4))
        or (dt == "<i4" and len(shape) != 1)
    ):
        raise ReplayFormatError(
            f"{where}.shape {shape!r} must be [steps, 4] (float32) or [steps] (int32)"
        )
    if shape[0] > MAX_STEPS:
        raise ReplayTooLargeError(f"{where}: {shape[0]} steps exceed the limit of {MAX_STEPS}")
    if steps is not None and shape[0] != steps:
        raise ReplayFormatError(
            f"{where}: field 'steps' is {steps} but the actions' shape holds {shape[0]} steps"
        )
    if enc not in ("zlib+base64", "base64"):
        raise ReplayFormatError(f"{where}.encoding {enc!r} is not 'zlib+base64' or 'base64'")
    if not isinstance(data, str):
        raise ReplayFormatError(f"{where}.data must be a base64 string")
    try:
        raw = base64.b64decode(data.encode("ascii"), validate=True)
    except Exception:
        raise ReplayFormatError(f"{where}.data is not valid base64") from None
    n_bytes = 4 * int(np.prod(shape))
    if enc == "zlib+base64":
        try:
            dec = zlib.decompressobj()
            raw = dec.decompress(raw, n_bytes + 1)
            if not dec.eof:
                raise zlib.error("truncated or oversized stream")
        except zlib.error as e:
            raise ReplayFormatError(f"{where}.data is not valid zlib data ({e})") from None
    if len(raw) != n_bytes:
        raise ReplayFormatError(
            f"{where}.data holds {len(raw)} bytes, shape {shape} needs {n_bytes}"
        )
    return np.frombuffer(raw, dtype=dt).reshape(shape).copy()
