"""Fixtures of the server tests (all marked ``server``: ``pytest -m server``)."""

from __future__ import annotations

import pytest

from tests.rally_env.hostile_replays import HONEST


@pytest.fixture(scope="session")
def server_extra() -> None:
    """Skip a test when the server extra is not installed. The modules that need it use it
    (``pytest.mark.usefixtures``) instead of skipping at import, so the default run, which
    deselects ``server`` tests, collects them and reports no skip for an extra it never
    installs. Session-scoped, so it runs before the modules' server fixtures."""
    pytest.importorskip("fastapi", reason="the server extra is not installed")
    pytest.importorskip("httpx", reason="the server extra is not installed")


@pytest.fixture(scope="session")
def browser_extra(server_extra) -> None:
    """The server extra with Playwright (the browser tests)."""
    pytest.importorskip("playwright", reason="the server extra is not installed")


@pytest.fixture(scope="session")
def honest() -> list[bytes]:
    """Two honest finished opener runs (the shipped fixture and a slower recorded one)."""
    from tests.rally_env.test_replay_support import record_run

    slow, _ = record_run(seed=3, vmax=12.0)
    assert slow.finished
    return [HONEST.read_bytes(), slow.to_bytes(compress=True)]
