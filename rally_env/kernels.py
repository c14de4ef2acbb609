"""The env's per-step numba kernels: projection, timing, reward, termination, observation.

Everything here is per car and reads only that car's rows, so car k's results never depend on
how many cars are in the batch. Arithmetic is ``+ - * / sqrt floor`` (and the projection's
``atan2x``): bit-identical everywhere, with or without the JIT.

Per-car env state lives in two arrays with named columns (below): ``estate`` float64
(N, N_E) and ``eistate`` int64 (N, N_EI), plus ``etimes`` (N, lines) line-crossing times.
Timers count physics substeps (integers), so time limits are exact. The kernels take their
arrays as a few named records (see "records" below), and a step of one car runs as one small
function per phase (:func:`_post_car`).
"""

from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np
from numba import prange

from physics import layout as L
from physics.jit import njit, njit_inner
from physics.kernel import rotation_of
from physics.terrain import TM_TABLE, sample_surface, tile_at
from rally_env import spaces as SP
from rally_env import stages as S
from rally_env.config import REWARD_TERMS
from tracks.projection import project_batch

# ---------------------------------------------------------------- float env state, per car
E_S = 0  # projected arc length on the path (m)
E_RACE = 1  # stage position: distance along the stage from the start line (m), continuous
E_CREDIT = 2  # credited position (m): progress is paid for its increase
E_BEST = 3  # furthest credited position reached (m)
E_LAT = 4  # signed lateral offset (m, + left)
E_HERR = 5  # heading error (rad)
E_LEFT, E_RIGHT = 6, 7  # distance to the left / right edge (m, + on the road)
E_OFF_TRAVEL = 8  # distance driven since leaving the road (m)
E_STUCK_REF = 9  # credited position when the stuck timer last restarted (m)
E_FINISH_TIME = 10  # exact finish time (s), NaN until finished
E_PX, E_PY = 11, 12  # CG (x, y) at the last control step (m)
E_ACT = 13  # 13..16: the last action applied (steer, throttle, brake, handbrake)
E_TIMED = 17  # start-to-finish distance of the car's stage (m)
E_RACE_PREV = 18  # stage position one control step earlier (m)
E_PAID = 19  # progress paid this episode (m)
N_E = 20

# ------------------------------------------------------------------ int env state, per car
EI_SLOT = 0  # stage slot
EI_NEXT_LINE = 1  # index of the next timing line to cross
EI_END = 2  # end code (END_*), 0 while running
EI_OFF = 3  # 1 while the car's centre is beyond a road edge
EI_OFF_SUB = 4  # substeps continuously off the road
EI_STUCK_SUB = 5  # substeps since the credited position last grew by stuck_progress_m
EI_ROLL_SUB = 6  # substeps continuously rolled
EI_ROW = 7  # terrain-set row
EI_LIMIT_SUB = 8  # time limit in substeps
EI_STEPS = 9  # control steps this episode
N_EI = 10

# ------------------------------------------------------------------------------ end codes
END_NONE = 0
END_FINISHED = 1
END_OFF_STAGE = 2
END_ROLLED = 3
END_STUCK = 4
END_WRONG_WAY = 5
END_TIME_LIMIT = 6
END_REASONS: tuple[str, ...] = (
    "",
    "finished",
    "off_stage",
    "rolled",
    "stuck",
    "wrong_way",
    "time_limit",
)

# ---------------------------------------------------------------------------- reward terms
# REWARD_TERMS (``rally_env.config.REWARD_TABLE``' names): ``terms[k, T_*]`` per car
N_TERMS = len(REWARD_TERMS)


def _term(name: str) -> int:
    """The index of reward term ``name`` (a row of ``rally_env.config.REWARD_TABLE``)."""
    return REWARD_TERMS.index(name)


T_PROGRESS = _term("progress")
T_TIME = _term("time")
T_OFF_ROAD = _term("off_road")
T_CRASH = _term("crash")
T_FINISH = _term("finish")
T_ACTION_CHANGE = _term("action_change")

# ------------------------------------------------------------------------- config vector
# the termination rules (rally_env.config.TerminationConfig; times in substeps) and constants
C_OFF_MAX_M, C_OFF_MAX_SUB = 0, 1  # off the road: at most this far beyond an edge (m), this long
C_STUCK_SUB, C_STUCK_M = 2, 3  # stuck: this long without this much credited progress (m)
C_ROLL_UPZ, C_ROLL_SUB = 4, 5  # rolled: the body's up z below this, this long
C_WRONG_M = 6  # wrong way: this far behind the furthest credited position (m)
C_CUT_RATIO, C_CUT_SLACK = 7, 8  # cut allowance: x off-road travel + slack (m)
C_LINE_TOL, C_WINDOW, C_LINE_MISS = 9, 10, 11  # LINE_TOL_M, WINDOW_M, LINE_MISS_M
C_W0 = 12  # C_W0 + T_*: the reward weights, in REWARD_TERMS order (last: terms may be added)
N_C = C_W0 + N_TERMS

#: A gate crossing counts only if the stage position is within this distance of the line (m).
LINE_TOL_M = 30.0
#: A line passed by this much without its gate firing is timed from the stage position (m).
LINE_MISS_M = 2.0
#: On the road, the stage position may advance at most this many times the distance driven
#: (plus ``cut_slack_m``) in one step (the inside of the tightest corner allows about 4.3).
ONROAD_JUMP_RATIO = 5.0
#: Warm-start window of the projection (m).
WINDOW_M = 25.0

