"""The ``info`` contract: every key, its type, and the one function that builds it.

Every value is a number, a bool or a fixed-shape numeric array (docs/env.md, "Info"): arrays
over cars in :class:`rally_env.RallyVectorEnv`; in :class:`rally_env.RallyEnv` per-car arrays,
0-d for a scalar rather than a Python scalar (torchrl's info reader needs a ``dtype`` and
Gymnasium's vector envs stack a Python bool but not a ``numpy.bool_``; a 0-d array satisfies
both). Strings have numeric codes (``end_code`` indexes :data:`END_REASONS`, see
:func:`end_reason`); reward terms are flat ``reward_<term>`` keys (:func:`reward_terms`);
"not yet" is NaN, in the single env a :class:`NanEqualArray` so two identical runs have equal
info dicts. :func:`build_info` is the only place an info dict is made.
"""

from __future__ import annotations

import math
from typing import Any, NamedTuple

import numpy as np

from physics import layout as L
from physics.jit import njit
from rally_env import kernels as K
from rally_env import stages as S

# ``core`` below is a :class:`rally_env.core.RallyCore` (not imported: core imports this module)
RallyCore = Any

#: ``end_code`` -> why the episode ended (``""`` while running); see docs/env.md.
END_REASONS: tuple[str, ...] = K.END_REASONS

#: Reward terms, each reported as ``info["reward_<term>"]``.
REWARD_TERMS: tuple[str, ...] = K.REWARD_TERMS

#: The vehicle values drawn per reset with randomization on (in draw order).
RANDOMIZED_SCALARS: tuple[str, ...] = (
    "mass_kg",
    "power_w",
    "peak_slip_angle_rad",
    "load_sensitivity",
)
#: Drawn randomization values reported as ``info["randomization_<name>"]`` (randomize on);
#: ``section_mu_scale`` is (MAX_SECTION_IDS,), NaN past the stage's sections.
RANDOMIZATION_KEYS: tuple[str, ...] = (*RANDOMIZED_SCALARS, "section_mu_scale")

#: Checkpoints of a generated point-to-point stage (``tracks.generate``: at 1/4, 2/4 and 3/4
#: of the timed length): the ``checkpoint_times_s`` width with ``stage="random"``.
GENERATED_CHECKPOINTS = 3

#: Keys every step's ``info`` carries, in this order (the vector env: arrays over cars).
INFO_KEYS: tuple[str, ...] = (
    "stage_index",
    "stage_seed",
    "stage_time_s",
    "progress_m",
    "credited_progress_m",
    "stage_length_m",
    "speed_mps",
    "lateral_offset_m",
    "heading_error_rad",
    "off_road",
    "finished",
    "finish_time_s",
    "checkpoint_times_s",
    "n_checkpoints",
    "lap",
    "wheel_loads_n",
    "slip_angles_rad",
    "position_m",
    "end_code",
    *(f"reward_{t}" for t in REWARD_TERMS),
)

#: Keys ``Rally-v1`` adds to ``info`` (after :data:`INFO_KEYS`).
INFO_KEYS_V1: tuple[str, ...] = (
    "gear",
    "engine_rpm",
    "tire_wear",
    "damage",
    "max_impact_mps",
    "slip_ratios",
)


class NanEqualArray(np.ndarray):
    """A float array whose ``==``, ``!=``, ``np.allclose``, ``np.isclose`` and
    ``np.array_equal`` treat NaN as equal to NaN (a time not reached yet equals another).

    Everything else is an ordinary ``numpy.ndarray`` (``float(a)``, ``math.isnan(a)``,
    arithmetic); Gymnasium and torchrl stack it like any float array.
    """

    def __eq__(self, other: Any) -> Any:  # type: ignore[override]
        a, b = np.asarray(self), np.asarray(other)
        try:
            return (a == b) | (np.isnan(a) & np.isnan(b))
        except TypeError:
            return a == b

    def __ne__(self, other: Any) -> Any:  # type: ignore[override]
        return ~self.__eq__(other)

    __hash__ = None  # type: ignore[assignment]

    def __array_function__(self, func: Any, types: Any, args: Any, kwargs: Any) -> Any:
        if func in (np.allclose, np.isclose, np.array_equal):
            kwargs = {**kwargs, "equal_nan": True}
        return super().__array_function__(func, types, args, kwargs)


