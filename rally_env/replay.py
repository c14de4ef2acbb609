"""Replays: bit-exact re-runs, ghosts, and verifying a claimed stage time by re-simulation.

The simulator is deterministic (fixed 1/480 s substep, no libm transcendentals, seeded noise,
per-car RNG streams), so an episode is fully determined by the env's constructor arguments, the
RNG stream of the reset and the actions. A replay file stores exactly that, plus what the run
claims (finish time, checkpoint times, end reason) and state hashes every ``hash_every`` control
steps and at the end; :func:`verify` re-simulates from the file alone and accepts it only if
every hash and every claimed time match bit for bit.

    import gymnasium as gym
    import rally_env
    from rally_env.replay import RecordReplay, load_replay, verify

    env = RecordReplay(gym.make("Rally-v0", stage="opener"), directory="replays")
    obs, info = env.reset(seed=0)
    ...                      # every finished episode is saved as replays/<...>.rrp.json.gz
    report = verify(load_replay("replays/opener-....rrp.json.gz"))
    assert report.accepted, report.message

A replay file is data (JSON, optionally gzip), never pickle; see ``docs/replays.md`` for the
format. Bad files raise a :class:`ReplayError` (a ``ValueError``) naming the problem.
"""

from __future__ import annotations

import base64
import copy
import dataclasses
import functools
import gzip
import hashlib
import io
import json
import math
import os
import time
import zlib
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np

from physics import layout as L
from rally_env import kernels as K
from rally_env.errors import RallyEnvError

FORMAT = "rally-replay"
#: Version of the replay file format this code writes and reads.
FORMAT_VERSION = 1
#: Largest replay accepted (decompressed bytes): 32 MiB.
MAX_REPLAY_BYTES = 32 * 1024 * 1024
#: Default: a state hash every this many control steps (1 s at 20 Hz).
DEFAULT_HASH_EVERY = 20
#: Longest action sequence accepted (control steps): 24 h at 60 Hz.
MAX_STEPS = 60 * 3600 * 24
ENV_IDS = ("Rally-v0", "Rally-v1")
SUFFIX = ".rrp.json.gz"


# ------------------------------------------------------------------------------------ errors
class ReplayError(RallyEnvError):
    """A replay file or object is unusable: the message names the file and the problem."""


class ReplayFormatError(ReplayError):
    """The file is malformed: not JSON, truncated, a field missing or of the wrong type."""


class ReplayVersionError(ReplayError):
    """The file is a replay of another format version (or physics layout)."""


class ReplayTooLargeError(ReplayError):
    """The file (decompressed) exceeds :data:`MAX_REPLAY_BYTES`."""


class ReplayRecordError(ReplayError):
    """The env cannot be recorded (e.g. an action-changing wrapper below the recorder)."""


@functools.lru_cache(maxsize=1)
def package_version() -> str:
    """The installed rally-env version (a source checkout: pyproject.toml's)."""
    try:
        from importlib.metadata import version

        return version("rally-env")
    except Exception:
        pass
    try:
        import tomllib

        pp = Path(__file__).resolve().parents[1] / "pyproject.toml"
        return str(tomllib.loads(pp.read_text())["project"]["version"])
    except Exception:
        return "unknown"


# ------------------------------------------------------------------------------------ hashing
_ZERO_I = (L.I_TERRAIN,)
_ZERO_EI = (K.EI_SLOT, K.EI_ROW)


def car_state_hash(core: Any, k: int) -> str:
    """blake2b of everything that shapes car ``k``'s future, independent of the batch.

    Covers the physics state and parameter rows, the env's per-car state, timing, reward,
    termination and observation; the indices that only say *where* in a batch the car lives
    (terrain-set row, stage slot) are zeroed, so car ``k`` of a vector env and the single env
    reproducing it hash the same.
    """
    h = hashlib.blake2b(digest_size=16)
    sim = core.sim
    # the batch's own widths: N_STATE for basic vehicles, N_STATE_EXT for extended ones
    h.update(
        np.asarray(
            [L.LAYOUT_VERSION, sim.state.shape[1], sim.istate.shape[1], K.N_E, K.N_EI], np.int64
        )
    )
    h.update(np.ascontiguousarray(sim.state[k], np.float64).tobytes())
    ist = sim.istate[k].copy()
    ist[list(_ZERO_I)] = 0
    h.update(ist.tobytes())
    h.update(np.ascontiguousarray(sim.params[k], np.float64).tobytes())
    h.update(np.ascontiguousarray(core.estate[k]).tobytes())
    ei = core.eistate[k].copy()
    ei[list(_ZERO_EI)] = 0
    h.update(ei.tobytes())
    nl = core.lines_of(k)
    h.update(np.ascontiguousarray(core.etimes[k, :nl]).tobytes())
    h.update(np.ascontiguousarray(core.obs[k]).tobytes())
    h.update(np.asarray([core.rew[k]], np.float64).tobytes())
    h.update(np.asarray([core.term[k], core.trunc[k]], np.bool_).tobytes())
    return h.hexdigest()


def _digest_text(s: str) -> str:
    return hashlib.blake2b(s.encode(), digest_size=16).hexdigest()


def vehicle_digest(vehicle: Any) -> str:
    """Digest of a :class:`physics.VehicleParams` (every field)."""
    return _digest_text(repr(vehicle))


# -------------------------------------------------------------------- config <-> JSON kwargs
def _jsonable(v: Any) -> Any:
    if isinstance(v, (tuple, list)):
        return [_jsonable(x) for x in v]
    if isinstance(v, dict):
        return {str(k): _jsonable(x) for k, x in v.items()}
    if isinstance(v, (np.floating, float)):
        return float(v)
    if isinstance(v, (np.integer,)):
        return int(v)
    if isinstance(v, np.bool_):
        return bool(v)
    return v


def _stage_spec_json(spec: Any) -> Any:
    import tracks

    if isinstance(spec, tracks.Stage):
        return {"embedded": spec.to_dict()}
    if isinstance(spec, tuple):
        return [_stage_spec_json(s) for s in spec]
    if isinstance(spec, str) and os.path.exists(spec):
        return {"embedded": tracks.load_stage(spec).to_dict()}
    return spec


def _vehicle_json(v: Any) -> Any:
    from physics import ROVER

    if v == ROVER:
        return "rover"
    out: dict[str, Any] = {}
    for f in dataclasses.fields(v):
        a, b = getattr(v, f.name), getattr(ROVER, f.name)
        if a != b:
            if f.name == "wheels":
                a = [dataclasses.asdict(w) for w in a]
            out[f.name] = _jsonable(a)
    return out


def _vehicle_json_v1(v: Any, planet: str | None) -> tuple[Any, str | None]:
    """Rally-v1's JSON form of a vehicle and the planet to record: a library vehicle by name
    (with its planet), any other as its fields that differ from the v1 default rover, already
    on its planet (so the planet is recorded as None and not applied twice)."""
    from rally_env.config import default_vehicle, library_name

    name = library_name(v, planet)
    if name is not None:
        return name, planet
    base = default_vehicle(1)
    out: dict[str, Any] = {}
    for f in dataclasses.fields(v):
        a, b = getattr(v, f.name), getattr(base, f.name)
        if a == b:
            continue
        if f.name == "wheels":
            a = [dataclasses.asdict(w) for w in a]
        elif f.name == "tires" and a is not None:
            from physics.curves import TIRE_SETS

            if TIRE_SETS.get(a.name) != a:
                raise ReplayRecordError(
                    "custom tire curves cannot be recorded in a replay (use a library set: "
                    f"{', '.join(sorted(TIRE_SETS))})"
                )
            a = {"tire_set": a.name}
        elif f.name == "drivetrain" and a is not None:
            a = {"drivetrain": dataclasses.asdict(a)}
        out[f.name] = _jsonable(a)
    return out, None


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


