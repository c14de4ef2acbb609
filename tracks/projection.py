"""Project N cars onto a stage's centerline: progress, offset, heading error, edges, lookahead.

The kernel :func:`project_batch` works on the plain arrays of a :class:`~tracks.stage.StagePath`
(``+ - * / sqrt`` and ``atan2x``: bit-identical everywhere); docs/stages.md, "Projection and
lookahead", describes the inputs, the outputs, the method and the warm start.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from physics.jit import njit, njit_inner
from physics.mathx import atan2x
from tracks._geometry import fan_project, seg_foot
from tracks.errors import ProjectionError
from tracks.stage import Stage, StagePath

#: Default lookahead distances (m).
DEFAULT_LOOKAHEAD_M = (5.0, 10.0, 20.0, 30.0, 45.0, 60.0, 80.0, 100.0)
#: Default warm-start window half width (m).
DEFAULT_WINDOW_M = 15.0

#: Columns of the packed segment array built by :func:`pack_path`.
SEG_AX = 0
SEG_AY = 1
SEG_EX = 2
SEG_EY = 3
SEG_INV_L2 = 4
N_SEG_COLS = 5


def pack_path(path: StagePath) -> np.ndarray:
    """(n_samples - 1, 5) float64 segment table: start point, edge vector, 1 / |edge|^2."""
    x = path.x_m
    y = path.y_m
    ex = x[1:] - x[:-1]
    ey = y[1:] - y[:-1]
    # the columns in SEG_* order
    return np.stack([x[:-1], y[:-1], ex, ey, 1.0 / (ex * ex + ey * ey)], axis=1)


@njit_inner(_nrt=False, forceinline=True)
def _window_index(j, n, closed):
    """Segment ``j`` of a search window: wrapped into ``0..n-1`` on a loop (a window reaches
    at most one lap past either end), unchanged on an open stage."""
    if closed:
        if j < 0:
            j += n
        elif j >= n:
            j -= n
    return j


#: The bake accepts a fan projection when its |lateral| is within this factor (plus
#: FAN_SLACK_M) of the closest-point distance; otherwise (beyond the ends of an open stage) the
#: closest point is used, so the road does not continue past its ends.
FAN_RATIO = 1.01
FAN_SLACK_M = 0.01


@njit_inner(_nrt=False)
def best_segment(seg, tx, ty, px, py, lo, hi, closed, fan, open_ends):
    """The winner among segments ``lo..hi`` (indices wrap modulo n when ``closed``; ties:
    lowest index). With ``fan``: the segment whose normal fan contains the point with the
    smallest ``|lateral|`` (with ``open_ends``, open stages, the first segment's fan is open
    behind the start and the last one's beyond the end); else the closest segment (Euclidean,
    clamped foot), whose squared distance stands in for the lateral. Returns (index or -1, t,
    lateral or squared distance, window position).
    """
    n = seg.shape[0]
    best = np.inf
    best_j = -1
    best_t = 0.0
    best_lat = 0.0
    best_w = 0
    for w in range(hi - lo + 1):
        j = _window_index(lo + w, n, closed)
        ax = seg[j, SEG_AX]
        ay = seg[j, SEG_AY]
        ex = seg[j, SEG_EX]
        ey = seg[j, SEG_EY]
        if fan:
            inside, t, lat = fan_project(
                ax,
                ay,
                ex,
                ey,
                tx[j],
                ty[j],
                tx[j + 1],
                ty[j + 1],
                px,
                py,
                open_ends and j == 0,
                open_ends and j == n - 1,
            )
            a = abs(lat)
        else:
            inside = True
            lat, t = seg_foot(px - ax, py - ay, ex, ey, seg[j, SEG_INV_L2])
            a = lat
        if inside and (a < best or (a == best and j < best_j)):
            best = a
            best_j = j
            best_t = t
            best_lat = lat
            best_w = w
    return best_j, best_t, best_lat, best_w


@njit_inner(_nrt=False)
def locate(seg, tx, ty, ds, closed, px, py, s_prev, window_n):
    """Segment, foot parameter and lateral offset of a point: the fan search within
    ``±window_n`` segments of ``s_prev`` unless its winner is on the window's border or absent,
    then the global one, then the closest polyline point signed by side (docs/stages.md).
    """
    n = seg.shape[0]
    # np.int64 / np.bool_, not literals: one best_segment compile (see physics.jit)
    zero = np.int64(0)
    yes = np.bool_(True)
    no = np.bool_(False)
    if s_prev >= 0.0 and s_prev == s_prev and 2 * window_n + 1 < n:
        i0 = min(int(s_prev / ds), n - 1)
        lo = i0 - window_n
        hi = i0 + window_n
        if not closed:
            lo = max(lo, 0)
            hi = min(hi, n - 1)
        j, t, lat, w = best_segment(seg, tx, ty, px, py, lo, hi, closed, yes, not closed)
        at_lo = w == 0 and (closed or lo > 0)
        at_hi = w == hi - lo and (closed or hi < n - 1)
        if j >= 0 and not (at_lo or at_hi):
            return j, t, lat
    # the whole path as an open one
    j, t, lat, _ = best_segment(seg, tx, ty, px, py, zero, n - 1, no, yes, not closed)
    if j >= 0:
        return j, t, lat
    j, t, d2, _ = best_segment(seg, tx, ty, px, py, zero, n - 1, no, no, no)
    cr = seg[j, SEG_EX] * (py - seg[j, SEG_AY]) - seg[j, SEG_EY] * (px - seg[j, SEG_AX])
    lat = math.sqrt(d2)
    return j, t, (-lat if cr < 0.0 else lat)


@njit_inner(_nrt=False)
def _lerp(a, i, t):
    return a[i] + (a[i + 1] - a[i]) * t


@njit(cache=True, _nrt=False)
def project_batch(
    seg,
    tx,
    ty,
    curv,
    hw,
    x,
    y,
    ds,
    length,
    closed,
    pos,
    fwd,
    s_prev,
    window_m,
    lookahead,
    out_s,
    out_lat,
    out_herr,
    out_left,
    out_right,
    out_look,
):
    """Project N cars onto a centerline: a path's arrays (``seg`` from :func:`pack_path`;
    (n + 1,) ``tx, ty, curv, hw, x, y``; ``ds`` and ``length`` m, ``closed``) and the cars'
    (``pos``, ``fwd``, ``s_prev``, ``window_m``, ``lookahead`` as in :meth:`Projector.project`)
    in; the (N,) outputs and (N, K, 3) ``out_look`` filled (docs/stages.md's output table).
    Returns the number of cars with a non-finite position or forward vector (outputs NaN).
    """
    n = seg.shape[0]
    window_n = int(window_m / ds) + 1
    n_look = lookahead.shape[0]
    bad = 0
    for k in range(pos.shape[0]):
        px = pos[k, 0]
        py = pos[k, 1]
        if not (
            math.isfinite(px)
            and math.isfinite(py)
            and math.isfinite(fwd[k, 0])
            and math.isfinite(fwd[k, 1])
        ):
            bad += 1
            out_s[k] = np.nan
            out_lat[k] = np.nan
            out_herr[k] = np.nan
            out_left[k] = np.nan
            out_right[k] = np.nan
            out_look[k, :, :] = np.nan
            continue
        j, t, lat = locate(seg, tx, ty, ds, closed, px, py, s_prev[k], window_n)
        s = (j + t) * ds
        if closed and s >= length:
            s -= length
        elif s > length:
            s = length
        ux = _lerp(tx, j, t)
        uy = _lerp(ty, j, t)
        h = _lerp(hw, j, t)
        fx = fwd[k, 0]
        fy = fwd[k, 1]
        fn = math.sqrt(fx * fx + fy * fy)
        if fn > 0.0:
            fx /= fn
            fy /= fn
        else:
            un = math.sqrt(ux * ux + uy * uy)
            fx = ux / un
            fy = uy / un
        out_s[k] = s
        out_lat[k] = lat
        out_herr[k] = atan2x(ux * fy - uy * fx, ux * fx + uy * fy)
        out_left[k] = h - lat
        out_right[k] = h + lat
        for q in range(n_look):
            sq = s + lookahead[q]
            extra = 0.0  # beyond an open stage's end: straight on along its end tangent
            if closed:
                sq = sq - length * math.floor(sq / length)
            elif sq > length:
                extra = sq - length
                sq = length
            elif sq < 0.0:
                extra = sq
                sq = 0.0
            f = sq / ds
            i = min(int(f), n - 1)
            u = f - i
            lx = _lerp(x, i, u)
            ly = _lerp(y, i, u)
            kq = _lerp(curv, i, u)
            if extra != 0.0:
                e = n if extra > 0.0 else 0
                lx = x[e] + extra * tx[e]
                ly = y[e] + extra * ty[e]
                kq = 0.0
            dx = lx - px
            dy = ly - py
            out_look[k, q, 0] = dx * fx + dy * fy
            out_look[k, q, 1] = fx * dy - fy * dx
            out_look[k, q, 2] = kq
    return bad


@dataclass(frozen=True, eq=False)
class Projection:
    """Result of :meth:`Projector.project` (arrays are reused by the next call unless copied):
    (N,) ``s_m``, ``lateral_m`` (positive left), ``heading_error_rad``, ``left_edge_m``,
    ``right_edge_m`` and (N, K, 3) ``lookahead``, as in docs/stages.md's output table.
    """

    s_m: np.ndarray
    lateral_m: np.ndarray
    heading_error_rad: np.ndarray
    left_edge_m: np.ndarray
    right_edge_m: np.ndarray
    lookahead: np.ndarray

    @property
    def lookahead_xy_m(self) -> np.ndarray:
        """(N, K, 2) lookahead points in the car frame."""
        return self.lookahead[:, :, :2]

    @property
    def lookahead_curvature(self) -> np.ndarray:
        """(N, K) curvature at the lookahead points."""
        return self.lookahead[:, :, 2]

    @property
    def on_road(self) -> np.ndarray:
        """(N,) bool, the reference point is between the edges."""
        return (self.left_edge_m >= 0.0) & (self.right_edge_m >= 0.0)


class Projector:
    """Batched projection of cars onto one stage (wraps :func:`project_batch`).

    Args:
        stage: the stage (or its :class:`StagePath`).
        lookahead_m: (K,) lookahead distances in metres.
        window_m: warm-start search half width in metres (a car that moved further than this
            since ``s_prev`` is still found: the search then goes global).
    """

    def __init__(
        self,
        stage: Stage | StagePath,
        lookahead_m: tuple[float, ...] | np.ndarray = DEFAULT_LOOKAHEAD_M,
        window_m: float = DEFAULT_WINDOW_M,
    ):
        path = stage.path if isinstance(stage, Stage) else stage
        if not isinstance(path, StagePath):
            raise ProjectionError(f"Projector needs a Stage or StagePath, got {type(stage)!r}")
        la = np.ascontiguousarray(lookahead_m, dtype=np.float64).reshape(-1)
        if not np.all(np.isfinite(la)):
            raise ProjectionError("lookahead_m must be finite")
        if not (math.isfinite(window_m) and window_m > 0):
            raise ProjectionError(f"window_m must be > 0, got {window_m!r}")
        self.path = path
        self.lookahead_m = la
        self.window_m = float(window_m)
        self._seg = pack_path(path)
        self._n = -1

    @property
    def n_lookahead(self) -> int:
        return int(self.lookahead_m.shape[0])

    def _buffers(self, n: int) -> Projection:
        if n != self._n:
            out = [np.empty(n) for _ in range(5)]
            self._result = Projection(*out, np.empty((n, self.n_lookahead, 3)))
            self._nan = np.full(n, np.nan)
            self._n = n
        return self._result

    def project(
        self, pos_xy: np.ndarray, fwd_xy: np.ndarray, s_prev: np.ndarray | None = None
    ) -> Projection:
        """Project cars at ``pos_xy`` (N, 2) m facing ``fwd_xy`` (N, 2) from ``s_prev`` (N,)
        (``None`` or NaN: a cold start), as in docs/stages.md's input table. Returns the
        :class:`Projection`, the same object and arrays every call (copy what you keep); raises
        :class:`ProjectionError` on wrong shapes or non-finite positions.
        """
        pos = _f64(pos_xy, rows=True)
        fwd = _f64(fwd_xy, rows=True)
        if pos.ndim != 2 or pos.shape[1] != 2:
            raise ProjectionError(f"pos_xy must have shape (N, 2), got {np.shape(pos_xy)}")
        if fwd.shape != pos.shape:
            raise ProjectionError(f"fwd_xy shape {np.shape(fwd_xy)} != pos_xy shape {pos.shape}")
        n = pos.shape[0]
        res = self._buffers(n)
        if s_prev is None:
            sp = self._nan
        else:
            sp = _f64(s_prev).reshape(-1)
            if sp.shape[0] != n:
                raise ProjectionError(f"s_prev must have shape ({n},), got {np.shape(s_prev)}")
        p = self.path
        bad = project_batch(
            self._seg,
            p.tx,
            p.ty,
            p.curvature,
            p.half_width_m,
            p.x_m,
            p.y_m,
            p.ds_m,
            p.length_m,
            p.closed,
            pos,
            fwd,
            sp,
            self.window_m,
            self.lookahead_m,
            res.s_m,
            res.lateral_m,
            res.heading_error_rad,
            res.left_edge_m,
            res.right_edge_m,
            res.lookahead,
        )
        if bad:
            raise ProjectionError(
                f"{bad} of {n} cars have a non-finite position or forward "
                "vector (pos_xy and fwd_xy must be finite)"
            )
        return res


def _f64(a: np.ndarray, rows: bool = False) -> np.ndarray:
    """``a`` as a C-contiguous float64 array (itself if it is one); with ``rows``, a 1-D one
    as a single row."""
    if not (type(a) is np.ndarray and a.dtype == np.float64 and a.flags.c_contiguous):
        a = np.ascontiguousarray(a, dtype=np.float64)
    return a.reshape(1, -1) if rows and a.ndim == 1 else a


def delta_s(
    s_from: np.ndarray | float, s_to: np.ndarray | float, length_m: float, closed: bool
) -> np.ndarray:
    """Progress from ``s_from`` to ``s_to`` (m); for loops wrapped into [-L/2, L/2).

    Use it to accumulate race distance across a loop's start line: ``race += delta_s(...)``.
    """
    d = np.asarray(s_to, np.float64) - np.asarray(s_from, np.float64)
    if closed:
        d = d - length_m * np.floor(d / length_m + 0.5)
    return d
