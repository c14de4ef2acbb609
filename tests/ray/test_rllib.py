"""RLlib PPO through ``rally train --algo rllib-ppo`` on the Ray cluster: env runners in
workers, checkpoints, resume, and the exported policy ``rally eval`` runs."""

from __future__ import annotations

import csv
import json

import numpy as np
import pytest

from agents.models import ExportedPolicy, from_policy_action
from rally_env.cli import main

pytestmark = pytest.mark.ray

SMALL = ["--set", "train_batch_size_per_learner=256", "--set", "minibatch_size=64"]
SMALL += ["--set", "num_epochs=1", "--set", "fcnet_hiddens=[32,32]"]


def _progress(out):
    with (out / "progress.csv").open() as f:
        return list(csv.DictReader(f))


@pytest.fixture(scope="module")
def trained(ray_cluster, tmp_path_factory):
    _, address = ray_cluster
    out = tmp_path_factory.mktemp("rllib") / "run"
    args = ["train", "--algo", "rllib-ppo", "--stage", "opener", "--timesteps", "256"]
    args += ["--num-env-runners", "2", "--envs-per-runner", "4", "--ray-address", address]
    args += ["--out", str(out), "--no-progress", *SMALL]
    assert main(args) == 0
    return out, args


def test_one_iteration_writes_the_run(trained):
    out, _ = trained
    for name in ("config.json", "eval_log.csv", "summary.json", "checkpoint/rllib_checkpoint.json"):
        assert (out / name).is_file(), name
    rows = _progress(out)
    assert len(rows) == 1 and int(rows[0]["env_steps"]) >= 256
    cfg = json.loads((out / "config.json").read_text())
    assert cfg["num_env_runners"] == 2 and cfg["envs_per_runner"] == 4
    summary = json.loads((out / "summary.json").read_text())
    assert summary["model"].endswith("policy.json")


def test_periodic_evaluations_and_tensorboard(ray_cluster, tmp_path):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    _, address = ray_cluster
    out = tmp_path / "run"
    args = ["train", "--algo", "rllib-ppo", "--stage", "opener", "--timesteps", "512"]
    args += ["--eval-freq", "256", "--envs-per-runner", "4", "--ray-address", address]
    assert main([*args, "--out", str(out), "--no-progress", *SMALL]) == 0
    with (out / "eval_log.csv").open() as f:
        rows = list(csv.DictReader(f))
    # one evaluation after 256 steps, one of the final policy
    assert len(rows) == 2
    assert 256 <= int(rows[0]["env_steps"]) < 512 <= int(rows[1]["env_steps"])
    assert all(0.0 <= float(r["finish_rate"]) <= 1.0 for r in rows)
    acc = EventAccumulator(str(out / "tb"))
    acc.Reload()
    tags = set(acc.Tags()["scalars"])
    assert {"rollout/ep_rew_mean", "time/steps_per_s", "eval/finish_rate"} <= tags
    assert [e.step for e in acc.Scalars("eval/mean_progress_m")] == [
        int(r["env_steps"]) for r in rows
    ]


def test_exported_policy_is_the_modules_mean_action(trained):
    import torch
    from ray.rllib.core.rl_module.rl_module import RLModule

    out, _ = trained
    path = next((out / "checkpoint").rglob("default_policy"))
    module = RLModule.from_checkpoint(path)
    rng = np.random.default_rng(0)
    obs = rng.uniform(-1, 1, (16, module.observation_space.shape[0])).astype(np.float32)
    # the module sees observations through RLlib's MeanStdFilter (obs_norm, on by default)
    doc = json.loads((out / "policy" / "policy.json").read_text())
    assert doc["version"] == 2 and doc["obs_norm"] == {"eps": 1e-8, "clip": 10.0}
    with np.load(out / "policy" / "policy.npz") as z:
        mean, std = z["obs_mean"], z["obs_std"]
    assert np.all(std >= 0) and np.any(std > 0) and np.any(mean != 0)  # statistics were kept
    seen = np.clip((obs - mean) / (std + 1e-8), -10, 10).astype(np.float32)
    with torch.no_grad():
        logits = module.forward_inference({"obs": torch.from_numpy(seen)})["action_dist_inputs"]
    want = from_policy_action(logits.numpy()[:, :4])
    got = ExportedPolicy(out / "policy" / "policy.json")(obs)
    assert got.shape == (16, 4)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_a_new_run_starts_as_stable_baselines3_does(trained):
    """The policy head of a new run: means near 0 (half throttle, brakes off) and a log std
    of -1 whatever the input (torch's default init gave means up to about +-0.4 and RLlib's
    std 1: the car braked or crawled from the start)."""
    import torch
    from ray.rllib.core.rl_module.rl_module import RLModule

    out, _ = trained
    module = RLModule.from_checkpoint(next((out / "checkpoint").rglob("default_policy")))
    obs = np.random.default_rng(1).normal(0, 1, (32, module.observation_space.shape[0]))
    with torch.no_grad():
        d = module.forward_inference({"obs": torch.from_numpy(obs.astype(np.float32))})
    logits = d["action_dist_inputs"].numpy()
    assert np.abs(logits[:, :4]).max() < 0.05  # one small iteration moves them a little
    np.testing.assert_allclose(logits[:, 4:], -1.0, atol=0.05)
    a = ExportedPolicy(out / "policy" / "policy.json")(obs.astype(np.float32))
    assert np.all(np.abs(a[:, 1] - 0.5) < 0.05) and np.all(a[:, 2:] < 0.05)
    cfg = json.loads((out / "config.json").read_text())["hyperparams"]
    assert cfg["vf_clip_param"] == 1e6 and cfg["use_kl_loss"] is False and cfg["grad_clip"] == 0.5


