"""The HTTP API against a real ``rally serve`` on 127.0.0.1, on SQLite and on a real
PostgreSQL: honest runs accepted and ranked, tampered runs rejected with reason and step,
tokens, hostile uploads (typed errors, nothing stored, the server stays up)."""

from __future__ import annotations

import socket
import time

import pytest

from tests.server.support import (
    Postgres,
    Server,
    add_token,
    faster,
    httpx,
    rally,
    submit,
    tampered_action,
    wait_verdict,
)

pytestmark = [pytest.mark.server, pytest.mark.usefixtures("server_extra")]


@pytest.fixture(scope="module", params=["sqlite", "postgres"])
def srv(request, tmp_path_factory):
    pg = None
    if request.param == "postgres":
        pg = Postgres().start()
        db = pg.url
    else:
        db = str(tmp_path_factory.mktemp("srv") / "board.sqlite3")
    s = Server(
        db,
        "--workers",
        "1",
        "--max-upload-mb",
        "0.25",
        "--body-timeout",
        "3",
        "--token-rate",
        "1000/60",
        "--address-rate",
        "1000/60",
    ).start()
    s.token = add_token(db, "ada")
    s.backend = request.param
    try:
        yield s
    finally:
        s.stop()
        if pg is not None:
            pg.stop()


def counts(s) -> dict:
    return httpx.get(s.url + "/api/v1/health", timeout=30).json()


def test_honest_runs_are_accepted_ranked_and_served(srv, honest):
    ids = []
    for data, player in zip(honest, ("ada", "bob"), strict=True):
        r = submit(srv.url, srv.token, data, player)
        assert r.status_code == 202, r.text
        assert r.json()["status"] == "queued"
        assert r.headers["location"] == f"/api/v1/runs/{r.json()['id']}"
        ids.append(r.json()["id"])
    verdicts = [wait_verdict(srv.url, i) for i in ids]
    assert [v["status"] for v in verdicts] == ["accepted", "accepted"], verdicts
    board = httpx.get(srv.url + "/api/v1/boards/opener").json()["entries"]
    assert [e["player"] for e in board] == ["ada", "bob"]
    assert [e["rank"] for e in board] == [1, 2]
    assert board[0]["finish_time_s"] < board[1]["finish_time_s"]
    assert len(board[0]["checkpoint_times_s"]) == 2
    # the board's run id also opens the run
    run = httpx.get(f"{srv.url}/api/v1/runs/{board[0]['run_id']}").json()
    assert run["status"] == "accepted" and run["run"]["stage"] == "opener"
    # the replay file as stored verifies again
    from rally_env.replay import verify_bytes

    blob = httpx.get(f"{srv.url}/api/v1/runs/{ids[0]}/replay").content
    assert verify_bytes(blob).accepted
    # the trace: one sample after the reset and after every step, from the re-simulation
    tr = httpx.get(f"{srv.url}/api/v1/runs/{ids[0]}/trace").json()
    assert len(tr["t"]) == run["run"]["steps"] + 1 == len(tr["x"]) == len(tr["speed"])
    assert tr["finish_time_s"] == pytest.approx(run["run"]["finish_time_s"])
    assert tr["stage"]["name"] == "opener" and len(tr["stage"]["checkpoints"]) == 2
    assert tr["progress"][-1] > 1000
    stages = {s["name"]: s for s in httpx.get(srv.url + "/api/v1/stages").json()}
    assert stages["opener"]["record"]["player"] == "ada"
    assert stages["forest"]["record"] is None
    if srv.backend == "sqlite":  # `rally leaderboard` reads the server's database as it is
        out = rally("leaderboard", "show", "--stage", "opener", "--db", srv.db)
        assert out.returncode == 0, out.stderr
        assert "ada" in out.stdout and "bob" in out.stdout


