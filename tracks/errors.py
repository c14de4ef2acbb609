"""Typed errors raised by the ``tracks`` package (docs/stages.md, "What the loader checks").

Every problem with a stage raises a :class:`StageError` (a ``ValueError``) whose message reads
``"<source>: <field>: <problem>"``, ``field`` the dotted TOML path (``sections[2].surface``).
"""

from __future__ import annotations


class TracksError(Exception):
    """Base class of every error raised by the ``tracks`` package."""


class StageError(TracksError, ValueError):
    """A stage is invalid: ``source`` (file path or ``"<memory>"``), ``field`` (dotted path
    inside the stage, ``"knots[3]"``) and ``problem`` (the rule that was broken)."""

    def __init__(self, source: str, field: str, problem: str):
        self.source = source
        self.field = field
        self.problem = problem
        super().__init__(f"{source}: {field}: {problem}")

    def __reduce__(self):  # keep pickling (multiprocessing, pytest-xdist) working
        return (type(self), (self.source, self.field, self.problem))


class StageFormatError(StageError):
    """The file cannot be read or is not valid TOML."""


class MissingFieldError(StageError):
    """A required field is absent."""


class UnknownFieldError(StageError):
    """A field that the format does not define is present (usually a typo)."""


class FieldTypeError(StageError):
    """A field has the wrong type (e.g. a string where a number is expected)."""


class FieldValueError(StageError):
    """A field has the right type but a value outside its rule."""


class UnknownSurfaceError(FieldValueError):
    """A surface name is not in :mod:`tracks.surfaces`."""


class GeometryError(FieldValueError):
    """The centerline described by the knots is not drivable."""


class SelfIntersectionError(GeometryError):
    """The road (centerline plus width and clearance) overlaps itself."""


class CurvatureError(GeometryError):
    """The centerline turns tighter than the vehicle can drive or the width allows."""


class StageNotFoundError(TracksError, LookupError):
    """No library stage or file of that name exists."""


class GenerationError(TracksError, RuntimeError):
    """The stage generator exhausted its retry budget without producing a valid stage."""


class ProjectionError(TracksError, ValueError):
    """Arrays handed to the projector have the wrong shape or contents."""
