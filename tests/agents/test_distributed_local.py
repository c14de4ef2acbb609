"""The parts of distributed evaluation and verification that need no Ray cluster: a task's
work run in this process equals the local run, the multi-file ``rally verify``, the
leaderboard taking a report verified elsewhere, and the checks made before any task starts.
The cluster itself is tested in tests/ray (``pytest -m ray``)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

import tracks
from agents.benchmark import SETS, benchmark_chunk_job, build_stage, run_stages
from agents.distributed import (
    ReplayInput,
    _run_from_doc,
    episode_job,
    evaluate_distributed,
    read_replay_inputs,
    reference_job,
    report_from_dict,
    verify_job,
    verify_many,
)
from agents.evaluate import run_episode
from agents.policies import make_policy
from rally_env.cli import main
from rally_env.env import RallyEnv
from rally_env.replay import replay_from_bytes
from rally_env.replay.budgets import Budgets
from rally_env.replay.verify import verify_bytes
from rally_env.replay.workers import TaskLimits, limits_json
from tests.rally_env.test_replay import _tamper_action
from tests.rally_env.test_replay_support import record_run, write_doc

SHORT = {"termination": {"time_limit_s": 6.0}}


def _job(**kw):
    job = {
        "agent": "heuristic",
        "action_space": "auto",
        "policy_seed": 0,
        "name": "heuristic",
        "stage": "opener",
        "seed": 1,
        "record": True,
        "env_kwargs": SHORT,
        "replay": True,
    }
    job.update(kw)
    return json.dumps(job)


def test_episode_job_equals_the_local_episode_bit_for_bit():
    out = json.loads(episode_job(_job()))
    got = _run_from_doc(out["run"])
    want = run_episode(make_policy("heuristic"), "opener", 1, env=RallyEnv("opener", **SHORT))
    want.stage = "opener"
    assert got.figures() == want.figures()
    assert got.actions.dtype == np.float32
    assert np.array_equal(got.actions, want.actions)
    assert set(got.telemetry) == set(want.telemetry)
    for k, v in want.telemetry.items():
        assert got.telemetry[k].dtype == v.dtype
        assert np.array_equal(got.telemetry[k], v), k
    # the replay travels as its JSON text and verifies
    rp = replay_from_bytes(out["replay"].encode(), out["replay_name"])
    assert out["replay_name"] == rp.default_name()
    assert verify_bytes(out["replay"].encode()).accepted


def test_reference_job_equals_the_local_summary_s_reference_bit_for_bit():
    from agents.evaluate import summarize
    from agents.reference import reference_time
    from physics.vehicles import vehicle

    for stage, kw in (("skidpad", {}), ("gen-7", {"version": 1, "vehicle": "rally-car"})):
        got = json.loads(reference_job(json.dumps({"stage": stage, "env_kwargs": kw})))
        veh = vehicle(kw["vehicle"]) if kw else None
        assert got["reference_time_s"] == reference_time(stage, vehicle=veh).time_s
        runs = [run_episode(make_policy("heuristic"), stage, 0, env=RallyEnv(stage, **SHORT))]
        assert summarize(stage, "h", runs, vehicle=veh) == summarize(
            stage, "h", runs, vehicle=veh, reference_time_s=got["reference_time_s"]
        )
    with pytest.raises(ValueError, match="no such stage file"):
        reference_job(json.dumps({"stage": "no-such-stage.toml", "env_kwargs": {}}))


def test_benchmark_chunk_job_equals_the_local_chunk_bit_for_bit():
    specs = SETS["library"].stage_specs()[:2] + SETS["default"].stage_specs()[:1]
    docs = json.loads(
        benchmark_chunk_job(json.dumps({"agent": "heuristic", "policy_seed": 0, "specs": specs}))
    )
    got = [_run_from_doc(d) for d in docs]
    want, _ = run_stages(make_policy("heuristic"), [build_stage(sp) for sp in specs], chunk=3)
    assert [r.figures() for r in got] == [r.figures() for r in want]
    assert [r.stage for r in got] == [sp["stage"] for sp in specs]


def test_benchmark_refuses_what_a_cluster_cannot_reproduce(capsys):
    args = ["benchmark", "--sets", "library", "--limit", "1", "--no-progress"]
    assert main([*args, "--agent", "random", "--ray-address", "127.0.0.1:1"]) == 2
    assert "order they are driven" in capsys.readouterr().err


def _limits(timeout_s=300.0, memory_mb=0, **budgets):
    return limits_json(TaskLimits(timeout_s, memory_mb, Budgets(**budgets)))


def test_verify_job_is_verify_bytes_through_json(tmp_path):
    rp, _ = record_run(seed=2, max_steps=300)
    data = rp.to_bytes()
    budgets = Budgets(max_sim_s=100.0)
    got = report_from_dict(json.loads(verify_job(data, "x", _limits(max_sim_s=100.0))))
    want = verify_bytes(data, budgets, where="x")
    assert got.accepted and want.accepted
    a, b = got.to_dict(), want.to_dict()
    a.pop("elapsed_s"), b.pop("elapsed_s")
    assert a == b
    # a budget travels: one too small makes the same replay unusable, as locally
    tight = json.loads(verify_job(data, "x", _limits(max_sim_s=0.5)))
    assert tight["status"] == "unusable" and tight["reason"] == "over_budget"


def test_verify_job_over_its_memory_or_time_budget_is_unusable_and_the_next_one_runs():
    # the job verifies in a process of its own, as on a Ray worker: the limits bound that
    # process, and a failed one is replaced for the next job
    rp, _ = record_run(seed=2, max_steps=300, stage="gen-987654322")
    data = rp.to_bytes()
    for limits, what in (
        (_limits(memory_mb=1), "1 MiB memory budget"),
        (_limits(timeout_s=0.01), "0.01 s time budget"),
    ):
        out = json.loads(verify_job(data, "x", limits))
        assert (out["status"], out["reason"]) == ("unusable", "over_budget")
        assert out["message"].startswith("x: ") and what in out["message"], out["message"]
        again = json.loads(verify_job(data, "x", _limits(memory_mb=2048)))
        assert again["status"] == "accepted"


@pytest.mark.parametrize(
    ("agent", "match"),
    [("random", "order they are driven"), (lambda obs: obs, "--agent string")],
)
def test_agents_a_cluster_cannot_reproduce_are_refused_before_connecting(agent, match):
    with pytest.raises(ValueError, match=match):
        evaluate_distributed(agent, "opener", [0], address="127.0.0.1:1")


def test_unknown_stage_and_missing_model_are_refused_before_connecting(tmp_path):
    with pytest.raises(ValueError, match="no stage named"):
        evaluate_distributed("heuristic", "no-such-stage", [0], address="127.0.0.1:1")
    stage_file = str(Path(tracks.__file__).parent / "stages" / "opener.toml")
    with pytest.raises(ValueError, match="not sent to the workers"):
        evaluate_distributed("heuristic", stage_file, [0], address="127.0.0.1:1")
    with pytest.raises(FileNotFoundError):
        evaluate_distributed(str(tmp_path / "m.zip"), "opener", [0], address="127.0.0.1:1")
    with pytest.raises(TypeError):
        evaluate_distributed("heuristic", "opener", [0], address="127.0.0.1:1", env_kwargs={1j: 0})


def test_verify_several_files_exit_code_and_json(tmp_path, capsys):
    rp, _ = record_run(seed=2, max_steps=300)
    good = rp.save(tmp_path / "good.rrp.json.gz")
    doc = rp.to_dict()
    _tamper_action(doc, 50)
    bad = write_doc(tmp_path / "bad.rrp.json.gz", doc)
    assert main(["verify", str(good), str(good)]) == 0
    out = capsys.readouterr().out
    assert out.count("ACCEPTED") == 2 and str(good) in out
    assert main(["verify", str(good), str(bad), "--json"]) == 1
    reports = json.loads(capsys.readouterr().out)
    assert [r["file"] for r in reports] == [str(good), str(bad)]
    assert [r["status"] for r in reports] == ["accepted", "rejected"]
    assert main(["verify", str(good), str(tmp_path / "missing.rrp")]) == 2
    assert "missing.rrp" in capsys.readouterr().err
    # one file: the report as before (an object, not a list)
    assert main(["verify", str(good), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["status"] == "accepted"


@pytest.mark.parametrize("opt", ["--task-timeout", "--task-memory-mb"])
def test_task_limits_need_a_ray_address(tmp_path, capsys, opt):
    assert main(["verify", str(tmp_path / "x"), opt, "5"]) == 2
    err = capsys.readouterr().err
    assert f"{opt} goes with --ray-address" in err


def test_a_bad_task_memory_budget_is_refused_before_connecting(tmp_path, capsys):
    assert (
        main(
            [
                "verify",
                str(tmp_path / "x"),
                "--ray-address",
                "127.0.0.1:1",
                "--task-memory-mb",
                "-1",
            ]
        )
        == 2
    )
    assert "--task-memory-mb must be >= 0" in capsys.readouterr().err
    with pytest.raises(ValueError, match="task memory"):
        verify_many([], address="127.0.0.1:1", memory_mb=float("nan"))


def test_read_replay_inputs_keeps_order_and_reports_unreadable_files(tmp_path):
    rp, _ = record_run(seed=2, max_steps=200)
    good = rp.save(tmp_path / "good.rrp.json.gz")
    out = read_replay_inputs([good, tmp_path / "missing", tmp_path])
    assert isinstance(out[0], ReplayInput) and out[0].data == good.read_bytes()
    assert [getattr(x, "status", None) for x in out[1:]] == ["unusable", "unusable"]


def test_leaderboard_takes_a_report_of_the_same_run_only(tmp_path):
    from rally_env.replay.leaderboard import Leaderboard, LeaderboardError

    a, _ = record_run(seed=3)
    b, _ = record_run(seed=3, vmax=14.0)  # another run of the stage
    assert a.finished and b.finished and a.run_id() != b.run_id()
    rep_a = verify_bytes(a.to_bytes())
    with Leaderboard(tmp_path / "lb.sqlite") as lb:
        with pytest.raises(LeaderboardError, match="not of this replay") as e:
            lb.add(b, report=rep_a)
        assert e.value.reason == "rejected" and lb.count() == 0
        over = report_from_dict({**rep_a.to_dict(), "accepted": False, "status": "unusable"})
        with pytest.raises(LeaderboardError) as e:
            lb.add(a, report=over)
        assert e.value.reason == "bad_replay" and lb.count() == 0
        entry, rep = lb.add(a, report=rep_a)
        assert rep is rep_a and entry.finish_time_s == rep_a.finish_time_s
        assert lb.count() == 1


def test_ray_address_without_ray_is_a_message(tmp_path, capsys):
    try:
        import ray  # noqa: F401
    except ImportError:
        pass
    else:
        pytest.skip("ray is installed here: tests/ray covers the cluster path")
    assert main(["eval", "--stages", "opener", "--ray-address", "local"]) == 2
    assert "rally-env[ray]" in capsys.readouterr().err
    assert main(["verify", str(tmp_path / "x"), "--ray-address", "local"]) == 2
    assert "rally-env[ray]" in capsys.readouterr().err
    bench = ["benchmark", "--sets", "library", "--limit", "1", "--no-progress"]
    assert main([*bench, "--ray-address", "local"]) == 2
    assert "rally-env[ray]" in capsys.readouterr().err
