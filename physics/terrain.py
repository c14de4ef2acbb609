"""The terrain interface the simulator samples: plain arrays, no knowledge of stages.

A :class:`Terrain` is a regular heightfield (metres, world z up) on a grid of nodes spaced
``cell_m`` apart starting at ``(x0_m, y0_m)``, a surface-id grid on the same nodes, and a grip
multiplier per surface id. Heights are sampled with a C1 quadratic B-spline over the nodes (see
:func:`sample_height`), surface ids by the nearest node.
Outside the grid the edge values continue (the world does not end in a cliff).

Several terrains are packed into one :class:`TerrainSet` (flat arrays + a metadata row per
terrain) so that one kernel call can step cars that drive on different stages; each car carries
the index of its terrain.

Test terrains :func:`flat_terrain` and :func:`crest_and_ramp_terrain` let the physics be tested
without the ``tracks`` package. They are built from polynomials only, so their bytes are the same
on every platform.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
from numba import njit

from physics.errors import TerrainError

#: Maximum number of surface ids a terrain may use (ids 0 .. MAX_SURFACES-1).
MAX_SURFACES = 16

# Column indices of the TerrainSet metadata rows.
TM_X0 = 0
TM_Y0 = 1
TM_CELL = 2
TM_INV_CELL = 3
TM_NX = 4
TM_NY = 5
TM_OFFSET = 6
N_TERRAIN_META = 7


@dataclass(frozen=True, eq=False)
class Terrain:
    """One heightfield with its surface map.

    Attributes:
        heights_m: (ny, nx) float64 node heights, row j at y0 + j*cell, column i at x0 + i*cell.
        surface_ids: (ny, nx) integer surface id per node, 0 <= id < MAX_SURFACES.
        grip: (n_surfaces,) grip multiplier per surface id (multiplies the tire's base mu).
        x0_m, y0_m: world position of node (0, 0).
        cell_m: node spacing in metres.
        name: a label for messages.
    """

    heights_m: np.ndarray
    surface_ids: np.ndarray
    grip: np.ndarray
    x0_m: float
    y0_m: float
    cell_m: float
    name: str = "terrain"
    _digest: str = field(default="", repr=False)

    def __post_init__(self) -> None:
        h = np.ascontiguousarray(self.heights_m, dtype=np.float64)
        s = np.asarray(self.surface_ids)
        g = np.ascontiguousarray(self.grip, dtype=np.float64)
        if h.ndim != 2 or h.shape[0] < 2 or h.shape[1] < 2:
            raise TerrainError(
                f"{self.name}: heights_m must be 2-D with at least 2x2 nodes, got shape {h.shape}"
            )
        if not np.all(np.isfinite(h)):
            raise TerrainError(f"{self.name}: heights_m contains non-finite values")
        if s.shape != h.shape:
            raise TerrainError(
                f"{self.name}: surface_ids shape {s.shape} != heights_m shape {h.shape}"
            )
        if not np.issubdtype(s.dtype, np.integer):
            raise TerrainError(f"{self.name}: surface_ids must be integers, got {s.dtype}")
        if g.ndim != 1 or not 1 <= g.shape[0] <= MAX_SURFACES:
            raise TerrainError(
                f"{self.name}: grip must be 1-D with 1..{MAX_SURFACES} entries, got shape {g.shape}"
            )
        if not np.all(np.isfinite(g)) or np.any(g < 0.0) or np.any(g > 2.0):
            raise TerrainError(f"{self.name}: grip multipliers must be finite and in [0, 2]")
        if s.size and (s.min() < 0 or s.max() >= g.shape[0]):
            raise TerrainError(
                f"{self.name}: surface ids must be in [0, {g.shape[0]}), got "
                f"range [{s.min()}, {s.max()}]"
            )
        for name in ("x0_m", "y0_m", "cell_m"):
            v = getattr(self, name)
            if not math.isfinite(v):
                raise TerrainError(f"{self.name}: {name} must be finite, got {v!r}")
        if self.cell_m <= 0.0:
            raise TerrainError(f"{self.name}: cell_m must be > 0, got {self.cell_m!r}")
        object.__setattr__(self, "heights_m", h)
        object.__setattr__(self, "surface_ids", np.ascontiguousarray(s, dtype=np.int8))
        object.__setattr__(self, "grip", g)
        h.setflags(write=False)
        self.surface_ids.setflags(write=False)
        g.setflags(write=False)

    @property
    def shape(self) -> tuple[int, int]:
        return self.heights_m.shape  # type: ignore[return-value]

    @property
    def extent_m(self) -> tuple[float, float, float, float]:
        """(x_min, x_max, y_min, y_max) of the grid."""
        ny, nx = self.shape
        return (
            self.x0_m,
            self.x0_m + (nx - 1) * self.cell_m,
            self.y0_m,
            self.y0_m + (ny - 1) * self.cell_m,
        )

    def digest(self) -> str:
        """blake2b digest of the terrain's bytes (identifies it in replays and hashes)."""
        if not self._digest:
            import hashlib

            b = hashlib.blake2b(digest_size=16)
            b.update(np.asarray([self.x0_m, self.y0_m, self.cell_m], np.float64).tobytes())
            b.update(np.asarray(self.shape, np.int64).tobytes())
            b.update(self.heights_m.tobytes())
            b.update(self.surface_ids.tobytes())
            b.update(self.grip.tobytes())
            object.__setattr__(self, "_digest", b.hexdigest())
        return self._digest

    def height_at(self, x: np.ndarray | float, y: np.ndarray | float) -> np.ndarray:
        """Height at world points (the kernel's own sampler)."""
        ts = TerrainSet([self])
        xs = np.atleast_1d(np.asarray(x, np.float64))
        ys = np.broadcast_to(np.asarray(y, np.float64), xs.shape).copy()
        out = np.empty(xs.shape, np.float64)
        _heights_many(ts.heights, ts.meta, 0, xs.ravel(), ys.ravel(), out.ravel())
        return out

    def surface_at(self, x: float, y: float) -> int:
        ts = TerrainSet([self])
        return int(sample_surface(ts.surfaces, ts.meta, 0, float(x), float(y)))


class TerrainSet:
    """Several terrains packed into flat arrays for the kernels.

    Attributes:
        heights: float64 flat node heights of all terrains.
        surfaces: int8 flat surface ids.
        meta: (rows, N_TERRAIN_META) float64 rows (x0, y0, cell, 1/cell, nx, ny, offset).
        grip: (rows, MAX_SURFACES) float64 grip multipliers (unused ids are 0).
        n_base: the number of terrains; rows past it are variants (see :meth:`set_variant`).
    """

    def __init__(self, terrains: list[Terrain] | tuple[Terrain, ...], n_variants: int = 0):
        terrains = list(terrains)
        if not terrains:
            raise TerrainError("a TerrainSet needs at least one terrain")
        for t in terrains:
            if not isinstance(t, Terrain):
                raise TerrainError(f"TerrainSet takes Terrain objects, got {type(t).__name__}")
        if isinstance(n_variants, bool) or not isinstance(n_variants, int) or n_variants < 0:
            raise TerrainError(f"n_variants must be an integer >= 0, got {n_variants!r}")
        self.terrains = terrains
        self.n_base = len(terrains)
        sizes = [t.heights_m.size for t in terrains]
        offsets = np.concatenate([[0], np.cumsum(sizes)[:-1]]).astype(np.int64)
        self.heights = np.concatenate([t.heights_m.ravel() for t in terrains])
        self.surfaces = np.concatenate([t.surface_ids.ravel() for t in terrains])
        rows = self.n_base + n_variants
        self.meta = np.zeros((rows, N_TERRAIN_META), np.float64)
        self.grip = np.zeros((rows, MAX_SURFACES), np.float64)
        for k, t in enumerate(terrains):
            ny, nx = t.shape
            self.meta[k] = (t.x0_m, t.y0_m, t.cell_m, 1.0 / t.cell_m, nx, ny, offsets[k])
            self.grip[k, : t.grip.shape[0]] = t.grip
        for row in range(self.n_base, rows):
            self.meta[row] = self.meta[0]
            self.grip[row] = self.grip[0]

    def set_variant(self, row: int, base: int, grip: np.ndarray) -> None:
        """Make variant row ``row`` drive on terrain ``base``'s heightfield with its own grip.

        Variant rows (``n_base <= row < len(self)``) let cars share one baked heightfield while
        each carries, e.g., randomised grip multipliers. ``grip`` is (MAX_SURFACES,) or shorter.
        """
        if not self.n_base <= row < len(self):
            raise TerrainError(f"variant row {row} is not in [{self.n_base}, {len(self)})")
        if not 0 <= base < self.n_base:
            raise TerrainError(f"base terrain {base} is not in [0, {self.n_base})")
        g = np.asarray(grip, np.float64)
        if g.ndim != 1 or g.shape[0] > MAX_SURFACES:
            raise TerrainError(f"grip must be 1-D with at most {MAX_SURFACES} entries")
        if not np.all(np.isfinite(g)) or np.any(g < 0.0) or np.any(g > 2.0):
            raise TerrainError("grip multipliers must be finite and in [0, 2]")
        self.meta[row] = self.meta[base]
        self.grip[row] = 0.0
        self.grip[row, : g.shape[0]] = g

    def __len__(self) -> int:
        """Rows a car's terrain index may take: the base terrains, then the variants."""
        return self.meta.shape[0]


@njit(cache=True, _nrt=False)
def _cell(meta, tid, x, y):
    """Grid cell (i, j) and fractions (tx, ty) of a world point, clamped to the grid."""
    inv = meta[tid, TM_INV_CELL]
    nx = int(meta[tid, TM_NX])
    ny = int(meta[tid, TM_NY])
    fx = (x - meta[tid, TM_X0]) * inv
    fy = (y - meta[tid, TM_Y0]) * inv
    if fx < 0.0:
        fx = 0.0
    elif fx > nx - 1.0:
        fx = nx - 1.0
    if fy < 0.0:
        fy = 0.0
    elif fy > ny - 1.0:
        fy = ny - 1.0
    i = math.floor(fx)
    j = math.floor(fy)
    if i > nx - 2:
        i = nx - 2
    if j > ny - 2:
        j = ny - 2
    return i, j, fx - i, fy - j, nx


@njit(cache=True, _nrt=False)
def _bspline_axis(f, n):
    """Node index of the nearest node, clamped neighbours and quadratic B-spline weights."""
    if f < 0.0:
        f = 0.0
    elif f > n - 1.0:
        f = n - 1.0
    i = int(math.floor(f + 0.5))
    u = f - i  # in [-0.5, 0.5]
    a = 0.5 - u
    b = 0.5 + u
    im = i - 1 if i > 0 else 0
    ip = i + 1 if i < n - 1 else n - 1
    return im, i, ip, 0.5 * a * a, 0.75 - u * u, 0.5 * b * b


@njit(cache=True, _nrt=False)
def sample_height(heights, meta, tid, x, y):
    """Terrain height (m) at world (x, y) on terrain ``tid``.

    A uniform quadratic B-spline over the nodes: the surface and its slope are continuous
    (C1), so a wheel rolling over a curved crest sees no slope kinks at cell edges (the stiff
    seed contact would chatter on bilinear facets). Planes are reproduced exactly, so a flat
    or uniformly sloped road stays exactly flat or sloped.
    """
    nx = int(meta[tid, TM_NX])
    ny = int(meta[tid, TM_NY])
    inv = meta[tid, TM_INV_CELL]
    xm, xc, xp, wx0, wx1, wx2 = _bspline_axis((x - meta[tid, TM_X0]) * inv, nx)
    ym, yc, yp, wy0, wy1, wy2 = _bspline_axis((y - meta[tid, TM_Y0]) * inv, ny)
    off = int(meta[tid, TM_OFFSET])
    r0 = off + ym * nx
    r1 = off + yc * nx
    r2 = off + yp * nx
    h0 = wx0 * heights[r0 + xm] + wx1 * heights[r0 + xc] + wx2 * heights[r0 + xp]
    h1 = wx0 * heights[r1 + xm] + wx1 * heights[r1 + xc] + wx2 * heights[r1 + xp]
    h2 = wx0 * heights[r2 + xm] + wx1 * heights[r2 + xc] + wx2 * heights[r2 + xp]
    return wy0 * h0 + wy1 * h1 + wy2 * h2


@njit(cache=True, _nrt=False)
def sample_height_grad(heights, meta, tid, x, y):
    """(height, dh/dx, dh/dy, nearest node) of the B-spline surface of :func:`sample_height`.

    The last value is the flat index of the node nearest (x, y): ``surfaces[index]`` is the
    surface id :func:`sample_surface` would return.
    """
    nx = int(meta[tid, TM_NX])
    ny = int(meta[tid, TM_NY])
    inv = meta[tid, TM_INV_CELL]
    fx = (x - meta[tid, TM_X0]) * inv
    fy = (y - meta[tid, TM_Y0]) * inv
    xm, xc, xp, wx0, wx1, wx2 = _bspline_axis(fx, nx)
    ym, yc, yp, wy0, wy1, wy2 = _bspline_axis(fy, ny)
    # derivative weights (zero outside the grid, where the edge continues flat)
    ux = fx - xc
    uy = fy - yc
    if fx <= 0.0 or fx >= nx - 1.0:
        dx0 = 0.0
        dx1 = 0.0
        dx2 = 0.0
    else:
        dx0 = (ux - 0.5) * inv
        dx1 = -2.0 * ux * inv
        dx2 = (ux + 0.5) * inv
    if fy <= 0.0 or fy >= ny - 1.0:
        dy0 = 0.0
        dy1 = 0.0
        dy2 = 0.0
    else:
        dy0 = (uy - 0.5) * inv
        dy1 = -2.0 * uy * inv
        dy2 = (uy + 0.5) * inv
    off = int(meta[tid, TM_OFFSET])
    r0 = off + ym * nx
    r1 = off + yc * nx
    r2 = off + yp * nx
    a0 = heights[r0 + xm]
    b0 = heights[r0 + xc]
    c0 = heights[r0 + xp]
    a1 = heights[r1 + xm]
    b1 = heights[r1 + xc]
    c1 = heights[r1 + xp]
    a2 = heights[r2 + xm]
    b2 = heights[r2 + xc]
    c2 = heights[r2 + xp]
    h0 = wx0 * a0 + wx1 * b0 + wx2 * c0
    h1 = wx0 * a1 + wx1 * b1 + wx2 * c1
    h2 = wx0 * a2 + wx1 * b2 + wx2 * c2
    g0 = dx0 * a0 + dx1 * b0 + dx2 * c0
    g1 = dx0 * a1 + dx1 * b1 + dx2 * c1
    g2 = dx0 * a2 + dx1 * b2 + dx2 * c2
    h = wy0 * h0 + wy1 * h1 + wy2 * h2
    gx = wy0 * g0 + wy1 * g1 + wy2 * g2
    gy = dy0 * h0 + dy1 * h1 + dy2 * h2
    return h, gx, gy, r1 + xc


@njit(cache=True, _nrt=False)
def sample_surface(surfaces, meta, tid, x, y):
    """Surface id of the nearest node to world (x, y) on terrain ``tid``."""
    i, j, tx, ty, nx = _cell(meta, tid, x, y)
    if tx >= 0.5:
        i += 1
    if ty >= 0.5:
        j += 1
    return surfaces[int(meta[tid, TM_OFFSET]) + j * nx + i]


@njit(cache=True, _nrt=False)
def _heights_many(heights, meta, tid, xs, ys, out):
    for k in range(xs.shape[0]):
        out[k] = sample_height(heights, meta, tid, xs[k], ys[k])


def flat_terrain(
    size_m: float = 4000.0,
    cell_m: float = 2.0,
    grip: float = 1.0,
    height_m: float = 0.0,
    name: str = "flat",
) -> Terrain:
    """A flat square terrain centred on the origin, one surface (id 0) of the given grip."""
    n = round(size_m / cell_m) + 1
    h = np.full((n, n), float(height_m))
    return Terrain(
        h, np.zeros((n, n), np.int8), np.array([grip]), -size_m / 2, -size_m / 2, cell_m, name=name
    )


def crest_and_ramp_terrain(
    crest_x_m: float = 300.0,
    crest_height_m: float = 3.0,
    crest_half_length_m: float = 40.0,
    ramp_x_m: float = 700.0,
    ramp_length_m: float = 12.0,
    ramp_lip_m: float = 1.5,
    length_m: float = 1200.0,
    width_m: float = 200.0,
    cell_m: float = 0.5,
) -> Terrain:
    """A runway along +x from x = -100 m: a smooth crest, then a kicker ramp with a sharp drop.

    Crest: h = H (1 - u^2)^2 for |u| < 1, u = (x - crest_x)/half_length (a smooth hump whose
    far side falls away faster than a slow car's ballistic arc at Mars gravity only when taken
    fast). Ramp: a linear rise to ``ramp_lip_m`` over ``ramp_length_m`` ending at ``ramp_x_m``,
    then an immediate drop back to 0 (a jump).
    """
    x0 = -100.0
    nx = round(length_m / cell_m) + 1
    ny = round(width_m / cell_m) + 1
    xs = x0 + np.arange(nx) * cell_m
    u = (xs - crest_x_m) / crest_half_length_m
    w = np.where(np.abs(u) < 1.0, 1.0 - u * u, 0.0)
    prof = crest_height_m * w * w
    r = (xs - (ramp_x_m - ramp_length_m)) / ramp_length_m
    prof = prof + np.where((r >= 0.0) & (r <= 1.0), ramp_lip_m * r, 0.0)
    h = np.tile(prof, (ny, 1))
    return Terrain(
        h,
        np.zeros((ny, nx), np.int8),
        np.array([1.0]),
        x0,
        -width_m / 2,
        cell_m,
        name="crest-and-ramp",
    )
