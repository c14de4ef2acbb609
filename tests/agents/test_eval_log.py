"""``eval_log.csv``, the one evaluation record of every training backend
(``agents.evaluate.ValidationLog``): its columns, the logs of older versions a resumed run
goes on with, ranking by time, and the RLlib evaluations (without Ray)."""

from __future__ import annotations

import csv
import json
import math
from types import SimpleNamespace

import numpy as np
import pytest

from agents.evaluate import EVAL_LOG_FIELDS, EVAL_LOG_HEADER, ValidationLog, migrate_eval_log


def _rows(path):
    with path.open(newline="") as f:
        return list(csv.DictReader(f))


def _run(t, progress=100.0, stage="opener"):
    return SimpleNamespace(stage=stage, finished=t is not None, stage_time_s=t, progress_m=progress)


def test_a_new_log_has_every_column_and_each_row_all_figures(tmp_path):
    log = ValidationLog(tmp_path, ["opener"], "env steps (millions)")
    m, better = log.add([_run(80.0, 500.0)], 7, 14, "ppo", figures={"ep_return": 2.5})
    assert better and m["median_time_s"] == 80.0 and m["mean_progress_m"] == 500.0
    text = (tmp_path / "eval_log.csv").read_text()
    assert text.startswith(EVAL_LOG_HEADER)
    (row,) = _rows(tmp_path / "eval_log.csv")
    assert list(row) == list(EVAL_LOG_FIELDS)
    assert (row["timesteps"], row["env_steps"], row["phase"]) == ("7", "14", "ppo")
    assert float(row["best_time_s"]) == 80.0 and float(row["ep_return"]) == 2.5
    assert 0.0 < float(row["median_score"]) == float(row["mean_score"])


@pytest.mark.parametrize(
    ("head", "row", "expect"),
    [
        (  # rally train before the score column
            "timesteps,wall_time_s,finish_rate,median_time_s,best_time_s,ep_return",
            "2048,3.5,0.500,81.000,80.000,-1.250",
            {"timesteps": "2048", "env_steps": "2048", "ep_return": "-1.250", "phase": ""},
        ),
        (  # rally train with it
            "timesteps,wall_time_s,finish_rate,median_time_s,best_time_s,ep_return,median_score",
            "4096,3.5,0.500,81.000,80.000,-1.250,0.9000",
            {"env_steps": "4096", "median_score": "0.9000", "mean_score": "nan"},
        ),
        (  # RLlib
            "env_steps,finish_rate,median_time_s,mean_progress_m",
            "4000,1.0,79.5,812.5",
            {"timesteps": "4000", "mean_progress_m": "812.5", "best_time_s": "nan"},
        ),
    ],
)
def test_a_resumed_run_goes_on_with_an_older_log(tmp_path, head, row, expect):
    path = tmp_path / "eval_log.csv"
    path.write_text(f"{head}\n{row}\n")
    log = ValidationLog(tmp_path, ["opener"], "env steps (millions)", rank="time")
    log.add([_run(70.0)], 9000, 9000, "ppo")
    old, new = _rows(path)
    assert path.read_text().startswith(EVAL_LOG_HEADER)
    assert {k: old[k] for k in expect} == expect
    for k, v in zip(head.split(","), row.split(","), strict=True):
        assert old[k] == v, k
    assert (new["timesteps"], new["phase"], float(new["median_time_s"])) == ("9000", "ppo", 70.0)
    assert log.plot().stat().st_size > 0  # the old row (no phase, no score) draws too
    assert not migrate_eval_log(path)  # already the current columns: left as it is


def test_a_log_with_an_unknown_column_is_refused_and_left_as_it_is(tmp_path):
    path = tmp_path / "eval_log.csv"
    path.write_text("steps,reward\n1,2\n")
    with pytest.raises(ValueError, match=r"\['steps', 'reward'\] are not eval_log.csv columns"):
        ValidationLog(tmp_path, ["opener"], "env steps (millions)")
    assert path.read_text() == "steps,reward\n1,2\n"
    with pytest.raises(ValueError, match="rank must be 'score' or 'time', got 'fast'"):
        ValidationLog(tmp_path / "other", ["opener"], "x", rank="fast")
    assert not (tmp_path / "other").exists()


