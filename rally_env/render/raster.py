"""Small numba rasterizers for the per-frame overlays that pygame would draw too slowly.

Presentation only (may use libm; never touches the simulation).
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit


@njit(cache=True, error_model="numpy")
def draw_marks(frame, segs, count, now, fade_s, cx, cy, ux, uy, ppm, ax, ay, radius_px, rgb):
    """Alpha-blend skid-mark segments into ``frame``.

    Args:
        frame: (H, W, 3) uint8, drawn into.
        segs: (n, 6) float64 rows ``x0, y0, x1, y1, alpha, time_s`` in world metres.
        count: rows in use (``min(n, written)``).
        now: current time (s); a mark fades linearly to nothing over ``fade_s`` after its time.
        cx, cy, ux, uy, ppm, ax, ay: the camera (see ``background.sample_view``).
        radius_px: half the mark width (px).
        rgb: (3,) float64 mark colour.
    """
    h, w = frame.shape[0], frame.shape[1]
    rx, ry = uy, -ux
    r = radius_px
    for k in range(count):
        age = now - segs[k, 5]
        if age < 0.0 or age >= fade_s:
            continue
        alpha = segs[k, 4] * (1.0 - age / fade_s)
        if alpha <= 0.004:
            continue
        dx0 = segs[k, 0] - cx
        dy0 = segs[k, 1] - cy
        dx1 = segs[k, 2] - cx
        dy1 = segs[k, 3] - cy
        x0 = ax + (dx0 * rx + dy0 * ry) * ppm
        y0 = ay - (dx0 * ux + dy0 * uy) * ppm
        x1 = ax + (dx1 * rx + dy1 * ry) * ppm
        y1 = ay - (dx1 * ux + dy1 * uy) * ppm
        i0 = max(0, int(math.floor(min(x0, x1) - r - 1.0)))
        i1 = min(w - 1, int(math.ceil(max(x0, x1) + r + 1.0)))
        j0 = max(0, int(math.floor(min(y0, y1) - r - 1.0)))
        j1 = min(h - 1, int(math.ceil(max(y0, y1) + r + 1.0)))
        if i0 > i1 or j0 > j1:
            continue
        ex = x1 - x0
        ey = y1 - y0
        ee = ex * ex + ey * ey
        for j in range(j0, j1 + 1):
            py = j + 0.5 - y0
            for i in range(i0, i1 + 1):
                px = i + 0.5 - x0
                t = 0.0
                if ee > 1e-12:
                    t = min(max((px * ex + py * ey) / ee, 0.0), 1.0)
                qx = px - t * ex
                qy = py - t * ey
                d = math.sqrt(qx * qx + qy * qy)
                cov = min(max(r + 0.5 - d, 0.0), 1.0) * alpha
                if cov <= 0.0:
                    continue
                for c in range(3):
                    v = frame[j, i, c] * (1.0 - cov) + rgb[c] * cov
                    frame[j, i, c] = np.uint8(np.int32(v + 0.5))


@njit(cache=True)
def tint_rect(frame, x0, y0, x1, y1, alpha, r, g, b):
    """Blend the rectangle ``[x0, x1) x [y0, y1)`` of ``frame`` towards ``(r, g, b)`` by
    ``alpha`` (a translucent HUD panel), clipped to the frame."""
    h, w = frame.shape[0], frame.shape[1]
    x0 = max(0, x0)
    y0 = max(0, y0)
    x1 = min(w, x1)
    y1 = min(h, y1)
    a = min(max(alpha, 0.0), 1.0)
    ia = 1.0 - a
    rgb = (r * a + 0.5, g * a + 0.5, b * a + 0.5)
    for j in range(y0, y1):
        for i in range(x0, x1):
            for c in range(3):
                frame[j, i, c] = np.uint8(np.int32(frame[j, i, c] * ia + rgb[c]))