#: road-ahead bins: near and far end (m) and the window column (stages.AHEAD_WIDTHS_M) of each
_BINS = SP.ROAD_AHEAD_BINS_M
_AHEAD_LO = np.array([a for a, _ in _BINS], np.float64)
_AHEAD_HI = np.array([b for _, b in _BINS], np.float64)
_AHEAD_COL = np.array([S.AHEAD_WIDTHS_M.index(b - a) for a, b in _BINS], np.int64)
#: the narrowest bin width (m) and each bin's width as a whole multiple of it
_AHEAD_W0 = S.AHEAD_WIDTHS_M[0]
_AHEAD_MULT = np.array([round((b - a) / _AHEAD_W0) for a, b in _BINS], np.int64)


# ------------------------------------------------------------------------------- records
# The entry points take ``args`` = (obs_on, physics, terrain, stages, env, work, setup, out):
# the observation switches (:func:`_write_blocks`) and the records below, as plain tuples in
# their fields' order; ``_records`` names them. Why: docs/architecture.md, "The env kernels'
# records".


class Physics(NamedTuple):
    """The car rows of the :class:`physics.VehicleBatch` (``physics.layout`` names the
    columns)."""

    state: np.ndarray  # float64 (N, N_STATE or N_STATE_EXT)
    istate: np.ndarray  # int64 (N, N_ISTATE)
    params: np.ndarray  # float64 (N, N_PARAMS or N_PARAMS_EXT)


class Terrain(NamedTuple):
    """The :class:`physics.TerrainSet` tables the observation samples."""

    grip: np.ndarray  # float64 (rows, MAX_SURFACES): grip of each surface id, per terrain row
    surfaces: np.ndarray  # int8: the filled tiles' surface ids
    tiles: np.ndarray  # int64: offset of each tile's surfaces, -1 while not filled
    meta: np.ndarray  # float64 (rows, N_TERRAIN_META): the rows' tile grids


class EnvCars(NamedTuple):
    """The env state of every car: what a snapshot keeps (columns ``E_*`` and ``EI_*``)."""

    estate: np.ndarray  # float64 (N, N_E)
    eistate: np.ndarray  # int64 (N, N_EI)
    etimes: np.ndarray  # float64 (N, lines): crossing time of each timing line, NaN = not yet


class Work(NamedTuple):
    """Per-car working arrays: the last projection (its lookahead points also feed a later
    observation refresh) and scratch buffers (a row per car, so threads never share one)."""

    s: np.ndarray  # float64 (N,): projected arc length (m)
    lat: np.ndarray  # float64 (N,): signed lateral offset (m)
    herr: np.ndarray  # float64 (N,): heading error (rad)
    left: np.ndarray  # float64 (N,): distance to the left edge (m)
    right: np.ndarray  # float64 (N,): distance to the right edge (m)
    look: np.ndarray  # float64 (N, lookahead, 3): lookahead points, car frame, and curvature
    pos: np.ndarray  # float64 (N, 2): scratch, the projection's position
    fwd: np.ndarray  # float64 (N, 2): scratch, its forward direction
    sp: np.ndarray  # float64 (N,): scratch, its warm start
    vals: np.ndarray  # float64 (N, obs size): scratch, observation values before clipping


class Setup(NamedTuple):
    """What the env's settings fix for every step."""

    cfg: np.ndarray  # float64 (N_C,): rewards weights and termination rules (C_*)
    lookahead: np.ndarray  # float64 (lookahead,): lookahead distances (m)
    n_wheels: int
    obs_low: np.ndarray  # float64 (obs size,): observation bounds
    obs_high: np.ndarray  # float64 (obs size,)


class StepOut(NamedTuple):
    """What a step returns per car."""

    obs: np.ndarray  # float32 (N, obs size)
    rew: np.ndarray  # float64 (N,)
    terms: np.ndarray  # float64 (N, N_TERMS): the reward terms
    term: np.ndarray  # bool (N,): terminated
    trunc: np.ndarray  # bool (N,): truncated


@njit_inner(_nrt=False)
def _records(args):
    """The entry points' ``args`` with its records named (copies nothing)."""
    obs_on, phys, terr, stages, env, work, setup, out = args
    return (
        obs_on,
        Physics(*phys),
        Terrain(*terr),
        S.StageTables(*stages),
        EnvCars(*env),
        Work(*work),
        Setup(*setup),
        StepOut(*out),
    )


@njit_inner(_nrt=False)
def _project_car(k, state, stages, slot, s_prev, setup, work):
    """Project car ``k`` onto its slot's path (warm start ``s_prev``) into ``work``'s rows.
    Returns the arc length moved from ``s_prev`` (m; round a loop, the shorter way)."""
    table = stages.table
    so = int(table[slot, S.SL_SEG_OFF])
    ns = int(table[slot, S.SL_N_SEG])
    po = int(table[slot, S.SL_PT_OFF])
    rot = rotation_of(state, k)
    work.pos[k, 0] = state[k, L.POS_X]
    work.pos[k, 1] = state[k, L.POS_Y]
    work.fwd[k, 0] = rot[0]  # the forward axis on the ground plane
    work.fwd[k, 1] = rot[3]
    work.sp[k] = s_prev
    project_batch(
        stages.seg[so : so + ns],
        stages.tx[po : po + ns + 1],
        stages.ty[po : po + ns + 1],
        stages.curv[po : po + ns + 1],
        stages.hw[po : po + ns + 1],
        stages.px[po : po + ns + 1],
        stages.py[po : po + ns + 1],
        table[slot, S.SL_DS],
        table[slot, S.SL_LENGTH],
        table[slot, S.SL_CLOSED] > 0.5,
        work.pos[k : k + 1],
        work.fwd[k : k + 1],
        work.sp[k : k + 1],
        setup.cfg[C_WINDOW],
        setup.lookahead,
        work.s[k : k + 1],
        work.lat[k : k + 1],
        work.herr[k : k + 1],
        work.left[k : k + 1],
        work.right[k : k + 1],
        work.look[k : k + 1],
    )
    d = work.s[k] - s_prev
    if table[slot, S.SL_CLOSED] > 0.5:
        length = table[slot, S.SL_LENGTH]
        d -= length * math.floor(d / length + 0.5)
    return d


