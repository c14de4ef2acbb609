"""Numba kernels for centerline geometry: cubic splines, arc-length resampling, overlap tests.

Only ``+ - * /``, ``sqrt`` and ``floor``/``ceil`` in a fixed order: bit-identical everywhere
(docs/architecture.md). The spline and the projection are described in docs/stages.md.
"""

from __future__ import annotations

import math

import numpy as np

from physics.jit import njit, njit_inner

#: Dense sub-step (m of chord parameter) used to measure arc length before resampling.
DENSE_STEP_M = 0.125


@njit_inner
def _natural_second_derivs(t, y):
    """Second derivatives of the natural cubic spline through (t[i], y[i]), Thomas algorithm."""
    n = t.shape[0]
    m = np.zeros(n)
    if n < 3:
        return m
    # Tridiagonal system for m[1..n-2].
    k = n - 2
    diag = np.empty(k)
    rhs = np.empty(k)
    upper = np.empty(k)
    lower = np.empty(k)
    for i in range(1, n - 1):
        h0 = t[i] - t[i - 1]
        h1 = t[i + 1] - t[i]
        lower[i - 1] = h0
        diag[i - 1] = 2.0 * (h0 + h1)
        upper[i - 1] = h1
        rhs[i - 1] = 6.0 * ((y[i + 1] - y[i]) / h1 - (y[i] - y[i - 1]) / h0)
    for i in range(1, k):
        w = lower[i] / diag[i - 1]
        diag[i] = diag[i] - w * upper[i - 1]
        rhs[i] = rhs[i] - w * rhs[i - 1]
    m[k] = rhs[k - 1] / diag[k - 1]
    for i in range(k - 2, -1, -1):
        m[i + 1] = (rhs[i] - upper[i] * m[i + 2]) / diag[i]
    return m


@njit_inner
def _solve_tridiag(lower, diag, upper, rhs):
    """Solve a (non-cyclic) tridiagonal system; inputs are not modified."""
    n = diag.shape[0]
    c = np.empty(n)
    d = np.empty(n)
    x = np.empty(n)
    c[0] = upper[0] / diag[0]
    d[0] = rhs[0] / diag[0]
    for i in range(1, n):
        den = diag[i] - lower[i] * c[i - 1]
        c[i] = upper[i] / den
        d[i] = (rhs[i] - lower[i] * d[i - 1]) / den
    x[n - 1] = d[n - 1]
    for i in range(n - 2, -1, -1):
        x[i] = d[i] - c[i] * x[i + 1]
    return x


@njit_inner
def _periodic_second_derivs(t, y, period):
    """Second derivatives of the periodic cubic spline through n distinct knots.

    ``t`` (n,) are the knot parameters, the closing interval runs from t[n-1] to t[0] + period.
    Cyclic tridiagonal system solved with the Sherman-Morrison correction.
    """
    n = t.shape[0]
    h = np.empty(n)
    for i in range(n - 1):
        h[i] = t[i + 1] - t[i]
    h[n - 1] = t[0] + period - t[n - 1]
    lower = np.empty(n)
    diag = np.empty(n)
    upper = np.empty(n)
    rhs = np.empty(n)
    for i in range(n):
        ip = i - 1 if i > 0 else n - 1
        inx = i + 1 if i < n - 1 else 0
        h0 = h[ip]
        h1 = h[i]
        lower[i] = h0
        diag[i] = 2.0 * (h0 + h1)
        upper[i] = h1
        rhs[i] = 6.0 * ((y[inx] - y[i]) / h1 - (y[i] - y[ip]) / h0)
    # A = T + u v^T with corner terms alpha = A[0, n-1] = lower[0], beta = A[n-1, 0] = upper[n-1].
    alpha = lower[0]
    beta = upper[n - 1]
    gamma = -diag[0]
    # T, in place (n >= 2 here: a loop of fewer knots has a zero chord and stops earlier)
    diag[0] = diag[0] - gamma
    diag[n - 1] = diag[n - 1] - alpha * beta / gamma
    lower[0] = 0.0
    upper[n - 1] = 0.0
    xs = _solve_tridiag(lower, diag, upper, rhs)
    u = np.zeros(n)
    u[0] = gamma
    u[n - 1] = beta
    zs = _solve_tridiag(lower, diag, upper, u)
    num = xs[0] + alpha * xs[n - 1] / gamma
    den = 1.0 + zs[0] + alpha * zs[n - 1] / gamma
    fact = num / den
    m = np.empty(n)
    for i in range(n):
        m[i] = xs[i] - fact * zs[i]
    return m


