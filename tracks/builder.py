"""Lay out a centerline as straights and eased turns, and get knots for a stage file.

:class:`PathBuilder` integrates the curvature along the distance (heading and position with the
deterministic ``physics.mathx.sincosx``); docs/stages.md, "Laying out a stage by hand", has
an example.
"""

from __future__ import annotations

import math

import numpy as np

from physics.jit import njit
from physics.mathx import PI, sincosx

#: Integration step (m).
STEP_M = 0.5
#: Knots are never further apart than this fraction of the local radius (rad of turn).
KNOT_ANGLE = 0.3


@njit(cache=True)
def integrate_pieces(pieces, x0, y0, th0, z0, step, spacing, knot_angle):
    """Integrate a curvature profile into knots.

    Args:
        pieces: (m, 4) float64 rows ``length_m, curvature_start, curvature_end, grade``; the
            curvature (1/m, positive left) varies linearly along each piece, the elevation rises
            by ``grade`` per metre.
        x0, y0, th0, z0: start position (m), heading (rad, counter-clockwise from +x), elevation.
        step: integration step (m).
        spacing: longest knot spacing (m).
        knot_angle: knots are at most ``knot_angle / |curvature|`` apart.

    Returns:
        (knots (n, 3), end_state (4,) x, y, heading, z, total_length_m).
    """
    total = 0.0
    for p in range(pieces.shape[0]):
        total += pieces[p, 0]
    n_max = int(total / 1.0) + pieces.shape[0] + 8
    knots = np.empty((n_max, 3))
    knots[0, 0] = x0
    knots[0, 1] = y0
    knots[0, 2] = z0
    nk = 1
    x = x0
    y = y0
    th = th0
    z = z0
    since = 0.0
    done = 0.0
    growth = 1.25
    last_gap = spacing
    for p in range(pieces.shape[0]):
        ln = pieces[p, 0]
        k0 = pieces[p, 1]
        k1 = pieces[p, 2]
        g = pieces[p, 3]
        if ln <= 0.0:
            continue
        n_steps = max(1, int(math.ceil(ln / step)))
        h = ln / n_steps
        for q in range(n_steps):
            u0 = q * h
            ka = k0 + (k1 - k0) * u0 / ln
            km = k0 + (k1 - k0) * (u0 + 0.5 * h) / ln
            kb = k0 + (k1 - k0) * (u0 + h) / ln
            thm = th + 0.25 * h * (ka + km)
            sn, cs = sincosx(thm)
            x += h * cs
            y += h * sn
            th += 0.5 * h * (ka + kb)
            z += g * h
            since += h
            done += h
            lim = spacing
            ak = abs(kb)
            if ak * lim > knot_angle:
                lim = knot_angle / ak
            if lim > growth * last_gap:
                lim = growth * last_gap
            if since >= lim - 1e-9 and total - done > 0.5 * lim:
                knots[nk, 0] = x
                knots[nk, 1] = y
                knots[nk, 2] = z
                nk += 1
                last_gap = since
                since = 0.0
    knots[nk, 0] = x
    knots[nk, 1] = y
    knots[nk, 2] = z
    nk += 1
    return knots[:nk].copy(), np.array([x, y, th, z, total])


def _turn_parts(
    radius_m: float, angle_deg: float, ease_m: float | None
) -> tuple[float, float, float]:
    """(ease length, constant-curvature length, curvature) of an eased turn."""
    if not radius_m > 0 or angle_deg == 0:
        raise ValueError(
            f"turn needs radius > 0 and a non-zero angle, got {radius_m!r}, {angle_deg!r}"
        )
    a = abs(float(angle_deg)) * (PI / 180.0)
    r = float(radius_m)
    e = min(max(0.6 * r, 15.0), 0.5 * r * a) if ease_m is None else float(ease_m)
    e = min(e, r * a)  # the two ramps turn e / R together
    k = (1.0 if angle_deg > 0 else -1.0) / r
    return e, r * a - e, k


