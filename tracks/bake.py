"""Bake a stage into the heightfield and surface map the physics samples.

:class:`StageTerrain` computes any set of grid nodes on demand, bit-identical to the same nodes
of a whole bake (the tiles a car reaches, :class:`physics.terrain.TerrainSet`); :func:`bake`
returns the whole grid as a dense :class:`physics.terrain.Terrain` (cached). docs/stages.md,
"Terrain bake", describes the terms, the on-demand index and the determinism.
"""

from __future__ import annotations

import math
import threading
from collections import OrderedDict
from typing import NamedTuple

import numpy as np

from physics.jit import njit, njit_inner
from physics.terrain import TILE, TILE_W, Terrain, tile_grid
from tracks import surfaces as _surf
from tracks._geometry import fan_project, seg_foot
from tracks.projection import FAN_RATIO, FAN_SLACK_M
from tracks.stage import Stage, feature_z

#: Ground margin around the stage's bounding box (m).
MARGIN_M = 60.0
#: :meth:`StageTerrain.start_tiles`: the road from the start line to this far beyond it (m)...
START_AHEAD_M = 40.0
#: ...and this far beyond its edges (m): a car's reach and the physics' fill margin.
START_PAD_M = 6.0
_NONE_BAKED = (
    np.empty(0, np.int64),
    np.empty((0, TILE_W * TILE_W)),
    np.empty((0, TILE_W * TILE_W), np.int8),
)
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
#: Side of a bucket of the segment index (nodes) and of the ground-sample index (coarse cells).
SEG_BUCKET = 32
SAMPLE_BUCKET = 16

_M32 = 0xFFFFFFFF

# scalar parameters of a StageTerrain (float64 vector ``prm``)
_X0 = 0
_Y0 = 1
_CELL = 2
_NX = 3
_NY = 4
_DS = 5
_LENGTH = 6
_CLOSED = 7
_BAND = 8
_SEED = 9
_AMP = 10
_ROUGH = 11
_BERM_H = 12
_BERM_W = 13
_BLEND = 14
_OFFROAD = 15
_GNX = 16
_GNY = 17
_ZBG = 18
_W0 = 19
_STRIDE = 20
_SBX = 21  # sample buckets along x
_SBY = 22
_BX = 23  # segment buckets along x
_BY = 24
_N_PRM = 25


#: The _Geo fields a pickled StageTerrain leaves out (the stage's centerline columns, rebuilt
#: from the stage) and the index tables it sends as int32 (see StageTerrain.__getstate__).
_PATH_COLUMNS = ("x", "y", "tx", "ty", "zb", "z")
_INDEX_TABLES = ("win", "swin", "bstart", "bitems", "sstart", "sitems", "sci", "scj")
_I32 = np.iinfo(np.int32)


class _Geo(NamedTuple):
    """The arrays of a :class:`StageTerrain` as the kernels take them."""

    x: np.ndarray  # (m,) centerline samples (m)
    y: np.ndarray
    tx: np.ndarray  # (m,) unit tangents
    ty: np.ndarray
    zb: np.ndarray  # (m,) knot-spline elevation (m)
    z: np.ndarray  # (m,) elevation with features (m)
    hw: np.ndarray  # (m,) half width (m)
    sec_start: np.ndarray  # (n_sec,) section starts (m)
    sec_surf: np.ndarray  # (n_sec,) int8 surface ids
    fkind: np.ndarray  # (n_feat,) int64
    fparams: np.ndarray  # (n_feat, 4)
    win: np.ndarray  # (m-1, 4) int64 node window (i_lo, i_hi, j_lo, j_hi) of each segment
    swin: np.ndarray  # (m-1, 4) int64 window of each segment for the section labels
    bstart: np.ndarray  # (n_buckets + 1,) CSR of the segments whose window meets a bucket
    bitems: np.ndarray
    sstart: np.ndarray  # (n_sample_buckets + 1,) CSR of the ground samples per bucket
    sitems: np.ndarray
    sci: np.ndarray  # (n_samples,) coarse cell of each ground sample (unclamped)
    scj: np.ndarray
    g: np.ndarray  # (gny, gnx) ground field, defined where ``gdone`` is set
    prm: np.ndarray  # (_N_PRM,) scalars
    # (gny, gnx) uint8, 1 where the ground field is computed (None only in a pickle made
    # before it existed, where g was NaN where not computed; loading sets it)
    gdone: np.ndarray | None = None


@njit_inner
def _hash01(ix, iy, seed):
    """Uniform value in [-1, 1) from integer lattice coordinates (32-bit integer hash)."""
    a = ix & _M32
    b = iy & _M32
    h = (a * 374761393 + b * 668265263 + (seed & _M32) * 1274126177) & _M32
    h = ((h ^ (h >> 13)) * 1103515245) & _M32
    h = ((h ^ (h >> 16)) * 374761393) & _M32
    h = h ^ (h >> 15)
    return (h & 0xFFFFFF) * (2.0 / 16777216.0) - 1.0


@njit_inner
def _fade(t):
    return t * t * t * (t * (t * 6.0 - 15.0) + 10.0)


@njit_inner
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


@njit_inner
def _fbm3(x, y, s0, seed):
    """Three octaves (s0, s0/2, s0/4 m) weighted 4:2:1, normalised to [-1, 1]."""
    n = 4.0 * value_noise(x, y, s0, seed)
    n += 2.0 * value_noise(x, y, 0.5 * s0, seed + 1)
    n += value_noise(x, y, 0.25 * s0, seed + 2)
    return n / 7.0


@njit_inner
def _sstep(u):
    if u <= 0.0:
        return 0.0
    if u >= 1.0:
        return 1.0
    return u * u * (3.0 - 2.0 * u)


