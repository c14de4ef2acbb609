"""One car's state into cars of a vector env (RallyVectorEnv.set_car_states / get_car_state):
each clone steps bit-identically to its source, whatever the other cars do; refusals change
nothing."""

from __future__ import annotations

import copy
import pickle

import numpy as np
import pytest
from gymnasium.error import ResetNeeded

from rally_env import RallyEnv, RallyVectorEnv, StateError
from tests.rally_env.conftest import random_actions

POOL = {"stage": "random", "random_stage": {"length_m": 400.0, "pool": 4, "pool_steps": 30}}
KINDS = {
    "v0": {},
    "v1": {"version": 1},
    "randomized": {"randomize": True},
    "stage-list": {"stage": ["skidpad", "opener"]},
    "random": {"stage": "random", "random_stage": {"length_m": 600.0}},
    "pool": POOL,
}


def _steer(info) -> np.ndarray:
    """A closed-loop action that keeps a car on the road for a few hundred steps."""
    herr = float(info["heading_error_rad"])
    lat = float(info["lateral_offset_m"])
    steer = float(np.clip(-1.5 * herr - 0.15 * lat, -1.0, 1.0))
    return np.array([steer, 0.45, 0.0, 0.0], np.float32)


def _car_info(info, k):
    return {key: v[k] for key, v in info.items() if not key.startswith("_")}


def _assert_same_step(single, vec, k):
    obs, rew, term, trunc, info = single
    v_obs, v_rew, v_term, v_trunc, v_info = vec
    assert np.array_equal(obs, v_obs[k])
    assert rew == v_rew[k] and term == v_term[k] and trunc == v_trunc[k]
    v_info = _car_info(v_info, k)
    assert info.keys() == v_info.keys()
    for key, x in info.items():
        y = np.asarray(v_info[key])
        assert np.asarray(x).dtype == y.dtype and np.array_equal(x, y, equal_nan=True), key


def _snapshot(venv):
    c = venv.core
    return (
        c.sim.state_hash(),
        c.estate.copy(),
        c.eistate.copy(),
        c.obs.copy(),
        [None if r is None else r.bit_generator.state for r in c.rngs],
        venv._autoreset.copy(),
    )


def _same_snapshot(a, b) -> bool:
    return (
        a[0] == b[0]
        and np.array_equal(a[1], b[1], equal_nan=True)
        and np.array_equal(a[2], b[2])
        and np.array_equal(a[3], b[3])
        and a[4] == b[4]
        and np.array_equal(a[5], b[5])
    )


@pytest.mark.parametrize("kind", list(KINDS))
def test_clones_step_bit_identically_to_the_source(kind):
    kw = KINDS[kind]
    env = RallyEnv(**kw)
    _, info = env.reset(seed=11)
    for _ in range(25):
        *_, info = env.step(_steer(info))
    state = pickle.loads(pickle.dumps(env.get_state()))

    venv = RallyVectorEnv(5, **kw)
    venv.reset(seed=3)
    noise = random_actions(260, seed=4, n_cars=5)
    for a in noise[:15]:
        venv.step(a)
    clones = np.array([1, 4])
    obs = venv.set_car_states(clones, state)
    assert obs.shape == (2, *venv.single_observation_space.shape)
    assert all(np.array_equal(o, env.core.obs[0]) for o in obs)

    steps = 0
    for t in range(240):
        action = _steer(info)
        single = env.step(action)
        info = single[4]
        acts = noise[15 + t].copy()
        acts[clones] = action
        vec = venv.step(acts)
        for k in clones:
            _assert_same_step(single, vec, k)
        steps += 1
        if t == 60:  # another car starts a new episode mid-run (a pool draws its stage)
            venv.reset(options={"reset_mask": np.array([True, False, False, False, False])})
        if single[2] or single[3]:
            break
    assert steps >= 200, f"the source's episode ended after {steps} steps"