# rows of the blocks build_info fills (one column per car); _fill_cars writes them in order
_I_KEYS = ("stage_index", "stage_seed", "n_checkpoints", "lap", "end_code", "gear")
_B_KEYS = ("off_road", "finished")
_ARRAY_KEYS = ("checkpoint_times_s", "wheel_loads_n", "slip_angles_rad", "position_m")
#: the scalar float keys in INFO_KEYS order: stage time, progress, credited, length, speed,
#: lateral offset, heading error, finish time, then the reward terms
_F_KEYS = tuple(k for k in INFO_KEYS if k not in (*_I_KEYS, *_B_KEYS, *_ARRAY_KEYS))
_F_ROWS = (*_F_KEYS, "engine_rpm", "damage", "max_impact_mps")  # then Rally-v1's
N_F = len(_F_ROWS)


@njit(cache=True)
def _fill_cars(
    idx, estate, eistate, state, istate, terms, etimes, table, seeds, laps, flags,
    out_f, out_i, out_b, out_cp, out_w,
):  # fmt: skip
    """Fill the info blocks of cars ``idx`` (one column / row per car).

    One compiled pass for any number of cars (numpy indexing from Python would cost about
    twice the single env's whole info dict). ``flags``: [random stage mode,
    version >= 1, extended physics state, wheels]. ``out_f`` (N_F, M), ``out_i`` (6, M),
    ``out_b`` (2, M), ``out_cp`` (M, C), ``out_w`` (M, 4 wheels + 3): loads, slip angles,
    slip ratios, wear, then the position.
    """
    random_mode = flags[0] != 0
    v1 = flags[1] != 0
    ext = flags[2] != 0
    nw = int(flags[3])
    width = out_cp.shape[1]
    have = etimes.shape[1] - 1
    nterm = terms.shape[1]
    f1 = 8 + nterm
    for i in range(idx.shape[0]):
        k = int(idx[i])
        slot = int(eistate[k, K.EI_SLOT])
        end = int(eistate[k, K.EI_END])
        n_cp = max(int(table[slot, S.SL_N_LINES]) - 1, 0)
        vx = state[k, L.VEL_X]
        vy = state[k, L.VEL_Y]
        vz = state[k, L.VEL_Z]
        out_f[0, i] = istate[k, L.I_SUBSTEPS] / L.SUBSTEP_HZ
        out_f[1, i] = estate[k, K.E_RACE]
        out_f[2, i] = estate[k, K.E_BEST]
        out_f[3, i] = estate[k, K.E_TIMED]
        out_f[4, i] = math.sqrt(vx * vx + vy * vy + vz * vz)
        out_f[5, i] = estate[k, K.E_LAT]
        out_f[6, i] = estate[k, K.E_HERR]
        out_f[7, i] = estate[k, K.E_FINISH_TIME]
        for t in range(nterm):
            out_f[8 + t, i] = terms[k, t]
        lap = 1
        if table[slot, S.SL_CLOSED] > 0.5:
            lap = int(math.floor(estate[k, K.E_BEST] / table[slot, S.SL_LENGTH])) + 1
            lap = min(max(lap, 1), laps[slot])
        out_i[0, i] = -1 if random_mode else slot
        out_i[1, i] = seeds[slot]
        out_i[2, i] = n_cp
        out_i[3, i] = lap
        out_i[4, i] = end
        out_i[5, i] = istate[k, L.I_GEAR] if v1 else 0
        out_b[0, i] = eistate[k, K.EI_OFF] == 1
        out_b[1, i] = end == K.END_FINISHED
        for j in range(width):
            out_cp[i, j] = etimes[k, j] if j < n_cp and j < have else math.nan
        for w in range(nw):
            out_w[i, w] = state[k, L.WL_LOAD + w]
            out_w[i, nw + w] = state[k, L.WL_SLIP_ANGLE + w]
            out_w[i, 2 * nw + w] = state[k, L.WL_SLIP_RATIO + w]
            out_w[i, 3 * nw + w] = state[k, L.SXW_WEAR + w] if ext else 1.0
        for c in range(3):
            out_w[i, 4 * nw + c] = state[k, L.POS_X + c]
        out_f[f1, i] = state[k, L.ENGINE_RPM] if v1 else 0.0
        out_f[f1 + 1, i] = state[k, L.SX_DAMAGE] if ext else 1.0
        out_f[f1 + 2, i] = state[k, L.SX_MAX_IMPACT] if ext else 0.0


