"""Every action-validation path: typed errors with a reason, clipping, no state change."""

from __future__ import annotations

import numpy as np
import pytest
from gymnasium.error import InvalidAction, ResetNeeded

from physics import ParameterError
from physics import layout as L
from rally_env import DEFAULT_LAYOUT, DISCRETE_ACTIONS, RallyEnv, RallyVectorEnv


def _snapshot(env):
    c = env.core
    return (c.sim.state_hash(), c.estate.copy(), c.eistate.copy(), c.obs.copy())


def _unchanged(env, snap):
    c = env.core
    assert c.sim.state_hash() == snap[0]
    assert np.array_equal(c.estate, snap[1], equal_nan=True)
    assert np.array_equal(c.eistate, snap[2])
    assert np.array_equal(c.obs, snap[3])


@pytest.fixture
def env():
    e = RallyEnv()
    e.reset(seed=0)
    for _ in range(5):
        e.step(np.array([0.1, 0.8, 0.0, 0.0], np.float32))
    return e


@pytest.mark.parametrize(
    ("action", "match"),
    [
        (np.array([np.nan, 1, 0, 0], np.float32), "non-finite value nan at steer"),
        (np.array([0, np.inf, 0, 0], np.float32), "non-finite value inf at throttle"),
        (np.array([0, 1, 0, -np.inf]), "non-finite value -inf at handbrake"),
        (np.zeros(3, np.float32), r"shape \(3,\) != \(4,\)"),
        (np.zeros((1, 4), np.float32), r"shape \(1, 4\) != \(4,\)"),
        (np.zeros(5), "shape"),
        (np.zeros(4, np.complex64), "dtype complex64 is not a real number type"),
        (np.array(["a", "b", "c", "d"]), "dtype <U1 is not a real number type"),
        (np.zeros(4, bool), "dtype bool is not a real number type"),
        (np.array([None] * 4), "dtype object"),
        ([[0.0, 1.0], [0.0]], "cannot be read as an array"),
        ("full throttle", "dtype"),
    ],
)
def test_invalid_actions_raise_and_change_nothing(env, action, match):
    snap = _snapshot(env)
    with pytest.raises(InvalidAction, match=match):
        env.step(action)
    _unchanged(env, snap)
    env.step(np.zeros(4, np.float32))  # the env still works


def test_valid_forms_and_clipping(env):
    for a in (
        [0.0, 0.5, 0.0, 0.0],
        (0, 1, 0, 0),
        np.array([0, 1, 0, 0], np.int64),
        np.array([0.2, 0.5, 0.0, 0.0], np.float64),
        np.array([0, 1, 0, 0], np.float16),
    ):
        env.step(a)
    obs, *_ = env.step(np.array([-3.0, 7.0, -2.0, 0.5], np.float32))
    cmds = env.core.sim.state[0, L.CMD_STEER : L.CMD_HANDBRAKE + 1]
    assert cmds.tolist() == [-1.0, 1.0, 0.0, 0.5]
    prev = obs[DEFAULT_LAYOUT.groups["prev_action"]]
    assert prev.tolist() == [-1.0, 1.0, 0.0, 0.5]


def test_step_before_reset():
    with pytest.raises(ResetNeeded):
        RallyEnv().step(np.zeros(4, np.float32))
    with pytest.raises(ResetNeeded):
        RallyVectorEnv(2).step(np.zeros((2, 4), np.float32))


def test_vector_actions():
    venv = RallyVectorEnv(3)
    venv.reset(seed=0)
    venv.step(np.tile([0.0, 1.0, 0.0, 0.0], (3, 1)).astype(np.float32))
    snap = _snapshot(venv)
    bad = np.zeros((3, 4), np.float32)
    bad[2, 1] = np.nan
    with pytest.raises(InvalidAction, match=r"throttle \(index 1\) of car 2"):
        venv.step(bad)
    _unchanged(venv, snap)
    with pytest.raises(InvalidAction, match=r"shape \(4,\) != \(3, 4\)"):
        venv.step(np.zeros(4, np.float32))
    with pytest.raises(InvalidAction, match=r"shape \(2, 4\)"):
        venv.step(np.zeros((2, 4), np.float32))
    _unchanged(venv, snap)
    venv.step(np.full((3, 4), 9.0, np.float32))  # clipped
    assert venv.core.actions[:, 0].tolist() == [1.0, 1.0, 1.0]