@njit_inner
def _eval(t_lo, h, y0, y1, m0, m1, tq):
    """Value, first and second derivative of one cubic spline interval at parameter tq."""
    u = tq - t_lo
    v = h - u
    val = m0 * v * v * v / (6.0 * h) + m1 * u * u * u / (6.0 * h)
    val += (y0 / h - m0 * h / 6.0) * v + (y1 / h - m1 * h / 6.0) * u
    d1 = -m0 * v * v / (2.0 * h) + m1 * u * u / (2.0 * h) + (y1 - y0) / h - (m1 - m0) * h / 6.0
    d2 = m0 * v / h + m1 * u / h
    return val, d1, d2


@njit(cache=True)
def fit_and_resample(knots, closed, target_ds):
    """Fit the centerline spline through the knots and resample it at uniform arc length.

    Args:
        knots: (n, 3) float64 knots (x, y, z) in metres. Closed loops do not repeat the first.
        target_ds: wanted sample spacing in metres (the actual spacing is length / round(...)).

    Returns:
        (out, length, min_chord) where ``out`` is an (m, 8) float64 array of samples with columns
        x, y, z, tx, ty, curvature (1/m, positive = turning left), speed (|dP/dt|) and dz/ds;
        ``length`` the arc length in metres and ``min_chord`` the shortest knot-to-knot chord.
        A closed loop's last sample is a bit-identical copy of its first (m = n_samples + 1).
    """
    n = knots.shape[0]
    n_int = n if closed else n - 1
    t = np.empty(n)
    t[0] = 0.0
    min_chord = np.inf
    for i in range(1, n):
        dx = knots[i, 0] - knots[i - 1, 0]
        dy = knots[i, 1] - knots[i - 1, 1]
        c = math.sqrt(dx * dx + dy * dy)
        if c < min_chord:
            min_chord = c
        t[i] = t[i - 1] + c
    period = t[n - 1]
    if closed:
        dx = knots[0, 0] - knots[n - 1, 0]
        dy = knots[0, 1] - knots[n - 1, 1]
        c = math.sqrt(dx * dx + dy * dy)
        if c < min_chord:
            min_chord = c
        period = t[n - 1] + c
    if min_chord <= 0.0:
        return np.zeros((0, 8)), 0.0, min_chord
    xs = knots[:, 0].copy()
    ys = knots[:, 1].copy()
    zs = knots[:, 2].copy()
    # (bound, not copied into slices: an array-to-slice copy makes numba compile its
    # shape-mismatch message, seconds of every first start)
    if closed:
        mx = _periodic_second_derivs(t, xs, period)
        my = _periodic_second_derivs(t, ys, period)
        mz = _periodic_second_derivs(t, zs, period)
    else:
        mx = _natural_second_derivs(t, xs)
        my = _natural_second_derivs(t, ys)
        mz = _natural_second_derivs(t, zs)

    # Dense arc-length table over all intervals.
    n_dense = 1
    for i in range(n_int):
        h = (t[i + 1] if i < n - 1 else period) - t[i]
        n_dense += max(1, int(math.ceil(h / DENSE_STEP_M)))
    dense_t = np.empty(n_dense)
    dense_s = np.empty(n_dense)
    dense_i = np.empty(n_dense, np.int64)
    dense_t[0] = 0.0
    dense_s[0] = 0.0
    dense_i[0] = 0
    px = knots[0, 0]
    py = knots[0, 1]
    k = 1
    for i in range(n_int):
        i1 = i + 1 if i < n - 1 else 0
        t_hi = t[i + 1] if i < n - 1 else period
        h = t_hi - t[i]
        m_sub = max(1, int(math.ceil(h / DENSE_STEP_M)))
        for j in range(1, m_sub + 1):
            tq = t[i] + h * j / m_sub
            if j == m_sub:
                tq = t_hi
            qx, _, _ = _eval(t[i], h, xs[i], xs[i1], mx[i], mx[i1], tq)
            qy, _, _ = _eval(t[i], h, ys[i], ys[i1], my[i], my[i1], tq)
            dx = qx - px
            dy = qy - py
            dense_t[k] = tq
            dense_s[k] = dense_s[k - 1] + math.sqrt(dx * dx + dy * dy)
            dense_i[k] = i
            px = qx
            py = qy
            k += 1
    length = dense_s[n_dense - 1]
    n_samples = max(1, int(math.floor(length / target_ds + 0.5)))
    ds = length / n_samples
    out = np.empty((n_samples + 1, 8))
    j = 0
    for q in range(n_samples + 1):
        s = q * ds
        if q == n_samples:
            s = length
        while j < n_dense - 2 and dense_s[j + 1] < s:
            j += 1
        seg = dense_s[j + 1] - dense_s[j]
        f = (s - dense_s[j]) / seg if seg > 0.0 else 0.0
        if f > 1.0:
            f = 1.0
        tq = dense_t[j] + f * (dense_t[j + 1] - dense_t[j])
        i = dense_i[j + 1]
        i1 = i + 1 if i < n - 1 else 0
        t_hi = t[i + 1] if i < n - 1 else period
        h = t_hi - t[i]
        x, dx, ddx = _eval(t[i], h, xs[i], xs[i1], mx[i], mx[i1], tq)
        y, dy, ddy = _eval(t[i], h, ys[i], ys[i1], my[i], my[i1], tq)
        z, dz, _ = _eval(t[i], h, zs[i], zs[i1], mz[i], mz[i1], tq)
        sp2 = dx * dx + dy * dy
        sp = math.sqrt(sp2)
        out[q, 0] = x
        out[q, 1] = y
        out[q, 2] = z
        if sp > 0.0:
            out[q, 3] = dx / sp
            out[q, 4] = dy / sp
            out[q, 5] = (dx * ddy - dy * ddx) / (sp2 * sp)
            out[q, 7] = dz / sp
        else:
            out[q, 3] = 1.0
            out[q, 4] = 0.0
            out[q, 5] = np.inf
            out[q, 7] = 0.0
        out[q, 6] = sp
    if closed:
        for c in range(8):
            out[n_samples, c] = out[0, c]
    return out, length, min_chord


