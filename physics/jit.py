"""How the project declares its compiled functions: :func:`njit` for those Python calls,
:func:`njit_inner` for those only other compiled functions call (numba's ``no_cpython_wrapper``
and ``no_cfunc_wrapper`` options: no Python wrappers, a quicker cold start; called from Python
it raises :class:`TypeError`; with ``NUMBA_DISABLE_JIT=1`` it returns the Python function).
Both use numba's public decorator and options only. A helper called with a constant gets
``np.int64(0)`` / ``np.bool_(False)`` so it compiles once. docs/architecture.md ("Compiled
functions: njit and njit_inner") explains both.
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
