"""Every vehicle the bounds accept drives: finite states, observations inside the space.

For each number of a library vehicle file, extreme values (the field's bounds, x1000,
/1000, 1e308, 1e-308, 0) are tried; every one the definition accepts must run 30 control
steps of throttle, steering and braking with finite observations inside the observation
space and finite rewards.
"""

from __future__ import annotations

import numpy as np
import pytest

from physics.params import _BOUNDS
from physics.vehicles import VehicleDefError
from physics.vehicles import vehicle_from_dict as from_doc
from rally_env import RallyEnv
from tests.hostile import numeric_paths, with_value
from tests.hostile import vehicle_doc as library_doc


def _candidates(path: tuple, v: float) -> list[float]:
    out = [v * 1e3, v * 1e-3, 1e308, 1e-308, 0.0]
    if path[0] == "vehicle" and path[-1] in _BOUNDS:
        lo, hi, _ = _BOUNDS[path[-1]]
        out += [lo, hi]
    return out


def _drives(vehicle) -> bool:
    env = RallyEnv(stage="proving-ground", version=1, vehicle=vehicle)
    obs, _ = env.reset(seed=0)
    ok = bool(np.isfinite(obs).all())
    for t in range(30):
        a = np.array([0.5 if t < 15 else -0.5, 1.0, 0.0 if t < 20 else 1.0, 0.0], np.float32)
        obs, r, term, trunc, _ = env.step(a)
        ok = ok and np.isfinite(obs).all() and np.isfinite(r)
        ok = ok and env.observation_space.contains(obs)
        if term or trunc:
            break
    return ok


@pytest.mark.parametrize("name", ["rover", "rally-car", "truck", "tank", "bike"])
def test_every_accepted_extreme_drives(name):
    doc = library_doc(name)
    tried, bad = 0, []
    for p in numeric_paths(doc):
        for c in _candidates(p, float(_get(doc, p))):
            try:
                veh = from_doc(with_value(doc, p, c), "v.toml")
            except VehicleDefError:
                continue
            tried += 1
            if not _drives(veh):
                bad.append((p, c))
    assert tried > 50
    assert not bad, bad


def _get(doc, path):
    for k in path:
        doc = doc[k]
    return doc
