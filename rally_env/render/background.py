"""The stage background, baked once per stage: terrain, road, lines. numpy + numba, no pygame.

Tiles around the road, the coarse heightfield beyond, resampled each frame by
:func:`sample_view`; what they show: ``docs/render.md``, "What a frame shows". Presentation
only: this may use libm (nothing here feeds the simulation).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields

import numpy as np
from numba import njit

from physics.jit import njit_inner
from tracks import surfaces as _surf

#: Tile edge in pixels, a power of two (each tile stores TILE + 1 samples per side: a shared
#: apron, so bilinear sampling never crosses a tile).
TILE_SHIFT = 7
TILE = 1 << TILE_SHIFT
#: Screen block edge (px) of the sampler's traversal.
BLOCK = 32
#: Colour outside the terrain.
VOID_RGB = (28, 22, 20)

MARK_START = 0
MARK_FINISH = 1
MARK_CHECKPOINT = 2

_SHOULDER_M = 1.4  # darkened ground beyond each road edge (m)
_RUT_OFFSET_M = 1.25  # wheel tracks at +-1.25 m (the rover's half track)
_RUT_HALF_M = 0.45


@dataclass(eq=False)
class Background:
    """A baked stage background (see the module docstring); its fields are the tables
    :func:`sample_view` takes after the camera, in its order (:meth:`view_args`).

    Attributes:
        ox, oy: world position of tile sample (0, 0) (m).
        ppm: pixels per metre of the tiles.
        tile_index: (nty, ntx) int32 pool slot of each tile, -1 where none was baked.
        pool: (n, TILE + 1, TILE + 1, 3) uint8 tile pixels, ``[slot, v, u]`` with ``v`` along +y.
        coarse: (ny, nx, 3) uint8 terrain colours at the heightfield nodes (the fallback).
        cx0, cy0, ccell: the heightfield grid origin and spacing (m).
    """

    ox: float
    oy: float
    ppm: float
    tile_index: np.ndarray
    pool: np.ndarray
    coarse: np.ndarray
    cx0: float
    cy0: float
    ccell: float

    def view_args(self) -> tuple:
        """The tables :func:`sample_view` takes after the camera, in its order."""
        return tuple(getattr(self, f.name) for f in fields(self))


def terrain_colors(terrain, surface: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Per-node terrain colour (surface colour, brighter with height, hill-shaded) and shade.

    Args:
        terrain: the heightfield.
        surface: colour every node as this surface id (the off-road ground under the tiles,
            so road nodes do not bleed into the shoulders); ``None``: each node's own surface.

    Returns:
        ``(rgb, shade)``: (ny, nx, 3) float32 colours 0..255 and (ny, nx) float32 shade 0..1.
    """
    h = np.asarray(terrain.heights_m, np.float64)
    gy, gx = np.gradient(h, terrain.cell_m)
    az, alt = math.radians(135.0), math.radians(40.0)  # light from the north-west (x east, y north)
    lx, ly, lz = math.cos(alt) * math.cos(az), math.cos(alt) * math.sin(az), math.sin(alt)
    nrm = np.sqrt(gx * gx + gy * gy + 1.0)
    shade = np.clip((-gx * lx - gy * ly + lz) / nrm, 0.0, 1.0)
    lo, hi = float(np.percentile(h, 1)), float(np.percentile(h, 99))
    if hi - lo < 1.0:
        lo, hi = lo - 1.0, hi + 1.0
    e = np.clip((h - lo) / (hi - lo), 0.0, 1.0)[..., None]
    palette = np.array([s.color for s in _surf.SURFACES], np.float64)
    if surface is None:
        sid = np.clip(np.asarray(terrain.surface_ids, np.int64), 0, len(palette) - 1)
        base = palette[sid]
    else:
        base = palette[int(surface)][None, None, :]
    rgb = base * (0.8 + 0.35 * e) * (0.35 + 0.65 * shade[..., None] / lz)
    return np.clip(rgb, 0, 255).astype(np.float32), shade.astype(np.float32)


def _marks(stage) -> tuple[np.ndarray, np.ndarray]:
    """The lines across the road: their kinds and arc lengths (the start, on a closed stage
    the finish, then the finish and the checkpoints)."""
    marks = [(MARK_FINISH if stage.closed else MARK_START, stage.start_s_m)]
    if not stage.closed:
        marks.append((MARK_FINISH, stage.finish_s_m))
    marks += [(MARK_CHECKPOINT, c) for c in stage.checkpoints_m]
    return np.array([k for k, _ in marks], np.int64), np.array([float(s) for _, s in marks])


