"""Compile the reset and step kernels in a second process while the first env is built.

With an empty numba cache, the first ``Rally-v0`` make + reset + step compiles about a
hundred functions, one after another on one core: the stage and its terrain (geometry, the
terrain index, the tile bake), then the reset and step kernels. The second half does not need
the first, only the argument types of its calls, and those are the same for every default env
(:data:`SIGNATURES`, recorded from a real ``Rally-v0`` reset and step by
:mod:`rally_env.precompile_record`). So
the first env of a process starts ``python -m rally_env.precompile``, which compiles those
kernels into numba's cache on the other core, while this process loads the stage and bakes its
first tiles. When the env reaches its first reset kernel (:func:`wait`) before the worker is
done, it compiles the worker's last kernels itself, from the end of the list back, until the
two meet (each kernel is claimed through a lock file, so none is compiled twice); then it
waits for the worker's last kernel and loads the rest from the cache.

Nothing here changes what runs: the cache holds exactly what this process would have compiled
(same source, same types, same flags). The worker starts only when it can help: the JIT is
on, ``RALLY_PRECOMPILE`` is not ``0``, the process may use two cores or more, the signatures
were recorded with this numba version, the platform has ``fcntl``, and the kernels are not in
the cache yet. Processes sharing a cache (a subprocess vector env) share one worker through a
lock file. If the worker fails or is slow (:data:`WAIT_S`), the env compiles what it still
needs itself.

``python -m rally_env.precompile_record`` rewrites the signature file (a test checks that it
matches what the default envs compile).

**Python first** (:data:`INTERPRET_MAX_CARS`). An env of a few cars need not wait at all. When
the first env of a process starts the serial worker and has at most that many cars, two workers
start on one list from both ends (``python -m rally_env.precompile serial-all`` and ``...
serial-all back``), and until both are done every call of a project function that is neither
compiled here nor in the cache runs as Python (:func:`physics.jit.interpret_while`): the same
results bit for bit, at a few milliseconds per env step instead of a few microseconds. So the
first step comes in about a second instead of after 13 s of compiling, and each function
switches to its compiled code as soon as a worker has put it in the cache. For that its workers
compile :data:`SERIAL_ALL`, every function a first ``Rally-v0`` make, reset and step calls from
Python, the stage's and the bake's too. An env of more cars ends Python first for the process
and compiles and waits as before: a step of many cars in Python would take seconds. A small
threaded env starts no Python first of its own but joins a running one (its worker then also
compiles the post-step kernel it would have compiled beside the worker). ``RALLY_INTERPRET=0``
turns Python first off (the test suite does, so that its compile checks see compiled code).

**Never waiting longer than compiling.** An env that waits for a worker (its own or another
process's, through the lock) stops waiting as soon as every kernel of its list is in the
cache, and once it has waited about as long as compiling what is still missing would take
(:data:`KERNEL_COMPILE_S` a kernel) it compiles that itself instead: a lock held by a stalled
process costs seconds, not :data:`WAIT_S`. The workers die with the process that started them
(they watch its pid and a pipe from it, :func:`_die_with_parent`): killing an env leaves no
orphan compiling. A start that has to wait for compiling (a worker's, or its own on a cold
cache) says so once on stderr (:func:`notice`); a warm start prints nothing.
"""

from __future__ import annotations

import atexit
import hashlib
import importlib
import os
import pickle
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from physics import jit

