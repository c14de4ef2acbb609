"""The server's storage layer on SQLite (standard library only; the PostgreSQL side runs in
``pytest -m server``): the queue survives a restart, verdicts are atomic, only accepted runs
reach the board, which ``rally leaderboard`` reads as its own; tokens are stored hashed."""

from __future__ import annotations

import sqlite3

import pytest

from rally_env.replay import verify_bytes
from rally_env.replay.format import replay_from_bytes
from rally_env.replay.leaderboard import Leaderboard
from rally_env.server.store import MAX_ATTEMPTS, QueueFull, StoreError, open_store
from tests.rally_env.hostile_replays import HONEST, faster_claim, honest_doc


@pytest.fixture(scope="module")
def honest():
    data = HONEST.read_bytes()
    return data, verify_bytes(data), replay_from_bytes(data).to_bytes(compress=True)


def test_tokens_are_stored_hashed_and_revocable(tmp_path):
    st = open_store(tmp_path / "b.sqlite3")
    tok = st.add_token("ada")
    assert st.token_id(tok) == (1, "ada")
    assert st.token_id(tok + "x") is None
    raw = (tmp_path / "b.sqlite3").read_bytes()
    assert tok.encode() not in raw
    with pytest.raises(StoreError, match="exists"):
        st.add_token("ada")
    for bad in ("", "a b", "x" * 65, "-lead", "<script>"):
        with pytest.raises(StoreError, match="token name"):
            st.add_token(bad)
    assert st.revoke_token("ada") and not st.revoke_token("ada")
    assert st.token_id(tok) is None
    st.close()


def test_queue_claim_verdict_and_board(tmp_path, honest):
    data, report, blob = honest
    db = tmp_path / "b.sqlite3"
    st = open_store(db)
    a = st.submit(data, 1, "127.0.0.1", "ada", max_queue=3)
    b = st.submit(faster_claim(honest_doc()), 1, "127.0.0.1", "ada", max_queue=3)
    c = st.submit(data, 1, "127.0.0.1", "eve", max_queue=3)
    with pytest.raises(QueueFull):
        st.submit(data, 1, "127.0.0.1", "ada", max_queue=3)
    assert st.counts()["queued"] == 3
    job = st.claim(60.0)
    assert job == (a, data)
    assert st.submission(a)["status"] == "verifying"
    assert st.finish(a, report, blob, b"trace") == "accepted"
    sid, bad = st.claim(60.0)
    assert sid == b
    assert st.finish(b, verify_bytes(bad)) == "rejected"
    sid, _ = st.claim(60.0)
    assert st.finish(sid, report, blob) == "rejected"  # the same run again: a duplicate
    assert st.submission(c)["reason"] == "duplicate"
    assert st.claim(60.0) is None
    d = st.submission(b)
    assert (d["status"], d["reason"]) == ("rejected", "finish_time")
    assert d["run"] is None
    # a verdict is final: finishing again changes nothing
    assert st.finish(a, verify_bytes(bad)) == "accepted"
    # the accepted run, found by its submission id or its run id
    run = st.submission(report.run_id)
    assert run["status"] == "accepted" and run["run"]["checkpoint_times_s"] == list(
        report.checkpoint_times_s
    )
    assert st.trace(report.run_id) == b"trace"
    assert st.replay_blob(report.run_id) == blob
    assert [e.player for e in st.best("opener", None, "standard", 10)] == ["ada"]
    assert st.integrity_check() == "ok"
    # uploads are dropped once judged
    with sqlite3.connect(db) as conn:
        assert conn.execute("SELECT COUNT(upload) FROM submissions").fetchone() == (0,)
    st.close()
    # the local leaderboard reads (and writes) the same database
    with Leaderboard(db) as lb:
        assert [e.player for e in lb.best("opener")] == ["ada"]
        assert lb.count() == 1


def test_interrupted_verifications_are_retaken_then_given_up(tmp_path, honest):
    data = honest[0]
    st = open_store(tmp_path / "b.sqlite3")
    a = st.submit(data, 1, "-", "ada", max_queue=10)
    for _ in range(MAX_ATTEMPTS):
        assert st.claim(60.0)[0] == a
        assert st.claim(60.0) is None  # its lease holds
        st.close()
        st = open_store(tmp_path / "b.sqlite3")  # a restart
        assert st.requeue_verifying() == 1
    assert st.claim(60.0) is None
    d = st.submission(a)
    assert (d["status"], d["reason"]) == ("rejected", "verifier_error")
    # an expired lease is retaken without a restart (another server died)
    b = st.submit(data, 1, "-", "ada", max_queue=10)
    assert st.claim(-1.0)[0] == b
    assert st.claim(60.0)[0] == b
    st.close()


def test_unusable_databases_are_store_errors(tmp_path):
    with pytest.raises(StoreError, match="directory"):
        open_store(tmp_path)
    (tmp_path / "junk").write_bytes(b"not a database" * 100)
    with pytest.raises(StoreError):
        open_store(tmp_path / "junk")
