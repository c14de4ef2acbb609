"""The stages the cars of one env drive on, packed for the kernels.

A :class:`StageBank` resolves the ``stage`` setting (a name, a path, a :class:`tracks.Stage`,
a list, or ``"random"``) into *slots*: each slot is one stage with its baked terrain, its
centerline tables (for the projection) and its timing lines (checkpoints, lap lines, finish).
Every car has a slot. All slots are packed into flat arrays with per-slot offsets so that one
kernel call can project and time cars on different stages, and all terrains into one
:class:`physics.TerrainSet`.

When surface-grip randomization is on, each slot's terrain is re-labelled so that every road
section has its own surface id (``1 + section index``; id 0 is off-road) and each car gets its
own row of grip multipliers: an extra terrain-set row that shares the slot's heightfield and
differs only in grip. The physics then sees per-car, per-section friction exactly, inside
every substep.
"""

from __future__ import annotations

import math
import os
from collections import OrderedDict
from typing import Any

import numpy as np
from numba import njit

import tracks
from physics.terrain import MAX_SURFACES, Terrain, TerrainSet
from rally_env.config import RallyConfig
from rally_env.errors import ConfigError
from tracks import surfaces as _surf
from tracks.io import is_stage_name
from tracks.projection import pack_path

# columns of the per-slot float table
SL_DS = 0
SL_LENGTH = 1
SL_CLOSED = 2
SL_SEG_OFF = 3
SL_PT_OFF = 4
SL_N_SEG = 5
SL_LINE_OFF = 6
SL_N_LINES = 7
SL_TIMED = 8  # start-to-finish distance (m), laps included
SL_TIME_LIMIT = 9  # s
SL_START_S = 10
SL_TERRAIN = 11  # terrain-set row of the slot's terrain
N_SL = 12

#: Gates (timing lines) reach this far beyond each road edge, on top of off_road_max_m (m).
GATE_MARGIN_M = 1.0
#: Most distinct section ids a re-labelled terrain can carry (id 0 is off-road).
MAX_SECTION_IDS = MAX_SURFACES - 1

_STAGE_CACHE: OrderedDict[Any, tracks.Stage] = OrderedDict()
_SECTIONED_CACHE: OrderedDict[str, tuple[Terrain, np.ndarray]] = OrderedDict()
_CACHE_SIZE = 16


def _cached(cache: OrderedDict, key: Any, make, size: int = _CACHE_SIZE):
    v = cache.get(key)
    if v is not None:
        cache.move_to_end(key)
        return v
    v = make()
    cache[key] = v
    while len(cache) > size:
        cache.popitem(last=False)
    return v


def resolve_stage(spec: Any) -> tracks.Stage:
    """A :class:`tracks.Stage` from a name, ``gen-<seed>``, a path or a Stage."""
    if isinstance(spec, tracks.Stage):
        return spec
    key = os.fspath(spec)
    if not is_stage_name(key) and os.path.exists(key):  # a library name or gen-<seed> wins
        return tracks.load_stage(key)  # files may change: never cached here
    return _cached(_STAGE_CACHE, ("spec", key), lambda: tracks.load_stage(key))


def generated_stage(seed: int, length_m: float, difficulty: float) -> tracks.Stage:
    """A generated stage (cached for repeated seeds)."""
    key = ("gen", int(seed), float(length_m), float(difficulty))
    return _cached(
        _STAGE_CACHE,
        key,
        lambda: tracks.generate(int(seed), length_m=float(length_m), difficulty=float(difficulty)),
    )


def stage_from_record(rec: dict[str, Any]) -> tracks.Stage:
    """Rebuild a stage from :func:`stage_record` output (checks the digest)."""
    from tracks.io import stage_from_dict

    key = ("digest", rec["digest"])
    st = _cached(
        _STAGE_CACHE, key, lambda: stage_from_dict(rec["doc"], rec.get("source", "<state>"))
    )
    if st.digest() != rec["digest"]:
        raise ValueError("stage record does not match its digest")
    return st


def stage_record(stage: tracks.Stage) -> dict[str, Any]:
    """A plain, picklable description of a stage (the file schema plus its digest)."""
    return {"name": stage.name, "digest": stage.digest(), "doc": stage.to_dict()}


# ------------------------------------------------------------------------------ timing lines
def timing_lines(stage: tracks.Stage) -> list[tuple[float, float]]:
    """(race distance from the start line, arc length on the path) of every timed line, in
    driving order; the last one is the finish. Loops: each lap's checkpoints then its lap line.
    """
    s0 = stage.start_s_m
    if not stage.closed:
        out = [(c - s0, c) for c in stage.checkpoints_m]
        out.append((stage.finish_s_m - s0, stage.finish_s_m))
        return out
    L = stage.path.length_m
    rel = sorted(((c - s0) % L, c) for c in stage.checkpoints_m)
    out = []
    for lap in range(stage.laps):
        for r, c in rel:
            out.append((lap * L + r, c))
        out.append(((lap + 1) * L, s0))
    return out


