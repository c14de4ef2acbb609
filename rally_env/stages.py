"""The stages the cars of one env drive on, packed for the kernels.

A :class:`StageSource` decides which stage each car gets; its :class:`StageBank` holds the
stages in *slots* of flat tables (:class:`StageTables`) and terrain rows. Stages and their
terrain sources are cached per process. docs/env.md ("Vector env", "Domain randomization")
says how slots, section grip and the prefetch worker work.
"""

from __future__ import annotations

import functools
import os
import re
from collections import OrderedDict
from typing import Any, NamedTuple

import numpy as np

import tracks
from physics.jit import njit, njit_inner
from physics.terrain import MAX_SURFACES, TerrainSet, flat_terrain
from rally_env.config import RallyConfig, pool_record_problem
from rally_env.errors import ConfigError, StateError
from rally_env.spaces import ROAD_AHEAD_BINS_M
from tracks.bake import StageTerrain
from tracks.generator import generate_drawn
from tracks.io import is_stage_name
from tracks.prefetch import PREFETCHER
from tracks.projection import N_SEG_COLS, pack_path

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
SL_SEC_OFF = 12  # first row of the slot's sections in the section table
SL_N_SEC = 13
N_SL = 14


class StageTables(NamedTuple):
    """The bank's packed tables as the env kernels read them (one record, built by
    :meth:`StageBank.tables`). ``table`` has a row per slot (columns ``SL_*``: offsets and
    counts into the other tables, length, timing); the others hold every slot's rows, each
    slot in a region of its own."""

    table: np.ndarray  # float64 (slots, N_SL)
    seg: np.ndarray  # float64 (samples, N_SEG_COLS): packed centerline segments (projection)
    tx: np.ndarray  # float64 (samples,): unit tangent x per sample
    ty: np.ndarray  # float64 (samples,): unit tangent y
    curv: np.ndarray  # float64 (samples,): signed curvature (1/m)
    hw: np.ndarray  # float64 (samples,): road half-width (m)
    px: np.ndarray  # float64 (samples,): centerline x (m)
    py: np.ndarray  # float64 (samples,): centerline y (m)
    line_race: np.ndarray  # float64 (lines,): stage position of each timing line (m)
    line_gate: np.ndarray  # float64 (lines, 4): each line's gate segment x0, y0, x1, y1
    z: np.ndarray  # float64 (samples,): elevation (road-ahead observation; else (1,) zeros)
    wcurv: np.ndarray  # float64 (samples, widths): sharpest curvature ahead per window width
    wcrest: np.ndarray  # float64 (samples, widths): sharpest crest ahead per window width
    sec_start: np.ndarray  # float64 (sections,): start of each road section (m)
    sec_sid: np.ndarray  # int64 (sections,): terrain surface id of each section


#: Window widths (m) of the road-ahead tables: the widths of the bins
#: (:data:`rally_env.spaces.ROAD_AHEAD_BINS_M`).
AHEAD_WIDTHS_M: tuple[float, ...] = tuple(sorted({b - a for a, b in ROAD_AHEAD_BINS_M}))

#: Names of generated stages: ``gen-<seed>`` (plus ``-<length>m-d<difficulty>`` if not default).
GEN_NAME = re.compile(r"^gen-(\d+)")
#: Gates (timing lines) reach this far beyond each road edge, on top of off_road_max_m (m).
GATE_MARGIN_M = 1.0
#: Most distinct section ids a re-labelled terrain can carry (id 0 is off-road).
MAX_SECTION_IDS = MAX_SURFACES - 1

_STAGE_CACHE: OrderedDict[Any, tracks.Stage] = OrderedDict()
_SOURCE_CACHE: OrderedDict[Any, tuple[tracks.Stage, StageTerrain]] = OrderedDict()
_CACHE_SIZE = 16


def _cached(cache: OrderedDict, key: Any, make):
    if key in cache:
        cache.move_to_end(key)
        return cache[key]
    cache[key] = v = make()
    while len(cache) > _CACHE_SIZE:
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


def gen_key(seed: int, length_m: float, difficulty: float, laps: int = 0) -> tuple:
    """The cache and slot key of a generated stage (``laps`` 0: point to point)."""
    return ("gen", int(seed), float(length_m), float(difficulty), int(laps))


def _exact(x: float) -> str:
    """A float as its shortest exact text, without a trailing ``.0``."""
    text = repr(float(x))
    return text[:-2] if text.endswith(".0") else text


