"""Behavioural episodes: exact finish times, every end reason, and a reward that can't be
farmed (circles, reversing, cutting across the stage, standing still)."""

from __future__ import annotations

import math

import numpy as np
import pytest

import tracks
from physics import VehicleBatch
from physics import layout as L
from rally_env import DEFAULT_LAYOUT, INFO_KEYS, RallyEnv, RallyVectorEnv
from rally_env.config import ConfigError
from rally_env.info import end_reason, reward_terms
from tests.rally_env.conftest import FULL_THROTTLE, STILL, heading_controller, run_episode

IX = DEFAULT_LAYOUT.index


def _progress_terms(infos):
    return np.array([i["reward_progress"] for i in infos[1:]])


def test_full_throttle_on_proving_ground_finishes_with_an_exact_time():
    env = RallyEnv(stage="proving-ground")
    _total, steps, infos = run_episode(env, lambda o, i: FULL_THROTTLE)
    last = infos[-1]
    assert end_reason(last) == "finished" and last["finished"]
    assert last["reward_finish"] == env.config.reward_weights.finish
    t_fin = last["finish_time_s"]
    cps = last["checkpoint_times_s"]
    assert len(cps) == 2 and 0 < cps[0] < cps[1] < t_fin
    # inside the last control step, and not on a control-step boundary: interpolated
    assert last["stage_time_s"] - env.config.dt_s < t_fin <= last["stage_time_s"]
    assert (t_fin * env.config.control_hz) % 1.0 != 0.0
    # An independent reference: the same physics stepped one substep at a time, the crossing
    # of x = finish interpolated linearly inside its substep.
    stage = tracks.load_stage("proving-ground")
    sim = VehicleBatch(1, env.config.vehicle, [tracks.bake(stage)])
    sim.reset(np.array([[*stage.start_pose, 0.0]]))
    sim.set_commands(np.array([[0.0, 1.0, 0.0, 0.0]]))
    x_fin = stage.path.point_at(stage.finish_s_m)[0]
    crossings = {}
    lines = {
        "cp0": stage.path.point_at(1100.0)[0],
        "cp1": stage.path.point_at(2200.0)[0],
        "finish": x_fin,
    }
    while "finish" not in crossings:
        x0 = sim.position_m[0, 0]
        sim.step(1)
        x1 = sim.position_m[0, 0]
        for name, xl in lines.items():
            if name not in crossings and x0 < xl <= x1:
                crossings[name] = (sim.istate[0, L.I_SUBSTEPS] - 1 + (xl - x0) / (x1 - x0)) * L.DT
    assert t_fin == pytest.approx(crossings["finish"], abs=1e-9)
    assert cps[0] == pytest.approx(crossings["cp0"], abs=1e-9)
    assert cps[1] == pytest.approx(crossings["cp1"], abs=1e-9)
    # progress paid is the stage length (to within one step of run past the line)
    paid = _progress_terms(infos).sum() / env.config.reward_weights.progress
    assert paid == pytest.approx(last["stage_length_m"], abs=3.0)
    assert steps * env.config.dt_s == pytest.approx(last["stage_time_s"])


def test_standing_still_ends_stuck_and_does_not_pay():
    env = RallyEnv()
    total, _steps, infos = run_episode(env, lambda o, i: STILL)
    last = infos[-1]
    assert end_reason(last) == "stuck"
    assert last["stage_time_s"] == env.config.termination.stuck_time_s
    w = env.config.reward_weights
    assert total == pytest.approx(-w.time * last["stage_time_s"] - w.crash)
    assert _progress_terms(infos).sum() == pytest.approx(0.0, abs=1e-6)


def test_leaving_the_road_ends_off_stage():
    env = RallyEnv(stage="opener")
    total, _steps, infos = run_episode(env, lambda o, i: np.array([1.0, 1.0, 0, 0], np.float32))
    last = infos[-1]
    assert end_reason(last) == "off_stage" and last["off_road"]
    assert last["reward_crash"] == -env.config.reward_weights.crash
    assert any(i["reward_off_road"] < 0 for i in infos[1:])
    assert total < 0


def test_time_limit_truncates():
    env = RallyEnv(termination={"time_limit_s": 2.0})
    env.reset(seed=0)
    for _t in range(40):
        _obs, _r, term, trunc, info = env.step(FULL_THROTTLE)
    assert trunc and not term and end_reason(info) == "time_limit"
    assert info["stage_time_s"] == 2.0
    assert RallyEnv().core.estate.shape[0] == 1