def test_tampered_runs_are_rejected_with_reason_and_step(srv, honest):
    before = counts(srv)["runs"]
    r1 = submit(srv.url, srv.token, tampered_action(honest[0]))
    r2 = submit(srv.url, srv.token, faster(honest[0]))
    v1, v2 = wait_verdict(srv.url, r1.json()["id"]), wait_verdict(srv.url, r2.json()["id"])
    assert v1["status"] == "rejected" and v1["reason"] == "hash_mismatch", v1
    assert isinstance(v1["step"], int) and 400 < v1["step"] <= 600
    assert v2["status"] == "rejected" and v2["reason"] == "finish_time", v2
    assert counts(srv)["runs"] == before
    # a run already on the board is refused as a duplicate
    r3 = submit(srv.url, srv.token, honest[0])
    v3 = wait_verdict(srv.url, r3.json()["id"])
    assert (v3["status"], v3["reason"]) == ("rejected", "duplicate")
    # only accepted runs have a replay and a trace
    for path in ("replay", "trace"):
        r = httpx.get(f"{srv.url}/api/v1/runs/{r1.json()['id']}/{path}")
        assert r.status_code == 404 and r.json()["error"]["code"] == "not_found"


def test_crafted_files_get_their_verdict_and_the_server_stays_up(srv):
    from tests.rally_env.hostile_replays import CRAFTED, honest_doc

    doc = honest_doc()
    ids = {}
    for name, (build, status, _word) in CRAFTED.items():
        if name == "honest":
            continue
        r = submit(srv.url, srv.token, build(doc))
        assert r.status_code == 202, (name, r.text)
        ids[name] = (r.json()["id"], status)
    for name, (sub_id, status) in ids.items():
        v = wait_verdict(srv.url, sub_id)
        assert v["status"] == "rejected", (name, v)
        want = {"unusable", "rejected"} if status == "unusable" else {"rejected"}
        assert v["verdict"] in want | {None}, (name, v)
        assert v["reason"], (name, v)
    assert srv.alive()


def test_tokens_are_required_and_revocable(srv, honest):
    before = counts(srv)
    r = httpx.post(srv.url + "/api/v1/runs", content=honest[0])
    assert r.status_code == 401 and r.json()["error"]["code"] == "missing_token"
    for auth in ("Bearer nope-not-a-token", "Basic abc", "Bearer " + "x" * 500, "Bearer"):
        r = httpx.post(srv.url + "/api/v1/runs", content=honest[0], headers={"Authorization": auth})
        assert r.status_code == 401 and r.json()["error"]["code"] == "bad_token", auth
    tok = add_token(srv.db, "eve")
    assert rally("serve", "token", "add", "eve", "--db", srv.db).returncode == 2  # name taken
    assert rally("serve", "token", "revoke", "eve", "--db", srv.db).returncode == 0
    r = submit(srv.url, tok, honest[0])
    assert r.status_code == 401 and r.json()["error"]["code"] == "bad_token"
    listing = rally("serve", "token", "list", "--db", srv.db).stdout
    assert "eve" in listing and "revoked" in listing and tok not in listing
    assert counts(srv) == before


def test_hostile_requests_get_typed_errors_and_store_nothing(srv, honest):
    before = counts(srv)
    auth = {"Authorization": f"Bearer {srv.token}"}
    # over the size limit: refused from Content-Length, and while streaming without it
    big = b"\x1f\x8b" + b"0" * 300_000
    r = httpx.post(srv.url + "/api/v1/runs", content=big, headers=auth)
    assert r.status_code == 413 and r.json()["error"]["code"] == "too_large"

    def chunks():
        for _ in range(40):
            yield b"0" * 10_000

    r = httpx.post(srv.url + "/api/v1/runs", content=chunks(), headers=auth)
    assert r.status_code == 413 and r.json()["error"]["code"] == "too_large"
    r = httpx.post(srv.url + "/api/v1/runs", content=b"", headers=auth)
    assert r.status_code == 400 and r.json()["error"]["code"] == "empty_body"
    # a body that trickles in: 408 after the body timeout (3 s here)
    with socket.create_connection(("127.0.0.1", srv.port), timeout=30) as s:
        s.sendall(
            (
                f"POST /api/v1/runs HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {srv.token}\r\n"
                "Content-Length: 100000\r\n\r\n"
            ).encode()
            + b"x" * 100
        )
        t0 = time.monotonic()
        reply = b""
        while b"\r\n\r\n" not in reply and time.monotonic() - t0 < 20:
            part = s.recv(4096)
            if not part:
                break
            reply += part
    assert reply.startswith(b"HTTP/1.1 408"), reply[:200]
    assert b"slow_body" in reply or b"\r\n\r\n" in reply
    # bad player names
    for bad in ("", " ada", "a" * 41, "ada\x1b[31m", "x\u202e"):
        r = httpx.post(
            srv.url + "/api/v1/runs", content=honest[0], headers=auth, params={"player": bad}
        )
        assert r.status_code == 400 and r.json()["error"]["code"] == "bad_player", repr(bad)
    # path tricks in run ids and stage names
    for path in (
        "/api/v1/runs/..%2F..%2Fetc%2Fpasswd",
        "/api/v1/runs/%00",
        "/api/v1/runs/" + "a" * 5000,
        "/api/v1/runs/C487C5ECB7CE2804075F82DE7B674F49",
        "/api/v1/runs/c487c5ecb7ce2804075f82de7b674f4%27",
        "/api/v1/runs/00000000000000000000000000000000/replay",
        "/api/v1/boards/..%2Fsecret",
        "/api/v1/boards/opener?limit=0",
        "/api/v1/boards/opener?limit=abc",
        "/api/v1/boards/opener?rules=%27%20OR%201=1",
        "/api/v1/stages/gen-99999999999/map",
        "/static/..%2F..%2Fstore.py",
        "/static/../app.py",
    ):
        r = httpx.get(srv.url + path)
        assert r.status_code in (400, 404, 422), (path, r.status_code)
        if path.startswith("/api/"):
            assert r.json()["error"]["code"] in (
                "bad_run_id",
                "not_found",
                "bad_stage",
                "bad_request",
            ), (path, r.text)
        assert b"import " not in r.content, path
    after = counts(srv)
    assert after == before
    assert srv.alive()