def drawn_stage_name(seed: int, length_m: float, difficulty: float, laps: int = 0) -> str:
    """The exact board name of a randomly drawn stage (:func:`gen_key`'s arguments):
    ``gen-S-400m-d0.113457``, ``gen-S-600m-d0.5-loop3``, or ``gen-<seed>`` for the default
    arguments; docs/replays.md says why the stage's own name is not enough."""
    if (float(length_m), float(difficulty), int(laps)) == (2000.0, 0.5, 0):
        return f"gen-{int(seed)}"
    name = f"gen-{int(seed)}-{_exact(length_m)}m-d{_exact(difficulty)}"
    return name + (f"-loop{int(laps)}" if laps else "")


_DRAWN_RE = re.compile(
    r"gen-([0-9]{1,10})-([0-9][0-9.e+-]{0,24})m-d([0-9][0-9.e+-]{0,24})(?:-loop([0-9]{1,2}))?"
)


def parse_drawn_name(name: Any) -> tuple[int, float, float, int] | None:
    """(seed, length_m, difficulty, laps) of a name :func:`drawn_stage_name` makes (exactly
    that text, nothing that merely reads alike), else None."""
    m = _DRAWN_RE.fullmatch(name) if isinstance(name, str) else None
    if m is None:
        return None
    try:
        seed, length, diff = int(m.group(1)), float(m.group(2)), float(m.group(3))
    except ValueError:
        return None
    laps = int(m.group(4) or 0)
    exact = drawn_stage_name(seed, length, diff, laps) == name and not (laps and length < 400.0)
    if not (exact and 200.0 <= length <= 20000.0 and 0.0 <= diff <= 1.0):
        return None
    return seed, length, diff, laps


def board_stage(name: str) -> tracks.Stage | None:
    """The stage a board name stands for: a library stage, ``gen-<seed>``, or a drawn
    stage's exact name (:func:`drawn_stage_name`); None for any other name (a stage of the
    user's own, or a ``gen-`` name that stands for no single stage).

    Raises:
        ValueError: the name is one of these but its stage cannot be made.
    """
    if is_stage_name(name):
        return resolve_stage(name)
    drawn = parse_drawn_name(name)
    return None if drawn is None else generated_stage(*drawn[:3], laps=drawn[3])


def generated_stage(
    seed: int, length_m: float, difficulty: float, sectioned: bool = False, laps: int = 0
) -> tracks.Stage:
    """A generated stage, point to point or (``laps`` >= 1) a closed loop of that many laps
    (:func:`tracks.generator.generate_drawn`; cached; taken from the prefetch worker, with its
    terrain source, when it made it ahead)."""
    key = gen_key(seed, length_m, difficulty, laps)

    def make() -> tracks.Stage:
        made = PREFETCHER.take(seed, length_m, difficulty, sectioned, laps=laps)
        if made is None:
            return generate_drawn(int(seed), float(length_m), float(difficulty), int(laps))
        st, src = made
        _SOURCE_CACHE[(id(st), sectioned)] = (st, src)
        return st

    return _cached(_STAGE_CACHE, key, make)


#: How far past the start line the prefetch worker bakes a pool stage's tiles (m; docs/speed.md).
POOL_PREBAKE_M = 150.0


def prefetch_stage(seed: int, length_m: float, difficulty: float, *args: Any, **kw: Any) -> bool:
    """Ask the prefetch worker for a generated stage a car will need soon, unless this process
    has it already: :meth:`tracks.prefetch.Prefetcher.request`'s arguments and answer (whether
    the stage is made or on its way)."""
    if gen_key(seed, length_m, difficulty, kw.get("laps", 0)) in _STAGE_CACHE:
        return True
    return PREFETCHER.request(seed, length_m, difficulty, *args, **kw)


class StageDraw(NamedTuple):
    """A random stage drawn for a car: generator seed, difficulty, laps (0: point to point,
    else a closed loop of that many laps)."""

    seed: int
    difficulty: float
    laps: int = 0


def draw_random_stage(
    random_stage: dict[str, Any],
    rng: np.random.Generator,
    pool: tuple[int, int] | None = None,
) -> StageDraw:
    """A car's next ``stage="random"`` stage, drawn from its stream: a fresh seed and
    difficulty (a loop with probability ``loops``), a level of a level set, or one of the
    current pool window's stages (``pool = (pool seed, env step)``, :func:`pool_stages`); the
    rules: docs/env.md ("Vector env").

    Raises:
        ValueError: a stage pool, but ``pool`` is None."""
    lo, hi = random_stage["difficulty"]
    n_pool = random_stage.get("pool")
    if n_pool is not None:
        if pool is None:
            raise ValueError("a stage pool needs the env's pool seed and step")
        seeds, diffs, lap = pool_window(
            random_stage, pool[0], pool[1] // random_stage["pool_steps"]
        )
        j = int(rng.integers(n_pool))
        return StageDraw(int(seeds[j]), float(diffs[j]), int(lap[j]))
    n_levels = random_stage.get("num_levels")
    if n_levels is None:
        seed = int(rng.integers(0, 2**31 - 1))
        diff = round(lo + (hi - lo) * float(rng.random()), 6)
        loops = random_stage.get("loops", 0.0)
        if loops > 0.0 and float(rng.random()) < loops:
            return StageDraw(seed, diff, random_stage["laps"])
        return StageDraw(seed, diff)
    seed = int(random_stage.get("start_level", 0)) + int(rng.integers(n_levels))
    return StageDraw(seed, level_difficulty(seed, lo, hi))


