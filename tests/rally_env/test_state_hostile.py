"""``set_state`` of hostile states: refused with a StateError, and the env is unchanged.

Each state is a real one with one value edited and its digest recomputed with the public
``state_digest`` (so only the value checks can catch it). Before, a NaN position was accepted
and the next step crashed the interpreter; ``draws=[42]`` moved the car, then raised a bare
TypeError.
"""

from __future__ import annotations

import copy

import numpy as np
import pytest

from physics import layout as L
from rally_env import RallyEnv, RallyVectorEnv, StateError
from rally_env import kernels as K
from rally_env.core import state_digest
from tests.hostile import edited_state as _edited
from tests.hostile import set_cell as _set
from tests.rally_env.conftest import random_actions, rollout

EDITS = {
    "nan_position": ("sim_state", _set(L.POS_X, np.nan), "non-finite"),
    "inf_velocity": ("sim_state", _set(L.VEL_Y, np.inf), "non-finite"),
    "huge_position": ("sim_state", _set(L.POS_Y, 1e9), "position"),
    "quaternion": ("sim_state", _set(L.QUAT_W, 0.5), "quaternion"),
    "command": ("sim_state", _set(L.CMD_THROTTLE, 3.0), "pedal"),
    "surface_id": ("sim_state", _set(L.WL_SURFACE, 0.5), "surface"),
    "nan_param": ("sim_params", _set(L.P_MASS, np.nan), "non-finite"),
    "other_mass": ("sim_params", _set(L.P_MASS, 1.0), "vehicle"),
    "terrain_row": ("sim_istate", _set(L.I_TERRAIN, 5), "terrain row"),
    "negative_substeps": ("sim_istate", _set(L.I_SUBSTEPS, -3), "negative"),
    "slot": ("eistate", _set(K.EI_SLOT, 7), "slot"),
    "next_line": ("eistate", _set(K.EI_NEXT_LINE, 99), "timing line"),
    "end_code": ("eistate", _set(K.EI_END, 42), "end code"),
    "off_flag": ("eistate", _set(K.EI_OFF, 2), "off-road"),
    "row": ("eistate", _set(K.EI_ROW, 3), "terrain row"),
    "nan_estate": ("estate", _set(K.E_RACE, np.nan), "non-finite"),
    "inf_finish": ("estate", _set(K.E_FINISH_TIME, np.inf), "non-finite"),
    "inf_line_time": ("etimes", _set(0, np.inf), "non-finite"),
    "negative_line_time": ("etimes", _set(0, -1.0), "negative"),
    "nan_obs": ("obs", _set(0, np.nan), "non-finite"),
    "obs_outside": ("obs", _set(0, 1e6), "observation space"),
    "action": ("actions", _set(1, 2.0), "action box"),
    "section_mu": ("section_mu", _set(0, np.nan), "non-finite"),
}


@pytest.fixture(scope="module")
def env_and_state():
    env = RallyEnv(stage="opener")
    env.reset(seed=0)
    rollout(env, random_actions(40, seed=1))
    return env, env.get_state()


@pytest.mark.parametrize("name", sorted(EDITS))
def test_a_state_with_a_bad_value_is_refused_and_changes_nothing(name, env_and_state):
    env, good = env_and_state
    key, edit, word = EDITS[name]
    env.set_state(good)
    before = env.get_state()["digest"]
    with pytest.raises(StateError, match=word):
        env.set_state(_edited(good, key, edit))
    assert env.get_state()["digest"] == before
    obs, *_ = env.step(np.array([0.0, 1.0, 0.0, 0.0], np.float32))  # and it still steps
    assert np.isfinite(obs).all()


def test_bad_draws_are_refused_before_the_car_moves():
    env = RallyEnv(stage="skidpad", randomize=True)
    env.reset(seed=0)
    st = env.get_state()
    env.step(np.array([0.0, 1.0, 0.0, 0.0], np.float32))
    x = float(env.unwrapped.core.sim.state[0, L.POS_X])
    for draws in ([42], [{"mass_kg": "x"}], "draws", [None, None]):
        bad = copy.deepcopy(st)
        bad["draws"] = draws
        bad["digest"] = state_digest(bad)
        with pytest.raises(StateError, match="draws"):
            env.set_state(bad)
        assert float(env.unwrapped.core.sim.state[0, L.POS_X]) == x


def test_a_randomized_parameter_outside_its_range_is_refused():
    env = RallyEnv(stage="skidpad", randomize={"mass": (0.9, 1.1)})
    env.reset(seed=0)
    st = env.get_state()
    base = env.unwrapped.config.vehicle.mass_kg
    # inside the range: a state the env could reach
    env.set_state(_edited(st, "sim_params", lambda a: a.__setitem__((0, L.P_MASS), 1.05 * base)))
    with pytest.raises(StateError, match="vehicle"):
        env.set_state(_edited(st, "sim_params", lambda a: a.__setitem__((0, L.P_MASS), 2 * base)))


def test_a_gear_outside_the_gearbox_is_refused():
    env = RallyEnv(stage="opener", version=1, vehicle="rally-car")
    env.reset(seed=0)
    st = env.get_state()
    with pytest.raises(StateError, match="gear"):
        env.set_state(_edited(st, "sim_istate", _set(L.I_GEAR, 9)))


@pytest.mark.parametrize(
    "kw",
    [
        {"stage": "opener", "randomize": True},
        {"stage": "random"},
        {"stage": ["opener", "skidpad"], "randomize": True},
        {"stage": "rallycross", "version": 1, "vehicle": "rally-car"},
    ],
)
def test_real_states_of_every_kind_still_restore(kw):
    """No false refusals: states a vector env reaches (autoresets, randomization, random and
    listed stages, the v1 drivetrain) restore into a fresh env and continue identically."""
    env = RallyVectorEnv(4, **kw)
    env.reset(seed=3)
    rollout(env, random_actions(60, seed=2, n_cars=4))
    st = env.get_state()
    other = RallyVectorEnv(4, **kw)
    other.set_state(st)
    acts = random_actions(10, seed=5, n_cars=4)
    a = rollout(env, acts)
    b = rollout(other, acts)
    for x, y in zip(a, b, strict=True):
        assert np.array_equal(x[0], y[0])
