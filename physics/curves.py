"""Authored piecewise-linear friction curves with combined-slip families (the wheel-speed
model's ``F_long(kappa | |alpha|)`` and ``F_lat(alpha | |kappa|)``): :class:`Curve`,
:class:`CurveFamily`, :class:`TireCurves`, the named sets (:data:`TIRE_SETS`, :func:`tire_set`)
and the kernels that read a packed family (:func:`curve_eval`, :func:`family_eval`,
:func:`family_eval_seg`; the ``value`` methods call them). docs/vehicles.md ("Authored curves:
selection, packed layout, named sets") gives the rules, the packed columns and the sets.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from physics import layout as L
from physics.errors import ParameterError, check_ext_row
from physics.jit import njit, njit_inner

__all__ = [
    "DEFAULT_TIRE_SET",
    "TIRE_SETS",
    "Curve",
    "CurveFamily",
    "TireCurves",
    "curve_eval",
    "curve_offset",
    "family_eval",
    "tire_set",
]

#: Largest knot value a curve may have (a normalized curve peaks at 1.0 on curve 0).
MAX_Y = 1.5
#: Tolerance of the "curve 0 peaks at exactly 1.0" rule.
PEAK_TOL = 1e-9

# offsets inside a packed curve / family (derived from the layout, never hard-coded elsewhere)
_CX = 1  # x_0 of a curve
_CY = 1 + L.CURVE_KNOTS  # y_0 of a curve
_CS = 1 + 2 * L.CURVE_KNOTS  # slope of piece 0 (x_0..x_1) of a curve, packed once
_FSHARED = 1  # 1.0 when every curve of the family has the same knot x (one search serves all)
_FSEL = 2  # selector_0 of a family
_FINV = 2 + L.CURVE_FAMILY  # 1 / (selector_1 - selector_0), ... packed once
_FCURVE = 2 + 2 * L.CURVE_FAMILY  # curve_0 of a family


# ---------------------------------------------------------------- numba kernels


@njit(cache=True, _nrt=False)
def curve_offset(base: int, c: int) -> int:
    """Column where curve ``c`` of the family packed at column ``base`` starts."""
    return base + _FCURVE + c * L.CURVE_SIZE


@njit(cache=True, inline="always", _nrt=False)
def curve_eval(p, k, off, x):
    """The curve packed at column ``off`` of row ``k`` at slip ``x`` (slip ratio, or slip angle
    in rad): odd, piecewise linear in |x|, saturating past the last knot.

    Returns the signed normalized force (same sign as ``x``, 0.0 at x = 0 and for NaN x); an
    empty curve (``n_knots`` = 0) evaluates to 0.0.
    """
    n = int(p[k, off])
    if n < 1:
        return 0.0
    a = abs(x)
    last = n - 1
    v = p[k, off + _CY + last]
    for i in range(last):
        x1 = p[k, off + _CX + i + 1]
        if a < x1:
            x0 = p[k, off + _CX + i]
            y0 = p[k, off + _CY + i]
            y1 = p[k, off + _CY + i + 1]
            t = (a - x0) / (x1 - x0)
            v = y0 + t * (y1 - y0)
            v = min(max(v, min(y0, y1)), max(y0, y1))
            break
    if x < 0.0:
        return -v
    if x > 0.0:
        return v
    return 0.0


@njit(cache=True, _nrt=False)
def family_eval(p, k, base, x, sel):
    """The family packed at column ``base`` of row ``k`` (``layout.PX_CURVE_LONG`` or
    ``PX_CURVE_LAT``) at slip ``x``, with the other slip's absolute value ``|sel|`` as selector.

    Returns the linear interpolation between the two curves whose selectors bracket |sel|; the
    first curve below the first selector, the last past the last selector (and for NaN sel).
    """
    n = int(p[k, base])
    c0 = base + _FCURVE
    s = abs(sel)
    if n < 2 or s <= p[k, base + _FSEL]:
        return curve_eval(p, k, c0, x)
    for j in range(n - 1):
        s1 = p[k, base + _FSEL + j + 1]
        if s < s1:
            s0 = p[k, base + _FSEL + j]
            v0 = curve_eval(p, k, c0 + j * L.CURVE_SIZE, x)
            v1 = curve_eval(p, k, c0 + (j + 1) * L.CURVE_SIZE, x)
            t = (s - s0) / (s1 - s0)
            v = v0 + t * (v1 - v0)
            return min(max(v, min(v0, v1)), max(v0, v1))
    return curve_eval(p, k, c0 + (n - 1) * L.CURVE_SIZE, x)


@njit_inner(inline="always", _nrt=False)
def _curve_seg(p, k, off, a):
    """Curve at ``a`` >= 0: (value, slope, segment start, segment end) of its linear piece."""
    n = int(p[k, off])
    if n < 1:
        return 0.0, 0.0, 0.0, 1e300
    last = n - 1
    for i in range(last):
        x1 = p[k, off + _CX + i + 1]
        if a < x1:
            x0 = p[k, off + _CX + i]
            slope = p[k, off + _CS + i]
            return p[k, off + _CY + i] + (a - x0) * slope, slope, x0, x1
    return p[k, off + _CY + last], 0.0, p[k, off + _CX + last], 1e300


@njit(cache=True, inline="always", _nrt=False)
def family_eval_seg(p, k, base, x, sel):
    """The family at (x, sel) as a local linear piece: ``value + slope * (x' - x)`` is exact
    for any x' in [lo, hi] (same selector), because every curve is piecewise linear.

    Returns:
        (value, slope, lo, hi): the signed value at ``x`` (as :func:`family_eval`, without its
        rounding guard), d value / dx there, and the interval of x around ``x`` on which the
        piece holds (the wheel-speed solve's use: docs/vehicles.md).
    """
    a = abs(x)
    n = int(p[k, base])
    c0 = base + _FCURVE
    s = abs(sel)
    v = 0.0
    d = 0.0
    lo = 0.0
    hi = 1e300
    if n < 2 or s <= p[k, base + _FSEL]:
        v, d, lo, hi = _curve_seg(p, k, c0, a)
    elif p[k, base + _FSHARED] > 0.5 and s < p[k, base + _FSEL + n - 1]:
        # the curves share their knot x: one search, then the same arithmetic per curve
        j = 0
        while s >= p[k, base + _FSEL + j + 1]:
            j += 1
        s0 = p[k, base + _FSEL + j]
        s1 = p[k, base + _FSEL + j + 1]
        oa = c0 + j * L.CURVE_SIZE
        ob = oa + L.CURVE_SIZE
        nk = int(p[k, oa])
        i = nk - 1
        for q in range(nk - 1):
            if a < p[k, oa + _CX + q + 1]:
                i = q
                break
        if i == nk - 1:
            v0 = p[k, oa + _CY + i]
            v1 = p[k, ob + _CY + i]
            d0 = 0.0
            d1 = 0.0
            lo = p[k, oa + _CX + i]
        else:
            x0 = p[k, oa + _CX + i]
            d0 = p[k, oa + _CS + i]
            d1 = p[k, ob + _CS + i]
            v0 = p[k, oa + _CY + i] + (a - x0) * d0
            v1 = p[k, ob + _CY + i] + (a - x0) * d1
            lo = x0
            hi = p[k, oa + _CX + i + 1]
        t = (s - s0) * p[k, base + _FINV + j]
        v = v0 + t * (v1 - v0)
        d = d0 + t * (d1 - d0)
    else:
        found = False
        for j in range(n - 1):
            s1 = p[k, base + _FSEL + j + 1]
            if s < s1:
                s0 = p[k, base + _FSEL + j]
                v0, d0, lo0, hi0 = _curve_seg(p, k, c0 + j * L.CURVE_SIZE, a)
                v1, d1, lo1, hi1 = _curve_seg(p, k, c0 + (j + 1) * L.CURVE_SIZE, a)
                t = (s - s0) * p[k, base + _FINV + j]
                v = v0 + t * (v1 - v0)
                d = d0 + t * (d1 - d0)
                lo = lo0 if lo0 > lo1 else lo1
                hi = hi0 if hi0 < hi1 else hi1
                found = True
                break
        if not found:
            v, d, lo, hi = _curve_seg(p, k, c0 + (n - 1) * L.CURVE_SIZE, a)
    if x < 0.0:
        return -v, d, -hi, -lo
    return v, d, lo, hi


# ---------------------------------------------------------------- validated data


def _reals(owner: str, name: str, value: object) -> tuple[float, ...]:
    """Coerce a sequence of finite real numbers to a tuple of floats, or raise."""
    if isinstance(value, (str, bytes)) or not hasattr(value, "__len__"):
        raise ParameterError(owner, name, value, "must be a sequence of real numbers")
    out = []
    for i, v in enumerate(value):  # type: ignore[arg-type]
        if isinstance(v, (bool, np.bool_)) or not isinstance(
            v, (int, float, np.floating, np.integer)
        ):
            raise ParameterError(owner, name, value, f"entry {i} ({v!r}) is not a real number")
        f = float(v)
        if not math.isfinite(f):
            raise ParameterError(owner, name, value, f"entry {i} ({v!r}) must be finite")
        out.append(f)
    return tuple(out)


@dataclass(frozen=True, slots=True)
class Curve:
    """One normalized friction curve: piecewise linear in |x|, odd, saturating.

    Attributes:
        x: knot slips, 2..``layout.CURVE_KNOTS`` of them, x[0] = 0, strictly increasing
            (slip ratio, or slip angle in rad).
        y: normalized force at each knot, y[0] = 0, each in [0, 1.5].
    """

    x: tuple[float, ...]
    y: tuple[float, ...]

    def __post_init__(self) -> None:
        o = "Curve"
        xs = _reals(o, "x", self.x)
        ys = _reals(o, "y", self.y)
        if not 2 <= len(xs) <= L.CURVE_KNOTS:
            raise ParameterError(o, "x", self.x, f"must have 2..{L.CURVE_KNOTS} knots")
        if len(ys) != len(xs):
            raise ParameterError(o, "y", self.y, f"must have as many values as x ({len(xs)})")
        if xs[0] != 0.0:
            raise ParameterError(o, "x", self.x, "must start at 0 (x[0] == 0)")
        for i in range(1, len(xs)):
            if not xs[i] > xs[i - 1]:
                raise ParameterError(o, "x", self.x, f"must be strictly increasing (at {i})")
        if ys[0] != 0.0:
            raise ParameterError(o, "y", self.y, "must start at 0 (y[0] == 0)")
        for i, v in enumerate(ys):
            if not 0.0 <= v <= MAX_Y:
                raise ParameterError(o, "y", self.y, f"entry {i} ({v!r}) must be in [0, {MAX_Y}]")
        object.__setattr__(self, "x", xs)
        object.__setattr__(self, "y", ys)

    @property
    def peak(self) -> float:
        """Largest knot value (the curve's maximum)."""
        return max(self.y)

    @property
    def peak_x(self) -> float:
        """Slip of the (first) maximum."""
        return self.x[self.y.index(self.peak)]

    def value(self, x: float) -> float:
        """The curve at slip ``x``: :func:`curve_eval` (the kernels' code) on the packed curve."""
        row = np.zeros((1, L.CURVE_SIZE))
        self.pack_into(row[0], 0)
        return curve_eval(row, 0, 0, float(x))

    def pack_into(self, row: np.ndarray, off: int) -> None:
        """Write ``[n_knots, x.., y..]`` (zero-padded) into ``row[off : off + CURVE_SIZE]``."""
        row[off : off + L.CURVE_SIZE] = 0.0
        n = len(self.x)
        row[off] = float(n)
        row[off + _CX : off + _CX + n] = self.x
        row[off + _CY : off + _CY + n] = self.y
        for i in range(n - 1):
            row[off + _CS + i] = (self.y[i + 1] - self.y[i]) / (self.x[i + 1] - self.x[i])


@dataclass(frozen=True, slots=True)
class CurveFamily:
    """Curves of one force selected by the other slip (combined slip).

    Attributes:
        selectors: |other slip| at which each curve applies: selectors[0] = 0, strictly
            increasing, finite (|slip angle| in rad for the longitudinal family, |slip ratio|
            for the lateral one).
        curves: 1..``layout.CURVE_FAMILY`` curves, one per selector.
    """

    selectors: tuple[float, ...]
    curves: tuple[Curve, ...]

    def __post_init__(self) -> None:
        o = "CurveFamily"
        sel = _reals(o, "selectors", self.selectors)
        if isinstance(self.curves, (str, bytes)) or not hasattr(self.curves, "__len__"):
            raise ParameterError(o, "curves", self.curves, "must be a sequence of Curve")
        curves = tuple(self.curves)
        if not 1 <= len(curves) <= L.CURVE_FAMILY:
            raise ParameterError(o, "curves", self.curves, f"must hold 1..{L.CURVE_FAMILY} curves")
        for i, c in enumerate(curves):
            if not isinstance(c, Curve):
                raise ParameterError(o, "curves", self.curves, f"entry {i} is not a Curve")
        if len(sel) != len(curves):
            raise ParameterError(
                o, "selectors", self.selectors, f"must have one per curve ({len(curves)})"
            )
        if sel[0] != 0.0:
            raise ParameterError(o, "selectors", self.selectors, "must start at 0")
        for i in range(1, len(sel)):
            if not sel[i] > sel[i - 1]:
                raise ParameterError(
                    o, "selectors", self.selectors, f"must be strictly increasing (at {i})"
                )
        object.__setattr__(self, "selectors", sel)
        object.__setattr__(self, "curves", curves)

    @property
    def peak(self) -> float:
        """Largest value any curve of the family reaches."""
        return max(c.peak for c in self.curves)

    def value(self, x: float, sel: float) -> float:
        """The family at slip ``x`` and selector ``sel``: :func:`family_eval` (the kernels'
        code) on the packed family."""
        row = np.zeros((1, L.CURVE_SET_SIZE))
        self.pack_into(row[0], 0)
        return family_eval(row, 0, 0, float(x), float(sel))

    def pack_into(self, row: np.ndarray, base: int) -> None:
        """Write the family into ``row[base : base + CURVE_SET_SIZE]`` (unused entries 0)."""
        row[base : base + L.CURVE_SET_SIZE] = 0.0
        row[base] = float(len(self.curves))
        row[base + _FSHARED] = 1.0 if len({c.x for c in self.curves}) == 1 else 0.0
        row[base + _FSEL : base + _FSEL + len(self.selectors)] = self.selectors
        for j in range(len(self.selectors) - 1):
            row[base + _FINV + j] = 1.0 / (self.selectors[j + 1] - self.selectors[j])
        for c, curve in enumerate(self.curves):
            curve.pack_into(row, curve_offset(base, c))


@dataclass(frozen=True, slots=True)
class TireCurves:
    """A tire set: the normalized longitudinal and lateral curve families.

    Attributes:
        longitudinal: x = slip ratio, selector = |slip angle| (rad).
        lateral: x = slip angle (rad), selector = |slip ratio|.
        name: label of the set.
    """

    longitudinal: CurveFamily
    lateral: CurveFamily
    name: str = "custom"

    def __post_init__(self) -> None:
        o = "TireCurves"
        for fname in ("longitudinal", "lateral"):
            fam = getattr(self, fname)
            if not isinstance(fam, CurveFamily):
                raise ParameterError(o, fname, fam, "must be a CurveFamily")
            pk = fam.curves[0].peak
            if abs(pk - 1.0) > PEAK_TOL:
                raise ParameterError(
                    o, fname, pk, "must be normalized: curve 0 must peak at exactly 1.0"
                )
        if not isinstance(self.name, str) or not self.name:
            raise ParameterError(o, "name", self.name, "must be a non-empty string")

    @property
    def peak_slip_ratio(self) -> float:
        """Slip ratio of the longitudinal peak (curve 0, no slip angle)."""
        return self.longitudinal.curves[0].peak_x

    @property
    def peak_slip_angle_rad(self) -> float:
        """Slip angle (rad) of the lateral peak (curve 0, no slip ratio)."""
        return self.lateral.curves[0].peak_x

    def pack_into(self, row: np.ndarray) -> None:
        """Write both families into the float64 parameter row ``row`` (>= N_PARAMS_EXT,):
        ``CURVE_SET_SIZE`` columns from ``PX_CURVE_LONG`` and from ``PX_CURVE_LAT`` each."""
        check_ext_row("TireCurves", row)
        self.longitudinal.pack_into(row, L.PX_CURVE_LONG)
        self.lateral.pack_into(row, L.PX_CURVE_LAT)


# ---------------------------------------------------------------- named sets


def seed_lateral(alpha: float, peak: float, clamp: float) -> float:
    """The seed's normalised lateral grip 2s/(1+s^2), s = alpha/peak, |s| clamped at ``clamp``
    (compiled: :func:`lateral_curve`, the basic model's tire; the named sets' lateral knots).

    Signed like ``alpha`` (the force opposes it): odd, |value| <= 1, exactly 1 at the peak, and
    never below 2c/(1+c^2) past the clamp (0.92 for the seed's c = 1.5).
    """
    s = alpha / peak
    a = abs(s)
    if a > clamp:
        a = clamp
    f = 2.0 * a / (1.0 + a * a)
    if s < 0.0:
        return -f
    if s > 0.0:
        return f
    return 0.0


#: :func:`seed_lateral` compiled, for the kernels.
lateral_curve = njit(cache=True, _nrt=False)(seed_lateral)


def _scaled(c: Curve, f: float) -> Curve:
    return Curve(c.x, tuple(f * v for v in c.y))


_RALLY_LAT_S = (0.0, 0.25, 0.375, 0.5, 0.75, 1.0, 1.25, 1.5)
_RALLY_LAT0 = Curve(
    tuple(0.18 * s for s in _RALLY_LAT_S), tuple(seed_lateral(s, 1.0, 1.5) for s in _RALLY_LAT_S)
)
_RALLY_LONG_X = (0.0, 0.05, 0.10, 0.15, 0.30, 0.60, 1.0)
_RALLY = TireCurves(
    longitudinal=CurveFamily(
        (0.0, 0.2, 0.5),
        (
            Curve(_RALLY_LONG_X, (0.0, 0.6, 0.923, 1.0, 0.93, 0.85, 0.80)),
            Curve(_RALLY_LONG_X, (0.0, 0.5, 0.75, 0.82, 0.80, 0.74, 0.70)),
            Curve(_RALLY_LONG_X, (0.0, 0.3, 0.45, 0.52, 0.55, 0.55, 0.55)),
        ),
    ),
    lateral=CurveFamily(
        (0.0, 0.15, 0.5, 1.0), tuple(_scaled(_RALLY_LAT0, f) for f in (1.0, 0.85, 0.55, 0.30))
    ),
    name="rally",
)

_TARMAC_LONG_X = (0.0, 0.04, 0.07, 0.10, 0.20, 0.50, 1.0)
_TARMAC_LAT0 = Curve(
    (0.0, 0.03, 0.06, 0.09, 0.12, 0.18, 0.30, 0.60),
    (*(seed_lateral(s, 1.0, 1.5) for s in (0.0, 0.25, 0.5, 0.75, 1.0)), 0.88, 0.75, 0.70),
)
_TARMAC = TireCurves(
    longitudinal=CurveFamily(
        (0.0, 0.12, 0.35),
        (
            Curve(_TARMAC_LONG_X, (0.0, 0.6, 0.9, 1.0, 0.85, 0.72, 0.65)),
            Curve(_TARMAC_LONG_X, (0.0, 0.5, 0.72, 0.78, 0.70, 0.60, 0.55)),
            Curve(_TARMAC_LONG_X, (0.0, 0.28, 0.40, 0.45, 0.45, 0.42, 0.40)),
        ),
    ),
    lateral=CurveFamily(
        (0.0, 0.10, 0.40, 1.0), tuple(_scaled(_TARMAC_LAT0, f) for f in (1.0, 0.80, 0.50, 0.25))
    ),
    name="tarmac",
)

_LINEAR = TireCurves(
    longitudinal=CurveFamily((0.0,), (Curve((0.0, 0.15), (0.0, 1.0)),)),
    lateral=CurveFamily((0.0,), (Curve((0.0, 0.18), (0.0, 1.0)),)),
    name="linear",
)

#: The named tire sets, by name.
TIRE_SETS: dict[str, TireCurves] = {t.name: t for t in (_RALLY, _TARMAC, _LINEAR)}
#: The set used when a vehicle names none.
DEFAULT_TIRE_SET = "rally"


def tire_set(name: str) -> TireCurves:
    """The named tire set.

    Raises:
        ParameterError: ``name`` is not one of :data:`TIRE_SETS` (the message lists them).
    """
    try:
        return TIRE_SETS[name]
    except (KeyError, TypeError):
        known = ", ".join(sorted(TIRE_SETS))
        raise ParameterError("tire_set", "name", name, f"must be one of: {known}") from None
