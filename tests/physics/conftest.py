import numpy as np
import pytest

from physics import ROVER, VehicleBatch, crest_and_ramp_terrain, flat_terrain


@pytest.fixture(scope="session")
def flat():
    return flat_terrain(size_m=4000.0, cell_m=4.0)


@pytest.fixture(scope="session")
def crest():
    return crest_and_ramp_terrain()


def scripted_commands(n_cars: int, n_steps: int, seed: int) -> np.ndarray:
    """(n_steps, n_cars, 4) commands, including out-of-range values that get clamped."""
    rng = np.random.default_rng(seed)
    return rng.uniform([-1.3, -0.2, -0.2, -0.2], [1.3, 1.2, 0.6, 0.5], size=(n_steps, n_cars, 4))


def drive(sim: VehicleBatch, cmds: np.ndarray, substeps: int = 24) -> None:
    for c in cmds:
        sim.set_commands(c)
        sim.step(substeps)


@pytest.fixture
def rover_on(flat):
    def make(n=1, terrain=None, params=ROVER, **kw):
        return VehicleBatch(n, params, [terrain if terrain is not None else flat], **kw)

    return make
