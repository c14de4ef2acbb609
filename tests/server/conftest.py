"""Fixtures of the server tests (all marked ``server``: ``pytest -m server``)."""

from __future__ import annotations

import pytest

from tests.rally_env.hostile_replays import HONEST


@pytest.fixture(scope="session")
def honest() -> list[bytes]:
    """Two honest finished opener runs (the shipped fixture and a slower recorded one)."""
    from tests.rally_env.test_replay_support import record_run

    slow, _ = record_run(seed=3, vmax=12.0)
    assert slow.finished
    return [HONEST.read_bytes(), slow.to_bytes(compress=True)]
