"""The verifier against crafted replays: it cannot be fooled, crashed or stalled.

The crafted files are in ``hostile_replays.py`` (``benchmarks/hostile.py`` measures their cost).
Each of them failed before the verifier checked budgets and derived a run's filing from the
re-simulation: a renamed stage was accepted and ranked, a ``render_mode`` opened a window,
``gen-`` strings were read as paths, and cheap files cost gigabytes or minutes.
"""

from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys

import pytest

from rally_env.replay import (
    Budgets,
    RecordReplay,
    ReplayBudgetError,
    ReplayError,
    load_replay,
    verify,
    verify_bytes,
)
from tests.rally_env.hostile_replays import CRAFTED, HONEST, honest_doc
from tests.rally_env.test_replay_support import ROOT


@pytest.fixture(scope="module")
def doc():
    return honest_doc()


@pytest.mark.parametrize("name", sorted(CRAFTED))
def test_crafted_replay_verdict(name, doc):
    make, status, word = CRAFTED[name]
    rep = verify_bytes(make(doc))
    assert rep.status == status, f"{rep.reason}: {rep.message}"
    assert word in rep.reason or word in rep.message, rep.message
    assert rep.exit_code == {"accepted": 0, "rejected": 1, "unusable": 2}[status]
    if status == "accepted":
        assert (rep.stage, rep.finish_time_s) == ("opener", doc["result"]["finish_time_s"])


def test_a_renamed_stage_never_reaches_the_leaderboard(doc, tmp_path):
    from rally_env.replay.leaderboard import Leaderboard, LeaderboardError

    p = tmp_path / "renamed.rrp.json.gz"
    p.write_bytes(CRAFTED["stage_renamed"][0](doc))
    with Leaderboard(tmp_path / "lb.sqlite3") as lb:
        with pytest.raises(LeaderboardError) as ei:
            lb.add(p)
        assert ei.value.reason == "rejected" and lb.count() == 0
        entry, rep = lb.add(HONEST)
        assert (entry.stage, entry.stage_digest) == (rep.stage, rep.stage_digest)
        assert lb.best("sweepers") == [] and len(lb.best("opener")) == 1


def test_the_filing_comes_from_the_re_simulation(doc):
    rep = verify_bytes(CRAFTED["honest"][0](doc))
    import tracks

    assert rep.stage_digest == tracks.load_stage("opener").digest()
    assert rep.standard and rep.control_hz == 20 and rep.env_id == "Rally-v0"
    assert rep.checkpoint_times_s == doc["result"]["checkpoint_times_s"]


@pytest.mark.parametrize("kind", ["fifo", "dev_zero", "directory"])
def test_only_regular_files_are_read(kind, tmp_path, capsys):
    from rally_env.cli import main

    if kind == "fifo":
        p = tmp_path / "run.rrp.json.gz"
        os.mkfifo(p)
    elif kind == "dev_zero":
        p = "/dev/zero"
    else:
        p = tmp_path
    with pytest.raises(ReplayError, match="not a regular file"):
        load_replay(p)
    assert main(["verify", str(p)]) == 2
    assert "not a regular file" in capsys.readouterr().err


def test_a_stage_name_never_opens_a_file_of_that_name(tmp_path):
    """A FIFO named like the library stage (and a gen-x/ directory) in the working directory:
    the verdict does not depend on the cwd, nothing blocks."""
    os.mkfifo(tmp_path / "opener")
    (tmp_path / "gen-x").mkdir()
    (tmp_path / "stage.toml").write_text("not a stage")
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    r = subprocess.run(
        [sys.executable, "-m", "rally_env", "verify", str(HONEST)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert r.returncode == 0, r.stdout + r.stderr
    assert "ACCEPTED" in r.stdout


def test_render_mode_never_reaches_the_env(doc):
    rep = verify_bytes(CRAFTED["render_human"][0](doc))
    assert rep.status == "unusable" and "render_mode" in rep.message


def test_budgets_are_typed_errors_and_configurable(doc, tmp_path):
    p = tmp_path / "long.rrp.json.gz"
    p.write_bytes(CRAFTED["long_zero_run"][0](doc))
    with pytest.raises(ReplayBudgetError, match="simulated time"):
        load_replay(p)
    with pytest.raises(ReplayBudgetError, match="grid nodes"):
        verify(HONEST, Budgets(max_terrain_nodes=1000))
    assert verify_bytes(HONEST.read_bytes(), Budgets(max_sim_s=10.0)).reason == "over_budget"
    with pytest.raises(ValueError, match="max_sim_s"):
        Budgets(max_sim_s=0)


@pytest.mark.parametrize(
    "data",
    [b"", b"\x1f\x8b", b"\x1f\x8b\x08\x00garbage", b"\xff\xfe", b"[]", b"{}", b"null", b"1e400"],
)
def test_verify_bytes_never_raises(data):
    rep = verify_bytes(data)
    assert rep.status == "unusable" and rep.exit_code == 2 and rep.message


def test_a_truncated_upload_is_unusable(doc):
    data = gzip.compress(json.dumps(doc).encode())
    for cut in (10, len(data) // 2, len(data) - 3):
        assert verify_bytes(data[:cut]).status == "unusable"


def test_recording_refuses_hashes_sparser_than_a_verifier_accepts():
    from rally_env import RallyEnv

    with pytest.raises(ValueError, match="at least every"):
        RecordReplay(RallyEnv(stage="skidpad"), hash_every=400)
