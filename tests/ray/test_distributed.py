"""Evaluation and verification on a Ray cluster equal the local run."""

from __future__ import annotations

import json
import os
import signal
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from agents.benchmark import run_benchmark
from agents.distributed import evaluate_distributed, read_replay_inputs, verify_many
from agents.evaluate import evaluate
from rally_env.cli import main
from rally_env.replay import load_replay
from rally_env.replay.verify import verify_bytes

pytestmark = pytest.mark.ray

STAGES = "opener,forest"
SEEDS = [0, 1]
SHORT = {"termination": {"time_limit_s": 20.0}}


def _same_eval(a, b):
    da, db = a.to_dict(), b.to_dict()
    da.pop("wall_time_s"), db.pop("wall_time_s")
    assert da == db
    for ra, rb in zip(a.runs, b.runs, strict=True):
        assert ra.actions.dtype == rb.actions.dtype and np.array_equal(ra.actions, rb.actions)
        assert ra.telemetry.keys() == rb.telemetry.keys()
        for k in ra.telemetry:
            assert ra.telemetry[k].dtype == rb.telemetry[k].dtype
            assert np.array_equal(ra.telemetry[k], rb.telemetry[k]), k


def _replay_claims(d: Path) -> dict[str, tuple]:
    out = {}
    for p in sorted(d.iterdir()):
        rp = load_replay(p)
        out[p.name] = (rp.initial_hash, tuple(rp.hashes), rp.final_hash, rp.finish_time_s)
    return out


@pytest.fixture(scope="module")
def local_eval(tmp_path_factory):
    d = tmp_path_factory.mktemp("local-replays")
    res = evaluate("heuristic", STAGES, SEEDS, record=True, env_kwargs=SHORT, replay_dir=str(d))
    return res, d


def test_distributed_eval_equals_local_bit_for_bit(ray_cluster, local_eval, tmp_path):
    _, address = ray_cluster
    local, local_dir = local_eval
    got = evaluate_distributed(
        "heuristic",
        STAGES,
        SEEDS,
        address=address,
        record=True,
        env_kwargs=SHORT,
        replay_dir=str(tmp_path),
    )
    _same_eval(got, local)
    # the same replays: names (stage, time, run id) and every state hash (the heuristic is
    # deterministic and these stages have one start: both seeds of a stage are one run, one file)
    claims = _replay_claims(tmp_path)
    assert claims == _replay_claims(local_dir)
    assert {name.split("-")[0] for name in claims} == {"opener", "forest"}


def test_distributed_benchmark_equals_local_for_a_network_agent(ray_cluster):
    # a residual network on the road-ahead observation, chunks of two stages: the same batches
    # on the workers as here, so the same results to the bit (timing aside)
    _, address = ray_cluster
    kw = {"sets": "library,default", "limit": 3, "chunk": 2}
    local = run_benchmark("ppo-general", **kw).to_dict()
    got = run_benchmark("ppo-general", address=address, **kw).to_dict()
    local.pop("timing"), got.pop("timing")
    assert got == local
    assert len(got["stages"]) == 6 and got["sets"]["library"]["finished"] >= 1


def test_cli_eval_with_ray_address_writes_the_local_json(ray_cluster, tmp_path):
    _, address = ray_cluster
    args = ["eval", "--agent", "heuristic", "--stages", "opener", "--episodes", "2", "--plain"]
    assert main([*args, "--json", str(tmp_path / "local.json")]) == 0
    assert main([*args, "--json", str(tmp_path / "ray.json"), "--ray-address", address]) == 0
    a = json.loads((tmp_path / "local.json").read_text())
    b = json.loads((tmp_path / "ray.json").read_text())
    a.pop("wall_time_s"), b.pop("wall_time_s")
    assert a == b


def _episode_worker_pids() -> list[int]:
    pids = []
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            cmd = (d / "cmdline").read_bytes()
        except OSError:
            continue
        if cmd.startswith(b"ray::episode_job"):
            pids.append(int(d.name))
    return pids


def test_a_worker_killed_mid_evaluation_is_retried_and_the_result_unchanged(
    ray_cluster, local_eval
):
    _, address = ray_cluster
    local, _ = local_eval
    box: dict = {}

    def run():
        try:
            box["res"] = evaluate_distributed(
                "heuristic", STAGES, SEEDS, address=address, record=True, env_kwargs=SHORT
            )
        except BaseException as e:
            box["err"] = e

    t = threading.Thread(target=run)
    t.start()
    killed = None
    deadline = time.monotonic() + 900  # generous: a loaded machine starts workers slowly
    while killed is None and t.is_alive() and time.monotonic() < deadline:
        pids = _episode_worker_pids()
        if pids:
            killed = pids[0]
            os.kill(killed, signal.SIGKILL)
        time.sleep(0.02)
    t.join(timeout=900)
    assert not t.is_alive()
    assert killed is not None, "no evaluation task was seen running"
    assert "err" not in box, box.get("err")
    _same_eval(box["res"], local)


