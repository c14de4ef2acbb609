"""Typed errors raised at the simulator's boundaries."""

from __future__ import annotations

import math

import numpy as np


class PhysicsError(Exception):
    """Base class of every error the physics package raises on bad input."""


class ParameterError(PhysicsError, ValueError):
    """A vehicle or simulation parameter is out of bounds or not finite.

    The message names the field, the value and the rule it broke.
    """

    def __init__(self, owner: str, field: str, value: object, rule: str):
        self.owner = owner
        self.field = field
        self.value = value
        self.rule = rule
        super().__init__(f"{owner}.{field} = {short_repr(value)}: {rule}")


def short_repr(value: object) -> str:
    """``repr(value)``, but a huge integer as its digit count (its repr is unreadable)."""
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) > 10**30:
        return f"<an integer of {len(str(abs(value)))} digits>"
    r = repr(value)
    return r if len(r) <= 200 else r[:197] + "..."


def as_finite(value: object) -> float | None:
    """``float(value)`` if it is a finite real number (not a bool), else ``None`` (an integer
    too large for a float included)."""
    if isinstance(value, bool):
        return None
    try:
        v = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError, OverflowError):
        return None
    return v if math.isfinite(v) else None


def check_ext_row(owner: str, row: object) -> None:
    """Raise :class:`ParameterError` (``owner.row``) unless ``row`` is a 1-D float64 array of at
    least ``layout.N_PARAMS_EXT`` entries: a packed extended-vehicle row."""
    from physics.layout import N_PARAMS_EXT

    ok = isinstance(row, np.ndarray) and row.dtype == np.float64 and row.ndim == 1
    if not ok or row.shape[0] < N_PARAMS_EXT:  # type: ignore[union-attr]
        desc = f"ndarray {row.dtype} {row.shape}" if isinstance(row, np.ndarray) else type(row)
        rule = f"must be a 1-D float64 array of length >= N_PARAMS_EXT ({N_PARAMS_EXT})"
        raise ParameterError(owner, "row", desc, rule)


class TerrainError(PhysicsError, ValueError):
    """A terrain's arrays are malformed."""


class SnapshotError(PhysicsError, ValueError):
    """A snapshot does not match the simulator it is restored into, or is corrupt."""


class StepError(PhysicsError, ValueError):
    """A step request is invalid (e.g. a control period that is not whole substeps)."""
