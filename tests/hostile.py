"""Helpers for the hostile-input tests (no tests here)."""

from __future__ import annotations

import copy
import os
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