@njit_inner
def _disk_exit(x, y, i, m, r2, closed, step):
    """First offset ``k`` whose sample ``i + step k`` (modulo ``m`` on a loop) is at a squared
    distance of at least ``r2`` from sample ``i``; ``m`` when an open path ends first, ``m``
    too when no sample is (``0`` for a single sample)."""
    out = 0
    for k in range(1, m):
        j = i + step * k
        if j < 0 or j >= m:
            if not closed:
                return m
            j -= step * m
        dx = x[j] - x[i]
        dy = y[j] - y[i]
        if dx * dx + dy * dy >= r2:
            return k
        out = k + 1
    return out


@njit(cache=True)
def first_overlap(x, y, hw, closed, clearance):
    """The first place where the road comes back too close to itself (docs/stages.md, "What
    the loader checks"): ``x, y`` and ``hw`` are the samples' positions and half widths (m; a
    loop's last sample repeats its first). Returns (i, j, distance) of the first overlapping
    pair found, or (-1, -1, 0.0).
    """
    m = x.shape[0] - 1 if closed else x.shape[0]
    hw_max = 0.0
    x_min = np.inf
    y_min = np.inf
    x_max = -np.inf
    y_max = -np.inf
    for i in range(m):
        if hw[i] > hw_max:
            hw_max = hw[i]
        x_min = min(x_min, x[i])
        y_min = min(y_min, y[i])
        x_max = max(x_max, x[i])
        y_max = max(y_max, y[i])
    cell = 2.0 * hw_max + clearance
    gx = int(math.floor((x_max - x_min) / cell)) + 1
    gy = int(math.floor((y_max - y_min) / cell)) + 1
    cid = np.empty(m, np.int64)
    counts = np.zeros(gx * gy + 1, np.int64)
    for i in range(m):
        cx = int(math.floor((x[i] - x_min) / cell))
        cy = int(math.floor((y[i] - y_min) / cell))
        cid[i] = cy * gx + cx
        counts[cid[i] + 1] += 1
    for c in range(gx * gy):
        counts[c + 1] += counts[c]
    order = np.empty(m, np.int64)
    fill = counts[:-1].copy()
    for i in range(m):
        order[fill[cid[i]]] = i
        fill[cid[i]] += 1
    for i in range(m):
        r_i = hw[i] + hw_max + clearance
        r2 = r_i * r_i
        # Forward and backward exit offsets of the disk around sample i (not literals: one
        # compile, see physics.jit).
        fwd = _disk_exit(x, y, i, m, r2, closed, np.int64(1))
        back = _disk_exit(x, y, i, m, r2, closed, np.int64(-1))
        cx = int(math.floor((x[i] - x_min) / cell))
        cy = int(math.floor((y[i] - y_min) / cell))
        for ny in range(max(cy - 1, 0), min(cy + 2, gy)):
            for nx in range(max(cx - 1, 0), min(cx + 2, gx)):
                c = ny * gx + nx
                for q in range(counts[c], counts[c + 1]):
                    j = order[q]
                    if j == i:
                        continue
                    if closed:
                        off_f = j - i if j > i else j - i + m
                        off_b = i - j if i > j else i - j + m
                    else:
                        off_f = j - i if j > i else m + 1
                        off_b = i - j if i > j else m + 1
                    if off_f < fwd or off_b < back:
                        continue
                    lim = hw[i] + hw[j] + clearance
                    dx = x[j] - x[i]
                    dy = y[j] - y[i]
                    d2 = dx * dx + dy * dy
                    if d2 < lim * lim:
                        return i, j, math.sqrt(d2)
    return -1, -1, 0.0


