"""The road-ahead observation (``road_ahead=True``, ``RallyDirectAhead-v0``): what the road does
up to 600 m ahead, in bins; an observation option that changes no run."""

from __future__ import annotations

import warnings

import gymnasium as gym
import numpy as np
import pytest

import rally_env
from rally_env import RallyEnv, RallyVectorEnv
from rally_env.spaces import CREST_SCALE_M, ROAD_AHEAD_BINS_M, ObsLayout
from tests.rally_env.conftest import random_actions
from tracks import Feature, Finish, PathBuilder, Section, Stage, Start, TerrainSpec

#: straight 300 m, a left turn of radius 60 m (90 deg), straight 300 m; a crest at 120 m; sand
#: from 200 m to 260 m
R = 60.0


@pytest.fixture(scope="module")
def shaped() -> Stage:
    b = PathBuilder(knot_spacing_m=10.0)
    b.straight(300.0).turn(R, 90.0).straight(300.0)
    return Stage(
        name="shaped",
        knots=b.knots(),
        sections=(
            Section(0.0, 10.0, "gravel"),
            Section(200.0, 10.0, "sand"),
            Section(260.0, 10.0, "gravel"),
        ),
        features=(Feature("crest", 120.0, 40.0, 1.5),),
        finish=Finish(s_m=560.0),
        start=Start(10.0, 0.0),
        terrain=TerrainSpec(amplitude_m=0.0, roughness_m=0.0, berm_height_m=0.0),
    )


def _block(env, obs):
    L = env.unwrapped.core.layout
    return {
        g: obs[L.groups[g]]
        for g in ("ahead_curv", "ahead_crest", "ahead_elev", "ahead_grip", "to_finish")
    }


def test_layout_and_ids():
    plain = ObsLayout(4)
    ahead = ObsLayout(4, road_ahead=True)
    assert ahead.size == plain.size + 4 * len(ROAD_AHEAD_BINS_M) + 1
    assert [f.name for f in ahead.fields[: plain.size]] == [f.name for f in plain.fields]
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no "out of date" notice for either name
        for env_id, size in (("RallyDirectAhead-v0", ahead.size), ("RallyDirect-v0", plain.size)):
            env = gym.make(env_id)
            assert env.observation_space.shape == (size,)
            env.close()
    assert set(rally_env.AHEAD_ENV_IDS) <= set(gym.registry)
    v1 = ObsLayout(4, version=1, road_ahead=True)
    assert v1.size == ObsLayout(4, version=1).size + ahead.size - plain.size


def test_the_block_reads_the_road(shaped):
    env = RallyEnv(stage=shaped, road_ahead=True)
    obs, _ = env.reset(seed=0)
    b = _block(env, obs)
    # the car is at s = 10 m: the turn starts ~300 m along, i.e. 290 m ahead (bins 200-300,
    # 300-450): sharpest curvature ~ 1 / 60 m, positive (left), x 10; nothing sharp before
    k = np.array([(a + b_) / 2 for a, b_ in ROAD_AHEAD_BINS_M])
    curv = b["ahead_curv"]
    assert np.all(np.abs(curv[k < 150]) < 0.02)
    assert curv[k > 300].max() == pytest.approx(10.0 / R, rel=0.05)
    # the crest: h (1 - u^2)^2, its top at 120 m (110 m ahead): -z'' = 4 h / (L/2)^2 there
    crest = b["ahead_crest"]
    top = 4.0 * 1.5 / 20.0**2 * CREST_SCALE_M
    i = next(j for j, (a, b_) in enumerate(ROAD_AHEAD_BINS_M) if a <= 110.0 < b_)
    assert crest[i] == pytest.approx(top, rel=0.05) and crest[i] == crest.max()
    assert crest[0] == 0.0
    # sand (grip below gravel's) from 190 to 250 m ahead
    grip = b["ahead_grip"]
    sand = [j for j, (a, b_) in enumerate(ROAD_AHEAD_BINS_M) if a < 250.0 and b_ > 190.0]
    assert np.all(grip[sand] < grip[0]) and np.all(np.delete(grip, sand) == grip[0])
    # 550 m of the timed stage left: 550 / 600
    assert b["to_finish"][0] == pytest.approx(550.0 / 600.0, rel=1e-3)
    env.close()


def test_near_the_finish_and_on_a_loop():
    env = RallyEnv(stage="rallycross", road_ahead=True)  # a loop: the bins wrap at the lap line
    obs, _ = env.reset(seed=0)
    for a in random_actions(100, seed=3):
        obs, *_ = env.step(a)
        assert np.all(np.isfinite(obs)) and env.observation_space.contains(obs)
    env.close()


