"""How the project declares its compiled functions: :func:`njit` for those Python calls,
:func:`njit_inner` for those only other compiled functions call. Both use numba's public
decorator and options only.

``numba.njit`` gives every compiled function two wrappers so Python can call it: a CPython
wrapper (unboxing each argument, boxing the result) and a C-callable one. A helper that only
kernels call never uses them, yet building them slows a first start with an empty numba cache
(docs/architecture.md, "Cold start").

:func:`njit_inner` compiles a helper without them (numba's ``no_cpython_wrapper`` and
``no_cfunc_wrapper`` options). Its dispatcher refuses a call from Python with a
:class:`TypeError` (without a wrapper such a call would crash the interpreter); numba still
types and links it into the kernels that call it exactly as before, so the machine code, and
every result, is the same. With ``NUMBA_DISABLE_JIT=1`` it returns the Python function, like
``njit``.

Literal arguments: numba types a constant passed to a compiled function (``f(x, 0)``,
``f(x, False)``, and even a loop-carried ``n = 0`` handed on as ``n = f(n, ...)``) as a
*literal* type, and compiles ``f`` once for that literal and again for the plain ``int64`` or
``bool`` of its other calls. Where a helper is called both ways, the project passes
``np.int64(0)`` or ``np.bool_(False)`` instead (a plain type), so the helper compiles once; the
results are the same.

A cold numba cache is compiled once per machine (``rally warmup`` does it ahead; the first env
of a process compiles its step kernels on another core meanwhile: :mod:`rally_env.precompile`).
"""

from __future__ import annotations

from collections.abc import Callable
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
    """``@njit(cache=True, **options)`` for a helper Python never calls (see the module
    docstring): ``@njit_inner`` or ``@njit_inner(_nrt=False, forceinline=True)``."""

    def deco(f: Callable) -> Any:
        if config.DISABLE_JIT:
            return f
        opts = {"nopython": True, "boundscheck": None, **options}
        opts.update(no_cpython_wrapper=True, no_cfunc_wrapper=True)
        d = InnerDispatcher(py_func=f, locals={}, targetoptions=opts)
        d.enable_caching()
        return d

    return deco(fn) if fn is not None else deco
