"""Training recipes (``rally train --config``): the file format, its checks, a tiny run."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from agents.evaluate import VALIDATION_SEED_BASE, score, validation_stages
from agents.models import ResidualSpec
from agents.recipe import (
    RecipeError,
    command_recipe,
    load_recipe,
    phase_env,
    recipe_from_dict,
    train,
)

ROOT = Path(__file__).resolve().parents[2]
GENERAL = ROOT / "agents" / "configs" / "general.toml"


def test_the_shipped_recipes_load():
    r = load_recipe(GENERAL)
    assert r.algo == "ppo" and r.env["stage"] == "random" and r.timesteps > 0
    spec = ResidualSpec("heuristic-ahead", 0.25, "tuning", 10)
    assert r.residual.spec() == spec and r.warmstart.critic_steps > 0
    assert r.ppo["policy_kwargs"]["net_arch"] == {"pi": [], "vf": [256, 256]}
    bc = load_recipe(GENERAL.with_name("general-bc.toml"))
    assert bc.warmstart.steps > 0 and bc.warmstart.dagger_rounds > 0
    assert bc.residual.spec() is None and bc.env["road_ahead"] is True


@pytest.mark.parametrize(
    ("doc", "needle"),
    [
        ({"run": {"timestep": 5}}, "unknown key run.timestep"),
        ({"ppo": {"learnign_rate": 1e-4}}, "unknown key ppo.learnign_rate"),
        ({"ppo": {"policy_kwargs": {"netarch": [8]}}}, "ppo.policy_kwargs.netarch"),
        ({"trainer": {}}, "unknown key trainer"),
        ({"env": {"stage": "random", "random_stage": {"length_m": 1e9}}}, "length_m"),
        ({"env": {"render_mode": "human"}}, "does not render"),
        ({"run": {"algo": "sac"}}, "run.algo"),
        ({"run": {"n_envs": 0}}, "run.n_envs"),
        ({"warmstart": {"steps": -1}}, "warmstart.steps"),
        ({"phase": [{"from_step": 5}]}, "phase[0].from_step must be 0"),
        ({"phase": [{"from_step": 0}, {"from_step": 0}]}, "must grow"),
        ({"phase": [{"from_step": 0, "env": {"control_hz": 7}}]}, "control_hz"),
        ({"warmstart": {"dagger_round": 2}}, "unknown key warmstart.dagger_round"),
        ({"warmstart": {"dagger_rounds": 2, "steps": 100}}, "needs warmstart.steps and"),
        ({"warmstart": {"dagger_noise": -0.1}}, "warmstart.dagger_noise"),
        ({"residual": {"base": "pilot"}}, "residual.base must be one of"),
        ({"residual": {"base": "heuristic", "scale": 3.0}}, "residual.scale must be <= 2"),
        ({"residual": {"base": "heuristic", "gain": 1.0}}, "unknown key residual.gain"),
        ({"residual": {"base": "heuristic"}, "warmstart": {"steps": 10}}, "starts from its base"),
    ],
)
def test_bad_recipes_are_refused_with_the_key_named(doc, needle):
    with pytest.raises(RecipeError, match=needle.replace("[", r"\[").replace("]", r"\]")):
        recipe_from_dict(doc, "x.toml")


_RL = {"run": {"algo": "rllib-ppo"}}


def test_the_rllib_recipe_file_and_the_command_line_make_the_same_recipe():
    r = load_recipe(GENERAL.with_name("rllib-opener.toml"))
    assert r.env == {"stage": "opener"} and (r.ray.num_env_runners, r.ray.envs_per_runner) == (
        2,
        4,
    )
    assert r.rllib["fcnet_hiddens"] == [64, 64] and r.eval_seeds == 5
    flags = command_recipe(
        "rllib-ppo",
        "opener",
        timesteps=r.timesteps,
        seed=r.seed,
        out=r.out,
        num_env_runners=2,
        envs_per_runner=4,
        hyperparams=r.rllib,
        checkpoint_freq=r.checkpoint_freq,
        eval_seeds=5,
        eval_freq=r.eval.freq,
    )
    keep = ("algo", "timesteps", "seed", "out", "checkpoint_freq", "env", "ray", "rllib", "eval")
    assert {k: getattr(flags, k) for k in keep} == {k: getattr(r, k) for k in keep}
    assert flags.eval_seeds == r.eval_seeds
    with pytest.raises(TypeError, match="unknown rally train settings: lr"):
        command_recipe("ppo", "opener", lr=1e-3)


def test_one_train_sends_each_recipe_to_its_backend(monkeypatch, tmp_path):
    import agents.es
    import agents.rllib
    import agents.sb3

    got = []
    for mod, name in (
        (agents.rllib, "train_rllib"),
        (agents.es, "run_es_recipe"),
        (agents.sb3, "train"),
    ):
        monkeypatch.setattr(mod, name, lambda r, *a, _n=name, **k: got.append((_n, r.algo)) or {})
    train(recipe_from_dict({**_RL, "env": {"stage": "random", "road_ahead": True}}))
    train(load_recipe(GENERAL.with_name("general-es.toml")))
    train(command_recipe("sac", "opener"), resume=tmp_path / "ckpt.zip", progress=False)
    assert got == [("train_rllib", "rllib-ppo"), ("run_es_recipe", "es"), ("train", "sac")]
    with pytest.raises(ValueError, match="starts from scratch"):
        train(load_recipe(GENERAL), resume=tmp_path / "ckpt.zip")


@pytest.mark.parametrize(
    ("doc", "needle"),
    [
        ({**_RL, "warmstart": {"steps": 10}}, "[warmstart] is not for run.algo = 'rllib-ppo'"),
        ({**_RL, "ppo": {}, "phase": []}, "[phase], [ppo] are not for"),
        ({"ray": {"num_env_runners": 2}}, "[ray] is not for run.algo = 'ppo'"),
        ({"rllib": {"lr": 1e-3}}, "[rllib] is not for run.algo = 'ppo'"),
        ({**_RL, "rllib": {"learning_rate": 1e-3}}, "unknown key rllib.learning_rate"),
        ({**_RL, "ray": {"runners": 2}}, "unknown key ray.runners"),
        ({"run": {"algo": "rllib-ppo", "n_envs": 8}}, "unknown key run.n_envs"),
        ({**_RL, "ray": {"envs_per_runner": 0}}, "ray.envs_per_runner must be an integer >= 1"),
        ({**_RL, "ray": {"address": ""}}, "ray.address"),
        ({**_RL, "eval": {"stages": 20}}, "unknown key eval.stages"),
        ({**_RL, "env": {"stage": 5}}, "env: stage = 5"),
        ({**_RL, "env": {"control_hz": 7}}, "control_hz"),
        ({**_RL, "trainer": {}}, "unknown key trainer"),
    ],
)
def test_bad_rllib_recipes_are_refused_with_the_key_named(doc, needle):
    with pytest.raises(RecipeError, match=needle.replace("[", r"\[").replace("]", r"\]")):
        recipe_from_dict(doc, "x.toml")


def test_dagger_and_residual_settings_are_read():
    r = recipe_from_dict(
        {"warmstart": {"steps": 100, "dagger_rounds": 2, "dagger_steps": 50, "dagger_epochs": 1}}
    )
    ws = r.warmstart
    assert (ws.dagger_rounds, ws.dagger_steps, ws.dagger_epochs, ws.dagger_noise) == (2, 50, 1, 0.1)
    assert r.residual.spec() is None
    r = recipe_from_dict({"residual": {"base": "heuristic", "scale": 0.25}})
    assert r.residual.spec() == ResidualSpec("heuristic", 0.25)


def test_unreadable_files(tmp_path):
    with pytest.raises(RecipeError, match="cannot read"):
        load_recipe(tmp_path / "missing.toml")
    bad = tmp_path / "bad.toml"
    bad.write_text("[run\n")
    with pytest.raises(RecipeError, match="not valid TOML"):
        load_recipe(bad)


def test_phases_apply_in_order():
    r = recipe_from_dict(
        {
            "env": {"stage": "random", "control_hz": 20},
            "phase": [
                {"from_step": 0, "env": {"random_stage": {"difficulty": [0.0, 0.3]}}},
                {"from_step": 100, "env": {"random_stage": {"difficulty": [0.0, 1.0]}}},
            ],
        }
    )
    assert phase_env(r, 0)["random_stage"]["difficulty"] == [0.0, 0.3]
    assert phase_env(r, 99)["random_stage"]["difficulty"] == [0.0, 0.3]
    assert phase_env(r, 100)["random_stage"]["difficulty"] == [0.0, 1.0]
    assert phase_env(r, 100)["control_hz"] == 20


def test_score_and_validation_stages():
    assert score(100.0, 125.0) == 0.8
    assert score(100.0, None) == 0.0 and score(100.0, float("nan")) == 0.0
    v = validation_stages(3)
    assert v == [f"gen-{VALIDATION_SEED_BASE + i}" for i in range(3)]
    from agents.evaluate import HELD_OUT_SEED_BASE

    assert VALIDATION_SEED_BASE > HELD_OUT_SEED_BASE + 10_000  # not the benchmark's stages


TINY = """
[run]
timesteps = 1024
n_envs = 2
seed = 3
checkpoint_freq = 0
[env]
stage = "random"
road_ahead = true
random_stage = {{ length_m = 300.0 }}
{start}
[ppo]
n_steps = 256
batch_size = 256
n_epochs = 1
policy_kwargs = {{ net_arch = [16, 16] }}
[[phase]]
from_step = 0
[[phase]]
from_step = 512
env = {{ random_stage = {{ length_m = 320.0 }} }}
[eval]
freq = 512
stages = {stages}
"""
DAGGER = """
[warmstart]
steps = 400
epochs = 1
dagger_rounds = 1
dagger_steps = 200
dagger_epochs = 1
critic_steps = 512
"""
RESIDUAL = """
[residual]
base = "heuristic"
scale = 0.5
[warmstart]
critic_steps = 256
"""


def _train(cfg: Path, out: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "rally_env",
            "train",
            "--config",
            str(cfg),
            "--out",
            str(out),
            "--no-progress",
        ],
        capture_output=True,
        text=True,
        timeout=900,
        cwd=ROOT,
    )


@pytest.mark.parametrize(("start", "phases"), [(DAGGER, {"bc", "dagger1"}), (RESIDUAL, {"start"})])
def test_a_tiny_recipe_runs_end_to_end(tmp_path, start, phases):
    cfg = tmp_path / "tiny.toml"
    cfg.write_text(TINY.format(stages=1, start=start))
    out = tmp_path / "run"
    res = _train(cfg, out)
    assert res.returncode == 0, res.stderr[-2000:]
    for name in ("model.zip", "config.json", "summary.json", "eval_log.csv", "learning_curve.png"):
        assert (out / name).exists(), name
    summary = json.loads((out / "summary.json").read_text())  # strict JSON
    assert summary["timesteps"] >= 1024
    rows = (out / "eval_log.csv").read_text().splitlines()
    assert rows[0].startswith("timesteps,env_steps,phase,")
    logged = [r.split(",")[2] for r in rows[1:]]
    assert phases <= set(logged) and {"ppo", "final"} <= set(logged), logged
    cfg_doc = json.loads((out / "config.json").read_text())
    assert cfg_doc["recipe"]["phases"][1]["env"]["random_stage"]["length_m"] == 320.0
    # the saved model says how to drive it: its observation, and its base driver if any
    from agents.models import read_meta

    meta = read_meta(out / "model.zip")
    assert meta["env"] == {"road_ahead": True}
    assert ("residual" in meta) == (start is RESIDUAL)


def test_train_refuses_config_with_other_settings(tmp_path):
    res = subprocess.run(
        [sys.executable, "-m", "rally_env", "train", "--config", str(GENERAL), "--timesteps", "5"],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=ROOT,
    )
    assert res.returncode == 2 and "--config holds every setting" in res.stderr


def test_an_rllib_recipe_refuses_the_command_line_s_cluster_settings(tmp_path):
    rl = GENERAL.with_name("rllib-opener.toml")
    for extra in (["--num-env-runners", "4"], ["--ray-address", "auto"], ["--stage", "forest"]):
        res = subprocess.run(
            [sys.executable, "-m", "rally_env", "train", "--config", str(rl), *extra],
            capture_output=True,
            text=True,
            timeout=300,
            cwd=ROOT,
        )
        assert res.returncode == 2 and "--config holds every setting" in res.stderr, extra


def test_frozen_observation_statistics_stay_put_while_rewards_still_scale():
    from stable_baselines3.common.vec_env import VecNormalize

    from agents.recipe import freeze_obs_stats
    from agents.sb3 import make_vec_env

    vn = VecNormalize(make_vec_env(2, stage="opener", seed=0), gamma=0.99)
    vn.reset()
    for _ in range(5):
        vn.step(np.zeros((2, 4), np.float32))
    freeze_obs_stats(vn)
    mean, var, ret = vn.obs_rms.mean.copy(), vn.obs_rms.var.copy(), vn.ret_rms.count
    for _ in range(5):
        vn.step(np.ones((2, 4), np.float32))
    np.testing.assert_array_equal(vn.obs_rms.mean, mean)
    np.testing.assert_array_equal(vn.obs_rms.var, var)
    assert vn.ret_rms.count > ret
    vn.close()


def test_ppo_inputs_are_read_and_bad_ones_are_refused():
    env = {"stage": "random", "road_ahead": True}
    r = recipe_from_dict({"env": env, "ppo": {"inputs": ["speed", "ahead_grip"]}}, "x.toml")
    assert r.inputs == ("speed", "ahead_grip") and "inputs" not in r.ppo
    assert recipe_from_dict({"env": env}, "x.toml").inputs is None
    with pytest.raises(RecipeError, match=r"x.toml: ppo.inputs: .*\['nope'\]"):
        recipe_from_dict({"env": env, "ppo": {"inputs": ["speed", "nope"]}}, "x.toml")
    with pytest.raises(RecipeError, match=r"ppo.inputs: .*\['ahead_grip'\]"):  # no road ahead
        recipe_from_dict({"ppo": {"inputs": ["speed", "ahead_grip"]}}, "x.toml")
    with pytest.raises(RecipeError, match=r"ppo\.inputs: must be a list"):
        recipe_from_dict({"env": env, "ppo": {"inputs": "speed"}}, "x.toml")


@pytest.mark.parametrize("pi", [[], [8]])
def test_a_restricted_actor_reads_only_its_columns_while_it_learns(pi):
    import gymnasium as gym
    import torch
    from stable_baselines3 import PPO

    from agents.recipe import restrict_actor_inputs

    kw = {"net_arch": {"pi": pi, "vf": [8]}}
    model = PPO(
        "MlpPolicy",
        gym.make("Pendulum-v1"),
        n_steps=64,
        batch_size=32,
        n_epochs=2,
        policy_kwargs=kw,
        seed=0,
        device="cpu",
    )
    restrict_actor_inputs(model, np.array([0, 2]))
    pol = model.policy
    first = pol.mlp_extractor.policy_net[0] if pi else pol.action_net
    before = first.weight.detach().clone()
    assert torch.all(before[:, 1] == 0) and torch.all(before[:, [0, 2]] != 0)
    model.learn(256)
    after = first.weight.detach()
    assert torch.all(after[:, 1] == 0)
    assert not torch.equal(after[:, [0, 2]], before[:, [0, 2]])
    with pytest.raises(ValueError, match="input columns must be in"):
        restrict_actor_inputs(model, np.array([3]))


def test_the_validation_log_keeps_the_best_and_a_final_evaluation_never_is(tmp_path):
    from types import SimpleNamespace

    from agents.evaluate import EVAL_LOG_HEADER, ValidationLog

    log = ValidationLog(tmp_path, ["opener"], "env steps (millions)")

    def run(t):
        return [SimpleNamespace(stage="opener", finished=t is not None, stage_time_s=t)]

    m, better = log.add(run(None), 0, 0, "start")
    assert better and m["finish_rate"] == 0.0 and log.best == (0.0, 0.0)
    m, better = log.add(run(80.0), 10, 20, "ppo")
    assert better and m["finish_rate"] == 1.0 and 0.0 < m["median_score"]
    assert not log.add(run(90.0), 20, 40, "ppo")[1]
    assert not log.add(run(70.0), 30, 60, "final", final=True)[1]
    rows = (tmp_path / "eval_log.csv").read_text().splitlines()
    assert rows[0] + "\n" == EVAL_LOG_HEADER and len(rows) == 5
    assert [r.split(",")[:3] for r in rows[1:]][-1] == ["30", "60", "final"]
    assert log.plot() == tmp_path / "learning_curve.png" and log.plot().stat().st_size > 0