def config_to_kwargs(config: Any) -> dict[str, Any]:
    """The JSON form of a :class:`rally_env.RallyConfig`: every constructor argument except
    ``render_mode`` (which does not shape a run). Stage files and ``tracks.Stage`` objects are
    embedded (their file schema), so a replay needs nothing but itself. Version 0 configs
    carry no ``version``/``planet`` keys (their form predates them)."""
    rnd = config.randomize
    version = getattr(config, "version", 0)
    planet = getattr(config, "planet", None)
    extra: dict[str, Any] = {}
    if version == 0:
        vjson = _vehicle_json(config.vehicle)  # already on its planet (gravity in the diff)
    else:
        vjson, planet = _vehicle_json_v1(config.vehicle, planet)
        extra = {"version": int(version), "planet": planet}
    return {
        **extra,
        "stage": _stage_spec_json(config.stage),
        "vehicle": vjson,
        "control_hz": int(config.control_hz),
        "reward_weights": _jsonable(dataclasses.asdict(config.reward_weights)),
        "termination": _jsonable(dataclasses.asdict(config.termination)),
        "randomize": None if rnd is None else _jsonable(dataclasses.asdict(rnd)),
        "random_stage": _jsonable(config.random_stage),
        "discrete_actions": bool(config.discrete_actions),
    }


def _digest_form(v: Any) -> Any:
    """Stage spec JSON with embedded stages replaced by their content digest."""
    if isinstance(v, list):
        return [_digest_form(x) for x in v]
    if isinstance(v, dict) and "embedded" in v:
        from tracks.io import stage_from_dict

        return {"digest": stage_from_dict(v["embedded"], "<replay>").digest()}
    return v


def config_digest(config: Any) -> str:
    """Digest of a config's replay form (:func:`config_to_kwargs`), stages by content: the same
    for a stage given by path, as a ``tracks.Stage`` or embedded in a replay."""
    kw = config_to_kwargs(config)
    kw["stage"] = _digest_form(kw["stage"])
    return _digest_text(json.dumps(kw, sort_keys=True, separators=(",", ":")))


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


def _stage_kind(spec: Any) -> str:
    if isinstance(spec, str):
        if spec == "random":
            return "random"
        if spec.startswith("gen-"):
            return "generated"
        return "library"
    if isinstance(spec, list):
        return "list"
    return "embedded"


# ----------------------------------------------------------------------------- action codec
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


# ----------------------------------------------------------------------------------- Replay
def _time_json(t: Any) -> float | None:
    if t is None:
        return None
    t = float(t)
    return t if math.isfinite(t) else None


@dataclass
class Replay:
    """One recorded episode (see ``docs/replays.md`` for the file format).

    Attributes:
        env_kwargs: JSON form of every constructor argument (:func:`config_to_kwargs`).
        reset: how the episode's RNG stream starts: ``{"seed": s, "car_index": k}`` (what
            ``RallyEnv.reset(seed=s, options={"car_index": k})`` uses), ``{"entropy": e,
            "spawn_key": [...]}`` or ``{"rng_state": PCG64 state}`` (an episode after an
            autoreset / unseeded reset).
        actions: (T, 4) float32 (continuous) or (T,) int32 (discrete) actions, exactly what the
            env got.
        hash_every: a state hash is stored after every ``hash_every`` control steps.
        hashes: :func:`car_state_hash` after steps ``hash_every``, ``2 hash_every``, ...
        initial_hash, final_hash: the hash after the reset and after the last action.
        end_reason: ``info["end_reason"]`` after the last action ('' if the episode was cut
            short by a reset).
        finish_time_s: claimed exact finish time (s) or ``None``.
        checkpoint_times_s: claimed checkpoint times (s, ``None`` = not crossed).
        stage: ``{"name", "digest", "kind"}`` of the stage the car drove on.
        vehicle_digest, config_digest: identify the vehicle parameters and the whole config.
        env_id, control_hz, package_version, format_version, meta: as named; ``meta`` is free
            data (player, created_utc, recorder).
    """

    env_kwargs: dict[str, Any]
    reset: dict[str, Any]
    actions: np.ndarray
    hash_every: int
    hashes: list[str]
    initial_hash: str
    final_hash: str
    end_reason: str
    finish_time_s: float | None
    checkpoint_times_s: list[float | None]
    stage: dict[str, Any]
    vehicle_digest: str
    config_digest: str
    env_id: str = "Rally-v0"
    control_hz: int = 20
    stage_time_s: float = 0.0
    terminated: bool = False
    truncated: bool = False
    package_version: str = field(default_factory=package_version)
    format_version: int = FORMAT_VERSION
    meta: dict[str, Any] = field(default_factory=dict)

    @property
    def steps(self) -> int:
        return int(self.actions.shape[0])

    @property
    def finished(self) -> bool:
        return self.end_reason == "finished" and self.finish_time_s is not None

    def run_id(self) -> str:
        """Identifies the run (settings, stage, reset, actions), not its metadata."""
        h = hashlib.blake2b(digest_size=16)
        h.update(self.config_digest.encode())
        h.update(self.stage.get("digest", "").encode())
        h.update(self.initial_hash.encode())  # the reset's effect, not how it was asked for
        h.update(self.actions.dtype.str.encode())
        h.update(np.ascontiguousarray(self.actions).tobytes())
        return h.hexdigest()

    def to_dict(self) -> dict[str, Any]:
        """The file's JSON document (a deep copy: editing it leaves the replay alone)."""
        return copy.deepcopy(self._doc())

    def _doc(self) -> dict[str, Any]:
        return {
            "format": FORMAT,
            "format_version": self.format_version,
            "package_version": self.package_version,
            "physics_layout_version": L.LAYOUT_VERSION,
            "env_id": self.env_id,
            "env_kwargs": self.env_kwargs,
            "config_digest": self.config_digest,
            "stage": self.stage,
            "vehicle_digest": self.vehicle_digest,
            "control_hz": self.control_hz,
            "reset": self.reset,
            "steps": self.steps,
            "actions": encode_actions(self.actions),
            "hash_every": self.hash_every,
            "initial_hash": self.initial_hash,
            "hashes": list(self.hashes),
            "final_hash": self.final_hash,
            "result": {
                "end_reason": self.end_reason,
                "terminated": self.terminated,
                "truncated": self.truncated,
                "stage_time_s": self.stage_time_s,
                "finish_time_s": _time_json(self.finish_time_s),
                "checkpoint_times_s": [_time_json(t) for t in self.checkpoint_times_s],
            },
            "meta": self.meta,
        }

    def to_bytes(self, compress: bool = True) -> bytes:
        raw = json.dumps(self._doc(), separators=(",", ":"), allow_nan=False).encode()
        return gzip.compress(raw, 6, mtime=0) if compress else raw

    def save(self, path: str | os.PathLike[str], compress: bool | None = None) -> Path:
        """Write the replay (gzip unless the name ends in ``.json`` or ``compress=False``);
        atomically (a temporary file renamed into place)."""
        p = Path(path)
        if compress is None:
            compress = not p.name.endswith(".json")
        data = self.to_bytes(compress)
        p.parent.mkdir(parents=True, exist_ok=True)
        tmp = p.with_name(p.name + ".tmp")
        tmp.write_bytes(data)
        os.replace(tmp, p)
        return p

    def default_name(self) -> str:
        t = self.finish_time_s
        tt = f"{t:09.3f}s" if t is not None else (self.end_reason or "partial")
        return f"{self.stage.get('name', 'stage')}-{tt}-{self.run_id()[:10]}{SUFFIX}"