def build_info(core: RallyCore, cars: Any = None) -> dict[str, np.ndarray]:
    """The info of all cars, of ``cars`` (int64 indices) or of one car (an ``int``).

    The one place an info dict is built: one compiled pass fills a few blocks allocated for
    this call, and every value is a view of them (so none shares memory with the env or with
    another call's info). What does not change over the env's life (the keys, where each
    value sits in the blocks, the kernel's flags) is worked out once per core.

    Args:
        core: the env's :class:`rally_env.core.RallyCore`.
        cars: ``None`` (all cars), an int64 index array, or an ``int`` ``k``: car ``k`` as the
            single env reports it (per-car shapes, 0-d for scalars; the values that can be
            NaN are :class:`NanEqualArray`).

    Returns:
        ``{key: array (M, *shape)}`` (or ``(*shape)`` for one car) in :data:`INFO_KEYS` order
        (+ :data:`INFO_KEYS_V1` for version 1, + ``randomization_*`` with randomization on).
    """
    spec = core.info_spec or _spec(core)
    one = isinstance(cars, (int, np.integer))
    if one:
        k = int(cars)
        idx = spec.rows.get(k)
        if idx is None:
            idx = spec.rows[k] = np.array([k], np.int64)
    else:
        k = 0
        idx = core._all if cars is None else np.ascontiguousarray(cars, np.int64)
    m, b, sim = len(idx), core.bank, core.sim
    f = np.empty((N_F, m))
    i_ = np.empty((len(_I_KEYS), m), np.int64)
    fl = np.empty((len(_B_KEYS), m), np.bool_)
    cp = np.empty((m, spec.cp_width))
    w = np.empty((m, spec.w_width))
    _fill_cars(
        idx, core.estate, core.eistate, sim.state, sim.istate, core.terms, core.etimes,
        b.table, b.slot_seeds, b.slot_laps, spec.flags, f, i_, fl, cp, w,
    )  # fmt: skip
    if one:  # per-car shapes (car 0 of the blocks); the floats that can be NaN compare NaN-equal
        blocks: tuple = (f, i_, fl, cp.view(NanEqualArray), w, f.view(NanEqualArray))
        if spec.randomized:
            mu = core.rand_section_mu[k].copy().view(NanEqualArray)
            blocks += (core.rand_draws[k].copy(), mu)
        return {key: blocks[block][sel] for key, block, sel in spec.plan_one}
    blocks = (f, i_, fl, cp, w, f)
    if spec.randomized:
        blocks += (core.rand_draws[idx].T, core.rand_section_mu[idx])
    return {key: blocks[block][sel] for key, block, sel in spec.plan}


#: float keys that can be NaN ("not yet"): NanEqualArray in the single env
_NAN_KEYS = ("finish_time_s", "checkpoint_times_s", "randomization_section_mu_scale")


class _Spec(NamedTuple):
    """What :func:`build_info` needs of a core that never changes (``core.info_spec``)."""

    #: ``[(key, block, selection)]`` in key order. Blocks: 0 floats, 1 ints, 2 bools,
    #: 3 checkpoint times, 4 per-wheel and position, 5 NaN-able floats, 6 drawn
    #: randomization values, 7 drawn section grip; a selection picks the key's row of its
    #: block, for several cars (the trailing ``...`` keeps the car axis); one car: ``plan_one``
    plan: list[tuple[str, int, Any]]
    #: the plan for one car (an ``int`` ``cars``): the same keys, each selection also picking
    #: car 0 of the blocks (0-5), so the value is a view of its block with per-car shape
    plan_one: list[tuple[str, int, Any]]
    flags: np.ndarray  # the kernel's flags
    #: width of ``checkpoint_times_s``: the most timed lines before the finish over the env's
    #: stages (fixed for the env's lifetime)
    cp_width: int
    w_width: int  # columns of the per-wheel block
    randomized: bool
    rows: dict[int, np.ndarray]  # car k -> [k] (int64), made on first use


