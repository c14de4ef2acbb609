"""Builders of hostile input, shared by the hostile-input tests and ``benchmarks/hostile.py``
(no tests here). Crafted replays are in ``tests/rally_env/hostile_replays.py``."""

from __future__ import annotations

import copy
import os
import tomllib
from collections.abc import Callable
from importlib import resources
from pathlib import Path
from typing import Any

#: Paths a loader must refuse at once: a FIFO (reading would block), a device that never
#: ends, a directory, a regular file over the size limit.
HOSTILE_PATHS = ("fifo", "dev_zero", "directory", "too_large")


def hostile_path(kind: str, tmp_path: Path, limit: int, name: str = "file.toml") -> Path:
    """Make the ``kind`` of :data:`HOSTILE_PATHS` under ``tmp_path`` (``limit``: the size
    limit a too-large file exceeds)."""
    p = tmp_path / name
    if kind == "fifo":
        os.mkfifo(p)
    elif kind == "dev_zero":
        p = Path("/dev/zero")
    elif kind == "directory":
        p.mkdir()
    else:
        p.write_bytes(b"#" * (limit + 1))
    return p


def with_value(doc: Any, path: tuple, value: Any) -> Any:
    """A deep copy of a JSON/TOML document with the field at ``path`` set to ``value``."""
    d = copy.deepcopy(doc)
    x = d
    for k in path[:-1]:
        x = x[k]
    x[path[-1]] = value
    return d


# ------------------------------------------------------------------------- vehicle files
def vehicle_doc(name: str) -> dict:
    """A library vehicle file as a TOML document."""
    text = (resources.files("physics") / "vehicles" / f"{name}.toml").read_text()
    return tomllib.loads(text)


def numeric_paths(d: Any, pre: tuple = ()):
    """Paths of every number in a vehicle document (not ``format``)."""
    if isinstance(d, dict):
        for k, v in d.items():
            if k != "format":
                yield from numeric_paths(v, (*pre, k))
    elif isinstance(d, list):
        for i, v in enumerate(d):
            yield from numeric_paths(v, (*pre, i))
    elif isinstance(d, (int, float)) and not isinstance(d, bool):
        yield pre


#: (path, value, word of the error) of rally-car edits that made a vehicle non-finite:
#: final_drive 1e308 gave a NaN engine rpm from step 0, spring_hz 1e-308 a ZeroDivisionError
#: when the cars were placed, yaw inertia 0.1 a NaN state at step 15.
NON_FINITE_VEHICLE_EDITS = (
    (("drivetrain", "final_drive"), 1e308, "final_drive"),
    (("drivetrain", "gears", 0), 1e6, "gears"),
    (("drivetrain", "rev_limit_rpm"), 1e9, "rev_limit_rpm"),
    (("drivetrain", "torque_curve", 1, 1), 1e12, "torque_curve"),
    (("wheels", 0, "spring_hz"), 1e-308, "spring_hz"),
    (("wheels", 0, "damping_ratio"), 1e-308, "damping_ratio"),
    (("vehicle", "inertia_yaw_kgm2"), 0.1, "inertia_yaw_kgm2"),
)


# --------------------------------------------------------------------------- stage files
def hostile_stage_texts(base: str) -> dict[str, str]:
    """Stage TOML texts made from a valid one (``base``): 5,000 nested arrays, a 400-digit
    finish, a 5,000-digit knot."""
    return {
        "nested": base + "\nx = " + "[" * 5000 + "]" * 5000 + "\n",
        "huge_finish": base.replace("[finish]\n", "[finish]\ns_m = " + "9" * 400 + "\n#", 1),
        "long_knot": base.replace("knots = [\n", "knots = [\n[" + "1" * 5000 + ", 0.0, 0.0],\n", 1),
    }


def knots_toml(base: str, limit_bytes: int) -> str:
    """``base`` with its knots replaced by as many as fit in ``limit_bytes`` (a file just
    under a loader's size limit, with more knots than a stage may have)."""
    head, rest = base.split("knots = [\n", 1)
    tail = rest.split("\n]\n", 1)[1]
    row = "[1.0, 0.0, 0.0],\n"
    n = (limit_bytes - len(head) - len(tail) - 64) // len(row)
    return head + "knots = [\n" + row * n + "]\n" + tail


def straight_stage(finish_m: float, checkpoints: tuple[float, ...] = (), length_m: float = 1300.0):
    """A straight stage with a finish at ``finish_m`` and the given checkpoints (timing lines
    as close together as a test wants)."""
    from tracks import Finish, PathBuilder, Section, Stage, Start

    b = PathBuilder(knot_spacing_m=10.0)
    b.straight(length_m)
    return Stage(
        name="straight",
        knots=b.knots(),
        sections=(Section(0.0, 10.0, "packed-dirt"),),
        finish=Finish(s_m=finish_m),
        start=Start(10.0, 0.0),
        checkpoints_m=checkpoints,
    )


# ----------------------------------------------------------------------------- env states
def edited_state(st: dict, key: str, edit: Callable[[Any], None]) -> dict:
    """A copy of an env state (``get_state()``) with ``edit`` applied to ``st[key]`` and the
    digest recomputed with the public ``state_digest``, as an attacker would."""
    from rally_env.core import state_digest

    bad = copy.deepcopy(st)
    edit(bad[key])
    bad["digest"] = state_digest(bad)
    return bad


def set_cell(col: int, value: Any) -> Callable[[Any], None]:
    """An edit for :func:`edited_state`: row 0, column ``col`` of an array set to ``value``."""

    def edit(a):
        a[0, col] = value

    return edit
