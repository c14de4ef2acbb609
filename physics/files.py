"""Reading a data file that may be hostile: a regular file only, with a size cap.

Opened without blocking and checked with ``fstat`` before anything is read, so a FIFO (which
would block forever), a device such as ``/dev/zero`` (which never ends), a directory or a
socket is refused at once. Stage, vehicle and replay files are all read through here.
"""

from __future__ import annotations

import os
import stat
import tomllib
from collections.abc import Callable
from pathlib import Path
from typing import Any

#: The error a document's reader raises: ``error(source, field, problem)``.
DocError = Callable[[str, str, str], Exception]


class FileReadError(ValueError):
    """A file cannot be read as data: missing, unreadable, not a regular file or too large.

    Attributes:
        path: the path.
        too_large: the file exceeds the size cap.
    """

    def __init__(self, path: str, problem: str, too_large: bool = False):
        self.path = path
        self.too_large = too_large
        super().__init__(f"{path}: {problem}")


def read_regular_file(path: str | os.PathLike[str], limit: int) -> bytes:
    """The bytes of the regular file ``path``, at most ``limit`` of them.

    Raises:
        FileReadError: missing or unreadable (the OS's reason), not a regular file, or larger
            than ``limit`` bytes (``too_large``).
    """
    p = os.fspath(path)
    try:
        fd = os.open(p, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    except OSError as e:
        raise FileReadError(p, f"cannot read the file ({e.strerror or e})") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise FileReadError(p, "not a regular file (a directory, FIFO or device)")
        if st.st_size > limit:
            raise FileReadError(p, f"{st.st_size} bytes, over the limit of {limit}", True)
        with os.fdopen(fd, "rb", closefd=False) as f:
            data = f.read(limit + 1)  # a file that grew since fstat reads one byte over
    except OSError as e:
        raise FileReadError(p, f"cannot read the file ({e.strerror or e})") from None
    finally:
        os.close(fd)
    if len(data) > limit:
        raise FileReadError(p, f"over the limit of {limit} bytes", True)
    return data


def read_text(path: str | os.PathLike[str], limit: int, error: DocError) -> str:
    """The UTF-8 text of the regular file ``path`` (:func:`read_regular_file`).

    Raises:
        error: ``error(str(Path(path)), "<file>", problem)`` if the file cannot be read or is
            not UTF-8.
    """
    p = str(Path(path))
    try:
        raw = read_regular_file(p, limit)
    except FileReadError as e:
        raise error(p, "<file>", str(e).removeprefix(f"{p}: ")) from None
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise error(p, "<file>", f"not UTF-8 text: {e}") from None


def parse_toml(text: str, source: str, error: DocError, what: str) -> dict[str, Any]:
    """``tomllib.loads(text)``: a data parser, nothing in the text is ever executed.

    Raises:
        error: ``error(source, "<toml>", problem)`` if the text is not valid TOML, or holds
            what Python cannot (a 5000-digit number, arrays nested 5000 deep: "not a
            ``what`` file").
    """
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise error(source, "<toml>", f"not valid TOML: {e}") from None
    except (ValueError, RecursionError) as e:
        raise error(source, "<toml>", f"not a {what} file: {str(e)[:200]}") from None