def test_distributed_verify_accepts_honest_rejects_tampered_as_local(ray_cluster, replay_files):
    _, address = ray_cluster
    inputs = read_replay_inputs(replay_files)
    got = verify_many(inputs, address=address)
    want = [verify_bytes(x.data, where=x.where) for x in inputs]
    assert [r.status for r in got] == ["accepted", "rejected", "unusable"]
    for g, w in zip(got, want, strict=True):
        a, b = g.to_dict(), w.to_dict()
        a.pop("elapsed_s"), b.pop("elapsed_s")
        assert a == b


def test_cli_verify_and_leaderboard_add_over_the_cluster(ray_cluster, replay_files, capsys):
    _, address = ray_cluster
    honest, tampered, junk = (str(p) for p in replay_files)
    assert main(["verify", honest, tampered, "--json", "--ray-address", address]) == 1
    local_code = main(["verify", honest, tampered, "--json"])
    out = capsys.readouterr().out.strip().split("\n[", 1)
    ray_doc, local_doc = json.loads(out[0]), json.loads("[" + out[1])
    for d in (*ray_doc, *local_doc):
        d.pop("elapsed_s")
    assert local_code == 1 and ray_doc == local_doc
    db = str(Path(honest).parent / "lb.sqlite")
    code = main(
        [
            "leaderboard",
            "add",
            honest,
            tampered,
            junk,
            "--db",
            db,
            "--json",
            "--ray-address",
            address,
        ]
    )
    res = json.loads(capsys.readouterr().out)
    assert code == 1
    assert [r["added"] for r in res] == [True, False, False]
    assert [r.get("reason") for r in res[1:]] == ["rejected", "bad_replay"]
    # the same file again: a duplicate, as locally
    assert main(["leaderboard", "add", honest, "--db", db, "--ray-address", address]) == 1
    assert "already on the leaderboard" in capsys.readouterr().out


def test_a_verification_over_its_time_limit_is_cancelled_and_unusable(ray_cluster, replay_files):
    _, address = ray_cluster
    honest = read_replay_inputs(replay_files[:1])
    (rep,) = verify_many(honest, address=address, task_timeout_s=0.05)
    assert rep.status == "unusable" and rep.reason == "over_budget"
    # the driver's deadline or the task's own budget, whichever comes first
    assert "0.05 s" in rep.message
    # the cluster is still usable, and the same replay verifies with time to do it
    (rep,) = verify_many(honest, address=address)
    assert rep.accepted


def test_a_verification_over_its_memory_budget_is_unusable_and_the_worker_lives(
    ray_cluster, tmp_path
):
    from tests.rally_env.test_replay_support import record_run

    _, address = ray_cluster
    # a stage no other test drives: no worker holds its terrain, so verifying it must grow
    # the worker by far more than 1 MiB (a warm worker re-verifying a run it already built
    # the stage of may well fit in 1 MiB: the budget bounds growth, not the total)
    rp, _ = record_run(seed=3, max_steps=200, stage="gen-987654321")
    path = rp.save(tmp_path / "fresh.rrp.json.gz")
    honest = read_replay_inputs([path])
    (rep,) = verify_many(honest, address=address, memory_mb=1)
    assert rep.status == "unusable" and rep.reason == "over_budget"
    assert "1 MiB memory budget" in rep.message
    # the worker's limit was put back: the next tasks verify with the default budget
    reps = verify_many(honest * 2, address=address)
    assert [r.status for r in reps] == ["accepted", "accepted"]


def test_the_cluster_is_two_loopback_nodes_that_both_run_tasks(ray_cluster):
    ray, _ = ray_cluster

    @ray.remote(num_cpus=1)
    def where(_):
        import time

        time.sleep(0.5)  # both tasks hold their node's one CPU at once
        return ray.get_runtime_context().get_node_id()

    nodes = {n["NodeID"]: n["NodeManagerAddress"] for n in ray.nodes() if n["Alive"]}
    ran = set(ray.get([where.remote(i) for i in range(2)], timeout=120))
    assert ran == set(nodes) and len(ran) == 2
    assert set(nodes.values()) == {"127.0.0.1"}
