"""Deterministic elementary functions (``atan2x``, ``sincosx``) from ``+ - * /``, ``sqrt`` and
``floor`` only: bit-identical on every platform, compiled or not, where libm's may differ
(docs/architecture.md, "The determinism contract"); a few ulp over the full range.
"""

from __future__ import annotations

import math

from physics.jit import njit, njit_inner

PI = 3.141592653589793
HALF_PI = 1.5707963267948966
INV_HALF_PI = 0.6366197723675814


# fdlibm's atan reduction (breakpoints 7/16, 11/16, 19/16, 39/16) and odd polynomial
_AT0 = 3.33333333333329318027e-01
_AT1 = -1.99999999998764832476e-01
_AT2 = 1.42857142725034663711e-01
_AT3 = -1.11111104054623557880e-01
_AT4 = 9.09088713343650656196e-02
_AT5 = -7.69187620504482999495e-02
_AT6 = 6.66107313738753120669e-02
_AT7 = -5.83357013379057348645e-02
_AT8 = 4.97687799461593236017e-02
_AT9 = -3.65315727442169155270e-02
_AT10 = 1.62858201153657823623e-02


@njit_inner(_nrt=False)
def _atan_pos(t: float) -> float:
    """atan(t) for t >= 0: one division and eleven multiply-adds (the fdlibm scheme)."""
    if t < 0.4375:
        hi = 0.0
        lo = 0.0
        x = t
        ident = False
    elif t < 0.6875:
        hi = 4.63647609000806093515e-01
        lo = 2.26987774529616870924e-17
        x = (2.0 * t - 1.0) / (2.0 + t)
        ident = True
    elif t < 1.1875:
        hi = 7.85398163397448278999e-01
        lo = 3.06161699786838301793e-17
        x = (t - 1.0) / (t + 1.0)
        ident = True
    elif t < 2.4375:
        hi = 9.82793723247329054082e-01
        lo = 1.39033110312309984516e-17
        x = (t - 1.5) / (1.0 + 1.5 * t)
        ident = True
    else:
        hi = 1.57079632679489655800e00
        lo = 6.12323399573676603587e-17
        x = -1.0 / t
        ident = True
    z = x * x
    w = z * z
    s1 = z * (_AT0 + w * (_AT2 + w * (_AT4 + w * (_AT6 + w * (_AT8 + w * _AT10)))))
    s2 = w * (_AT1 + w * (_AT3 + w * (_AT5 + w * (_AT7 + w * _AT9))))
    if not ident:
        return x - x * (s1 + s2)
    return hi - ((x * (s1 + s2) - lo) - x)


@njit(cache=True, _nrt=False)
def atan2x(y: float, x: float) -> float:
    """Four-quadrant arctangent of y/x in (-pi, pi]; atan2x(0, 0) is 0."""
    ax = abs(x)
    ay = abs(y)
    if ax == 0.0 and ay == 0.0:
        return 0.0
    if ay <= ax:
        a = _atan_pos(ay / ax)
    else:
        a = HALF_PI - _atan_pos(ax / ay)
    if x < 0.0:
        a = PI - a
    if y < 0.0:
        a = -a
    return a


@njit_inner(_nrt=False)
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


@njit_inner(_nrt=False)
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


@njit(cache=True, _nrt=False)
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