save_replay = Replay.save


# ----------------------------------------------------------------------------------- loading
def _read_limited(path: Path) -> bytes:
    try:
        with open(path, "rb") as f:
            head = f.read(2)
            f.seek(0)
            if head == b"\x1f\x8b":
                try:
                    with gzip.GzipFile(fileobj=f) as g:
                        data = g.read(MAX_REPLAY_BYTES + 1)
                except (OSError, EOFError, zlib.error) as e:
                    raise ReplayFormatError(
                        f"{path}: truncated or corrupt gzip data ({e})"
                    ) from None
            else:
                data = f.read(MAX_REPLAY_BYTES + 1)
    except ReplayError:
        raise
    except OSError as e:
        raise ReplayError(f"{path}: cannot read the file ({e.strerror or e})") from None
    if len(data) > MAX_REPLAY_BYTES:
        raise ReplayTooLargeError(
            f"{path}: larger than the {MAX_REPLAY_BYTES // (1024 * 1024)} MiB replay limit"
        )
    return data


def load_replay(path: str | os.PathLike[str]) -> Replay:
    """Read and validate a replay file (gzip or plain JSON).

    Raises:
        ReplayError: (or a subclass) naming the file and the problem: unreadable, too large,
            truncated, not JSON, not a replay, another format version, a field missing or
            malformed.
    """
    p = Path(path)
    data = _read_limited(p)
    return replay_from_bytes(data, str(p))


def replay_from_bytes(data: bytes, where: str = "<replay>") -> Replay:
    if len(data) > MAX_REPLAY_BYTES:
        raise ReplayTooLargeError(f"{where}: larger than the replay limit")
    if data[:2] == b"\x1f\x8b":
        try:
            with gzip.GzipFile(fileobj=io.BytesIO(data)) as g:
                data = g.read(MAX_REPLAY_BYTES + 1)
        except (OSError, EOFError, zlib.error) as e:
            raise ReplayFormatError(f"{where}: truncated or corrupt gzip data ({e})") from None
        if len(data) > MAX_REPLAY_BYTES:
            raise ReplayTooLargeError(f"{where}: larger than the replay limit")
    if not data.strip():
        raise ReplayFormatError(f"{where}: the file is empty")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise ReplayFormatError(f"{where}: not a text (UTF-8 JSON) file") from None
    try:
        doc = json.loads(text, parse_constant=_no_constants)
    except json.JSONDecodeError as e:
        end = e.pos >= len(text.rstrip()) or e.msg.startswith("Unterminated string")
        what = "truncated" if end else "malformed"
        raise ReplayFormatError(
            f"{where}: {what} JSON (line {e.lineno}, column {e.colno}: {e.msg})"
        ) from None
    except ValueError as e:
        raise ReplayFormatError(f"{where}: {e}") from None
    except RecursionError:
        raise ReplayFormatError(f"{where}: JSON nested too deeply") from None
    return replay_from_dict(doc, where)


def _no_constants(name: str) -> Any:
    raise ValueError(f"JSON constant {name} is not allowed in a replay")


def _field(doc: dict, key: str, kind: Any, where: str, what: str) -> Any:
    v = doc[key]
    ok = isinstance(v, kind) and not (isinstance(v, bool) and kind in (int, (int, float)))
    if not ok:
        raise ReplayFormatError(f"{where}: field {key!r} must be {what}, got {v!r:.60}")
    return v


_REQUIRED = (
    "format_version",
    "env_id",
    "env_kwargs",
    "config_digest",
    "stage",
    "vehicle_digest",
    "control_hz",
    "reset",
    "steps",
    "actions",
    "hash_every",
    "initial_hash",
    "hashes",
    "final_hash",
    "result",
)


def _is_hash(h: Any) -> bool:
    return isinstance(h, str) and len(h) == 32 and all(c in "0123456789abcdef" for c in h)


def replay_from_dict(doc: Any, where: str = "<replay>") -> Replay:
    """Validate a decoded replay document and build the :class:`Replay`."""
    if not isinstance(doc, dict):
        raise ReplayFormatError(f"{where}: not a rally replay (top level is not a JSON object)")
    if doc.get("format") != FORMAT:
        raise ReplayFormatError(
            f"{where}: not a rally replay (field 'format' is {doc.get('format')!r}, "
            f"expected {FORMAT!r})"
        )
    ver = doc.get("format_version")
    if ver != FORMAT_VERSION:
        raise ReplayVersionError(
            f"{where}: replay format version {ver!r} is not supported "
            f"(this rally-env {package_version()} reads version {FORMAT_VERSION})"
        )
    missing = [k for k in _REQUIRED if k not in doc]
    if missing:
        raise ReplayFormatError(f"{where}: missing field(s) {', '.join(missing)}")
    lv = doc.get("physics_layout_version", L.LAYOUT_VERSION)
    if lv != L.LAYOUT_VERSION:
        raise ReplayVersionError(
            f"{where}: recorded with physics layout v{lv!r}, this physics is v{L.LAYOUT_VERSION}"
        )
    env_id = _field(doc, "env_id", str, where, "a string")
    if env_id not in ENV_IDS:
        raise ReplayFormatError(f"{where}: unknown env_id {env_id!r} (known: {', '.join(ENV_IDS)})")
    kw = _field(doc, "env_kwargs", dict, where, "an object")
    for k in ("config_digest", "vehicle_digest", "initial_hash", "final_hash"):
        if not _is_hash(doc[k]):
            raise ReplayFormatError(f"{where}: field {k!r} must be a 32-digit hex digest")
    stage = _field(doc, "stage", dict, where, "an object")
    if not isinstance(stage.get("name"), str) or not _is_hash(stage.get("digest")):
        raise ReplayFormatError(f"{where}: field 'stage' must have a 'name' and a hex 'digest'")
    hz = _field(doc, "control_hz", int, where, "an integer")
    reset = _field(doc, "reset", dict, where, "an object")
    _check_reset(reset, where)
    steps = _field(doc, "steps", int, where, "an integer")
    actions = decode_actions(doc["actions"], f"{where}: actions")
    if steps != actions.shape[0]:
        raise ReplayFormatError(
            f"{where}: field 'steps' is {steps} but the actions hold {actions.shape[0]} steps"
        )
    if actions.dtype.kind == "f" and not np.isfinite(actions).all():
        bad = int(np.flatnonzero(~np.isfinite(actions).all(axis=1))[0])
        raise ReplayFormatError(f"{where}: action {bad} is not finite")
    every = _field(doc, "hash_every", int, where, "an integer")
    if every < 1:
        raise ReplayFormatError(f"{where}: field 'hash_every' must be >= 1, got {every}")
    hashes = _field(doc, "hashes", list, where, "a list")
    if len(hashes) != steps // every:
        raise ReplayFormatError(
            f"{where}: {len(hashes)} intermediate hashes, but {steps} steps every {every} "
            f"need {steps // every}"
        )
    for i, h in enumerate(hashes):
        if not _is_hash(h):
            raise ReplayFormatError(f"{where}: hashes[{i}] is not a 32-digit hex digest")
    res = _field(doc, "result", dict, where, "an object")
    end = res.get("end_reason", "")
    if not isinstance(end, str) or (end and end not in K.END_REASONS):
        raise ReplayFormatError(f"{where}: result.end_reason {end!r} is not a known end reason")
    ft = res.get("finish_time_s")
    if ft is not None and (
        isinstance(ft, bool) or not isinstance(ft, (int, float)) or not math.isfinite(ft)
    ):
        raise ReplayFormatError(f"{where}: result.finish_time_s must be a number or null")
    cps = res.get("checkpoint_times_s", [])
    if not isinstance(cps, list) or not all(
        c is None or (isinstance(c, (int, float)) and not isinstance(c, bool)) for c in cps
    ):
        raise ReplayFormatError(f"{where}: result.checkpoint_times_s must be a list of numbers")
    meta = doc.get("meta", {})
    if not isinstance(meta, dict):
        raise ReplayFormatError(f"{where}: field 'meta' must be an object")
    pv = doc.get("package_version", "unknown")
    return Replay(
        env_kwargs=kw,
        reset=reset,
        actions=actions,
        hash_every=every,
        hashes=list(hashes),
        initial_hash=doc["initial_hash"],
        final_hash=doc["final_hash"],
        end_reason=end,
        finish_time_s=None if ft is None else float(ft),
        checkpoint_times_s=[None if c is None else float(c) for c in cps],
        stage=stage,
        vehicle_digest=doc["vehicle_digest"],
        config_digest=doc["config_digest"],
        env_id=env_id,
        control_hz=hz,
        stage_time_s=float(res.get("stage_time_s", 0.0) or 0.0),
        terminated=bool(res.get("terminated", False)),
        truncated=bool(res.get("truncated", False)),
        package_version=str(pv),
        meta=meta,
    )


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _check_reset(r: dict, where: str) -> None:
    if "seed" in r:
        if not _is_int(r["seed"]) or r["seed"] < 0 or not _is_int(r.get("car_index", 0)):
            raise ReplayFormatError(f"{where}: reset.seed / reset.car_index must be integers >= 0")
        if r.get("car_index", 0) < 0:
            raise ReplayFormatError(f"{where}: reset.car_index must be >= 0")
    elif "entropy" in r:
        sk = r.get("spawn_key", [])
        if not _is_int(r["entropy"]) or r["entropy"] < 0 or not isinstance(sk, list):
            raise ReplayFormatError(f"{where}: reset.entropy / reset.spawn_key are malformed")
        if not all(_is_int(x) and x >= 0 for x in sk):
            raise ReplayFormatError(f"{where}: reset.spawn_key must be integers >= 0")
    elif "rng_state" in r:
        try:
            _generator_from_state(r["rng_state"])
        except Exception:
            raise ReplayFormatError(f"{where}: reset.rng_state is not a PCG64 state") from None
    else:
        raise ReplayFormatError(f"{where}: reset needs 'seed', 'entropy' or 'rng_state'")


