"""The first start on an empty numba cache: said once, compiled on two cores, cached after.

A worker (``python -m rally_env.precompile``) compiles the :data:`KERNELS` for the types in
:data:`SIGNATURES` while the env builds its stage; docs/architecture.md ("Cold start")
describes the worker, the stamps (:func:`is_warm`), the locks and :func:`cache_safe`.
"""

from __future__ import annotations

import atexit
import contextlib
import hashlib
import importlib
import importlib.util
import json
import os
import pickle
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from physics.jit import PACKAGES  # the packages whose compiled functions the env runs

_ROOT = Path(__file__).resolve().parent.parent

#: The kernels a worker compiles for each kind of env, big ones first (the env takes them from
#: the end back; a threaded env compiles its post-step kernel itself, :func:`compile_beside`).
_SMALL = (
    ("rally_env.info", "_fill_cars"),
    ("rally_env.actions", "_clip_rows"),
    ("physics.kernel", "set_commands"),
    ("rally_env.kernels", "lines_within_reach"),
)
SERIAL = (
    ("rally_env.kernels", "reset_cars"),
    ("physics.kernel", "step_cars"),
    ("rally_env.kernels", "post_step"),
    *_SMALL,
)
THREADED = (("rally_env.kernels", "reset_cars"), ("physics.kernel", "step_cars_parallel"), *_SMALL)
KERNELS = {"serial": SERIAL, "threaded": THREADED}
#: The kernels' argument types in a default env (``Rally-v0``; a 4-car threaded vector env),
#: as plain descriptions (:func:`describe`), and what of the config decides them.
SIGNATURES = Path(__file__).with_name("precompile_signatures.json")
#: An env waits at most this long (s) for a kernel another process claimed, then compiles it.
KERNEL_COMPILE_S = 8.0
#: A first start that compiles the simulator takes about this long (s): with the worker on a
#: second core, and alone.
COMPILE_ESTIMATE_S = {True: 15, False: 25}
NOTICE = "rally-env: compiling the simulator once (about {s} s; cached afterwards)\u2026"
#: The environment variable a worker finds the pid of the process that started it in.
PARENT_ENV = "RALLY_PRECOMPILE_PARENT"

_lock = threading.Lock()
_procs: dict[str, subprocess.Popen] = {}
_started: set[str] = set()
_others: set[str] = set()  # kinds whose worker another process runs (it holds the lock)
_done: list[subprocess.Popen] = []  # workers wait() is done with
_noticed: list[bool] = []  # notice() has printed
_marked: set[tuple] = set()  # stamps this process wrote


class CacheFileError(RuntimeError):
    """numba could not read a file of its cache even after :func:`cache_safe` deleted it and
    compiled the function again (``rally warmup --clear`` helps)."""


def cache_dir() -> str:
    """Where numba keeps the project's compiled code: ``NUMBA_CACHE_DIR``, or the
    ``__pycache__`` folders beside the sources."""
    from numba import config

    return config.CACHE_DIR or f"the __pycache__ folders under {_ROOT}"


def project_entries() -> list[Path]:
    """numba's cache files (index ``.nbi`` and data ``.nbc``) of the project's compiled
    functions in the modules imported so far."""
    from numba.core.dispatcher import Dispatcher

    folders: dict[str, set[str]] = {}
    for modname, mod in list(sys.modules.items()):
        if modname.split(".")[0] not in PACKAGES or mod is None:
            continue
        for value in list(vars(mod).values()):
            if isinstance(value, Dispatcher) and value.py_func.__module__ == modname:
                folders.setdefault(value.stats.cache_path, set()).add(modname.rsplit(".", 1)[-1])
    return [
        p
        for folder, stems in folders.items()
        for p in sorted(Path(folder).glob("*.nb[ic]"))
        if p.name.split(".")[0] in stems
    ]


def _entries_of(error: BaseException) -> list[Path]:
    """The cache files of the function whose entry numba failed to read (the innermost
    dispatcher in the error's traceback), else every project cache file that is not a whole
    sequence of pickles (docs/architecture.md, "Cold start")."""
    from numba.core.dispatcher import Dispatcher

    disp, tb = None, error.__traceback__
    while tb is not None:
        here = tb.tb_frame.f_locals.get("self")
        if isinstance(here, Dispatcher):
            disp = here
        tb = tb.tb_next
    if disp is not None:
        f = disp.py_func
        stem = f"{f.__module__.rsplit('.', 1)[-1]}.{f.__qualname__}-{f.__code__.co_firstlineno}"
        return sorted(Path(disp.stats.cache_path).glob(f"{stem}.py*.nb[ic]"))
    return [p for p in project_entries() if not _readable(p)]


