"""get_state / set_state: plain, picklable, bit-identical continuation; bad states refused."""

from __future__ import annotations

import copy
import pickle

import numpy as np
import pytest
from gymnasium.utils.env_checker import data_equivalence

from rally_env import RallyEnv, RallyVectorEnv, StateError
from tests.rally_env.conftest import random_actions, rollout


def _equal_runs(a, b):
    for x, y in zip(a, b, strict=True):
        assert np.array_equal(x[0], y[0]) and x[1:4] == y[1:4]
        assert data_equivalence(x[4], y[4], exact=True)


@pytest.mark.parametrize("kw", [{}, {"randomize": True}, {"stage": ["opener", "skidpad"]}])
def test_restore_continues_bit_identically(kw):
    acts = random_actions(120, seed=3)
    env = RallyEnv(**kw)
    env.reset(seed=8)
    rollout(env, acts[:40])
    st = env.get_state()
    blob = pickle.dumps(st)
    ref = rollout(env, acts[40:], reset_on_end=True)
    # same env, after more history
    env.reset(seed=1)
    rollout(env, acts[:10])
    env.set_state(pickle.loads(blob))
    _equal_runs(ref, rollout(env, acts[40:], reset_on_end=True))
    # a fresh env with the same arguments
    other = RallyEnv(**kw)
    obs = other.set_state(pickle.loads(blob))
    assert obs.shape == other.observation_space.shape
    _equal_runs(ref, rollout(other, acts[40:], reset_on_end=True))


def test_restore_random_stage_into_a_fresh_env():
    kw = {"stage": "random", "random_stage": {"length_m": 400.0}}
    env = RallyEnv(**kw)
    env.reset(seed=4)
    rollout(env, random_actions(20, 1))
    st = pickle.loads(pickle.dumps(env.get_state()))
    ref = rollout(env, random_actions(30, 2))
    other = RallyEnv(**kw)
    other.set_state(st)
    _equal_runs(ref, rollout(other, random_actions(30, 2)))


def test_pickle_round_trip_of_the_env():
    env = RallyEnv()
    env.reset(seed=2)
    rollout(env, random_actions(25, 5))
    clone = pickle.loads(pickle.dumps(env))
    _equal_runs(rollout(env, random_actions(40, 6)), rollout(clone, random_actions(40, 6)))


def test_vector_state():
    venv = RallyVectorEnv(3)
    venv.reset(seed=0)
    acts = random_actions(80, 1, n_cars=3)
    for a in acts[:20]:
        venv.step(a)
    st = venv.get_state()
    ref = [venv.step(a)[0] for a in acts[20:]]
    other = RallyVectorEnv(3)
    other.set_state(pickle.loads(pickle.dumps(st)))
    assert all(np.array_equal(x, other.step(a)[0]) for x, a in zip(ref, acts[20:], strict=True))
    with pytest.raises(StateError):
        RallyVectorEnv(2).set_state(st)
    with pytest.raises(StateError, match="not a RallyEnv state"):
        RallyEnv().set_state(st)


def _corruptions(st):
    def edit(fn):
        s = copy.deepcopy(st)
        fn(s)
        return s

    yield "not a dict", [1, 2, 3]
    yield "missing key", edit(lambda s: s.pop("estate"))
    yield "bit flip", edit(lambda s: s["sim_state"].__setitem__((0, 0), s["sim_state"][0, 0] + 1))
    yield "wrong version", edit(lambda s: s.__setitem__("version", 99))
    yield "bad shape", edit(lambda s: s.__setitem__("estate", s["estate"][:, :3]))
    yield "wrong extra", edit(lambda s: s.__setitem__("extra", None))


def test_bad_states_raise_and_change_nothing():
    env = RallyEnv()
    env.reset(seed=0)
    rollout(env, random_actions(10, 0))
    good = env.get_state()
    before = env.core.sim.state_hash(), env.core.estate.copy()
    for name, bad in _corruptions(good):
        with pytest.raises(StateError):
            env.set_state(bad)
        assert env.core.sim.state_hash() == before[0], name
        assert np.array_equal(env.core.estate, before[1], equal_nan=True), name
    # a digest-consistent state from an env with other settings
    other = RallyEnv(control_hz=10)
    other.reset(seed=0)
    with pytest.raises(StateError, match="different settings"):
        env.set_state(other.get_state())
    env.set_state(good)  # still usable