# ----------------------------------------------------------------------------- index building
def _windows(x, y, hw, x0, y0, cell, nx, ny, band) -> tuple[np.ndarray, np.ndarray]:
    """Node windows ``(i_lo, i_hi, j_lo, j_hi)`` of every segment, int64 ``(m - 1, 4)``: the
    band window (a node is searched against a segment only inside it) and the narrower window
    of the section labels (empty, ``(1, 0, 1, 0)``, for a segment of zero length)."""
    ax, ay = x[:-1], y[:-1]
    ex, ey = x[1:] - ax, y[1:] - ay
    lo_x, hi_x = np.minimum(ax, ax + ex), np.maximum(ax, ax + ex)
    lo_y, hi_y = np.minimum(ay, ay + ey), np.maximum(ay, ay + ey)
    bounds = ([0, -np.inf, 0, -np.inf], [np.inf, nx - 1, np.inf, ny - 1])
    inv = 1.0 / cell
    win = [np.floor((lo_x - band - x0) * inv), np.ceil((hi_x + band - x0) * inv)]
    win += [np.floor((lo_y - band - y0) * inv), np.ceil((hi_y + band - y0) * inv)]
    r = np.maximum(hw[:-1], hw[1:]) + 2.0 * cell
    swin = [np.floor((lo_x - r - x0) / cell), np.ceil((hi_x + r - x0) / cell)]
    swin += [np.floor((lo_y - r - y0) / cell), np.ceil((hi_y + r - y0) / cell)]
    win = np.clip(np.stack(win, axis=1), *bounds).astype(np.int64)
    swin = np.clip(np.stack(swin, axis=1), *bounds).astype(np.int64)
    swin[ex * ex + ey * ey <= 0.0] = (1, 0, 1, 0)
    return win, swin


@njit(cache=True)
def _strided_mean(z, stride):
    """Mean of every ``stride``-th value, summed in index order (the ground field's far
    level)."""
    t = 0.0
    n = 0
    for i in range(0, z.shape[0], stride):
        t += z[i]
        n += 1
    return t / n


