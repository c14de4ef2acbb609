"""Reading and writing stage files (TOML), and the built-in library.

Files are read with ``tomllib`` (nothing in a file is ever executed) and written with
:mod:`tracks._toml`. Loading is all-or-nothing (docs/stages.md, "What the loader checks"): any
problem raises a :class:`~tracks.errors.StageError` naming the file, the field and the rule.
"""

from __future__ import annotations

import functools
import os
import re
from dataclasses import fields
from importlib import resources
from pathlib import Path
from typing import Any

from physics.files import parse_toml, read_text
from tracks._toml import dumps
from tracks.errors import (
    FieldTypeError,
    FieldValueError,
    MissingFieldError,
    StageFormatError,
    StageNotFoundError,
    UnknownFieldError,
)
from tracks.stage import FORMAT_VERSION, Feature, Finish, Section, Stage, Start, TerrainSpec, _of

#: A file's top-level keys: the format and the Stage's fields (its source is where it was read).
_TOP_KEYS = {"format"} | {f.name for f in fields(Stage) if f.init} - {"source"}
_FEATURE_KEYS = Feature.FILE_KEYS
_GEN_RE = re.compile(r"gen-([0-9]{1,10})")  # fullmatch: ASCII digits, no newline

#: Largest stage file read (bytes): the library's are under 16 KiB, a 100,000-knot stage
#: (:data:`tracks.stage.MAX_KNOTS`) about 4 MiB.
MAX_FILE_BYTES = 8 * 1024 * 1024

HEADER = (
    "rally-env stage file (format 1). Distances are metres of arc length along the\n"
    "centerline from its first knot; see docs/stages.md for every field."
)


def _keys(d: dict[str, Any], allowed: set[str], required: set[str], src: str, prefix: str):
    for k in d:
        if k not in allowed:
            raise UnknownFieldError(
                src, prefix + k, f"unknown field; allowed here: {', '.join(sorted(allowed))}"
            )
    for k in sorted(required):
        if k not in d:
            raise MissingFieldError(src, prefix + k, "required field is missing")


def stage_from_dict(doc: dict[str, Any], source: str = "<memory>") -> Stage:
    """Build a :class:`Stage` from the file schema (a parsed TOML document); a
    :class:`StageError` names ``source`` and the field."""
    src = source
    _of(dict, doc, src, "<document>")
    _keys(doc, _TOP_KEYS, {"format", "name", "knots", "sections", "finish"}, src, "")
    fmt = doc["format"]
    if isinstance(fmt, bool) or not isinstance(fmt, int):
        raise FieldTypeError(src, "format", f"expected an integer, got {fmt!r}")
    if fmt != FORMAT_VERSION:
        raise FieldValueError(
            src, "format", f"unsupported format {fmt}; this version reads format {FORMAT_VERSION}"
        )
    parts = {}  # the tables of one record each, every field optional
    for key, cls in (("terrain", TerrainSpec), ("start", Start), ("finish", Finish)):
        d = _of(dict, doc.get(key, {}), src, key)
        _keys(d, {f.name for f in fields(cls)}, set(), src, key + ".")
        if key == "finish" and not d:
            raise MissingFieldError(
                src, "finish.s_m", "the finish needs s_m (point to point) or laps (closed loop)"
            )
        parts[key] = cls(**d)

    sections = []
    for i, sec in enumerate(_of(list, doc["sections"], src, "sections")):
        f = f"sections[{i}]"
        sec = _of(dict, sec, src, f)
        # s_m may be left out of the first section only (it starts at 0).
        req = {"width_m", "surface"} if i == 0 else {"s_m", "width_m", "surface"}
        _keys(sec, {"s_m", "width_m", "surface"}, req, src, f + ".")
        sections.append(Section(sec.get("s_m", 0.0), sec["width_m"], sec["surface"]))

    features = []
    for i, ft in enumerate(_of(list, doc.get("features", []), src, "features")):
        f = f"features[{i}]"
        ft = _of(dict, ft, src, f)
        if "kind" not in ft:
            raise MissingFieldError(
                src, f + ".kind", f"required field is missing (one of {', '.join(_FEATURE_KEYS)})"
            )
        kind = ft["kind"]
        if not isinstance(kind, str):
            raise FieldTypeError(src, f + ".kind", f"expected a string, got {kind!r}")
        if kind not in _FEATURE_KEYS:
            raise FieldValueError(
                src,
                f + ".kind",
                f"unknown feature kind {kind!r}; known: {', '.join(_FEATURE_KEYS)}",
            )
        ln, h = _FEATURE_KEYS[kind]
        req = {"kind", "s_m", ln, h}
        _keys(ft, req | ({"face_m"} if kind == "jump" else set()), req, src, f + ".")
        features.append(Feature(kind, ft["s_m"], ft[ln], ft[h], ft.get("face_m", 2.0)))

    return Stage(
        name=doc["name"],
        description=doc.get("description", ""),
        knots=_of(list, doc["knots"], src, "knots"),
        sections=tuple(sections),
        closed=doc.get("closed", False),
        features=tuple(features),
        checkpoints_m=tuple(_of(list, doc.get("checkpoints_m", []), src, "checkpoints_m")),
        **parts,
        par_time_s=doc.get("par_time_s"),
        source=src,
    )


