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
from physics.files import FileReadError
from physics.files import read_regular_file as _read_regular
from rally_env import kernels as K
from rally_env.config import CONTROL_HZ_CHOICES, LEGACY_ENV_IDS, pool_record_problem
from rally_env.replay.budgets import (
    DEFAULT_BUDGETS,
    Budgets,
    ReplayBudgetError,
    bad_value,
    check_json_text,
    check_run,
    too_large,
)
from rally_env.replay.codec import decode_actions, encode_actions
from rally_env.replay.errors import (
    ReplayError,
    ReplayFormatError,
    ReplayVersionError,
)

FORMAT = "rally-replay"
#: Version of the replay file format this code writes and reads.
FORMAT_VERSION = 1
#: Largest replay accepted by default (bytes, also after gzip): 32 MiB
#: (:attr:`Budgets.max_json_bytes`).
MAX_REPLAY_BYTES = 32 * 1024 * 1024
#: Default: a state hash every this many control steps (1 s at 20 Hz).
DEFAULT_HASH_EVERY = 20
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
    """One recorded episode: the fields of a replay file (``docs/replays.md``, "File format",
    says what each holds).

    Attributes:
        actions: (T, 4) float32 (continuous) or (T,) int32 (discrete) actions, exactly what the
            env got.
        hashes: :func:`car_state_hash` after steps ``hash_every``, ``2 hash_every``, ...
        end_reason: the env's end reason after the last action ('' if cut short by a reset).
        finish_time_s, checkpoint_times_s, stage_time_s: the claimed times (s; ``None`` = not
            reached); ``meta`` is free data (player, created_utc, recorder).
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
    env_id: str = LEGACY_ENV_IDS[0]
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
        return run_id_of(
            self.config_digest, self.stage.get("digest", ""), self.initial_hash, self.actions
        )

    def to_dict(self) -> dict[str, Any]:
        """The file's JSON document (a deep copy: editing it leaves the replay alone)."""
        return copy.deepcopy(self._doc())

    def _doc(self) -> dict[str, Any]:
        times = [time_json(t) for t in self.checkpoint_times_s]
        computed = {
            "format": FORMAT,
            "physics_layout_version": L.LAYOUT_VERSION,
            "steps": self.steps,
            "actions": encode_actions(self.actions),
            "hashes": list(self.hashes),
            "result": {k: getattr(self, k) for k in RESULT_KEYS}
            | {"finish_time_s": time_json(self.finish_time_s), "checkpoint_times_s": times},
        }
        return {k: computed[k] if k in computed else getattr(self, k) for k in _FIELDS}

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


def run_id_of(config_digest: str, stage_digest: str, initial_hash: str, actions: Any) -> str:
    """:meth:`Replay.run_id` of a run's config and stage digests, the state hash after its
    reset (the reset's effect, not how it was asked for) and its actions."""
    h = hashlib.blake2b(digest_size=16)
    for part in (config_digest, stage_digest, initial_hash, actions.dtype.str):
        h.update(part.encode())
    h.update(np.ascontiguousarray(actions).tobytes())
    return h.hexdigest()


# ----------------------------------------------------------------------------------- loading
def read_regular_file(path: str | os.PathLike[str], limit: int, what: str = "file") -> bytes:
    """The bytes of a regular file of at most ``limit`` bytes
    (:func:`physics.files.read_regular_file`: a FIFO, a device such as ``/dev/zero``, a
    directory or a socket is refused at once instead of hanging or reading without end).

    Raises:
        ReplayError: not a regular file, or unreadable (names the path).
        ReplayTooLargeError: larger than ``limit``.
    """
    try:
        return _read_regular(path, limit)
    except FileReadError as e:
        if e.too_large:
            raise too_large(str(e.path), limit) from None
        raise ReplayError(str(e).replace("the file", f"the {what}", 1)) from None


def load_replay(path: str | os.PathLike[str], budgets: Budgets | None = None) -> Replay:
    """Read and validate a replay file (gzip or plain JSON).

    Args:
        path: the file (a regular file: FIFOs and devices are refused).
        budgets: limits on size and claimed work (default :data:`DEFAULT_BUDGETS`).

    Raises:
        ReplayError: (or a subclass) naming the file and the problem: unreadable, not a
            regular file, too large or over a budget, truncated, not JSON, not a replay,
            another format version, a field missing or malformed.
    """
    budgets = DEFAULT_BUDGETS if budgets is None else budgets
    data = read_regular_file(path, budgets.max_file_bytes, "replay")
    return replay_from_bytes(data, os.fspath(path), budgets)


