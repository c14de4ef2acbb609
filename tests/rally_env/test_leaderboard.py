"""The local leaderboard: only verified, finished, new runs get in; inserts are atomic."""

from __future__ import annotations

import json
import sqlite3

import pytest

from rally_env.leaderboard import Leaderboard, LeaderboardError, format_table
from tests.rally_env.test_replay_support import record_run, run_cli, run_py, write_doc


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """Two finished opener runs (different speeds) and one unfinished, saved as files."""
    d = tmp_path_factory.mktemp("runs")
    fast, _ = record_run(seed=3, vmax=16.0)
    slow, _ = record_run(seed=3, vmax=12.0)
    part, _ = record_run(seed=3, max_steps=50)
    assert fast.finished and slow.finished and not part.finished
    assert fast.finish_time_s < slow.finish_time_s
    fast.meta["player"] = "ada"
    return {
        "fast": fast.save(d / "fast.rrp.json.gz"),
        "slow": slow.save(d / "slow.rrp.json.gz"),
        "part": part.save(d / "part.rrp.json.gz"),
        "fast_replay": fast,
    }


def _dump(db) -> list[tuple]:
    with sqlite3.connect(db) as c:
        return (
            c.execute("SELECT * FROM runs ORDER BY id").fetchall()
            + c.execute("SELECT * FROM splits ORDER BY run, idx").fetchall()
        )


def test_add_and_show_ranked(runs, tmp_path):
    db = tmp_path / "lb.sqlite3"
    with Leaderboard(db) as lb:
        e_slow, rep = lb.add(runs["slow"], player="bob")
        assert rep.accepted and e_slow.rank == 1
        e_fast, _ = lb.add(runs["fast"])
        assert e_fast.rank == 1 and e_fast.player == "ada" and e_fast.standard
        best = lb.best("opener")
        assert [e.player for e in best] == ["ada", "bob"]
        assert [e.rank for e in best] == [1, 2]
        assert best[0].finish_time_s == runs["fast_replay"].finish_time_s
        assert best[0].checkpoint_times_s == tuple(runs["fast_replay"].checkpoint_times_s)
        assert lb.replay_of(best[0].run_id).to_dict() == runs["fast_replay"].to_dict()
        assert "1:2" in format_table(best) or ":" in format_table(best)
        assert lb.best("forest") == []
    r = run_cli("leaderboard", "show", "--stage", "opener", "--db", str(db))
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert "standard rules" in lines[0]
    assert "ada" in lines[2] and "bob" in lines[3]
    r = run_cli("leaderboard", "show", "--stage", "opener", "--db", str(db), "--json")
    assert [e["player"] for e in json.loads(r.stdout)] == ["ada", "bob"]


def test_duplicate_unfinished_and_malformed_are_refused(runs, tmp_path):
    db = tmp_path / "lb.sqlite3"
    with Leaderboard(db) as lb:
        lb.add(runs["fast"])
        with pytest.raises(LeaderboardError) as ei:
            lb.add(runs["fast"], player="someone else")
        assert ei.value.reason == "duplicate"
        with pytest.raises(LeaderboardError) as ei:
            lb.add(runs["part"])
        assert ei.value.reason == "unfinished"
        bad = tmp_path / "bad.rrp.json"
        bad.write_text("{not json")
        with pytest.raises(LeaderboardError) as ei:
            lb.add(bad)
        assert ei.value.reason == "bad_replay" and "malformed JSON" in str(ei.value)
        assert lb.count() == 1


def test_forged_time_is_refused_and_nothing_is_written(runs, tmp_path):
    db = tmp_path / "lb.sqlite3"
    doc = runs["fast_replay"].to_dict()
    doc["result"]["finish_time_s"] = 60.0
    forged = write_doc(tmp_path / "forged.rrp.json.gz", doc)
    with Leaderboard(db) as lb:
        with pytest.raises(LeaderboardError) as ei:
            lb.add(forged)
        assert ei.value.reason == "rejected" and ei.value.report.reason == "finish_time"
        assert lb.count() == 0
    r = run_cli("leaderboard", "add", str(forged), "--db", str(db))
    assert r.returncode == 1 and "REFUSED" in r.stdout and "Traceback" not in r.stderr
    assert _dump(db) == []


def test_exception_midway_through_an_insert_leaves_the_database_unchanged(runs, tmp_path):
    db = tmp_path / "lb.sqlite3"
    with Leaderboard(db) as lb:
        lb.add(runs["slow"])
    before = _dump(db)
    lb = Leaderboard(db)

    def boom():
        raise KeyboardInterrupt

    lb._midway = boom
    with pytest.raises(KeyboardInterrupt):
        lb.add(runs["fast"])
    lb._midway = None
    assert lb.count() == 1
    lb.close()
    assert _dump(db) == before
    with Leaderboard(db) as lb:  # and the run can still be added afterwards
        lb.add(runs["fast"])
        assert lb.count() == 2


def test_process_killed_midway_through_an_insert_keeps_the_content(runs, tmp_path):
    db = tmp_path / "lb.sqlite3"
    with Leaderboard(db) as lb:
        lb.add(runs["slow"])
    before = _dump(db)
    code = (
        "import os, sys\n"
        "from rally_env.leaderboard import Leaderboard\n"
        "lb = Leaderboard(sys.argv[1])\n"
        "lb._midway = lambda: os._exit(3)  # die with the transaction open\n"
        "lb.add(sys.argv[2])\n"
    )
    r = run_py(code, str(db), str(runs["fast"]))
    assert r.returncode == 3, r.stderr
    assert _dump(db) == before
    with sqlite3.connect(db) as c:
        assert c.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    with Leaderboard(db) as lb:
        assert [e.finish_time_s for e in lb.best("opener")] == [
            float(before[0][8]),
        ]


def test_other_rules_rank_separately(tmp_path):
    rp, _ = record_run(seed=3, vmax=16.0, termination={"off_road_max_s": 5.0})
    assert rp.finished
    with Leaderboard(tmp_path / "lb.sqlite3") as lb:
        e, _ = lb.add(rp)
        assert not e.standard and e.rank == 1
        assert lb.best("opener", rules="standard") == []
        assert len(lb.best("opener")) == 1


def test_not_a_database(tmp_path):
    p = tmp_path / "x.sqlite3"
    p.write_bytes(b"this is not sqlite" * 100)
    with pytest.raises(LeaderboardError, match="not a usable leaderboard"):
        Leaderboard(p)
