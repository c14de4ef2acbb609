"""Typed errors raised at the simulator's boundaries."""

from __future__ import annotations


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
        super().__init__(f"{owner}.{field} = {value!r}: {rule}")


class TerrainError(PhysicsError, ValueError):
    """A terrain's arrays are malformed."""


class SnapshotError(PhysicsError, ValueError):
    """A snapshot does not match the simulator it is restored into, or is corrupt."""


class StepError(PhysicsError, ValueError):
    """A step request is invalid (e.g. a control period that is not whole substeps)."""
