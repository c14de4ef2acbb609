"""The ``info`` contract: every key, its type, and the one function that builds it.

Every info value is a number, a bool or a fixed-shape numeric array, so Gymnasium's vector
envs stack it into a typed array (never an object array) and torchrl, skrl, RLlib and Minari
read it as a tensor:

* :class:`rally_env.RallyVectorEnv`: each value is a numpy array over cars, shape
  ``(num_envs, *shape)``, with Gymnasium's ``_key`` mask beside it.
* :class:`rally_env.RallyEnv`: each value is a numpy array of the same per-car shape (shape
  ``()`` for a scalar: ``float(info["stage_time_s"])``, ``bool(info["finished"])``,
  ``int(info["end_code"])``). A numpy array, not a Python scalar, because torchrl's info
  reader needs a ``dtype`` and Gymnasium's vector envs stack a Python bool but not a
  ``numpy.bool_``; a 0-d array satisfies both.

Strings have numeric codes: ``end_code`` indexes :data:`END_REASONS`
(:func:`end_reason` turns it back into a name), ``stage_index`` the env's stage list and
``stage_seed`` is a generated stage's seed. Reward terms are flat ``reward_<term>`` keys
(:func:`reward_terms` collects them). "Not yet" is NaN (``finish_time_s``,
``checkpoint_times_s``); in the single env, float values are :class:`NanEqualArray`, whose
``==`` (and ``np.allclose``) treat NaN as equal to NaN, so two identical runs have equal info
dicts (Gymnasium's determinism checks compare them).

:func:`build_info` is the only place an info dict is made: the single env takes car 0's row
of the batch (:func:`car_row`).
"""

from __future__ import annotations

import re
from typing import Any

import numpy as np

from physics import layout as L
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

_GEN_NAME = re.compile(r"^gen-(\d+)")


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


def _stage_seeds(core: RallyCore) -> np.ndarray:
    """Generator seed per stage slot (-1 for a stage not generated), cached per bank build."""
    b = core.bank
    cache = getattr(core, "_stage_seed_cache", None)
    if cache is not None and cache[0] == b.version:
        return cache[1]
    seeds = np.full(b.n_slots, -1, np.int64)
    for i, s in enumerate(b.slots):
        m = _GEN_NAME.match(s.name) if s is not None else None
        if m:
            seeds[i] = int(m.group(1))
    core._stage_seed_cache = (b.version, seeds)
    return seeds


def checkpoint_width(core: RallyCore) -> int:
    """Width of ``checkpoint_times_s``: the most timed lines before the finish over the env's
    stages (fixed for the env's lifetime)."""
    b = core.bank
    if b.mode == "random":
        return GENERATED_CHECKPOINTS
    return max(b.n_lines_max - 1, 0)