def corridor_tiles(stage, ppm: float, radius_m: float, ox: float, oy: float, ntx: int, nty: int):
    """(nty, ntx) bool: tiles within ``radius_m`` of the centerline (checked every sample)."""
    p = stage.path
    t_m = TILE / ppm
    need = np.zeros((nty, ntx), np.bool_)
    r = radius_m + float(np.max(p.half_width_m))
    x0 = np.floor((p.x_m - r - ox) / t_m).astype(np.int64)
    x1 = np.floor((p.x_m + r - ox) / t_m).astype(np.int64)
    y0 = np.floor((p.y_m - r - oy) / t_m).astype(np.int64)
    y1 = np.floor((p.y_m + r - oy) / t_m).astype(np.int64)
    x0, x1 = np.clip(x0, 0, ntx - 1), np.clip(x1, 0, ntx - 1)
    y0, y1 = np.clip(y0, 0, nty - 1), np.clip(y1, 0, nty - 1)
    for a, b, c, d in zip(x0, x1, y0, y1, strict=True):
        need[c : d + 1, a : b + 1] = True
    return need


def bake_background(stage, terrain, ppm: float = 8.0, radius_m: float = 80.0) -> Background:
    """Bake a stage's background.

    Args:
        stage: the :class:`tracks.Stage`.
        terrain: its baked :class:`physics.terrain.Terrain` (``tracks.bake(stage)``).
        ppm: tile resolution, pixels per metre.
        radius_m: corridor radius around the road that gets tiles (m); beyond it the coarse
            heightfield colours show.
    """
    if not (0.25 <= ppm <= 64.0):
        raise ValueError(f"ppm must be in [0.25, 64] px/m, got {ppm!r}")
    off = _surf.by_name(stage.terrain.offroad_surface).id
    tcol, tshade = terrain_colors(terrain, surface=off)
    coarse, _ = terrain_colors(terrain)
    ny, nx = tcol.shape[:2]
    cell = float(terrain.cell_m)
    ox, oy = float(terrain.x0_m), float(terrain.y0_m)  # tile sample (0, 0): the first node
    xmax, ymax = ox + (nx - 1) * cell, oy + (ny - 1) * cell
    t_m = TILE / ppm
    ntx = max(1, math.ceil((xmax - ox) / t_m))
    nty = max(1, math.ceil((ymax - oy) / t_m))
    need = corridor_tiles(stage, ppm, radius_m, ox, oy, ntx, nty)
    index = np.full((nty, ntx), -1, np.int32)
    slots = np.argwhere(need)
    index[slots[:, 0], slots[:, 1]] = np.arange(len(slots), dtype=np.int32)
    pool = np.empty((len(slots), TILE + 1, TILE + 1, 3), np.uint8)
    p = stage.path
    palette = np.array([s.color for s in _surf.SURFACES], np.float64)
    f64 = [np.ascontiguousarray(a, np.float64) for a in (p.x_m, p.y_m, p.s_m, p.half_width_m)]
    _bake_tiles(
        pool,
        slots.astype(np.int64),
        ox,
        oy,
        1.0 / ppm,
        tcol[None],
        tshade[None, :, :, None],
        cell,
        (*f64, np.ascontiguousarray(p.surface, np.int64)),
        float(p.length_m),
        bool(p.closed),
        palette,
        _marks(stage),
    )
    return Background(
        ppm=float(ppm),
        ox=ox,
        oy=oy,
        tile_index=index,
        pool=pool,
        coarse=np.ascontiguousarray(coarse.astype(np.uint8)),
        cx0=ox,
        cy0=oy,
        ccell=cell,
    )


@njit_inner
def _hash01(i: int, j: int) -> float:
    """A repeatable pseudo-random value in [-1, 1) per integer sample position."""
    h = (i * 374761393 + j * 668265263) & 0xFFFFFFFF
    h = ((h ^ (h >> 13)) * 1274126177) & 0xFFFFFFFF
    h = h ^ (h >> 16)
    return (h & 0xFFFF) / 32768.0 - 1.0