def _generator_from_state(state: Any) -> np.random.Generator:
    if not isinstance(state, dict) or state.get("bit_generator") != "PCG64":
        raise ValueError("not a PCG64 state")
    bg = np.random.PCG64()
    bg.state = state
    return np.random.Generator(bg)


# --------------------------------------------------------------------------- re-simulation
def _make_env(replay: Replay) -> Any:
    from rally_env.env import RallyEnv

    args = kwargs_to_env_args(replay.env_kwargs)
    want = ENV_IDS.index(replay.env_id) if replay.env_id in ENV_IDS else 0
    if args.get("version", 0) != want:
        raise ReplayFormatError(
            f"env_kwargs.version {args.get('version', 0)!r} does not match env_id {replay.env_id!r}"
        )
    try:
        return RallyEnv(**args)
    except ReplayError:
        raise
    except (ValueError, TypeError, OSError) as e:
        raise ReplayFormatError(f"the replay's env_kwargs do not build an env: {e}") from None


def _reset_env(env: Any, reset: dict[str, Any]) -> None:
    core = env.core
    if "seed" in reset:
        env.reset(seed=int(reset["seed"]), options={"car_index": int(reset.get("car_index", 0))})
        return
    if "entropy" in reset:
        ss = np.random.SeedSequence(int(reset["entropy"]), spawn_key=tuple(reset["spawn_key"]))
        gen = np.random.Generator(np.random.PCG64(ss))
    else:
        gen = _generator_from_state(reset["rng_state"])
    core.rngs[0] = gen  # reset(seed=None) continues the car's stream: start it from here
    env.reset()


class Resim:
    """A re-simulation of a replay in a private single env, one control step at a time.

    Attributes:
        env: the :class:`rally_env.RallyEnv` (N = 1) running the replay.
        t: control steps done.
        info: the last info dict.
    """

    def __init__(self, replay: Replay):
        self.replay = replay
        self.env = _make_env(replay)
        _reset_env(self.env, replay.reset)
        self.t = 0
        self.done = False
        self.info = self.env.core.info_one(0)
        self.terminated = False
        self.truncated = False

    @property
    def core(self) -> Any:
        return self.env.core

    def state_hash(self) -> str:
        return car_state_hash(self.env.core, 0)

    def step(self) -> bool:
        """Apply the next recorded action; False when the actions are exhausted or the
        episode ended."""
        if self.done or self.t >= self.replay.steps:
            return False
        a = self.replay.actions[self.t]
        if a.ndim == 0:
            a = int(a)
        _, _, term, trunc, info = self.env.step(a)
        self.t += 1
        self.info = info
        self.terminated, self.truncated = term, trunc
        if term or trunc:
            self.done = True
        return True


# --------------------------------------------------------------------------------- verify
@dataclass
class VerifyReport:
    """Outcome of :func:`verify`.

    Attributes:
        accepted: every hash, the end reason, the finish time and the checkpoint times match.
        reason: '' when accepted, else a short code (``stage_mismatch``, ``config_mismatch``,
            ``vehicle_mismatch``, ``initial_hash``, ``hash_mismatch``, ``ended_early``,
            ``final_hash``, ``end_reason``, ``finish_time``, ``checkpoint_times``,
            ``invalid_action``, ``bad_replay``).
        message: one human sentence.
        step: first control step where it diverged (``None`` if not tied to a step).
        expected, got: the recorded and the re-simulated value.
    """

    accepted: bool
    reason: str = ""
    message: str = ""
    step: int | None = None
    expected: Any = None
    got: Any = None
    steps: int = 0
    stage: str = ""
    stage_digest: str = ""
    finish_time_s: float | None = None
    end_reason: str = ""
    elapsed_s: float = 0.0
    run_id: str = ""

    def to_dict(self) -> dict[str, Any]:
        return _jsonable(dataclasses.asdict(self))


def _same_time(a: float | None, b: float) -> bool:
    b = float(b)
    if a is None:
        return math.isnan(b)
    return not math.isnan(b) and float(a) == b