#: The kernels a worker compiles for each kind of env: the first reset's and step's entry
#: points that loading and baking the stage do not use. A threaded env's post-step kernel is
#: compiled by the env itself during its first reset, beside the worker (:func:`compile_beside`).
#: The worker goes first to last; an env that reaches its first reset kernel before the worker
#: is done takes kernels from the end back (:func:`share`). So the big kernels come first and
#: the small ones last: the env then takes small pieces of what is left, and the two finish
#: together instead of one waiting through a 3-4 s kernel the other started.
_BIG = (("rally_env.kernels", "reset_cars"),)
_SMALL = (
    ("rally_env.info", "_fill_cars"),
    ("rally_env.actions", "_clip_rows"),
    ("physics.kernel", "set_commands"),
    ("rally_env.kernels", "lines_within_reach"),
    ("physics.kernel", "missing_tiles"),
)
#: What building the stage and baking its first tiles call from Python: the env compiles these
#: itself (before it reaches the reset kernel) unless it runs them as Python meanwhile.
_STAGE = (
    ("tracks.bake", "_fill_tiles"),
    ("tracks._geometry", "fit_and_resample"),
    ("tracks._geometry", "first_overlap"),
    ("physics.kernel", "place_cars"),
    ("tracks.bake", "_csr"),
    ("tracks.bake", "_windows"),
    ("tracks.bake", "_sample_cells"),
    ("tracks.bake", "_strided_mean"),
    ("tracks.bake", "_max0"),
    ("physics.terrain", "_missing_tiles"),
    ("physics.kernel", "reach_m"),
    ("physics.mathx", "atan2x"),
    ("physics.layout", "pw"),
)
SERIAL = (
    *_BIG,
    ("physics.kernel", "step_cars"),
    ("rally_env.kernels", "post_step"),
    *_SMALL,
)
#: A serial env that runs Python first compiles nothing itself: its workers compile the
#: stage's functions too. What every step calls comes first (the first worker goes front to
#: back) and last (the second goes back to front), so stepping reaches compiled speed first;
#: the reset and the stage, which run once an episode, come in the middle.
SERIAL_ALL = (SERIAL[1], SERIAL[2], SERIAL[0], *_STAGE, *_SMALL)
THREADED = (*_BIG, ("physics.kernel", "step_cars_parallel"), *_SMALL)
#: A threaded env that runs Python first does not compile its post-step kernel beside the
#: worker: its worker compiles that one too.
THREADED_ALL = (*THREADED, ("rally_env.kernels", "post_step_parallel"))
KERNELS = {
    "serial": SERIAL,
    "serial-all": SERIAL_ALL,
    "threaded": THREADED,
    "threaded-all": THREADED_ALL,
}
#: Their argument types in a default env (``Rally-v0``; a 4-car threaded vector env), pickled
#: numba types, and what of the config decides them (:func:`fingerprint`).
SIGNATURES = Path(__file__).with_name("precompile_signatures.pkl")
#: How long an env waits for the worker before compiling by itself (s).
WAIT_S = 300.0
#: About the longest one kernel of a list takes to compile (s, two cores, a loaded machine):
#: an env waits for others' compiling at most this long per kernel still missing.
KERNEL_COMPILE_S = 6.0
#: A first start that compiles the simulator takes about this long (s) on two cores: measured
#: with an empty cache, RALLY_INTERPRET=0, under a load of about 2 (Rally-v0 43 s with its
#: worker, RallyWheelSpeed-v1 41-70 s).
COMPILE_ESTIMATE_S = 45
NOTICE = "rally-env: compiling the simulator once (about {s} s on 2 cores; cached afterwards)\u2026"
#: The most cars an env may have to run as Python while the workers compile (see the module
#: docstring); a bigger env ends that for the process.
INTERPRET_MAX_CARS = 16

_lock = threading.Lock()
_procs: dict[str, subprocess.Popen] = {}
_started: set[str] = set()
_others: set[str] = set()  # kinds whose worker another process runs (it holds the lock)
_done: list[subprocess.Popen] = []  # workers :func:`wait` stopped waiting for
_spawned_at: list[float] = []  # when this process started its first worker
_noticed: list[bool] = []  # notice() has printed


def notice() -> None:
    """Say once per process, on stderr, that this start waits for the simulator to compile
    (:data:`NOTICE`)."""
    with _lock:
        if _noticed:
            return
        _noticed.append(True)
    try:
        print(NOTICE.format(s=COMPILE_ESTIMATE_S), file=sys.stderr, flush=True)
    except Exception:
        pass


def _watch_cold_compiles() -> None:
    """Have the first compile of a kernel of the lists that the cache lacks say so
    (:func:`notice`, through :func:`physics.jit.notice_cold_compile`)."""
    disps = []
    for mod, name in dict.fromkeys((*SERIAL_ALL, *THREADED_ALL)):
        try:
            disps.append(getattr(importlib.import_module(mod), name))
        except Exception:
            pass
    jit.notice_cold_compile(disps, notice)


