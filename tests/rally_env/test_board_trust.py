"""A board's trust: a run is one drive (stage, dynamics rules, initial state, actions), so a
copy with a setting changed that a finished run never pays is a duplicate whoever sends it;
a board of a generated stage's name holds only runs on the stage that name makes; a busy
SQLite database lets reads through and refuses writes with a typed error; a run whose
verifier died goes back to the queue (standard library only: the HTTP side runs in
``pytest -m server``)."""

from __future__ import annotations

import contextlib
import sqlite3

import pytest

import tracks
from rally_env.config import MAX_POOL_PER_STEP, RallyConfig
from rally_env.errors import ConfigError
from rally_env.replay import verify_bytes
from rally_env.replay.format import replay_from_bytes
from rally_env.replay.leaderboard import (
    NO_STAGE,
    Leaderboard,
    LeaderboardError,
    current_stage_digest,
)
from rally_env.server.store import MAX_ATTEMPTS, SQLiteStore, StoreBusy
from rally_env.stages import drawn_stage_name, parse_drawn_name
from tests.rally_env.hostile_replays import (
    HONEST,
    honest_doc,
    pool_bomb,
    spoofed_gen_stage,
    stolen,
)
from tests.rally_env.test_replay_support import record_run


@pytest.fixture(scope="module")
def theft():
    data = HONEST.read_bytes()
    thief = stolen(honest_doc())
    return data, thief, verify_bytes(data), verify_bytes(thief)


def test_a_copy_with_a_reward_weight_changed_is_the_same_drive(theft):
    _, _, honest, copy = theft
    assert honest.accepted and copy.accepted  # a valid replay: only a board can refuse it
    assert copy.run_id != honest.run_id  # the run id covers the whole config
    assert copy.drive_id == honest.drive_id and honest.drive_id


def test_the_local_board_refuses_the_copy_as_a_duplicate(tmp_path, theft):
    data, thief, _, _ = theft
    with Leaderboard(tmp_path / "b.sqlite3") as lb:
        lb.add(replay_from_bytes(data), player="ada")
        with pytest.raises(LeaderboardError, match="same drive") as e:
            lb.add(replay_from_bytes(thief), player="thief")
        assert e.value.reason == "duplicate"
        assert [x.player for x in lb.best("opener")] == ["ada"]


def test_the_server_store_keeps_the_first_upload_of_a_drive(tmp_path, theft):
    data, thief, honest, copy = theft
    st = SQLiteStore(tmp_path / "s.sqlite3")
    ada, eve = st.add_token("ada"), st.add_token("eve")
    first = st.submit(data, st.token_id(ada)[0], "a", "ada", 10)
    second = st.submit(thief, st.token_id(eve)[0], "b", "eve", 10)
    assert st.claim(60)[0] == first
    blob = replay_from_bytes(data).to_bytes(compress=True)
    assert st.finish(first, honest, blob) == "accepted"
    assert st.claim(60)[0] == second
    assert st.finish(second, copy, replay_from_bytes(thief).to_bytes()) == "rejected"
    d = st.submission(second)
    assert d["reason"] == "duplicate" and honest.run_id in d["message"]
    board = st.best("opener", None, None, 10)
    assert [e.player for e in board] == ["ada"]
    assert board[0].added_utc == st.submission(first)["submitted_utc"]
    st.close()


def test_a_board_of_a_generated_name_holds_only_that_stage(tmp_path):
    spoof = spoofed_gen_stage("gen-5")
    rep = verify_bytes(spoof)
    assert rep.accepted and rep.stage == "gen-5"  # a valid run, on a stage of its own
    assert current_stage_digest("gen-5") == tracks.generate(5).digest() != rep.stage_digest
    with Leaderboard(tmp_path / "b.sqlite3") as lb:
        with pytest.raises(LeaderboardError, match="not the stage that name stands for") as e:
            lb.add(replay_from_bytes(spoof), player="spoofer")
        assert e.value.reason == "stage_name"
        assert lb.best("gen-5", digest=None) == [] and lb.count() == 0
    # a board reads only the stage its name makes, whatever a database holds
    with sqlite3.connect(tmp_path / "b.sqlite3") as c:
        c.execute(
            "INSERT INTO runs (run_id, stage_name, stage_digest, rules, standard, control_hz, "
            "vehicle_digest, finish_time_s, steps, player, added_utc, replay) "
            "VALUES ('x', 'gen-5', ?, ?, 1, 20, '', 1.0, 20, 'spoofer', '', x'00')",
            (rep.stage_digest, rep.rules),
        )
    with Leaderboard(tmp_path / "b.sqlite3") as lb:
        assert lb.best("gen-5") == []
        assert [e.player for e in lb.best("gen-5", digest=None)] == ["spoofer"]