@njit(cache=True)
def _csr(lo_x, hi_x, lo_y, hi_y, bsize, nbx, nby):
    """Bucket index: for each item k, the buckets of side ``bsize`` its (inclusive) index box
    meets; returns (start, items) with each bucket's items in ascending order."""
    n = lo_x.shape[0]
    count = np.zeros(nbx * nby + 1, np.int64)
    for k in range(n):
        if lo_x[k] > hi_x[k] or lo_y[k] > hi_y[k]:
            continue
        for by in range(lo_y[k] // bsize, hi_y[k] // bsize + 1):
            for bx in range(lo_x[k] // bsize, hi_x[k] // bsize + 1):
                count[by * nbx + bx + 1] += 1
    for b in range(nbx * nby):
        count[b + 1] += count[b]
    fill = count[:-1].copy()
    items = np.empty(count[-1], np.int64)
    for k in range(n):
        if lo_x[k] > hi_x[k] or lo_y[k] > hi_y[k]:
            continue
        for by in range(lo_y[k] // bsize, hi_y[k] // bsize + 1):
            for bx in range(lo_x[k] // bsize, hi_x[k] // bsize + 1):
                b = by * nbx + bx
                items[fill[b]] = k
                fill[b] += 1
    return count, items


@njit_inner
def _gather(start, items, nbx, bx0, bx1, by0, by1, n_items):
    """Sorted, distinct items of the buckets [bx0, bx1] x [by0, by1]."""
    mark = np.zeros(n_items, np.bool_)
    m = 0
    for by in range(by0, by1 + 1):
        for bx in range(bx0, bx1 + 1):
            b = by * nbx + bx
            for q in range(start[b], start[b + 1]):
                k = items[q]
                if not mark[k]:
                    mark[k] = True
                    m += 1
    out = np.empty(m, np.int64)
    m = 0
    for k in range(n_items):
        if mark[k]:
            out[m] = k
            m += 1
    return out


# ----------------------------------------------------------------------- the ground field
@njit_inner
def _ground_cells(geo, ci0, ci1, cj0, cj1):
    """Fill the not yet computed cells [ci0, ci1] x [cj0, cj1] of the ground-following field
    ``G = sum(w_i z_i) / sum(w_i)`` over every ``stride``-th centerline sample, ``w_i =
    max(d_i^2 + soft^2, reach^2 + soft^2)^-2`` (docs/stages.md, "Terrain bake"). Each cell sums
    its samples in ascending order, exactly as a pass over all samples would.
    """
    g = geo.g
    gnx = g.shape[1]
    gny = g.shape[0]
    ci0 = max(ci0, 0)
    cj0 = max(cj0, 0)
    ci1 = min(ci1, gnx - 1)
    cj1 = min(cj1, gny - 1)
    b = SAMPLE_BUCKET
    for bj in range(cj0 // b, cj1 // b + 1):
        for bi in range(ci0 // b, ci1 // b + 1):
            _ground_block(
                geo,
                max(ci0, bi * b),
                min(ci1, bi * b + b - 1),
                max(cj0, bj * b),
                min(cj1, bj * b + b - 1),
            )


@njit_inner
def _ground_block(geo, ci0, ci1, cj0, cj1):
    g = geo.g
    gdone = geo.gdone
    prm = geo.prm
    if gdone[cj0 : cj1 + 1, ci0 : ci1 + 1].all():
        return
    x = geo.x
    y = geo.y
    z = geo.z
    x0 = prm[_X0]
    y0 = prm[_Y0]
    gcell = GROUND_CELL_M
    soft = GROUND_SOFT_M
    reach = GROUND_REACH_M
    s2 = soft * soft
    big_q = reach * reach + s2
    w_cut = 1.0 / (big_q * big_q)
    n_reach = int(math.ceil(reach / gcell)) + 1
    stride = int(prm[_STRIDE])
    nsx = int(prm[_SBX])
    nsy = int(prm[_SBY])
    b = SAMPLE_BUCKET
    cand = _gather(
        geo.sstart,
        geo.sitems,
        nsx,
        max((ci0 - n_reach) // b, 0),
        min((ci1 + n_reach) // b, nsx - 1),
        max((cj0 - n_reach) // b, 0),
        min((cj1 + n_reach) // b, nsy - 1),
        (x.shape[0] - 1) // stride + 1,
    )
    w0 = prm[_W0]
    zbg = prm[_ZBG]
    for gj in range(cj0, cj1 + 1):
        for gi in range(ci0, ci1 + 1):
            if gdone[gj, gi] != 0:
                continue
            wsum = 0.0
            zsum = 0.0
            for q_ in range(cand.shape[0]):
                i = cand[q_] * stride
                ci = geo.sci[cand[q_]]
                cj = geo.scj[cand[q_]]
                if gi < ci - n_reach or gi > ci + n_reach or gj < cj - n_reach or gj > cj + n_reach:
                    continue
                dy = y0 + gj * gcell - y[i]
                dx = x0 + gi * gcell - x[i]
                q = dx * dx + dy * dy + s2
                if q < big_q:
                    w = 1.0 / (q * q) - w_cut
                    wsum += w
                    zsum += w * z[i]
            # Every sample also carries the constant weight w_cut: samples beyond the reach
            # count with exactly that weight, so this is inverse-distance weighting with the
            # weight clamped at the reach (continuous), computed over the samples within reach.
            g[gj, gi] = (zsum + w0 * zbg) / (wsum + w0)
            gdone[gj, gi] = 1


# -------------------------------------------------------------------------- node values
@njit_inner
def _span(idx, lo, hi):
    """[a, b) of the positions of ``idx`` (ascending grid indices, maybe repeated at the
    edges) that can lie in [lo, hi]: direct for a run of consecutive indices, else all."""
    n = idx.shape[0]
    if idx[n - 1] - idx[0] != n - 1:
        return 0, n
    a = min(max(lo - idx[0], 0), n)
    b = min(max(hi - idx[0] + 1, 0), n)
    return a, max(a, b)


#: Candidate segments per chunk of the per-node search (see _nearest_pruned).
_CHUNK = 4
#: Side of the blocks a region is baked in (nodes): the per-node search's cost grows with a
#: block's candidate segments.
_BLOCK = 64


@njit_inner
def _chunk_boxes(x, y, cand):
    """The candidate segments as the node search takes them, (m, 5) rows ``ax, ay, ex, ey,
    1 / |e|^2``, and the box around each chunk of ``_CHUNK`` of them, (n_chunks, 4) rows
    ``x_lo, x_hi, y_lo, y_hi``."""
    m = cand.shape[0]
    seg = np.empty((m, 5))
    box = np.empty(((m + _CHUNK - 1) // _CHUNK, 4))
    box[:, 0] = np.inf
    box[:, 1] = -np.inf
    box[:, 2] = np.inf
    box[:, 3] = -np.inf
    for q in range(m):
        j = cand[q]
        seg[q, 0] = x[j]
        seg[q, 1] = y[j]
        seg[q, 2] = x[j + 1] - seg[q, 0]
        seg[q, 3] = y[j + 1] - seg[q, 1]
        seg[q, 4] = 1.0 / (seg[q, 2] * seg[q, 2] + seg[q, 3] * seg[q, 3])
        h = q // _CHUNK
        box[h, 0] = min(box[h, 0], x[j], x[j + 1])
        box[h, 1] = max(box[h, 1], x[j], x[j + 1])
        box[h, 2] = min(box[h, 2], y[j], y[j + 1])
        box[h, 3] = max(box[h, 3], y[j], y[j + 1])
    return seg, box


@njit_inner
def _nearest_pruned(geo, cand, seg, box, lb2, gi, gj, px, py):
    """For the node (gi, gj) at (px, py), of the candidates ``cand`` (:func:`_chunk_boxes`'s
    ``seg`` and ``box``; ``lb2`` scratch, one per chunk): the closest segment within the band
    (squared distance, index, foot) and the fan projection with the smallest |offset| (offset,
    index, foot), index -1 for none; ties go to the lower segment index. Chunks that cannot
    matter are skipped (docs/stages.md, "Terrain bake", implementation notes).
    """
    no = np.bool_(False)  # no open ends; not a literal (see physics.jit)
    tx = geo.tx
    ty = geo.ty
    band = geo.prm[_BAND]
    band2 = band * band
    win = geo.win
    m = cand.shape[0]
    n_ch = box.shape[0]
    b_d2 = np.inf
    b_j = -1
    b_t = 0.0
    f_d = np.inf
    f_j = -1
    f_t = 0.0
    if m == 0:  # no segment within reach
        return b_d2, b_j, b_t, f_d, f_j, f_t
    first = 0
    for h in range(n_ch):
        ddx = max(box[h, 0] - px, 0.0, px - box[h, 1])
        ddy = max(box[h, 2] - py, 0.0, py - box[h, 3])
        lb2[h] = ddx * ddx + ddy * ddy
        if lb2[h] < lb2[first]:
            first = h
    thr2 = np.inf  # chunks whose box is farther (squared) cannot matter
    for hh in range(-1, n_ch):
        h = first if hh < 0 else hh
        if hh == first or lb2[h] > thr2:
            continue
        for q in range(h * _CHUNK, min(m, (h + 1) * _CHUNK)):
            j = cand[q]
            if gi < win[j, 0] or gi > win[j, 1] or gj < win[j, 2] or gj > win[j, 3]:
                continue
            ax = seg[q, 0]
            ay = seg[q, 1]
            ex = seg[q, 2]
            ey = seg[q, 3]
            d2, t = seg_foot(px - ax, py - ay, ex, ey, seg[q, 4])
            if d2 >= band2:
                continue
            if d2 < b_d2 or (d2 == b_d2 and j < b_j):
                b_d2 = d2
                b_j = j
                b_t = t
                bound = (FAN_RATIO * math.sqrt(d2) + FAN_SLACK_M) * (1.0 + 1e-9) + 1e-9
                thr2 = bound * bound
            inside, tf, lat = fan_project(
                ax, ay, ex, ey, tx[j], ty[j], tx[j + 1], ty[j + 1], px, py, no, no
            )
            if inside:
                al = abs(lat)
                if al < f_d or (al == f_d and j < f_j):
                    f_d = al
                    f_j = j
                    f_t = tf
    return b_d2, b_j, b_t, f_d, f_j, f_t


@njit_inner
def _section_at(sec_start, s, closed, length):
    """Index of the section holding arc length ``s`` (taken once round a loop)."""
    if closed and s >= length:
        s -= length
    k = 0
    for q in range(1, sec_start.shape[0]):
        if sec_start[q] <= s:
            k = q
    return k


@njit_inner
def _candidates(geo, c_lo, c_hi, r_lo, r_hi):
    """Segments whose band window meets the node box [c_lo, c_hi] x [r_lo, r_hi], ascending."""
    prm = geo.prm
    nbx = int(prm[_BX])
    nby = int(prm[_BY])
    b = SEG_BUCKET
    pool = _gather(
        geo.bstart,
        geo.bitems,
        nbx,
        min(c_lo // b, nbx - 1),
        min(c_hi // b, nbx - 1),
        min(r_lo // b, nby - 1),
        min(r_hi // b, nby - 1),
        geo.x.shape[0] - 1,
    )
    win = geo.win
    m = 0
    for q in range(pool.shape[0]):
        j = pool[q]
        if win[j, 0] <= c_hi and win[j, 1] >= c_lo and win[j, 2] <= r_hi and win[j, 3] >= r_lo:
            pool[m] = j
            m += 1
    return pool[:m]


@njit_inner
def _bake_nodes(geo, cols, rows, heights, surf):
    """Heights and surface ids of the nodes ``rows x cols`` (grid indices, ascending; repeats
    allowed) into ``heights`` / ``surf`` (len(rows), len(cols))."""
    prm = geo.prm
    nr = rows.shape[0]
    nc = cols.shape[0]
    c_lo = cols[0]
    c_hi = cols[nc - 1]
    r_lo = rows[0]
    r_hi = rows[nr - 1]
    cand = _candidates(geo, c_lo, c_hi, r_lo, r_hi)
    seg, box = _chunk_boxes(geo.x, geo.y, cand)
    lb2 = np.empty(box.shape[0])
    x0 = prm[_X0]
    y0 = prm[_Y0]
    cell = prm[_CELL]
    g = geo.g
    gnx = g.shape[1]
    gny = g.shape[0]
    # the ground cells these nodes interpolate between
    ci_lo = min(int(math.floor((x0 + c_lo * cell - x0) / GROUND_CELL_M)), gnx - 2)
    ci_hi = min(int(math.floor((x0 + c_hi * cell - x0) / GROUND_CELL_M)), gnx - 2) + 1
    cj_lo = min(int(math.floor((y0 + r_lo * cell - y0) / GROUND_CELL_M)), gny - 2)
    cj_hi = min(int(math.floor((y0 + r_hi * cell - y0) / GROUND_CELL_M)), gny - 2) + 1
    _ground_cells(geo, ci_lo, ci_hi, cj_lo, cj_hi)
    seed = int(prm[_SEED])
    amplitude = prm[_AMP]
    roughness = prm[_ROUGH]
    berm_h = prm[_BERM_H]
    berm_w = prm[_BERM_W]
    blend = prm[_BLEND]
    offroad_id = int(prm[_OFFROAD])
    ds = prm[_DS]
    length = prm[_LENGTH]
    closed = prm[_CLOSED] > 0.5
    hw = geo.hw
    zb = geo.zb
    fkind = geo.fkind
    fparams = geo.fparams
    for r in range(nr):
        gj = rows[r]
        py = y0 + gj * cell
        fy = (py - y0) / GROUND_CELL_M
        cj = min(int(math.floor(fy)), gny - 2)
        fty = fy - cj
        for c in range(nc):
            gi = cols[c]
            px = x0 + gi * cell
            fx = (px - x0) / GROUND_CELL_M
            ci = min(int(math.floor(fx)), gnx - 2)
            ftx = fx - ci
            ga = g[cj, ci] + (g[cj, ci + 1] - g[cj, ci]) * ftx
            gb = g[cj + 1, ci] + (g[cj + 1, ci + 1] - g[cj + 1, ci]) * ftx
            ground = ga + (gb - ga) * fty
            amb = amplitude * _fbm3(px, py, 96.0, seed)
            rough = roughness * _fbm3(px, py, 8.0, seed + 17)
            b_d2, jj, b_t, f_d, f_j, f_t = _nearest_pruned(geo, cand, seg, box, lb2, gi, gj, px, py)
            if jj < 0:
                heights[r, c] = ground + amb + rough
                surf[r, c] = offroad_id
                continue
            d_euc = math.sqrt(b_d2)
            if f_j >= 0 and f_d <= FAN_RATIO * d_euc + FAN_SLACK_M:
                jj = f_j
                t = f_t
                d = f_d
            else:
                t = b_t
                d = d_euc
            s = (jj + t) * ds
            h_s = hw[jj] + (hw[jj + 1] - hw[jj]) * t
            zr = zb[jj] + (zb[jj + 1] - zb[jj]) * t + feature_z(fkind, fparams, s)
            e = d - h_s
            if e <= 0.0:
                heights[r, c] = zr
                surf[r, c] = geo.sec_surf[_section_at(geo.sec_start, s, closed, length)]
                continue
            sa = _sstep(e / berm_w)
            near = zr + berm_h * sa + rough * sa
            w = _sstep((e - berm_w) / blend)
            ramp = _sstep((d_euc - h_s - berm_w) / AMBIENT_RAMP_M)
            far = ground + amb * ramp + rough
            heights[r, c] = near + (far - near) * w
            surf[r, c] = offroad_id


@njit_inner
def _section_nodes(geo, cols, rows, out):
    """Label nodes with ``1 + section index`` (folded into 1..15) where the closest segment
    (searched within each segment's own road window) is within the half width; else 0."""
    prm = geo.prm
    x = geo.x
    y = geo.y
    hw = geo.hw
    x0 = prm[_X0]
    y0 = prm[_Y0]
    cell = prm[_CELL]
    ds = prm[_DS]
    length = prm[_LENGTH]
    closed = prm[_CLOSED] > 0.5
    swin = geo.swin
    nr = rows.shape[0]
    nc = cols.shape[0]
    cand = _candidates(geo, cols[0], cols[nc - 1], rows[0], rows[nr - 1])
    best = np.full((nr, nc), np.inf)
    best_j = np.full((nr, nc), -1, np.int64)
    best_t = np.zeros((nr, nc))
    for q_ in range(cand.shape[0]):
        j = cand[q_]
        ax = x[j]
        ay = y[j]
        ex = x[j + 1] - ax
        ey = y[j + 1] - ay
        l2 = ex * ex + ey * ey
        if l2 <= 0.0:
            continue
        il2 = 1.0 / l2
        r_a, r_b = _span(rows, swin[j, 2], swin[j, 3])
        c_a, c_b = _span(cols, swin[j, 0], swin[j, 1])
        for r in range(r_a, r_b):
            gj = rows[r]
            if gj < swin[j, 2] or gj > swin[j, 3]:
                continue
            wy = y0 + gj * cell - ay
            for c in range(c_a, c_b):
                gi = cols[c]
                if gi < swin[j, 0] or gi > swin[j, 1]:
                    continue
                wx = x0 + gi * cell - ax
                d2, t = seg_foot(wx, wy, ex, ey, il2)
                if d2 < best[r, c]:
                    best[r, c] = d2
                    best_j[r, c] = j
                    best_t[r, c] = t
    for r in range(nr):
        for c in range(nc):
            jj = best_j[r, c]
            out[r, c] = 0
            if jj < 0:
                continue
            t = best_t[r, c]
            h = hw[jj] + (hw[jj + 1] - hw[jj]) * t
            if math.sqrt(best[r, c]) - h > 0.0:
                continue
            out[r, c] = 1 + _section_at(geo.sec_start, (jj + t) * ds, closed, length) % 15


@njit(cache=True)
def _bake_block(geo, cols, rows, heights, surf, sectioned):
    """:func:`_bake_nodes` in blocks of at most ``_BLOCK`` x ``_BLOCK`` nodes and, if
    ``sectioned`` (``None`` or ``True``), the section labels of a region of nodes: the entry
    point from Python (the helpers it calls are compiled without Python wrappers, see
    :mod:`physics.jit`)."""
    for r0 in range(0, rows.shape[0], _BLOCK):
        r1 = min(r0 + _BLOCK, rows.shape[0])
        for c0 in range(0, cols.shape[0], _BLOCK):
            c1 = min(c0 + _BLOCK, cols.shape[0])
            h = np.empty((r1 - r0, c1 - c0))
            s = np.empty((r1 - r0, c1 - c0), np.int8)
            _bake_nodes(geo, cols[c0:c1].copy(), rows[r0:r1].copy(), h, s)
            for r in range(r1 - r0):
                for c in range(c1 - c0):
                    heights[r0 + r, c0 + c] = h[r, c]
                    surf[r0 + r, c0 + c] = s[r, c]
    if sectioned is not None:
        _section_nodes(geo, cols, rows, surf)


@njit(cache=True)
def _fill_tiles(geo, tiles, nx, ny, sectioned, heights, surf):
    """Bake tiles (rows (tx, ty)) into (m, TILE_W * TILE_W) blocks: the tile's TILE x TILE
    nodes plus a one-node apron, grid indices clamped at the grid's edge. ``sectioned`` is a
    compile-time switch, ``None`` or ``True`` (label the nodes with their section): a stage
    without section labels does not compile the labelling."""
    cols = np.empty(TILE_W, np.int64)
    rows = np.empty(TILE_W, np.int64)
    h = np.empty((TILE_W, TILE_W))
    s = np.empty((TILE_W, TILE_W), np.int8)
    for m in range(tiles.shape[0]):
        for q in range(TILE_W):
            cols[q] = min(max(tiles[m, 0] * TILE - 1 + q, 0), nx - 1)
            rows[q] = min(max(tiles[m, 1] * TILE - 1 + q, 0), ny - 1)
        _bake_nodes(geo, cols, rows, h, s)
        if sectioned is not None:
            _section_nodes(geo, cols, rows, s)
        for r in range(TILE_W):
            for c in range(TILE_W):
                heights[m, r * TILE_W + c] = h[r, c]
                surf[m, r * TILE_W + c] = s[r, c]


# ------------------------------------------------------------------------------- the source
def grid_for(stage: Stage, cell_m: float = 1.0) -> tuple[float, float, int, int]:
    """(x0, y0, nx, ny) of the bake grid: the stage's bounding box plus ``MARGIN_M``."""
    p = stage.path
    pad = float(np.max(p.half_width_m)) + MARGIN_M
    x0 = math.floor((float(np.min(p.x_m)) - pad) / cell_m) * cell_m
    y0 = math.floor((float(np.min(p.y_m)) - pad) / cell_m) * cell_m
    nx = int(math.ceil((float(np.max(p.x_m)) + pad - x0) / cell_m)) + 1
    ny = int(math.ceil((float(np.max(p.y_m)) + pad - y0) / cell_m)) + 1
    return x0, y0, nx, ny


def _check_args(
    stage: Stage, seed: int | None, cell_m: float, lo: float = 0.1
) -> tuple[int, float]:
    if not isinstance(stage, Stage):
        raise TypeError(f"bake needs a Stage, got {type(stage).__name__}")
    if not (isinstance(cell_m, (int, float)) and math.isfinite(cell_m) and lo <= cell_m <= 8.0):
        raise ValueError(f"cell_m must be in [{lo}, 8] m, got {cell_m!r}")
    seed = stage.terrain.seed if seed is None else seed
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or not (0 <= seed < 2**32):
        raise ValueError(f"seed must be an integer in [0, 2**32), got {seed!r}")
    return int(seed), float(cell_m)


class StageTerrain:
    """A stage's terrain as a source of nodes: any part of the grid on demand.

    The tile source of :class:`physics.terrain.TerrainSet` (it bakes only the tiles cars
    reach) and the engine of :func:`bake`. Building one costs a few index passes over the
    centerline (no node is baked); the ground field fills in as nodes need it.

    Args:
        seed: terrain noise seed; ``None`` uses ``stage.terrain.seed``.
        cell_m: node spacing (m).
        sectioned: label road nodes with ``1 + section index`` (1..15, folded) instead of the
            surface id, with ``grip[id]`` the section's surface grip (per-section grip
            randomisation); ``section_ids`` then holds each section's id.
        grid: ``(x0, y0, nx, ny)`` of another grid than :func:`grid_for`'s (then ``cell_m``
            may go down to 1 mm).

    Attributes:
        name, shape (ny, nx), x0_m, y0_m, cell_m, grip: as :class:`physics.terrain.Terrain`.
    """

    def __init__(
        self,
        stage: Stage,
        seed: int | None = None,
        cell_m: float = 1.0,
        sectioned: bool = False,
        grid: tuple[float, float, int, int] | None = None,
    ):
        seed, cell_m = _check_args(stage, seed, cell_m, 0.1 if grid is None else 1e-3)
        x0, y0, nx, ny = grid_for(stage, cell_m) if grid is None else grid
        if nx * ny > MAX_NODES:
            raise ValueError(
                f"stage {stage.name!r} needs a {nx}x{ny} grid at {cell_m} m cells, "
                f"more than {MAX_NODES} nodes; use a larger cell_m"
            )
        self.stage = stage
        self.name = stage.name + ("+sections" if sectioned else "")
        self.seed = seed
        self.cell_m = cell_m
        self.x0_m = float(x0)
        self.y0_m = float(y0)
        self.shape = (int(ny), int(nx))
        self.sectioned = bool(sectioned)
        self._geo = _pack(stage, seed, cell_m, float(x0), float(y0), int(nx), int(ny))
        if sectioned:
            self.grip, self.section_ids = section_grip(stage)
        else:
            self.grip = _surf.GRIP.copy()
            self.section_ids = np.zeros(len(stage.path.section_start_m), np.int64)
        self._lock = threading.Lock()
        self._baked = _NONE_BAKED

    def __getstate__(self) -> dict:
        state = dict(self.__dict__)
        del state["_lock"]
        # the ground field as its computed cells, the centerline columns not at all (the
        # stage's own) and the index tables as int32 where they fit (docs/stages.md)
        g = self._geo.g
        done = np.flatnonzero(self._geo.gdone.ravel())
        geo = self._geo._replace(g=np.zeros((0, 0)), gdone=np.zeros((0, 0), np.uint8))
        geo = geo._replace(**dict.fromkeys(_PATH_COLUMNS))
        narrow = {}
        for k in _INDEX_TABLES:
            a = getattr(geo, k)
            if a.size == 0 or (a.min() >= _I32.min and a.max() <= _I32.max):
                narrow[k] = a.astype(np.int32)
        state["_geo"] = geo._replace(**narrow)
        state["_g_cells"] = (g.shape, done, g.ravel()[done])
        return state

    def __setstate__(self, state: dict) -> None:
        cells = state.pop("_g_cells", None)
        shape = state.pop("_g_shape", None)  # pickles from before 4 December
        geo = state["_geo"]
        if geo.x is None:  # the centerline columns and int64 index tables, as _pack has them
            geo = geo._replace(**_path_columns(state["stage"].path))
            geo = geo._replace(**{k: getattr(geo, k).astype(np.int64) for k in _INDEX_TABLES})
            state["_geo"] = geo
        self.__dict__.update(state)
        if cells is not None:
            shape, done, values = cells
        elif shape is not None:
            done, values = np.empty(0, np.int64), np.empty(0)
        if cells is not None or shape is not None:
            g, gdone = _ground_field(shape)
            g.ravel()[done] = values
            gdone.ravel()[done] = 1
            self._geo = self._geo._replace(g=g, gdone=gdone)
        elif self._geo.gdone is None:  # a whole NaN-marked field (the oldest pickles)
            self._geo = self._geo._replace(gdone=(~np.isnan(self._geo.g)).astype(np.uint8))
        if "_baked" not in state:
            self._baked = _NONE_BAKED
        self._lock = threading.Lock()

    def start_tiles(self, ahead_m: float = START_AHEAD_M, pad_m: float = START_PAD_M) -> np.ndarray:
        """Tiles ``(m, 2)`` (tx, ty) a car starting on this stage meets first: those within
        the half width + ``pad_m`` of the centerline from the start line to ``ahead_m``
        beyond it (ascending by ``ty * tiles_x + tx``)."""
        p = self.stage.path
        s0 = self.stage.start_s_m
        s = np.arange(s0, min(s0 + ahead_m, float(p.s_m[-1])) + 1.0, 2.0)
        x = np.interp(s, p.s_m, p.x_m)
        y = np.interp(s, p.s_m, p.y_m)
        r = (np.interp(s, p.s_m, p.half_width_m) + pad_m) / self.cell_m
        ny, nx = self.shape
        tnx = tile_grid(self.shape)[0]
        fx = (x - self.x0_m) / self.cell_m
        fy = (y - self.y0_m) / self.cell_m
        if not len(s):
            return np.empty((0, 2), np.int64)
        # each sample's box of tiles, [i0, i1] x [j0, j1]; their union, as one array pass
        i0 = (np.clip(fx - r, 0, nx - 1) // TILE).astype(np.int64)
        i1 = (np.clip(fx + r, 0, nx - 1) // TILE).astype(np.int64)
        j0 = (np.clip(fy - r, 0, ny - 1) // TILE).astype(np.int64)
        j1 = (np.clip(fy + r, 0, ny - 1) // TILE).astype(np.int64)
        di = np.arange(int((i1 - i0).max()) + 1)
        dj = np.arange(int((j1 - j0).max()) + 1)
        ii = i0[:, None, None] + di[None, None, :]
        jj = j0[:, None, None] + dj[None, :, None]
        inside = (ii <= i1[:, None, None]) & (jj <= j1[:, None, None])
        lin = np.unique((jj * tnx + ii)[inside])
        return np.stack([lin % tnx, lin // tnx], axis=1)

    def prebake(self, tiles: np.ndarray) -> None:
        """Bake tiles ``(m, 2)`` (tx, ty) now and keep them: :meth:`fill_tiles` hands them over
        instead of baking them again (the prefetch worker does this for :meth:`start_tiles`,
        on a core the env is not using)."""
        tiles = np.ascontiguousarray(tiles, np.int64).reshape(-1, 2)
        keys = tiles[:, 1] * tile_grid(self.shape)[0] + tiles[:, 0]
        order = np.argsort(keys, kind="stable")
        keys, tiles = keys[order], tiles[order]
        h = np.empty((len(tiles), TILE_W * TILE_W))
        s = np.empty((len(tiles), TILE_W * TILE_W), np.int8)
        self._bake(tiles, h, s)
        self._baked = (keys, h, s)

    def ready_tiles(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The tiles :meth:`prebake` made: (linear tile ``ty * tiles_x + tx``, heights,
        surfaces), which a :class:`physics.terrain.TerrainSet` takes in one copy when this
        source takes a row."""
        return self._baked

    def fill_tiles(self, tiles: np.ndarray, heights: np.ndarray, surfaces: np.ndarray) -> None:
        """Bake tiles ``(m, 2)`` int64 (tx, ty) into ``(m, TILE_W**2)`` heights / surfaces
        (tiles :meth:`prebake` made are copied)."""
        keys, h, s = self._baked
        if not len(keys):
            self._bake(tiles, heights, surfaces)
            return
        want = tiles[:, 1] * tile_grid(self.shape)[0] + tiles[:, 0]
        at = np.minimum(np.searchsorted(keys, want), len(keys) - 1)
        hit = keys[at] == want
        heights[hit] = h[at[hit]]
        surfaces[hit] = s[at[hit]]
        rest = np.flatnonzero(~hit)
        if len(rest):
            hr = np.empty((len(rest), heights.shape[1]))
            sr = np.empty((len(rest), surfaces.shape[1]), np.int8)
            self._bake(tiles[rest], hr, sr)
            heights[rest] = hr
            surfaces[rest] = sr

    def _bake(self, tiles: np.ndarray, heights: np.ndarray, surfaces: np.ndarray) -> None:
        ny, nx = self.shape
        with self._lock:
            sec = True if self.sectioned else None  # a compile-time switch (see _fill_tiles)
            _fill_tiles(self._geo, tiles, nx, ny, sec, heights, surfaces)

    def bake_region(self, i0: int, i1: int, j0: int, j1: int) -> tuple[np.ndarray, np.ndarray]:
        """Dense heights (float64) and surface ids (int8) of nodes [j0, j1) x [i0, i1)."""
        ny, nx = self.shape
        i0, i1 = max(int(i0), 0), min(int(i1), nx)
        j0, j1 = max(int(j0), 0), min(int(j1), ny)
        h = np.empty((max(j1 - j0, 0), max(i1 - i0, 0)))
        s = np.empty(h.shape, np.int8)
        if h.size:
            cols = np.arange(i0, i1, dtype=np.int64)
            rows = np.arange(j0, j1, dtype=np.int64)
            with self._lock:
                _bake_block(self._geo, cols, rows, h, s, True if self.sectioned else None)
        return h, s

    def to_terrain(self) -> Terrain:
        """The whole grid as a dense :class:`physics.terrain.Terrain`."""
        ny, nx = self.shape
        h, s = self.bake_region(0, nx, 0, ny)
        return Terrain(h, s, self.grip, self.x0_m, self.y0_m, self.cell_m, name=self.name)


def section_grip(stage: Stage) -> tuple[np.ndarray, np.ndarray]:
    """(grip per id, id per section) of the section-labelled terrain: id 0 is off-road, section
    i has id ``1 + i % 15`` with the grip of its surface."""
    from physics.terrain import MAX_SURFACES

    p = stage.path
    n_sec = len(p.section_start_m)
    n_max = MAX_SURFACES - 1
    ids = 1 + np.arange(n_sec) % n_max
    off = _surf.GRIP[_surf.surface_id(stage.terrain.offroad_surface)]
    grip = np.concatenate([[off], _surf.GRIP[p.section_surface[:n_max]]])
    return grip, ids.astype(np.int64)


def _path_columns(p) -> dict[str, np.ndarray]:
    """The stage path's centerline columns as the kernels take them (_PATH_COLUMNS)."""
    cols = (p.x_m, p.y_m, p.tx, p.ty, p.z_base_m, p.z_m)
    return {
        k: np.ascontiguousarray(c, np.float64) for k, c in zip(_PATH_COLUMNS, cols, strict=True)
    }


def _ground_field(shape: tuple[int, int]) -> tuple[np.ndarray, np.ndarray]:
    """An empty ground field and its "computed" flags (``_Geo.g``, ``_Geo.gdone``), neither
    written here (only the cells near the road are ever computed)."""
    return np.empty(shape), np.zeros(shape, np.uint8)


def _pack(stage: Stage, seed: int, cell: float, x0: float, y0: float, nx: int, ny: int) -> _Geo:
    p = stage.path
    ts = stage.terrain
    f64 = np.ascontiguousarray
    cols = _path_columns(p)
    x, y, z = cols["x"], cols["y"], cols["z"]
    hw = f64(p.half_width_m, np.float64)
    band = max(0.0, float(hw.max())) + ts.berm_width_m + ts.blend_m + AMBIENT_RAMP_M
    win, swin = _windows(x, y, hw, x0, y0, cell, nx, ny, band)
    nbx = (nx - 1) // SEG_BUCKET + 1
    nby = (ny - 1) // SEG_BUCKET + 1
    wt = np.ascontiguousarray(win.T)  # contiguous columns: _csr compiles for one layout
    bstart, bitems = _csr(wt[0], wt[1], wt[2], wt[3], SEG_BUCKET, nbx, nby)
    # the ground field's coarse grid and its centerline samples
    gnx = int(math.ceil((nx - 1) * cell / GROUND_CELL_M)) + 2
    gny = int(math.ceil((ny - 1) * cell / GROUND_CELL_M)) + 2
    stride = max(1, int(GROUND_STRIDE_M / p.ds_m))
    idx = np.arange(0, x.shape[0], stride)
    zbg = _strided_mean(z, stride)
    big_q = GROUND_REACH_M * GROUND_REACH_M + GROUND_SOFT_M * GROUND_SOFT_M
    w0 = 1.0 / (big_q * big_q) * len(idx)
    # the coarse cell of each sample (unclamped)
    sci = np.floor((x[idx] - x0) / GROUND_CELL_M).astype(np.int64)
    scj = np.floor((y[idx] - y0) / GROUND_CELL_M).astype(np.int64)
    bci = np.clip(sci, 0, gnx - 1)
    bcj = np.clip(scj, 0, gny - 1)
    nsx = (gnx - 1) // SAMPLE_BUCKET + 1
    nsy = (gny - 1) // SAMPLE_BUCKET + 1
    sstart, sitems = _csr(bci, bci, bcj, bcj, SAMPLE_BUCKET, nsx, nsy)
    g, gdone = _ground_field((gny, gnx))
    prm = np.zeros(_N_PRM)
    prm[_X0] = x0
    prm[_Y0] = y0
    prm[_CELL] = cell
    prm[_NX] = nx
    prm[_NY] = ny
    prm[_DS] = p.ds_m
    prm[_LENGTH] = p.length_m
    prm[_CLOSED] = 1.0 if p.closed else 0.0
    prm[_BAND] = band
    prm[_SEED] = seed
    prm[_AMP] = ts.amplitude_m
    prm[_ROUGH] = ts.roughness_m
    prm[_BERM_H] = ts.berm_height_m
    prm[_BERM_W] = ts.berm_width_m
    prm[_BLEND] = ts.blend_m
    prm[_OFFROAD] = _surf.surface_id(ts.offroad_surface)
    prm[_GNX] = gnx
    prm[_GNY] = gny
    prm[_ZBG] = zbg
    prm[_W0] = w0
    prm[_STRIDE] = stride
    prm[_SBX] = nsx
    prm[_SBY] = nsy
    prm[_BX] = nbx
    prm[_BY] = nby
    return _Geo(
        **cols,
        hw=hw,
        sec_start=f64(p.section_start_m, np.float64),
        sec_surf=f64(p.section_surface, np.int8),
        fkind=f64(p.feature_kind, np.int64),
        fparams=f64(np.asarray(p.feature_params, np.float64).reshape(-1, 4)),
        win=win,
        swin=swin,
        bstart=bstart,
        bitems=bitems,
        sstart=sstart,
        sitems=sitems,
        sci=sci,
        scj=scj,
        g=g,
        gdone=gdone,
        prm=prm,
    )


# ---------------------------------------------------------------------------- dense bakes
def bake_uncached(stage: Stage, seed: int | None = None, cell_m: float = 1.0) -> Terrain:
    """Bake without the cache (see :func:`bake`)."""
    return StageTerrain(stage, seed, cell_m).to_terrain()


def bake_grid(
    stage: Stage, x0: float, y0: float, cell_m: float, nx: int, ny: int, seed: int | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """Heights and surface ids of the stage's terrain on any regular grid (e.g. a fine grid
    across a road edge): the bake's own arithmetic, nodes ``x0 + i cell_m``, ``y0 + j cell_m``."""
    src = StageTerrain(stage, seed, cell_m, grid=(float(x0), float(y0), int(nx), int(ny)))
    return src.bake_region(0, int(nx), 0, int(ny))


_cache: OrderedDict[tuple[str, int, float], Terrain] = OrderedDict()
_lock = threading.Lock()


def bake(stage: Stage, seed: int | None = None, cell_m: float = 1.0) -> Terrain:
    """The heightfield and surface map of a stage (cached), nodes ``cell_m`` metres apart, ground
    noise from ``seed`` (``None``: ``stage.terrain.seed``, default 42).

    Returns a :class:`physics.terrain.Terrain` with ``heights_m`` (ny, nx) float64,
    ``surface_ids`` (ny, nx) int8 and ``grip`` = :data:`tracks.surfaces.GRIP`: the same object
    for the same stage content, seed and cell size while it stays in the cache.
    """
    seed, cell_m = _check_args(stage, seed, cell_m)
    key = (stage.digest(), seed, cell_m)
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
