"""Evolution strategies for the tuning residual (agents/es.py): the fitness and rank
formulas, the linear tuner, one batched drive per car, the saved model, the recipe."""

from __future__ import annotations

import json
import zipfile

import numpy as np
import pytest

from agents.es import (
    ESSettings,
    LinearTuner,
    TunerPolicy,
    _centered_ranks,
    check_inputs,
    drive_batch,
    input_columns,
    member_fitness,
    save_model,
)
from agents.models import ResidualSpec, heuristic_targets, load_model, read_meta, write_meta

SPEC = ResidualSpec("heuristic-ahead", 0.25, "tuning", 10)
SHORT = {"road_ahead": True, "random_stage": {"length_m": 300.0, "difficulty": 0.3}}


def test_fitness_is_the_centers_time_over_each_members_and_a_dnf_scores_zero():
    times = np.array([[10.0, 20.0, np.nan], [8.0, 25.0, np.nan], [12.5, np.nan, np.nan]])
    fin = np.isfinite(times)
    fit = member_fitness(times, fin)
    # the third stage: nobody finished, it counts for no one
    np.testing.assert_allclose(fit, [1.0, (10 / 8 + 20 / 25) / 2, (10 / 12.5 + 0.0) / 2])
    # the center did not finish the first stage: the fastest member's time stands in
    t2 = np.array([[np.nan], [8.0], [10.0]])
    np.testing.assert_allclose(member_fitness(t2, np.isfinite(t2)), [0.0, 1.0, 0.8])


def test_centered_ranks():
    np.testing.assert_allclose(_centered_ranks(np.array([3.0, -1.0, 7.0])), [0.0, -0.5, 0.5])


def test_the_tuner_reads_only_its_inputs_and_zero_is_the_base_driver():
    d = 92
    tuner = LinearTuner(np.zeros(d), np.ones(d), 4, input_columns(("speed", "ahead_crest")))
    assert tuner.n_in == 9 and tuner.n_params == 4 * 10
    obs = np.random.default_rng(0).normal(size=(5, d)).astype(np.float32)
    np.testing.assert_array_equal(tuner.outputs(obs, np.zeros((5, tuner.n_params))), 0.0)
    theta = np.random.default_rng(1).normal(size=tuner.n_params)
    w, b = tuner.full_weights(theta)
    assert np.count_nonzero(w.any(axis=0)) == 9
    want = np.clip(tuner.normalize(obs) @ w.T + b, -1, 1)
    got = tuner.outputs(obs, np.broadcast_to(theta, (5, tuner.n_params)))
    np.testing.assert_allclose(got, want, atol=1e-5)
    assert check_inputs(["speed", "ahead_grip"]) == ("speed", "ahead_grip")
    with pytest.raises(ValueError, match="not observation fields"):
        check_inputs(["speed", "altitude"])


def test_each_car_drives_its_own_stage_independently_of_the_batch():
    one = drive_batch(SPEC, None, None, [5], SHORT)
    two = drive_batch(SPEC, None, None, [7, 5, 5], SHORT)
    assert one["finished"][0] and two["finished"].all()
    assert two["time_s"][1] == two["time_s"][2] == one["time_s"][0]
    assert two["time_s"][0] != one["time_s"][0]
    # zero parameters are the base driver
    d = 92
    tuner = LinearTuner(np.zeros(d), np.ones(d), 4)
    z = drive_batch(SPEC, tuner, np.zeros((1, tuner.n_params)), [5], SHORT)
    assert z["time_s"][0] == one["time_s"][0]
    # a bolder plan (x 1.1) on this easy stage is faster, a more cautious one slower
    theta = np.zeros((3, tuner.n_params))
    theta[0, -4:-1], theta[1, -4:-1] = 0.4, -0.4
    moved = drive_batch(SPEC, tuner, theta, [6, 6, 6], SHORT)
    assert moved["finished"].all()
    assert moved["time_s"][0] < moved["time_s"][2] < moved["time_s"][1]


