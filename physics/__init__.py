"""Deterministic batched per-wheel vehicle simulator (numpy + numba only).

Public API::

    from physics import VehicleBatch, VehicleParams, WheelParams, ROVER
    from physics import Terrain, TerrainSet, flat_terrain, crest_and_ramp_terrain
    from physics import substeps_for, state_hash, Snapshot
"""

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