def verify(replay: Replay | str | os.PathLike[str]) -> VerifyReport:
    """Re-simulate a replay from its own contents and check every claim.

    Accepts only if the stage and vehicle match the digests, the hash after the reset, every
    intermediate hash and the final hash match, the episode ends exactly where the actions end
    (or not at all, for a partial replay) with the recorded end reason, and the finish and
    checkpoint times match bit for bit.

    Args:
        replay: a :class:`Replay` or a path to a replay file.

    Raises:
        ReplayError: the file cannot be read or parsed (a malformed file, not a rejection).
    """
    t0 = time.perf_counter()
    if not isinstance(replay, Replay):
        replay = load_replay(replay)
    rep = VerifyReport(
        accepted=False,
        steps=replay.steps,
        stage=str(replay.stage.get("name", "")),
        stage_digest=str(replay.stage.get("digest", "")),
        run_id=replay.run_id(),
    )

    def reject(reason: str, message: str, step=None, expected=None, got=None) -> VerifyReport:
        rep.reason, rep.message, rep.step = reason, message, step
        rep.expected, rep.got = expected, got
        rep.elapsed_s = time.perf_counter() - t0
        return rep

    try:
        sim = Resim(replay)
    except ReplayFormatError as e:
        return reject("config_mismatch", str(e))
    cfg = sim.env.config
    if cfg.control_hz != replay.control_hz:
        return reject("config_mismatch", "control_hz does not match env_kwargs")
    vd = vehicle_digest(cfg.vehicle)
    if vd != replay.vehicle_digest:
        return reject(
            "vehicle_mismatch",
            "the vehicle parameters do not match the replay's vehicle hash",
            expected=replay.vehicle_digest,
            got=vd,
        )
    cd = config_digest(cfg)
    if cd != replay.config_digest:
        return reject(
            "config_mismatch",
            "the env settings (or a stage) built from env_kwargs do not match the replay's "
            "config hash",
            expected=replay.config_digest,
            got=cd,
        )
    core = sim.core
    slot = int(core.eistate[0, K.EI_SLOT])
    st = core.bank.slots[slot]
    if st.digest() != replay.stage["digest"]:
        return reject(
            "stage_mismatch",
            f"stage {st.name!r} here has content hash {st.digest()}, the replay was driven on "
            f"{replay.stage.get('name')!r} with hash {replay.stage['digest']}",
            expected=replay.stage["digest"],
            got=st.digest(),
        )
    h = sim.state_hash()
    if h != replay.initial_hash:
        return reject(
            "initial_hash",
            "the state after the reset differs (another reset seed, stage or settings)",
            0,
            replay.initial_hash,
            h,
        )
    every = replay.hash_every
    n = replay.steps
    for t in range(n):
        if sim.done:
            return reject(
                "ended_early",
                f"the episode ended ({sim.info['end_reason']}) at step {t}, but the replay has "
                f"{n} actions",
                t,
                n,
                t,
            )
        try:
            sim.step()
        except gym.error.InvalidAction as e:
            return reject("invalid_action", f"action {t} is invalid: {e}", t)
        if (t + 1) % every == 0:
            h = sim.state_hash()
            want = replay.hashes[(t + 1) // every - 1]
            if h != want:
                lo = t + 1 - every
                return reject(
                    "hash_mismatch",
                    f"state hash after step {t + 1} differs: the run diverged in steps "
                    f"{lo + 1}..{t + 1} (an action, the stage or the physics changed)",
                    t + 1,
                    want,
                    h,
                )
    info = sim.info
    h = sim.state_hash()
    if h != replay.final_hash:
        return reject("final_hash", "the final state hash differs", n, replay.final_hash, h)
    end = info["end_reason"] if sim.done else ""
    if end != replay.end_reason:
        return reject(
            "end_reason",
            f"the episode ends with {end!r}, the replay claims {replay.end_reason!r}",
            n,
            replay.end_reason,
            end,
        )
    ft = info["finish_time_s"]
    if not _same_time(replay.finish_time_s, ft):
        return reject(
            "finish_time",
            f"claimed finish time {replay.finish_time_s!r} s, re-simulated {_time_json(ft)!r} s",
            n,
            replay.finish_time_s,
            _time_json(ft),
        )
    cps = list(info["checkpoint_times_s"])
    if len(cps) != len(replay.checkpoint_times_s) or not all(
        _same_time(a, b) for a, b in zip(replay.checkpoint_times_s, cps, strict=True)
    ):
        return reject(
            "checkpoint_times",
            "claimed checkpoint times differ from the re-simulated ones",
            n,
            replay.checkpoint_times_s,
            [_time_json(c) for c in cps],
        )
    rep.accepted = True
    rep.message = (
        f"verified: {rep.stage} "
        + (f"finished in {ft:.3f} s" if not math.isnan(ft) else f"{end or 'partial run'}")
        + f", {n} steps, every hash matches"
    )
    rep.finish_time_s = _time_json(ft)
    rep.end_reason = end
    rep.elapsed_s = time.perf_counter() - t0
    return rep


# --------------------------------------------------------------------------------- recording
class _Episode:
    """The episode being recorded for one car."""

    __slots__ = ("actions", "hashes", "initial_hash", "reset", "stage")

    def __init__(self, reset: dict[str, Any], initial_hash: str, stage: dict[str, Any]):
        self.reset = reset
        self.initial_hash = initial_hash
        self.stage = stage
        self.actions: list[Any] = []
        self.hashes: list[str] = []


def _reset_spec(ss: Any, rng: Any) -> dict[str, Any]:
    if isinstance(ss, np.random.SeedSequence):
        ent = ss.entropy
        key = tuple(int(x) for x in ss.spawn_key)
        if isinstance(ent, (int, np.integer)) and len(key) == 1:
            return {"seed": int(ent), "car_index": key[0]}
        if isinstance(ent, (int, np.integer)):
            return {"entropy": int(ent), "spawn_key": list(key)}
        raise ReplayRecordError("a reset seed must be an integer to be recorded")
    return {"rng_state": _jsonable(rng.bit_generator.state)}


_PASSTHROUGH = ("PassiveEnvChecker", "OrderEnforcing", "TimeLimit", "RecordEpisodeStatistics")


def _check_chain(env: Any) -> None:
    e = env
    while isinstance(e, gym.Wrapper):
        if isinstance(e, (gym.ActionWrapper,)) or (
            type(e).__name__ not in _PASSTHROUGH and "action" in type(e).__name__.lower()
        ):
            raise ReplayRecordError(
                f"{type(e).__name__} changes actions below RecordReplay: wrap it outside "
                "(RecordReplay must see the actions the env gets)"
            )
        e = e.env


class _Recorder:
    """Shared per-car recording logic: hooks the core's reset so every reset of every car
    (explicit, autoreset in NextStep or SameStep mode) closes and opens episodes."""

    def __init__(
        self,
        base: Any,
        directory: str | os.PathLike[str] | None,
        hash_every: int,
        keep: int,
        on_replay: Callable[[Replay], Any] | None,
        meta: dict[str, Any] | None,
        save_partial: bool,
        recorder: str,
    ):
        from rally_env.env import RallyEnv
        from rally_env.vector import RallyVectorEnv

        if not isinstance(base, (RallyEnv, RallyVectorEnv)):
            raise ReplayRecordError(
                f"RecordReplay records Rally-v0 envs, got {type(base).__name__}"
            )
        if isinstance(hash_every, bool) or not isinstance(hash_every, int) or hash_every < 1:
            raise ValueError(f"hash_every must be an integer >= 1, got {hash_every!r}")
        self.base = base
        self.core = base.core
        self.kwargs = config_to_kwargs(base.config)
        self.config_digest = config_digest(base.config)
        self.vehicle_digest = vehicle_digest(base.config.vehicle)
        self.env_id = base.config.env_id
        self.stage_kind = _stage_kind(self.kwargs["stage"])
        self.discrete = base.config.discrete_actions
        self.directory = None if directory is None else Path(directory)
        self.hash_every = hash_every
        self.replays: deque[Replay] = deque(maxlen=keep)
        self.on_replay = on_replay
        self.meta = dict(meta or {})
        self.save_partial = save_partial
        self.recorder = recorder
        self.saved: list[Path] = []
        self.episodes: list[_Episode | None] = [None] * self.core.n
        self._orig_reset = self.core.reset
        self._orig_set_state = self.core.set_state
        self.core.reset = self._hooked_reset  # instance attributes shadow the methods
        self.core.set_state = self._hooked_set_state

    def close(self) -> None:
        for k in range(self.core.n):
            self.finish(k, partial=True)
        for name in ("reset", "set_state"):
            if name in self.core.__dict__:
                delattr(self.core, name)

    def _hooked_set_state(self, st: Any) -> None:
        """A restored state is not reachable from a recorded reset: drop the open episodes
        (recording resumes at the next reset)."""
        self._orig_set_state(st)
        self.episodes = [None] * self.core.n

    def _stage_of(self, k: int) -> dict[str, Any]:
        st = self.core.bank.slots[int(self.core.eistate[k, K.EI_SLOT])]
        return {"name": st.name, "digest": st.digest(), "kind": self.stage_kind}

    def _hooked_reset(self, cars: np.ndarray, seeds: list[Any]) -> None:
        core = self.core
        seeds = list(seeds) if seeds is not None else [None] * len(cars)
        specs = []
        for i, k in enumerate(cars):
            k = int(k)
            self.finish(k, partial=True)
            ss = seeds[i]
            if ss is None and core.rngs[k] is None:
                ss = np.random.SeedSequence()  # record fresh entropy instead of losing it
                seeds[i] = ss
            specs.append(_reset_spec(ss, core.rngs[k]))
        self._orig_reset(cars, seeds)
        for i, k in enumerate(cars):
            k = int(k)
            self.episodes[k] = _Episode(specs[i], car_state_hash(core, k), self._stage_of(k))

    def record(self, k: int, action: Any) -> None:
        """Append car ``k``'s action (before or after the step; :meth:`hash_due` hashes)."""
        ep = self.episodes[k]
        if ep is not None:
            ep.actions.append(action)

    def hash_due(self, k: int) -> None:
        """After a step: store the state hash if car ``k`` is at a multiple of hash_every."""
        ep = self.episodes[k]
        if ep is not None and len(ep.hashes) < len(ep.actions) // self.hash_every:
            ep.hashes.append(car_state_hash(self.core, k))

    def unrecord(self, k: int) -> None:
        ep = self.episodes[k]
        if ep is not None and ep.actions:
            ep.actions.pop()

    def finish(self, k: int, partial: bool = False) -> Replay | None:
        """Close car ``k``'s episode (ended, or cut short by a reset when ``partial``)."""
        ep = self.episodes[k]
        if ep is None:
            return None
        self.hash_due(k)  # SameStep: the car ends inside the step, before the wrapper hashes
        self.episodes[k] = None
        core = self.core
        if partial and not ep.actions:
            return None
        info = core.info_one(k)
        ended = bool(core.term[k] or core.trunc[k])
        if partial and not ended and not self.save_partial:
            return None
        if self.discrete:
            acts = np.asarray(ep.actions, np.int32).reshape(-1)
        else:
            acts = np.asarray(ep.actions, np.float32).reshape(-1, 4)
        meta = dict(self.meta)
        meta.setdefault("created_utc", time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()))
        meta["recorder"] = self.recorder if core.n == 1 else f"{self.recorder} car {k}"
        cps = info["checkpoint_times_s"]
        rp = Replay(
            env_kwargs=copy.deepcopy(self.kwargs),
            reset=ep.reset,
            actions=acts,
            hash_every=self.hash_every,
            hashes=ep.hashes,
            initial_hash=ep.initial_hash,
            final_hash=car_state_hash(core, k),
            end_reason=info["end_reason"] if ended else "",
            finish_time_s=_time_json(info["finish_time_s"]),
            checkpoint_times_s=[_time_json(c) for c in cps],
            stage=ep.stage,
            vehicle_digest=self.vehicle_digest,
            config_digest=self.config_digest,
            env_id=self.env_id,
            control_hz=int(self.base.config.control_hz),
            stage_time_s=float(info["stage_time_s"]),
            terminated=bool(core.term[k]),
            truncated=bool(core.trunc[k]),
            meta=meta,
        )
        self.replays.append(rp)
        if self.directory is not None:
            self.saved.append(rp.save(self.directory / rp.default_name()))
        if self.on_replay is not None:
            self.on_replay(rp)
        return rp


