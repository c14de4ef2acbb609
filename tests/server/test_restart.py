"""kill -9 of the server (and its workers) while runs are queued and verifying, then a
restart: every run reaches its verdict, honest runs enter the board exactly once, and the
database passes its integrity check."""

from __future__ import annotations

import sqlite3
import time

import pytest

from tests.server.support import (
    Postgres,
    Server,
    add_token,
    faster,
    httpx,
    submit,
    tampered_action,
    wait_verdict,
)

pytestmark = [pytest.mark.server, pytest.mark.usefixtures("server_extra")]


@pytest.mark.parametrize("backend", ["sqlite", "postgres"])
def test_kill9_while_queued_and_verifying_then_restart(backend, tmp_path, honest):
    pg = Postgres().start() if backend == "postgres" else None
    db = pg.url if pg else str(tmp_path / "board.sqlite3")
    # the lease after which another server retakes a run (PostgreSQL) is the task timeout + 10 s
    args = ("--workers", "1", "--task-timeout", "20")
    servers = []
    try:
        tok = add_token(db, "ada")
        s = Server(db, *args).start()
        servers.append(s)
        runs = [
            *honest,
            tampered_action(honest[0], 300),
            tampered_action(honest[1], 700),
            faster(honest[1]),
            faster(honest[0]),
        ]
        want = ["accepted", "accepted", "rejected", "rejected", "rejected", "rejected"]
        ids = []
        for data in runs:
            r = submit(s.url, tok, data)
            assert r.status_code == 202, r.text
            ids.append(r.json()["id"])
        t0 = time.monotonic()
        while time.monotonic() - t0 < 300:
            c = httpx.get(s.url + "/api/v1/health").json()
            if c["verifying"] >= 1:
                break
            time.sleep(0.05)
        assert c["verifying"] >= 1 and c["queued"] >= 1, c
        s.kill9()
        assert not s.alive()
        s2 = Server(db, *args).start()
        servers.append(s2)
        pending = httpx.get(s2.url + "/api/v1/health").json()
        assert pending["queued"] + pending["verifying"] >= 2, pending
        verdicts = [wait_verdict(s2.url, i, timeout=600) for i in ids]
        assert [v["status"] for v in verdicts] == want, verdicts
        board = httpx.get(s2.url + "/api/v1/boards/opener?limit=100").json()["entries"]
        assert len(board) == 2 and len({e["run_id"] for e in board}) == 2
        c = httpx.get(s2.url + "/api/v1/health").json()
        assert (c["runs"], c["accepted"], c["rejected"], c["queued"], c["verifying"]) == (
            2,
            2,
            4,
            0,
            0,
        )
        s2.stop()
        if pg is None:
            with sqlite3.connect(db) as conn:
                assert conn.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
                assert conn.execute("PRAGMA foreign_key_check").fetchall() == []
                n = conn.execute("SELECT COUNT(*) FROM splits").fetchone()[0]
                assert n == 4  # two checkpoints for each of the two runs
        else:
            from rally_env.server.store import open_store

            st = open_store(db)
            assert st.integrity_check() == "ok"
            st.close()
    finally:
        for s in servers:
            s.stop()
        if pg is not None:
            pg.stop()