@njit_inner(_nrt=False)
def _clip(v, lo, hi):
    if v < lo:
        return lo
    if v > hi:
        return hi
    return v


@njit_inner(_nrt=False)
def _write_obs(k, obs_on, phys, terr, stages, env, work, setup, out):
    """Car ``k``'s observation into ``out.obs[k]`` (clipped to the bounds), through
    ``work.vals[k]``: the base block, then the switched blocks (:func:`_write_blocks`).

    ``obs_on`` holds the switched blocks' switches (``rally_env.spaces.obs_switches``).
    Returns 1 if a lookahead point's terrain tile was not filled yet, else 0. A value is scaled
    as ``x * (1.0 / SCALE)`` (numba folds the reciprocal), never ``x / SCALE``: other bits.
    """
    state = phys.state
    params = phys.params
    estate = env.estate
    look = work.look
    lookahead = setup.lookahead
    nw = setup.n_wheels
    vals = work.vals[k]
    vx = state[k, L.VEL_X]
    vy = state[k, L.VEL_Y]
    vz = state[k, L.VEL_Z]
    r00, r01, _r02, r10, r11, _r12, r20, r21, _r22 = rotation_of(state, k)
    vals[0] = math.sqrt(vx * vx + vy * vy + vz * vz) * (1.0 / SP.SPEED_SCALE_MPS)
    vals[1] = (r00 * vx + r10 * vy + r20 * vz) * (1.0 / SP.SPEED_SCALE_MPS)
    vals[2] = (r01 * vx + r11 * vy + r21 * vz) * (1.0 / SP.LATERAL_SPEED_SCALE_MPS)
    vals[3] = state[k, L.OMEGA_Z] * (1.0 / SP.YAW_RATE_SCALE_RADPS)
    vals[4] = -r20
    vals[5] = r21
    # per wheel, a run of n_wheels each: slip angle, slip ratio, load, grounded, grip
    static = params[k, L.P_MASS] * params[k, L.P_GRAVITY] / params[k, L.P_N_WHEELS]
    row = env.eistate[k, EI_ROW]
    for w in range(nw):
        vals[6 + w] = state[k, L.WL_SLIP_ANGLE + w] * (1.0 / SP.SLIP_ANGLE_SCALE_RAD)
        vals[6 + nw + w] = state[k, L.WL_SLIP_RATIO + w] * (1.0 / SP.SLIP_RATIO_SCALE)
        vals[6 + 2 * nw + w] = state[k, L.WL_LOAD + w] / static
        vals[6 + 3 * nw + w] = 1.0 if state[k, L.WL_GROUNDED + w] > 0.5 else 0.0
        vals[6 + 4 * nw + w] = terr.grip[row, int(state[k, L.WL_SURFACE + w])]
    i = 6 + 5 * nw
    left = estate[k, E_LEFT]
    right = estate[k, E_RIGHT]
    hw = 0.5 * (left + right)
    vals[i] = estate[k, E_HERR] * (1.0 / math.pi)
    vals[i + 1] = estate[k, E_LAT] / hw if hw > 0.0 else 0.0
    vals[i + 2] = left * (1.0 / SP.EDGE_SCALE_M)
    vals[i + 3] = right * (1.0 / SP.EDGE_SCALE_M)
    i += 4
    for q in range(lookahead.shape[0]):
        d = lookahead[q]
        vals[i] = look[k, q, 0] / d
        vals[i + 1] = look[k, q, 1] / d
        vals[i + 2] = look[k, q, 2] * SP.CURVATURE_SCALE_PER_M
        i += 3
    for a in range(4):
        vals[i + a] = estate[k, E_ACT + a]
    vals[i + 4] = estate[k, E_RACE] / estate[k, E_TIMED]
    i += 5
    # the switches as arguments: numba prunes the code behind a None one
    missed = _write_blocks(k, *obs_on, phys, terr, stages, env, work, setup, i)
    for j in range(out.obs.shape[1]):
        out.obs[k, j] = np.float32(_clip(vals[j], setup.obs_low[j], setup.obs_high[j]))
    return missed


@njit_inner(_nrt=False)
def _write_blocks(k, v1_on, road_ahead_on, ahead_apex_on, phys, terr, stages, env, work, setup, i):
    """The switched blocks of ``rally_env.spaces.OBS_BLOCKS``, in order, each behind its
    switch (``True`` or ``None``: numba prunes the code of a ``None`` one), from index ``i`` of
    ``work.vals[k]`` on. Returns the misses, as :func:`_write_obs`."""
    vals = work.vals[k]
    row = env.eistate[k, EI_ROW]
    missed = 0
    if v1_on is not None:
        i, missed = _write_obs_v1(k, phys, terr, row, work.look, setup.n_wheels, vals, i)
    if road_ahead_on is not None:
        i = _write_road_ahead(k, env, stages, terr.grip, row, vals, i)
    if ahead_apex_on is not None:
        i = _write_ahead_apex(k, env, stages, vals, i)
    return missed


