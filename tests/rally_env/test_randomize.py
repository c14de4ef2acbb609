"""Domain randomization: drawn per car from the env's RNG, reported at reset, effective."""

from __future__ import annotations

import numpy as np
import pytest

from physics import layout as L
from rally_env import RallyEnv, RallyVectorEnv
from rally_env.config import ConfigError
from rally_env.info import RANDOMIZATION_KEYS
from rally_env.stages import MAX_SECTION_IDS
from tests.rally_env.conftest import FULL_THROTTLE, rollout


def test_draws_reported_reproducible_and_in_range():
    env = RallyEnv(randomize={"mass": (0.8, 1.2), "surface_mu": (0.5, 1.5)})
    r = env.config.randomize
    _, i1 = env.reset(seed=1)
    d = {k: i1[f"randomization_{k}"] for k in RANDOMIZATION_KEYS}
    assert 3000 * 0.8 <= d["mass_kg"] <= 3000 * 1.2
    assert 150e3 * r.power[0] <= d["power_w"] <= 150e3 * r.power[1]
    assert 0.18 * r.tire_peak[0] <= d["peak_slip_angle_rad"] <= 0.18 * r.tire_peak[1]
    mu = d["section_mu_scale"][: np.count_nonzero(~np.isnan(d["section_mu_scale"]))]
    assert d["section_mu_scale"].shape == (MAX_SECTION_IDS,)
    assert len(mu) == 3 and np.all((mu >= 0.5) & (mu <= 1.5))  # opener has 3 sections
    assert env.core.sim.params[0, L.P_MASS] == d["mass_kg"]
    _, i2 = env.reset(seed=2)
    assert i2["randomization_mass_kg"] != d["mass_kg"]
    _, i3 = env.reset(seed=1)
    assert i3["randomization_mass_kg"] == d["mass_kg"]
    assert np.array_equal(i3["randomization_section_mu_scale"][:3], mu)
    # reported on every step of the episode, not only at the reset
    assert env.step(FULL_THROTTLE)[4]["randomization_mass_kg"] == d["mass_kg"]


def test_section_grip_reaches_the_physics():
    env = RallyEnv(
        randomize={
            "surface_mu": (0.5, 0.5),
            "mass": (1, 1),
            "power": (1, 1),
            "tire_peak": (1, 1),
            "load_sensitivity": (1, 1),
        }
    )
    plain = RallyEnv()
    for e in (env, plain):  # at rest the loads match, so only the surface grip differs
        e.reset(seed=0)
        rollout(e, [np.zeros(4, np.float32)] * 10)
    mu_r = env.core.sim.wheel_mu[0]
    mu_p = plain.core.sim.wheel_mu[0]
    assert mu_r == pytest.approx(0.5 * mu_p, rel=1e-9)
    obs_r = env.core.obs[0, env.core.layout.groups["grip"]]
    obs_p = plain.core.obs[0, plain.core.layout.groups["grip"]]
    assert obs_r == pytest.approx(0.5 * obs_p, rel=1e-6)


def test_unit_ranges_reproduce_the_unrandomized_physics():
    ones = {k: (1.0, 1.0) for k in ("mass", "power", "tire_peak", "load_sensitivity")}
    a = RallyEnv(randomize={**ones, "surface_mu": (1.0, 1.0 + 1e-300)})
    b = RallyEnv()
    for e in (a, b):
        e.reset(seed=3)
    ra = rollout(a, [FULL_THROTTLE] * 100)
    rb = rollout(b, [FULL_THROTTLE] * 100)
    assert all(np.array_equal(x[0], y[0]) for x, y in zip(ra, rb, strict=True))


def test_vector_reports_draws_of_the_reset_cars():
    venv = RallyVectorEnv(3, randomize=True)
    _, info = venv.reset(seed=0)
    assert info["randomization_mass_kg"].shape == (3,)
    assert info["_randomization_mass_kg"].all()
    assert info["randomization_section_mu_scale"].shape == (3, MAX_SECTION_IDS)
    single = RallyEnv(randomize=True)
    _, i1 = single.reset(seed=0, options={"car_index": 1})
    assert info["randomization_mass_kg"][1] == i1["randomization_mass_kg"]


@pytest.mark.parametrize(
    "bad", [{"mass": (1.2, 0.8)}, {"mass": (0.1, 1.0)}, {"speed": (1, 1)}, {"power": "fast"}, "yes"]
)
def test_bad_randomize_config(bad):
    with pytest.raises(ConfigError, match="randomize"):
        RallyEnv(randomize=bad)