def _as_f32(action: Any) -> Any:
    try:
        a = np.asarray(action)
        if a.dtype.kind in "fiu":
            return a.astype(np.float32)
    except Exception:
        pass
    return action


class RecordReplay(gym.Wrapper):
    """Record every episode of a ``Rally-v0`` env as a :class:`Replay`.

    Works on the single env (``RallyEnv`` or ``gym.make("Rally-v0")``) and, given a
    :class:`rally_env.RallyVectorEnv`, returns a :class:`RecordVectorReplay` recording each car's
    episodes separately (every autoreset mode); a vector car's replay verifies as a single env.

    Continuous actions are cast to float32 (the action space's dtype) before they reach the
    env, so the recorded actions are exactly the applied ones. Put this wrapper directly on the
    env: a wrapper that changes actions below it makes the replay wrong (refused).

    Args:
        env: the env.
        directory: if set, every finished replay is saved there (``<stage>-<time>-<id>``).
        hash_every: a state hash every this many control steps.
        keep: how many finished replays :attr:`replays` keeps (oldest dropped).
        on_replay: called with each finished :class:`Replay`.
        meta: extra data stored in each replay's ``meta`` (e.g. ``{"player": "ada"}``).
        save_partial: also keep episodes cut short by a reset or ``close()``.

    Attributes:
        replays: the finished replays, oldest first.
        saved: paths written.
    """

    def __new__(cls, env: Any, *args: Any, **kwargs: Any):
        if isinstance(env, gym.vector.VectorEnv):
            return RecordVectorReplay(env, *args, **kwargs)
        return super().__new__(cls)

    def __init__(
        self,
        env: gym.Env,
        directory: str | os.PathLike[str] | None = None,
        hash_every: int = DEFAULT_HASH_EVERY,
        keep: int = 1000,
        on_replay: Callable[[Replay], Any] | None = None,
        meta: dict[str, Any] | None = None,
        save_partial: bool = False,
    ):
        super().__init__(env)
        _check_chain(env)
        self._rec = _Recorder(
            env.unwrapped, directory, hash_every, keep, on_replay, meta, save_partial, "RallyEnv"
        )

    @property
    def replays(self) -> deque[Replay]:
        return self._rec.replays

    @property
    def saved(self) -> list[Path]:
        return self._rec.saved

    @property
    def config(self) -> Any:
        """The wrapped env's :class:`~rally_env.RallyConfig` (drop-in for code reading it)."""
        return self._rec.base.config

    @property
    def core(self) -> Any:
        """The wrapped env's :class:`~rally_env.core.RallyCore` (read it, never step it)."""
        return self._rec.core

    def step(self, action: Any):
        rec = self._rec
        a = action if rec.discrete else _as_f32(action)
        active = rec.episodes[0] is not None and not (rec.core.term[0] or rec.core.trunc[0])
        out = self.env.step(a)
        if active:
            rec.record(0, int(np.asarray(a)) if rec.discrete else np.asarray(a, np.float32))
            rec.hash_due(0)
            if out[2] or out[3]:
                rec.finish(0)
        return out

    def close(self) -> None:
        self._rec.close()
        super().close()