def test_rolled():
    env = RallyEnv(stage="proving-ground")
    env.reset(seed=0)
    st = env.core.sim.state
    st[0, L.QUAT_W : L.QUAT_Z + 1] = (0.0, 1.0, 0.0, 0.0)  # upside down
    st[0, L.POS_Z] += 2.0
    for _ in range(200):
        _obs, _r, term, _trunc, info = env.step(STILL)
        if term:
            break
    assert end_reason(info) == "rolled"
    assert info["stage_time_s"] == pytest.approx(env.config.termination.roll_time_s, abs=0.2)


def test_driving_the_wrong_way_costs_and_ends_wrong_way():
    env = RallyEnv(stage="proving-ground")
    env.reset(seed=0)
    x, y, h = tracks.load_stage("proving-ground").start_pose
    c = env.core
    c.sim.reset(
        np.array([[x, y, h + math.pi, 0.0]]), cars=np.array([0]), terrain_ids=int(c.eistate[0, 7])
    )
    paid, rewards = [], []
    for _ in range(2000):
        _obs, r, term, trunc, info = env.step(FULL_THROTTLE)
        paid.append(info["reward_progress"])
        rewards.append(r)
        if term or trunc:
            break
    assert end_reason(info) == "wrong_way"
    assert sum(paid) < 0 and max(paid) <= 0.0
    assert sum(rewards) < -env.config.reward_weights.crash


def _circle(obs, info):
    """Full left lock at about 5 m/s: a tight circle."""
    return np.array([1.0, 0.5 if info["speed_mps"] < 5.0 else 0.0, 0.0, 0.0], np.float32)