def _gunzip(data: bytes, where: str, limit: int) -> bytes:
    try:
        with gzip.GzipFile(fileobj=io.BytesIO(data)) as g:
            out = g.read(limit + 1)
    except (OSError, EOFError, zlib.error) as e:
        raise ReplayFormatError(f"{where}: truncated or corrupt gzip data ({e})") from None
    if len(out) > limit:
        raise too_large(where, limit, " (decompressed)")
    return out


def parse_json(data: bytes, where: str, budgets: Budgets | None = None) -> Any:
    """The JSON document of a replay's bytes (gzip or not), within ``budgets``.

    Raises:
        ReplayTooLargeError: too large, or (:class:`ReplayBudgetError`) too many JSON values.
        ReplayFormatError: not gzip/UTF-8/JSON, a NaN or infinity, a number out of range or
            nesting too deep.
    """
    budgets = DEFAULT_BUDGETS if budgets is None else budgets
    if len(data) > budgets.max_file_bytes:
        raise too_large(where, budgets.max_file_bytes)
    if data[:2] == b"\x1f\x8b":
        data = _gunzip(data, where, budgets.max_json_bytes)
    check_json_text(data, where, budgets)
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
    except ValueError as e:  # a constant, or an integer of more than 4300 digits
        raise ReplayFormatError(f"{where}: {str(e)[:200]}") from None
    except RecursionError:
        raise ReplayFormatError(f"{where}: JSON nested too deeply") from None
    bad = bad_value(doc)
    if bad is not None:
        raise ReplayFormatError(f"{where}: field {bad} is not something a replay holds")
    return doc


def replay_from_bytes(
    data: bytes, where: str = "<replay>", budgets: Budgets | None = None
) -> Replay:
    """Parse and validate a replay from its bytes (gzip or plain JSON); see
    :func:`load_replay`."""
    return replay_from_dict(parse_json(data, where, budgets), where, budgets)