def test_core_step_refuses_non_finite_rows_with_a_typed_error():
    env = RallyEnv()
    env.reset(seed=0)
    env.step(np.array([0.1, 0.8, 0.0, 0.0], np.float32))
    snap = _snapshot(env)
    last = env.core.actions.copy()
    bad = np.array([[0.0, np.nan, 0.0, 0.0]])
    with pytest.raises(ParameterError, match="must be finite"):
        env.core.step(bad)
    _unchanged(env, snap)
    assert np.array_equal(env.core.actions, last)


def test_refused_vector_step_keeps_the_last_actions():
    venv = RallyVectorEnv(2, autoreset_mode="Disabled", termination={"time_limit_s": 0.1})
    venv.reset(seed=0)
    a = np.tile([0.2, 1.0, 0.0, 0.0], (2, 1)).astype(np.float32)
    venv.step(a)
    venv.step(a)
    st = venv.get_state()
    with pytest.raises(ResetNeeded):
        venv.step(np.zeros((2, 4), np.float32))
    assert np.array_equal(venv.core.actions, st["actions"])
    assert venv.get_state()["digest"] == st["digest"]


def test_discrete_actions():
    env = RallyEnv(discrete_actions=True)
    env.reset(seed=0)
    for a in (0, np.int64(4), np.array(14), 7):
        obs, *_ = env.step(a)
    assert obs[DEFAULT_LAYOUT.groups["prev_action"]].tolist() == DISCRETE_ACTIONS[7].tolist()
    snap = _snapshot(env)
    for bad, match in (
        (15, "outside"),
        (-1, "outside"),
        (True, "bool"),
        (1.0, "integer"),
        (np.array([1, 2]), "shape"),
        (np.array(2.0), "dtype"),
        ("3", "str"),
    ):
        with pytest.raises(InvalidAction, match=match):
            env.step(bad)
    _unchanged(env, snap)
    venv = RallyVectorEnv(2, discrete_actions=True)
    venv.reset(seed=0)
    venv.step(np.array([1, 13]))
    assert venv.core.actions.tolist() == DISCRETE_ACTIONS[[1, 13]].tolist()
    with pytest.raises(InvalidAction, match="car 1"):
        venv.step(np.array([1, 15]))
    with pytest.raises(InvalidAction, match="integer array"):
        venv.step(np.array([1.0, 2.0]))


@pytest.mark.parametrize(
    ("low", "high", "dtype", "shape"),
    [
        (None, None, np.float32, None),  # the env's own action space
        (-3.5, 7.25, np.float64, (2, 3)),
        (np.array([-1e30, 0.0], np.float32), np.array([1e30, 1e-6], np.float32), np.float32, None),
        (-np.inf, 1.0, np.float32, (3,)),  # unbounded below: Box's own path
        (0, 9, np.int64, (5,)),  # integers: Box's own path
    ],
)
def test_the_action_space_samples_exactly_as_a_box(low, high, dtype, shape):
    from gymnasium import spaces

    from rally_env.spaces import ActionBox, action_space

    fast = action_space() if low is None else ActionBox(low, high, shape, dtype)
    box = spaces.Box(fast.low, fast.high, fast.shape, fast.dtype)
    assert isinstance(fast, spaces.Box) and fast == box and repr(fast) == repr(box)
    for seed in (0, 1, 12345):
        fast.seed(seed)
        box.seed(seed)
        a = np.array([fast.sample() for _ in range(2000)])
        b = np.array([box.sample() for _ in range(2000)])
        assert a.dtype == b.dtype == fast.dtype and a.shape == b.shape
        assert np.array_equal(a, b)
        assert fast.np_random.bit_generator.state == box.np_random.bit_generator.state
        assert all(fast.contains(x) for x in a[:50])
    with pytest.raises(Exception, match="mask"):
        fast.sample(mask=np.ones(fast.shape, bool))


def test_the_action_space_survives_pickling_and_batching():
    import pickle

    from gymnasium import spaces
    from gymnasium.vector.utils import batch_space

    space = RallyEnv().action_space
    again = pickle.loads(pickle.dumps(space))
    space.seed(3)
    again.seed(3)
    assert np.array_equal(space.sample(), again.sample())
    batched = batch_space(space, 3)
    assert isinstance(batched, spaces.Box) and batched.shape == (3, 4)


@pytest.mark.parametrize("env_id", ["Rally-v0", "RallyWheelSpeed-v1", "RallyLearn-v0"])
def test_every_continuous_id_samples_through_the_action_box(env_id):
    import gymnasium as gym

    from rally_env.spaces import ActionBox

    env = gym.make(env_id)
    assert type(env.action_space) is ActionBox
    env.close()
