"""Typed errors raised at the environment's boundaries.

Bad actions raise :class:`gymnasium.error.InvalidAction` (Gymnasium's own type); everything
else raises a subclass of :class:`RallyEnvError`, which is a ``ValueError``.
"""

from __future__ import annotations


class RallyEnvError(ValueError):
    """Base class of the environment's own errors."""


class ConfigError(RallyEnvError):
    """A constructor argument is invalid. Names the field, the value and the rule it broke.

    Attributes:
        field: dotted name of the setting (``"reward_weights.progress"``).
        value: the offending value.
        rule: what the value must satisfy.
    """

    def __init__(self, field: str, value: object, rule: str):
        self.field = field
        self.value = value
        self.rule = rule
        super().__init__(f"{field} = {value!r}: {rule}")

    def __reduce__(self):
        return (type(self), (self.field, self.value, self.rule))


class StateError(RallyEnvError):
    """A state given to ``set_state`` is malformed, corrupt or from an incompatible env."""