@njit_inner(_nrt=False)
def _write_ahead_apex(k, env, stages, vals, i):
    """The apex block (``ahead_apex=True``): per road-ahead bin, where its sharpest corner
    lies, 0 at the bin's start to 1 at its end (the first sample of the largest |curvature|
    in the window the road-ahead block reads; 0.5 where the bin has no curve or lies past
    the finish)."""
    _slot, po, n, ds, closed, s = _path_at(k, env, stages)
    m = n - 1 if closed else n  # a loop's last sample repeats its first
    unit = max(1, int(math.floor(_AHEAD_W0 / ds + 0.5)))
    for b in range(_AHEAD_LO.shape[0]):
        vals[i + b] = 0.5
        j0 = _sample_index((s + _AHEAD_LO[b]) * (1.0 / ds), n, closed)
        if j0 < 0:
            continue
        width = _AHEAD_MULT[b] * unit
        best = 0.0
        for q in range(width):
            j = j0 + q
            if closed:
                j = j % m
            elif j >= n:
                break
            c = abs(stages.curv[po + j])
            if c > best:
                best = c
                vals[i + b] = q / width
    return i + _AHEAD_LO.shape[0]


@njit_inner(_nrt=False)
def _write_obs_v1(k, phys, terr, row, look, n_wheels, vals, i):
    """The fields Rally-v1 adds after v0's (see :class:`rally_env.spaces.ObsLayout`).

    Returns (next index, 1 if a lookahead point's terrain tile was not filled yet, else 0): the
    caller fills it and writes the observation again (see :func:`lookahead_misses`)."""
    state = phys.state
    istate = phys.istate
    params = phys.params
    ext = params[k, L.P_EXTENDED] > 0.5
    drivetrain = ext and params[k, L.PX_DRIVETRAIN] > 0.5
    nw = n_wheels
    if drivetrain and params[k, L.PX_REV_LIMIT] > 0.0:
        vals[i] = state[k, L.ENGINE_RPM] / params[k, L.PX_REV_LIMIT]
    else:
        vals[i] = 0.0
    vals[i + 1] = istate[k, L.I_GEAR] * (1.0 / SP.GEAR_SCALE) if drivetrain else 0.0
    # tire wear per wheel, damage, then the wheel rim speeds
    for w in range(nw):
        vals[i + 2 + w] = state[k, L.SXW_WEAR + w] if ext else 1.0
        radius = params[k, L.pw(w, L.PW_RADIUS)]
        vals[i + 3 + nw + w] = state[k, L.WL_OMEGA + w] * radius * (1.0 / SP.WHEEL_SPEED_SCALE_MPS)
    vals[i + 2 + nw] = state[k, L.SX_DAMAGE] if ext else 1.0
    i += 3 + 2 * nw
    # the surface under each lookahead point
    missed = 0
    for q in range(look.shape[1]):
        ok, wx, wy = _look_point(k, state, look, q)
        if ok:
            sid = sample_surface(terr.surfaces, terr.tiles, terr.meta, row, wx, wy)
            if sid < 0:
                missed = 1
                vals[i] = np.nan
            else:
                vals[i] = terr.grip[row, sid]
        else:
            vals[i] = 0.0
        i += 1
    return i, missed


@njit_inner(_nrt=False)
def _path_at(k, env, stages):
    """Car ``k``'s slot, its path (first sample's row in the point tables, samples, spacing
    (m), closed) and the car's projected arc length on it (m; 0 while not finite)."""
    table = stages.table
    slot = env.eistate[k, EI_SLOT]
    s = env.estate[k, E_S]
    return (
        slot,
        int(table[slot, S.SL_PT_OFF]),
        int(table[slot, S.SL_N_SEG]) + 1,
        table[slot, S.SL_DS],
        table[slot, S.SL_CLOSED] > 0.5,
        s if math.isfinite(s) else 0.0,
    )


@njit_inner(_nrt=False)
def _sample_index(u, n, closed):
    """Index of the sample at ``u`` samples along a slot's path (loops wrap, open paths: -1
    past the end)."""
    j = int(math.floor(u))
    if closed:
        m = n - 1
        return j % m if m > 0 else 0
    if j < 0:
        return 0
    return j if j < n else -1