def test_drawn_stage_names_are_exact_and_resolve():
    """A randomly drawn stage's own name rounds its difficulty and leaves out its laps; the
    name its runs are filed under is exact and makes the stage again."""
    run, _ = record_run(
        seed=4,
        max_steps=30,
        stage="random",
        random_stage={"length_m": 600.0, "loops": 1.0, "laps": 3, "difficulty": (0.1, 0.2)},
    )
    rep = verify_bytes(run.to_bytes())
    assert rep.accepted and rep.stage != run.stage["name"], (rep.stage, run.stage)
    seed, length, diff, laps = parse_drawn_name(rep.stage)
    assert (length, laps) == (600.0, 3) and 0.1 <= diff <= 0.2
    assert current_stage_digest(rep.stage) == rep.stage_digest
    assert drawn_stage_name(seed, 2000.0, 0.5, 0) == f"gen-{seed}"
    # names that stand for no single stage are no boards (not every version of them)
    for name in (run.stage["name"], "gen-5-2000m-d0.5", "gen-5-0400m-d0.5", "gen-5-400m-d0.5-loop"):
        assert current_stage_digest(name) == NO_STAGE, name
    assert current_stage_digest("my-own-stage") is None


def test_a_pool_redrawn_too_often_is_refused_before_anything_is_built():
    with pytest.raises(ConfigError, match=r"random_stage\.pool") as e:
        RallyConfig.build(stage="random", random_stage={"pool": 65536, "pool_steps": 1})
    assert "pool_steps at least 4096" in str(e.value)
    RallyConfig.build(stage="random", random_stage={"pool": 16, "pool_steps": 1})
    RallyConfig.build(stage="random", random_stage={"pool": 65536, "pool_steps": 4096})
    with pytest.raises(ConfigError, match=r"random_stage\.pool"):
        RallyConfig.build(
            stage="random", random_stage={"pool": MAX_POOL_PER_STEP + 1, "pool_steps": 1}
        )
    rep = verify_bytes(pool_bomb(honest_doc()))
    assert rep.status == "unusable" and "random_stage.pool" in rep.message


def test_a_busy_sqlite_database_lets_reads_through_and_refuses_writes(tmp_path, theft):
    data, _, honest, _ = theft
    path = tmp_path / "s.sqlite3"
    st = SQLiteStore(path, timeout_s=0.2)
    tok = st.add_token("ada")
    sub = st.submit(data, st.token_id(tok)[0], "a", "ada", 10)
    st.claim(60)
    st.finish(sub, honest, replay_from_bytes(data).to_bytes())
    with contextlib.closing(sqlite3.connect(path, isolation_level=None)) as other:
        other.execute("BEGIN IMMEDIATE")  # another writer holds the database
        other.execute("UPDATE tokens SET name = name")
        assert st.counts()["accepted"] == 1
        assert st.submission(sub)["status"] == "accepted"
        assert [e.player for e in st.best("opener", None, None, 5)] == ["ada"]
        assert st.token_id(tok)[1] == "ada" and st.stage_names() == ["opener"]
        with pytest.raises(StoreBusy, match="busy"):
            st.submit(data, 1, "a", "ada", 10)
        other.execute("ROLLBACK")
    assert st.counts()["queued"] == 0  # the refused write changed nothing
    st.close()


def test_a_run_whose_verifier_died_is_requeued_then_kept(tmp_path):
    data = HONEST.read_bytes()
    st = SQLiteStore(tmp_path / "s.sqlite3")
    tok = st.add_token("ada")
    sub = st.submit(data, st.token_id(tok)[0], "a", "ada", 10)
    for _ in range(MAX_ATTEMPTS - 1):
        assert st.claim(60)[0] == sub
        assert st.requeue(sub, "the verifier process was killed by SIGKILL") == "queued"
        assert st.submission(sub)["status"] == "queued"
    assert st.claim(60)[0] == sub
    assert st.requeue(sub, "the verifier process was killed by SIGKILL") == "rejected"
    d = st.submission(sub)
    assert d["reason"] == "verifier_error" and "SIGKILL" in d["message"]
    with st.tx() as cur:  # the upload is kept for the operator
        cur.execute("SELECT upload FROM submissions WHERE id = ?", (sub,))
        assert bytes(cur.fetchone()[0]) == data
    st.close()
