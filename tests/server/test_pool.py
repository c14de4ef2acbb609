"""The verification pool's budgets: a worker runs under its address-space limit, a task over
its time budget is killed and rejected (``over_budget``) and a fresh worker takes the next."""

from __future__ import annotations

from pathlib import Path

import pytest

from rally_env.replay import verify_bytes
from rally_env.server.pool import TaskFailed, TaskLimits, Worker
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
