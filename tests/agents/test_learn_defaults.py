"""rally train's settings for RallyLearn-v0: the docs' plain-SB3 quick-start runs, ``--env``
is checked before anything is written, recipes take ``handbrake`` and ``teacher``, and the
docs' defaults table is the code's."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

pytest.importorskip("stable_baselines3")

from agents.evaluate import EVAL_LOG_HEADER
from agents.recipe import RecipeError, load_recipe
from agents.sb3 import PPO_DEFAULTS, SAC_DEFAULTS, TRAIN_DEFAULTS, TRAIN_ENV_DEFAULTS
from rally_env.cli import main

ROOT = Path(__file__).resolve().parents[2]
AGENTS_MD = (ROOT / "docs" / "agents.md").read_text()


def test_the_docs_quickstart_trains_with_plain_sb3(tmp_path, monkeypatch):
    block = re.search(
        r"<!-- quickstart-sb3 -->\n```python\n(.*?)```\n<!-- /quickstart-sb3 -->", AGENTS_MD, re.S
    )
    assert block, "docs/agents.md lost its quick-start block"
    code = block.group(1)
    assert "TIMESTEPS = 10_000_000" in code
    code = code.replace("TIMESTEPS = 10_000_000", "TIMESTEPS = 256").replace(
        "n_envs=32", "n_envs=2"
    )
    monkeypatch.chdir(tmp_path)
    ns: dict = {}
    exec(compile(code, "docs/agents.md quick-start", "exec"), ns)
    assert ns["model"].num_timesteps >= 256
    assert ns["model"].action_space.shape == (3,)
    assert (tmp_path / "ppo-rally-learn" / "model.zip").exists()
    # the evaluation that follows it reads the model and its statistics, at 10 Hz
    block = re.search(
        r"<!-- quickstart-sb3-eval -->\n```python\n(.*?)```\n<!-- /quickstart-sb3-eval -->",
        AGENTS_MD,
        re.S,
    )
    assert block, "docs/agents.md lost its quick-start evaluation block"
    assert '"validation:50"' in block.group(1)
    code = block.group(1).replace('"validation:50"', '"validation:1"')
    ns = {}
    exec(compile(code, "docs/agents.md quick-start evaluation", "exec"), ns)
    (run,) = ns["result"].runs
    assert run.stage == "gen-4000000000" and ns["policy"].obs_rms is not None
    assert run.steps > 0 and ns["policy"].model.action_space.shape == (3,)


def _doc_table_value(key: str, col: int) -> str:
    m = re.search(rf"^\| `{re.escape(key)}` \| (.*?) \| (.*?) \|$", AGENTS_MD, re.M)
    assert m, key
    return m.group(col).strip("`")


def test_the_docs_defaults_table_is_the_code():
    for key in dict.fromkeys([*PPO_DEFAULTS, *SAC_DEFAULTS]):
        for col, d in ((1, PPO_DEFAULTS), (2, SAC_DEFAULTS)):
            want = json.dumps(d[key]) if key in d else "-"
            assert _doc_table_value(key, col) == want, (key, col)
    for key, v in TRAIN_DEFAULTS.items():
        m = re.search(rf"^\| `{key}` \| `(.*?)`", AGENTS_MD, re.M)
        assert m and m.group(1) == json.dumps(v), key
    for key, v in TRAIN_ENV_DEFAULTS.items():
        m = re.search(rf"^\| env `{key}` \| `(.*?)` \|$", AGENTS_MD, re.M)
        assert m and m.group(1) == json.dumps(v), key


@pytest.mark.parametrize(
    "env, msg",
    [
        ("control_hz=7", "--env: control_hz = 7: must divide"),
        ("foo=1", "--env: foo = 1: unknown argument"),
        ("stage=opener", "--env stage: give the stage with --stage"),
        ("road_ahead", "--env needs KEY=VALUE"),
    ],
)
def test_a_bad_env_setting_is_refused_before_anything_is_written(tmp_path, capsys, env, msg):
    out = tmp_path / "run"
    assert main(["train", "--env", env, "--timesteps", "1024", "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert msg in err and "Traceback" not in err
    assert not out.exists()


def test_env_settings_reach_the_run(tmp_path):
    out = tmp_path / "run"
    argv = ["train", "--stage", "opener", "--timesteps", "256", "--n-envs", "2", "--out"]
    argv += [str(out), "--env", "control_hz=20", "--env", 'reward_weights={"time": 1.0}']
    argv += ["--eval-seeds", "1", "--eval-freq", "100000", "--no-progress"]
    assert main(argv) == 0
    cfg = json.loads((out / "config.json").read_text())
    assert cfg["env_kwargs"]["control_hz"] == 20 and "road_ahead" not in cfg["env_kwargs"]
    assert cfg["env_kwargs"]["reward_weights"] == {"crash": 100.0, "time": 1.0}
    assert cfg["handbrake"] is False


def _recipe(tmp_path, text):
    p = tmp_path / "r.toml"
    p.write_text(text)
    return p


def test_recipe_handbrake_and_teacher(tmp_path):
    base = '[env]\nstage = "random"\nroad_ahead = true\n'
    r = load_recipe(
        _recipe(tmp_path, base + '[ppo]\nhandbrake = false\n[warmstart]\nteacher = "ahead"\n')
    )
    assert r.handbrake is False and r.warmstart.teacher == "ahead" and "handbrake" not in r.ppo
    with pytest.raises(RecipeError, match=r"ppo\.handbrake must be true or false"):
        load_recipe(_recipe(tmp_path, base + '[ppo]\nhandbrake = "no"\n'))
    with pytest.raises(RecipeError, match=r'warmstart\.teacher must be "blind", "ahead", a'):
        load_recipe(_recipe(tmp_path, base + '[warmstart]\nteacher = "oracle"\n'))
    with pytest.raises(RecipeError, match=r"an existing \.zip model, got 'gone\.zip'"):
        load_recipe(_recipe(tmp_path, base + '[warmstart]\nteacher = "gone.zip"\n'))
    r = load_recipe(_recipe(tmp_path, base + '[warmstart]\nteacher = "es-general"\n'))
    assert r.warmstart.teacher == "es-general"
    with pytest.raises(RecipeError, match=r"warmstart\.teacher"):
        load_recipe(_recipe(tmp_path, base + "[warmstart]\nteacher = 3\n"))
    with pytest.raises(RecipeError, match=r"needs env\.road_ahead = true"):
        load_recipe(_recipe(tmp_path, '[warmstart]\nteacher = "ahead"\n'))
    with pytest.raises(RecipeError, match="for a plain policy, not a residual"):
        load_recipe(
            _recipe(tmp_path, base + '[ppo]\nhandbrake = false\n[residual]\nbase = "heuristic"\n')
        )


def test_the_net_general_recipe_loads():
    r = load_recipe(ROOT / "agents" / "configs" / "net-general.toml")
    assert r.handbrake is False and r.env["control_hz"] == 10 and r.env["road_ahead"] is True
    assert r.env["stage"] == "random" and r.residual.spec() is None
    assert r.warmstart.teacher == "es-general"


def test_a_warm_start_alone_recipe(tmp_path):
    base = '[run]\ntimesteps = 0\n[env]\nstage = "random"\nroad_ahead = true\n'
    r = load_recipe(_recipe(tmp_path, base + "[warmstart]\nsteps = 1000\n"))
    assert r.timesteps == 0 and r.warmstart.steps == 1000
    for extra in ("", "steps = 1000\ncritic_steps = 10\n"):  # no data; a critic to train
        with pytest.raises(RecipeError, match=r"run\.timesteps = 0 \(no PPO\)"):
            load_recipe(_recipe(tmp_path, base + "[warmstart]\n" + extra))


def _tiny_net_general(*more: tuple[str, str]) -> str:
    """net-general's recipe with a few thousand steps of data, one DAgger round, 2 stages."""
    text = (ROOT / "agents" / "configs" / "net-general.toml").read_text()
    for a, b in (
        ("steps = 300_000", "steps = 2_000"),
        ("dagger_rounds = 8", "dagger_rounds = 1"),
        ("dagger_steps = 250_000", "dagger_steps = 1_000"),
        ("stages = 50", "stages = 2"),
        *more,
    ):
        assert a in text
        text = text.replace(a, b)
    return text


