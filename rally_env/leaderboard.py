"""The local leaderboard of verified times; it lives in :mod:`rally_env.replay.leaderboard`
(this name stays for code that imports it from here)."""

from __future__ import annotations

from rally_env.replay.leaderboard import (
    ENV_DB,
    SCHEMA_VERSION,
    Entry,
    Leaderboard,
    LeaderboardError,
    current_stage_digest,
    default_db_path,
    format_table,
    rules_of,
)

__all__ = [
    "ENV_DB",
    "SCHEMA_VERSION",
    "Entry",
    "Leaderboard",
    "LeaderboardError",
    "current_stage_digest",
    "default_db_path",
    "format_table",
    "rules_of",
]
