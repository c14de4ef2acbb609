"""A bounded load run on 127.0.0.1 (the core of benchmarks/server_load.py, small): 16
submissions from 4 concurrent clients on SQLite, honest and tampered mixed. Every honest run
is accepted, every tampered one rejected, no row lost or duplicated, the database passes its
integrity check, and the run stops by itself (``max_seconds``)."""

from __future__ import annotations

import pytest

from tests.server.support import load_mix, run_load

pytestmark = [pytest.mark.server, pytest.mark.usefixtures("server_extra")]


def test_load_sqlite_honest_and_tampered_mixed(tmp_path):
    items, honest_ids = load_mix(n_honest=8, n_tampered=8)
    assert len(items) == 16 and len(honest_ids) == 8
    assert sorted(kind for kind, _ in items) == ["honest"] * 8 + ["tampered"] * 8
    res = run_load(str(tmp_path / "board.sqlite3"), items, honest_ids, clients=4, max_seconds=600)
    assert not res.errors, res.errors
    assert len(res.results) == 16
    assert res.failed() == [], (res.checks, res.results)
    reasons = {why for kind, status, why, _ in res.results if kind == "tampered"}
    assert "" not in reasons and None not in reasons, reasons  # each rejection names its reason


def test_load_under_attack_with_a_worker_killed(tmp_path):
    """Attacks among the uploads (a theft, a spoofed generated stage, the pool bomb) are all
    rejected, and a worker killed while it verifies loses no run: every honest run is
    accepted once."""
    items, honest_ids = load_mix(n_honest=6, n_tampered=3, n_hostile=3)
    kinds = sorted(kind.split(":")[0] for kind, _ in items)
    want = ["bomb", *["honest"] * 6, "spoof", *["tampered"] * 3, "theft"]
    assert kinds == want
    res = run_load(
        str(tmp_path / "board.sqlite3"),
        items,
        honest_ids,
        clients=4,
        max_seconds=600,
        kill_worker_after=3,
    )
    assert not res.errors, res.errors
    assert res.failed() == [], (res.checks, res.results)
    reasons = {kind: why for kind, status, why, _ in res.results if kind != "honest"}
    assert (reasons["theft"], reasons["spoof"], reasons["bomb"]) == (
        "duplicate",
        "stage_name",
        "bad_replay",
    )
