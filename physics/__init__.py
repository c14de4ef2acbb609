"""Deterministic batched per-wheel vehicle simulator (numpy + numba only); its public API is
``__all__`` (docs/architecture.md, "The map")."""

from physics import layout
from physics.errors import ParameterError, PhysicsError, SnapshotError, StepError, TerrainError
from physics.params import ROVER, VehicleParams, WheelParams, rover_wheels
from physics.sim import Snapshot, VehicleBatch, quat_to_matrix, state_hash, substeps_for
from physics.terrain import Terrain, TerrainSet, crest_and_ramp_terrain, flat_terrain

__all__ = [
    "ROVER",
    "ParameterError",
    "PhysicsError",
    "Snapshot",
    "SnapshotError",
    "StepError",
    "Terrain",
    "TerrainError",
    "TerrainSet",
    "VehicleBatch",
    "VehicleParams",
    "WheelParams",
    "crest_and_ramp_terrain",
    "flat_terrain",
    "layout",
    "quat_to_matrix",
    "rover_wheels",
    "state_hash",
    "substeps_for",
]
