"""State hashes of one car of a core, independent of where in a batch it lives."""

from __future__ import annotations

from typing import Any

import numpy as np

from physics import layout as L
from physics.sim import digest
from rally_env import kernels as K


def car_state_hash(core: Any, k: int) -> str:
    """:func:`physics.sim.digest` of everything that shapes car ``k``'s future, with the
    indices that only say where in a batch it lives zeroed (``docs/replays.md``, "The state
    hash")."""
    sim = core.sim
    ist = sim.istate[k].copy()
    ist[L.I_TERRAIN] = 0
    ei = core.eistate[k].copy()
    ei[[K.EI_SLOT, K.EI_ROW]] = 0
    nl = core.lines_of(k)
    return digest(
        (
            # the batch's own widths: N_STATE for basic vehicles, N_STATE_EXT for extended ones
            np.asarray(
                [L.LAYOUT_VERSION, sim.state.shape[1], sim.istate.shape[1], K.N_E, K.N_EI],
                np.int64,
            ),
            np.ascontiguousarray(sim.state[k], np.float64),
            ist,
            np.ascontiguousarray(sim.params[k], np.float64),
            np.ascontiguousarray(core.estate[k]),
            ei,
            np.ascontiguousarray(core.etimes[k, :nl]),
            np.ascontiguousarray(core.obs[k]),
            np.asarray([core.rew[k]], np.float64),
            np.asarray([core.term[k], core.trunc[k]], np.bool_),
        )
    )
