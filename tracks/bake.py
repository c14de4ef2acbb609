"""Bake a stage into the heightfield and surface map the physics samples.

For every node of a regular grid covering the stage plus a margin:

- **on the road** (distance to the centerline <= half width): the height is the road's
  elevation at the closest point's arc length (knot spline plus features, evaluated exactly),
  flat across the width (no banking); the surface id is the section's surface;
- **beyond the edge** (edge distance ``e > 0``): a berm, a smooth raised lip of
  ``berm_height_m`` over ``berm_width_m`` with rough ground starting on it, then a smoothstep
  blend over ``blend_m`` into the surrounding ground; the surface id is the off-road surface;
- **the surrounding ground**: a smooth field that follows the road's elevation (an
  inverse-distance weighted average of the centerline heights) plus seeded value noise: large
  undulations of ``amplitude_m`` (faded in over 20 m from the edge) and short-wavelength
  roughness of ``roughness_m``.

Every term is continuous in the node position, so heights are continuous at the road edge and
everywhere else (the stage's clearance rule keeps different parts of the road from competing
inside each other's blend zone). Noise is integer hashing and polynomials only: the arrays are
bit-identical on every platform. Bakes are cached per (stage content, seed, cell size).
"""

from __future__ import annotations

import math
import threading
from collections import OrderedDict

import numpy as np
from numba import njit

from physics.terrain import Terrain
from tracks import surfaces as _surf
from tracks._geometry import fan_project
from tracks.projection import FAN_RATIO, FAN_SLACK_M
from tracks.stage import FEATURE_JUMP, Stage

#: Ground margin around the stage's bounding box (m).
MARGIN_M = 60.0
#: Distance over which the large-scale ground noise fades in beyond the berm (m).
AMBIENT_RAMP_M = 20.0
#: Ground-following field: coarse cell (m), softening length and reach of the inverse-distance
#: weights (m) and the centerline sample stride it uses (m).
GROUND_CELL_M = 4.0
GROUND_SOFT_M = 4.0
GROUND_REACH_M = 160.0
GROUND_STRIDE_M = 4.0
#: Largest grid the bake will allocate (nodes).
MAX_NODES = 60_000_000
#: Number of bakes kept in the cache.
CACHE_SIZE = 8

_M32 = 0xFFFFFFFF


@njit(cache=True)
def _hash01(ix, iy, seed):
    """Uniform value in [-1, 1) from integer lattice coordinates (32-bit integer hash)."""
    a = ix & _M32
    b = iy & _M32
    h = (a * 374761393 + b * 668265263 + (seed & _M32) * 1274126177) & _M32
    h = ((h ^ (h >> 13)) * 1103515245) & _M32
    h = ((h ^ (h >> 16)) * 374761393) & _M32
    h = h ^ (h >> 15)
    return (h & 0xFFFFFF) * (2.0 / 16777216.0) - 1.0


@njit(cache=True)
def _fade(t):
    return t * t * t * (t * (t * 6.0 - 15.0) + 10.0)


@njit(cache=True)
def value_noise(x, y, scale, seed):
    """Smooth value noise in [-1, 1] with lattice spacing ``scale`` metres (quintic fade)."""
    fx = x / scale
    fy = y / scale
    gx = math.floor(fx)
    gy = math.floor(fy)
    ix = int(gx)
    iy = int(gy)
    u = _fade(fx - gx)
    v = _fade(fy - gy)
    a = _hash01(ix, iy, seed)
    b = _hash01(ix + 1, iy, seed)
    c = _hash01(ix, iy + 1, seed)
    d = _hash01(ix + 1, iy + 1, seed)
    ab = a + (b - a) * u
    cd = c + (d - c) * u
    return ab + (cd - ab) * v


@njit(cache=True)
def _fbm3(x, y, s0, seed):
    """Three octaves (s0, s0/2, s0/4 m) weighted 4:2:1, normalised to [-1, 1]."""
    n = 4.0 * value_noise(x, y, s0, seed)
    n += 2.0 * value_noise(x, y, 0.5 * s0, seed + 1)
    n += value_noise(x, y, 0.25 * s0, seed + 2)
    return n / 7.0


@njit(cache=True)
def _sstep(u):
    if u <= 0.0:
        return 0.0
    if u >= 1.0:
        return 1.0
    return u * u * (3.0 - 2.0 * u)


