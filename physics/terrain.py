"""The terrain interface the simulator samples: plain arrays, no knowledge of stages.

:class:`Terrain` (a heightfield, its surface ids and grips), :class:`TerrainSet` (terrains or
tile sources in one pool of tiles filled on demand), the compiled samplers and the polynomial
test terrains: docs/architecture.md ("Terrain tiles").
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from physics.errors import TerrainError
from physics.jit import njit, njit_inner

#: Maximum number of surface ids a terrain may use (ids 0 .. MAX_SURFACES-1).
MAX_SURFACES = 16
#: Nodes per tile side, stored side (with the apron) and nodes stored per tile.
TILE = 8
TILE_W = TILE + 2
TILE_NODES = TILE_W * TILE_W

# Column indices of the TerrainSet metadata rows.
TM_X0 = 0
TM_Y0 = 1
TM_CELL = 2
TM_INV_CELL = 3
TM_NX = 4
TM_NY = 5
TM_TABLE = 6  # offset of the terrain's tile table in TerrainSet.tiles
TM_TNX = 7  # tiles along x
TM_TNY = 8  # tiles along y
N_TERRAIN_META = 9


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
        _check_grid(self, g)
        if s.size and (s.min() < 0 or s.max() >= g.shape[0]):
            raise TerrainError(
                f"{self.name}: surface ids must be in [0, {g.shape[0]}), got "
                f"range [{s.min()}, {s.max()}]"
            )
        s = np.ascontiguousarray(s, dtype=np.int8)
        for name, a in (("heights_m", h), ("surface_ids", s), ("grip", g)):
            object.__setattr__(self, name, a)
            a.setflags(write=False)

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
        xs = np.atleast_1d(np.asarray(x, np.float64))
        ys = np.broadcast_to(np.asarray(y, np.float64), xs.shape).copy()
        ts = TerrainSet([self])
        ts.bake_all(0)
        out = np.empty(xs.shape, np.float64)
        _heights_many(ts.heights, ts.tiles, ts.meta, 0, xs.ravel(), ys.ravel(), out.ravel())
        return out

    def surface_at(self, x: float, y: float) -> int:
        ts = TerrainSet([self])
        ts.bake_all(0)
        return int(sample_surface(ts.surfaces, ts.tiles, ts.meta, 0, float(x), float(y)))

    def fill_tiles(self, tiles: np.ndarray, heights: np.ndarray, surfaces: np.ndarray) -> None:
        """Copy tiles ``(m, 2)`` (tx, ty) into ``(m, TILE_NODES)`` blocks (the tile source
        interface of :class:`TerrainSet`)."""
        _copy_tiles(self.heights_m, self.surface_ids, tiles, heights, surfaces)


def _ready_tiles(t: Any) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
    """A source's tiles made before it joined a :class:`TerrainSet`, if it has any, checked:
    ``ready_tiles()`` -> (linear tiles ``ty * tiles_x + tx`` (m,), ascending and distinct,
    heights (m, TILE_NODES) float64, surfaces (m, TILE_NODES) int8), the blocks
    ``fill_tiles`` would write."""
    ready = getattr(t, "ready_tiles", None)
    if ready is None:
        return None
    lin, h, s = ready()
    lin = np.asarray(lin)
    if not len(lin):
        return None
    tnx, tny = tile_grid(t.shape)
    if (
        lin.ndim != 1
        or lin.dtype.kind not in "iu"
        or np.shape(h) != (len(lin), TILE_NODES)
        or np.shape(s) != (len(lin), TILE_NODES)
        or np.asarray(h).dtype != np.float64
        or np.asarray(s).dtype != np.int8
        or lin[0] < 0
        or lin[-1] >= tnx * tny
        or np.any(np.diff(lin) <= 0)
    ):
        raise TerrainError(
            f"{t.name}: ready_tiles() must give ascending distinct tiles in [0, {tnx * tny}) "
            f"with ({len(lin)}, {TILE_NODES}) float64 heights and int8 surfaces"
        )
    return lin, h, s


@njit(cache=True)
def _copy_tiles(h, s, tiles, out_h, out_s):
    ny, nx = h.shape
    for m in range(tiles.shape[0]):
        for ly in range(TILE_W):
            j = min(max(tiles[m, 1] * TILE - 1 + ly, 0), ny - 1)
            for lx in range(TILE_W):
                i = min(max(tiles[m, 0] * TILE - 1 + lx, 0), nx - 1)
                out_h[m, ly * TILE_W + lx] = h[j, i]
                out_s[m, ly * TILE_W + lx] = s[j, i]


def _check_source(t: Any) -> None:
    """``t`` is a :class:`Terrain` or a tile source (docs/architecture.md, "Terrain tiles")."""
    if isinstance(t, Terrain):
        return
    for name in ("shape", "x0_m", "y0_m", "cell_m", "grip", "fill_tiles"):
        if not hasattr(t, name):
            raise TerrainError(
                f"TerrainSet takes Terrain objects or tile sources, got {type(t).__name__} "
                f"(it has no {name!r})"
            )
    ny, nx = t.shape
    if nx < 2 or ny < 2:
        raise TerrainError(f"{t.name}: a terrain needs at least 2x2 nodes, got {t.shape}")
    _check_grid(t, np.asarray(t.grip, np.float64))


def _check_grid(t: Any, g: np.ndarray) -> None:
    """What a :class:`Terrain` and a tile source share: the grid's placement and the grip
    multipliers ``g``."""
    for name in ("x0_m", "y0_m", "cell_m"):
        v = getattr(t, name)
        if not math.isfinite(v):
            raise TerrainError(f"{t.name}: {name} must be finite, got {v!r}")
    if not t.cell_m > 0.0:
        raise TerrainError(f"{t.name}: cell_m must be > 0, got {t.cell_m!r}")
    if g.ndim != 1 or not 1 <= g.shape[0] <= MAX_SURFACES:
        raise TerrainError(
            f"{t.name}: grip must be 1-D with 1..{MAX_SURFACES} entries, got shape {g.shape}"
        )
    if not np.all(np.isfinite(g)) or np.any(g < 0.0) or np.any(g > 2.0):
        raise TerrainError(f"{t.name}: grip multipliers must be finite and in [0, 2]")


def tile_grid(shape: tuple[int, int]) -> tuple[int, int]:
    """(tiles along x, tiles along y) covering a (ny, nx) node grid."""
    ny, nx = shape
    return (nx - 1) // TILE + 1, (ny - 1) // TILE + 1


class TerrainSet:
    """Several terrains, tiled into one pool of nodes that fills as cars reach it.

    Rows ``0 .. n_base-1`` are the terrains; rows past them are *variants* (see
    :meth:`set_variant`) that share a terrain's nodes with grip multipliers of their own. A
    base row's terrain can be swapped (:meth:`replace`), freeing its tiles.

    Attributes:
        heights: float64 pool of tile nodes (``capacity * TILE_NODES``).
        surfaces: int8 pool of tile surface ids.
        tiles: int64 tile tables of all terrains: the pool slot of each tile, -1 = not filled.
        meta: (rows, N_TERRAIN_META) float64 rows (x0, y0, cell, 1/cell, nx, ny, table
            offset, tiles along x, tiles along y).
        grip: (rows, MAX_SURFACES) float64 grip multipliers (unused ids are 0).
        n_base: the number of terrains; rows past it are variants.
        sources: the tile source of each base row.
    """

    def __init__(self, terrains: list[Any] | tuple[Any, ...], n_variants: int = 0):
        terrains = list(terrains)
        if not terrains:
            raise TerrainError("a TerrainSet needs at least one terrain")
        for t in terrains:
            _check_source(t)
        if isinstance(n_variants, bool) or not isinstance(n_variants, int) or n_variants < 0:
            raise TerrainError(f"n_variants must be an integer >= 0, got {n_variants!r}")
        self.sources: list[Any] = list(terrains)
        self.n_base = len(terrains)
        rows = self.n_base + n_variants
        self.meta = np.zeros((rows, N_TERRAIN_META), np.float64)
        self.grip = np.zeros((rows, MAX_SURFACES), np.float64)
        # each terrain's tile table, exactly its size, back to back: replace() fills it in
        sizes = [math.prod(tile_grid(t.shape)) for t in terrains]
        self._table_cap = np.array(sizes, np.int64)
        self.meta[: self.n_base, TM_TABLE] = np.cumsum([0, *sizes[:-1]])
        self.tiles = np.full(int(sum(sizes)), -1, np.int64)
        #: end of the tile tables in use (``tiles`` past it is spare room, all -1)
        self._tiles_top = self.tiles.shape[0]
        self._garbage = 0
        self.heights = np.zeros(0, np.float64)
        self.surfaces = np.zeros(0, np.int8)
        self._free: list[int] = []
        self._used = 0
        self._high_water = 0
        #: the base row each variant row shares (variants start on row 0)
        self._variant_base = np.zeros(rows, np.int64)
        self._variant_base[: self.n_base] = np.arange(self.n_base)
        for row, t in enumerate(terrains):
            self.replace(row, t)
        self.grip[self.n_base :] = self.grip[0]

    def _set_row(self, row: int, t: Any, table_off: int) -> None:
        ny, nx = t.shape
        tnx, tny = tile_grid(t.shape)
        cell = float(t.cell_m)
        self.meta[row, TM_X0:TM_NX] = (float(t.x0_m), float(t.y0_m), cell, 1.0 / cell)
        self.meta[row, TM_NX:] = (nx, ny, table_off, tnx, tny)
        g = np.asarray(t.grip, np.float64)
        self.grip[row] = 0.0
        self.grip[row, : g.shape[0]] = g

    def __len__(self) -> int:
        """Rows a car's terrain index may take: the base terrains, then the variants."""
        return self.meta.shape[0]

    # ---------------------------------------------------------------- rows
    def set_variant(self, row: int, base: int, grip: np.ndarray) -> None:
        """Make variant row ``row`` drive on terrain ``base``'s heightfield with its own grip.

        Variant rows (``n_base <= row < len(self)``) let cars share one terrain's nodes while
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
        self._variant_base[row] = base

    def replace(self, row: int, terrain: Any) -> None:
        """Put another terrain in base row ``row``; its old tiles go back to the pool.

        Variant rows that pointed at ``row`` must be set again (:meth:`set_variant`)."""
        if not 0 <= row < self.n_base:
            raise TerrainError(f"base terrain {row} is not in [0, {self.n_base})")
        _check_source(terrain)
        ready = _ready_tiles(terrain)
        off, n = self._table(row)
        used = self.tiles[off : off + n]
        slots = used[used >= 0]
        self._free.extend(int(s) for s in slots)
        self._used -= len(slots)
        used[:] = -1
        tnx, tny = tile_grid(terrain.shape)
        need = tnx * tny
        compact = False
        if need > self._table_cap[row]:
            self._garbage += int(self._table_cap[row])
            cap = need + need // 4
            off = self._tiles_top
            if off + cap > self.tiles.shape[0]:  # grow by doubling, not by one table
                grown = np.full(max(off + cap, 2 * self.tiles.shape[0]), -1, np.int64)
                grown[:off] = self.tiles[:off]
                self.tiles = grown
            self._tiles_top = off + cap
            self._table_cap[row] = cap
            compact = self._garbage > self._tiles_top // 2
        self.sources[row] = terrain
        self._set_row(row, terrain, off)
        self._follow(row)
        if compact:
            self._compact()
        if ready is not None:  # the tiles the source made ahead (checked by _ready_tiles)
            self._store(int(self.meta[row, TM_TABLE]), *ready)

    def _store(self, off: int, lin: np.ndarray, h: np.ndarray, s: np.ndarray) -> None:
        """Put tiles ``lin`` (blocks ``h``, ``s``) of the tile table at ``off`` in the pool."""
        slots = self._slots(len(lin))
        self.heights.reshape(-1, TILE_NODES)[slots] = h
        self.surfaces.reshape(-1, TILE_NODES)[slots] = s
        self.tiles[off + lin] = slots

    def _follow(self, row: int) -> None:
        """Variant rows of base ``row`` take its (new) grid; their grip stays theirs."""
        for v in range(self.n_base, len(self)):
            if self._variant_base[v] == row:
                self.meta[v] = self.meta[row]

    def _table(self, row: int) -> tuple[int, int]:
        m = self.meta[row]
        return int(m[TM_TABLE]), int(m[TM_TNX]) * int(m[TM_TNY])

    def _compact(self) -> None:
        """Repack the tile tables (after many replacements left holes)."""
        parts = []
        off = 0
        for row in range(self.n_base):
            o, n = self._table(row)
            cap = int(self._table_cap[row])
            part = np.full(cap, -1, np.int64)
            part[:n] = self.tiles[o : o + n]
            parts.append(part)
            self.meta[row, TM_TABLE] = off
            off += cap
        for row in range(self.n_base, len(self)):
            self.meta[row, TM_TABLE] = self.meta[self._variant_base[row], TM_TABLE]
        self.tiles = np.concatenate(parts)
        self._tiles_top = self.tiles.shape[0]
        self._garbage = 0

    # ---------------------------------------------------------------- filling
    def _slots(self, n: int) -> np.ndarray:
        """n free pool slots: freed ones first, then new ones (the pool grows by doubling)."""
        take = min(n, len(self._free))
        out = [self._free.pop() for _ in range(take)]
        short = n - take
        if short:
            cap = self.heights.shape[0] // TILE_NODES
            top = self._high_water
            if top + short > cap:
                new_cap = max(2 * cap, top + short, 64)
                grow = new_cap * TILE_NODES - self.heights.shape[0]
                self.heights = np.concatenate([self.heights, np.zeros(grow, np.float64)])
                self.surfaces = np.concatenate([self.surfaces, np.zeros(grow, np.int8)])
            out.extend(range(top, top + short))
            self._high_water = top + short
        self._used += n
        return np.asarray(out, np.int64)

    def fill_linear(self, row: int, lin: np.ndarray) -> int:
        """Fill the tiles of row ``row``'s terrain (linear tile indices ``ty * tiles_x + tx``)
        that are not filled yet. Returns the number of tiles filled."""
        lin = np.asarray(lin, np.int64).ravel()
        return self.fill_requests(np.stack([np.full(len(lin), row, np.int64), lin], axis=1))

    def fill_requests(self, req: np.ndarray) -> int:
        """Fill the tiles of rows ``(row, linear tile)`` (as :func:`collect_missing` lists them;
        repeats and tiles already filled are skipped). Returns the number filled."""
        req = np.ascontiguousarray(req, np.int64).reshape(-1, 2)
        if not len(req):
            return 0
        todo = _new_requests(self.tiles, self.meta, self._variant_base, req)
        if not len(todo):
            return 0
        bases, starts = np.unique(todo[:, 0], return_index=True)  # todo is sorted by base
        groups = np.split(todo[:, 1], starts[1:])
        return sum(self._fill_base(int(b), lin) for b, lin in zip(bases, groups, strict=True))

    def _fill_base(self, base: int, lin: np.ndarray) -> int:
        off = int(self.meta[base, TM_TABLE])
        tnx = int(self.meta[base, TM_TNX])
        xy = np.stack([lin % tnx, lin // tnx], axis=1)
        hb = np.empty((len(lin), TILE_NODES), np.float64)
        sb = np.empty((len(lin), TILE_NODES), np.int8)
        self.sources[base].fill_tiles(xy, hb, sb)
        self._store(off, lin, hb, sb)
        return len(lin)

    def fill_around(self, rows: np.ndarray, xs: np.ndarray, ys: np.ndarray, radius_m) -> int:
        """Fill every tile within ``radius_m`` (scalar or per point) of the world points."""
        rows = np.asarray(rows, np.int64).ravel()
        xs = np.asarray(xs, np.float64).ravel()
        ys = np.asarray(ys, np.float64).ravel()
        rad = np.broadcast_to(np.asarray(radius_m, np.float64), xs.shape).copy()
        out = np.empty((max(1, 64 * len(xs)), 2), np.int64)
        while True:
            n = _missing_tiles(self.tiles, self.meta, rows, xs, ys, rad, out)
            if n <= out.shape[0]:
                break
            out = np.empty((n, 2), np.int64)
        return self.fill_requests(out[:n])

    def bake_all(self, row: int) -> int:
        """Fill every tile of row ``row``'s terrain."""
        tnx = int(self.meta[row, TM_TNX])
        tny = int(self.meta[row, TM_TNY])
        return self.fill_linear(row, np.arange(tnx * tny))

    def record(self) -> tuple[np.ndarray, ...]:
        """``(heights, surfaces, tiles, meta, grip)``: the arrays the kernels take, together."""
        return (self.heights, self.surfaces, self.tiles, self.meta, self.grip)

    @property
    def tiles_in_use(self) -> int:
        return self._used