@njit_inner(_nrt=False)
def _write_road_ahead(k, env, stages, tgrip, row, vals, i):
    """The road-ahead block (see :class:`rally_env.spaces.ObsLayout`, ``road_ahead=True``):
    per bin ahead of the car's projected position the sharpest curvature and crest, the
    elevation at the bin's end and the lowest surface grip; then the distance to the
    finish."""
    table = stages.table
    estate = env.estate
    slot, po, n, ds, closed, s = _path_at(k, env, stages)
    length = table[slot, S.SL_LENGTH]
    inv_ds = 1.0 / ds
    here = _sample_index(s * inv_ds + 0.5, n, closed)
    z0 = stages.z[po + (here if here >= 0 else n - 1)]
    nb = _AHEAD_LO.shape[0]
    for b in range(nb):
        j = _sample_index((s + _AHEAD_LO[b]) * inv_ds, n, closed)
        c = _AHEAD_COL[b]
        vals[i + b] = stages.wcurv[po + j, c] * SP.CURVATURE_SCALE_PER_M if j >= 0 else 0.0
        vals[i + nb + b] = stages.wcrest[po + j, c] * SP.CREST_SCALE_M if j >= 0 else 0.0
        e = _sample_index((s + _AHEAD_HI[b]) * inv_ds + 0.5, n, closed)
        dz = stages.z[po + (e if e >= 0 else n - 1)] - z0
        vals[i + 2 * nb + b] = dz * (1.0 / SP.ELEVATION_SCALE_M)
    # lowest grip of the sections each bin overlaps
    so = int(table[slot, S.SL_SEC_OFF])
    ns = int(table[slot, S.SL_N_SEC])
    for b in range(nb):
        a = s + _AHEAD_LO[b]
        e = s + _AHEAD_HI[b]
        g = 2.0
        for q in range(ns):
            lo = stages.sec_start[so + q]
            hi = stages.sec_start[so + q + 1] if q + 1 < ns else length
            if closed:  # the bin in the section's frame, shifted by whole laps
                a_w = a - length * math.floor(a / length)
                e_w = a_w + (e - a)
                hit = (lo < e_w and hi > a_w) or (lo < e_w - length and hi > a_w - length)
            else:
                hit = (lo < e and hi > a) or (q == ns - 1 and a >= hi)
            if hit:
                gq = tgrip[row, stages.sec_sid[so + q]]
                if gq < g:
                    g = gq
        vals[i + 3 * nb + b] = g
    i += 4 * nb
    left = estate[k, E_TIMED] - estate[k, E_RACE]
    vals[i] = left * (1.0 / SP.TO_FINISH_SCALE_M) if left > 0.0 else 0.0
    return i + 1


@njit_inner(_nrt=False)
def _look_point(k, state, look, q):
    """(finite, x, y): lookahead point ``q`` of car ``k`` back in the world frame."""
    rot = rotation_of(state, k)
    fx = rot[0]
    fy = rot[3]
    fn = math.sqrt(fx * fx + fy * fy)
    if fn > 0.0:
        fx /= fn
        fy /= fn
    lx = look[k, q, 0]
    ly = look[k, q, 1]
    if not (math.isfinite(lx) and math.isfinite(ly) and fn > 0.0):
        return False, 0.0, 0.0
    px = state[k, L.POS_X]
    py = state[k, L.POS_Y]
    return True, px + lx * fx - ly * fy, py + lx * fy + ly * fx


@njit(cache=True)
def lookahead_misses(cars, state, look, eistate, ttiles, tmeta, out):
    """(car, row, tile) of every lookahead point whose terrain tile is not filled, for cars
    ``cars``. Returns the count (it may pass ``out``'s length: the rest is dropped)."""
    n = 0
    for ii in range(cars.shape[0]):
        k = cars[ii]
        row = eistate[k, EI_ROW]
        for q in range(look.shape[1]):
            ok, wx, wy = _look_point(k, state, look, q)
            if not ok:
                continue
            lin = tile_at(tmeta, row, wx, wy)
            if ttiles[int(tmeta[row, TM_TABLE]) + lin] < 0:
                if n < out.shape[0]:
                    out[n, 0] = k
                    out[n, 1] = row
                    out[n, 2] = lin
                n += 1
    return n


@njit(cache=True)
def refresh_obs(cars, args):
    """Write the observation of cars ``cars`` again (after their lookahead tiles were
    filled); ``args`` as :func:`reset_cars`'. Returns the misses."""
    missed = 0
    for ii in range(cars.shape[0]):
        missed += _refresh_car(cars[ii], args)
    return missed


@njit_inner(_nrt=False)
def _refresh_car(k, args):
    """One car of :func:`refresh_obs` (here, not in the entry point: the records a helper
    compiled without the refcount runtime returns must not reach code that has it)."""
    return _write_obs(k, *_records(args))


@njit_inner(_nrt=False)
def _arm_gate(k, state, table, line_gate, slot, line):
    g = int(table[slot, S.SL_LINE_OFF]) + line
    for c in range(4):  # x0, y0, x1, y1
        state[k, L.GATE_X0 + c] = line_gate[g, c]
    state[k, L.GATE_TIME] = -1.0


#: Reach of a control step when looking for two timing lines in it: twice the distance at the
#: current speed plus this much acceleration (m/s^2) over the step, plus a slack (m).
REACH_ACCEL_MPS2 = 20.0
REACH_SLACK_M = 10.0


@njit(cache=True)
def lines_within_reach(cars, state, estate, eistate, table, line_race, dt, out):
    """``out[i] = True`` when car ``cars[i]`` may cross two or more timing lines in the coming
    control step of ``dt`` seconds (the second line ahead is within its reach); those cars
    are stepped substep by substep (:func:`collect_line_crossings`). Returns whether any is."""
    anyone = False
    for ii in range(cars.shape[0]):
        k = cars[ii]
        out[ii] = False
        if eistate[k, EI_END] != END_NONE:
            continue
        slot = eistate[k, EI_SLOT]
        li = eistate[k, EI_NEXT_LINE]
        if li + 1 >= int(table[slot, S.SL_N_LINES]):
            continue
        vx = state[k, L.VEL_X]
        vy = state[k, L.VEL_Y]
        vz = state[k, L.VEL_Z]
        v = math.sqrt(vx * vx + vy * vy + vz * vz)
        reach = 2.0 * (v + REACH_ACCEL_MPS2 * dt) * dt + REACH_SLACK_M
        second = line_race[int(table[slot, S.SL_LINE_OFF]) + li + 1]
        out[ii] = second - estate[k, E_RACE] < reach
        anyone = anyone or out[ii]
    return anyone