def turn_length(radius_m: float, angle_deg: float, ease_m: float | None = None) -> float:
    """Length (m) of the eased turn :meth:`PathBuilder.turn` lays for these arguments."""
    e, mid, _ = _turn_parts(radius_m, angle_deg, ease_m)
    return 2 * e + max(mid, 0.0)


class PathBuilder:
    """Accumulate straights and eased turns; read back knots.

    Args:
        x_m, y_m: start position (m).
        heading_deg: start heading, degrees counter-clockwise from +x.
        z_m: start elevation (m).
        knot_spacing_m: longest distance between emitted knots (m).

    Every method returns ``self`` so calls chain. ``s_m`` is the distance laid so far (the
    stage's arc length to within centimetres, so it can place sections and features).
    """

    def __init__(
        self,
        x_m: float = 0.0,
        y_m: float = 0.0,
        heading_deg: float = 0.0,
        z_m: float = 0.0,
        knot_spacing_m: float = 10.0,
    ):
        self._start = (float(x_m), float(y_m), float(heading_deg) * (PI / 180.0), float(z_m))
        self._pieces: list[tuple[float, float, float, float]] = []
        self._grade = 0.0
        self._spacing = float(knot_spacing_m)
        self.s_m = 0.0

    def grade(self, grade: float) -> PathBuilder:
        """Set the grade (rise per metre, e.g. 0.06 for 6 %) of the pieces that follow."""
        self._grade = float(grade)
        return self

    def straight(self, length_m: float, grade: float | None = None) -> PathBuilder:
        """A straight of ``length_m`` metres."""
        if length_m <= 0:
            raise ValueError(f"straight length must be > 0, got {length_m!r}")
        g = self._grade if grade is None else float(grade)
        self._pieces.append((float(length_m), 0.0, 0.0, g))
        self.s_m += float(length_m)
        return self

    def turn(
        self,
        radius_m: float,
        angle_deg: float,
        ease_m: float | None = None,
        grade: float | None = None,
    ) -> PathBuilder:
        """A turn through ``angle_deg`` (positive = left) at ``radius_m`` (the middle part's),
        eased in and out by curvature ramps ``ease_m`` long (default
        ``min(max(0.6 R, 15), R |angle| / 2)``), at ``grade`` (default: the current grade).
        """
        e, mid, k = _turn_parts(radius_m, angle_deg, ease_m)
        g = self._grade if grade is None else float(grade)
        if e > 0:
            self._pieces.append((e, 0.0, k, g))
        if mid > 1e-9:
            self._pieces.append((mid, k, k, g))
        if e > 0:
            self._pieces.append((e, k, 0.0, g))
        self.s_m += 2 * e + max(mid, 0.0)
        return self

    def hairpin(self, radius_m: float, left: bool, grade: float | None = None) -> PathBuilder:
        """A 180° turn."""
        return self.turn(radius_m, 180.0 if left else -180.0, grade=grade)

    def pieces(self) -> np.ndarray:
        """(m, 4) curvature pieces ``length_m, k_start, k_end, grade``."""
        return np.array(self._pieces, np.float64).reshape(-1, 4)

    def _integrate(self) -> tuple[np.ndarray, np.ndarray]:
        if not self._pieces:
            raise ValueError("the builder is empty")
        x0, y0, th0, z0 = self._start
        return integrate_pieces(self.pieces(), x0, y0, th0, z0, STEP_M, self._spacing, KNOT_ANGLE)

    def knots(self, decimals: int | None = 2) -> np.ndarray:
        """(n, 3) knots ``x, y, z`` of an open centerline (rounded to ``decimals``)."""
        k, _ = self._integrate()
        return np.round(k, decimals) if decimals is not None else k

    def end_pose(self) -> tuple[float, float, float, float]:
        """(x, y, heading_rad, z) at the end of the last piece."""
        _, e = self._integrate()
        return float(e[0]), float(e[1]), float(e[2]), float(e[3])

    def closed_knots(self, decimals: int | None = 2) -> np.ndarray:
        """Knots of a closed loop: the closure gap is spread linearly along the path.

        The pieces should turn through ±360° and end close to the start (a few metres); the
        remaining position and elevation error is distributed over the knots in proportion to
        distance, and the final knot (which would repeat the first) is dropped.
        """
        k, _ = self._integrate()
        gap = k[-1] - k[0]
        d = np.diff(k[:, :2], axis=0)
        c = np.concatenate([[0.0], np.cumsum(np.sqrt(d[:, 0] * d[:, 0] + d[:, 1] * d[:, 1]))])
        out = k - gap[None, :] * (c / c[-1])[:, None]
        out = out[:-1]
        return np.round(out, decimals) if decimals is not None else out