# --------------------------------------------------------------------------------- kernels
@njit_inner(_nrt=False)
def _axis(f, n):
    """Nearest node of a grid coordinate (clamped to the grid; NaN reads as 0) and the
    quadratic B-spline weights of its three nodes."""
    if not f >= 0.0:
        f = 0.0
    elif f > n - 1.0:
        f = n - 1.0
    i = int(math.floor(f + 0.5))
    u = f - i  # in [-0.5, 0.5]
    a = 0.5 - u
    b = 0.5 + u
    return i, 0.5 * a * a, 0.75 - u * u, 0.5 * b * b


@njit_inner(_nrt=False)
def _slope_weights(f, i, n, inv):
    """d/dx of the weights :func:`_axis` gives the grid coordinate ``f`` (nearest node
    ``i``, ``inv`` = 1 / cell): zero outside the grid, where the edge continues flat."""
    if not (f > 0.0 and f < n - 1.0):
        return 0.0, 0.0, 0.0
    u = f - i
    return (u - 0.5) * inv, -2.0 * u * inv, (u + 0.5) * inv


@njit_inner(_nrt=False)
def _tile_base(tiles, meta, tid, xc, yc):
    """Pool index of node (xc, yc) of terrain ``tid``, or ``-1 - tile`` if its tile is not
    filled (``tile = ty * tiles_x + tx``)."""
    tx = xc // TILE
    ty = yc // TILE
    lin = ty * int(meta[tid, TM_TNX]) + tx
    slot = tiles[int(meta[tid, TM_TABLE]) + lin]
    if slot < 0:
        return -1 - lin
    return slot * TILE_NODES + (yc - ty * TILE + 1) * TILE_W + (xc - tx * TILE + 1)


