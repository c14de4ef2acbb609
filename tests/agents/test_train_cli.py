"""``rally train`` says what it does and keeps one run per ``--out``: a line when it starts
(what, how many steps, where), the rounding of ``--timesteps`` to whole rollouts, plain
progress lines, TensorBoard logs in ``tb/``; a non-empty ``--out`` is refused unless the run
resumes a checkpoint or overwrites the old run."""

from __future__ import annotations

import importlib
import importlib.metadata
import re
import tomllib
from pathlib import Path

import pytest

pytest.importorskip("stable_baselines3")
pytest.importorskip("torch")

from agents.evaluate import EVAL_LOG_HEADER
from agents.recipe import command_recipe
from agents.rundir import RUN_ENTRIES, RunDirectoryError, claim_run_dir
from agents.sb3 import run_steps, train
from rally_env.cli import main

ROOT = Path(__file__).resolve().parents[2]
SMALL = ["--stage", "opener", "--n-envs", "4", "--seed", "1", "--eval-seeds", "1"]
SMALL += ["--eval-freq", "2048", "--checkpoint-freq", "2048", "--set", "n_steps=256"]


def _old_run(d: Path) -> None:
    d.mkdir(parents=True)
    (d / "model.zip").write_bytes(b"old")
    (d / "eval_log.csv").write_text("old header\n1,2,3\n")
    (d / "checkpoints").mkdir()
    (d / "checkpoints" / "ppo_999_steps.zip").write_bytes(b"old")


def test_the_train_extra_installs_the_progress_bar_and_tensorboard():
    """What ``rally train --help``, the README and docs/agents.md promise: SB3's progress bar
    (tqdm and rich) and TensorBoard logs come with the ``train`` extra."""
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"][
        "optional-dependencies"
    ]
    names = {re.split(r"[\[<>=!~ ;]", r, maxsplit=1)[0].lower() for r in extras["train"]}
    assert {"stable-baselines3", "torch", "rich", "tqdm", "tensorboard"} <= names
    for name in names:
        importlib.metadata.version(name)  # installed
    for module in ("rich", "tqdm.rich", "tensorboard", "torch.utils.tensorboard"):
        importlib.import_module(module)


def test_a_non_empty_out_is_refused_and_nothing_is_touched(tmp_path, capsys):
    out = tmp_path / "run"
    _old_run(out)
    before = sorted(str(p.relative_to(out)) for p in out.rglob("*"))
    assert main(["train", *SMALL, "--timesteps", "2048", "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert f"--out {out} is not empty (checkpoints, eval_log.csv, model.zip)" in err
    assert "--resume" in err and "--overwrite" in err and "Traceback" not in err
    assert sorted(str(p.relative_to(out)) for p in out.rglob("*")) == before
    assert (out / "model.zip").read_bytes() == b"old"


def test_overwrite_refuses_files_no_run_writes_and_resume_together(tmp_path):
    out = tmp_path / "run"
    _old_run(out)
    (out / "notes.txt").write_text("mine")
    with pytest.raises(RunDirectoryError, match=r"also holds notes\.txt.*nothing was removed"):
        claim_run_dir(out, overwrite=True)
    assert (out / "model.zip").exists() and (out / "notes.txt").exists()
    with pytest.raises(RunDirectoryError, match="do not go together"):
        claim_run_dir(out, resume=True, overwrite=True)
    assert claim_run_dir(tmp_path / "new") == tmp_path / "new"  # absent or empty: fine
    assert claim_run_dir(out, resume=True) == out  # resuming: the files stay
    assert (out / "notes.txt").exists()


def test_overwrite_replaces_the_old_run_and_says_what_it_trains(tmp_path, capsys):
    out = tmp_path / "run"
    _old_run(out)
    argv = ["train", *SMALL, "--timesteps", "3000", "--out", str(out), "--overwrite"]
    assert main(argv) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith(
        f"rally train: PPO on opener, 2,048 env steps, 4 cars, seed 1 -> {out}"
    )
    assert "TensorBoard logs in tb/" in lines[0]
    assert lines[1] == (
        "--timesteps 3,000 -> 2,048 env steps: PPO trains in whole rollouts of n_steps 256 x "
        "4 cars = 1,024 steps, rounded down so a run never takes more steps than asked"
    )
    assert lines[-1].startswith("trained 2048 steps")
    # the old run is gone: no old checkpoint, a fresh learning curve, a new model
    assert sorted(p.name for p in (out / "checkpoints").iterdir()) == [
        "ppo_2048_steps.zip",
        "ppo_vecnormalize_2048_steps.pkl",
    ]
    assert (out / "eval_log.csv").read_text().startswith(EVAL_LOG_HEADER)
    assert (out / "learning_curve.png").stat().st_size > 0
    assert (out / "model.zip").read_bytes() != b"old"
    # TensorBoard logs (SB3's run folder tb/ppo_1 with an event file)
    assert list((out / "tb").glob("ppo_1/events.out.tfevents.*"))
    assert set(p.name for p in out.iterdir()) <= set(RUN_ENTRIES)
    # --resume continues into the same --out: its learning curve goes on
    rows = (out / "eval_log.csv").read_text().count("\n")
    ckpt = out / "checkpoints" / "ppo_2048_steps.zip"
    argv = ["train", *SMALL, "--timesteps", "1024", "--out", str(out), "--resume", str(ckpt)]
    assert main(argv) == 0
    assert f"resuming {ckpt}" in capsys.readouterr().out
    assert (out / "eval_log.csv").read_text().count("\n") > rows


def test_plain_progress_lines_name_steps_rate_and_the_last_evaluation(tmp_path):
    said: list[str] = []
    recipe = command_recipe(
        "ppo",
        "opener",
        timesteps=2048,
        n_envs=4,
        seed=1,
        out=tmp_path / "a",
        hyperparams={"n_steps": 256},
        eval_freq=1024,
        eval_seeds=1,
        checkpoint_freq=0,
    )
    train(
        recipe,
        progress_bar=False,
        tensorboard=False,
        say=said.append,
        progress_lines_s=0.0,  # a line at every rollout end
    )
    progress = [s for s in said if s.startswith("  ")]
    assert len(progress) == 2  # two rollouts of 1,024 steps, each followed by an evaluation
    evaluation = r"evaluation at {}: finish rate \d\.\d\d, median stage time (-|\d+\.\d\d s)"
    assert re.fullmatch(
        r"  1,024/2,048 steps \(50 %\), [\d,]+ steps/s, about \d+ (s|min) to go; "
        + evaluation.format("1,024"),
        progress[0],
    )
    assert re.fullmatch(
        r"  2,048/2,048 steps \(100 %\), [\d,]+ steps/s; " + evaluation.format("2,048"),
        progress[1],
    )
    assert said[0].startswith("rally train: PPO on opener, 2,048 env steps")
    assert "checkpoints/" not in said[0] and "TensorBoard" not in said[0]


@pytest.mark.parametrize(
    ("algo", "asked", "steps", "note"),
    [
        ("ppo", 200_000, 196_608, "--timesteps 200,000 -> 196,608 env steps"),
        ("ppo", 204_800, 204_800, ""),
        ("ppo", 100, 4096, "and a run takes at least one"),
        ("sac", 1_000_003, 1_000_000, "a multiple of the 8 cars"),
    ],
)
def test_the_rounding_of_timesteps_is_said(algo, asked, steps, note):
    got, line = run_steps(algo, asked, 8, {"n_steps": 512})
    assert got == steps
    assert (note in line) if note else line == ""
