"""The surface table: ids, names, grip multipliers and map colours (docs/stages.md, "Surfaces").

Grip multipliers are relative to the tire's base friction coefficient :data:`MU_BASE`; ``GRIP``
(indexed by id) is what goes into :attr:`physics.terrain.Terrain.grip`.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

#: Base tire friction coefficient the multipliers are quoted against (the default rover's).
MU_BASE = 0.70


@dataclass(frozen=True, slots=True)
class Surface:
    """One surface kind: ``id`` (in the terrain's surface-id grid), ``name`` (in stage files),
    ``grip`` (friction multiplier relative to the tire's base mu), ``color`` (r, g, b) on maps
    and ``label`` (display name)."""

    id: int
    name: str
    grip: float
    color: tuple[int, int, int]
    label: str

    @property
    def mu(self) -> float:
        """Effective friction coefficient at :data:`MU_BASE`."""
        return MU_BASE * self.grip


OFFROAD = Surface(0, "offroad", 0.60, (120, 86, 62), "off-road")
PACKED_DIRT = Surface(1, "packed-dirt", 1.16, (172, 104, 60), "packed dirt")
GRAVEL = Surface(2, "gravel", 1.00, (196, 176, 150), "gravel")
DUST = Surface(3, "dust", 0.86, (222, 150, 98), "dust/rock")
SAND = Surface(4, "sand", 0.76, (236, 206, 120), "sand")

#: All surfaces, index == id.
SURFACES: tuple[Surface, ...] = (OFFROAD, PACKED_DIRT, GRAVEL, DUST, SAND)
#: Surfaces a road section may use (everything but off-road is allowed on the road too, but
#: these are the ones the generator draws from).
ROAD_SURFACES: tuple[Surface, ...] = (PACKED_DIRT, GRAVEL, DUST, SAND)
#: Surface id of off-road ground.
OFFROAD_ID = OFFROAD.id
#: (n_surfaces,) float64 grip multiplier per surface id — the ``Terrain.grip`` array.
GRIP = np.array([s.grip for s in SURFACES], dtype=np.float64)
GRIP.setflags(write=False)

_BY_NAME = {s.name: s for s in SURFACES}


def surface_names() -> tuple[str, ...]:
    """Names accepted in stage files, in id order."""
    return tuple(s.name for s in SURFACES)


def by_name(name: str) -> Surface:
    """The surface of a name used in stage files (``KeyError`` if unknown)."""
    return _BY_NAME[name]


def surface_id(name: str) -> int:
    """Surface id of a name (``KeyError`` if unknown)."""
    return _BY_NAME[name].id
