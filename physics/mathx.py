"""Deterministic elementary functions built only from ``+ - * /`` and ``sqrt``.

libm's ``sin``, ``cos``, ``atan2`` and ``exp`` may differ in their last bits between platforms,
libm versions and vectorised code paths. Everything inside the physics step uses these
replacements instead: IEEE-754 guarantees correctly rounded ``+ - * / sqrt``, and ``floor`` is
exact, so the results below are bit-identical everywhere, compiled by numba or run as plain
Python (``NUMBA_DISABLE_JIT=1``).

Accuracy (checked in ``tests/physics/test_mathx.py`` against numpy): a few ulp over the full
range, far below anything the vehicle model can feel.
"""

from __future__ import annotations

import math

from numba import njit

PI = 3.141592653589793
HALF_PI = 1.5707963267948966
TWO_PI = 6.283185307179586
INV_HALF_PI = 0.6366197723675814


@njit(cache=True)
def _atan_unit(t: float) -> float:
    """atan(t) for 0 <= t <= 1 by two half-angle reductions and a Taylor series."""
    # atan(t) = 2 atan(t / (1 + sqrt(1 + t^2))); twice brings t below tan(pi/16) ~ 0.199.
    t = t / (1.0 + math.sqrt(1.0 + t * t))
    t = t / (1.0 + math.sqrt(1.0 + t * t))
    t2 = t * t
    # Horner form of t - t^3/3 + t^5/5 - ... - t^19/19 (truncation error < 1e-16 here).
    p = -1.0 / 19.0
    p = p * t2 + 1.0 / 17.0
    p = p * t2 - 1.0 / 15.0
    p = p * t2 + 1.0 / 13.0
    p = p * t2 - 1.0 / 11.0
    p = p * t2 + 1.0 / 9.0
    p = p * t2 - 1.0 / 7.0
    p = p * t2 + 1.0 / 5.0
    p = p * t2 - 1.0 / 3.0
    p = p * t2 + 1.0
    return 4.0 * t * p


@njit(cache=True)
def atan2x(y: float, x: float) -> float:
    """Four-quadrant arctangent of y/x in (-pi, pi]; atan2x(0, 0) is 0."""
    ax = abs(x)
    ay = abs(y)
    if ax == 0.0 and ay == 0.0:
        return 0.0
    if ay <= ax:
        a = _atan_unit(ay / ax)
    else:
        a = HALF_PI - _atan_unit(ax / ay)
    if x < 0.0:
        a = PI - a
    if y < 0.0:
        a = -a
    return a


@njit(cache=True)
def _sin_poly(x: float) -> float:
    """sin(x) for |x| <= pi/4 (Taylor series to x^17, Horner form)."""
    x2 = x * x
    p = 1.0 / 355687428096000.0
    p = p * x2 - 1.0 / 1307674368000.0
    p = p * x2 + 1.0 / 6227020800.0
    p = p * x2 - 1.0 / 39916800.0
    p = p * x2 + 1.0 / 362880.0
    p = p * x2 - 1.0 / 5040.0
    p = p * x2 + 1.0 / 120.0
    p = p * x2 - 1.0 / 6.0
    p = p * x2 + 1.0
    return x * p


@njit(cache=True)
def _cos_poly(x: float) -> float:
    """cos(x) for |x| <= pi/4 (Taylor series to x^18, Horner form)."""
    x2 = x * x
    p = -1.0 / 6402373705728000.0
    p = p * x2 + 1.0 / 20922789888000.0
    p = p * x2 - 1.0 / 87178291200.0
    p = p * x2 + 1.0 / 479001600.0
    p = p * x2 - 1.0 / 3628800.0
    p = p * x2 + 1.0 / 40320.0
    p = p * x2 - 1.0 / 720.0
    p = p * x2 + 1.0 / 24.0
    p = p * x2 - 0.5
    return p * x2 + 1.0


@njit(cache=True)
def sincosx(a: float) -> tuple[float, float]:
    """(sin a, cos a) with range reduction by quarter turns."""
    k = math.floor(a * INV_HALF_PI + 0.5)
    # Cody-Waite style two-part pi/2 keeps the reduction accurate for |a| up to ~1e6.
    r = (a - k * 1.5707963267341256) - k * 6.077100506506192e-11
    q = int(k) & 3
    s = _sin_poly(r)
    c = _cos_poly(r)
    if q == 0:
        return s, c
    if q == 1:
        return c, -s
    if q == 2:
        return -s, -c
    return -c, s


@njit(cache=True)
def wrap_angle(a: float) -> float:
    """Wrap an angle to [-pi, pi)."""
    return a - TWO_PI * math.floor((a + PI) / TWO_PI)