def test_get_car_state_restores_in_a_single_env_and_another_vector_env():
    kw = POOL
    venv = RallyVectorEnv(3, **kw)
    venv.reset(seed=7)
    acts = random_actions(120, seed=2, n_cars=3)
    acts[..., 0] *= 0.2
    for a in acts[:20]:
        venv.step(a)
    st = venv.get_car_state(2)
    assert st["n_cars"] == 1
    single = RallyEnv(**kw)
    single.set_state(copy.deepcopy(st))
    other = RallyVectorEnv(4, **kw)
    other.reset(seed=1)
    other.set_car_states(np.array([False, True, True, False]), st)
    # car 2 of the source: the single env and cars 1, 2 of the other vector env follow it
    for a in acts[20:80]:
        ref = venv.step(a)
        one = single.step(a[2])
        both = np.stack([acts[0, 0], a[2], a[2], acts[0, 0]])
        got = other.step(both)
        _assert_same_step(one, ref, 2)
        for k in (1, 2):
            _assert_same_step(one, got, k)
        if ref[2][2] or ref[3][2]:
            break
    # a car of the same vector env copied onto another car
    venv.set_car_states(0, venv.get_car_state(1))
    a = acts[90].copy()
    a[0] = a[1]
    o, *_ = venv.step(a)
    assert np.array_equal(o[0], o[1])


def _refusals(state, other_state):
    def edit(fn):
        s = copy.deepcopy(state)
        fn(s)
        return s

    yield "not a dict", [1, 2], StateError
    yield "no extra", edit(lambda s: s.pop("extra")), StateError
    yield "vector state", other_state, StateError
    yield "bit flip", edit(lambda s: s["sim_state"].__setitem__((0, 0), 1e9)), StateError
    yield "wrong version", edit(lambda s: s.__setitem__("version", 99)), StateError


def test_refusals_change_nothing():
    env = RallyEnv()
    env.reset(seed=0)
    state = env.get_state()
    venv = RallyVectorEnv(3)
    with pytest.raises(ResetNeeded):
        venv.set_car_states([0], state)
    venv.reset(seed=2)
    for a in random_actions(10, seed=1, n_cars=3):
        venv.step(a)
    before = _snapshot(venv)
    for name, bad, err in _refusals(state, venv.get_state()):
        with pytest.raises(err):
            venv.set_car_states([0, 1], bad)
        assert _same_snapshot(before, _snapshot(venv)), name
    other = RallyEnv(control_hz=10)
    other.reset(seed=0)
    with pytest.raises(StateError, match="different settings"):
        venv.set_car_states([1], other.get_state())
    fresh = RallyEnv()  # never reset: no car to copy
    with pytest.raises(StateError):
        venv.set_car_states([1], fresh.get_state())
    for cars in ([], [0, 0], [3], [-1], [0.5], np.ones(2, bool), [[0, 1]]):
        with pytest.raises(ValueError, match="car"):
            venv.set_car_states(cars, state)
    with pytest.raises(ValueError, match="one car"):
        venv.get_car_state([0, 1])
    assert _same_snapshot(before, _snapshot(venv))
    venv.set_car_states([2], state)  # still usable
    assert np.array_equal(venv.core.obs[2], env.core.obs[0])


def test_an_ended_source_resets_at_the_clone_s_next_step():
    env = RallyEnv()
    env.reset(seed=0)
    for _ in range(400):
        _, _, term, trunc, _ = env.step(np.array([1.0, 1.0, 0.0, 0.0], np.float32))
        if term or trunc:
            break
    assert term or trunc
    venv = RallyVectorEnv(2)
    venv.reset(seed=0)
    venv.set_car_states([1], env.get_state())
    _, rew, *_ = venv.step(np.zeros((2, 4), np.float32))
    assert rew[1] == 0.0  # the next-step autoreset of that car
    assert venv.core.eistate[1].tolist() != env.core.eistate[0].tolist()


def test_a_v1_vector_env_drives_the_v1_default_vehicle():
    # the vector env's default vehicle was the seed rover on version 1 (a bug: its cars did
    # not drive the wheel-speed model RallyEnv(version=1) drives)
    single = RallyEnv(version=1)
    venv = RallyVectorEnv(2, version=1)
    assert venv.config.vehicle == single.config.vehicle
    assert venv.config.digest() == single.config.digest()
