"""How the project declares compiled functions that only other compiled functions call.

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
compile time. :func:`install_fast_flags` gives ``TargetConfig`` the same three methods written
to read its values directly. The answers are the same for every flags object (the hash is,
as before, that of the sorted option names). It changes numba only where numba's own methods
are, to the letter, the ones it was written against; on any other numba it leaves numba alone.
"""

from __future__ import annotations

import inspect
import textwrap
from collections.abc import Callable
from typing import Any

from numba import config
from numba.core import targetconfig
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
        try:
            if textwrap.dedent(inspect.getsource(method.fget if owner else method)) != source:
                return False
        except (OSError, TypeError):  # no source to compare with: leave numba alone
            return False
    cls.values = _flag_values
    cls.__hash__ = _flag_hash
    cls.__eq__ = _flag_eq
    return True


install_fast_flags()


class InnerDispatcher(CPUDispatcher):
    """A dispatcher for compiled code only: calling it from Python raises :class:`TypeError`."""

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
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
