"""Shared helpers for the tracks tests."""

from __future__ import annotations

import numpy as np
import pytest

import tracks


@pytest.fixture(scope="session")
def library() -> dict[str, tracks.Stage]:
    """Every library stage, loaded once."""
    return {name: tracks.load_stage(name) for name in tracks.list_stages()}


def fan_all(path: tracks.StagePath, px: float, py: float, open_ends: bool = False):
    """Fan projection of a point onto every segment at once (numpy, same arithmetic as
    ``tracks._geometry.fan_project``). Returns (inside, t, lateral) arrays over segments."""
    ax, ay = path.x_m[:-1], path.y_m[:-1]
    ex, ey = path.x_m[1:] - ax, path.y_m[1:] - ay
    t0x, t0y, t1x, t1y = path.tx[:-1], path.ty[:-1], path.tx[1:], path.ty[1:]
    wx, wy = px - ax, py - ay
    c = wx * t0x + wy * t0y
    behind = c >= 0.0
    ahead = (wx - ex) * t1x + (wy - ey) * t1y < 0.0
    ahead_raw = ahead.copy()
    if open_ends:
        behind[0] = True
        ahead[-1] = True
    inside = behind & ahead
    dtx, dty = t1x - t0x, t1y - t0y
    a = -(ex * dtx + ey * dty)
    b = (wx * dtx + wy * dty) - (ex * t0x + ey * t0y)
    with np.errstate(all="ignore"):
        lin = (a == 0.0) | (np.abs(a) <= 1e-12 * np.abs(b))
        t_lin = -c / b
        disc = np.maximum(b * b - 4.0 * a * c, 0.0)
        sq = np.sqrt(disc)
        q = np.where(b >= 0.0, -0.5 * (b + sq), -0.5 * (b - sq))
        r1, r2 = q / a, c / q
        t_q = np.where(q == 0.0, 0.0, np.where((r2 >= 0.0) & (r2 <= 1.0), r2, r1))
    t = np.clip(np.where(lin, t_lin, t_q), 0.0, 1.0)
    tx, ty = t0x + t * dtx, t0y + t * dty
    n = np.sqrt(tx * tx + ty * ty)
    qx, qy = wx - t * ex, wy - t * ey
    lat = (tx * qy - ty * qx) / n
    if open_ends:  # behind the start / beyond the end: offset from the extended centerline
        if not c[0] >= 0.0:
            t[0], lat[0] = 0.0, t0x[0] * wy[0] - t0y[0] * wx[0]
        if not ahead_raw[-1]:
            t[-1] = 1.0
            lat[-1] = t1x[-1] * (wy[-1] - ey[-1]) - t1y[-1] * (wx[-1] - ex[-1])
    return inside, t, lat


def brute_force(path: tracks.StagePath, px: float, py: float) -> tuple[int, float, float]:
    """Exhaustive search over all segments: (index, t, lateral), the projector's rule.

    The segment whose normal fan contains the point with the smallest |lateral| (ties: the
    lowest index; an open stage's first/last fan is open behind/beyond its end); a point in no
    fan takes the closest polyline point, signed by side.
    """
    inside, t, lat = fan_all(path, px, py, open_ends=not path.closed)
    if inside.any():
        a = np.where(inside, np.abs(lat), np.inf)
        j = int(np.argmin(a))
        return j, float(t[j]), float(lat[j])
    ax, ay = path.x_m[:-1], path.y_m[:-1]
    ex, ey = path.x_m[1:] - ax, path.y_m[1:] - ay
    wx, wy = px - ax, py - ay
    tt = np.clip((wx * ex + wy * ey) * (1.0 / (ex * ex + ey * ey)), 0.0, 1.0)
    dx, dy = wx - tt * ex, wy - tt * ey
    d2 = dx * dx + dy * dy
    je = int(np.argmin(d2))
    d = float(np.sqrt(d2[je]))
    side = ex[je] * wy[je] - ey[je] * wx[je]
    return je, float(tt[je]), (-d if side < 0 else d)


def offset_points(path: tracks.StagePath, s: np.ndarray, lat: np.ndarray) -> np.ndarray:
    """(N, 2) points at arc lengths ``s`` offset ``lat`` to the left of the centerline."""
    x, y = path.point_at(s)
    tx, ty = path.tangent_at(s)
    return np.stack([x - ty * lat, y + tx * lat], axis=1)
