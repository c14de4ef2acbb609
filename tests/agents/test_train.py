"""PPO smoke run: train a few thousand steps, save, reload, evaluate; same seed, same result;
resume from a checkpoint."""

from __future__ import annotations

import json

import numpy as np
import pytest

pytest.importorskip("stable_baselines3")
torch = pytest.importorskip("torch")

from agents.evaluate import evaluate  # noqa: E402
from agents.models import load_model, read_meta  # noqa: E402
from agents.recipe import command_recipe  # noqa: E402
from agents.sb3 import train as sb3_train  # noqa: E402

KW = {"eval_freq": 2048, "eval_seeds": 1, "checkpoint_freq": 2048}


def train(algo, stage, resume=None, **flags):
    """``rally train``'s stable-baselines3 run of these flags, without a progress bar."""
    return sb3_train(command_recipe(algo, stage, **flags), resume=resume, progress_bar=False)


def _params(path):
    model, _, _ = load_model(path)
    return torch.cat([p.detach().flatten() for p in model.policy.parameters()]).numpy()


def test_ppo_smoke_save_reload_evaluate(tmp_path):
    out = tmp_path / "a"
    s = train("ppo", "opener", timesteps=4096, n_envs=4, seed=1, out=out, **KW)
    assert s["timesteps"] == 4096
    model_path = out / "model.zip"
    meta = read_meta(model_path)
    # rally train's env: RallyLearn-v0's settings (10 Hz, the default observation), no handbrake
    assert meta["algo"] == "ppo" and len(meta["obs_norm"]["mean"]) == 59
    assert meta["made_by"] == "rally train"
    assert meta["env"] == {"control_hz": 10}
    assert load_model(model_path)[0].action_space.shape == (3,)
    # strict JSON: a not-yet-finished evaluation's NaN times are null, never a bare NaN
    text = (out / "summary.json").read_text()
    doc = json.loads(text, parse_constant=lambda c: pytest.fail(f"summary.json holds {c}"))
    assert "NaN" not in text and doc["timesteps"] == 4096
    assert set(doc["final_eval"]) >= {"finish_rate", "median_time_s"}
    cfg = json.loads((out / "config.json").read_text())
    assert cfg["algo"] == "ppo" and cfg["seed"] == 1 and cfg["hyperparams"]["n_steps"] == 128
    # a minibatch is at most one rollout: 128 steps x 4 cars
    assert cfg["hyperparams"]["batch_size"] == 512
    assert cfg["env_kwargs"]["reward_weights"] == {"crash": 100.0}
    assert (out / "eval_log.csv").read_text().count("\n") >= 2
    ckpts = list((out / "checkpoints").glob("ppo_*_steps.zip"))
    assert ckpts
    # a checkpoint drives as the final model does: it carries the run's metadata
    cm = read_meta(ckpts[0])
    assert cm["made_by"] == "rally train" and cm["env"] == meta["env"]
    assert len(cm["obs_norm"]["mean"]) == 59
    assert ckpts[0].name == f"ppo_{cm['timesteps']}_steps.zip"
    assert model_path.stat().st_size < 2_000_000  # what a shipped policy may weigh
    res = evaluate(str(model_path), "opener", [0], env_kwargs={"termination": {"time_limit_s": 5}})
    assert res.stages[0].episodes == 1
    # same seed, same result
    out2 = tmp_path / "b"
    train("ppo", "opener", timesteps=4096, n_envs=4, seed=1, out=out2, **KW)
    assert np.array_equal(_params(model_path), _params(out2 / "model.zip"))
    # resume from a checkpoint
    ckpt = sorted((out / "checkpoints").glob("ppo_*_steps.zip"))[0]
    s3 = train(
        "ppo", "opener", timesteps=2048, n_envs=4, seed=1, out=tmp_path / "c", resume=ckpt, **KW
    )
    # --timesteps counts the steps the resumed run adds to the checkpoint's
    done = read_meta(ckpt)["timesteps"]
    assert done > 0 and s3["timesteps"] == done + 2048


def test_random_stage_training_selects_on_validation_stages_with_its_own_settings(tmp_path):
    """``rally train --stage random`` picks ``best_model.zip`` on 50 validation stages, none a
    test stage nor a training stage, evaluated with the training envs' settings (here the
    road-ahead observation, which the default env's observation does not fit)."""
    from agents.benchmark import SETS, TRAIN_SEED_LIMIT
    from agents.evaluate import resolve_stages

    out = tmp_path / "r"
    kw = {"road_ahead": True, "termination": {"time_limit_s": 3}}
    train("ppo", "random", timesteps=2048, n_envs=4, seed=0, out=out, eval_freq=2048,
          checkpoint_freq=0, env_kwargs=kw)  # fmt: skip
    cfg = json.loads((out / "config.json").read_text())
    assert cfg["eval_stages"] == "validation:50" and cfg["eval_seeds"] == 1
    log = (out / "eval_log.csv").read_text().splitlines()
    assert len(log) >= 2 and (out / "best_model.zip").exists()
    names = resolve_stages("validation:50")
    assert len(set(names)) == 50
    seeds = {int(n.split("-")[1]) for n in names}
    test_seeds = {s for bs in SETS.values() for s in bs.seeds}
    assert not seeds & test_seeds and min(seeds) >= TRAIN_SEED_LIMIT
    with pytest.raises(ValueError, match="validation:N needs N >= 1"):
        resolve_stages("validation:0")


def test_a_saved_model_acts_exactly_as_in_training(tmp_path):
    """The saved model (its normalisation from the zip's metadata) gives bit-for-bit the
    actions the training run's own evaluation got from the live model and its VecNormalize
    (float32 statistics gave other roundings, and a marginal driver other outcomes)."""
    from agents.policies import make_policy
    from agents.sb3 import RallyVecEnv, normalized

    out = tmp_path / "m"
    train("ppo", "random", timesteps=512, n_envs=2, seed=3, out=out, eval_seeds=0, **{
        k: v for k, v in KW.items() if k != "eval_seeds"})  # fmt: skip
    model, _, meta = load_model(out / "model.zip")
    venv = normalized(RallyVecEnv(2, stage="random", control_hz=10), 0.995)
    venv.obs_rms.mean = np.asarray(meta["obs_norm"]["mean"], np.float64)
    venv.obs_rms.var = np.asarray(meta["obs_norm"]["var"], np.float64)
    rng = np.random.default_rng(0)
    obs = rng.normal(0.0, 2.0, size=(64, len(venv.obs_rms.mean))).astype(np.float32)
    live, _ = model.predict(venv.normalize_obs(obs), deterministic=True)
    pol = make_policy(str(out / "model.zip"))
    from agents.models import from_policy_action

    np.testing.assert_array_equal(pol(obs), from_policy_action(live))
    venv.close()