def fingerprint(config: Any) -> tuple:
    """What of an env config decides the kernels' argument types: the observation version,
    the road-ahead block, and whether the vehicle is an extended one."""
    return (int(config.version), bool(config.road_ahead), bool(config.vehicle.extended))


def _disabled() -> bool:
    from numba import config

    flag = os.environ.get("RALLY_PRECOMPILE", "1").strip().lower()
    return bool(config.DISABLE_JIT) or flag in ("0", "false", "no", "off")


def _python_first() -> bool:
    """Whether an env may run as Python while the workers compile (``RALLY_INTERPRET`` not
    ``0``)."""
    flag = os.environ.get("RALLY_INTERPRET", "1").strip().lower()
    return flag not in ("0", "false", "no", "off")


def _cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def _load_signatures(kind: str = "serial") -> list[tuple[Any, list[Any]]] | None:
    """[(dispatcher, [argument types, ...]), ...] of a kind of env, or None if unusable here."""
    data = _load_file()
    if data is None:
        return None
    try:
        out = []
        for (mod, name), sigs in zip(KERNELS[kind], data["signatures"][kind], strict=True):
            out.append((getattr(importlib.import_module(mod), name), list(sigs)))
        return out
    except Exception:
        return None


def _load_file() -> dict | None:
    import numba

    try:
        with open(SIGNATURES, "rb") as f:
            data = pickle.load(f)
    except Exception:
        return None
    return data if data.get("numba") == numba.__version__ else None


_cached = jit.in_cache  # (the tests stand in for it)


def _lock_path(kind: str = "serial") -> str:
    import numba

    key = "|".join(
        (
            kind,
            str(Path(__file__).resolve().parent),
            os.environ.get("NUMBA_CACHE_DIR", ""),
            numba.__version__,
            sys.version,
        )
    )
    digest = hashlib.sha256(key.encode()).hexdigest()[:16]
    return os.path.join(tempfile.gettempdir(), f"rally-precompile-{digest}.lock")


def _claim(kind: str, i: int) -> int | None:
    """The claim on the ``i``-th kernel of a kind (an fd holding its lock file), or None if
    another process holds it: the worker and the env waiting for it compile from the two
    ends of the list and never both compile one kernel (:func:`compile_all`, :func:`share`)."""
    return _try_lock(f"{_lock_path(kind)}.{i}")


def _try_lock(path: str) -> int | None:
    """An fd holding the exclusive lock on ``path``, or None if another process holds it."""
    import fcntl

    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        os.close(fd)
        return None
    return fd


def _unlock(fd: int) -> None:
    import fcntl

    fcntl.flock(fd, fcntl.LOCK_UN)
    os.close(fd)


def start(config: Any, threaded: bool = False, n_cars: int = 1, interpret: bool = True) -> bool:
    """Start the worker for an env of ``config`` (threaded or not) if it can help (see the
    module docstring); once per process and kind. Returns whether a worker (this process's
    or another's) is compiling that kind's kernels. The first serial env of at most
    :data:`INTERPRET_MAX_CARS` cars also starts a worker from the end of the list and runs
    Python until both are done; an env of more cars ends that. ``interpret=False``: no
    Python first for this process (a batch job that compiles other code meanwhile)."""
    kind = "threaded" if threaded else "serial"
    if n_cars > INTERPRET_MAX_CARS:
        jit.stop_interpreting()
    with _lock:
        if kind in _started:
            return kind in _procs or kind in _others
        first_start = not _started
        _started.add(kind)
        if first_start and not _noticed:
            try:
                _watch_cold_compiles()
            except Exception:
                pass
        try:
            import fcntl  # noqa: F401
        except ImportError:
            return False
        if _disabled() or _cores() < 2:  # on one core the worker would only compete
            return False
        data = _load_file()
        if data is None or tuple(data.get("fingerprint", ())) != fingerprint(config):
            return False  # the recorded types are not this env's
        first = interpret and n_cars <= INTERPRET_MAX_CARS and _python_first()
        # a small threaded env joins a running Python first (it starts none of its own)
        joined = first and (not threaded or jit.interpreting())
        todo = kind + "-all" if joined else kind  # the list its workers compile
        kernels = _load_signatures(todo)
        if kernels is None or all(_cached(d, sigs[0]) for d, sigs in kernels):  # a warm cache
            return False
        fd = _try_lock(_lock_path(kind))
        if fd is None:  # another process's worker is compiling into the same cache
            _others.add(kind)
            return True
        _unlock(fd)
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p)
        env["RALLY_PREFETCH"] = "0"
        env["RALLY_PRECOMPILE"] = "0"
        try:
            _procs[kind] = _spawn(env, todo)
        except Exception:
            return False
        if threaded or not joined:
            return True
        try:
            _procs[kind + "-back"] = _spawn(env, todo, "back")
        except Exception:
            return True  # the env shares the list's end itself when it reaches the kernels
        jit.interpret_while(_workers_busy)
        return True