class RecordVectorReplay(gym.vector.VectorWrapper):
    """:class:`RecordReplay` for a :class:`rally_env.RallyVectorEnv`: one replay per car
    episode (car ``k``'s replay resets like ``RallyEnv.reset(seed, options={"car_index": k})``
    or from the car's recorded RNG state after an autoreset). Same arguments."""

    def __init__(
        self,
        env: Any,
        directory: str | os.PathLike[str] | None = None,
        hash_every: int = DEFAULT_HASH_EVERY,
        keep: int = 1000,
        on_replay: Callable[[Replay], Any] | None = None,
        meta: dict[str, Any] | None = None,
        save_partial: bool = False,
    ):
        super().__init__(env)
        self._rec = _Recorder(
            env.unwrapped,
            directory,
            hash_every,
            keep,
            on_replay,
            meta,
            save_partial,
            "RallyVectorEnv",
        )

    @property
    def replays(self) -> deque[Replay]:
        return self._rec.replays

    @property
    def saved(self) -> list[Path]:
        return self._rec.saved

    def step(self, actions: Any):
        rec = self._rec
        core = rec.core
        n = core.n
        a = actions if rec.discrete else _as_f32(actions)
        arr = np.asarray(a)
        # cars whose episode is open and running get this step's action; cars that ended
        # last step are reset by this step (NextStep) and ignore it
        running = [
            k
            for k in range(n)
            if rec.episodes[k] is not None and not (core.term[k] or core.trunc[k])
        ]
        try:
            for k in running:
                rec.record(k, int(arr[k]) if rec.discrete else arr[k].astype(np.float32))
        except (IndexError, TypeError, ValueError):
            for k in running:
                rec.unrecord(k)
            running = []
            return self.env.step(actions)  # let the env raise its own error
        before = list(rec.episodes)
        try:
            out = self.env.step(a)
        except Exception:
            for k in running:
                rec.unrecord(k)
            raise
        term, trunc = out[2], out[3]
        for k in running:
            rec.hash_due(k)
            # NextStep / Disabled: the ended car still holds its final state; SameStep
            # already closed it inside the step (the reset hook)
            if (term[k] or trunc[k]) and rec.episodes[k] is before[k]:
                rec.finish(k)
        return out

    def close(self, **kwargs: Any) -> None:
        self._rec.close()
        super().close(**kwargs)


# ------------------------------------------------------------------------------------ ghosts
class Ghost:
    """A replay re-simulated in step with a live run: one control step per :meth:`step`.

    A ghost is a re-run, not a recording of poses: it steps its own private single env with
    the replay's actions (bit-exact), and stays at its final pose after its last action.

    Attributes:
        replay: the replay.
        label: a name for the HUD (``meta["player"]``, else the finish time).
    """

    def __init__(self, replay: Replay | str | os.PathLike[str], label: str | None = None):
        if not isinstance(replay, Replay):
            replay = load_replay(replay)
        self.replay = replay
        self._sim = Resim(replay)
        if label is None:
            label = str(replay.meta.get("player") or "") or (
                f"{replay.finish_time_s:.2f} s" if replay.finish_time_s is not None else "ghost"
            )
        self.label = label

    @property
    def t(self) -> int:
        return self._sim.t

    @property
    def info(self) -> dict[str, Any]:
        return self._sim.info

    @property
    def done(self) -> bool:
        return self._sim.done or self._sim.t >= self.replay.steps

    @property
    def batch(self) -> Any:
        """The ghost's :class:`physics.VehicleBatch` (N = 1), for ``render.views.car_views``."""
        return self._sim.core.sim

    def step(self) -> bool:
        return self._sim.step()

    def pose(self) -> dict[str, Any]:
        """Plain pose data: ``x_m, y_m, z_m, quat`` (w, x, y, z), ``heading_rad``,
        ``speed_mps``, ``time_s``, ``progress_m``, ``done``."""
        s = self._sim.core.sim.state[0]
        w, x, y, z = (float(s[i]) for i in (L.QUAT_W, L.QUAT_X, L.QUAT_Y, L.QUAT_Z))
        heading = math.atan2(2.0 * (w * z + x * y), 1.0 - 2.0 * (y * y + z * z))
        info = self._sim.info
        return {
            "x_m": float(s[L.POS_X]),
            "y_m": float(s[L.POS_Y]),
            "z_m": float(s[L.POS_Z]),
            "quat": (w, x, y, z),
            "heading_rad": heading,
            "speed_mps": float(info["speed_mps"]),
            "time_s": float(info["stage_time_s"]),
            "progress_m": float(info["progress_m"]),
            "done": self.done,
        }

    def view(self) -> Any:
        """A ``rally_env.render.views.CarView`` of the ghost (imports the renderer's data
        module lazily; no pygame)."""
        from rally_env.render.views import car_views

        return car_views(self._sim.core.sim, [0])[0]


class GhostSet:
    """Several ghosts advanced together, one control step per live step.

    ``ghosts = GhostSet(["best.rrp.json.gz", "mine.rrp.json.gz"])``; after every live
    ``env.step`` call ``ghosts.step()``, then hand ``ghosts.views()`` (``CarView`` list) or
    ``ghosts.poses()`` to the renderer. Ghosts must share the live run's control rate
    (checked by :meth:`check_compatible`).
    """

    def __init__(self, replays: Iterable[Replay | str | os.PathLike[str]]):
        self.ghosts = [r if isinstance(r, Ghost) else Ghost(r) for r in replays]

    def __len__(self) -> int:
        return len(self.ghosts)

    def __iter__(self) -> Iterator[Ghost]:
        return iter(self.ghosts)

    def check_compatible(self, env: Any) -> None:
        """Raise :class:`ReplayError` if a ghost was recorded at another control rate or on
        another stage than ``env`` (a ``RallyEnv``, possibly wrapped)."""
        base = env.unwrapped
        hz = base.config.control_hz
        core = base.core
        st = core.bank.slots[int(core.eistate[0, K.EI_SLOT])]
        for g in self.ghosts:
            if g.replay.control_hz != hz:
                raise ReplayError(
                    f"ghost {g.label!r} runs at {g.replay.control_hz} Hz, the live run at {hz} Hz"
                )
            if st is not None and g.replay.stage.get("digest") != st.digest():
                raise ReplayError(
                    f"ghost {g.label!r} was driven on {g.replay.stage.get('name')!r} "
                    f"({g.replay.stage.get('digest')}), not on this stage {st.name!r}"
                )

    def step(self) -> None:
        for g in self.ghosts:
            g.step()

    def poses(self) -> list[dict[str, Any]]:
        return [g.pose() for g in self.ghosts]

    def views(self) -> list[Any]:
        return [g.view() for g in self.ghosts]


def ghost_poses(replay: Replay | str | os.PathLike[str]) -> Iterator[dict[str, Any]]:
    """Yield the ghost's :meth:`Ghost.pose` after the reset and after every control step."""
    g = Ghost(replay)
    yield g.pose()
    while g.step():
        yield g.pose()


def ghost_from_replay(replay: Replay | str | os.PathLike[str]) -> Any:
    """Re-simulate a replay into the renderer's ghost trajectory
    (:class:`rally_env.render.ghost.Ghost`: one pose per control step, from the re-run, not
    from anything stored in the file), ready for ``EnvRenderer(ghosts=[...])``."""
    from rally_env.render.ghost import GhostRecorder

    if not isinstance(replay, Replay):
        replay = load_replay(replay)
    sim = Resim(replay)
    player = str(replay.meta.get("player") or "")
    rec = GhostRecorder(
        str(replay.stage.get("name", "")),
        meta={"source": "replay", "run_id": replay.run_id(), "player": player},
    )
    rec.sample(sim.core.sim, 0)
    while sim.t < replay.steps and not sim.done:
        a = replay.actions[sim.t]
        sim.step()
        rec.sample(sim.core.sim, 0, None if a.ndim == 0 else a)
    info = sim.info
    ft = float(info["finish_time_s"])
    return rec.ghost(tuple(float(c) for c in info["checkpoint_times_s"]), ft)


