"""How the project declares its compiled functions: :func:`njit` for those Python calls,
:func:`njit_inner` for those only other compiled functions call.

``numba.njit`` gives every compiled function two wrappers so Python can call it: a CPython
wrapper (unboxing each argument, boxing the result) and a C-callable one. A helper that only
kernels call never uses them, yet building them and carrying their code through every kernel
that links the helper in took about a fifth of a first start with an empty numba cache (the
wrappers were 9.7 MB of the 23.3 MB of LLVM IR the first ``Rally-v0`` step compiled).

:func:`njit_inner` compiles a helper without them. Its dispatcher refuses a call from Python
with a :class:`TypeError` (without a wrapper such a call would crash the interpreter); numba
still types and links it into the kernels that call it exactly as before, so the machine
code, and every result, is the same. With ``NUMBA_DISABLE_JIT=1`` it returns the Python
function, like ``njit``.

Literal arguments: numba types a constant passed to a compiled function (``f(x, 0)``,
``f(x, False)``, and even a loop-carried ``n = 0`` handed on as ``n = f(n, ...)``) as a
*literal* type, and compiles ``f`` once for that literal and again for the plain ``int64`` or
``bool`` of its other calls. Where a helper is called both ways, the project passes
``np.int64(0)`` or ``np.bool_(False)`` instead (a plain type), so the helper compiles once; the
results are the same.

Compile flags compared quickly (:func:`install_fast_flags`): while it types a call, numba
looks up the implementation of every ``@overload`` that might match in a dictionary keyed by
the compile flags in force, so it hashes and compares a ``numba.core.targetconfig.TargetConfig``
about 50,000 times in a first ``Rally-v0`` step. Each comparison builds two dictionaries of all
the flags through their property getters, and the hash sorts them: about 7 % of that start's
compile time (the 7 % were measured under a profiler; unprofiled, about 4 %).
:func:`install_fast_flags` gives ``TargetConfig`` the same three methods written to read its
values directly. The answers are the same for every flags object (the hash is, as before,
that of the sorted option names). It changes numba only where numba's own methods are, to the
letter, the ones it was written against; on any other numba it leaves numba alone.

Python first (:func:`interpret_while`): :func:`njit` makes a :class:`TieredDispatcher`, the same
compiled function as ``numba.njit``'s with one difference. While another process compiles the
project's functions into numba's cache (``rally_env.precompile``), a call from Python that
would compile one instead runs its *twin*: the Python function, bound to globals in which every
compiled function is its twin too (:func:`python_twin`), so it runs what
``NUMBA_DISABLE_JIT=1`` runs. The project's compiled code gives the same results to the bit as
Python (tested for the physics, the tile bake, the stage generator and whole env runs), so a
call may run as Python and the next one compiled; each function switches as soon as the cache
has it (loading from the cache takes milliseconds).

A corrupt cache entry (a file truncated by a full disk or a killed process) is never fatal:
every project function's cache (:class:`SafeCache`) treats an entry it cannot load as missing,
so the function is compiled again and the entry replaced.

Cold compiles said once (:func:`notice_cold_compile`): the env's start registers its kernels
and a callback, called once when a call from Python is about to compile one of them that the
cache does not hold (the caller waits for it), never on a warm cache.
"""

from __future__ import annotations

import importlib
import linecache
import textwrap
import threading
import time
import types
import warnings
from collections.abc import Callable
from typing import Any

import numba
from numba import config
from numba.core import targetconfig
from numba.core.caching import FunctionCache
from numba.core.dispatcher import Dispatcher
from numba.core.registry import CPUDispatcher

# numba's own TargetConfig methods that install_fast_flags replaces, as their source reads
_FLAG_METHODS = {
    "__hash__": "def __hash__(self):\n    return hash(tuple(sorted(self.values())))\n",
    "__eq__": (
        "def __eq__(self, other):\n"
        "    if isinstance(other, TargetConfig):\n"
        "        return self.values() == other.values()\n"
        "    else:\n"
        "        return NotImplemented\n"
    ),
    "Option.default": "@property\ndef default(self):\n    return self._default\n",
    "values": (
        "def values(self):\n"
        '    """Returns a dict of all the values\n'
        '    """\n'
        "    return {k: getattr(self, k) for k in self.options}\n"
    ),
}