def _spawn(env: dict, *args: str) -> subprocess.Popen:
    if not _spawned_at:
        _spawned_at.append(time.monotonic())
        atexit.register(_stop_workers)
    env = {**env, PARENT_ENV: str(os.getpid())}
    # stdin: a pipe this process never writes and never closes: the worker sees its end when
    # this process is gone (_die_with_parent)
    return subprocess.Popen(
        [sys.executable, "-m", "rally_env.precompile", *args],
        stdin=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env=env,
    )


#: The environment variable a worker finds the pid of the process that started it in.
PARENT_ENV = "RALLY_PRECOMPILE_PARENT"


def _die_with_parent(poll_s: float = 0.25) -> None:
    """In a worker: exit as soon as the process that started it is gone, whatever it is
    doing (numba writes each cache file whole, so none is left half written). Two watches,
    both portable: the parent's pid (a worker whose parent died is re-parented, so its
    parent pid changes) and the end of the pipe on stdin (closed when the parent dies, unless
    a child it forked still holds it)."""
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
    """At exit: stop the workers still compiling (what they finished stays in the cache, so
    the next process starts from there)."""
    with _lock:
        procs = list(_procs.values()) + list(_done)
    for p in procs:
        try:
            if p.poll() is None:
                p.kill()
        except Exception:
            pass


def _workers_busy() -> bool:
    """Whether a worker this process started is still compiling (for at most
    :data:`WAIT_S` after the first: a worker that hangs must not keep the env in Python)."""
    with _lock:
        procs = list(_procs.values()) + list(_done)
        if _spawned_at and time.monotonic() - _spawned_at[0] > WAIT_S:
            return False
    return any(p.poll() is None for p in procs)


def running(threaded: bool = False) -> bool:
    """Whether :func:`wait` has a worker to wait for."""
    kind = "threaded" if threaded else "serial"
    with _lock:
        return kind in _procs or kind in _others


def compile_beside(disp: Any, args: tuple) -> None:
    """Compile ``disp`` for ``args`` now, while a worker compiles the rest (so both cores
    work); the call that follows finds it compiled. Argument types as a call would give."""
    import numba

    disp.compile(tuple(numba.typeof(a) for a in args))


def matches(args: tuple, threaded: bool = False) -> bool:
    """Whether ``args`` of the first reset kernel have the recorded types (else the worker
    compiles kernels this env does not use: see :func:`wait`)."""
    import numba

    kernels = _load_signatures("threaded" if threaded else "serial")
    if not kernels:
        return False
    return tuple(numba.typeof(a) for a in args) in [tuple(s) for s in kernels[0][1]]


