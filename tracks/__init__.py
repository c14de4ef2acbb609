"""Rally stages: file format, library, generator, terrain bake and projection (the API in
docs/stages.md). Rendering (``python -m tracks.render``) is never imported by ``import tracks``.
"""

from tracks import surfaces
from tracks.bake import bake, clear_bake_cache
from tracks.builder import PathBuilder
from tracks.errors import (
    CurvatureError,
    FieldTypeError,
    FieldValueError,
    GenerationError,
    GeometryError,
    MissingFieldError,
    ProjectionError,
    SelfIntersectionError,
    StageError,
    StageFormatError,
    StageNotFoundError,
    TracksError,
    UnknownFieldError,
    UnknownSurfaceError,
)
from tracks.generator import MAX_ATTEMPTS, generate
from tracks.io import dumps_stage, list_stages, load_stage, loads_stage, save_stage
from tracks.projection import Projection, Projector, delta_s, project_batch
from tracks.stage import Feature, Finish, Section, Stage, StagePath, Start, TerrainSpec

__all__ = [
    "MAX_ATTEMPTS",
    "CurvatureError",
    "Feature",
    "FieldTypeError",
    "FieldValueError",
    "Finish",
    "GenerationError",
    "GeometryError",
    "MissingFieldError",
    "PathBuilder",
    "Projection",
    "ProjectionError",
    "Projector",
    "Section",
    "SelfIntersectionError",
    "Stage",
    "StageError",
    "StageFormatError",
    "StageNotFoundError",
    "StagePath",
    "Start",
    "TerrainSpec",
    "TracksError",
    "UnknownFieldError",
    "UnknownSurfaceError",
    "bake",
    "clear_bake_cache",
    "delta_s",
    "dumps_stage",
    "generate",
    "list_stages",
    "load_stage",
    "loads_stage",
    "project_batch",
    "save_stage",
    "surfaces",
]