def gate_segment(stage: tracks.Stage, s: float, half_width_m: float) -> np.ndarray:
    """(x0, y0, x1, y1) of a timing gate across the road at arc length ``s``: G0 on the left,
    G1 on the right, so forward travel crosses it from the right of G0->G1 to its left."""
    p = stage.path
    x, y = p.point_at(s)
    tx, ty = p.tangent_at(s)
    nx, ny = -float(ty), float(tx)
    hw = float(p.half_width_at(s)) + half_width_m
    x, y = float(x), float(y)
    return np.array([x + nx * hw, y + ny * hw, x - nx * hw, y - ny * hw], np.float64)


# ------------------------------------------------------------------- section-labelled terrain
@njit(cache=True)
def _section_grid(x, y, hw, ds, length, closed, sec_start, x0, y0, cell, nx, ny, out):
    """Label road nodes (distance to the centerline <= half width, as the bake decides) with
    ``1 + section index`` (folded into 1..15), everything else 0."""
    n = x.shape[0]
    best = np.full((ny, nx), np.inf)
    best_j = np.full((ny, nx), -1, np.int64)
    best_t = np.zeros((ny, nx))
    for j in range(n - 1):
        ax = x[j]
        ay = y[j]
        ex = x[j + 1] - ax
        ey = y[j + 1] - ay
        l2 = ex * ex + ey * ey
        if l2 <= 0.0:
            continue
        il2 = 1.0 / l2
        r = max(hw[j], hw[j + 1]) + 2.0 * cell
        i0 = max(0, int(math.floor((min(ax, ax + ex) - r - x0) / cell)))
        i1 = min(nx - 1, int(math.ceil((max(ax, ax + ex) + r - x0) / cell)))
        j0 = max(0, int(math.floor((min(ay, ay + ey) - r - y0) / cell)))
        j1 = min(ny - 1, int(math.ceil((max(ay, ay + ey) + r - y0) / cell)))
        for gj in range(j0, j1 + 1):
            wy = y0 + gj * cell - ay
            for gi in range(i0, i1 + 1):
                wx = x0 + gi * cell - ax
                t = (wx * ex + wy * ey) * il2
                if t < 0.0:
                    t = 0.0
                elif t > 1.0:
                    t = 1.0
                dx = wx - t * ex
                dy = wy - t * ey
                d2 = dx * dx + dy * dy
                if d2 < best[gj, gi]:
                    best[gj, gi] = d2
                    best_j[gj, gi] = j
                    best_t[gj, gi] = t
    n_sec = sec_start.shape[0]
    for gj in range(ny):
        for gi in range(nx):
            jj = best_j[gj, gi]
            out[gj, gi] = 0
            if jj < 0:
                continue
            t = best_t[gj, gi]
            h = hw[jj] + (hw[jj + 1] - hw[jj]) * t
            if math.sqrt(best[gj, gi]) - h > 0.0:
                continue
            s = (jj + t) * ds
            if closed and s >= length:
                s -= length
            k = 0
            for q in range(1, n_sec):
                if sec_start[q] <= s:
                    k = q
            out[gj, gi] = 1 + k % 15


def sectioned_terrain(stage: tracks.Stage, base: Terrain) -> tuple[Terrain, np.ndarray]:
    """The stage's terrain re-labelled with one surface id per road section.

    Returns:
        (terrain, section_ids): the terrain (same heights, grip per id = the grip of that
        section's surface, id 0 = the off-road surface) and (n_sections,) the id of each
        section.
    """

    def make():
        p = stage.path
        ny, nx = base.shape
        out = np.zeros((ny, nx), np.int8)
        _section_grid(
            p.x_m,
            p.y_m,
            p.half_width_m,
            p.ds_m,
            p.length_m,
            p.closed,
            np.ascontiguousarray(p.section_start_m, np.float64),
            base.x0_m,
            base.y0_m,
            base.cell_m,
            nx,
            ny,
            out,
        )
        n_sec = len(p.section_start_m)
        ids = 1 + np.arange(n_sec) % MAX_SECTION_IDS
        n_ids = 1 + min(n_sec, MAX_SECTION_IDS)
        grip = np.zeros(n_ids)
        grip[0] = _surf.GRIP[_surf.surface_id(stage.terrain.offroad_surface)]
        for i in range(min(n_sec, MAX_SECTION_IDS)):
            grip[1 + i] = _surf.GRIP[int(p.section_surface[i])]
        t = Terrain(
            base.heights_m,
            out,
            grip,
            base.x0_m,
            base.y0_m,
            base.cell_m,
            name=f"{base.name}+sections",
        )
        return t, ids

    return _cached(_SECTIONED_CACHE, stage.digest() + base.digest(), make, size=8)


