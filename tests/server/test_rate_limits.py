"""Rate limits that servers sharing one database share: the store's token buckets on SQLite
and on a real PostgreSQL, and two ``rally serve`` processes on one PostgreSQL drawing from one
limit."""

from __future__ import annotations

import pytest

from rally_env.server.store import open_store
from tests.server.support import Postgres, Server, add_token, submit

pytestmark = [pytest.mark.server, pytest.mark.usefixtures("server_extra")]


@pytest.fixture(scope="module")
def pg():
    p = Postgres().start()
    try:
        yield p
    finally:
        p.stop()


@pytest.fixture(params=["sqlite", "postgres"])
def url(request, tmp_path):
    if request.param == "sqlite":
        return str(tmp_path / "limits.sqlite3")
    return request.getfixturevalue("pg").url


def _rows(store, bucket):
    with store.tx() as cur:
        cur.execute(store.q("SELECT key FROM rate_buckets WHERE bucket = ?"), (bucket,))
        return sorted(r[0] for r in cur.fetchall())


def test_a_bucket_allows_its_burst_then_refills_at_its_rate(url):
    a, b = open_store(url), open_store(url)  # two servers' stores on one database
    try:
        bucket = f"t-{id(a)}"
        t = 1000.0
        # 3 per 30 s: the burst of 3 is shared by both stores, the 4th waits 10 s
        assert [s.take_rate(bucket, "k", 3, 30.0, t) for s in (a, b, a)] == [0.0, 0.0, 0.0]
        assert b.take_rate(bucket, "k", 3, 30.0, t) == pytest.approx(10.0)
        assert a.take_rate(bucket, "k", 3, 30.0, t + 4.0) == pytest.approx(6.0)
        assert b.take_rate(bucket, "k", 3, 30.0, t + 10.0) == 0.0  # one event back
        assert a.take_rate(bucket, "k", 3, 30.0, t + 10.0) > 0.0
        # another key has its own bucket; a clock that went back gives nothing back
        assert a.take_rate(bucket, "other", 3, 30.0, t) == 0.0
        assert a.take_rate(bucket, "k", 3, 30.0, t - 100.0) > 0.0
        # buckets idle for a whole period are full, and dropped
        assert _rows(a, bucket) == ["k", "other"]
        assert a.take_rate(bucket, "new", 3, 30.0, t + 100.0) == 0.0
        assert _rows(a, bucket) == ["new"]
    finally:
        a.close()
        b.close()


def test_two_servers_on_one_postgres_share_the_token_and_address_limits(pg, honest):
    token = add_token(pg.url, "shared")
    other = add_token(pg.url, "other")
    args = ("--workers", "0", "--token-rate", "2/600", "--address-rate", "4/600")
    one, two = Server(pg.url, *args).start(), Server(pg.url, *args).start()
    try:
        assert submit(one.url, token, honest[0]).status_code == 202
        assert submit(two.url, token, honest[0]).status_code == 202
        r = submit(one.url, token, honest[0])  # the token's third upload, on either server
        assert r.status_code == 429 and "token" in r.json()["error"]["message"]
        assert int(r.headers["retry-after"]) > 0
        # the address counts every upload that got past it, the refused one included
        assert submit(two.url, other, honest[0]).status_code == 202  # the address's fourth
        r = submit(one.url, other, honest[0])  # and its fifth
        assert r.status_code == 429 and "127.0.0.1" in r.json()["error"]["message"]
    finally:
        one.stop()
        two.stop()
