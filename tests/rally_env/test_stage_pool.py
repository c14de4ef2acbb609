"""random_stage={"pool": P, "pool_steps": T}: every T env steps a fresh window of P generated
stages, drawn from the env's seed; a resetting car drives one of the current window's stages,
chosen with its own stream. Cars share those stages (and their slots and tiles), a car's
episodes still depend on nothing another car does, and states and replays carry the pool."""

from __future__ import annotations

import pickle

import numpy as np
import pytest

from rally_env import RallyEnv, RallyVectorEnv, StateError
from rally_env import kernels as K
from rally_env import stages as S
from rally_env.replay import RecordReplay, verify
from rally_env.replay.errors import ReplayFormatError
from rally_env.replay.format import replay_from_dict
from tests.rally_env.test_random_stages import _hard_actions
from tests.rally_env.test_replay_support import drive, record_run
from tracks.prefetch import Prefetcher

SHORT = {"length_m": 400.0}


def _pool(p, t=200, **kw):
    return {**SHORT, "pool": p, "pool_steps": t, **kw}


def test_a_pool_window_is_a_function_of_its_seed_and_index():
    a = S.pool_stages(7, 3, 5, 0.2, 0.8)
    S.pool_stages.cache_clear()
    b = S.pool_stages(7, 3, 5, 0.2, 0.8)
    assert all(np.array_equal(x, y) for x, y in zip(a, b, strict=True))
    assert (a[2] == 0).all()  # no loops asked for: all point to point
    assert a[0].shape == (5,) and ((a[0] >= 0) & (a[0] < 2**31 - 1)).all()
    assert ((a[1] >= 0.2) & (a[1] <= 0.8)).all()
    assert not a[0].flags.writeable  # a cached window cannot be changed by a caller
    for other in (S.pool_stages(7, 4, 5, 0.2, 0.8), S.pool_stages(8, 3, 5, 0.2, 0.8)):
        assert not np.array_equal(a[0], other[0])


def test_cars_share_the_windows_stages_and_their_slots():
    env = RallyVectorEnv(12, stage="random", random_stage=_pool(2, 10_000))
    _, info = env.reset(seed=5)
    seeds, _, _ = S.pool_stages(5, 0, 2, 0.2, 0.8)
    got = info["stage_seed"]
    assert set(got.tolist()) <= set(seeds.tolist())
    slots = env.core.eistate[:, K.EI_SLOT]
    assert len(set(slots.tolist())) == len(set(got.tolist())) <= 2
    assert env.core.bank.refs.sum() == 12


def test_a_resetting_car_drives_a_stage_of_the_current_window():
    t = 15
    env = RallyVectorEnv(4, stage="random", random_stage=_pool(3, t), autoreset_mode="SameStep")
    _, info = env.reset(seed=11)
    windows = set()
    for a in _hard_actions(150, 4, seed=3):
        _, _, te, tr, info = env.step(a)
        window = env.core.clock // t
        for k in np.flatnonzero(te | tr):
            seeds, diffs, _ = S.pool_stages(11, window, 3, 0.2, 0.8)
            st = env.core.bank.stage(int(env.core.eistate[k, K.EI_SLOT]))
            j = list(seeds).index(int(info["stage_seed"][k]))  # one of this window's
            want = S.generated_stage(int(seeds[j]), 400.0, float(diffs[j]))
            assert st.digest() == want.digest()
            windows.add(window)
    assert len(windows) >= 3, "cars should have reset in several windows"


def _car0_run(others_seed, n=3, steps=160):
    acts = _hard_actions(steps, n, seed=others_seed)
    acts[:, 0] = _hard_actions(steps, 1, seed=0)[:, 0]  # car 0 drives the same every time
    env = RallyVectorEnv(n, stage="random", random_stage=_pool(2, 20), autoreset_mode="SameStep")
    obs, info = env.reset(seed=4)
    seq, names = [obs[0].copy()], [int(info["stage_seed"][0])]
    for a in acts:
        obs, _, _, _, info = env.step(a)
        seq.append(obs[0].copy())
        names.append(int(info["stage_seed"][0]))
    return np.stack(seq), names