@njit(cache=True)
def feature_z(kind, params, s):
    """Elevation offset of the features at arc length s (same arithmetic as the path's)."""
    out = 0.0
    for k in range(kind.shape[0]):
        sc = params[k, 0]
        ln = params[k, 1]
        h = params[k, 2]
        face = params[k, 3]
        if kind[k] == FEATURE_JUMP:
            u = (s - (sc - ln)) / ln
            ramp = h * u * u if (u >= 0.0 and u <= 1.0) else 0.0
            v = (s - sc) / face
            vc = min(max(v, 0.0), 1.0)
            drop = h * (1.0 - vc * vc * (3.0 - 2.0 * vc)) if (v > 0.0 and v < 1.0) else 0.0
            out = out + ramp + drop
        else:
            u = (s - sc) / (0.5 * ln)
            w = 1.0 - u * u if abs(u) < 1.0 else 0.0
            sign = 1.0 if kind[k] == 0 else -1.0
            out = out + sign * h * w * w
    return out


@njit(cache=True)
def _ground_field(x, y, z, x0, y0, gnx, gny, gcell, soft, reach, stride):
    """Coarse ground-following field: inverse-distance weighted centerline heights.

    ``G = sum(w_i z_i) / sum(w_i)`` over every ``stride``-th sample with
    ``w_i = max(q, Q)^-2``, ``q = d_i^2 + soft^2``, ``Q = reach^2 + soft^2``: inverse-distance
    weights, clamped beyond ``reach`` (so only samples within reach need visiting). It equals
    the road height next to the road, slopes smoothly between neighbouring legs (a hillside
    between switchbacks) and flattens towards the mean far away; it is continuous everywhere.
    """
    wsum = np.zeros((gny, gnx))
    zsum = np.zeros((gny, gnx))
    m = x.shape[0]
    zbg = 0.0
    n_used = 0
    for i in range(0, m, stride):
        zbg += z[i]
        n_used += 1
    zbg /= n_used
    s2 = soft * soft
    big_q = reach * reach + s2
    w_cut = 1.0 / (big_q * big_q)
    n_reach = int(math.ceil(reach / gcell)) + 1
    for i in range(0, m, stride):
        ci = int(math.floor((x[i] - x0) / gcell))
        cj = int(math.floor((y[i] - y0) / gcell))
        for gj in range(max(cj - n_reach, 0), min(cj + n_reach + 1, gny)):
            dy = y0 + gj * gcell - y[i]
            for gi in range(max(ci - n_reach, 0), min(ci + n_reach + 1, gnx)):
                dx = x0 + gi * gcell - x[i]
                q = dx * dx + dy * dy + s2
                if q < big_q:
                    w = 1.0 / (q * q) - w_cut
                    wsum[gj, gi] += w
                    zsum[gj, gi] += w * z[i]
    # Every sample also carries the constant weight w_cut: samples beyond the reach count with
    # exactly that weight, so this is inverse-distance weighting with the weight clamped at the
    # reach (continuous), computed only over the samples within reach.
    w0 = w_cut * n_used
    g = np.empty((gny, gnx))
    for gj in range(gny):
        for gi in range(gnx):
            g[gj, gi] = (zsum[gj, gi] + w0 * zbg) / (wsum[gj, gi] + w0)
    return g


