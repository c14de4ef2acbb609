"""The leaderboard server's verification on the Ray cluster (``rally serve --ray-address``):
the pool's threads send each queued run to the cluster, and the verdicts and the stored runs
are those of the local worker processes. (The HTTP side is the server suite's, which runs
with local workers; this runs the same queue and verifier without the web framework.)"""

from __future__ import annotations

import time

import pytest

from rally_env.replay.workers import RayWorker, TaskLimits
from rally_env.server.pool import Verifier
from rally_env.server.store import SQLiteStore

pytestmark = pytest.mark.ray


def _wait(store, ids, timeout=600.0):
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout:
        subs = [store.submission(i) for i in ids]
        if all(s["status"] in ("accepted", "rejected") for s in subs):
            return subs
        time.sleep(0.5)
    raise TimeoutError([s["status"] for s in subs])


def _verdicts(store, blobs, verifier):
    ids = [store.submit(b, 0, "127.0.0.1", f"p{i}", 100) for i, b in enumerate(blobs)]
    verifier.start()
    try:
        verifier.notify()
        subs = _wait(store, ids)
    finally:
        verifier.stop()
    return [(s["status"], s["reason"], s["step"], s["run_id"]) for s in subs]


def test_the_cluster_gives_the_local_pools_verdicts(ray_cluster, replay_files, tmp_path):
    _, address = ray_cluster
    honest, tampered, junk = replay_files
    blobs = [p.read_bytes() for p in (honest, tampered, junk)]
    limits = TaskLimits(timeout_s=300.0, memory_mb=0)
    local = SQLiteStore(tmp_path / "local.sqlite3")
    remote = SQLiteStore(tmp_path / "remote.sqlite3")
    want = _verdicts(local, blobs, Verifier(local, 1, limits))
    on_ray = Verifier(remote, 2, limits, ray_address=address)
    got = _verdicts(remote, blobs, on_ray)
    assert len(on_ray.workers) == 2 and all(isinstance(w, RayWorker) for w in on_ray.workers)
    assert got == want
    assert [g[0] for g in got] == ["accepted", "rejected", "rejected"]
    # the accepted run is on the board, with the trace the server serves
    run_id = got[0][3]
    assert remote.replay_blob(run_id) == local.replay_blob(run_id)
    assert remote.trace(run_id) == local.trace(run_id) is not None


def test_a_run_over_its_time_budget_on_the_cluster_is_rejected(ray_cluster, replay_files, tmp_path):
    _, address = ray_cluster
    store = SQLiteStore(tmp_path / "slow.sqlite3")
    limits = TaskLimits(timeout_s=0.01, memory_mb=0)
    got = _verdicts(store, [replay_files[0].read_bytes()], Verifier(store, 1, limits, address))
    assert got[0][:2] == ("rejected", "over_budget")


def test_a_run_over_its_memory_budget_on_the_cluster_is_rejected(
    ray_cluster, replay_files, tmp_path
):
    _, address = ray_cluster
    store = SQLiteStore(tmp_path / "big.sqlite3")
    blob = replay_files[0].read_bytes()
    got = _verdicts(store, [blob], Verifier(store, 1, TaskLimits(300.0, 1), address))
    assert got[0][:2] == ("rejected", "over_budget")
    # the same run with room to verify is accepted: the worker's limit was put back
    got = _verdicts(store, [blob], Verifier(store, 1, TaskLimits(300.0, 2048), address))
    assert got[0][0] == "accepted"