def test_a_cars_episodes_do_not_depend_on_the_other_cars():
    base, names = _car0_run(1)
    assert len(set(names)) >= 2, "car 0 should reset onto another stage"
    for others in (2, 3):
        seq, nm = _car0_run(others)
        assert np.array_equal(base, seq) and names == nm


def test_car_k_matches_a_single_env_reset_with_its_stream():
    steps, k = 300, 1
    acts = _hard_actions(steps, 3, seed=9)
    venv = RallyVectorEnv(3, stage="random", random_stage=_pool(2, 20), autoreset_mode="SameStep")
    vobs, vinfo = venv.reset(seed=6)
    env = RallyEnv(stage="random", random_stage=_pool(2, 20))
    obs, info = env.reset(seed=6, options={"car_index": k})
    assert np.array_equal(obs, vobs[k]) and info["stage_seed"] == vinfo["stage_seed"][k]
    ends = 0
    for a in acts:
        vobs, _, _, _, vinfo = venv.step(a)
        obs, _, te, tr, info = env.step(a[k])
        if te or tr:
            ends += 1
            obs, info = env.reset()
            # SameStep: the vector env returns the new episode's first observation
        assert np.array_equal(obs, vobs[k])
        assert info["stage_seed"] == vinfo["stage_seed"][k]
    assert ends >= 2


def test_the_env_asks_the_worker_for_the_current_and_next_window(monkeypatch):
    asked = []
    refuse = {"after": 10**9}

    def fake(seed, length, diff, sectioned=False, prebake=True, limit=False, laps=0):
        if len(asked) >= refuse["after"]:
            return False
        asked.append((seed, diff, prebake, limit))
        return True

    monkeypatch.setattr(S, "prefetch_stage", fake)
    env = RallyVectorEnv(2, stage="random", random_stage=_pool(3, 5))
    env.reset(seed=1)
    assert asked == []  # nothing is asked ahead at a reset
    refuse["after"] = 4  # the worker takes 4 requests, then is busy
    env.step(np.zeros((2, 4), np.float32))
    want = []
    for w in (0, 1):
        seeds, diffs, _ = S.pool_stages(1, w, 3, 0.2, 0.8)
        want += list(zip(seeds.tolist(), diffs.tolist(), strict=True))
    want = list(dict.fromkeys(want))
    held = {(int(s), d) for (_g, s, _n, d, _laps) in env.core.bank._key_slot}
    todo = [x for x in want if x not in held]
    assert [(s, d) for s, d, _p, _l in asked] == todo[:4]
    assert all(p == S.POOL_PREBAKE_M and lim for _s, _d, p, lim in asked)
    refuse["after"] = 10**9
    env.step(np.zeros((2, 4), np.float32))  # the rest once the worker takes them
    assert [(s, d) for s, d, _p, _l in asked] == todo


def test_the_pool_survives_a_state_round_trip():
    env = RallyVectorEnv(3, stage="random", random_stage=_pool(2, 15))
    env.reset(seed=3)
    acts = _hard_actions(120, 3, seed=5)
    for a in acts[:40]:
        env.step(a)
    st = env.get_state()
    assert st["pool"] == {"seed": 3, "clock": 40}

    def rest(e):
        out = []
        for a in acts[40:]:
            obs, _, _, _, info = e.step(a)
            out.append((obs.copy(), info["stage_seed"].copy()))
        return out

    first = rest(env)
    other = RallyVectorEnv(3, stage="random", random_stage=_pool(2, 15))
    other.reset(seed=99)  # another pool seed and clock until the state comes in
    other.set_state(pickle.loads(pickle.dumps(st)))
    again = rest(other)
    assert any(not np.array_equal(a[1], first[0][1]) for a in first)  # stages changed
    for (o1, s1), (o2, s2) in zip(first, again, strict=True):
        assert np.array_equal(o1, o2) and np.array_equal(s1, s2)


def _core_state(env):
    st = env.core.get_state()
    assert st["pool"]["clock"] == env.core.clock
    return st