@njit_inner(_nrt=False)
def _gate_fraction(state, k):
    """Where in the last substep the CG segment (PREV -> POS) crossed car ``k``'s armed gate
    right to left, as a fraction of the substep, or -1: the physics' own gate test
    (``physics.kernel``, the same operations in the same order, so the same bits)."""
    gx0 = state[k, L.GATE_X0]
    gy0 = state[k, L.GATE_Y0]
    gdx = state[k, L.GATE_X1] - gx0
    gdy = state[k, L.GATE_Y1] - gy0
    if gdx == 0.0 and gdy == 0.0:
        return -1.0
    px = state[k, L.PREV_X]
    py = state[k, L.PREV_Y]
    npx = state[k, L.POS_X]
    npy = state[k, L.POS_Y]
    side0 = gdx * (py - gy0) - gdy * (px - gx0)
    side1 = gdx * (npy - gy0) - gdy * (npx - gx0)
    if not (side0 < 0.0 and side1 >= 0.0):
        return -1.0
    f = side0 / (side0 - side1)
    cx = px + (npx - px) * f
    cy = py + (npy - py) * f
    along = ((cx - gx0) * gdx + (cy - gy0) * gdy) / (gdx * gdx + gdy * gdy)
    if along >= 0.0 and along <= 1.0:
        return f
    return -1.0


@njit(cache=True)
def collect_line_crossings(cars, state, istate, eistate, etimes, table, line_gate):
    """After one physics substep of cars that may cross several lines in a control step: a
    crossing of the armed gate becomes its line's pending time (``etimes``, taken or dropped
    by the control step's timing) and the next line's gate is armed and tested against the
    same substep's CG segment (lines closer than a substep's travel), so each line is timed
    inside the substep that crossed it."""
    for ii in range(cars.shape[0]):
        k = cars[ii]
        if state[k, L.GATE_TIME] < 0.0:
            continue
        slot = eistate[k, EI_SLOT]
        n_lines = int(table[slot, S.SL_N_LINES])
        j = eistate[k, EI_NEXT_LINE]
        while j < n_lines and not math.isnan(etimes[k, j]):
            j += 1
        while j < n_lines and state[k, L.GATE_TIME] >= 0.0:
            etimes[k, j] = state[k, L.GATE_TIME]
            j += 1
            if j >= n_lines:
                break  # the last line is crossed: its gate stays fired
            _arm_gate(k, state, table, line_gate, slot, j)
            f = _gate_fraction(state, k)
            if f >= 0.0:  # crossed in the same substep; the physics' time formula
                state[k, L.GATE_TIME] = (istate[k, L.I_SUBSTEPS] - 1 + f) * L.DT


@njit(cache=True)
def reset_cars(cars, args):
    """Initialise the env state of freshly placed cars (slot and row already in eistate),
    arm their first gate and write their first observation. Returns the number of cars whose
    observation met a terrain tile not filled yet (see :func:`refresh_obs`).

    ``args``: the observation switches and the records (see "records" above)."""
    missed = 0
    for ii in range(cars.shape[0]):
        missed += _reset_car(cars[ii], args)
    return missed


@njit_inner(_nrt=False)
def _reset_car(k, args):
    """One car of :func:`reset_cars`."""
    obs_on, ph, te, st, en, wo, se, ou = _records(args)
    state = ph.state
    table = st.table
    estate = en.estate
    eistate = en.eistate
    slot = eistate[k, EI_SLOT]
    estate[k] = 0.0
    en.etimes[k] = np.nan
    for c in range(eistate.shape[1]):
        if c != EI_SLOT and c != EI_ROW:
            eistate[k, c] = 0
    d = _project_car(k, state, st, slot, table[slot, S.SL_START_S], se, wo)
    _keep_position(k, estate, wo, d, d, d, d)
    estate[k, E_STUCK_REF] = d
    estate[k, E_FINISH_TIME] = np.nan
    estate[k, E_PX] = state[k, L.POS_X]
    estate[k, E_PY] = state[k, L.POS_Y]
    estate[k, E_TIMED] = table[slot, S.SL_TIMED]
    eistate[k, EI_OFF] = 1 if (wo.left[k] < 0.0 or wo.right[k] < 0.0) else 0
    eistate[k, EI_LIMIT_SUB] = int(math.ceil(table[slot, S.SL_TIME_LIMIT] * L.SUBSTEP_HZ - 1e-6))
    _arm_gate(k, state, table, st.line_gate, slot, np.int64(0))  # not a literal: one compile
    return _write_obs(k, obs_on, ph, te, st, en, wo, se, ou)


@njit_inner(_nrt=False)
def _credit(k, n_sub, env, cfg, d, race, travel, off):
    """Credited progress: paid only for distance driven on the road; backward motion is always
    charged; running ahead off the road is forfeited, and running ahead of the credited
    position by more than the cut allowance is cutting the stage. Returns (pay, credit,
    off-road travel, cut)."""
    estate = env.estate
    eistate = env.eistate
    credit = estate[k, E_CREDIT]
    off_travel = estate[k, E_OFF_TRAVEL]
    pay = 0.0
    cut = False
    if off:
        off_travel += travel
        if race < credit:
            pay = race - credit
            credit = race
        elif race - credit > cfg[C_CUT_RATIO] * off_travel + cfg[C_CUT_SLACK]:
            cut = True
        eistate[k, EI_OFF_SUB] += n_sub
    else:
        if eistate[k, EI_OFF] == 1:
            gap = race - credit
            if gap > cfg[C_CUT_RATIO] * off_travel + cfg[C_CUT_SLACK]:
                cut = True
            elif gap > 0.0:
                credit = race
        elif d > ONROAD_JUMP_RATIO * travel + cfg[C_CUT_SLACK]:
            cut = True  # the projection jumped to another part of the stage
        if not cut:
            pay = race - credit
            credit = race
        off_travel = 0.0
        eistate[k, EI_OFF_SUB] = 0
    return pay, credit, off_travel, cut


