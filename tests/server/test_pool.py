"""The verification pool's budgets: a worker runs under its address-space limit, a task over
its time budget is killed and rejected (``over_budget``) and a fresh worker takes the next."""

from __future__ import annotations

from pathlib import Path

import pytest

from rally_env.replay import verify_bytes
from rally_env.replay.workers import TaskFailed, TaskLimits, Worker
from tests.rally_env.hostile_replays import HONEST

pytestmark = pytest.mark.server


def test_worker_limits_time_budget_and_replacement():
    data = HONEST.read_bytes()
    w = Worker(TaskLimits(timeout_s=600.0, memory_mb=3072))
    try:
        w.start()
        limits = Path(f"/proc/{w.pid}/limits").read_text()
        line = next(x for x in limits.splitlines() if x.startswith("Max address space"))
        assert line.split()[3] == str(3072 * 1024 * 1024), line
        out = w.call("verify", data)
        assert out["report"].accepted and out["blob"] and out["trace"]
        first = w.pid
        w.limits = TaskLimits(timeout_s=0.001, memory_mb=3072)
        with pytest.raises(TaskFailed, match="time budget") as e:
            w.call("verify", data)
        assert e.value.reason == "over_budget"
        assert not w.alive()
        w.limits = TaskLimits(timeout_s=600.0, memory_mb=3072)
        out = w.call("verify", data)  # a fresh worker
        assert w.pid != first and out["report"].accepted
        assert out["report"].run_id == verify_bytes(data).run_id
        bad = w.call("verify", b"\x1f\x8b not gzip")
        assert bad["report"].status == "unusable"
    finally:
        w.stop()


def test_a_worker_over_its_memory_budget_rejects_the_run_and_is_replaced():
    """300 MiB of address space: the interpreter fits, a verification does not: its
    allocation fails (or the worker dies or stalls until the time budget): ``over_budget``,
    never a verdict, and the next worker is a fresh one."""
    data = HONEST.read_bytes()
    w = Worker(TaskLimits(timeout_s=120.0, memory_mb=300))
    try:
        try:
            w.start()
        except RuntimeError as e:  # too small even for the interpreter here: refused at start
            assert "did not start" in str(e)
        else:
            with pytest.raises(TaskFailed) as e:
                w.call("verify", data)
            assert e.value.reason == "over_budget"
            assert not w.alive()
        w.limits = TaskLimits(timeout_s=600.0, memory_mb=2048)
        assert w.call("verify", data)["report"].accepted
    finally:
        w.stop()


def test_serve_ray_address_without_ray_or_cluster_is_a_message(tmp_path, capsys):
    from rally_env.cli import main

    try:
        import ray  # noqa: F401
    except ImportError:
        want = "rally-env[ray]"
    else:  # Ray is here: a cluster address nobody listens on
        want = "--ray-address"
    db = str(tmp_path / "b.sqlite3")
    assert main(["serve", "--db", db, "--ray-address", "127.0.0.1:1"]) == 2
    assert want in capsys.readouterr().err


def test_a_runs_time_budget_is_proportional_to_a_default_run_of_its_length():
    lim = TaskLimits(timeout_s=60.0, cost_factor=4.0, min_timeout_s=2.0)
    assert lim.run_timeout(1000, (0.5, 0.001)) == pytest.approx(6.0)  # 4 x (0.5 + 1000 x 1 ms)
    assert lim.run_timeout(10, (0.1, 0.001)) == 2.0  # at least min_timeout_s
    assert lim.run_timeout(10**7, (0.5, 0.001)) == 60.0  # at most timeout_s
    assert lim.run_timeout(1000, None) == 60.0  # not measured: the flat budget
    w = Worker(TaskLimits(timeout_s=600.0, memory_mb=3072, min_timeout_s=0.001))
    try:
        w.start()
        setup_s, step_s = w.cost  # measured by the worker as it started
        assert setup_s > 0 and step_s > 0
        w.cost = (0.0, 1e-9)  # a machine where a default run costs nothing: no time to verify
        with pytest.raises(TaskFailed, match="time budget") as e:
            w.call("verify", HONEST.read_bytes())
        assert e.value.reason == "over_budget" and not w.alive()
    finally:
        w.stop()


def test_a_worker_that_dies_is_reported_by_its_real_cause():
    import os
    import signal
    import threading

    w = Worker(TaskLimits(timeout_s=600.0, memory_mb=3072))
    try:
        w.start()
        os.kill(w.pid, signal.SIGSTOP)  # holds the task until it is killed
        threading.Timer(0.5, os.kill, (w.pid, signal.SIGKILL)).start()
        with pytest.raises(TaskFailed, match="killed by SIGKILL") as e:
            w.call("verify", HONEST.read_bytes())
        assert e.value.reason == "verifier_died" and "memory" not in str(e.value)
        assert w.call("verify", HONEST.read_bytes())["report"].accepted  # a fresh worker
    finally:
        w.stop()


def test_stopping_the_verifier_stops_its_trace_worker():
    """A trace runs in the verifier's own worker process; stopping the verifier (server
    shutdown) stops that process too, as it stops the pool's."""
    from rally_env.server.pool import Verifier

    v = Verifier(store=None, workers=0, limits=TaskLimits(timeout_s=600.0, memory_mb=3072))
    v.start()
    assert v.trace(HONEST.read_bytes())
    assert v.tracer.alive()
    v.stop()
    assert not v.tracer.alive()