def _flag_values(self: Any) -> dict:
    """``TargetConfig.values``: every option's value, its default where it is not set."""
    got = self._values
    return {k: got.get(k, opt._default) for k, opt in self.options.items()}


def _flag_hash(self: Any) -> int:
    """``TargetConfig.__hash__``: numba's hashes the sorted option names (the keys of
    ``values()``), so every flags object of a class has one hash."""
    return hash(tuple(sorted(self.options)))


def _flag_eq(self: Any, other: Any) -> Any:
    """``TargetConfig.__eq__``: equal when every option has the same value."""
    if isinstance(other, targetconfig.TargetConfig):
        return self is other or _flag_values(self) == _flag_values(other)
    return NotImplemented


def _source_lines(fn: Any, n: int) -> str | None:
    """The ``n`` source lines a function starts with (its decorators first), dedented; None
    without its source. Read from the file's cached lines: ``inspect.getsource`` took 17 ms
    for the four methods, on every import."""
    code = getattr(fn, "__code__", None)
    if code is None:
        return None
    lines = linecache.getlines(code.co_filename)
    first = code.co_firstlineno - 1
    if not lines or first + n > len(lines):
        return None
    return textwrap.dedent("".join(lines[first : first + n]))


def install_fast_flags() -> bool:
    """Give numba's ``TargetConfig`` the quicker, equivalent ``values``, ``__hash__`` and
    ``__eq__`` (see the module docstring). Returns whether they are in place: ``False`` when
    this numba's methods are not the ones they were written against."""
    cls = targetconfig.TargetConfig
    if cls.values is _flag_values:
        return True
    for name, source in _FLAG_METHODS.items():
        owner, _, attr = name.rpartition(".")
        method = getattr(targetconfig.Option if owner else cls, attr)
        if _source_lines(method.fget if owner else method, source.count("\n")) != source:
            return False
    cls.values = _flag_values
    cls.__hash__ = _flag_hash
    cls.__eq__ = _flag_eq
    return True


install_fast_flags()


class _Tier:
    """Whether calls from Python run the Python twins of functions not compiled yet
    (:func:`interpret_while`)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.busy: Callable[[], bool] | None = None
        self.checked = 0.0
        self.on = False

    def active(self) -> bool:
        if not self.on:
            return False
        now = time.monotonic()
        if now - self.checked < 0.05:
            return True
        with self.lock:
            self.checked = now
            busy = self.busy
            if busy is None or not busy():
                self.on = False
                self.busy = None
        return self.on


_TIER = _Tier()


def interpret_while(busy: Callable[[], bool]) -> None:
    """Until ``busy()`` turns false (checked at most every 50 ms), a call from Python to a
    project function that is neither compiled in this process nor in numba's cache runs its
    Python twin (:func:`python_twin`) instead of compiling it: another process is compiling
    it. Twins give bit-identical results (the whole env runs under ``NUMBA_DISABLE_JIT=1``
    with the same golden hashes), so a function may run as a twin on one call and compiled on
    the next."""
    with _TIER.lock:
        _TIER.busy = busy
        _TIER.checked = 0.0
        _TIER.on = True


def stop_interpreting() -> None:
    """End :func:`interpret_while` now: from here on, calls compile as usual."""
    with _TIER.lock:
        _TIER.on = False
        _TIER.busy = None


def interpreting() -> bool:
    """Whether :func:`interpret_while`'s condition still holds."""
    return _TIER.active()


_twins: dict[int, tuple[Any, Callable]] = {}  # id -> (dispatcher, twin)
_twin_globals: dict[str, dict] = {}


