"""The info contract: numbers, bools and fixed-shape numeric arrays only, built in one place."""

from __future__ import annotations

import math

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.utils.env_checker import data_equivalence

import rally_env
from rally_env import INFO_KEYS, INFO_KEYS_V1, RallyEnv, RallyVectorEnv
from rally_env.info import (
    END_REASONS,
    RANDOMIZATION_KEYS,
    NanEqualArray,
    checkpoint_times,
    end_reason,
    reward_terms,
)
from tests.rally_env.conftest import FULL_THROTTLE

STAGES = ["opener", "skidpad", "proving-ground"]  # 2, 1 (two lap lines) and 0 checkpoints


def _check_single(info: dict, shapes: dict | None = None) -> dict:
    out = {}
    for k, v in info.items():
        assert isinstance(v, np.ndarray), (k, type(v))
        assert v.dtype.kind in "biuf", (k, v.dtype)
        out[k] = v.shape
    if shapes is not None:
        assert out == shapes
    return out


def test_single_env_info_is_numeric_arrays_of_fixed_shape_across_stages():
    env = RallyEnv(stage=STAGES)
    shapes = None
    seen = set()
    for seed in range(8):
        _, info = env.reset(seed=seed)
        assert list(info)[: len(INFO_KEYS)] == list(INFO_KEYS)
        shapes = _check_single(info, shapes)
        seen.add(int(info["stage_index"]))
        for _ in range(3):
            info = env.step(FULL_THROTTLE)[4]
            _check_single(info, shapes)
    assert len(seen) > 1  # several stages, one shape
    assert shapes["checkpoint_times_s"] == (2,) and shapes["finish_time_s"] == ()


def test_vector_info_is_typed_arrays_over_cars():
    venv = RallyVectorEnv(3, stage=STAGES)
    _, info = venv.reset(seed=0)
    for _ in range(2):
        for k, v in info.items():
            assert isinstance(v, np.ndarray) and v.dtype.kind in "biuf", (k, v.dtype)
            assert v.shape[0] == 3
        info = venv.step(np.tile(FULL_THROTTLE, (3, 1)))[4]
    assert info["checkpoint_times_s"].shape == (3, 2)
    n = info["n_checkpoints"]
    for k in range(3):
        assert n[k] == len(venv.core.checkpoint_times(k))
        assert np.isnan(info["checkpoint_times_s"][k, n[k] :]).all()


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_gymnasium_vector_envs_stack_info_without_object_arrays(mode):
    """Failed before the contract: checkpoint_times_s (a tuple), finish_time_s (a float
    subclass) and the strings became object arrays."""
    envs = gym.make_vec(
        "Rally-v0", num_envs=2, vectorization_mode=mode, stage=["opener", "skidpad"]
    )
    try:
        _, info = envs.reset(seed=0)
        info = envs.step(np.tile(FULL_THROTTLE, (2, 1)))[4]
        for k in INFO_KEYS:
            assert info[k].dtype != object, k
            assert info[k].shape[0] == 2
        assert info["checkpoint_times_s"].shape == (2, 2)
        assert info["finish_time_s"].dtype == np.float64
        assert info["finished"].dtype == np.bool_
    finally:
        envs.close()


def test_single_info_equals_the_vector_column():
    venv = RallyVectorEnv(2, stage=STAGES)
    single = RallyEnv(stage=STAGES)
    _, vinfo = venv.reset(seed=4)
    _, sinfo = single.reset(seed=4, options={"car_index": 1})
    for _ in range(5):
        for k, v in sinfo.items():
            assert np.array_equal(v, vinfo[k][1], equal_nan=True), k
        vinfo = venv.step(np.tile(FULL_THROTTLE, (2, 1)))[4]
        sinfo = single.step(FULL_THROTTLE)[4]