def test_the_cars_drive_through_the_vector_envs_own_step(monkeypatch):
    from rally_env.vector import RallyVectorEnv

    calls = []
    step = RallyVectorEnv.step

    def counted(self, actions):
        calls.append(len(actions))
        return step(self, actions)

    monkeypatch.setattr(RallyVectorEnv, "step", counted)
    res = drive_batch(SPEC, None, None, [5, 7], SHORT)
    # every step of the longest episode went through the env (the other car drove on)
    assert len(calls) == res["steps"].max() and set(calls) == {2}
    assert res["steps"].min() < res["steps"].max()


def test_a_linear_model_of_unknown_kind_or_version_is_refused(tmp_path):
    tuner = LinearTuner(np.zeros(92), np.ones(92), 4)
    path = save_model(tmp_path / "m.zip", SPEC, tuner, np.zeros(tuner.n_params), {})
    assert load_model(path)[0].weight.shape == (4, 92)
    meta = read_meta(path)
    write_meta(path, {**meta, "version": 99})
    with pytest.raises(ValueError, match="linear model version 99"):
        load_model(path)
    write_meta(path, {**meta, "kind": "onnx"})
    with pytest.raises(ValueError, match="kind must be one of"):
        load_model(path)


def test_a_saved_tuner_drives_as_it_did_in_training(tmp_path):
    pytest.importorskip("torch")
    from agents.policies import SB3Policy

    rng = np.random.default_rng(0)
    d = 92
    tuner = LinearTuner(rng.normal(size=d), rng.uniform(0.5, 2.0, d), 4, input_columns(None))
    theta = 0.05 * rng.normal(size=tuner.n_params)
    path = save_model(tmp_path / "m.zip", SPEC, tuner, theta, {"note": "test"})
    # plain weights, said so in the metadata: no stable-baselines3 model inside
    with zipfile.ZipFile(path) as z:
        assert sorted(z.namelist()) == ["rally_meta.json", "weights.npz"]
    assert read_meta(path)["kind"] == "linear" and "algo" not in read_meta(path)
    pol = SB3Policy(path)
    assert pol.residual == SPEC and pol.env_kwargs == {"road_ahead": True}
    obs = rng.normal(size=(6, d)).astype(np.float32)
    mine = TunerPolicy(SPEC, tuner, theta)
    mine.reset(6)
    pol.reset(6)
    np.testing.assert_allclose(pol(obs), mine(obs), atol=1e-4)


def test_an_es_recipe_trains_and_writes_its_curve(tmp_path):
    pytest.importorskip("stable_baselines3")
    from agents.recipe import RecipeError, recipe_from_dict, train

    doc = {
        "run": {"algo": "es", "seed": 0, "out": str(tmp_path / "run")},
        "env": {"stage": "random", **SHORT},
        "residual": {"base": "heuristic-ahead", "scale": 0.25, "kind": "tuning", "hold": 10},
        "es": {
            "iterations": 1,
            "pairs": 1,
            "stages": 2,
            "norm_stages": 1,
            "sigma": 0.02,
            "lr": 0.01,
            "inputs": ["speed", "left_edge", "right_edge"],
            "line": False,
        },
        "eval": {"every": 1, "stages": 1},
    }
    # a crash may score 0, as in the benchmark (the default)
    assert recipe_from_dict({**doc, "es": {**doc["es"], "dnf_score": 0.0}}).es.dnf_score == 0.0
    r = recipe_from_dict(doc)
    assert r.es == ESSettings(
        1, 1, 2, 0.02, 0.01, 1, ("speed", "left_edge", "right_edge"), line=False
    )
    summary = train(r)
    out = tmp_path / "run"
    rows = (out / "eval_log.csv").read_text().splitlines()
    assert len(rows) == 3 and rows[1].split(",")[2] == "start"  # header, start, after it 1
    assert (out / "learning_curve.png").stat().st_size > 0
    assert (out / "best_model.zip").exists() and (out / "model.zip").exists()
    assert summary["env_steps"] > 0
    # without the line the saved policy's fourth output is 0 whatever it sees
    from agents.policies import SB3Policy

    pol = SB3Policy(out / "model.zip")
    w = pol.model.weight
    assert w.shape == (4, 92) and not w[3].any() and w[:3].any()
    assert np.count_nonzero(w[:3].any(axis=0)) == 3  # it reads its three inputs only
    json.loads((out / "summary.json").read_text())
    for bad, what in (
        ({"es": {**doc["es"], "pop": 3}}, "unknown key es.pop"),
        ({"es": {**doc["es"], "inputs": ["nope"]}}, "es.inputs"),
        ({"env": {"stage": "opener", "road_ahead": True}}, "env.stage"),
        ({"residual": {"base": "heuristic", "kind": "action"}}, "tuning"),
        ({"ppo": {}}, "not for"),
        ({"es": {**doc["es"], "line": 1}}, "es.line"),
        ({"es": {**doc["es"], "dnf_score": 1.5}}, "es.dnf_score must be <= 1"),
        ({"es": {**doc["es"], "sigma": 0.0}}, "es.sigma"),
    ):
        with pytest.raises(RecipeError, match=what):
            recipe_from_dict({**doc, **bad})