def _readable(path: Path) -> bool:
    try:
        with open(path, "rb") as f:
            end = os.fstat(f.fileno()).st_size
            while f.tell() < end:
                pickle.load(f)
        return True
    except Exception:
        return False


def cache_safe(fn: Any, *args: Any, undo: Any = None, **kwargs: Any) -> Any:
    """``fn(*args, **kwargs)``; if numba finds a file of its cache it cannot read, delete that
    function's cache files, say so on stderr, call ``undo()`` (if given) and call again. Only
    a second failure raises :class:`CacheFileError`."""
    try:
        return fn(*args, **kwargs)
    except (EOFError, pickle.UnpicklingError) as e:
        files = _entries_of(e)
        for p in files:
            with contextlib.suppress(OSError):
                p.unlink()
        name = files[0].name.split(".py")[0] if files else "an entry"
        with contextlib.suppress(Exception):
            print(
                f"rally-env: numba's cache entry {name} in {cache_dir()} is unreadable "
                f"({type(e).__name__}); compiling it again",
                file=sys.stderr,
                flush=True,
            )
    if undo is not None:
        undo()
    try:
        return fn(*args, **kwargs)
    except (EOFError, pickle.UnpicklingError) as e:
        raise CacheFileError(
            f"numba's cache holds a file it cannot read ({type(e).__name__}: {e}) in "
            f"{cache_dir()}; run `rally warmup --clear` to delete the project's cache entries "
            "and compile them again"
        ) from e


def notice(cores: bool = True) -> None:
    """Say once per process, on stderr, that this start compiles the simulator."""
    with _lock:
        if _noticed:
            return
        _noticed.append(True)
    with contextlib.suppress(Exception):
        print(NOTICE.format(s=COMPILE_ESTIMATE_S[cores]), file=sys.stderr, flush=True)


def fingerprint(config: Any) -> tuple:
    """What of an env config decides the kernels' argument types: the version, the
    observation blocks it switches on (``rally_env.spaces.OBS_SWITCHES``), and whether the
    vehicle is an extended one."""
    from rally_env.spaces import OBS_SWITCHES

    blocks = tuple(bool(getattr(config, name)) for name in OBS_SWITCHES)
    return (int(config.version), *blocks, bool(config.vehicle.extended))


def _jit_off() -> bool:
    from numba import config

    return bool(config.DISABLE_JIT)


def _cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


# --- the stamp: whether this cache holds a kind of env's compiled code ------------------------


def _sources_digest() -> str:
    """The numba and Python versions, the project's folder and its sources as this process
    imported them (:func:`physics.jit.loaded_digest`)."""
    import numba

    from physics.jit import loaded_digest

    return f"{numba.__version__}|{sys.version}|{_ROOT}|{loaded_digest()}"


def stamp_folder() -> Path:
    """Where the stamps are: numba's cache folder (``NUMBA_CACHE_DIR``), else ``physics``'s
    ``__pycache__``."""
    from numba import config

    return Path(config.CACHE_DIR) if config.CACHE_DIR else _ROOT / "physics" / "__pycache__"


def _stamp_path(kind: str, fp: tuple) -> Path:
    return stamp_folder() / f"rally-warm-{kind}-{'-'.join(str(int(x)) for x in fp)}"


def is_warm(kind: str, fp: tuple) -> bool:
    """Whether an env of this kind and fingerprint has stepped with this cache since the
    project's sources last changed (so numba's cache holds its compiled code)."""
    try:
        return _stamp_path(kind, fp).read_text() == _sources_digest()
    except OSError:
        return False


def mark_warm(kind: str, fp: tuple) -> None:
    """Write the stamp :func:`is_warm` reads (once per process and kind)."""
    if (kind, fp) in _marked or _jit_off():
        return
    _marked.add((kind, fp))
    with contextlib.suppress(OSError):  # a read-only cache: the next start says it compiles
        path = _stamp_path(kind, fp)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f"{path.name}.{os.getpid()}")
        tmp.write_text(_sources_digest())
        os.replace(tmp, path)


# --- the recorded argument types ------------------------------------------------------------