@njit_inner(_nrt=False)
def _stuck_and_roll(k, n_sub, state, env, cfg, credit):
    """The furthest credited position, the stuck timer (restarted whenever it grew by
    ``stuck_progress_m``) and the rolled timer. Returns (best, the body's up z)."""
    estate = env.estate
    eistate = env.eistate
    best = max(estate[k, E_BEST], credit)
    if best >= estate[k, E_STUCK_REF] + cfg[C_STUCK_M]:
        estate[k, E_STUCK_REF] = best
        eistate[k, EI_STUCK_SUB] = 0
    else:
        eistate[k, EI_STUCK_SUB] += n_sub
    up_z = rotation_of(state, k)[8]
    if up_z < cfg[C_ROLL_UPZ]:
        eistate[k, EI_ROLL_SUB] += n_sub
    else:
        eistate[k, EI_ROLL_SUB] = 0
    return best, up_z


@njit_inner(_nrt=False)
def _time_lines(k, dt, phys, stages, env, cfg, race_prev, race, off, off_dist, cut):
    """Timing lines: the physics gate times the crossing inside the substep. A car that may
    cross several lines in one control step was stepped substep by substep with each crossing
    kept as its line's pending time (:func:`collect_line_crossings`); every line crossed is
    timed here, in order, whatever their spacing. Returns True when the finish was crossed."""
    state = phys.state
    table = stages.table
    etimes = env.etimes
    eistate = env.eistate
    slot = eistate[k, EI_SLOT]
    finished = False
    n_lines = int(table[slot, S.SL_N_LINES])
    li = eistate[k, EI_NEXT_LINE]
    if li < n_lines:
        lo = int(table[slot, S.SL_LINE_OFF])
        pending = not math.isnan(etimes[k, li])
        while li < n_lines and not cut:
            lr = stages.line_race[lo + li]
            gt = state[k, L.GATE_TIME]
            crossed = False
            tcross = 0.0
            if pending and not math.isnan(etimes[k, li]):
                if abs(race - lr) <= cfg[C_LINE_TOL]:
                    crossed = True
                    tcross = etimes[k, li]
            elif not pending and gt >= 0.0:
                if abs(race - lr) <= cfg[C_LINE_TOL]:
                    crossed = True
                    tcross = gt
                else:
                    state[k, L.GATE_TIME] = -1.0  # another part of the stage: re-arm
            elif (
                race > lr + cfg[C_LINE_MISS]
                and race_prev < lr + cfg[C_LINE_MISS]
                and (not off or off_dist <= cfg[C_OFF_MAX_M])
            ):
                t1 = phys.istate[k, L.I_SUBSTEPS] * L.DT
                f = (lr - race_prev) / (race - race_prev)
                f = _clip(f, 0.0, 1.0)
                crossed = True
                tcross = t1 - dt + f * dt
            if not crossed:
                break
            etimes[k, li] = tcross
            li += 1
            eistate[k, EI_NEXT_LINE] = li
            if li < n_lines:
                _arm_gate(k, state, table, stages.line_gate, slot, li)
            else:
                finished = True
                env.estate[k, E_FINISH_TIME] = tcross
        if pending:  # crossings not taken are dropped; the next line's gate is armed
            for j in range(li, n_lines):
                etimes[k, j] = math.nan
            if li < n_lines:
                _arm_gate(k, state, table, stages.line_gate, slot, li)
    return finished


@njit_inner(_nrt=False)
def _end_code(k, istate, env, cfg, finished, cut, off, off_dist, race, best, up_z):
    """Why car ``k``'s episode ends this step (END_*), END_NONE while it runs on (and for a
    car whose episode had already ended)."""
    eistate = env.eistate
    end = END_NONE
    if eistate[k, EI_END] == END_NONE:
        if finished:
            end = END_FINISHED
        elif eistate[k, EI_ROLL_SUB] >= cfg[C_ROLL_SUB] and up_z < cfg[C_ROLL_UPZ]:
            end = END_ROLLED
        elif cut or (
            off and (off_dist > cfg[C_OFF_MAX_M] or eistate[k, EI_OFF_SUB] > cfg[C_OFF_MAX_SUB])
        ):
            end = END_OFF_STAGE
        elif best - race > cfg[C_WRONG_M]:
            end = END_WRONG_WAY
        elif eistate[k, EI_STUCK_SUB] >= cfg[C_STUCK_SUB]:
            end = END_STUCK
        elif istate[k, L.I_SUBSTEPS] >= eistate[k, EI_LIMIT_SUB]:
            end = END_TIME_LIMIT
    return end