# --------------------------------------------------------------------------------- the bank
class StageBank:
    """Slots of stages and their packed tables (see the module docstring).

    Args:
        config: the env config (stage spec, termination settings, randomization).
        n_cars: number of cars.
    """

    def __init__(self, config: RallyConfig, n_cars: int):
        self.config = config
        self.n_cars = int(n_cars)
        spec = config.stage
        self.mode = (
            "random" if spec == "random" else ("list" if isinstance(spec, tuple) else "fixed")
        )
        self.sectioned = config.randomize is not None and config.randomize.randomizes_surfaces
        self.gate_extra_m = config.termination.off_road_max_m + GATE_MARGIN_M
        if self.mode == "random":
            self.slots: list[tracks.Stage | None] = [None] * self.n_cars
        elif self.mode == "list":
            self.slots = [self._load(x, f"stage[{i}]") for i, x in enumerate(spec)]
        else:
            self.slots = [self._load(spec, "stage")]
        self.version = 0
        self.built = False
        if self.mode != "random":
            self.rebuild()

    @staticmethod
    def _load(spec: Any, fld: str) -> tracks.Stage:
        try:
            return resolve_stage(spec)
        except tracks.StageNotFoundError as e:
            raise ConfigError(fld, spec, str(e)) from None

    @property
    def n_slots(self) -> int:
        return len(self.slots)

    def terrain_for(self, stage: tracks.Stage) -> Terrain:
        return tracks.bake(stage)

    def rebuild(self) -> None:
        """Pack every slot's tables and terrains (after the slots changed)."""
        slots = self.slots
        terrains = []
        self.section_ids: list[np.ndarray] = []
        for st in slots:
            if st is None:  # random mode before the first reset of that car
                st = slots[next(i for i, s in enumerate(slots) if s is not None)]
            t = self.terrain_for(st)
            if self.sectioned:
                t, ids = sectioned_terrain(st, t)
            else:
                ids = np.zeros(len(st.path.section_start_m), np.int64)
            terrains.append(t)
            self.section_ids.append(ids)
        segs, pts, lines_r, lines_g = [], [[] for _ in range(6)], [], []
        table = np.zeros((len(slots), N_SL), np.float64)
        seg_off = pt_off = line_off = 0
        term = self.config.termination
        self.n_lines_max = 0
        for i, st in enumerate(slots):
            if st is None:
                st = next(s for s in slots if s is not None)
            p = st.path
            seg = pack_path(p)
            segs.append(seg)
            for lst, arr in zip(
                pts, (p.tx, p.ty, p.curvature, p.half_width_m, p.x_m, p.y_m), strict=True
            ):
                lst.append(np.asarray(arr, np.float64))
            lines = timing_lines(st)
            for race, s in lines:
                lines_r.append(race)
                lines_g.append(gate_segment(st, s, self.gate_extra_m))
            timed = st.timed_length_m
            limit = (
                term.time_limit_s
                if term.time_limit_s is not None
                else term.time_limit_base_s + timed / term.time_limit_speed_mps
            )
            table[i] = 0.0
            table[i, SL_DS] = p.ds_m
            table[i, SL_LENGTH] = p.length_m
            table[i, SL_CLOSED] = 1.0 if p.closed else 0.0
            table[i, SL_SEG_OFF] = seg_off
            table[i, SL_PT_OFF] = pt_off
            table[i, SL_N_SEG] = seg.shape[0]
            table[i, SL_LINE_OFF] = line_off
            table[i, SL_N_LINES] = len(lines)
            table[i, SL_TIMED] = timed
            table[i, SL_TIME_LIMIT] = limit
            table[i, SL_START_S] = st.start_s_m
            table[i, SL_TERRAIN] = i
            seg_off += seg.shape[0]
            pt_off += p.n_samples
            line_off += len(lines)
            self.n_lines_max = max(self.n_lines_max, len(lines))
        self.table = table
        self.seg = np.ascontiguousarray(np.concatenate(segs))
        self.tx, self.ty, self.curv, self.hw, self.px, self.py = (
            np.ascontiguousarray(np.concatenate(lst)) for lst in pts
        )
        self.line_race = np.asarray(lines_r, np.float64)
        self.line_gate = np.ascontiguousarray(np.stack(lines_g))
        first = next(s for s in slots if s is not None)
        self.slot_names = np.array([(s or first).name for s in slots], dtype=object)
        self.slot_laps = np.array([(s or first).laps for s in slots], np.int64)
        # with per-section grip randomisation every car drives a variant row of its own
        self.terrains = TerrainSet(terrains, n_variants=self.n_cars if self.sectioned else 0)
        self.version += 1
        self.built = True

    # -------------------------------------------------------------------- per-car terrain rows
    def terrain_row(self, car: int, slot: int) -> int:
        """Terrain-set row car ``car`` drives on when it is in ``slot``."""
        if not self.sectioned:
            return slot
        return self.terrains.n_base + car

    def set_car_grip(self, car: int, slot: int, section_mu: np.ndarray) -> None:
        """Point car ``car``'s alias row at ``slot`` with per-section grip multipliers."""
        ts = self.terrains
        g = ts.grip[slot].copy()
        ids = self.section_ids[slot]
        for i in range(min(len(ids), MAX_SECTION_IDS)):
            g[ids[i]] *= section_mu[i]
        ts.set_variant(ts.n_base + car, slot, g)

    def stage(self, slot: int) -> tracks.Stage:
        st = self.slots[slot]
        assert st is not None
        return st
