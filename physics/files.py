"""Reading a data file that may be hostile: a regular file only, with a size cap.

Opened without blocking and checked with ``fstat`` before anything is read, so a FIFO (which
would block forever), a device such as ``/dev/zero`` (which never ends), a directory or a
socket is refused at once. Stage, vehicle and replay files are all read through here.
"""

from __future__ import annotations

import os
import stat


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
        chunks, n = [], 0
        while n <= limit:
            b = os.read(fd, min(1 << 20, limit + 1 - n))
            if not b:
                break
            chunks.append(b)
            n += len(b)
    except OSError as e:
        raise FileReadError(p, f"cannot read the file ({e.strerror or e})") from None
    finally:
        os.close(fd)
    if n > limit:
        raise FileReadError(p, f"over the limit of {limit} bytes", True)
    return b"".join(chunks)