@pytest.mark.parametrize(
    ("pool", "needle"),
    [
        (None, "pool"),
        ({"seed": 1}, "'seed' and 'clock'"),
        ({"seed": -1, "clock": 0}, "seed"),
        ({"seed": 1, "clock": 2.0}, "clock"),
        ({"seed": 1, "clock": True}, "clock"),
    ],
)
def test_a_bad_pool_in_a_state_is_refused_and_changes_nothing(pool, needle):
    from rally_env.core import state_digest

    env = RallyEnv(stage="random", random_stage=_pool(2, 15))
    env.reset(seed=3)
    for _ in range(7):
        env.step(np.array([0.0, 1.0, 0.0, 0.0], np.float32))
    st = _core_state(env)
    if pool is None:
        del st["pool"]
    else:
        st["pool"] = pool
    st["digest"] = state_digest(st)
    before = (env.core.stages.pool_seed, env.core.clock)
    with pytest.raises(StateError, match=needle):
        env.core.set_state(st)
    assert (env.core.stages.pool_seed, env.core.clock) == before


def _record_two_episodes(**kw):
    env = RecordReplay(RallyEnv(stage="random", random_stage=_pool(2, 12), **kw), save_partial=True)
    obs, _ = env.reset(seed=9)
    for _ in range(20):
        obs, *_ = env.step(drive(obs))
    env.reset()  # the second episode starts at env step 20: window 1
    for _ in range(20):
        obs, *_ = env.step(drive(obs))
    env.close()
    return env.replays


def test_pool_runs_verify_and_a_changed_pool_clock_is_caught():
    a, b = _record_two_episodes()
    assert a.reset["pool"] == {"seed": 9, "clock": 0}
    assert b.reset["pool"] == {"seed": 9, "clock": 20} and "rng_state" in b.reset
    assert verify(a).accepted and verify(b).accepted
    # the same stream in another window draws another stage: the claim no longer matches
    moved = None
    for clock in range(0, 240, 12):
        seeds, _, _ = S.pool_stages(9, clock // 12, 2, 0.2, 0.8)
        if b.stage["name"] not in [f"gen-{s}" for s in seeds]:
            moved = clock
            break
    assert moved is not None
    doc = b.to_dict()
    doc["reset"]["pool"]["clock"] = moved
    rep = verify(replay_from_dict(doc))
    assert not rep.accepted and rep.reason == "stage_mismatch"


@pytest.mark.parametrize(
    "pool",
    [{"seed": 1}, {"seed": -3, "clock": 0}, {"seed": 1, "clock": "0"}, [1, 2]],
)
def test_a_malformed_pool_in_a_replay_is_a_format_error(pool):
    (a, _b) = _record_two_episodes()
    doc = a.to_dict()
    doc["reset"]["pool"] = pool
    with pytest.raises(ReplayFormatError, match="pool"):
        replay_from_dict(doc)


def test_a_pool_in_a_replay_of_an_env_without_one_is_refused():
    rp, _ = record_run(seed=2, max_steps=5, stage="random", random_stage=SHORT)
    doc = rp.to_dict()
    doc["reset"]["pool"] = {"seed": 2, "clock": 0}
    with pytest.raises(ReplayFormatError, match="pool"):
        verify(replay_from_dict(doc))


def test_prefetcher_request_reports_whether_it_took_the_request():
    p = Prefetcher(max_pending=2)
    p.disabled = True
    assert p.request(1, 400.0, 0.5) is False  # off
    p.disabled = False
    p._pending = {(1, 400.0, 0.5, False, 0), (2, 400.0, 0.5, False, 0)}
    assert p.request(1, 400.0, 0.5) is True  # on its way already
    assert p.request(3, 400.0, 0.5) is False  # max_pending requests in flight
    p._pending = set()
    p._ready = {(i, 400.0, 0.5, False, 0): None for i in range(10, 10 + p.capacity)}
    assert p.request(3, 400.0, 0.5, limit=True) is False  # would push out an untaken answer