def test_exported_policy_evaluates_the_same_locally_and_on_the_cluster(
    ray_cluster, trained, tmp_path
):
    _, address = ray_cluster
    out, _ = trained
    agent = str(out / "policy" / "policy.json")
    base = ["eval", "--agent", agent, "--stages", "opener", "--plain"]
    assert main([*base, "--json", str(tmp_path / "a.json")]) == 0
    assert main([*base, "--json", str(tmp_path / "b.json"), "--ray-address", address]) == 0
    a, b = (json.loads((tmp_path / n).read_text()) for n in ("a.json", "b.json"))
    a.pop("wall_time_s"), b.pop("wall_time_s")
    assert a == b


def test_resume_continues_the_step_count(trained):
    out, args = trained
    first = int(_progress(out)[0]["env_steps"])
    more = [*args, "--resume", str(out / "checkpoint")]
    more[more.index("--timesteps") + 1] = str(first + 256)
    assert main(more) == 0
    rows = _progress(out)
    assert len(rows) == 2
    assert int(rows[1]["env_steps"]) >= first + 256


def test_bad_options_are_messages(tmp_path, capsys):
    assert (
        main(
            [
                "train",
                "--algo",
                "rllib-ppo",
                "--resume",
                str(tmp_path),
                "--out",
                str(tmp_path / "o"),
            ]
        )
        == 2
    )
    assert "not an RLlib checkpoint" in capsys.readouterr().err
    assert (
        main(
            [
                "train",
                "--algo",
                "rllib-ppo",
                "--set",
                "nope=1",
                "--timesteps",
                "1",
                "--out",
                str(tmp_path / "o2"),
                "--ray-address",
                "local",
            ]
        )
        == 2
    )
    assert "unknown rllib-ppo setting 'nope'" in capsys.readouterr().err


def test_a_recipe_file_trains_on_the_cluster(ray_cluster, tmp_path):
    """``rally train --config`` with an ``rllib-ppo`` recipe: the recipe's settings reach the
    run (its config.json), the training stage included."""
    _, address = ray_cluster
    out = tmp_path / "run"
    recipe = tmp_path / "r.toml"
    recipe.write_text(
        f"""
[run]
algo = "rllib-ppo"
timesteps = 256
out = "{out}"
[env]
stage = "skidpad"
[ray]
address = "{address}"
num_env_runners = 1
envs_per_runner = 2
[rllib]
train_batch_size_per_learner = 256
minibatch_size = 64
num_epochs = 1
fcnet_hiddens = [16, 16]
[eval]
seeds = 1
"""
    )
    assert main(["train", "--config", str(recipe), "--no-progress"]) == 0
    cfg = json.loads((out / "config.json").read_text())
    assert cfg["stage"] == "skidpad" and cfg["ray_address"] == address
    assert (cfg["num_env_runners"], cfg["envs_per_runner"]) == (1, 2)
    assert cfg["hyperparams"]["fcnet_hiddens"] == [16, 16]
    pol = ExportedPolicy(out / "policy" / "policy.json")
    assert pol(np.zeros((1, int(pol.meta["obs_dim"])), np.float32)).shape == (1, 4)
