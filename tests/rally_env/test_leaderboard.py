"""The local leaderboard: only verified, finished, new runs get in; inserts are atomic."""

from __future__ import annotations

import json
import sqlite3

import pytest

from rally_env.replay.leaderboard import Leaderboard, LeaderboardError, format_table
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
        "from rally_env.replay.leaderboard import Leaderboard\n"
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


# ------------------------------------------------------------------- hostile databases and names
def test_a_busy_database_is_waited_on_then_refused_with_a_message(runs, tmp_path, capsys):
    from rally_env.cli import main

    db = tmp_path / "lb.sqlite3"
    Leaderboard(db).close()
    holder = sqlite3.connect(db, isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")  # another writer holds the database
    try:
        with Leaderboard(db, timeout_s=0.2) as lb:
            with pytest.raises(LeaderboardError) as ei:
                lb.add(runs["fast"])
            assert ei.value.reason == "database" and "locked" in str(ei.value)
        # the command line reports every file and goes on (each waits, then is refused)
        rc = main(["leaderboard", "add", str(runs["fast"]), str(runs["part"]), "--db", str(db)])
        out = capsys.readouterr().out
        assert rc == 1 and out.count("REFUSED") == 2
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    with Leaderboard(db) as lb:
        lb.add(runs["fast"])  # free again: nothing was lost
        assert lb.count() == 1


def test_a_read_only_database_can_be_shown_not_written(runs, tmp_path):
    db = tmp_path / "lb.sqlite3"
    with Leaderboard(db) as lb:
        lb.add(runs["slow"], player="bob")
    db.chmod(0o444)
    uri = f"file:{db}?mode=ro"
    try:

        class ReadOnly(Leaderboard):  # opened read-only, as a root user cannot be refused
            def _connect(self):
                return sqlite3.connect(uri, uri=True, isolation_level=None)

        ro = ReadOnly(db)
        assert [e.player for e in ro.best("opener")] == ["bob"]
        with pytest.raises(LeaderboardError) as ei:
            ro.add(runs["fast"])
        assert ei.value.reason == "database" and "refused the write" in str(ei.value)
        ro.close()
    finally:
        db.chmod(0o644)


@pytest.mark.parametrize("db", ["/proc/nonexistent/x.db", "/dev/null/x.db", "DIR"])
def test_unusable_database_paths_are_messages(db, runs, tmp_path, capsys):
    from rally_env.cli import main

    if db == "DIR":
        db = str(tmp_path)
    with pytest.raises(LeaderboardError, match="not a usable leaderboard"):
        Leaderboard(db)
    assert main(["leaderboard", "add", str(runs["fast"]), "--db", db]) == 2
    assert main(["leaderboard", "show", "--stage", "opener", "--db", db]) == 2
    err = capsys.readouterr().err
    assert "not a usable leaderboard" in err and "Traceback" not in err


def test_names_are_shown_without_terminal_escapes(runs, tmp_path, capsys):
    from rally_env.cli import main
    from rally_env.replay.leaderboard import printable

    assert printable("\x1b]0;pwned\x07ok") == "\\x1b]0;pwned\\x07ok"
    db = tmp_path / "lb.sqlite3"
    with Leaderboard(db) as lb:
        lb.add(runs["fast"], player="\x1b[2Jeve\u202e")
        table = format_table(lb.best("opener"))
    assert "\x1b" not in table and "\u202e" not in table
    assert "\\x1b[2Jeve\\u202e" in table
    assert main(["leaderboard", "show", "--stage", "opener", "--db", str(db)]) == 0
    assert "\x1b" not in capsys.readouterr().out


@pytest.mark.parametrize("limit", ["0", "-1", "x"])
def test_limits_below_one_are_refused(limit, runs, tmp_path, capsys):
    from rally_env.cli import main

    db = tmp_path / "lb.sqlite3"
    with Leaderboard(db) as lb:
        lb.add(runs["fast"])
        with pytest.raises(ValueError, match="limit"):
            lb.best("opener", limit=0)
    with pytest.raises(SystemExit) as ei:
        main(["leaderboard", "show", "--stage", "opener", "--db", str(db), "--limit", limit])
    assert ei.value.code == 2 and "--limit" in capsys.readouterr().err