@njit(cache=True)
def bake_kernel(
    x,
    y,
    tx,
    ty,
    zb,
    z,
    hw,
    ds,
    length,
    closed,
    sec_start,
    sec_surf,
    fkind,
    fparams,
    x0,
    y0,
    cell,
    nx,
    ny,
    seed,
    amplitude,
    roughness,
    berm_h,
    berm_w,
    blend,
    offroad_id,
    heights,
    surf,
):
    """Fill ``heights`` (ny, nx) and ``surf`` (ny, nx) for one stage (see module docstring)."""
    n_seg = x.shape[0] - 1
    hw_max = 0.0
    for i in range(x.shape[0]):
        hw_max = max(hw_max, hw[i])
    band = hw_max + berm_w + blend + AMBIENT_RAMP_M
    band2 = band * band
    # Per node: the closest segment (Euclidean distance, continuous everywhere: drives the
    # fade-in of the ambient noise) and the fan projection (continuous s and offset: drives
    # the road height, the berm and the surface). See tracks._geometry.fan_project.
    best = np.full((ny, nx), np.inf)
    best_j = np.full((ny, nx), -1, np.int64)
    best_t = np.zeros((ny, nx))
    fan_d = np.full((ny, nx), np.inf)
    fan_j = np.full((ny, nx), -1, np.int64)
    fan_t = np.zeros((ny, nx))
    inv = 1.0 / cell
    for j in range(n_seg):
        ax = x[j]
        ay = y[j]
        ex = x[j + 1] - ax
        ey = y[j + 1] - ay
        t0x = tx[j]
        t0y = ty[j]
        t1x = tx[j + 1]
        t1y = ty[j + 1]
        il2 = 1.0 / (ex * ex + ey * ey)
        i_lo = max(int(math.floor((min(ax, ax + ex) - band - x0) * inv)), 0)
        i_hi = min(int(math.ceil((max(ax, ax + ex) + band - x0) * inv)), nx - 1)
        j_lo = max(int(math.floor((min(ay, ay + ey) - band - y0) * inv)), 0)
        j_hi = min(int(math.ceil((max(ay, ay + ey) + band - y0) * inv)), ny - 1)
        for gj in range(j_lo, j_hi + 1):
            py = y0 + gj * cell
            wy = py - ay
            for gi in range(i_lo, i_hi + 1):
                px = x0 + gi * cell
                wx = px - ax
                t = (wx * ex + wy * ey) * il2
                if t < 0.0:
                    t = 0.0
                elif t > 1.0:
                    t = 1.0
                dx = wx - t * ex
                dy = wy - t * ey
                d2 = dx * dx + dy * dy
                if d2 >= band2:
                    continue
                if d2 < best[gj, gi]:
                    best[gj, gi] = d2
                    best_j[gj, gi] = j
                    best_t[gj, gi] = t
                inside, tf, lat = fan_project(
                    ax, ay, ex, ey, t0x, t0y, t1x, t1y, px, py, False, False
                )
                if inside:
                    al = abs(lat)
                    if al < fan_d[gj, gi]:
                        fan_d[gj, gi] = al
                        fan_j[gj, gi] = j
                        fan_t[gj, gi] = tf

    gnx = int(math.ceil((nx - 1) * cell / GROUND_CELL_M)) + 2
    gny = int(math.ceil((ny - 1) * cell / GROUND_CELL_M)) + 2
    stride = max(1, int(GROUND_STRIDE_M / ds))
    g = _ground_field(
        x, y, z, x0, y0, gnx, gny, GROUND_CELL_M, GROUND_SOFT_M, GROUND_REACH_M, stride
    )
    n_sec = sec_start.shape[0]
    for gj in range(ny):
        py = y0 + gj * cell
        fy = (py - y0) / GROUND_CELL_M
        cj = min(int(math.floor(fy)), gny - 2)
        fty = fy - cj
        for gi in range(nx):
            px = x0 + gi * cell
            fx = (px - x0) / GROUND_CELL_M
            ci = min(int(math.floor(fx)), gnx - 2)
            ftx = fx - ci
            ga = g[cj, ci] + (g[cj, ci + 1] - g[cj, ci]) * ftx
            gb = g[cj + 1, ci] + (g[cj + 1, ci + 1] - g[cj + 1, ci]) * ftx
            ground = ga + (gb - ga) * fty
            amb = amplitude * _fbm3(px, py, 96.0, seed)
            rough = roughness * _fbm3(px, py, 8.0, seed + 17)
            jj = best_j[gj, gi]
            if jj < 0:
                heights[gj, gi] = ground + amb + rough
                surf[gj, gi] = offroad_id
                continue
            d_euc = math.sqrt(best[gj, gi])
            if fan_j[gj, gi] >= 0 and fan_d[gj, gi] <= FAN_RATIO * d_euc + FAN_SLACK_M:
                jj = fan_j[gj, gi]
                t = fan_t[gj, gi]
                d = fan_d[gj, gi]
            else:
                t = best_t[gj, gi]
                d = d_euc
            s = (jj + t) * ds
            h_s = hw[jj] + (hw[jj + 1] - hw[jj]) * t
            zr = zb[jj] + (zb[jj + 1] - zb[jj]) * t + feature_z(fkind, fparams, s)
            e = d - h_s
            if e <= 0.0:
                heights[gj, gi] = zr
                if closed and s >= length:
                    s -= length
                k = 0
                for q in range(1, n_sec):
                    if sec_start[q] <= s:
                        k = q
                surf[gj, gi] = sec_surf[k]
                continue
            sa = _sstep(e / berm_w)
            near = zr + berm_h * sa + rough * sa
            w = _sstep((e - berm_w) / blend)
            ramp = _sstep((d_euc - h_s - berm_w) / AMBIENT_RAMP_M)
            far = ground + amb * ramp + rough
            heights[gj, gi] = near + (far - near) * w
            surf[gj, gi] = offroad_id