def build_info(core: RallyCore, cars: np.ndarray | None = None) -> dict[str, np.ndarray]:
    """The info of all cars (or ``cars``, int64 indices) as arrays over those cars.

    Returns:
        ``{key: array (M, *shape)}`` in :data:`INFO_KEYS` order (+ :data:`INFO_KEYS_V1` for
        ``Rally-v1``, + ``randomization_*`` when randomization is on); every array is new.
    """
    idx = core._all if cars is None else np.asarray(cars, np.int64)
    m = len(idx)
    b = core.bank
    e = core.estate[idx]
    ei = core.eistate[idx]
    st = core.sim.state[idx]
    nw = core.n_wheels
    slots = ei[:, K.EI_SLOT]
    v = st[:, L.VEL_X : L.VEL_Z + 1]
    end = ei[:, K.EI_END].copy()
    n_lines = b.table[slots, S.SL_N_LINES].astype(np.int64)
    width = checkpoint_width(core)
    cp = np.full((m, width), np.nan)
    have = min(width, core.etimes.shape[1] - 1)
    if have > 0:
        cp[:, :have] = core.etimes[idx, :have]
        cp[np.arange(width)[None, :] >= (n_lines - 1)[:, None]] = np.nan
    laps = np.ones(m, np.int64)
    closed = b.table[slots, S.SL_CLOSED] > 0.5
    if closed.any():
        lap = np.floor(e[:, K.E_BEST] / b.table[slots, S.SL_LENGTH]).astype(np.int64) + 1
        laps = np.where(closed, np.clip(lap, 1, b.slot_laps[slots]), 1)
    info: dict[str, np.ndarray] = {
        "stage_index": slots.copy() if b.mode != "random" else np.full(m, -1, np.int64),
        "stage_seed": _stage_seeds(core)[slots],
        "stage_time_s": core.sim.istate[idx, L.I_SUBSTEPS] / L.SUBSTEP_HZ,
        "progress_m": e[:, K.E_RACE].copy(),
        "credited_progress_m": e[:, K.E_BEST].copy(),
        "stage_length_m": e[:, K.E_TIMED].copy(),
        "speed_mps": np.sqrt((v * v).sum(axis=1)),
        "lateral_offset_m": e[:, K.E_LAT].copy(),
        "heading_error_rad": e[:, K.E_HERR].copy(),
        "off_road": ei[:, K.EI_OFF] == 1,
        "finished": end == K.END_FINISHED,
        "finish_time_s": e[:, K.E_FINISH_TIME].copy(),
        "checkpoint_times_s": cp,
        "n_checkpoints": np.maximum(n_lines - 1, 0),
        "lap": laps,
        "wheel_loads_n": st[:, L.WL_LOAD : L.WL_LOAD + nw].copy(),
        "slip_angles_rad": st[:, L.WL_SLIP_ANGLE : L.WL_SLIP_ANGLE + nw].copy(),
        "position_m": st[:, L.POS_X : L.POS_Z + 1].copy(),
        "end_code": end,
    }
    for i, name in enumerate(REWARD_TERMS):
        info[f"reward_{name}"] = core.terms[idx, i].copy()
    if core.version >= 1:
        sim = core.sim
        ext = sim.extended
        info["gear"] = sim.istate[idx, L.I_GEAR].copy()
        info["engine_rpm"] = st[:, L.ENGINE_RPM].copy()
        info["tire_wear"] = st[:, L.SXW_WEAR : L.SXW_WEAR + nw].copy() if ext else np.ones((m, nw))
        info["damage"] = st[:, L.SX_DAMAGE].copy() if ext else np.ones(m)
        info["max_impact_mps"] = st[:, L.SX_MAX_IMPACT].copy() if ext else np.zeros(m)
        info["slip_ratios"] = st[:, L.WL_SLIP_RATIO : L.WL_SLIP_RATIO + nw].copy()
    if core.config.randomize is not None:
        rd = core.rand_draws[idx]
        for j, name in enumerate(RANDOMIZED_SCALARS):
            info[f"randomization_{name}"] = rd[:, j].copy()
        info["randomization_section_mu_scale"] = core.rand_section_mu[idx].copy()
    return info


def car_row(batch: dict[str, np.ndarray], k: int = 0) -> dict[str, np.ndarray]:
    """Row ``k`` of a :func:`build_info` batch: the single env's info (new 0-d or 1-d arrays;
    float ones are :class:`NanEqualArray`)."""
    out: dict[str, np.ndarray] = {}
    for key, v in batch.items():
        a = np.array(v[k, ...])
        out[key] = a.view(NanEqualArray) if a.dtype.kind == "f" else a
    return out


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
    out: dict[str, Any] = {}
    for t in REWARD_TERMS:
        v = np.asarray(info[f"reward_{t}"])
        out[t] = float(v) if v.ndim == 0 else v.copy()
    return out


def checkpoint_times(info: dict[str, Any]) -> Any:
    """The real entries of ``checkpoint_times_s`` (its first ``n_checkpoints``): a tuple of
    floats for a single env's info, a list of arrays for a vector env's."""
    cp = np.asarray(info["checkpoint_times_s"])
    n = np.asarray(info["n_checkpoints"])
    if n.ndim == 0:
        return tuple(float(t) for t in cp[: int(n)])
    return [np.array(cp[i, : int(n[i])], np.float64) for i in range(len(n))]