def test_circles_do_not_pay():
    # No stuck/wrong-way stop: a minute of circling on the 30 m wide proving ground.
    env = RallyEnv(stage="proving-ground", termination={"stuck_time_s": 1e5, "wrong_way_m": 1e5})
    obs, info = env.reset(seed=0)
    paid, total = [], 0.0
    for _t in range(60 * 20):
        obs, r, term, trunc, info = env.step(_circle(obs, info))
        assert not (term or trunc), end_reason(info)
        paid.append(info["reward_progress"])
        total += r
    cum = np.cumsum(paid) / env.config.reward_weights.progress
    # the paid progress is the net displacement along the stage: bounded by the circle size
    assert cum.max() < 25.0
    assert abs(cum[-1] - cum[len(cum) // 2]) < 25.0
    assert total < 0.0
    # with the default settings circling ends the episode, with a negative return
    total, _, infos = run_episode(RallyEnv(stage="proving-ground"), _circle)
    assert end_reason(infos[-1]) in ("stuck", "wrong_way") and total < 0


def test_cutting_across_the_stage_does_not_pay(hairpin_stage):
    # Let the car go far off the road so it can reach the other leg of the hairpin.
    env = RallyEnv(
        stage=hairpin_stage, termination={"off_road_max_m": 40.0, "off_road_max_s": 60.0}
    )
    policy = heading_controller(lambda x: math.pi / 2 if x > 100.0 else 0.0)
    total, _steps, infos = run_episode(env, policy)
    off = [i["off_road"] for i in infos]
    first_off = off.index(True)
    paid = _progress_terms(infos)
    assert end_reason(infos[-1]) == "off_stage"
    assert not infos[-1]["finished"]
    # reached the other leg (y ~ 27 m) but nothing was paid after leaving the road
    assert max(i["position_m"][1] for i in infos) > 20.0
    assert paid[first_off:].max() <= 0.0
    assert infos[-1]["credited_progress_m"] < 130.0
    assert total < paid[:first_off].sum()


def test_loop_stage_counts_laps():
    env = RallyEnv(stage="skidpad")

    def follow(obs, info):
        x, y = obs[IX["look_x_10m"]] * 10, obs[IX["look_y_10m"]] * 10
        steer = float(np.clip(2.0 * math.atan2(y, x), -1, 1))
        return np.array([steer, 0.6 if info["speed_mps"] < 8 else 0.0, 0, 0], np.float32)

    _total, _steps, infos = run_episode(env, follow)
    last = infos[-1]
    assert end_reason(last) == "finished" and last["lap"] == 3
    laps = last["checkpoint_times_s"]  # skidpad has no checkpoints: the two lap lines
    assert len(laps) == 2 and 0 < laps[0] < laps[1] < last["finish_time_s"]
    assert last["progress_m"] == pytest.approx(last["stage_length_m"], abs=1.0)
    lap_len = last["stage_length_m"] / 3
    assert [i["lap"] for i in infos if i["progress_m"] < lap_len - 1][-1] == 1


def test_info_keys_single_and_vector():
    env = RallyEnv()
    _, info = env.reset(seed=0)
    _, _, _, _, info2 = env.step(FULL_THROTTLE)
    for d in (info, info2):
        assert set(INFO_KEYS) <= set(d)
        assert math.isnan(d["finish_time_s"])
        assert d["position_m"].shape == (3,) and d["wheel_loads_n"].shape == (4,)
    venv = RallyVectorEnv(3)
    _, vinfo = venv.reset(seed=0)
    _, _, _, _, vinfo = venv.step(np.tile(FULL_THROTTLE, (3, 1)))
    for k in INFO_KEYS:
        assert k in vinfo and f"_{k}" in vinfo
    assert vinfo["position_m"].shape == (3, 3)
    assert vinfo["wheel_loads_n"].shape == (3, 4)
    assert vinfo["checkpoint_times_s"].shape == (3, 2)
    assert vinfo["reward_progress"].shape == (3,)
    assert vinfo["stage_time_s"].tolist() == [0.05] * 3
    assert info2["stage_time_s"] == 0.05
    assert vinfo["speed_mps"][0] == info2["speed_mps"]


def test_obs_fields_match_info():
    env = RallyEnv()
    env.reset(seed=0)
    for _ in range(60):
        obs, _, _, _, info = env.step(np.array([0.1, 1.0, 0, 0], np.float32))
    assert obs[IX["speed"]] == pytest.approx(info["speed_mps"] / 50.0, rel=1e-6)
    assert obs[IX["heading_error"]] == pytest.approx(info["heading_error_rad"] / math.pi, rel=1e-5)
    assert obs[IX["progress"]] == pytest.approx(
        info["progress_m"] / info["stage_length_m"], rel=1e-5
    )
    loads = obs[DEFAULT_LAYOUT.groups["load"]]
    static = 3000.0 * 3.72 / 4
    assert loads == pytest.approx(info["wheel_loads_n"] / static, rel=1e-5)
    assert env.observation_space.contains(obs)


@pytest.mark.parametrize("hz", [10, 60])
def test_control_rates_share_the_physics(hz):
    ref = RallyEnv(stage="proving-ground", control_hz=20)
    env = RallyEnv(stage="proving-ground", control_hz=hz)
    ref.reset(seed=0)
    env.reset(seed=0)
    for _ in range(20):
        ref.step(FULL_THROTTLE)
    for _ in range(hz):
        env.step(FULL_THROTTLE)
    assert ref.core.sim.state_hash() == env.core.sim.state_hash()
    assert env.metadata["render_fps"] == hz


@pytest.mark.parametrize("hz", [25, 9, 120, 20.5, "20"])
def test_bad_control_rate(hz):
    with pytest.raises(ConfigError, match="control_hz"):
        RallyEnv(control_hz=hz)


def test_a_jump_to_another_part_of_the_stage_is_a_cut(hairpin_stage):
    """If the projection ever lands on another leg (here: the car is moved there), the jump in
    stage position is not paid and the episode ends off_stage."""
    env = RallyEnv(stage=hairpin_stage)
    env.reset(seed=0)
    for _ in range(100):
        env.step(FULL_THROTTLE)
    c = env.core
    before = c.estate[0, 2]  # credited position
    p = hairpin_stage.path
    x, y = p.point_at(p.length_m - 60.0)  # on the other leg, on the road
    c.sim.state[0, L.POS_X] = float(x)
    c.sim.state[0, L.POS_Y] = float(y)
    c.sim.state[0, L.PREV_X] = float(x)
    c.sim.state[0, L.PREV_Y] = float(y)
    _, _r, term, _, info = env.step(FULL_THROTTLE)
    assert term and end_reason(info) == "off_stage"
    assert info["reward_progress"] <= 0.0
    assert info["credited_progress_m"] == pytest.approx(before, abs=5.0)


def test_off_road_for_too_long_ends_off_stage_and_terms_sum_to_reward():
    env = RallyEnv(
        stage="proving-ground", termination={"off_road_max_m": 1000.0, "off_road_max_s": 2.0}
    )
    _, info = env.reset(seed=0)
    first_off = None
    for _t in range(2000):
        steer = 0.4 if abs(info["lateral_offset_m"]) < 20.0 else 0.0
        _obs, r, term, trunc, info = env.step(np.array([steer, 0.5, 0, 0], np.float32))
        assert r == pytest.approx(sum(reward_terms(info).values()), abs=1e-12)
        if info["off_road"] and first_off is None:
            first_off = info["stage_time_s"]
        if term or trunc:
            break
    assert end_reason(info) == "off_stage" and info["off_road"]
    assert info["stage_time_s"] - first_off == pytest.approx(2.0, abs=0.06)