def describe(t: Any) -> Any:
    """A plain (JSON) description of a numba argument type: ``["array", dtype, ndim,
    writable]``, ``["tuple", [...]]``, ``"none"``, ``"int64"``, ``"float64"`` or ``"bool"``."""
    from numba import types
    from numba.np.numpy_support import as_dtype

    if isinstance(t, types.Array):
        if t.layout != "C" or not t.aligned:
            raise ValueError(f"unrecorded array layout {t}")
        return ["array", str(as_dtype(t.dtype)), int(t.ndim), bool(t.mutable)]
    if isinstance(t, types.BaseTuple):
        return ["tuple", [describe(x) for x in t.types]]
    for name in ("none", "int64", "float64", "boolean"):
        if t == getattr(types, name):
            return "bool" if name == "boolean" else name
    raise ValueError(f"unrecorded argument type {t}")


def placeholder(d: Any) -> Any:
    """A value whose numba type is the one :func:`describe` described."""
    import numpy as np

    if d == "none":
        return None
    if isinstance(d, str):
        return {"int64": np.int64(0), "float64": np.float64(0.0), "bool": np.bool_(False)}[d]
    if d[0] == "tuple":
        return tuple(placeholder(x) for x in d[1])
    a = np.zeros((0,) * d[2], np.dtype(d[1]))
    a.setflags(write=d[3])
    return a


def _types(descs: list) -> tuple:
    import numba

    return tuple(numba.typeof(placeholder(d)) for d in descs)


def _load_file() -> dict | None:
    try:
        return json.loads(SIGNATURES.read_text())
    except (OSError, ValueError):
        return None


def _load_signatures(kind: str) -> list[tuple[Any, list[tuple]]] | None:
    """[(dispatcher, [argument types, ...]), ...] of a kind of env, or None if unusable."""
    data = _load_file() or {}
    try:
        return [
            (getattr(importlib.import_module(mod), name), [_types(s) for s in sigs])
            for (mod, name), sigs in zip(KERNELS[kind], data["signatures"][kind], strict=True)
        ]
    except Exception:
        return None


# --- the worker -------------------------------------------------------------------------------


def _lock_path(kind: str = "serial") -> str:
    import numba

    key = "|".join(
        (kind, str(_ROOT), os.environ.get("NUMBA_CACHE_DIR", ""), numba.__version__, sys.version)
    )
    digest = hashlib.sha256(key.encode()).hexdigest()[:16]
    return os.path.join(tempfile.gettempdir(), f"rally-precompile-{digest}.lock")


def _try_lock(path: str, wait: bool = False) -> int | None:
    """An fd holding the exclusive lock on ``path``, or None if another process holds it
    (``wait``: once it lets go)."""
    import fcntl

    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | (0 if wait else fcntl.LOCK_NB))
    except OSError:
        os.close(fd)
        return None
    return fd


def _unlock(fd: int) -> None:
    import fcntl

    fcntl.flock(fd, fcntl.LOCK_UN)
    os.close(fd)


def _claim(kind: str, i: int) -> int | None:
    """The claim on the ``i``-th kernel of a kind (an fd holding its lock file), or None if
    another process holds it: the worker and the env compile from the two ends of the list and
    never both compile one kernel."""
    return _try_lock(f"{_lock_path(kind)}.{i}")


def start(config: Any, threaded: bool = False) -> bool:
    """At an env's start, once per process and kind: on a cold cache say so (:func:`notice`)
    and start the worker if it can help. Returns whether a worker (this process's or
    another's) is compiling that kind's kernels."""
    kind = "threaded" if threaded else "serial"
    with _lock:
        if kind in _started:
            return kind in _procs or kind in _others
        _started.add(kind)
        fp = fingerprint(config)
        if _jit_off() or is_warm(kind, fp):
            return False
        data = _load_file()
        helps = not (
            importlib.util.find_spec("fcntl") is None  # the locks need it
            or os.environ.get("RALLY_PRECOMPILE", "1").strip().lower()
            in ("0", "false", "no", "off")
            or _cores() < 2  # on one core the worker would only compete
            or data is None
            or tuple(data.get("fingerprint", ())) != fp  # the recorded types are not this env's
        )
    notice(helps)
    if not helps:
        return False
    with _lock:
        fd = _try_lock(_lock_path(kind))
        if fd is None:  # another process's worker is compiling into the same cache
            _others.add(kind)
            return True
        _unlock(fd)
        try:
            _procs[kind] = _spawn(kind)
        except Exception:
            return False
        return True