def test_xss_in_player_names_is_escaped(srv, honest):
    from tests.rally_env.test_replay_support import record_run

    name = "<script>alert(1)</script><img src=x>"
    run, _ = record_run(seed=5, vmax=11.0)
    r = submit(srv.url, srv.token, run.to_bytes(compress=True), name)
    v = wait_verdict(srv.url, r.json()["id"])
    assert v["status"] == "accepted" and v["player"] == name
    for page in ("/", "/stages/opener", f"/runs/{r.json()['id']}"):
        html = httpx.get(srv.url + page).text
        assert "<script>alert" not in html and "<img src=x" not in html, page
    assert "&lt;script&gt;alert" in httpx.get(srv.url + "/stages/opener").text


def test_openapi_schema_lists_the_api(srv):
    paths = httpx.get(srv.url + "/api/v1/openapi.json").json()["paths"]
    for p in (
        "/api/v1/runs",
        "/api/v1/runs/{run_id}",
        "/api/v1/runs/{run_id}/trace",
        "/api/v1/runs/{run_id}/replay",
        "/api/v1/stages",
        "/api/v1/boards/{stage}",
    ):
        assert p in paths, p


def test_full_queue_is_503_with_retry_after(tmp_path, honest):
    db = str(tmp_path / "q.sqlite3")
    tok = add_token(db, "ada")
    s = Server(db, "--workers", "0", "--max-queue", "2").start()
    try:
        codes = [submit(s.url, tok, honest[0]).status_code for _ in range(3)]
        assert codes[:2] == [202, 202]
        r = submit(s.url, tok, honest[0])
        assert r.status_code == 503 and r.json()["error"]["code"] == "queue_full"
        assert int(r.headers["retry-after"]) > 0
        assert httpx.get(s.url + "/api/v1/health").json()["queued"] == 2
    finally:
        s.stop()


def test_rate_limits_per_token_and_per_address(tmp_path, honest):
    db = str(tmp_path / "r.sqlite3")
    a, b = add_token(db, "a"), add_token(db, "b")
    s = Server(db, "--workers", "0", "--token-rate", "2/600", "--address-rate", "4/600").start()
    try:
        assert [submit(s.url, a, honest[0]).status_code for _ in range(2)] == [202, 202]
        r = submit(s.url, a, honest[0])
        assert r.status_code == 429 and r.json()["error"]["code"] == "rate_limited"
        assert int(r.headers["retry-after"]) > 0
        assert submit(s.url, b, honest[0]).status_code == 202  # another token, same address
        r = submit(s.url, b, honest[0])  # the address's 4th upload
        assert r.status_code == 429 and "127.0.0.1" in r.json()["error"]["message"]
        assert httpx.get(s.url + "/api/v1/health").json()["queued"] == 3
    finally:
        s.stop()