def grid_for(stage: Stage, cell_m: float = 1.0) -> tuple[float, float, int, int]:
    """(x0, y0, nx, ny) of the bake grid: the stage's bounding box plus ``MARGIN_M``."""
    p = stage.path
    pad = float(np.max(p.half_width_m)) + MARGIN_M
    x0 = math.floor((float(np.min(p.x_m)) - pad) / cell_m) * cell_m
    y0 = math.floor((float(np.min(p.y_m)) - pad) / cell_m) * cell_m
    nx = int(math.ceil((float(np.max(p.x_m)) + pad - x0) / cell_m)) + 1
    ny = int(math.ceil((float(np.max(p.y_m)) + pad - y0) / cell_m)) + 1
    return x0, y0, nx, ny


def bake_uncached(stage: Stage, seed: int | None = None, cell_m: float = 1.0) -> Terrain:
    """Bake without the cache (see :func:`bake`)."""
    if not isinstance(stage, Stage):
        raise TypeError(f"bake needs a Stage, got {type(stage).__name__}")
    if not (isinstance(cell_m, (int, float)) and math.isfinite(cell_m) and 0.1 <= cell_m <= 8.0):
        raise ValueError(f"cell_m must be in [0.1, 8] m, got {cell_m!r}")
    ts = stage.terrain
    seed = ts.seed if seed is None else seed
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or not (0 <= seed < 2**32):
        raise ValueError(f"seed must be an integer in [0, 2**32), got {seed!r}")
    cell_m = float(cell_m)
    x0, y0, nx, ny = grid_for(stage, cell_m)
    if nx * ny > MAX_NODES:
        raise ValueError(
            f"stage {stage.name!r} needs a {nx}x{ny} grid at {cell_m} m cells, "
            f"more than {MAX_NODES} nodes; use a larger cell_m"
        )
    p = stage.path
    heights = np.empty((ny, nx), np.float64)
    surf = np.empty((ny, nx), np.int8)
    bake_kernel(
        p.x_m,
        p.y_m,
        p.tx,
        p.ty,
        p.z_base_m,
        p.z_m,
        p.half_width_m,
        p.ds_m,
        p.length_m,
        p.closed,
        p.section_start_m,
        p.section_surface,
        p.feature_kind,
        p.feature_params,
        x0,
        y0,
        cell_m,
        nx,
        ny,
        int(seed),
        ts.amplitude_m,
        ts.roughness_m,
        ts.berm_height_m,
        ts.berm_width_m,
        ts.blend_m,
        _surf.surface_id(ts.offroad_surface),
        heights,
        surf,
    )
    return Terrain(heights, surf, _surf.GRIP.copy(), x0, y0, cell_m, name=stage.name)


_cache: OrderedDict[tuple[str, int, float], Terrain] = OrderedDict()
_lock = threading.Lock()


def bake(stage: Stage, seed: int | None = None, cell_m: float = 1.0) -> Terrain:
    """The heightfield and surface map of a stage (cached).

    Args:
        stage: the stage.
        seed: terrain noise seed; ``None`` uses ``stage.terrain.seed`` (default 42).
        cell_m: node spacing in metres.

    Returns:
        A :class:`physics.terrain.Terrain` with ``heights_m`` (ny, nx) float64, ``surface_ids``
        (ny, nx) int8 and ``grip`` = :data:`tracks.surfaces.GRIP`. The same object is returned
        for the same stage content, seed and cell size while it stays in the cache.
    """
    if not isinstance(stage, Stage):
        raise TypeError(f"bake needs a Stage, got {type(stage).__name__}")
    key_seed = stage.terrain.seed if seed is None else seed
    key = (stage.digest(), int(key_seed), float(cell_m))
    with _lock:
        t = _cache.get(key)
        if t is not None:
            _cache.move_to_end(key)
            return t
    t = bake_uncached(stage, seed, cell_m)
    with _lock:
        _cache[key] = t
        _cache.move_to_end(key)
        while len(_cache) > CACHE_SIZE:
            _cache.popitem(last=False)
    return t


def clear_bake_cache() -> None:
    """Drop all cached bakes."""
    with _lock:
        _cache.clear()
