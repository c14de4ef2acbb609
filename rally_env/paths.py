"""Output paths and numeric options, checked before a long command starts: they raise
:class:`OutputPathError` or :class:`OptionValueError` (both ``ValueError``) naming the path or
option and the problem. Writing is really tried (a file created and removed, a directory made
and probed): permission bits say little when running as root.
"""

from __future__ import annotations

import math
import os
import stat
import tempfile
from collections.abc import Sequence
from pathlib import Path

from rally_env.errors import RallyEnvError


class OutputPathError(RallyEnvError):
    """An output path cannot be written: a directory where a file is wanted (or the other
    way round), a missing extension, a parent that is a file, no permission."""


class OptionValueError(RallyEnvError):
    """A numeric command-line option outside what the command can do (``--timesteps 0``)."""


def check_positive(value: float | None, what: str, minimum: float = 0.0) -> None:
    """Refuse a number that is not finite or not above ``minimum`` (``None`` = not given;
    integers: ``minimum=0`` means >= 1).

    Raises:
        OptionValueError: naming the option (``what``, e.g. ``"--max-seconds"``) and the value.
    """
    if value is not None and not (math.isfinite(value) and value > minimum):
        raise OptionValueError(f"{what} must be a finite number > {minimum:g}, got {value!r}")


def why_not_writable(p: Path, e: OSError) -> str:
    """The reason an OSError gives, or that an ancestor of ``p`` is a file (``mkdir`` of a
    path under a file says "File exists")."""
    for a in p.parents:
        if a.exists():
            if not a.is_dir():
                return f"{a} is not a directory"
            break
    return e.strerror or str(e)


def check_output_file(
    path: str | os.PathLike[str], what: str = "output", suffixes: Sequence[str] = ()
) -> Path:
    """Check that ``path`` can be written as a regular file (creating its parent directories)
    with one of the extensions ``suffixes`` (``(".mp4", ".gif")``; empty = any); returns it as a
    :class:`~pathlib.Path`.

    Raises:
        OutputPathError: naming the path (``what``, e.g. ``"--out"``) and the problem.
    """
    p = Path(path)
    if suffixes and p.suffix.lower() not in suffixes:
        raise OutputPathError(f"{what} {p}: the file name must end in {' or '.join(suffixes)}")
    if p.is_dir():
        raise OutputPathError(f"{what} {p}: is a directory, not a file")
    try:
        p.parent.mkdir(parents=True, exist_ok=True)
        existed = p.exists()
        if existed and not stat.S_ISREG(p.stat().st_mode):
            raise OutputPathError(f"{what} {p}: exists and is not a regular file")
        fd = os.open(p, os.O_WRONLY | os.O_CREAT | os.O_APPEND | getattr(os, "O_NONBLOCK", 0))
        os.close(fd)
        if not existed:
            p.unlink()
    except OSError as e:
        raise OutputPathError(f"{what} {p}: cannot be written ({why_not_writable(p, e)})") from None
    return p


def check_output_dir(path: str | os.PathLike[str], what: str = "output directory") -> Path:
    """Check that ``path`` is (or can be made) a writable directory; makes it.

    Raises:
        OutputPathError: naming the path and the problem.
    """
    p = Path(path)
    if p.exists() and not p.is_dir():
        raise OutputPathError(f"{what} {p}: is a file, not a directory")
    try:
        p.mkdir(parents=True, exist_ok=True)
        fd, probe = tempfile.mkstemp(prefix=".write-check-", dir=p)
        os.close(fd)
        os.unlink(probe)
    except OSError as e:
        raise OutputPathError(f"{what} {p}: cannot be written ({why_not_writable(p, e)})") from None
    return p