def _solve(a: list[list[float]], b: list[float]) -> list[float] | None:
    """Solve a small dense linear system (Gaussian elimination, partial pivoting)."""
    n = len(b)
    m = [[*row, b[i]] for i, row in enumerate(a)]
    for c in range(n):
        p = max(range(c, n), key=lambda r: abs(m[r][c]))
        if abs(m[p][c]) < 1e-9:
            return None
        m[c], m[p] = m[p], m[c]
        for r in range(c + 1, n):
            f = m[r][c] / m[c][c]
            for k in range(c, n + 1):
                m[r][k] -= f * m[c][k]
    x = [0.0] * n
    for r in range(n - 1, -1, -1):
        acc = m[r][n]
        for k in range(r + 1, n):
            acc -= m[r][k] * x[k]
        x[r] = acc / m[r][r]
    return x


def loop_builder(
    turns: list[tuple[float, float]],
    straights_m: list[float],
    heading_deg: float = 0.0,
    length_m: float | None = None,
    min_straight_m: float = 10.0,
    knot_spacing_m: float = 10.0,
) -> tuple[PathBuilder, list[float]] | None:
    """Lay out a closed loop: straight 0, turn 0, straight 1, turn 1, ... with the turn angles
    adding up to ±360°, the straights corrected to close it (docs/stages.md).

    Args:
        turns: ``(radius_m, angle_deg)`` per turn.
        straights_m: wanted length of the straight before each turn (m).
        heading_deg: heading of the first straight.
        length_m: wanted lap length (m), or ``None``.
        min_straight_m: the correction must leave every straight at least this long.

    Returns:
        (builder, corrected straight lengths), or ``None`` if no valid correction exists.
    """
    if len(turns) != len(straights_m) or len(turns) < 3:
        raise ValueError("a loop needs at least 3 turns, each preceded by a straight")

    def build(lengths: list[float]) -> PathBuilder:
        b = PathBuilder(0.0, 0.0, heading_deg, 0.0, knot_spacing_m=knot_spacing_m)
        for (radius, a), ln in zip(turns, lengths, strict=True):
            b.straight(ln)
            b.turn(radius, a)
        return b

    lens = [float(v) for v in straights_m]
    b = build(lens)
    x, y, _, _ = b.end_pose()
    dirs = []
    h = heading_deg
    for _, a in turns:
        sn, cs = sincosx(h * (PI / 180.0))
        dirs.append((cs, sn))
        h += a
    rows = [[u[0] for u in dirs], [u[1] for u in dirs]]
    rhs = [-x, -y]
    if length_m is not None:
        rows.append([1.0] * len(dirs))
        rhs.append(float(length_m) - b.s_m)
    nr = len(rows)
    aat = [
        [sum(rows[r][k] * rows[c][k] for k in range(len(dirs))) for c in range(nr)]
        for r in range(nr)
    ]
    lam = _solve(aat, rhs)
    if lam is None:
        return None
    new = [lens[k] + sum(rows[r][k] * lam[r] for r in range(nr)) for k in range(len(dirs))]
    if min(new) < min_straight_m:
        return None
    return build(new), new