@njit(cache=True)
def _bake_tiles(
    pool,
    slots,
    ox,
    oy,
    mps,
    tcol,
    tshade,
    tcell,
    path,
    length,
    closed,
    palette,
    marks,
):
    """Bake the tiles ``slots`` into ``pool`` (tile sample (0, 0), like the heightfield's first
    node, at ``ox, oy``); ``path`` holds the centerline's x, y, s, half width and surface id per
    point, ``marks`` the lines across the road."""
    n = TILE + 1
    hw_max = 0.0
    for hw in path[3]:
        hw_max = max(hw_max, hw)
    reach = hw_max + _SHOULDER_M + 1.0
    best = np.empty((n, n))
    lat = np.empty((n, n))
    sv = np.empty((n, n))
    hwv = np.empty((n, n))
    sid = np.empty((n, n), np.int64)
    col = np.empty((n, n, 3))
    shd = np.empty((n, n))
    near = (best, lat, sv, hwv, sid)
    for k in range(slots.shape[0]):
        u0 = slots[k, 1] * TILE
        v0 = slots[k, 0] * TILE
        wx0 = ox + u0 * mps
        wy0 = oy + v0 * mps
        _tile_ground(col, shd, best, wx0, wy0, mps, tcol, tshade, ox, oy, tcell)
        _tile_nearest(near, wx0, wy0, mps, path, reach, closed)
        _tile_composite(pool[k], u0, v0, mps, col, shd, near, palette, marks, length, closed)


@njit_inner(_nrt=False, forceinline=True)
def _bilerp(src, k, j, i, c, fx, fy):
    """Channel ``c`` of image ``src[k]`` (4-d) bilinear at column ``i + fx``, row ``j + fy``."""
    return (
        src[k, j, i, c] * ((1.0 - fx) * (1.0 - fy))
        + src[k, j, i + 1, c] * (fx * (1.0 - fy))
        + src[k, j + 1, i, c] * ((1.0 - fx) * fy)
        + src[k, j + 1, i + 1, c] * (fx * fy)
    )


@njit_inner
def _tile_ground(col, shd, best, wx0, wy0, mps, tcol, tshade, tx0, ty0, tcell):
    """A tile's terrain colour and shade (bilinear over the heightfield nodes: ``tcol``
    (1, ny, nx, 3), ``tshade`` (1, ny, nx, 1)); resets ``best`` (no centerline point found yet)."""
    n = TILE + 1
    ny, nx = tshade.shape[1], tshade.shape[2]
    for b in range(n):
        wy = wy0 + b * mps
        fy = (wy - ty0) / tcell
        fy = min(max(fy, 0.0), ny - 1.000001)
        j = int(fy)
        ry = fy - j
        for a in range(n):
            wx = wx0 + a * mps
            fx = (wx - tx0) / tcell
            fx = min(max(fx, 0.0), nx - 1.000001)
            i = int(fx)
            rx = fx - i
            for c in range(3):
                col[b, a, c] = _bilerp(tcol, 0, j, i, c, rx, ry)
            shd[b, a] = _bilerp(tshade, 0, j, i, 0, rx, ry)
            best[b, a] = 1e30


@njit_inner
def _tile_nearest(near, wx0, wy0, mps, path, reach, closed):
    """The nearest point on the centerline polyline per tile sample, over the segments near
    the tile: ``near`` (squared distance, signed offset, s, half width, surface id)."""
    best, lat, sv, hwv, sid = near
    px, py, ps, phw, psurf = path
    n = TILE + 1
    nseg = px.shape[0] - 1
    wx1 = wx0 + TILE * mps
    wy1 = wy0 + TILE * mps
    for s in range(nseg):
        ax, ay = px[s], py[s]
        bx, by = px[s + 1], py[s + 1]
        if max(ax, bx) + reach < wx0 or min(ax, bx) - reach > wx1:
            continue
        if max(ay, by) + reach < wy0 or min(ay, by) - reach > wy1:
            continue
        dx = bx - ax
        dy = by - ay
        dd = dx * dx + dy * dy
        if dd <= 0.0:
            continue
        a0 = max(0, int((min(ax, bx) - reach - wx0) / mps))
        a1 = min(n - 1, int((max(ax, bx) + reach - wx0) / mps) + 1)
        b0 = max(0, int((min(ay, by) - reach - wy0) / mps))
        b1 = min(n - 1, int((max(ay, by) + reach - wy0) / mps) + 1)
        for b in range(b0, b1 + 1):
            qy = wy0 + b * mps - ay
            for a in range(a0, a1 + 1):
                qx = wx0 + a * mps - ax
                t = (qx * dx + qy * dy) / dd
                t = min(max(t, 0.0), 1.0)
                ex = qx - t * dx
                ey = qy - t * dy
                d2 = ex * ex + ey * ey
                if d2 < best[b, a]:
                    best[b, a] = d2
                    d = math.sqrt(d2)
                    cr = dx * qy - dy * qx
                    lat[b, a] = d if cr >= 0.0 else -d
                    sv[b, a] = ps[s] + t * (ps[s + 1] - ps[s])
                    hwv[b, a] = phw[s] + t * (phw[s + 1] - phw[s])
                    sid[b, a] = psurf[s]
                    if not closed and ((s == 0 and t <= 0.0) or (s == nseg - 1 and t >= 1.0)):
                        hwv[b, a] = -100.0  # beyond the path's ends: square ends, no road