def test_an_observation_option_changes_no_run():
    acts = random_actions(150, seed=5)
    runs = []
    for ahead in (False, True):
        env = RallyEnv(stage="switchbacks", road_ahead=ahead)
        env.reset(seed=4)
        for a in acts:
            obs, r, _te, _tr, _info = env.step(a)
        runs.append((env.unwrapped.core.sim.state_hash(), float(r), obs[:59].copy()))
        env.close()
    assert runs[0][0] == runs[1][0] and runs[0][1] == runs[1][1]
    assert np.array_equal(runs[0][2], runs[1][2])  # the plain fields are the same


def test_batch_size_independent_on_random_stages():
    acts = random_actions(80, seed=2, n_cars=3)
    seqs = {}
    for n in (1, 3):
        venv = RallyVectorEnv(n, stage="random", random_stage={"length_m": 600.0}, road_ahead=True)
        obs, _ = venv.reset(seed=9)
        seq = [obs[0].copy()]
        for a in acts[:, :n]:
            obs, *_ = venv.step(a)
            seq.append(obs[0].copy())
        seqs[n] = np.stack(seq)
    assert np.array_equal(seqs[1], seqs[3])


def test_replays_with_the_option_verify():
    from rally_env.replay import RecordReplay
    from rally_env.replay.verify import verify

    env = RecordReplay(RallyEnv(stage="opener", road_ahead=True), save_partial=True)
    env.reset(seed=1)
    for a in random_actions(60, seed=1):
        *_, te, tr, _ = env.step(a)
        if te or tr:
            break
    env.reset(seed=2)
    env.close()
    assert env.replays
    rep = env.replays[0]
    assert rep.env_kwargs.get("road_ahead") is True
    report = verify(rep)
    assert report.accepted, report


def _apex_by_hand(path, s, closed=False):
    """Per bin: the first sample of the largest |curvature| in the bin's window (from the
    path itself), as a share of the window; 0.5 where nothing curves."""
    ds = float(path.ds_m)
    k = np.abs(np.asarray(path.curvature))
    n = len(k)
    unit = max(1, int(np.floor(ROAD_AHEAD_BINS_M[0][1] / ds + 0.5)))
    out = []
    for a, b in ROAD_AHEAD_BINS_M:
        j0 = int(np.floor((s + a) / ds))
        width = round((b - a) / ROAD_AHEAD_BINS_M[0][1]) * unit
        win = k[j0 : min(j0 + width, n)] if j0 < n else k[:0]
        out.append(0.5 if not len(win) or win.max() == 0 else int(np.argmax(win)) / width)
    return np.array(out)


def test_the_apex_block_says_where_each_bins_corner_is(shaped):
    plain = RallyEnv(stage=shaped, road_ahead=True)
    env = RallyEnv(stage=shaped, road_ahead=True, ahead_apex=True)
    L = env.core.layout
    assert L.size == plain.core.layout.size + len(ROAD_AHEAD_BINS_M)
    assert [f.name for f in L.fields[: plain.core.layout.size]] == [
        f.name for f in plain.core.layout.fields
    ]
    obs, _ = env.reset(seed=0)
    ref, _ = plain.reset(seed=0)
    path = env.core.bank.stage(0).path
    # from s = 10 m the turn (300-394 m along) starts at the end of the 200-300 m bin and its
    # sharpest point lies inside the turn, in the 300-450 m bin
    first = obs[L.groups["ahead_apex"]]
    i = ROAD_AHEAD_BINS_M.index((200.0, 300.0))
    assert first[i] > 0.9
    assert 300.0 <= 10.0 + 300.0 + 150.0 * first[i + 1] <= 300.0 + R * np.pi / 2
    checked = 0
    for _ in range(300):
        apex = obs[L.groups["ahead_apex"]]
        s = float(env.core.estate[0, 0])
        np.testing.assert_allclose(apex, _apex_by_hand(path, s), atol=1e-6)
        # the other values, and the run, are the plain road-ahead env's
        np.testing.assert_array_equal(obs[: ref.size], ref)
        checked += 1
        a = np.array([0.0, 0.7, 0.0, 0.0], np.float32)
        obs, _, term, trunc, _ = env.step(a)
        ref, _, term2, trunc2, _ = plain.step(a)
        assert (term, trunc) == (term2, trunc2)
        if term or trunc:
            break
    assert checked > 100
