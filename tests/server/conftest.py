"""Fixtures of the server tests (all marked ``server``: ``pytest -m server``)."""

from __future__ import annotations

import gzip
import json

import pytest

from tests.rally_env.hostile_replays import HONEST


@pytest.fixture(scope="session")
def honest() -> list[bytes]:
    """Two honest finished opener runs (the shipped fixture and a slower recorded one)."""
    from tests.rally_env.test_replay_support import record_run

    slow, _ = record_run(seed=3, vmax=12.0)
    assert slow.finished
    return [HONEST.read_bytes(), slow.to_bytes(compress=True)]


def tampered_action(data: bytes, step: int = 400) -> bytes:
    """The run with one action changed: the re-simulation diverges from its hashes."""
    from rally_env.replay import replay_from_bytes

    r = replay_from_bytes(data)
    r.actions = r.actions.copy()
    r.actions[step, 0] = -r.actions[step, 0] if r.actions[step, 0] else 0.5
    return r.to_bytes(compress=True)


def faster(data: bytes) -> bytes:
    """The run claiming a finish 1 ms faster."""
    doc = json.loads(gzip.decompress(data))
    doc["result"]["finish_time_s"] -= 0.001
    return gzip.compress(json.dumps(doc).encode())