def test_run_es_refuses_a_residual_that_is_not_a_tuning_one():
    from agents.es import run_es

    spec = ResidualSpec("heuristic-ahead", 0.25, "full", 10)
    with pytest.raises(ValueError, match="'tuning' residual, not 'full'"):
        run_es(spec, ESSettings(), dict(SHORT))


def test_collect_heuristic_refuses_an_unknown_teacher_and_a_blind_ahead_teacher():
    from agents.sb3 import collect_heuristic

    with pytest.raises(ValueError, match="teacher must be 'blind', 'ahead', a shipped model"):
        collect_heuristic(64, "opener", 2, 0, teacher="oracle")
    with pytest.raises(ValueError, match="road_ahead=True"):
        collect_heuristic(64, "opener", 2, 0, teacher="ahead")
    # es-general reads the road-ahead block: it cannot teach on an env without it
    with pytest.raises(ValueError, match="road_ahead=True"):
        collect_heuristic(64, "opener", 2, 0, teacher="es-general")
    with pytest.raises(FileNotFoundError, match=r"nope\.zip"):
        collect_heuristic(64, "opener", 2, 0, teacher="nope.zip")


def test_a_tuning_model_teaches_at_the_envs_rate():
    # es-general decides every 10 steps at 20 Hz; as a 10 Hz env's teacher its driver takes
    # the 10 Hz tuning and decides every 5 steps (the same 0.5 s)
    from agents.policies import SB3Policy, shipped_policy_path
    from agents.sb3 import collect_heuristic, model_teacher

    kw = {"road_ahead": True, "control_hz": 10}
    t = model_teacher("es-general", 10, kw)
    assert t.residual.hold == 5 and t._base.driver.params.control_hz == 10
    assert t.env_kwargs["control_hz"] == 10
    own = SB3Policy(shipped_policy_path("es-general"))
    assert own.residual.hold == 10 and own._base.driver.params.control_hz == 20
    # the labels are the teacher's actions on the states it drove: replayed on them (no
    # episode ends in these 30 s), it gives the same actions
    obs, labels = collect_heuristic(600, "opener", 2, 0, noise=0.0, teacher="es-general", **kw)
    replay = model_teacher("es-general", 10, kw)
    replay.reset(2)
    acts = np.concatenate([replay(obs[i : i + 2]) for i in range(0, len(obs), 2)])
    assert np.array_equal(heuristic_targets(acts), labels)
    # and they are not the untuned driver's
    _, plain_labels = collect_heuristic(600, "opener", 2, 0, noise=0.0, teacher="ahead", **kw)
    assert not np.array_equal(plain_labels, labels)