def _spawn(*args: str) -> subprocess.Popen:
    if not (_procs or _done):
        atexit.register(_stop_workers)
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p)
    env.update(RALLY_PREFETCH="0", RALLY_PRECOMPILE="0", **{PARENT_ENV: str(os.getpid())})
    # stdin: a pipe this process never writes and never closes: the worker sees its end when
    # this process is gone (_die_with_parent)
    return subprocess.Popen(
        [sys.executable, "-m", "rally_env.precompile", *args],
        stdin=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env=env,
    )


def _die_with_parent(poll_s: float = 0.25) -> None:
    """In a worker: exit as soon as the process that started it is gone (its parent pid
    changes, or the pipe on stdin ends)."""
    try:
        parent = int(os.environ.get(PARENT_ENV, "0"))
    except ValueError:
        parent = 0

    def pid_watch() -> None:
        while True:
            if parent and os.getppid() != parent:
                os._exit(0)
            time.sleep(poll_s)

    def pipe_watch() -> None:
        try:
            while sys.stdin.buffer.read(4096):
                pass
        except Exception:
            return
        os._exit(0)

    if not parent:  # run by hand (python -m rally_env.precompile): stdin is not our pipe
        return
    threading.Thread(target=pid_watch, name="parent-watch", daemon=True).start()
    if sys.stdin is not None:
        threading.Thread(target=pipe_watch, name="pipe-watch", daemon=True).start()


def _stop_workers() -> None:
    """At exit: stop the workers still compiling (what they finished stays in the cache)."""
    with _lock:
        procs = list(_procs.values()) + list(_done)
    for p in procs:
        with contextlib.suppress(Exception):
            if p.poll() is None:
                p.kill()


def running(threaded: bool = False) -> bool:
    """Whether :func:`wait` has a worker to wait for."""
    kind = "threaded" if threaded else "serial"
    with _lock:
        return kind in _procs or kind in _others


def compile_beside(disp: Any, args: tuple) -> None:
    """Compile ``disp`` for ``args`` now, while a worker compiles the rest (so both cores
    work); the call that follows finds it compiled."""
    import numba

    disp.compile(tuple(numba.typeof(a) for a in args))


def matches(args: tuple, threaded: bool = False) -> bool:
    """Whether ``args`` of the first reset kernel have the recorded types."""
    import numba

    kernels = _load_signatures("threaded" if threaded else "serial")
    if not kernels:
        return False
    return tuple(numba.typeof(a) for a in args) in kernels[0][1]


def _compile(disp: Any, sigs: list[tuple]) -> None:
    for sig in sigs:
        disp.compile(sig)  # loads it when the cache has it


def wait(threaded: bool = False, useful: bool = True) -> None:
    """The env's first reset: compile the worker's kernels from the end back, each once its
    claim is free (or after :data:`KERNEL_COMPILE_S` s); ``useful=False``: only stop the
    worker (its kernels are not this env's)."""
    kind = "threaded" if threaded else "serial"
    with _lock:
        proc = _procs.pop(kind, None)
        if proc is not None:
            _done.append(proc)
        other = kind in _others
        _others.discard(kind)
    if not useful:
        if proc is not None:
            proc.kill()
        return
    if proc is None and not other:
        return
    kernels = _load_signatures(kind) or []
    held: list[int] = []
    try:
        for i in range(len(kernels) - 1, -1, -1):
            deadline = time.monotonic() + KERNEL_COMPILE_S
            fd = _claim(kind, i)
            while fd is None and time.monotonic() < deadline:
                time.sleep(0.02)
                fd = _claim(kind, i)
            if fd is not None:
                held.append(fd)
            _compile(*kernels[i])
    finally:
        for fd in held:
            _unlock(fd)


def compile_all(kind: str = "serial") -> int:
    """Compile (or load) every recorded kernel of a kind of env, first to last, each under
    its claim; stops at a kernel another process claimed. Returns how many kernels."""
    kernels = _load_signatures(kind)
    if kernels is None:
        return 0
    for i, (disp, sigs) in enumerate(kernels):
        fd = _claim(kind, i)
        if fd is None:
            return i
        try:
            _compile(disp, sigs)
        finally:
            _unlock(fd)
    return len(kernels)


def _main(argv: list[str]) -> int:
    _die_with_parent()
    kind = argv[1] if len(argv) > 1 and argv[1] in KERNELS else "serial"
    try:
        fd = _try_lock(_lock_path(kind), wait=True)  # one worker per cache and kind at a time
    except Exception:
        fd = None
    try:
        compile_all(kind)
    finally:
        if fd is not None:
            _unlock(fd)
    return 0


if __name__ == "__main__":
    sys.exit(_main(sys.argv))