@njit_inner(_nrt=False)
def seg_foot(wx, wy, ex, ey, inv_l2):
    """The point ``w`` (relative to a segment's start) against the segment ``e`` (its end
    minus its start, ``inv_l2`` = 1 / |e|^2): (squared distance to the segment, the foot's
    parameter along it clamped to [0, 1]). The one point-to-segment distance of the stage
    projection and the terrain bake."""
    t = (wx * ex + wy * ey) * inv_l2
    if t < 0.0:
        t = 0.0
    elif t > 1.0:
        t = 1.0
    dx = wx - t * ex
    dy = wy - t * ey
    return dx * dx + dy * dy, t


@njit_inner
def fan_project(ax, ay, ex, ey, t0x, t0y, t1x, t1y, px, py, open_start=False, open_end=False):
    """Continuous projection of a point ``P`` onto the segment from ``A`` to ``A + E`` with
    unit tangents ``T0``, ``T1`` at its ends, along the interpolated normal (docs/stages.md,
    "Projection and lookahead"). ``open_start`` / ``open_end`` drop the bound at the start /
    end normal: points behind / beyond it project to t = 0 / 1, the lateral offset measured
    from the centerline extended straight.

    Returns:
        (inside, t, lateral): whether P lies in the segment's normal fan, the foot parameter
        in [0, 1] and the signed offset along the interpolated normal (positive left).
    """
    wx = px - ax
    wy = py - ay
    c = wx * t0x + wy * t0y
    if c < 0.0:
        if not open_start:
            return False, 0.0, 0.0
        return True, 0.0, t0x * wy - t0y * wx
    if (wx - ex) * t1x + (wy - ey) * t1y >= 0.0:
        if not open_end:
            return False, 0.0, 0.0
        return True, 1.0, t1x * (wy - ey) - t1y * (wx - ex)
    dtx = t1x - t0x
    dty = t1y - t0y
    a = -(ex * dtx + ey * dty)
    b = (wx * dtx + wy * dty) - (ex * t0x + ey * t0y)
    # f(t) = c + b t + a t^2 with f(0) >= 0 > f(1): exactly one root in [0, 1)
    if a == 0.0 or abs(a) <= 1e-12 * abs(b):
        t = -c / b
    else:
        disc = b * b - 4.0 * a * c
        if disc < 0.0:
            disc = 0.0
        sq = math.sqrt(disc)
        q = -0.5 * (b + sq) if b >= 0.0 else -0.5 * (b - sq)
        if q == 0.0:
            t = 0.0
        else:
            r1 = q / a
            r2 = c / q
            if 0.0 <= r2 <= 1.0:
                t = r2
            else:
                t = r1
    if t < 0.0:
        t = 0.0
    elif t > 1.0:
        t = 1.0
    tx = t0x + t * dtx
    ty = t0y + t * dty
    n = math.sqrt(tx * tx + ty * ty)
    qx = wx - t * ex
    qy = wy - t * ey
    return True, t, (tx * qy - ty * qx) / n