@njit_inner(_nrt=False, forceinline=True)
def _line_rgb(kind, ds, lat):
    """The colour of a line across the road of ``kind`` at ``ds`` (m) along the road from it
    and ``lat`` (m) across, or ``(-1, 0, 0)`` off the line."""
    if kind == MARK_START:
        if abs(ds) < 0.35:
            return 240.0, 240.0, 235.0
    elif kind == MARK_FINISH:
        if 0.0 <= ds < 2.0:
            q = int(math.floor(ds / 1.0)) + int(math.floor((lat + 50.0) / 1.0))
            return (245.0, 245.0, 245.0) if q % 2 == 0 else (20.0, 20.0, 20.0)
    elif abs(ds) < 0.3 and int(math.floor((lat + 50.0) / 0.8)) % 2:
        return 250.0, 212.0, 40.0
    return -1.0, 0.0, 0.0


@njit_inner
def _tile_composite(out, u0, v0, mps, col, shd, near, palette, marks, length, closed):
    """A tile's pixels: ground, shoulder, road surface with ruts, and the lines across the
    road (``marks``: kinds and positions). Blends into the ground colours ``col``."""
    best, lat, sv, hwv, sid = near
    mkind, ms = marks
    n = TILE + 1
    ppm = 1.0 / mps
    for b in range(n):
        for a in range(n):
            g = _hash01(u0 + a, v0 + b)
            gain = 1.0 + 0.05 * g
            if best[b, a] < 1e29:
                dl = abs(lat[b, a])
                hw = hwv[b, a]
                beyond = dl - hw
                if beyond < _SHOULDER_M:
                    # shoulder: darker ground close to the edge
                    f = max(beyond, 0.0) / _SHOULDER_M
                    gain *= 0.72 + 0.28 * f
                cov = min(max((hw - dl) * ppm + 0.5, 0.0), 1.0)
                if cov > 0.0:
                    sidx = sid[b, a]
                    lit = 0.78 + 0.34 * shd[b, a]
                    rg = 1.0 + 0.035 * g
                    if hw > 2.0 * _RUT_OFFSET_M:
                        rd = abs(dl - _RUT_OFFSET_M)
                        if rd < _RUT_HALF_M:
                            rg *= 1.0 - 0.08 * (1.0 - rd / _RUT_HALF_M)
                    for c in range(3):
                        road = palette[sidx, c] * lit * rg
                        col[b, a, c] = col[b, a, c] * gain * (1.0 - cov) + road * cov
                    gain = 1.0
                # lines across the road
                if dl < hw + 0.6:
                    lcov = min(max((hw + 0.6 - dl) * ppm, 0.0), 1.0)
                    for m in range(mkind.shape[0]):
                        ds = sv[b, a] - ms[m]
                        if closed:
                            ds -= length * math.floor(ds / length + 0.5)
                        rgb = _line_rgb(mkind[m], ds, lat[b, a])
                        if rgb[0] >= 0.0:
                            for c in range(3):
                                col[b, a, c] = col[b, a, c] * gain * (1.0 - lcov) + rgb[c] * lcov
                            gain = 1.0
            for c in range(3):
                out[b, a, c] = np.uint8(min(max(col[b, a, c] * gain, 0.0), 255.0))