def load_any_ghost(path: str | os.PathLike[str]) -> Any:
    """A renderer ghost from a replay file (re-simulated) or a legacy ``.npz`` ghost file."""
    p = Path(path)
    if p.suffix == ".npz":
        from rally_env.render.ghost import load_ghost

        return load_ghost(p)
    return ghost_from_replay(p)


# --------------------------------------------------------------------------------------- CLI
def add_subcommands(subparsers: Any) -> None:
    """Add ``replay``, ``verify`` and ``leaderboard`` to the ``rally`` command line."""
    p = subparsers.add_parser(
        "verify",
        help="re-simulate a replay and accept or reject its claimed time",
        description="Re-simulates FILE from its own contents; exit code 0 if every state "
        "hash, the end reason, the finish time and the checkpoint times match, 1 if it is "
        "rejected, 2 if the file is unusable.",
    )
    p.add_argument("file", help="replay file (.rrp.json.gz or .json)")
    p.add_argument("--json", action="store_true", help="print the report as JSON")
    p.set_defaults(func=_cmd_verify)

    p = subparsers.add_parser(
        "replay",
        help="re-simulate a replay and show it (window) or render it (--video)",
    )
    p.add_argument("file", help="replay file")
    p.add_argument("--video", help="write the run to this .mp4/.gif instead of a window")
    p.add_argument("--text", action="store_true", help="print a summary per second, no window")
    p.add_argument("--ghost", action="append", default=[], help="also draw this replay (repeat)")
    p.add_argument("--width", type=int, default=600)
    p.add_argument("--height", type=int, default=400)
    p.add_argument("--camera", default="car-up")
    p.set_defaults(func=_cmd_replay)

    p = subparsers.add_parser("leaderboard", help="local leaderboard of verified times")
    sub = p.add_subparsers(dest="leaderboard_command", required=True)
    a = sub.add_parser("add", help="verify replays and store them")
    a.add_argument("files", nargs="+", help="replay files")
    a.add_argument("--db", help="database file (default $RALLY_LEADERBOARD or ~/.local/share)")
    a.add_argument("--player", help="player name (default: the replay's meta.player)")
    a.add_argument("--json", action="store_true")
    a.set_defaults(func=_cmd_lb_add)
    s = sub.add_parser("show", help="print the verified best times of a stage")
    s.add_argument("--stage", required=True, help="stage name, e.g. opener")
    s.add_argument("--db", help="database file")
    s.add_argument("--limit", type=int, default=10, help="entries per class (default 10)")
    s.add_argument("--rules", choices=("all", "standard"), default="all")
    s.add_argument(
        "--all-versions", action="store_true", help="include runs on other stage versions"
    )
    s.add_argument("--json", action="store_true")
    s.set_defaults(func=_cmd_lb_show)


def _err(msg: str) -> int:
    import sys

    print(f"rally: error: {msg}", file=sys.stderr)
    return 2


def _cmd_verify(args: Any) -> int:
    try:
        rep = verify(args.file)
    except ReplayError as e:
        if args.json:
            print(json.dumps({"accepted": False, "reason": "bad_replay", "message": str(e)}))
            return 2
        return _err(str(e))
    if args.json:
        print(json.dumps(rep.to_dict(), indent=2))
    elif rep.accepted:
        print(f"ACCEPTED  {rep.message} (re-simulated in {rep.elapsed_s:.3f} s)")
    else:
        where = f" at step {rep.step}" if rep.step is not None else ""
        print(f"REJECTED{where}: {rep.reason}: {rep.message}")
        if rep.expected is not None or rep.got is not None:
            print(f"  expected {rep.expected!r}\n  got      {rep.got!r}")
    return 0 if rep.accepted else 1


def _cmd_replay(args: Any) -> int:
    try:
        replay = load_replay(args.file)
        ghosts = [load_any_ghost(g) for g in args.ghost]
        sim = Resim(replay)
    except ValueError as e:  # ReplayError, GhostFileError: a message naming the file
        return _err(str(e))
    hz = replay.control_hz
    if args.text or (args.video is None and not _can_show()):
        if not args.text:
            print("(no display: printing the run; use --video out.mp4 to render it)")
        _print_run(sim, hz)
    else:
        try:
            _show_run(sim, hz, args, ghosts)
        except KeyboardInterrupt:
            return 130
        except Exception as e:
            from gymnasium.error import DependencyNotInstalled

            if isinstance(e, DependencyNotInstalled):
                return _err(str(e))
            raise
    rep = verify(replay)
    print(("ACCEPTED  " if rep.accepted else f"REJECTED ({rep.reason})  ") + rep.message)
    return 0 if rep.accepted else 1


def _can_show() -> bool:
    from rally_env.render._deps import _has_display

    return _has_display()


def _print_run(sim: Resim, hz: int) -> None:
    def line() -> None:
        i = sim.info
        print(
            f"t={i['stage_time_s']:7.2f} s  progress {i['progress_m']:8.1f} / "
            f"{i['stage_length_m']:.0f} m  speed {i['speed_mps'] * 3.6:6.1f} km/h"
            + (f"  {i['end_reason']}" if i["end_reason"] else "")
        )

    line()
    while sim.step():
        if sim.t % hz == 0 or sim.done:
            line()
    i = sim.info
    if not math.isnan(i["finish_time_s"]):
        print(f"finish {i['finish_time_s']:.3f} s")


def _show_run(sim: Resim, hz: int, args: Any, ghosts: list[Any]) -> None:
    from rally_env.render import EnvRenderer

    mode = "rgb_array" if args.video else "human"
    r = EnvRenderer(
        mode,
        fps=hz,
        width=args.width,
        height=args.height,
        camera=args.camera,
        ghosts=ghosts,
    )
    try:
        if args.video:
            from rally_env.render import VideoWriter

            with VideoWriter(args.video, fps=hz) as w:
                w.write(r.frame(sim.core))
                while sim.step():
                    w.write(r.frame(sim.core))
            print(f"wrote {args.video} ({sim.t + 1} frames at {hz} fps)")
        else:
            r.render(sim.core)
            while sim.step():
                r.render(sim.core)
    finally:
        r.close()


def _cmd_lb_add(args: Any) -> int:
    from rally_env.leaderboard import Leaderboard, LeaderboardError

    try:
        lb = Leaderboard(args.db)
    except LeaderboardError as e:
        return _err(str(e))
    status = 0
    out = []
    with lb:
        for f in args.files:
            try:
                entry, _ = lb.add(f, player=args.player)
            except LeaderboardError as e:
                status = max(status, 1)
                out.append({"file": f, "added": False, "reason": e.reason, "message": str(e)})
                if not args.json:
                    print(f"REFUSED  {f}: {e}")
                continue
            out.append({"file": f, "added": True, **entry.to_dict()})
            if not args.json:
                print(
                    f"ADDED    {f}: {entry.stage} {entry.finish_time_s:.3f} s, rank {entry.rank}"
                    f" ({'standard rules' if entry.standard else 'rules ' + entry.rules})"
                )
    if args.json:
        print(json.dumps(out, indent=2))
    return status


def _cmd_lb_show(args: Any) -> int:
    from rally_env.leaderboard import Leaderboard, LeaderboardError, format_table

    try:
        with Leaderboard(args.db) as lb:
            entries = lb.best(
                args.stage,
                digest=None if args.all_versions else "current",
                rules=None if args.rules == "all" else "standard",
                limit=args.limit,
            )
    except LeaderboardError as e:
        return _err(str(e))
    if args.json:
        print(json.dumps([e.to_dict() for e in entries], indent=2))
    else:
        print(format_table(entries))
    return 0