def _spec(core: RallyCore) -> _Spec:
    """The info's layout for this core's version, wheel count and randomization."""
    nw = core.n_wheels
    # the per-wheel block's columns, as _fill_cars writes them
    per_wheel = ("wheel_loads_n", "slip_angles_rad", "slip_ratios", "tire_wear")
    wheels = {key: slice(j * nw, (j + 1) * nw) for j, key in enumerate(per_wheel)}
    wheels["position_m"] = slice(4 * nw, 4 * nw + 3)
    keys = list(INFO_KEYS) + (list(INFO_KEYS_V1) if core.version >= 1 else [])
    plan: list[tuple[str, int, Any]] = []
    for key in keys:
        if key in _F_ROWS:
            plan.append((key, 5 if key in _NAN_KEYS else 0, (_F_ROWS.index(key), Ellipsis)))
        elif key in _I_KEYS:
            plan.append((key, 1, (_I_KEYS.index(key), Ellipsis)))
        elif key in _B_KEYS:
            plan.append((key, 2, (_B_KEYS.index(key), Ellipsis)))
        elif key == "checkpoint_times_s":
            plan.append((key, 3, Ellipsis))
        else:
            plan.append((key, 4, (Ellipsis, wheels[key])))
    randomized = core.config.randomize is not None
    if randomized:
        for j, name in enumerate(RANDOMIZED_SCALARS):
            plan.append((f"randomization_{name}", 6, (j, Ellipsis)))
        plan.append(("randomization_section_mu_scale", 7, Ellipsis))
    random_mode = core.bank.mode == "random"
    flags = np.array([random_mode, core.version >= 1, core.sim.extended, nw], np.int64)
    cp_width = GENERATED_CHECKPOINTS if random_mode else max(core.bank.n_lines_max - 1, 0)
    plan_one = [(key, block, _car0(block, sel)) for key, block, sel in plan]
    spec = _Spec(plan, plan_one, flags, cp_width, 4 * nw + 3, randomized, {})
    core.info_spec = spec
    return spec


def _car0(block: int, sel: Any) -> Any:
    """A plan selection of car 0: rows of blocks 0-2 and 5 are ``(row, car)``, the other
    blocks ``(car, column)``; the drawn values (6, 7) are one car's already."""
    if block > 5:
        return sel
    if block in (0, 1, 2, 5):
        return (sel[0], 0, Ellipsis)
    return (0, Ellipsis) if sel is Ellipsis else (0, sel[1])


def end_reason(info: dict[str, Any]) -> Any:
    """Why the episode ended, by name: ``""`` while running, else ``"finished"``,
    ``"off_stage"``, ... (see :data:`END_REASONS`). A string for a single env's info, an array
    of strings for a vector env's."""
    code = np.asarray(info["end_code"])
    if code.ndim == 0:
        return END_REASONS[int(code)]
    return np.array(END_REASONS, dtype=object)[code]


def reward_terms(info: dict[str, Any]) -> dict[str, Any]:
    """``{term: value}`` from the flat ``reward_<term>`` keys (floats for a single env's
    info, arrays over cars for a vector env's); they sum to the reward."""
    values = {t: np.asarray(info[f"reward_{t}"]) for t in REWARD_TERMS}
    return {t: float(v) if v.ndim == 0 else v.copy() for t, v in values.items()}


def checkpoint_times(info: dict[str, Any]) -> Any:
    """The real entries of ``checkpoint_times_s`` (its first ``n_checkpoints``): a tuple of
    floats for a single env's info, a list of arrays for a vector env's."""
    cp = np.asarray(info["checkpoint_times_s"])
    n = np.asarray(info["n_checkpoints"])
    if n.ndim == 0:
        return tuple(float(t) for t in cp[: int(n)])
    return [np.array(cp[i, : int(n[i])], np.float64) for i in range(len(n))]
