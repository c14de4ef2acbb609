"""Action validation shared by both envs: typed errors, clipping, no state change on error."""

from __future__ import annotations

import numpy as np
from gymnasium.error import InvalidAction

from physics.jit import njit
from rally_env.spaces import ACTION_HIGH, ACTION_LOW, ACTION_NAMES, DISCRETE_ACTIONS

_LOW = ACTION_LOW.astype(np.float64)
_HIGH = ACTION_HIGH.astype(np.float64)
_FLOATS = (np.dtype(np.float32), np.dtype(np.float64))  # what _clip_rows takes as it is


@njit(cache=True)
def _clip_rows(a, low, high, out):
    """Clip (n, 4) actions into ``out``; returns the flat index of the first non-finite entry
    (then ``out`` is left untouched), or -1."""
    n = a.shape[0]
    for i in range(n):
        for j in range(4):
            v = a[i, j]
            if not np.isfinite(v):
                return i * 4 + j
    for i in range(n):
        for j in range(4):
            v = float(a[i, j])
            if v < low[j]:
                v = low[j]
            elif v > high[j]:
                v = high[j]
            out[i, j] = v
    return -1


def _as_array(action: object) -> np.ndarray:
    if isinstance(action, np.ndarray):
        return action
    try:
        return np.asarray(action)
    except Exception as e:  # ragged lists and the like
        raise InvalidAction(f"action cannot be read as an array: {e}") from None


def validate_continuous(action: object, n: int | None, out: np.ndarray) -> None:
    """Check and clip a continuous action into ``out`` (n, 4) float64.

    Args:
        action: (4,) for a single env (``n is None``), (n, 4) for a vector env.
        n: number of cars, or None for a single env.
        out: destination, written only if the action is valid.

    Raises:
        InvalidAction: wrong type, dtype or shape, or a NaN/inf entry. Nothing is written.
    """
    a = _as_array(action)
    shape = (4,) if n is None else (n, 4)
    if a.dtype.kind not in "fiu":
        raise InvalidAction(
            f"action dtype {a.dtype} is not a real number type; expected a float32 array of "
            f"shape {shape} ({', '.join(ACTION_NAMES)})"
        )
    if a.shape != shape:
        raise InvalidAction(
            f"action shape {a.shape} != {shape}: expected "
            + ("" if n is None else f"one row per car ({n}) of ")
            + f"({', '.join(ACTION_NAMES)})"
        )
    a2 = a.reshape(-1, 4) if a.dtype in _FLOATS else a.reshape(-1, 4).astype(np.float64)
    bad = _clip_rows(a2, _LOW, _HIGH, out)
    if bad >= 0:
        row, col = divmod(bad, 4)
        where = f"{ACTION_NAMES[col]} (index {col})" + ("" if n is None else f" of car {row}")
        raise InvalidAction(
            f"action has a non-finite value {float(a2[row, col])} at {where}; actions must be "
            "finite (out-of-range finite values are clipped)"
        )


def validate_discrete(action: object, n: int | None, out: np.ndarray) -> None:
    """Check a discrete action (an integer in [0, n_actions)) and write its table row."""
    na = DISCRETE_ACTIONS.shape[0]
    if n is None:
        if isinstance(action, (bool, np.bool_)):
            raise InvalidAction(f"discrete action must be an integer in [0, {na}), got a bool")
        if isinstance(action, np.ndarray):
            if action.shape != () or action.dtype.kind not in "iu":
                raise InvalidAction(
                    f"discrete action must be an integer scalar in [0, {na}), got an array of "
                    f"shape {action.shape} and dtype {action.dtype}"
                )
            action = int(action)
        if not isinstance(action, (int, np.integer)):
            raise InvalidAction(
                f"discrete action must be an integer in [0, {na}), got "
                f"{type(action).__name__} {action!r}"
            )
        i = int(action)
        if not 0 <= i < na:
            raise InvalidAction(f"discrete action {i} is outside [0, {na})")
        out[0] = DISCRETE_ACTIONS[i]
        return
    a = _as_array(action)
    if a.dtype.kind not in "iu" or a.shape != (n,):
        raise InvalidAction(
            f"discrete actions must be an integer array of shape ({n},), got shape {a.shape} "
            f"and dtype {a.dtype}"
        )
    bad = np.flatnonzero((a < 0) | (a >= na))
    if bad.size:
        raise InvalidAction(f"discrete action {a[bad[0]]} of car {bad[0]} is outside [0, {na})")
    out[...] = DISCRETE_ACTIONS[a]