def _no_constants(name: str) -> Any:
    raise ValueError(f"JSON constant {name} is not allowed in a replay")


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _is_num(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _is_hash(h: Any) -> bool:
    return isinstance(h, str) and len(h) == 32 and all(c in "0123456789abcdef" for c in h)


def cut_repr(v: Any, n: int = 60) -> str:
    """``repr(v)``, cut to ``n`` characters."""
    r = repr(v)
    return r if len(r) <= n else r[: n - 3] + "..."


def _field(doc: dict, key: str, kind: Any, where: str, what: str) -> Any:
    v = doc[key]
    ok = isinstance(v, kind) and not (isinstance(v, bool) and kind in (int, (int, float)))
    if not ok:
        raise ReplayFormatError(f"{where}: field {key!r} must be {what}, got {cut_repr(v)}")
    return v


#: The document's fields, in the order the file holds them.
_FIELDS = (
    "format",
    "format_version",
    "package_version",
    "physics_layout_version",
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
    "meta",
)
_OPTIONAL = ("format", "package_version", "physics_layout_version", "meta")
_REQUIRED = tuple(k for k in _FIELDS if k not in _OPTIONAL)
RESULT_KEYS = (
    "end_reason",
    "terminated",
    "truncated",
    "stage_time_s",
    "finish_time_s",
    "checkpoint_times_s",
)
STAGE_KINDS = ("library", "generated", "random", "list", "embedded")
#: ``meta`` keys the recorders write; each must be a string.
META_STRINGS = ("player", "created_utc", "recorder", "agent")


def _check_header(doc: Any, where: str) -> None:
    if not isinstance(doc, dict):
        raise ReplayFormatError(f"{where}: not a rally replay (top level is not a JSON object)")
    if doc.get("format") != FORMAT:
        raise ReplayFormatError(
            f"{where}: not a rally replay (field 'format' is {cut_repr(doc.get('format'))}, "
            f"expected {FORMAT!r})"
        )
    ver = doc.get("format_version")
    if not _is_int(ver) or ver != FORMAT_VERSION:
        raise ReplayVersionError(
            f"{where}: replay format version {cut_repr(ver)} is not supported "
            f"(this rally-env {package_version()} reads version {FORMAT_VERSION})"
        )
    missing = [k for k in _REQUIRED if k not in doc]
    if missing:
        raise ReplayFormatError(f"{where}: missing field(s) {', '.join(missing)}")
    extra = [str(k)[:40] for k in doc if k not in _REQUIRED and k not in _OPTIONAL]
    if extra:
        raise ReplayFormatError(f"{where}: unknown field(s) {', '.join(extra)}")
    lv = doc.get("physics_layout_version", L.LAYOUT_VERSION)
    if not _is_int(lv) or lv != L.LAYOUT_VERSION:
        raise ReplayVersionError(
            f"{where}: recorded with physics layout v{cut_repr(lv)}, this physics is "
            f"v{L.LAYOUT_VERSION}"
        )
    env_id = _field(doc, "env_id", str, where, "a string")
    if env_id not in LEGACY_ENV_IDS:
        raise ReplayFormatError(
            f"{where}: unknown env_id {cut_repr(env_id)} (known: {', '.join(LEGACY_ENV_IDS)})"
        )
    pv = doc.get("package_version", "unknown")
    if not isinstance(pv, str) or len(pv) > 100:
        raise ReplayFormatError(f"{where}: field 'package_version' must be a short string")
    for k in ("config_digest", "vehicle_digest", "initial_hash", "final_hash"):
        if not _is_hash(doc[k]):
            raise ReplayFormatError(f"{where}: field {k!r} must be a 32-digit hex digest")


def _check_stage_claim(stage: Any, where: str) -> dict[str, Any]:
    if (
        not isinstance(stage, dict)
        or set(stage) - {"name", "digest", "kind"}
        or not isinstance(stage.get("name"), str)
        or not 0 < len(stage["name"]) <= 200
        or not _is_hash(stage.get("digest"))
        or stage.get("kind", "library") not in STAGE_KINDS
    ):
        raise ReplayFormatError(
            f"{where}: field 'stage' must be {{'name', 'digest', 'kind'}} with a name, a hex "
            f"digest and a kind ({', '.join(STAGE_KINDS)})"
        )
    return stage


def _check_result(res: Any, where: str) -> dict[str, Any]:
    """The :class:`Replay` fields of a valid ``result`` object."""
    if not isinstance(res, dict):
        raise ReplayFormatError(f"{where}: field 'result' must be an object")
    extra = [str(k)[:40] for k in res if k not in RESULT_KEYS]
    missing = [k for k in RESULT_KEYS if k not in res]
    if extra or missing:
        what = f"unknown {', '.join(extra)}" if extra else f"missing {', '.join(missing)}"
        raise ReplayFormatError(f"{where}: result fields: {what}")
    end, term, trunc, st, ft, cps = (res[k] for k in RESULT_KEYS)
    if not isinstance(end, str) or (end and end not in K.END_REASONS):
        raise ReplayFormatError(
            f"{where}: result.end_reason {cut_repr(end)} is not a known end reason"
        )
    if ft is not None and (not _is_num(ft) or ft < 0):
        raise ReplayFormatError(f"{where}: result.finish_time_s must be a number >= 0 or null")
    if not isinstance(cps, list) or not all(c is None or (_is_num(c) and c >= 0) for c in cps):
        raise ReplayFormatError(f"{where}: result.checkpoint_times_s must be a list of numbers")
    if not _is_num(st) or st < 0:
        raise ReplayFormatError(f"{where}: result.stage_time_s must be a number >= 0")
    if not isinstance(term, bool) or not isinstance(trunc, bool):
        raise ReplayFormatError(f"{where}: result.terminated / truncated must be true or false")
    # the claims must agree with each other (the re-simulation checks them against the run)
    want = (end not in ("", "time_limit"), end == "time_limit")
    if (term, trunc) != want or (ft is not None) != (end == "finished"):
        raise ReplayFormatError(
            f"{where}: result is inconsistent: end_reason {end!r} with terminated={term}, "
            f"truncated={trunc}, finish_time_s={cut_repr(ft)}"
        )
    times = [None if t is None else float(t) for t in (ft, *cps)]
    return dict(zip(RESULT_KEYS, (end, term, trunc, float(st), times[0], times[1:]), strict=True))


def _check_meta(meta: Any, where: str, budgets: Budgets) -> dict[str, Any]:
    if not isinstance(meta, dict):
        raise ReplayFormatError(f"{where}: field 'meta' must be an object")
    size = len(json.dumps(meta))
    if size > budgets.max_meta_bytes:
        raise ReplayBudgetError(
            f"{where}: field 'meta' is {size} bytes, over the budget of {budgets.max_meta_bytes}"
        )
    for k, v in meta.items():
        if isinstance(v, (dict, list)) or (k in META_STRINGS and not isinstance(v, str)):
            kind = "a string" if k in META_STRINGS else "a string, number, true/false or null"
            raise ReplayFormatError(f"{where}: meta.{str(k)[:40]} must be {kind}")
    return meta


def replay_from_dict(doc: Any, where: str = "<replay>", budgets: Budgets | None = None) -> Replay:
    """Validate a decoded replay document and build the :class:`Replay`.

    Every field is checked for type, range and consistency (the claims among themselves:
    steps and actions, hashes and ``hash_every``, the end reason and the times), and the
    claimed work against ``budgets``. Nothing is built from the settings here.
    """
    budgets = DEFAULT_BUDGETS if budgets is None else budgets
    _check_header(doc, where)
    kw = _field(doc, "env_kwargs", dict, where, "an object")
    stage = _check_stage_claim(doc["stage"], where)
    hz = _field(doc, "control_hz", int, where, "an integer")
    if hz not in CONTROL_HZ_CHOICES or kw.get("control_hz", 20) != hz:
        raise ReplayFormatError(
            f"{where}: field 'control_hz' {hz} must be one of {CONTROL_HZ_CHOICES} and equal "
            "env_kwargs.control_hz"
        )
    reset = _field(doc, "reset", dict, where, "an object")
    _check_reset(reset, where)
    steps = _field(doc, "steps", int, where, "an integer")
    every = _field(doc, "hash_every", int, where, "an integer")
    if steps < 0 or every < 1:
        raise ReplayFormatError(f"{where}: 'steps' must be >= 0 and 'hash_every' >= 1")
    check_run(steps, hz, every, where, budgets)
    actions = decode_actions(doc["actions"], f"{where}: actions", steps)  # holds ``steps``
    if actions.dtype.kind == "f" and not np.isfinite(actions).all():
        bad = int(np.flatnonzero(~np.isfinite(actions).all(axis=1))[0])
        raise ReplayFormatError(f"{where}: action {bad} is not finite")
    hashes = _field(doc, "hashes", list, where, "a list")
    if len(hashes) != steps // every:
        raise ReplayFormatError(
            f"{where}: {len(hashes)} intermediate hashes, but {steps} steps every {every} "
            f"need {steps // every}"
        )
    for i, h in enumerate(hashes):
        if not _is_hash(h):
            raise ReplayFormatError(f"{where}: hashes[{i}] is not a 32-digit hex digest")
    return Replay(
        env_kwargs=kw,
        reset=reset,
        actions=actions,
        hash_every=every,
        hashes=list(hashes),
        stage=stage,
        control_hz=hz,
        **_check_result(doc["result"], where),
        meta=_check_meta(doc.get("meta", {}), where, budgets),
        package_version=str(doc.get("package_version", "unknown")),
        **{k: doc[k] for k in ("initial_hash", "final_hash", "vehicle_digest", "config_digest")},
        env_id=doc["env_id"],
    )


def _check_reset(r: dict, where: str) -> None:
    keys = set(r) - {"pool"}
    problem = pool_record_problem(r["pool"]) if "pool" in r else None
    if problem:
        raise ReplayFormatError(f"{where}: reset.pool {problem}")
    if keys <= {"seed", "car_index"} and "seed" in keys:
        ok = _is_int(r["seed"]) and r["seed"] >= 0 and _is_int(r.get("car_index", 0))
        if not ok or r.get("car_index", 0) < 0 or r.get("car_index", 0) >= 2**31:
            raise ReplayFormatError(f"{where}: reset.seed / reset.car_index must be integers >= 0")
    elif keys <= {"entropy", "spawn_key"} and "entropy" in keys:
        sk = r.get("spawn_key", [])
        if not _is_int(r["entropy"]) or r["entropy"] < 0 or not isinstance(sk, list):
            raise ReplayFormatError(f"{where}: reset.entropy / reset.spawn_key are malformed")
        if len(sk) > 8 or not all(_is_int(x) and 0 <= x < 2**32 for x in sk):
            raise ReplayFormatError(f"{where}: reset.spawn_key must be integers >= 0")
    elif keys == {"rng_state"}:
        try:
            generator_from_state(r["rng_state"])
        except (ValueError, TypeError, KeyError, OverflowError):
            raise ReplayFormatError(f"{where}: reset.rng_state is not a PCG64 state") from None
    else:
        raise ReplayFormatError(
            f"{where}: reset needs 'seed' (and 'car_index'), 'entropy' (and 'spawn_key') or "
            "'rng_state', and nothing else"
        )


def generator_from_state(state: Any) -> np.random.Generator:
    """A generator in a recorded PCG64 state (``ValueError`` if it is not one)."""
    inner = state.get("state") if isinstance(state, dict) else None
    if (
        not isinstance(inner, dict)
        or state.get("bit_generator") != "PCG64"
        or set(state) != {"bit_generator", "state", "has_uint32", "uinteger"}
        or set(inner) != {"state", "inc"}
        or not all(_is_int(v) and 0 <= v < 2**128 for v in inner.values())
        or not _is_int(state["has_uint32"])
        or not _is_int(state["uinteger"])
    ):
        raise ValueError("not a PCG64 state")
    bg = np.random.PCG64()
    bg.state = state
    return np.random.Generator(bg)