def test_ranked_by_time_the_best_finishes_most_then_is_fastest(tmp_path):
    log = ValidationLog(tmp_path, ["opener"], "env steps (millions)", rank="time")
    assert log.add([_run(None), _run(None)], 1, 1, "ppo")[1]
    assert log.add([_run(90.0), _run(None)], 2, 2, "ppo")[1]
    assert log.add([_run(95.0), _run(99.0)], 3, 3, "ppo")[1]  # more finish, though slower
    assert not log.add([_run(96.0), _run(98.0)], 4, 4, "ppo")[1]  # the same median: not better
    assert log.add([_run(80.0), _run(90.0)], 5, 5, "ppo")[1]
    assert not log.add([_run(60.0), _run(61.0)], 6, 6, "final", final=True)[1]
    # a backend's own median (the mean of several stages' medians) is what ranks
    m, better = log.add([_run(70.0), _run(71.0)], 7, 7, "ppo", figures={"median_time_s": 99.0})
    assert not better and m["median_time_s"] == 99.0
    rows = _rows(tmp_path / "eval_log.csv")
    assert all(math.isnan(float(r["median_score"])) for r in rows)
    assert log.best[0] == 1.0 and math.isnan(log.best[1])
    assert log.plot().stat().st_size > 0


def test_a_resumed_run_keeps_the_best_of_its_log(tmp_path):
    """A resumed run's log goes on, and so does its best: an evaluation after the resume
    replaces ``best_model.zip`` only when it beats every earlier row (a final row never
    counts), under the same ranking."""
    log = ValidationLog(tmp_path, ["a", "b"], "env steps (millions)", rank="time")
    log.add([_run(90.0), _run(None)], 1, 1, "ppo")
    log.add([_run(80.0), _run(None)], 2, 2, "ppo")
    log.add([_run(50.0), _run(60.0)], 3, 3, "final", final=True)
    again = ValidationLog(tmp_path, ["a", "b"], "env steps (millions)", rank="time")
    assert again.best[0] == 0.5
    assert not again.add([_run(85.0), _run(None)], 4, 4, "ppo")[1]  # slower than 80 s
    assert again.add([_run(75.0), _run(None)], 5, 5, "ppo")[1]
    # ranked by score: the finish rate, then the median score
    scored = tmp_path / "scored"
    scored.mkdir()
    log = ValidationLog(scored, ["opener"], "x")
    log.add([_run(90.0)], 1, 1, "ppo", figures={"median_score": 0.6})
    again = ValidationLog(scored, ["opener"], "x")
    assert again.best == (1.0, 0.6)
    assert not again.add([_run(90.0)], 2, 2, "ppo", figures={"median_score": 0.55})[1]
    assert again.add([_run(90.0)], 3, 3, "ppo", figures={"median_score": 0.65})[1]


def test_a_resumed_log_with_a_broken_row_is_refused_by_name(tmp_path):
    log = ValidationLog(tmp_path, ["opener"], "x", rank="time")
    log.add([_run(90.0)], 1, 1, "ppo")
    path = tmp_path / "eval_log.csv"
    path.write_text(path.read_text().replace("1.0000", "one", 1))
    before = path.read_text()
    with pytest.raises(ValueError, match=r"eval_log.csv: line 2: not a number"):
        ValidationLog(tmp_path, ["opener"], "x", rank="time")
    assert path.read_text() == before


def test_rllib_evaluations_write_the_same_log_without_ray(tmp_path):
    from agents.models import EXPORT_FORMAT
    from agents.rllib import PolicyEvaluations
    from rally_env.env import RallyEnv

    env_kwargs = {"termination": {"time_limit_s": 2}}
    dim = RallyEnv(stage="opener", **env_kwargs).observation_space.shape[0]
    rng = np.random.default_rng(0)
    arrays = {"w0": rng.normal(size=(4, dim)) * 0.1, "b0": np.zeros(4)}
    arrays |= {"w1": rng.normal(size=(8, 4)) * 0.1, "b1": np.zeros(8)}
    np.savez(tmp_path / "policy.npz", **{k: v.astype(np.float32) for k, v in arrays.items()})
    doc = {"format": EXPORT_FORMAT, "version": 2, "layers": 2, "activation": "tanh"}
    doc |= {"obs_dim": dim, "action_dim": 4, "obs_norm": None}
    (tmp_path / "policy.json").write_text(json.dumps(doc))
    seen: list[tuple[str, float, int]] = []

    class Writer:
        def add_scalar(self, tag, value, step):
            seen.append((tag, value, step))

        def flush(self):
            pass

    run = tmp_path / "run"
    run.mkdir()
    ev = PolicyEvaluations(run, "opener", 2, env_kwargs, "run", Writer())
    s = ev.add(tmp_path / "policy.json", 256)
    ev.add(tmp_path / "policy.json", 512, final=True)
    assert s.stage == "opener" and s.episodes == 2
    rows = _rows(run / "eval_log.csv")
    assert [(r["timesteps"], r["env_steps"], r["phase"]) for r in rows] == [
        ("256", "256", "rllib"),
        ("512", "512", "final"),
    ]
    assert float(rows[0]["finish_rate"]) == s.finish_rate and float(rows[0]["mean_progress_m"]) > 0
    assert [t for t, _, n in seen if n == 256] == [f"eval/{k}" for k in PolicyEvaluations.SCALARS]
    assert ev.log.plot() == run / "learning_curve.png"
