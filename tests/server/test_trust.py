"""The leaderboard's trust under attack and faults, against a real ``rally serve`` on
127.0.0.1: a run copied with a setting changed that a finished run never pays is a duplicate;
a stage named like a generated one is not on that stage's board (the server and ``rally
leaderboard show`` agree); a killed verifier loses no run; a locked database answers reads
and a typed 503; a multipart upload is read for its file; a query string that is not UTF-8 or
repeats a name is refused; the pages answer errors as pages."""

from __future__ import annotations

import contextlib
import gzip
import json
import os
import signal
import sqlite3
import time
from pathlib import Path

import pytest

from tests.server.support import Server, add_token, httpx, rally, submit, wait_verdict

pytestmark = [pytest.mark.server, pytest.mark.usefixtures("server_extra")]


@pytest.fixture(scope="module")
def srv(tmp_path_factory):
    db = str(tmp_path_factory.mktemp("trust") / "board.sqlite3")
    s = Server(db, "--workers", "1", "--token-rate", "1000/60", "--address-rate", "1000/60")
    s.start()
    s.token = add_token(db, "ada")
    s.thief = add_token(db, "eve")
    try:
        yield s
    finally:
        s.stop()


def counts(s) -> dict:
    return httpx.get(s.url + "/api/v1/health", timeout=30).json()


def test_a_downloaded_run_reuploaded_with_a_free_setting_changed_is_a_duplicate(srv, honest):
    from tests.rally_env.hostile_replays import stolen

    r = submit(srv.url, srv.token, honest[0], "ada")
    first = wait_verdict(srv.url, r.json()["id"])
    assert first["status"] == "accepted", first
    blob = httpx.get(f"{srv.url}/api/v1/runs/{first['id']}/replay").content
    thief = submit(srv.url, srv.thief, stolen(json.loads(gzip.decompress(blob))), "eve")
    v = wait_verdict(srv.url, thief.json()["id"])
    assert (v["status"], v["reason"]) == ("rejected", "duplicate"), v
    assert first["run_id"] in v["message"]
    board = httpx.get(srv.url + "/api/v1/boards/opener?rules=all").json()["entries"]
    assert [e["player"] for e in board] == ["ada"]
    assert board[0]["added_utc"] == first["submitted_utc"]


def test_a_stage_named_like_a_generated_one_is_not_on_its_board(srv):
    from tests.rally_env.hostile_replays import spoofed_gen_stage

    r = submit(srv.url, srv.token, spoofed_gen_stage("gen-5"), "spoofer")
    v = wait_verdict(srv.url, r.json()["id"])
    assert (v["status"], v["reason"]) == ("rejected", "stage_name"), v
    assert "gen-5" in v["message"]
    # a board reads only the stage its name makes, whatever the database holds (a row put
    # there by an older server)
    rep = httpx.get(f"{srv.url}/api/v1/runs/{r.json()['id']}").json()
    assert rep["verdict"] == "accepted"  # the replay itself verified
    with contextlib.closing(sqlite3.connect(srv.db)) as c, c:
        c.execute(
            "INSERT INTO runs (run_id, stage_name, stage_digest, rules, standard, control_hz, "
            "vehicle_digest, finish_time_s, steps, player, added_utc, replay) VALUES "
            "('f' || hex(randomblob(15)), 'gen-5', 'spoofdigest', 'r', 1, 20, '', 1.0, 20, "
            "'spoofer', '', x'00')"
        )
    board = httpx.get(srv.url + "/api/v1/boards/gen-5").json()
    assert board["entries"] == []
    every = httpx.get(srv.url + "/api/v1/boards/gen-5?versions=all").json()["entries"]
    assert [e["player"] for e in every] == ["spoofer"]
    assert "gen-5" not in [s["name"] for s in httpx.get(srv.url + "/api/v1/stages").json()]
    assert "spoofer" not in httpx.get(srv.url + "/").text
    assert "spoofer" not in httpx.get(srv.url + "/stages/gen-5").text
    out = rally("leaderboard", "show", "--stage", "gen-5", "--db", srv.db)
    assert out.returncode == 0 and "spoofer" not in out.stdout, out