@njit(cache=True, error_model="numpy")
def sample_view(
    frame,
    camera,
    ox,
    oy,
    ppm_bg,
    tile_index,
    pool,
    coarse,
    cx0,
    cy0,
    ccell,
    void_rgb,
    bilinear,
):
    """Fill ``frame`` (H, W, 3) uint8 with the background as seen by a camera.

    The ``camera`` ``(cx, cy, ux, uy, ppm_view, ax, ay)`` puts world point ``(cx, cy)`` at pixel
    ``(ax, ay)``, with the world unit vector ``(ux, uy)`` pointing up the screen, at ``ppm_view``
    pixels per metre. Bilinear (or nearest) from the tiles; where there is no tile, bilinear from
    the coarse heightfield colours; outside the terrain, ``void_rgb``.
    """
    cx, cy, ux, uy, ppm_view, ax, ay = camera
    h, w = frame.shape[0], frame.shape[1]
    nty, ntx = tile_index.shape
    cny, cnx = coarse.shape[0], coarse.shape[1]
    lim_u = ntx * TILE
    lim_v = nty * TILE
    rx, ry = uy, -ux  # screen right
    inv = 1.0 / ppm_view
    s = ppm_bg
    # tile sample coordinates (U along +x, V along +y): exact at each row start, then stepped
    dxu = rx * inv * s
    dyu = ry * inv * s
    half = 0.0 if bilinear else 0.5
    coarse4 = coarse.reshape((1, cny, cnx, 3))
    # blocks of BLOCK x BLOCK pixels: a rotated view then reads a small, cache-resident patch
    for by0 in range(0, h, BLOCK):
        for bx0 in range(0, w, BLOCK):
            for py in range(by0, min(by0 + BLOCK, h)):
                oyp = ay - (py + 0.5)
                oxp = bx0 + 0.5 - ax
                wx = cx + (oxp * rx + oyp * ux) * inv
                wy = cy + (oxp * ry + oyp * uy) * inv
                U = (wx - ox) * s + half
                V = (wy - oy) * s + half
                for px in range(bx0, min(bx0 + BLOCK, w)):
                    fu = math.floor(U)
                    fv = math.floor(V)
                    iu = np.int64(fu)
                    iv = np.int64(fv)
                    slot = -1
                    if 0 <= iu < lim_u and 0 <= iv < lim_v:
                        slot = tile_index[iv >> TILE_SHIFT, iu >> TILE_SHIFT]
                    if slot >= 0:
                        lu = iu & (TILE - 1)
                        lv = iv & (TILE - 1)
                        if bilinear:
                            _put_bilerp(frame, py, px, pool, slot, lv, lu, U - fu, V - fv)
                        else:
                            for c in range(3):
                                frame[py, px, c] = pool[slot, lv, lu, c]
                    else:
                        gx = ((U - half) / s + ox - cx0) / ccell
                        gy = ((V - half) / s + oy - cy0) / ccell
                        if 0.0 <= gx <= cnx - 1 and 0.0 <= gy <= cny - 1:
                            i = min(np.int64(gx), cnx - 2)
                            j = min(np.int64(gy), cny - 2)
                            _put_bilerp(frame, py, px, coarse4, 0, j, i, gx - i, gy - j)
                        else:
                            for c in range(3):
                                frame[py, px, c] = void_rgb[c]
                    U += dxu
                    V += dyu


@njit_inner(_nrt=False, forceinline=True)
def _put_bilerp(frame, py, px, src, k, j, i, fx, fy):
    """``frame[py, px]``: image ``src[k]`` bilinear at column ``i + fx``, row ``j + fy``."""
    for c in range(3):
        frame[py, px, c] = np.uint8(np.int32(_bilerp(src, k, j, i, c, fx, fy) + 0.5))


def stage_overview(stage, terrain, width: int, height: int, pad_m: float = 20.0):
    """A small map of the whole stage (for the HUD): terrain, road, start and finish.

    Returns:
        ``(rgb, to_px)``: (height, width, 3) uint8 and a function mapping world x, y arrays to
        pixel x, y arrays.
    """
    p = stage.path
    xmin, xmax = float(p.x_m.min()) - pad_m, float(p.x_m.max()) + pad_m
    ymin, ymax = float(p.y_m.min()) - pad_m, float(p.y_m.max()) + pad_m
    mpp = max((xmax - xmin) / width, (ymax - ymin) / height)
    cxm, cym = 0.5 * (xmin + xmax), 0.5 * (ymin + ymax)
    vx0 = cxm - 0.5 * width * mpp
    vy1 = cym + 0.5 * height * mpp
    tcol, _ = terrain_colors(terrain)
    ss = 4  # 4 x 4 samples per pixel, averaged (no aliasing of the 1 m terrain grid)
    u = vx0 + (np.arange(width * ss) + 0.5) * (mpp / ss)
    v = vy1 - (np.arange(height * ss) + 0.5) * (mpp / ss)
    fi = np.round((u - terrain.x0_m) / terrain.cell_m).astype(np.int64)
    fj = np.round((v - terrain.y0_m) / terrain.cell_m).astype(np.int64)
    out_i = (fi < 0) | (fi >= tcol.shape[1])
    out_j = (fj < 0) | (fj >= tcol.shape[0])
    fi = np.clip(fi, 0, tcol.shape[1] - 1)
    fj = np.clip(fj, 0, tcol.shape[0] - 1)
    big = tcol[fj[:, None], fi[None, :]]
    big[out_j[:, None] | out_i[None, :]] = VOID_RGB
    rgb = big.reshape(height, ss, width, ss, 3).mean(axis=(1, 3))
    rgb = np.clip(rgb * 0.8, 0, 255).astype(np.uint8)

    def to_px(x, y):
        return (np.asarray(x) - vx0) / mpp, (vy1 - np.asarray(y)) / mpp

    return rgb, to_px