def test_nan_compares_equal_so_identical_runs_have_equal_infos():
    a, b = RallyEnv(), RallyEnv()
    ia = a.reset(seed=1)[1]
    ib = b.reset(seed=1)[1]
    assert math.isnan(ia["finish_time_s"]) and np.isnan(ia["checkpoint_times_s"]).all()
    assert data_equivalence(ia, ib) and data_equivalence(ia, ib, exact=True)
    assert isinstance(ia["finish_time_s"], NanEqualArray)
    assert bool(ia["finish_time_s"] == ib["finish_time_s"])
    assert not bool(ia["progress_m"] != ib["progress_m"])
    assert np.allclose(ia["checkpoint_times_s"], ib["checkpoint_times_s"])
    # an ordinary float array otherwise
    assert float(ia["stage_length_m"]) == 1164.0 and ia["stage_length_m"] + 1.0 == 1165.0
    info = a.step(FULL_THROTTLE)[4]
    assert not data_equivalence(info, ib)


def test_end_code_names_and_reward_terms():
    env = RallyEnv(termination={"time_limit_s": 0.2})
    env.reset(seed=0)
    total = 0.0
    while True:
        _, r, term, trunc, info = env.step(FULL_THROTTLE)
        assert sum(reward_terms(info).values()) == pytest.approx(r, abs=1e-12)
        total += r
        if term or trunc:
            break
    assert end_reason(info) == "time_limit" == END_REASONS[int(info["end_code"])]
    assert env.core.end_reason(0) == "time_limit"
    venv = RallyVectorEnv(2, termination={"time_limit_s": 0.1}, autoreset_mode="Disabled")
    venv.reset(seed=0)
    vinfo = venv.step(np.tile(FULL_THROTTLE, (2, 1)))[4]
    vinfo = venv.step(np.tile(FULL_THROTTLE, (2, 1)))[4]
    assert end_reason(vinfo).tolist() == ["time_limit"] * 2
    assert reward_terms(vinfo)["time"].shape == (2,)
    assert checkpoint_times(vinfo)[0].shape == (2,)


def test_generated_stages_have_the_random_mode_checkpoint_width():
    env = RallyEnv(stage="random", random_stage={"length_m": 400.0})
    for seed in (0, 1):
        info = env.reset(seed=seed)[1]
        assert info["checkpoint_times_s"].shape == (rally_env.info.GENERATED_CHECKPOINTS,)
        assert int(info["n_checkpoints"]) == rally_env.info.GENERATED_CHECKPOINTS
        assert int(info["stage_index"]) == -1 and int(info["stage_seed"]) >= 0


def test_randomization_keys_every_step_and_state_restore():
    env = RallyEnv(randomize=True)
    i0 = env.reset(seed=3)[1]
    for k in RANDOMIZATION_KEYS:
        assert f"randomization_{k}" in i0
    st = env.get_state()
    i1 = env.step(FULL_THROTTLE)[4]
    assert i1["randomization_mass_kg"] == i0["randomization_mass_kg"]
    other = RallyEnv(randomize=True)
    other.set_state(st)
    assert other.core.info_of(0)["randomization_power_w"] == i0["randomization_power_w"]
    assert "randomization_mass_kg" not in RallyEnv().reset(seed=0)[1]


def test_v1_keys():
    info = RallyEnv(version=1, vehicle="rally-car").reset(seed=0)[1]
    assert set(INFO_KEYS_V1) <= set(info)
    _check_single(info)


def test_batch_info_rows_equal_the_one_car_info():
    """Loops, point-to-point stages, v1 readings: car k's row of the batch is car k's info."""
    from rally_env.info import build_info

    for kw in ({"stage": [*STAGES, "rallycross"]}, {"version": 1, "vehicle": "rally-car"}):
        n = 6
        venv = RallyVectorEnv(n, **kw)
        venv.reset(seed=2)
        for _ in range(30):
            venv.step(np.tile(FULL_THROTTLE, (n, 1)))
        batch = build_info(venv.core)
        for k in range(n):
            one = build_info(venv.core, k)
            assert list(one) == list(batch)
            for key, v in one.items():
                assert np.array_equal(v, batch[key][k], equal_nan=True), (kw, k, key)