def test_a_warm_start_alone_run_keeps_the_best_fit(tmp_path):
    text = _tiny_net_general(("epochs = 8", "epochs = 1"))
    from agents.recipe import train

    s = train(load_recipe(_recipe(tmp_path, text)), out=tmp_path / "run", progress=False)
    assert s["timesteps"] == 0
    log = (tmp_path / "run" / "eval_log.csv").read_text().splitlines()
    assert [row.split(",")[2] for row in log[1:]] == ["bc", "dagger1", "final"]
    from agents.models import load_model, read_meta

    best = tmp_path / "run" / "best_model.zip"
    assert read_meta(best)["env"] == {"road_ahead": True, "control_hz": 10}
    assert load_model(best)[0].action_space.shape == (3,)


def test_the_documented_commands_run_end_to_end(tmp_path):
    """``rally train --algo ppo --stage random`` (defaults but the budget) and ``rally train
    --config`` on net-general's recipe (a few thousand steps) run through the CLI."""
    out = tmp_path / "ppo"
    argv = ["train", "--algo", "ppo", "--stage", "random", "--timesteps", "4096"]
    assert main([*argv, "--out", str(out), "--no-progress"]) == 0
    cfg = json.loads((out / "config.json").read_text())
    assert cfg["n_envs"] == 32 and cfg["eval_stages"] == "validation:50"
    head = (out / "eval_log.csv").read_text().splitlines()[0]
    assert head + "\n" == EVAL_LOG_HEADER
    recipe = _recipe(tmp_path, _tiny_net_general())
    out2 = tmp_path / "net"
    assert main(["train", "--config", str(recipe), "--out", str(out2), "--no-progress"]) == 0
    assert (out2 / "best_model.zip").exists() and (out2 / "learning_curve.png").exists()


@pytest.mark.parametrize("opts", [["--n-envs", "4"], ["--env", "control_hz=20"], ["--handbrake"]])
def test_rllib_refuses_the_sb3_only_options(tmp_path, capsys, opts):
    out = tmp_path / "r"
    assert main(["train", "--algo", "rllib-ppo", *opts, "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert f"{opts[0]}: not for --algo rllib-ppo" in err and not out.exists()