def wait(threaded: bool = False, timeout: float = WAIT_S, useful: bool = True) -> None:
    """Wait (up to ``timeout`` s) for the worker :func:`start` found or started for this kind
    of env; with ``useful=False`` only stop waiting for it (its kernels are not this env's)."""
    kind = "threaded" if threaded else "serial"
    with _lock:
        proc = _procs.pop(kind, None)
        if proc is not None:
            _done.append(proc)
        other = kind in _others
        _others.discard(kind)
    if not useful:
        with _lock:
            back = _procs.pop(kind + "-back", None)
        for p in (proc, back):
            if p is not None:
                p.kill()
        return
    if proc is None and not other:
        return
    kernels = _load_signatures(kind) or []
    if any(not all(_cached(d, sig) for sig in sigs) for d, sigs in kernels):
        notice()  # this start waits for compiling, its own and the workers'
    start = time.monotonic()
    deadline = start + timeout
    try:
        share(threaded)
    except Exception:
        pass  # the worker's and this env's own compiles still cover every kernel
    try:
        path = _lock_path(kind)
        look = time.monotonic()
        while True:
            if proc is not None:  # this process's worker: wait for it to end
                try:
                    proc.wait(timeout=0.05)
                    proc = None
                except subprocess.TimeoutExpired:
                    pass
            if proc is None:  # then for whichever worker holds the lock
                fd = _try_lock(path)
                if fd is not None:
                    _unlock(fd)
                    return
            now = time.monotonic()
            if now >= deadline:
                return  # compile what is still missing here; the worker finishes on its own
            if now >= look:
                missing = sum(1 for d, sigs in kernels if not all(_cached(d, sig) for sig in sigs))
                if missing == 0 or now - start >= KERNEL_COMPILE_S * missing:
                    return  # nothing left to wait for, or compiling it here is quicker
                look = now + 0.5
            if proc is None:
                time.sleep(0.05)
    except Exception:
        return


def compile_all(kind: str = "serial") -> int:
    """Compile every recorded signature of a kind of env that the cache lacks (into the
    cache), first to last; returns how many. Stops at a kernel another process has claimed:
    an env that reached its wait compiles from the last kernel back (:func:`share`)."""
    kernels = _load_signatures(kind)
    if kernels is None:
        return 0
    n = 0
    for i, (disp, sigs) in enumerate(kernels):
        done = _compile_claimed(kind, i, disp, sigs)
        if done is None:
            break
        n += done
    return n


def share(threaded: bool = False, kind: str | None = None) -> int:
    """Compile, in this process, the kernels at the end of the worker's list that nobody has
    compiled or claimed yet, last first, until meeting the worker (a kernel it has claimed);
    kernels already in the cache are passed over. Returns how many signatures. An env calls
    this when it reaches the worker's kernels before the worker is done, so both cores
    compile until the list is done; Python first's second worker runs it from the start
    (``kind`` names its list)."""
    kind = kind or ("threaded" if threaded else "serial")
    kernels = _load_signatures(kind)
    if kernels is None:
        return 0
    n = 0
    for i in range(len(kernels) - 1, -1, -1):
        disp, sigs = kernels[i]
        if all(_cached(disp, sig) for sig in sigs):
            continue  # an earlier process or the worker compiled it
        done = _compile_claimed(kind, i, disp, sigs)
        if done is None:
            break
        n += done
    return n


def _compile_claimed(kind: str, i: int, disp: Any, sigs: list[Any]) -> int | None:
    """Compile the signatures of kernel ``i`` that the cache lacks, holding its claim; None if
    another process holds the claim."""
    try:
        fd = _claim(kind, i)
    except Exception:
        fd = -1  # no lock files here: compile without a claim
    if fd is None:
        return None
    try:
        n = 0
        for sig in sigs:
            if not _cached(disp, sig):  # loading one only to drop it can take 0.4 s
                disp.compile(sig)
                n += 1
        return n
    finally:
        if fd >= 0:
            _unlock(fd)


def _main(argv: list[str]) -> int:
    _die_with_parent()
    kind = argv[1] if len(argv) > 1 and argv[1] in KERNELS else "serial"
    if len(argv) > 2 and argv[2] == "back":  # the second worker: from the end of the list
        share(kind=kind)
        return 0
    fd = None
    try:
        import fcntl

        # one worker per cache and kind of env, whichever list it compiles
        fd = os.open(_lock_path(kind.split("-")[0]), os.O_RDWR | os.O_CREAT, 0o600)
        fcntl.flock(fd, fcntl.LOCK_EX)  # one worker per cache and kind at a time
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