@njit_inner(_nrt=False)
def _reward(k, dt, actions, env, cfg, out, pay, off, end):
    """The reward terms, their sum and the terminated / truncated flags; a running car's
    paid progress and end code are recorded (a car whose episode had ended earns nothing)."""
    estate = env.estate
    eistate = env.eistate
    terms = out.terms
    terms[k] = 0.0
    if eistate[k, EI_END] == END_NONE:
        terms[k, T_PROGRESS] = cfg[C_W0 + T_PROGRESS] * pay
        terms[k, T_TIME] = -cfg[C_W0 + T_TIME] * dt
        if off:
            terms[k, T_OFF_ROAD] = -cfg[C_W0 + T_OFF_ROAD] * dt
        if end == END_OFF_STAGE or end == END_ROLLED or end == END_STUCK or (end == END_WRONG_WAY):
            terms[k, T_CRASH] = -cfg[C_W0 + T_CRASH]
        if end == END_FINISHED:
            terms[k, T_FINISH] = cfg[C_W0 + T_FINISH]
        da = 0.0
        for a in range(4):
            e = actions[k, a] - estate[k, E_ACT + a]
            da += e * e
        terms[k, T_ACTION_CHANGE] = -cfg[C_W0 + T_ACTION_CHANGE] * da
        estate[k, E_PAID] += pay
        eistate[k, EI_END] = end
    r = 0.0
    for t in range(N_TERMS):
        r += terms[k, t]
    out.rew[k] = r
    e_now = eistate[k, EI_END]
    out.term[k] = e_now != END_NONE and e_now != END_TIME_LIMIT
    out.trunc[k] = e_now == END_TIME_LIMIT


@njit_inner(_nrt=False)
def _keep_position(k, estate, work, race_prev, race, credit, best):
    """Car ``k``'s projection (``work``) and stage positions into its env state."""
    estate[k, E_S] = work.s[k]
    estate[k, E_RACE_PREV] = race_prev
    estate[k, E_RACE] = race
    estate[k, E_CREDIT] = credit
    estate[k, E_BEST] = best
    estate[k, E_LAT] = work.lat[k]
    estate[k, E_HERR] = work.herr[k]
    estate[k, E_LEFT] = work.left[k]
    estate[k, E_RIGHT] = work.right[k]


@njit_inner(_nrt=False)
def _store(k, actions, env, work, race_prev, race, credit, best, off_travel, px, py, off):
    """Keep this step's projection, progress, position and action for the next one."""
    estate = env.estate
    _keep_position(k, estate, work, race_prev, race, credit, best)
    estate[k, E_OFF_TRAVEL] = off_travel
    estate[k, E_PX] = px
    estate[k, E_PY] = py
    for a in range(4):
        estate[k, E_ACT + a] = actions[k, a]
    env.eistate[k, EI_OFF] = 1 if off else 0
    env.eistate[k, EI_STEPS] += 1


@njit_inner(_nrt=False)
def _post_car(k, n_sub, actions, args):
    """One car of :func:`post_step`: project, credit, time, terminate, reward, store,
    observe (in that order: each reads what the ones before it wrote)."""
    obs_on, ph, te, st, en, wo, se, ou = _records(args)
    state = ph.state
    estate = en.estate
    cfg = se.cfg
    dt = n_sub * L.DT
    d = _project_car(k, state, st, en.eistate[k, EI_SLOT], estate[k, E_S], se, wo)
    race_prev = estate[k, E_RACE]
    race = race_prev + d
    left = wo.left[k]
    right = wo.right[k]
    off = left < 0.0 or right < 0.0
    off_dist = -min(left, right)
    px = state[k, L.POS_X]
    py = state[k, L.POS_Y]
    dx = px - estate[k, E_PX]
    dy = py - estate[k, E_PY]
    travel = math.sqrt(dx * dx + dy * dy)
    pay, credit, off_travel, cut = _credit(k, n_sub, en, cfg, d, race, travel, off)
    best, up_z = _stuck_and_roll(k, n_sub, state, en, cfg, credit)
    finished = _time_lines(k, dt, ph, st, en, cfg, race_prev, race, off, off_dist, cut)
    end = _end_code(k, ph.istate, en, cfg, finished, cut, off, off_dist, race, best, up_z)
    _reward(k, dt, actions, en, cfg, ou, pay, off, end)
    _store(k, actions, en, wo, race_prev, race, credit, best, off_travel, px, py, off)
    return _write_obs(k, obs_on, ph, te, st, en, wo, se, ou)


@njit(cache=True)
def post_step(cars, n_sub, actions, args):
    """After the physics step of cars ``cars``: project, time, reward, terminate, observe.

    ``n_sub`` is the step's substeps, ``actions`` (N, 4) the actions applied, ``args`` as
    :func:`reset_cars`'. Returns the number of cars whose observation met a terrain tile not
    filled yet.
    """
    missed = 0
    for ii in range(cars.shape[0]):
        missed += _post_car(cars[ii], n_sub, actions, args)
    return missed


@njit(cache=True, parallel=True)
def post_step_parallel(cars, n_sub, actions, args):
    """As :func:`post_step`, with the cars spread over threads (``prange`` over cars only)."""
    # a parallel loop cannot take a tuple of tuples: it takes the records one by one
    obs_on, phys, terr, stages, env, work, setup, out = args
    missed = 0
    for ii in prange(cars.shape[0]):
        missed += _post_car_of(
            cars[ii], n_sub, actions, obs_on, phys, terr, stages, env, work, setup, out
        )
    return missed


@njit_inner(_nrt=False)
def _post_car_of(k, n_sub, actions, obs_on, phys, terr, stages, env, work, setup, out):
    """:func:`_post_car` from the records one by one (the ``prange`` loop's call)."""
    args = (obs_on, phys, terr, stages, env, work, setup, out)
    return _post_car(k, n_sub, actions, args)