#: The spawn-key tag of a pool window's stream ``(POOL_TAG, window)`` (a car's is ``(k,)``).
POOL_TAG = 0x706F6F6C


def pool_window(
    random_stage: dict[str, Any], pool_seed: int, window: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """:func:`pool_stages` of window ``window`` of a checked ``random_stage`` pool."""
    lo, hi = random_stage["difficulty"]
    loops = float(random_stage.get("loops", 0.0))
    laps = int(random_stage.get("laps", 1))
    return pool_stages(pool_seed, window, random_stage["pool"], lo, hi, loops, laps)


@functools.lru_cache(maxsize=8)
def pool_stages(
    pool_seed: int,
    window: int,
    n: int,
    lo: float,
    hi: float,
    loops: float = 0.0,
    laps: int = 1,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The ``n`` (generator seeds, difficulties, laps) of pool window ``window`` of pool seed
    ``pool_seed``, drawn from ``SeedSequence(pool_seed, spawn_key=(POOL_TAG, window))`` as a
    fresh random stage's are (laps 0: point to point). A function of its arguments alone;
    read-only arrays."""
    ss = np.random.SeedSequence(int(pool_seed), spawn_key=(POOL_TAG, int(window)))
    g = np.random.Generator(np.random.PCG64(ss))
    seeds = g.integers(0, 2**31 - 1, size=int(n))
    diffs = np.array([round(lo + (hi - lo) * float(u), 6) for u in g.random(int(n))])
    lap = np.zeros(int(n), np.int64)
    if loops > 0.0:
        lap[g.random(int(n)) < loops] = int(laps)
    for a in (seeds, diffs, lap):
        a.flags.writeable = False
    return seeds, diffs, lap


@functools.lru_cache(maxsize=4096)
def level_difficulty(seed: int, lo: float, hi: float) -> float:
    """The difficulty of level ``seed`` in [lo, hi] (drawn from the level's own stream)."""
    u = float(np.random.Generator(np.random.PCG64(np.random.SeedSequence([seed, 1]))).random())
    return round(lo + (hi - lo) * u, 6)


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
        return [(c - s0, c) for c in (*stage.checkpoints_m, stage.finish_s_m)]
    L = stage.path.length_m
    rel = sorted(((c - s0) % L, c) for c in stage.checkpoints_m)
    out = []
    for lap in range(stage.laps):
        out += [(lap * L + r, c) for r, c in rel]
        out.append(((lap + 1) * L, s0))
    return out


def gate_segments(stage: tracks.Stage, s: np.ndarray, half_width_m: float) -> np.ndarray:
    """(n, 4) rows (x0, y0, x1, y1) of timing gates across the road at arc lengths ``s``: G0 on
    the left, G1 on the right, so forward travel crosses each from the right of G0->G1 to its
    left."""
    p = stage.path
    s = np.asarray(s, np.float64)
    x, y = p.point_at(s)
    tx, ty = p.tangent_at(s)
    nx, ny = -ty, tx
    hw = p.half_width_at(s) + half_width_m
    return np.stack([x + nx * hw, y + ny * hw, x - nx * hw, y - ny * hw], axis=1)


# -------------------------------------------------------------------- road-ahead tables
def ahead_tables(path: Any) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per-sample tables of the road-ahead observation: elevation (m), and for each window
    width of :data:`AHEAD_WIDTHS_M` the sharpest signed curvature and the sharpest crest
    (vertical convexity -d2z/ds2, 1/m, never below 0) of the window starting at the sample.
    Windows are whole multiples of the narrowest (``round(25 m / ds)`` samples, ds ~ 1 m).
    Beyond the end of an open stage the road runs straight and level; loops wrap."""
    z = np.ascontiguousarray(path.z_m, np.float64)
    k = np.ascontiguousarray(path.curvature, np.float64)
    ds = float(path.ds_m)
    unit = max(1, round(AHEAD_WIDTHS_M[0] / ds))
    mult = np.array([round(w / AHEAD_WIDTHS_M[0]) for w in AHEAD_WIDTHS_M], np.int64)
    n = z.shape[0]
    wc = np.zeros((n, len(mult)))
    wr = np.zeros((n, len(mult)))
    _ahead_windows(z, k, ds, bool(path.closed), unit, mult, wc, wr)
    return z, wc, wr


@njit(cache=True)
def _ahead_windows(z, kappa, ds, closed, unit, mult, out_curv, out_crest):
    """Window maxima: the narrowest window by direct search, every wider one (a whole
    multiple ``mult[c]`` of it) as the best of ``mult[c]`` consecutive narrow windows."""
    n = z.shape[0]
    m = n - 1 if closed else n  # a loop's last sample repeats its first
    crest = np.zeros(m)
    inv = 1.0 / (ds * ds)
    for i in range(m):
        if closed:
            lo = z[i - 1] if i > 0 else z[m - 1]
            hi = z[i + 1]
        elif 0 < i < n - 1:
            lo = z[i - 1]
            hi = z[i + 1]
        else:
            continue
        c = -(hi - 2.0 * z[i] + lo) * inv
        crest[i] = c if c > 0.0 else 0.0
    base_k = np.zeros(n)
    base_c = np.zeros(n)
    for i in range(n):
        base_k[i], base_c[i] = _window_max(kappa, crest, i, unit, np.int64(1), closed, m)
    for c in range(mult.shape[0]):
        for i in range(n):
            out_curv[i, c], out_crest[i, c] = _window_max(
                base_k, base_c, i, mult[c], unit, closed, m
            )


@njit_inner(_nrt=False)
def _window_max(kappa, crest, i, count, stride, closed, m):
    """The sharpest signed curvature and crest of samples ``i + q * stride``, q < ``count``
    (a loop wraps at its ``m`` distinct samples; an open stage's window stops at its end)."""
    bk = 0.0
    bc = 0.0
    for q in range(count):
        j = i + q * stride
        if closed:
            j = j % m
        elif j >= kappa.shape[0]:
            break
        if abs(kappa[j]) > abs(bk):
            bk = kappa[j]
        if crest[j] > bc:
            bc = crest[j]
    return bk, bc


# ---------------------------------------------------------------------------- terrains
def stage_terrain(stage: tracks.Stage, sectioned: bool = False) -> StageTerrain:
    """The stage's terrain as a tile source (cached per stage object, so the envs of one
    process share one source of a library stage and its ground field)."""
    key = (id(stage), sectioned)
    hit = _SOURCE_CACHE.get(key)
    if hit is not None and hit[0] is not stage:  # the id of a stage that is gone
        del _SOURCE_CACHE[key]
    # holding the stage keeps its id from being reused
    return _cached(_SOURCE_CACHE, key, lambda: (stage, StageTerrain(stage, sectioned=sectioned)))[1]


#: Stand-in terrain of a random-mode slot before its car's first reset.
_PLACEHOLDER = flat_terrain(64.0, 8.0, name="no-stage-yet")


class _Regions:
    """Per-slot regions of rows in shared arrays: a slot rewrites its region in place, or
    moves to a new one at the end when it no longer fits; when the arrays are full, every
    region is copied to the start of new ones twice the rows in use (the holes dropped)."""

    def __init__(self, n_slots: int, columns: dict[str, tuple[tuple[int, ...], Any]]):
        self.arrays = {k: np.zeros((0, *shape), dt) for k, (shape, dt) in columns.items()}
        self.off = np.zeros(n_slots, np.int64)
        self.cap = np.zeros(n_slots, np.int64)
        self.rows = 0

    def put(self, slot: int, **values: np.ndarray) -> int:
        """Write the rows of ``values`` (one array per column) as slot ``slot``'s region;
        returns its offset."""
        n = len(next(iter(values.values())))
        if n > self.cap[slot]:
            self.cap[slot] = 0  # its old region is a hole
            cap = n + n // 8
            if self.rows + cap > len(next(iter(self.arrays.values()))):
                self._repack(cap)
            self.off[slot] = self.rows
            self.cap[slot] = cap
            self.rows += cap
        o = int(self.off[slot])
        for k, v in values.items():
            self.arrays[k][o : o + n] = v
        return o

    def _repack(self, extra: int) -> None:
        size = max(2 * (int(self.cap.sum()) + extra), 64)
        new = {k: np.zeros((size, *a.shape[1:]), a.dtype) for k, a in self.arrays.items()}
        top = 0
        for slot in np.argsort(self.off):
            o, c = int(self.off[slot]), int(self.cap[slot])
            for k, a in self.arrays.items():
                new[k][top : top + c] = a[o : o + c]
            self.off[slot] = top
            top += c
        self.arrays = new
        self.rows = top


# --------------------------------------------------------------------------------- the bank
class StageBank:
    """Slots of stages and their packed tables (see the module docstring)."""

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
            stages: list[tracks.Stage | None] = [None] * self.n_cars
        elif self.mode == "list":
            stages = [self._load(x, f"stage[{i}]") for i, x in enumerate(spec)]
        else:
            stages = [self._load(spec, "stage")]
        n = len(stages)
        self.slots: list[tracks.Stage | None] = [None] * n
        self.table = np.zeros((n, N_SL), np.float64)
        per_sample = {k: ((), np.float64) for k in ("tx", "ty", "curv", "hw", "px", "py")}
        self._pts = _Regions(n, {"seg": ((N_SEG_COLS,), np.float64), **per_sample})
        self._lines = _Regions(n, {"line_race": ((), np.float64), "line_gate": ((4,), np.float64)})
        self._secs = _Regions(n, {"sec_start": ((), np.float64), "sec_sid": ((), np.int64)})
        #: per-sample tables of the road-ahead observation (filled only with ``road_ahead``)
        self.road_ahead = config.road_ahead
        nw = len(AHEAD_WIDTHS_M)
        ahead = {"z": ((), np.float64), "wcurv": ((nw,), np.float64), "wcrest": ((nw,), np.float64)}
        self._ahead = _Regions(n, ahead)
        self.section_ids: list[np.ndarray] = [np.zeros(1, np.int64)] * n
        self.slot_names = np.array([""] * n, dtype=object)
        self.slot_laps = np.ones(n, np.int64)
        #: generator seed of each slot's stage (-1: not a generated stage)
        self.slot_seeds = np.full(n, -1, np.int64)
        self.n_lines_max = 1
        # with per-section grip randomisation every car drives a variant row of its own
        self.terrains = TerrainSet(
            [_PLACEHOLDER] * n, n_variants=self.n_cars if self.sectioned else 0
        )
        self.version = 0
        self._tables: tuple[int, tuple] | None = None
        for i, st in enumerate(stages):
            if st is not None:
                self.set_slot(i, st)
        # random mode: slots are a cache of generated stages that cars hold references to
        self._key_slot: dict[Any, int] = {}
        self._slot_key: list[Any] = [None] * n
        self.refs = np.zeros(n, np.int64)
        self._free: OrderedDict[int, None] = OrderedDict((i, None) for i in range(n))

    @staticmethod
    def _load(spec: Any, fld: str) -> tracks.Stage:
        try:
            return resolve_stage(spec)
        except tracks.StageNotFoundError as e:
            raise ConfigError(fld, spec, str(e)) from None

    @property
    def n_slots(self) -> int:
        return len(self.slots)

    def tables(self) -> tuple:
        """Every packed table as one :class:`StageTables` record as a plain tuple (what the env
        kernels take; docs/architecture.md, "The env kernels' records"), built again only
        after a slot changed; road-ahead placeholders without the road-ahead observation."""
        if self._tables is not None and self._tables[0] == self.version:
            return self._tables[1]
        a = self._ahead.arrays
        if not self.road_ahead or not len(a["z"]):
            nw = len(AHEAD_WIDTHS_M)
            a = {"z": np.zeros(1), "wcurv": np.zeros((1, nw)), "wcrest": np.zeros((1, nw))}
        # the regions' columns are named as the record's fields
        arrays = {**self._pts.arrays, **self._lines.arrays, **a, **self._secs.arrays}
        rec = StageTables(table=self.table, **arrays)
        self._tables = (self.version, tuple(rec))
        return self._tables[1]

    # the timing-line arrays the core's substep loop reads (they move when a region grows)
    @property
    def line_race(self) -> np.ndarray:
        return self._lines.arrays["line_race"]

    @property
    def line_gate(self) -> np.ndarray:
        return self._lines.arrays["line_gate"]

    def set_slot(self, i: int, st: tracks.Stage) -> bool:
        """Give slot ``i`` the stage ``st``: its tables and its terrain row. Returns False if
        the slot already had it (nothing to do)."""
        if self.slots[i] is st:
            return False
        p = st.path
        seg = pack_path(p)
        n = p.n_samples
        rows = np.zeros((n, N_SEG_COLS))  # a row per sample: the last one has no segment
        rows[: n - 1] = seg
        self._pts.put(
            i, seg=rows, tx=p.tx, ty=p.ty, curv=p.curvature, hw=p.half_width_m, px=p.x_m, py=p.y_m
        )
        if self.road_ahead:
            z, wcurv, wcrest = ahead_tables(p)
            self._ahead.put(i, z=z, wcurv=wcurv, wcrest=wcrest)
        ids = np.asarray(p.section_surface, np.int64)
        if self.sectioned:
            ids = 1 + np.arange(len(ids), dtype=np.int64) % MAX_SECTION_IDS
        starts = np.asarray(p.section_start_m, np.float64)
        self._secs.put(i, sec_start=starts, sec_sid=ids)
        lines = timing_lines(st)
        gates = gate_segments(st, np.array([s for _, s in lines]), self.gate_extra_m)
        race = np.array([r for r, _ in lines], np.float64)
        self._lines.put(i, line_race=race, line_gate=gates)
        term = self.config.termination
        timed = st.timed_length_m
        limit = term.time_limit_s
        if limit is None:
            limit = term.time_limit_base_s + timed / term.time_limit_speed_mps
        row = self.table[i]
        row[:] = 0.0
        row[SL_DS] = p.ds_m
        row[SL_LENGTH] = p.length_m
        row[SL_CLOSED] = 1.0 if p.closed else 0.0
        row[SL_N_SEG] = seg.shape[0]
        row[SL_N_LINES] = len(lines)
        row[SL_TIMED] = timed
        row[SL_TIME_LIMIT] = limit
        row[SL_START_S] = st.start_s_m
        row[SL_TERRAIN] = i
        row[SL_N_SEC] = len(ids)
        # a put that repacked its arrays moved every slot's region: every row follows
        self.table[:, SL_SEG_OFF] = self.table[:, SL_PT_OFF] = self._pts.off
        self.table[:, SL_LINE_OFF] = self._lines.off
        self.table[:, SL_SEC_OFF] = self._secs.off
        self.n_lines_max = max(self.n_lines_max, len(lines))
        src = stage_terrain(st, self.sectioned)
        self.terrains.replace(i, src)
        self.section_ids[i] = src.section_ids
        self.slot_names[i] = st.name
        self.slot_laps[i] = st.laps
        m = GEN_NAME.match(st.name)
        self.slot_seeds[i] = int(m.group(1)) if m else -1
        self.slots[i] = st
        self.version += 1
        return True

    # ------------------------------------------------------------------ random-mode slots
    def key_of(self, slot: int) -> Any:
        """The key of the stage a random-mode slot holds (:func:`gen_key` for a generated
        stage), or None."""
        return self._slot_key[slot]

    def holds(self, key: Any) -> bool:
        """Whether a slot holds the stage ``key`` names (its next :meth:`acquire` builds
        nothing)."""
        return key in self._key_slot

    def acquire(self, key: Any, make) -> int:
        """A slot holding the stage ``key`` names (``make()`` builds it when no slot has it),
        with one more reference. A slot nobody holds keeps its stage until another one needs
        it (least recently released first)."""
        slot = self._key_slot.get(key)
        if slot is None:
            if not self._free:
                raise RuntimeError("every stage slot is in use")
            slot = next(iter(self._free))
            old = self._slot_key[slot]
            if old is not None:
                del self._key_slot[old]
            self.set_slot(slot, make())
            self._key_slot[key] = slot
            self._slot_key[slot] = key
        if self.refs[slot] == 0:
            self._free.pop(slot, None)
        self.refs[slot] += 1
        return slot

    def acquire_stage(self, stage: tracks.Stage, count: int = 1) -> int:
        """A slot holding ``stage`` (the slot that already holds a stage of its digest, or a
        free one given it), with ``count`` more references."""
        digest = stage.digest()
        slot = next(
            (i for i, s in enumerate(self.slots) if s is not None and s.digest() == digest), None
        )
        # every slot holding a stage has a key (acquire and adopt give it one)
        key = self._slot_key[slot] if slot is not None else ("stage", digest)
        slot = self.acquire(key, lambda: stage)
        self.refs[slot] += count - 1
        return slot

    def release(self, slot: int) -> None:
        """Drop one reference to a random-mode slot."""
        if self.refs[slot] <= 0:
            return
        self.refs[slot] -= 1
        if self.refs[slot] == 0:
            self._free[slot] = None

    def adopt(self, slots: list[tracks.Stage | None], held: np.ndarray) -> None:
        """Take the slots of a saved state: stage ``slots[i]`` in slot i, with the reference
        counts of the cars that hold them (``held``: the slot of each car that was reset)."""
        for i, st in enumerate(slots):
            if st is not None:
                self.set_slot(i, st)
        self._slot_key = [None if st is None else ("stage", st.digest()) for st in self.slots]
        self._key_slot = {k: i for i, k in enumerate(self._slot_key) if k is not None}
        self.refs[:] = np.bincount(held, minlength=self.n_slots)[: self.n_slots]
        self._free = OrderedDict((i, None) for i in range(self.n_slots) if self.refs[i] == 0)

    # -------------------------------------------------------------------- per-car terrain rows
    def terrain_row(self, car: int, slot: int) -> int:
        """Terrain-set row car ``car`` drives on when it is in ``slot``."""
        return self.terrains.n_base + car if self.sectioned else slot

    def set_car_grip(self, car: int, slot: int, section_mu: np.ndarray) -> None:
        """Point car ``car``'s variant row at ``slot`` with per-section grip multipliers."""
        ts = self.terrains
        g = ts.grip[slot].copy()
        ids = self.section_ids[slot]
        for i in range(min(len(ids), MAX_SECTION_IDS)):
            g[ids[i]] *= section_mu[i]
        ts.set_variant(ts.n_base + car, slot, g)

    def stage(self, slot: int) -> tracks.Stage:
        st = self.slots[slot]
        if st is None:
            raise RuntimeError(f"stage slot {slot} has no stage yet (reset the env first)")
        return st


# --------------------------------------------------------------------------- the source
class StageSource:
    """Where every car's stages come from: the one object the core asks for a car's next
    stage (:meth:`assign`). It owns the :class:`StageBank` of slots, the draw rule (a fixed
    stage, a list, fresh random stages, a level set or a stage pool), the pool's seed and step
    count, and the requests to the prefetch worker for stages cars will need."""

    def __init__(self, config: RallyConfig, n_cars: int):
        self.bank = StageBank(config, n_cars)
        self.n_cars = int(n_cars)
        self.random_stage = config.random_stage if self.bank.mode == "random" else {}
        #: the size of a ``random_stage`` pool, or None
        self.pool_size: int | None = self.random_stage.get("pool")
        self.seed_pool(None)

    # ------------------------------------------------------------------ a car's next stage
    def assign(self, cars: np.ndarray, rngs: list[Any], held: np.ndarray, then) -> np.ndarray:
        """The slots of the stages ``cars`` reset onto, drawn from their streams ``rngs[k]``
        (``held[i]``: the slot car ``cars[i]`` holds now, released first; -1 for none).
        ``then(k, slot, rng)`` runs after each car's draw (its further draws come from the
        same stream, before the stage its next reset will draw is asked for ahead)."""
        bank = self.bank
        pool = self.pool_now()
        fresh = bank.mode == "random" and pool is None
        # each car asks for its next stage ahead, or the worker makes the second half of
        # these (docs/env.md, Vector env)
        ahead = fresh and self.n_cars <= PREFETCHER.capacity
        if fresh and not ahead and len(cars) > 1:
            for k in cars[(len(cars) + 1) // 2 :]:
                self._prefetch_next(rngs[int(k)], prebake=False)
        slots = np.empty(len(cars), np.int64)
        for i, k in enumerate(cars):
            rng = rngs[int(k)]
            if bank.mode == "fixed":
                slot = 0
            elif bank.mode == "list":
                slot = int(rng.integers(bank.n_slots))
            else:
                key = self._draw(rng, pool)
                if held[i] >= 0:
                    bank.release(int(held[i]))
                # a gen_key is ("gen", seed, length_m, difficulty, laps)
                slot = bank.acquire(
                    key, lambda k=key: generated_stage(*k[1:4], bank.sectioned, laps=k[4])
                )
            slots[i] = slot
            then(int(k), slot, rng)
            if ahead:
                self._prefetch_next(rng)
        return slots

    def place(self, held: np.ndarray, stage: tracks.Stage, slot: int) -> int:
        """The slot of cars copied onto ``stage`` (a car state's; ``slot``: its slot in a
        fixed or list env), ``held``: the slots the cars hold now (-1 for none)."""
        if self.bank.mode != "random":
            return int(slot)
        for s in held:
            if s >= 0:
                self.bank.release(int(s))
        return self.bank.acquire_stage(stage, len(held))

    def adopt(self, stages: list[tracks.Stage | None], held: np.ndarray) -> None:
        """Take the slot stages of a saved state (``held``: the slot of each car that was
        reset); a fixed or list env's slots never change."""
        if self.bank.mode == "random":
            self.bank.adopt(stages, held)

    def _draw(self, rng: np.random.Generator, pool: tuple[int, int] | None) -> tuple:
        """The :func:`gen_key` of a car's next random stage, drawn from its stream ``rng``."""
        d = draw_random_stage(self.random_stage, rng, pool)
        return gen_key(d.seed, self.random_stage["length_m"], d.difficulty, d.laps)

    def _prefetch_next(self, rng: np.random.Generator, prebake: bool = True) -> None:
        """Ask for the stage the car's next reset will draw (its stream decides it; nothing
        draws from it before then unless that reset is seeded anew)."""
        peek = np.random.Generator(np.random.PCG64())
        peek.bit_generator.state = rng.bit_generator.state
        key = self._draw(peek, self.pool_now())
        if not self.bank.holds(key):  # a held level
            _, seed, length, diff, laps = key
            prefetch_stage(seed, length, diff, self.bank.sectioned, prebake, laps=laps)

    # ------------------------------------------------------------------ the stage pool
    def seed_pool(self, seed: int | None) -> None:
        """Start the stage pool (``random_stage.pool``) afresh: its windows drawn from
        ``seed`` (fresh entropy if None), the env's step count at 0. The envs call this at a
        reset of every car with an int seed; without a pool it only restarts the count."""
        #: the stage pool's seed (None until the first reset draws one) and the env steps
        #: since it was seeded (:meth:`tick` counts them)
        self.pool_seed: int | None = None if seed is None else int(seed)
        self.clock = 0
        self._pool_queue: list[tuple[int, float, int]] = []  # pool stages still to ask for
        self._pool_window = -1  # the window whose stages _pool_queue holds, and before it

    def pool_now(self) -> tuple[int, int] | None:
        """(pool seed, env step) a reset draws from now, or None without a pool."""
        if self.pool_size is None:
            return None
        if self.pool_seed is None:
            self.pool_seed = int(np.random.SeedSequence().entropy)
        return self.pool_seed, self.clock

    def tick(self) -> None:
        """One env step has passed (the envs call this once per ``step``, whichever cars it
        stepped or reset). With a stage pool, ask the prefetch worker for the stages of the
        current and the next pool window that no slot holds yet, as many as it keeps."""
        self.clock += 1
        if self.pool_size is None or self.pool_seed is None:
            return
        rs = self.random_stage
        window = self.clock // rs["pool_steps"]
        if window != self._pool_window:
            self._pool_window = window
            queue: list[tuple[int, float, int]] = []
            for w in (window, window + 1):
                drawn = pool_window(rs, self.pool_seed, w)
                queue.extend(zip(*(a.tolist() for a in drawn), strict=True))
            # the worker keeps PREFETCHER.capacity answers: asking further ahead is useless
            self._pool_queue = list(dict.fromkeys(queue))[: 2 * PREFETCHER.capacity]
        length, sec, q = rs["length_m"], self.bank.sectioned, self._pool_queue
        while q:  # until the worker takes no more
            seed, diff, laps = q[0]
            if not self.bank.holds(gen_key(seed, length, diff, laps)) and not prefetch_stage(
                seed, length, diff, sec, POOL_PREBAKE_M, limit=True, laps=laps
            ):
                break
            del q[0]

    def board_name(self, slot: int) -> str:
        """The name a run on the stage of ``slot`` is filed under: the stage's own name, but
        for a randomly drawn stage its exact name (:func:`drawn_stage_name`: its own rounds the
        difficulty and leaves out the laps, so it names several stages)."""
        key = self.bank.key_of(slot)
        if isinstance(key, tuple) and len(key) == 5 and key[0] == "gen":
            return drawn_stage_name(key[1], key[2], key[3], key[4])
        return self.bank.stage(slot).name

    # ------------------------------------------------------------------ state
    def records(self) -> list[dict[str, Any] | None]:
        """The slots' stages as a state holds them (:func:`stage_record`; None: no stage yet)."""
        return [None if s is None else stage_record(s) for s in self.bank.slots]

    def stages_of(self, records: list[Any]) -> list[tracks.Stage | None]:
        """The stages of a state's slot records (:meth:`records`). Changes nothing.

        Raises:
            StateError: a slot's stage cannot be rebuilt, or differs from the stage of this
                (fixed or list) env's slot.
        """
        stages: list[tracks.Stage | None] = []
        for i, rec in enumerate(records):
            if rec is None:
                stages.append(None)
                continue
            try:
                stg = stage_from_record(rec)
            except Exception as e:
                raise StateError(f"state slot {i}: cannot rebuild its stage: {e}") from None
            if self.bank.mode != "random" and stg.digest() != self.bank.slots[i].digest():
                raise StateError(f"state slot {i} is a different stage than this env's")
            stages.append(stg)
        return stages

    def car_records(self, slot: int, single: StageSource) -> tuple[list[Any], int]:
        """(slot records, the car's slot) of a one-car state of ``single`` (a one-car source
        of the same settings) whose car is on this source's slot ``slot``."""
        stage = self.bank.stage(slot)
        if single.bank.mode == "random":
            return [stage_record(stage)], 0
        return self.records(), slot

    def state(self) -> dict[str, Any]:
        """The entries a core state holds for the source: ``pool`` (seed and step count)
        with a stage pool, nothing without one (those states are unchanged)."""
        if self.pool_size is None:
            return {}
        return {"pool": {"seed": self.pool_seed, "clock": self.clock}}

    @property
    def state_keys(self) -> tuple[str, ...]:
        """The keys :meth:`state` returns."""
        return tuple(self.state())

    def state_problem(self, st: dict[str, Any]) -> str | None:
        """What is wrong with a state's source entries (:meth:`state`), or None."""
        if self.pool_size is None:
            return None
        problem = pool_record_problem(st["pool"], seed_may_be_none=True)
        return f"state['pool'] {problem}" if problem else None

    def restore(self, st: dict[str, Any]) -> None:
        """Take the source entries of a state :meth:`state_problem` accepted."""
        if self.pool_size is not None:
            self.seed_pool(st["pool"]["seed"])
            self.clock = int(st["pool"]["clock"])
