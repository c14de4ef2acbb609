"""How the project declares its compiled functions (:func:`njit`, :func:`njit_inner`, with
numba's public decorator and options only) and keeps numba's cache true to today's sources
(:func:`drop_stale_cache`): docs/architecture.md ("Compiled functions: njit and njit_inner").
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numba
from numba import config
from numba.core.registry import CPUDispatcher

#: ``numba.njit``, for the project's functions that Python calls.
njit = numba.njit


class InnerDispatcher(CPUDispatcher):
    """A dispatcher for compiled code only: calling it from Python raises :class:`TypeError`."""

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        f = self.py_func
        raise TypeError(
            f"{f.__module__}.{f.__qualname__} is compiled for calls from compiled code only "
            "(it has no Python wrapper); call it from an @njit function"
        )


def njit_inner(fn: Callable | None = None, **options: Any) -> Any:
    """``@njit(cache=True, **options)`` without the Python and C wrappers, for a helper only
    compiled code calls (from Python it raises :class:`TypeError`; with ``NUMBA_DISABLE_JIT=1``
    it is the Python function): ``@njit_inner`` or ``@njit_inner(_nrt=False, forceinline=True)``.
    Pass it ``np.int64(0)`` / ``np.bool_(False)``, not a literal, so it compiles once."""

    def deco(f: Callable) -> Any:
        if config.DISABLE_JIT:
            return f
        opts = {"nopython": True, "boundscheck": None, **options}
        opts.update(no_cpython_wrapper=True, no_cfunc_wrapper=True)
        d = InnerDispatcher(py_func=f, locals={}, targetoptions=opts)
        d.enable_caching()
        return d

    return deco(fn) if fn is not None else deco


#: The packages whose compiled functions are compiled into one another's (kernels inline
#: helpers from other files); their sources make the cache's stamp.
PACKAGES = ("physics", "tracks", "rally_env", "agents")
_ROOT = Path(os.path.abspath(__file__)).parent.parent  # as numba names it: no resolve()
#: The stamp's file name, in :func:`cache_folders`' first folder (physics').
STAMP = "rally-sources"


def _sources(root: Path, packages: tuple[str, ...]) -> list[Path]:
    return [p for pkg in packages for p in sorted((root / pkg).rglob("*.py"))]


def _cache_folder(folder: Path) -> Path:
    """Where numba keeps the compiled code of the sources in ``folder``:
    ``NUMBA_CACHE_DIR/<folder name>_<sha1 of its path>`` when that variable is set, else the
    folder's ``__pycache__``."""
    if not config.CACHE_DIR:
        return folder / "__pycache__"
    return (
        Path(config.CACHE_DIR) / f"{folder.name}_{hashlib.sha1(str(folder).encode()).hexdigest()}"
    )


def cache_folders(root: Path = _ROOT, packages: tuple[str, ...] = PACKAGES) -> list[Path]:
    """numba's cache folder of each source folder of ``packages`` (the first package's
    first)."""
    dirs = sorted({p.parent for p in _sources(root, packages)})
    dirs.sort(key=lambda d: d != root / packages[0])
    return [_cache_folder(d) for d in dirs]


def sources_digest(root: Path = _ROOT, packages: tuple[str, ...] = PACKAGES) -> str:
    """sha256 over the path and bytes of every source file of ``packages``."""
    h = hashlib.sha256()
    for p in _sources(root, packages):
        h.update(f"{p.relative_to(root)}\n".encode())
        h.update(p.read_bytes())
    return h.hexdigest()


@functools.cache
def loaded_digest() -> str:
    """:func:`sources_digest` of the project as this process imported it (read once: the
    code a process compiles and runs is the code it imported, whatever changes on disk
    later)."""
    return sources_digest()


def drop_stale_cache(
    root: Path = _ROOT, packages: tuple[str, ...] = PACKAGES, digest: str | None = None
) -> int:
    """Unless the stamp :data:`STAMP` beside the cache holds ``digest`` (by default
    :func:`sources_digest`), delete every ``.nbi``/``.nbc`` file in :func:`cache_folders` and
    write the stamp; returns how many files were deleted. ``import physics`` runs this; a
    read-only cache is left as it is (why: docs/architecture.md, "Compiled functions")."""
    if config.DISABLE_JIT:
        return 0
    stamp = _cache_folder(root / packages[0]) / STAMP
    digest = digest or sources_digest(root, packages)
    with contextlib.suppress(OSError):
        if stamp.read_text() == digest:
            return 0
    n = 0
    for folder in cache_folders(root, packages):
        for f in folder.glob("*.nb[ic]"):
            with contextlib.suppress(OSError):
                f.unlink()
                n += 1
    with contextlib.suppress(OSError):
        stamp.parent.mkdir(parents=True, exist_ok=True)
        tmp = stamp.with_name(f"{STAMP}.{os.getpid()}")
        tmp.write_text(digest)
        os.replace(tmp, stamp)
    return n


if not config.DISABLE_JIT:
    drop_stale_cache(digest=loaded_digest())