def loads_stage(text: str, source: str = "<string>") -> Stage:
    """Parse stage TOML text (:class:`StageFormatError` if it is not TOML, another
    :class:`StageError` for an invalid field)."""
    return stage_from_dict(parse_toml(text, source, StageFormatError, "stage"), source)


def read_stage_file(path: str | os.PathLike[str]) -> Stage:
    """Load a stage from a TOML file path."""
    p = Path(path)
    if not p.exists():
        raise StageNotFoundError(f"{p}: no such stage file")
    return loads_stage(read_text(p, MAX_FILE_BYTES, StageFormatError), str(p))


def _stage_dir():
    return resources.files("tracks") / "stages"


def list_stages() -> list[str]:
    """Names of the built-in library stages, sorted."""
    return sorted(p.name[:-5] for p in _stage_dir().iterdir() if p.name.endswith(".toml"))


@functools.lru_cache(maxsize=64)
def _load_library(name: str) -> Stage:
    res = _stage_dir() / f"{name}.toml"
    return loads_stage(res.read_text(encoding="utf-8"), f"tracks/stages/{name}.toml")


def is_stage_name(s: Any) -> bool:
    """True for a library stage name or ``gen-<seed>``: names :func:`load_stage` resolves
    without reading any path (they win over a file of the same name)."""
    return isinstance(s, str) and (s in list_stages() or _GEN_RE.fullmatch(s) is not None)


def load_stage(name_or_path: str | os.PathLike[str]) -> Stage:
    """Load a library stage by name, a generated stage by ``gen-<seed>``, or a TOML file.

    Args:
        name_or_path: a name from :func:`list_stages`, ``"gen-<seed>"`` (the same as
            ``tracks.generate(seed)`` with default arguments), or a path to a ``.toml`` file.

    Returns:
        The validated :class:`Stage` (library stages are cached; they are immutable).

    Raises:
        StageNotFoundError: no such library stage or file.
        StageError: the file is invalid (names the file, the field and the problem).
    """
    if isinstance(name_or_path, os.PathLike):
        return read_stage_file(name_or_path)
    s = str(name_or_path)
    if s in list_stages():
        return _load_library(s)
    m = _GEN_RE.fullmatch(s)
    if m:
        from tracks.generator import generate

        return generate(int(m.group(1)))
    if s.endswith(".toml") or os.sep in s or "/" in s or os.path.exists(s):
        return read_stage_file(s)
    raise StageNotFoundError(
        f"no stage named {s!r}; library stages: {', '.join(list_stages())}"
        "; or give gen-<seed> or a path to a .toml file"
    )


def dumps_stage(stage: Stage) -> str:
    """The stage as TOML text (reading it back gives an identical stage)."""
    text = dumps(stage.to_dict(), header=HEADER)
    if stage.par_time_s is None:
        line = "closed = true\n" if stage.closed else "closed = false\n"
        text = text.replace(
            line, line + "# par_time_s = 0.0  # not set yet (the heuristic driver sets it)\n", 1
        )
    return text


def save_stage(stage: Stage, path: str | os.PathLike[str]) -> Path:
    """Write a stage to a TOML file and return its path (atomically: a temporary file is
    renamed into place)."""
    p = Path(path)
    tmp = p.with_name(p.name + ".tmp")
    tmp.write_text(dumps_stage(stage), encoding="utf-8")
    os.replace(tmp, p)
    return p