class _TwinModule(types.ModuleType):
    """What a twin sees for a project module: its twin globals. Read on first use of each
    name (twins run once every twin exists), then held as an ordinary module attribute."""

    def __getattr__(self, attr: str) -> Any:  # only for a name not read yet
        try:
            value = self.__dict__["_twin_globals"][attr]
        except KeyError:
            raise AttributeError(f"module {self.__name__!r} has no attribute {attr!r}") from None
        setattr(self, attr, value)
        return value


_twin_modules: dict[str, _TwinModule] = {}


def _twin_of(value: Any) -> Any:
    """What a twin sees for a global: a compiled function's twin, and for a module that holds
    compiled functions (``L.pw(...)`` in compiled code) a copy of it that holds their twins."""
    if isinstance(value, Dispatcher):
        return python_twin(value)
    if isinstance(value, types.ModuleType) and any(
        isinstance(v, Dispatcher) for v in vars(value).values()
    ):
        mod = _twin_modules.get(value.__name__)
        if mod is None:
            mod = _twin_modules[value.__name__] = _TwinModule(value.__name__)
            mod._twin_globals = _module_twin_globals(value.__name__)
        return mod
    return value


def _module_twin_globals(modname: str) -> dict:
    g = _twin_globals.get(modname)
    if g is None:
        g = dict(vars(importlib.import_module(modname)))
        _twin_globals[modname] = g
        for k, v in list(g.items()):
            g[k] = _twin_of(v)
    return g


def _twin_cell(cell: Any) -> Any:
    try:
        return types.CellType(_twin_of(cell.cell_contents))
    except ValueError:  # an empty cell
        return cell


def python_twin(disp: Any) -> Callable:
    """The pure-Python function of a compiled one, whose own calls to compiled functions call
    their twins too: what ``NUMBA_DISABLE_JIT=1`` would have run."""
    got = _twins.get(id(disp))
    if got is None:
        py = disp.py_func
        g = _module_twin_globals(py.__module__)  # may make this very twin
        got = _twins.get(id(disp))
        if got is None:
            cells = None if py.__closure__ is None else tuple(map(_twin_cell, py.__closure__))
            twin = types.FunctionType(py.__code__, g, py.__name__, py.__defaults__, cells)
            twin.__kwdefaults__ = py.__kwdefaults__
            twin.__qualname__ = py.__qualname__
            got = _twins[id(disp)] = (disp, twin)
    return got[1]


def in_cache(disp: Any, sig: tuple) -> bool:
    """Whether numba's cache index lists ``disp`` for the argument types ``sig`` (True when it
    cannot tell). Reads the index only: loading the compiled code to find out took 0.44 s of a
    warm start."""
    try:
        cache = disp._cache
        key = cache._index_key(sig, disp.targetctx.codegen())
        return key in cache._cache_file._load_index()
    except Exception:
        return True


class SafeCache(FunctionCache):
    """numba's cache of a compiled function, except that an entry it cannot load (a
    truncated or corrupt index or data file: ``UnpicklingError``, ``EOFError``, ...) is a
    miss: the index is emptied and the function compiled again, which writes the entry
    anew. A failure to save is a warning: the function runs compiled all the same."""

    def __init__(self, py_func: Callable) -> None:
        super().__init__(py_func)
        self.what = f"{py_func.__module__}.{py_func.__qualname__}"

    def load_overload(self, sig: Any, target_context: Any) -> Any:
        try:
            return super().load_overload(sig, target_context)
        except Exception as e:
            try:
                self.flush()  # an empty index: the entries are compiled and written again
            except Exception:
                pass
            warnings.warn(
                f"numba's cache entry of {self.what} could not be loaded "
                f"({type(e).__name__}: {str(e)[:100]}); compiling it again",
                RuntimeWarning,
                stacklevel=2,
            )
            return None

    def save_overload(self, sig: Any, data: Any) -> None:
        try:
            super().save_overload(sig, data)
        except Exception as e:
            warnings.warn(
                f"numba's cache entry of {self.what} could not be written "
                f"({type(e).__name__}: {str(e)[:100]})",
                RuntimeWarning,
                stacklevel=2,
            )


