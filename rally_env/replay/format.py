"""The replay file: the :class:`Replay` record, its JSON document, reading and writing.

A replay is UTF-8 JSON, gzip-compressed unless the name ends in ``.json``; never pickle. See
``docs/replays.md`` for every field.
"""

from __future__ import annotations

import copy
import functools
import gzip
import hashlib
import io
import json
import math
import os
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from physics import layout as L
from rally_env import kernels as K
from rally_env.replay.codec import decode_actions, encode_actions
from rally_env.replay.errors import (
    ReplayError,
    ReplayFormatError,
    ReplayTooLargeError,
    ReplayVersionError,
)

FORMAT = "rally-replay"
#: Version of the replay file format this code writes and reads.
FORMAT_VERSION = 1
#: Largest replay accepted (decompressed bytes): 32 MiB.
MAX_REPLAY_BYTES = 32 * 1024 * 1024
#: Default: a state hash every this many control steps (1 s at 20 Hz).
DEFAULT_HASH_EVERY = 20
ENV_IDS = ("Rally-v0", "Rally-v1")
SUFFIX = ".rrp.json.gz"


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

        pp = Path(__file__).resolve().parents[2] / "pyproject.toml"
        return str(tomllib.loads(pp.read_text())["project"]["version"])
    except Exception:
        return "unknown"


def time_json(t: Any) -> float | None:
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
        end_reason: the env's end reason (``rally_env.info.end_reason(info)``) after the last
            action ('' if the episode was cut short by a reset).
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
                "finish_time_s": time_json(self.finish_time_s),
                "checkpoint_times_s": [time_json(t) for t in self.checkpoint_times_s],
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
            generator_from_state(r["rng_state"])
        except Exception:
            raise ReplayFormatError(f"{where}: reset.rng_state is not a PCG64 state") from None
    else:
        raise ReplayFormatError(f"{where}: reset needs 'seed', 'entropy' or 'rng_state'")


def generator_from_state(state: Any) -> np.random.Generator:
    if not isinstance(state, dict) or state.get("bit_generator") != "PCG64":
        raise ValueError("not a PCG64 state")
    bg = np.random.PCG64()
    bg.state = state
    return np.random.Generator(bg)
