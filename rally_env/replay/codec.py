"""The replay's JSON codecs: env settings (both ways) and actions.

A config becomes JSON with :func:`rally_env.config.config_to_kwargs` (the config's own JSON
form, also what :meth:`rally_env.RallyConfig.digest` hashes); :func:`kwargs_to_env_args` reads
that form back into ``RallyEnv`` arguments. Actions travel as base64 of their zlib-compressed
little-endian bytes, so they round-trip bit for bit.
"""

from __future__ import annotations

import base64
import zlib
from typing import Any

import numpy as np

from rally_env.config import config_to_kwargs, jsonable
from rally_env.replay.errors import ReplayFormatError, ReplayTooLargeError

__all__ = [
    "MAX_STEPS",
    "config_to_kwargs",
    "decode_actions",
    "encode_actions",
    "jsonable",
    "kwargs_to_env_args",
    "stage_kind",
]

#: Longest action sequence accepted (control steps): 24 h at 60 Hz.
MAX_STEPS = 60 * 3600 * 24


def _tuples(v: Any) -> Any:
    if isinstance(v, list):
        return tuple(_tuples(x) for x in v)
    return v


def _vehicle_from_json_v1(veh: dict[str, Any]) -> dict[str, Any]:
    out = dict(veh)
    t = out.get("tires")
    if isinstance(t, dict):
        from physics.curves import tire_set

        try:
            out["tires"] = tire_set(t["tire_set"])
        except Exception as e:
            raise ReplayFormatError(f"env_kwargs.vehicle.tires is invalid: {e}") from None
    d = out.get("drivetrain")
    if isinstance(d, dict):
        from physics.drivetrain import Drivetrain

        try:
            out["drivetrain"] = Drivetrain(**{k: _tuples(x) for k, x in d["drivetrain"].items()})
        except Exception as e:
            raise ReplayFormatError(f"env_kwargs.vehicle.drivetrain is invalid: {e}") from None
    for k in ("direction",):
        if k in out:
            out[k] = _tuples(out[k])
    return out


def _stage_spec_from_json(v: Any) -> Any:
    if isinstance(v, list):
        return [_stage_spec_from_json(x) for x in v]
    if isinstance(v, dict):
        if set(v) != {"embedded"} or not isinstance(v["embedded"], dict):
            raise ReplayFormatError(
                "env_kwargs.stage: an embedded stage must be {'embedded': {...}}"
            )
        from tracks.io import stage_from_dict

        try:
            return stage_from_dict(v["embedded"], "<replay>")
        except Exception as e:
            raise ReplayFormatError(
                f"env_kwargs.stage: the embedded stage is invalid: {e}"
            ) from None
    if isinstance(v, str):
        import tracks

        if v != "random" and not v.startswith("gen-") and v not in tracks.list_stages():
            # never read a path named by a file: stage files are embedded when recording
            raise ReplayFormatError(
                f"env_kwargs.stage {v!r} is not a library stage, 'gen-<seed>' or 'random' "
                "(stage files are embedded in replays, never read from a path)"
            )
        return v
    raise ReplayFormatError(f"env_kwargs.stage has the wrong type ({type(v).__name__})")


def kwargs_to_env_args(kw: dict[str, Any]) -> dict[str, Any]:
    """RallyEnv constructor arguments from :func:`config_to_kwargs` output."""
    out = dict(kw)
    out["stage"] = _stage_spec_from_json(kw.get("stage", "opener"))
    veh = kw.get("vehicle", "rover")
    if isinstance(veh, dict) and kw.get("version", 0) != 0:
        veh = _vehicle_from_json_v1(veh)
        out["vehicle"] = veh
    if isinstance(veh, dict) and "wheels" in veh:
        from physics import ROVER

        wcls = type(ROVER.wheels[0])
        try:
            veh = dict(veh)
            veh["wheels"] = tuple(
                wcls(**{k: _tuples(x) for k, x in w.items()}) for w in veh["wheels"]
            )
        except Exception as e:
            raise ReplayFormatError(f"env_kwargs.vehicle.wheels is invalid: {e}") from None
        out["vehicle"] = veh
    if isinstance(out.get("random_stage"), dict) and isinstance(
        out["random_stage"].get("difficulty"), list
    ):
        out["random_stage"] = dict(out["random_stage"])
        out["random_stage"]["difficulty"] = tuple(out["random_stage"]["difficulty"])
    if isinstance(out.get("randomize"), dict):
        out["randomize"] = {
            k: tuple(x) if isinstance(x, list) else x for k, x in out["randomize"].items()
        }
    return out


def stage_kind(spec: Any) -> str:
    if isinstance(spec, str):
        if spec == "random":
            return "random"
        if spec.startswith("gen-"):
            return "generated"
        return "library"
    if isinstance(spec, list):
        return "list"
    return "embedded"


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


def decode_actions(d: Any, where: str = "actions") -> np.ndarray:
    if not isinstance(d, dict):
        raise ReplayFormatError(f"{where} must be an object with dtype, shape, encoding, data")
    missing = [k for k in ("dtype", "shape", "encoding", "data") if k not in d]
    if missing:
        raise ReplayFormatError(f"{where} is missing {', '.join(missing)}")
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