def _safe_cache(disp: Any) -> Any:
    """``disp`` with a :class:`SafeCache` in place of numba's plain cache (if it caches)."""
    if type(getattr(disp, "_cache", None)) is FunctionCache:
        disp._cache = SafeCache(disp.py_func)
    return disp


class _ColdWatch:
    """:func:`notice_cold_compile`'s state: the dispatchers watched and the callback."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.ids: set[int] = set()
        self.callback: Callable[[], Any] | None = None

    def check(self, disp: Any, args: tuple) -> None:
        try:
            sig = tuple(disp.typeof_pyval(a) for a in args)
            if disp.overloads.get(sig) is not None or _in_cache(disp, sig):
                return
        except Exception:
            return
        with self.lock:
            callback, self.callback = self.callback, None
            self.ids = set()
        if callback is not None:
            callback()


_COLD = _ColdWatch()


def notice_cold_compile(dispatchers: Any, callback: Callable[[], Any]) -> None:
    """Call ``callback()`` once, when a call from Python to one of ``dispatchers`` is about
    to compile it for argument types numba's cache does not hold (the caller then waits for
    the compiler); never for a call that loads from the cache or runs as Python first."""
    with _COLD.lock:
        _COLD.ids = {id(d) for d in dispatchers}
        _COLD.callback = callback


_in_cache = in_cache  # what TieredDispatcher asks (the tests stand in for it)
_next_look: dict[int, float] = {}  # id(dispatcher) -> when to look in the cache again


class TieredDispatcher(CPUDispatcher):
    """A project function callable from Python: while :func:`interpreting`, a call that would
    compile it runs its Python twin instead, unless numba's cache has it (then it loads). The
    cache index is read at most every 0.1 s per function."""

    def _compile_for_args(self, *args: Any, **kws: Any) -> Any:
        if not kws and _TIER.active():
            now = time.monotonic()
            if now < _next_look.get(id(self), 0.0):
                return python_twin(self)
            sig = tuple(self.typeof_pyval(a) for a in args)
            if not _in_cache(self, sig):
                _next_look[id(self)] = now + 0.1
                return python_twin(self)
        if _COLD.ids and id(self) in _COLD.ids and not kws:
            _COLD.check(self, args)
        return super()._compile_for_args(*args, **kws)

    def enable_caching(self) -> None:
        self._cache = SafeCache(self.py_func)


def njit(*args: Any, **options: Any) -> Any:
    """``numba.njit`` for the project's functions that Python calls: the same compiled
    function, as a :class:`TieredDispatcher`."""
    if args and callable(args[0]) and not options:
        return njit()(args[0])

    def deco(f: Callable) -> Any:
        d = numba.njit(*args, **options)(f)
        if isinstance(d, CPUDispatcher) and type(d) is CPUDispatcher:
            d.__class__ = TieredDispatcher
        return _safe_cache(d)

    return deco


class InnerDispatcher(CPUDispatcher):
    """A dispatcher for compiled code only: calling it from Python raises :class:`TypeError`
    (but while :func:`interpreting`, a twin calling it gets its twin)."""

    def enable_caching(self) -> None:
        self._cache = SafeCache(self.py_func)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if _TIER.active():
            return python_twin(self)(*args, **kwargs)
        f = self.py_func
        raise TypeError(
            f"{f.__module__}.{f.__qualname__} is compiled for calls from compiled code only "
            "(it has no Python wrapper); call it from an @njit function"
        )


def njit_inner(fn: Callable | None = None, **options: Any) -> Any:
    """``@njit(cache=True, **options)`` for a helper Python never calls (see the module
    docstring): ``@njit_inner`` or ``@njit_inner(_nrt=False, forceinline=True)``."""

    def deco(f: Callable) -> Any:
        if config.DISABLE_JIT:
            return f
        opts = {"nopython": True, "boundscheck": None, **options}
        opts["no_cpython_wrapper"] = True
        opts["no_cfunc_wrapper"] = True
        d = InnerDispatcher(py_func=f, locals={}, targetoptions=opts)
        d.enable_caching()
        return d

    return deco(fn) if fn is not None else deco