def test_multipart_uploads_are_read_and_other_types_refused_at_once(srv):
    from tests.rally_env.test_replay_support import record_run

    run, _ = record_run(seed=6, vmax=11.0)
    auth = {"Authorization": f"Bearer {srv.token}"}
    before = counts(srv)
    r = httpx.post(srv.url + "/api/v1/runs", headers=auth, content=b"x", params={"player": "a"})
    assert r.status_code == 202  # no content type: the body is the file (as before)
    assert wait_verdict(srv.url, r.json()["id"])["reason"] == "bad_replay"
    for headers, kwargs in (
        ({"Content-Type": "text/plain"}, {"content": run.to_bytes()}),
        ({"Content-Type": "image/png"}, {"content": b"\x89PNG"}),
    ):
        r = httpx.post(srv.url + "/api/v1/runs", headers={**auth, **headers}, **kwargs)
        assert r.status_code == 415, r.text
        assert r.json()["error"]["code"] == "unsupported_media_type"
        assert "curl -F file=@" in r.json()["error"]["message"]
    two = {"a": ("a.rrp.json.gz", b"1"), "b": ("b.rrp.json.gz", b"2")}
    r = httpx.post(srv.url + "/api/v1/runs", headers=auth, files=two)
    assert r.status_code == 400 and r.json()["error"]["code"] == "bad_upload", r.text
    after = counts(srv)
    assert after["queued"] + after["verifying"] + after["accepted"] + after["rejected"] == (
        before["queued"] + before["verifying"] + before["accepted"] + before["rejected"] + 1
    )
    files = {"file": ("run.rrp.json.gz", run.to_bytes(compress=True), "application/gzip")}
    r = httpx.post(srv.url + "/api/v1/runs", headers=auth, files=files, data={"note": "hi"})
    assert r.status_code == 202, r.text
    assert wait_verdict(srv.url, r.json()["id"])["status"] == "accepted"


def test_query_strings_that_are_not_utf8_or_repeat_a_name_are_refused(srv, honest):
    auth = {"Authorization": f"Bearer {srv.token}"}
    before = counts(srv)
    for query in ("player=%FF%FE", "player=%ED%A0%80", "player=x&player=y", "pl%FFayer=x"):
        r = httpx.post(f"{srv.url}/api/v1/runs?{query}", headers=auth, content=honest[0])
        assert r.status_code == 400, (query, r.text)
        assert r.json()["error"]["code"] in ("bad_player", "bad_request"), query
    assert (
        httpx.post(f"{srv.url}/api/v1/runs?player=x&player=y", headers=auth, content=b"1").json()[
            "error"
        ]["code"]
        == "bad_player"
    )
    r = httpx.get(srv.url + "/api/v1/boards/opener?limit=1&limit=100")
    assert r.status_code == 400 and r.json()["error"]["code"] == "bad_request"
    assert counts(srv) == before
    # the pages answer an error page, never JSON
    for path in ("/stages/opener?rules=%27bad", "/stages/opener?limit=abc", "/?x=1&x=2"):
        r = httpx.get(srv.url + path)
        assert r.status_code == 400, (path, r.status_code)
        assert r.headers["content-type"].startswith("text/html"), (path, r.text[:200])


def _workers(s: Server) -> list[int]:
    """The server's verification worker processes (multiprocessing's spawned children)."""
    out = []
    for pid in s.pids():
        with contextlib.suppress(OSError):
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes()
            if (
                b"spawn_main" in cmd
                and int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
                == s.proc.pid
            ):
                out.append(pid)
    return out


def test_a_killed_verifier_loses_no_run(tmp_path, honest):
    db = str(tmp_path / "k.sqlite3")
    tok = add_token(db, "ada")
    s = Server(db, "--workers", "1").start()
    try:
        t0 = time.monotonic()
        while "verification worker" not in s.log.read_text():  # started and calibrated
            assert time.monotonic() - t0 < 300, s.log.read_text()
            time.sleep(0.1)
        (pid,) = _workers(s)
        assert f"verification worker {pid} ready" in s.log.read_text()
        # the worker is ready when the pool has sent it nothing yet: stop it, so that the
        # run is claimed and sent to it, then kill it while it holds the run
        os.kill(pid, signal.SIGSTOP)
        sub = submit(s.url, tok, honest[1]).json()["id"]
        t0 = time.monotonic()
        while httpx.get(f"{s.url}/api/v1/runs/{sub}").json()["status"] != "verifying":
            assert time.monotonic() - t0 < 60
            time.sleep(0.05)
        os.kill(pid, signal.SIGKILL)
        v = wait_verdict(s.url, sub)
        assert v["status"] == "accepted", v  # verified again by a fresh worker
        assert pid not in _workers(s)
        log = s.log.read_text()
        assert "killed by SIGKILL" in log and "memory budget" not in log, log[-2000:]
    finally:
        s.stop()


def test_a_locked_database_answers_reads_and_a_typed_503_for_writes(tmp_path, honest):
    db = str(tmp_path / "l.sqlite3")
    tok = add_token(db, "ada")
    s = Server(db, "--workers", "0").start()
    try:
        with contextlib.closing(sqlite3.connect(db, isolation_level=None)) as other:
            other.execute("BEGIN IMMEDIATE")
            other.execute("UPDATE tokens SET name = name")
            for path in ("/api/v1/health", "/api/v1/boards/opener", "/api/v1/stages", "/"):
                assert httpx.get(s.url + path, timeout=30).status_code == 200, path
            r = submit(s.url, tok, honest[0])
            assert r.status_code == 503, r.text
            assert r.json()["error"]["code"] == "busy" and int(r.headers["retry-after"]) > 0
            other.execute("ROLLBACK")
        assert submit(s.url, tok, honest[0]).status_code == 202
        assert httpx.get(s.url + "/api/v1/health").json()["queued"] == 1
    finally:
        s.stop()
