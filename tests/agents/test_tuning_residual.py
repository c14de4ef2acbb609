"""A residual policy that tunes the heuristic driver's speed plan and decides every ``hold``
control steps: the driver's tuning multipliers, the held outputs, the VecEnv step that is
``hold`` env steps, and the metadata and recipe entries that carry it."""

from __future__ import annotations

import numpy as np
import pytest

from agents.heuristic import TUNE_FIELDS, TUNE_NEUTRAL, HeuristicDriver
from agents.models import (
    MAX_HOLD,
    TUNING_OUTPUTS,
    ResidualDriver,
    ResidualSpec,
    residual_meta,
)
from tests.agents.helpers import heuristic_obs


def _drive_obs(n: int = 120) -> np.ndarray:
    return heuristic_obs(True, n)


def test_all_ones_is_the_driver_as_tuned_to_the_bit():
    obs = _drive_obs()
    a, b = HeuristicDriver(), HeuristicDriver()
    a.reset(1)
    b.reset(1)
    for o in obs:  # the memory evolves the same way too
        np.testing.assert_array_equal(a(o[None]), b(o[None], tune=np.array(TUNE_NEUTRAL)))
    assert TUNING_OUTPUTS == len(TUNE_FIELDS)


def test_the_multipliers_move_the_speed_plan_and_bad_ones_are_refused():
    obs = _drive_obs(60)[-1:]
    drv = HeuristicDriver()
    base = drv.plan(obs)["target_speed_mps"][0]
    faster = drv._run(obs, drv._fresh(1), np.array([1.2, 1.2, 1.2, 0.0]))[1][0, 0]
    slower = drv._run(obs, drv._fresh(1), np.array([0.8, 0.8, 0.8, 0.0]))[1][0, 0]
    assert slower < base < faster
    # the line: a target left of the centerline steers further left
    left = drv(obs, tune=np.array([1.0, 1.0, 1.0, 0.5]))
    right = drv(obs, tune=np.array([1.0, 1.0, 1.0, -0.5]))
    assert left[0, 0] > drv(obs)[0, 0] > right[0, 0]
    for bad in (np.zeros(4), np.array([1.0, np.nan, 1.0, 0.0]), -np.ones(4)):
        with pytest.raises(ValueError, match=r"tuning must be finite.*car 0"):
            drv(obs, tune=bad)


def test_a_bad_tuning_names_its_shape_or_car_and_changes_nothing():
    """A tuning of the wrong shape (numpy would broadcast some) or with a bad row for one car
    is refused with a message naming the shape or the car, before the driver's per-car
    memory changes (it would be resized for the new number of cars)."""
    obs = _drive_obs(60)[-3:]
    drv = HeuristicDriver()
    drv.reset(1)
    mem = drv._mem.copy()
    tune = np.tile(np.array(TUNE_NEUTRAL), (3, 1))
    tune[2, 1] = 0.0
    for bad, needle in (
        (np.ones((1, 4)), r"\(3, 4\) or \(4,\).*shape \(1, 4\)"),
        (np.ones(3), r"shape \(3,\)"),
        (tune, "car 2 has .*'corner_speed': 0.0"),
    ):
        with pytest.raises(ValueError, match=needle):
            drv(obs, tune=bad)
        np.testing.assert_array_equal(drv._mem, mem)


def test_held_outputs_change_only_at_decisions_and_a_reset_makes_them_neutral():
    obs = _drive_obs(12)
    rd = ResidualDriver("heuristic-ahead", 0.25, "tuning", 4)
    ref = HeuristicDriver()
    rd.reset(1)
    ref.reset(1)
    for t, o in enumerate(obs[:8]):
        out = rd.act(o[None], np.full((1, 4), 0.5 if t in (0, 4) else -1.0, np.float32))
        want = np.array([np.exp(0.125)] * 3 + [0.5])
        np.testing.assert_array_equal(out, ref(o[None], tune=want))
    rd.reset(1, np.array([True]))
    ref.reset(1)
    np.testing.assert_array_equal(rd.base_act(obs[8][None]), ref(obs[8][None]))


def test_the_spec_in_metadata():
    old = {"residual": {"base": "heuristic", "scale": 0.5}}
    assert residual_meta(old) == ResidualSpec("heuristic", 0.5, "action", 1)
    assert ResidualSpec("heuristic", 0.5).to_meta() == old["residual"]  # unchanged for old models
    spec = ResidualSpec("heuristic-ahead", 0.25, "tuning", 10)
    assert residual_meta({"residual": spec.to_meta()}) == spec
    assert spec.n_outputs == 4 and ResidualSpec("heuristic", 0.5).n_outputs == 4
    for bad, what in (
        ({"kind": "speed"}, "kind"),
        ({"hold": 0}, "hold"),
        ({"hold": MAX_HOLD + 1}, "hold"),
        ({"hold": 2.0}, "hold"),
    ):
        with pytest.raises(ValueError, match=what):
            residual_meta({"residual": {"base": "heuristic", "scale": 0.5, **bad}})


def test_a_held_vecenv_step_is_hold_env_steps_and_reports_an_end_within_it():
    pytest.importorskip("stable_baselines3")
    from agents.sb3 import RallyVecEnv
    from rally_env.vector import RallyVectorEnv

    kw = {"stage": "opener", "road_ahead": True, "termination": {"time_limit_s": 0.55}}
    hold, n = 4, 2
    venv = RallyVecEnv(n, residual=("heuristic-ahead", 0.25, "tuning", hold), **kw)
    assert venv.action_space.shape == (4,)
    ref = RallyVectorEnv(n, autoreset_mode="SameStep", **kw)
    drv = HeuristicDriver()
    o_ref, _ = ref.reset(seed=[0, 1])
    venv.seed(0)
    obs = venv.reset()
    np.testing.assert_array_equal(obs, o_ref)
    drv.reset(n)
    ended_at = None
    for macro in range(4):
        obs, rew, done, infos = venv.step(np.zeros((n, 4), np.float32))
        total = np.zeros(n, np.float32)
        ended = np.zeros(n, bool)
        final = None
        for _ in range(hold):
            o_ref, r, term, trunc, info = ref.step(drv(o_ref))
            total += np.where(ended, np.float32(0.0), r.astype(np.float32))
            d = term | trunc
            if d.any():
                drv.reset(n, d)
                if final is None:
                    final = info["final_obs"]
                ended |= d
        np.testing.assert_array_equal(rew, total)
        np.testing.assert_array_equal(done, ended)
        np.testing.assert_array_equal(obs, o_ref)
        if done.any():
            ended_at = macro
            for k in range(n):
                np.testing.assert_array_equal(infos[k]["terminal_observation"], final[k])
                assert infos[k]["TimeLimit.truncated"] is True
    assert ended_at == 2  # 11 steps of 0.05 s: the third held step
    venv.close()
    ref.close()


def test_the_recipe_reads_kind_and_hold():
    from agents.recipe import RecipeError, recipe_from_dict

    r = recipe_from_dict(
        {"residual": {"base": "heuristic-ahead", "scale": 0.25, "kind": "tuning", "hold": 10}}
    )
    assert r.residual.spec() == ResidualSpec("heuristic-ahead", 0.25, "tuning", 10)
    for bad, what in (
        ({"kind": "speed"}, "residual.kind"),
        ({"hold": 0}, "residual.hold"),
        ({"hold": MAX_HOLD + 1}, "residual.hold"),
    ):
        with pytest.raises(RecipeError, match=what):
            recipe_from_dict({"residual": {"base": "heuristic", **bad}})