@njit_inner(_nrt=False)
def sample_height(heights, tiles, meta, tid, x, y):
    """Terrain height (m) at world (x, y) on terrain ``tid``; NaN if its tile is not filled.
    A uniform quadratic B-spline over the nodes: C1, planes reproduced exactly (why:
    docs/architecture.md, "Terrain tiles")."""
    h, _, _, node = sample_height_grad(heights, tiles, meta, tid, x, y)
    return h if node >= 0 else np.nan


@njit_inner(_nrt=False)
def tile_at(meta, tid, x, y):
    """Linear index of the tile holding the node nearest (x, y) on terrain ``tid``."""
    inv = meta[tid, TM_INV_CELL]
    xc = _axis((x - meta[tid, TM_X0]) * inv, int(meta[tid, TM_NX]))[0]
    yc = _axis((y - meta[tid, TM_Y0]) * inv, int(meta[tid, TM_NY]))[0]
    return (yc // TILE) * int(meta[tid, TM_TNX]) + xc // TILE


@njit_inner(_nrt=False)
def sample_height_grad(heights, tiles, meta, tid, x, y):
    """(height, dh/dx, dh/dy, node) of the B-spline surface of :func:`sample_height`.

    ``node`` is the pool index of the node nearest (x, y): ``surfaces[node]`` is the surface
    id :func:`sample_surface` would return. If that node's tile is not filled, ``node`` is
    ``-1 - tile`` (negative) and the other values are 0.
    """
    nx = int(meta[tid, TM_NX])
    ny = int(meta[tid, TM_NY])
    inv = meta[tid, TM_INV_CELL]
    fx = (x - meta[tid, TM_X0]) * inv
    fy = (y - meta[tid, TM_Y0]) * inv
    xc, wx0, wx1, wx2 = _axis(fx, nx)
    yc, wy0, wy1, wy2 = _axis(fy, ny)
    r1 = _tile_base(tiles, meta, tid, xc, yc)
    if r1 < 0:
        return 0.0, 0.0, 0.0, r1
    dx0, dx1, dx2 = _slope_weights(fx, xc, nx, inv)
    dy0, dy1, dy2 = _slope_weights(fy, yc, ny, inv)
    r0 = r1 - TILE_W
    r2 = r1 + TILE_W
    a0 = heights[r0 - 1]
    b0 = heights[r0]
    c0 = heights[r0 + 1]
    a1 = heights[r1 - 1]
    b1 = heights[r1]
    c1 = heights[r1 + 1]
    a2 = heights[r2 - 1]
    b2 = heights[r2]
    c2 = heights[r2 + 1]
    h0 = wx0 * a0 + wx1 * b0 + wx2 * c0
    h1 = wx0 * a1 + wx1 * b1 + wx2 * c1
    h2 = wx0 * a2 + wx1 * b2 + wx2 * c2
    g0 = dx0 * a0 + dx1 * b0 + dx2 * c0
    g1 = dx0 * a1 + dx1 * b1 + dx2 * c1
    g2 = dx0 * a2 + dx1 * b2 + dx2 * c2
    h = wy0 * h0 + wy1 * h1 + wy2 * h2
    gx = wy0 * g0 + wy1 * g1 + wy2 * g2
    gy = dy0 * h0 + dy1 * h1 + dy2 * h2
    return h, gx, gy, r1


@njit(cache=True, _nrt=False)
def sample_surface(surfaces, tiles, meta, tid, x, y):
    """Surface id of the node nearest world (x, y) on terrain ``tid``; ``-1 - tile`` (negative)
    if its tile is not filled."""
    inv = meta[tid, TM_INV_CELL]
    xc = _axis((x - meta[tid, TM_X0]) * inv, int(meta[tid, TM_NX]))[0]
    yc = _axis((y - meta[tid, TM_Y0]) * inv, int(meta[tid, TM_NY]))[0]
    b = _tile_base(tiles, meta, tid, xc, yc)
    if b < 0:
        return b
    return surfaces[b]


@njit(cache=True)
def _heights_many(heights, tiles, meta, tid, xs, ys, out):
    for k in range(xs.shape[0]):
        out[k] = sample_height(heights, tiles, meta, tid, xs[k], ys[k])


@njit_inner(_nrt=False)
def collect_missing(tiles, meta, tid, x, y, radius, out, n):
    """Append (tid, tile) to ``out[n:]`` for every tile within ``radius`` (m) of (x, y) that is
    not filled; returns the new count (which may pass ``out``'s length: the rest is dropped)."""
    inv = meta[tid, TM_INV_CELL]
    nx = int(meta[tid, TM_NX])
    ny = int(meta[tid, TM_NY])
    tnx = int(meta[tid, TM_TNX])
    off = int(meta[tid, TM_TABLE])
    r = radius * inv + 1.0
    if not r < 1e6:
        r = 1e6
    fx = (x - meta[tid, TM_X0]) * inv
    fy = (y - meta[tid, TM_Y0]) * inv
    i0 = _axis(fx - r, nx)[0] // TILE
    i1 = _axis(fx + r, nx)[0] // TILE
    j0 = _axis(fy - r, ny)[0] // TILE
    j1 = _axis(fy + r, ny)[0] // TILE
    for ty in range(j0, j1 + 1):
        for tx in range(i0, i1 + 1):
            lin = ty * tnx + tx
            if tiles[off + lin] < 0:
                if n < out.shape[0]:
                    out[n, 0] = tid
                    out[n, 1] = lin
                n += 1
    return n


def _new_requests(
    tiles: np.ndarray, meta: np.ndarray, variant_base: np.ndarray, req: np.ndarray
) -> np.ndarray:
    """The distinct (base row, tile) of requests (row, tile) whose tile is in its grid and not
    filled, sorted by base row then tile (NumPy: docs/architecture.md, "Terrain tiles")."""
    base = variant_base[req[:, 0]]
    lin = req[:, 1]
    n_tiles = meta[base, TM_TNX].astype(np.int64) * meta[base, TM_TNY].astype(np.int64)
    ok = (lin >= 0) & (lin < n_tiles)
    base = base[ok]
    lin = lin[ok]
    todo = tiles[meta[base, TM_TABLE].astype(np.int64) + lin] < 0
    key = np.unique((base[todo].astype(np.int64) << 32) | lin[todo])
    out = np.empty((len(key), 2), np.int64)
    out[:, 0] = key >> 32
    out[:, 1] = key & 0xFFFFFFFF
    return out


@njit(cache=True)
def _missing_tiles(tiles, meta, rows, xs, ys, rad, out):
    n = np.int64(0)  # not a literal 0: collect_missing compiles once (see physics.jit)
    for k in range(xs.shape[0]):
        n = collect_missing(tiles, meta, rows[k], xs[k], ys[k], rad[k], out, n)
    return n


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

    Crest: h = H (1 - u^2)^2 for |u| < 1, u = (x - crest_x)/half_length. Ramp: a linear rise
    to ``ramp_lip_m`` over ``ramp_length_m`` ending at ``ramp_x_m``, then an immediate drop
    back to 0 (a jump).
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
