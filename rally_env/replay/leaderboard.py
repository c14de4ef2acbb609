"""A local leaderboard of verified stage times (SQLite, standard library only).

A run gets in only through :meth:`Leaderboard.add`, which re-simulates the replay
(:func:`rally_env.replay.verify`) and refuses unfinished, unverifiable and duplicate runs.
Every insert is one transaction (``BEGIN IMMEDIATE`` ... ``COMMIT``): a crash or an exception
midway leaves the database exactly as it was.

Runs are ranked per stage *version* (the stage's content digest) and per *rules* (everything
that shapes the physics and the episode end: vehicle, control rate, termination settings,
randomization, action mode; reward weights do not count). The default rules are
``standard``.

    from rally_env.replay.leaderboard import Leaderboard
    lb = Leaderboard("board.sqlite3")
    lb.add("opener-00089.468s-....rrp.json.gz", player="ada")
    for e in lb.best("opener"):
        print(e.rank, e.finish_time_s, e.player)
"""

from __future__ import annotations

import hashlib
import json
import os
import sqlite3
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from rally_env.errors import RallyEnvError
from rally_env.replay.errors import ReplayError
from rally_env.replay.format import Replay, load_replay, replay_from_bytes
from rally_env.replay.verify import VerifyReport, verify

SCHEMA_VERSION = 1
ENV_DB = "RALLY_LEADERBOARD"

_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS runs (
    id INTEGER PRIMARY KEY,
    run_id TEXT NOT NULL UNIQUE,
    stage_name TEXT NOT NULL,
    stage_digest TEXT NOT NULL,
    rules TEXT NOT NULL,
    standard INTEGER NOT NULL,
    control_hz INTEGER NOT NULL,
    vehicle_digest TEXT NOT NULL,
    finish_time_s REAL NOT NULL,
    steps INTEGER NOT NULL,
    player TEXT NOT NULL,
    added_utc TEXT NOT NULL,
    replay BLOB NOT NULL
);
CREATE INDEX IF NOT EXISTS runs_stage ON runs (stage_name, stage_digest, rules, finish_time_s);
CREATE TABLE IF NOT EXISTS splits (
    run INTEGER NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
    idx INTEGER NOT NULL,
    time_s REAL,
    PRIMARY KEY (run, idx)
);
"""


class LeaderboardError(RallyEnvError):
    """A run was refused (unverifiable, unfinished, duplicate) or the database is unusable.

    Attributes:
        reason: ``bad_replay``, ``unfinished``, ``duplicate``, ``rejected`` or ``database``.
        report: the :class:`~rally_env.replay.VerifyReport` when verification failed.
    """

    def __init__(self, message: str, reason: str, report: VerifyReport | None = None):
        super().__init__(message)
        self.reason = reason
        self.report = report


@dataclass(frozen=True)
class Entry:
    """One leaderboard row."""

    rank: int
    finish_time_s: float
    player: str
    stage: str
    stage_digest: str
    rules: str
    standard: bool
    control_hz: int
    steps: int
    added_utc: str
    run_id: str
    checkpoint_times_s: tuple[float | None, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["checkpoint_times_s"] = list(self.checkpoint_times_s)
        return d


def default_db_path() -> Path:
    """``$RALLY_LEADERBOARD``, else ``$XDG_DATA_HOME/rally-env/leaderboard.sqlite3``."""
    env = os.environ.get(ENV_DB)
    if env:
        return Path(env)
    base = os.environ.get("XDG_DATA_HOME") or os.path.join(os.path.expanduser("~"), ".local/share")
    return Path(base) / "rally-env" / "leaderboard.sqlite3"


_RULE_KEYS = ("vehicle", "control_hz", "termination", "randomize", "random_stage")


def rules_of(replay: Replay) -> tuple[str, bool]:
    """(rules digest, is standard) of a replay: everything but the stage and reward weights."""
    kw = replay.env_kwargs
    rules = {k: kw.get(k) for k in _RULE_KEYS}
    rules["discrete_actions"] = bool(kw.get("discrete_actions", False))
    rules["vehicle_digest"] = replay.vehicle_digest
    text = json.dumps(rules, sort_keys=True, separators=(",", ":"))
    digest = hashlib.blake2b(text.encode(), digest_size=8).hexdigest()
    return digest, digest == _standard_rules()


_STANDARD: list[str] = []


def _standard_rules() -> str:
    if not _STANDARD:
        from rally_env.config import RallyConfig, config_to_kwargs

        cfg = RallyConfig()
        kw = config_to_kwargs(cfg)
        rules = {k: kw.get(k) for k in _RULE_KEYS}
        rules["discrete_actions"] = False
        rules["vehicle_digest"] = cfg.vehicle.digest()
        text = json.dumps(rules, sort_keys=True, separators=(",", ":"))
        _STANDARD.append(hashlib.blake2b(text.encode(), digest_size=8).hexdigest())
    return _STANDARD[0]


def current_stage_digest(name: str) -> str | None:
    """Digest of the library (or ``gen-<seed>``) stage ``name`` in this installation."""
    import tracks

    try:
        if name in tracks.list_stages() or name.startswith("gen-"):
            return tracks.load_stage(name).digest()
    except Exception:
        return None
    return None


class Leaderboard:
    """Verified best times in one SQLite file.

    Args:
        path: the database file (created if missing); default :func:`default_db_path`.
    """

    #: Test hook: called inside the insert transaction, between the run row and its splits.
    _midway: Callable[[], Any] | None = None

    def __init__(self, path: str | os.PathLike[str] | None = None):
        self.path = Path(path) if path is not None else default_db_path()
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self.conn = sqlite3.connect(self.path, isolation_level=None, timeout=10.0)
            self.conn.execute("PRAGMA foreign_keys = ON")
            self._init()
        except sqlite3.Error as e:
            raise LeaderboardError(
                f"{self.path}: not a usable leaderboard ({e})", "database"
            ) from None

    def _init(self) -> None:
        c = self.conn
        c.execute("BEGIN IMMEDIATE")
        try:
            for stmt in _SCHEMA.split(";"):
                if stmt.strip():
                    c.execute(stmt)
            row = c.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
            if row is None:
                c.execute(
                    "INSERT INTO meta (key, value) VALUES ('schema_version', ?)",
                    (str(SCHEMA_VERSION),),
                )
            elif row[0] != str(SCHEMA_VERSION):
                raise LeaderboardError(
                    f"{self.path}: leaderboard schema v{row[0]}, this rally-env uses "
                    f"v{SCHEMA_VERSION}",
                    "database",
                )
            c.execute("COMMIT")
        except BaseException:
            c.execute("ROLLBACK")
            raise

    def close(self) -> None:
        self.conn.close()

    def __enter__(self) -> Leaderboard:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    # -------------------------------------------------------------------------- add
    def add(
        self, replay: Replay | str | os.PathLike[str], player: str | None = None
    ) -> tuple[Entry, VerifyReport]:
        """Verify a run and store it.

        Returns:
            the stored entry (with its rank) and the verification report.

        Raises:
            LeaderboardError: the file is unusable (``bad_replay``), the run did not finish
                (``unfinished``), is already stored (``duplicate``) or failed verification
                (``rejected``); nothing is written then.
        """
        if not isinstance(replay, Replay):
            try:
                replay = load_replay(replay)
            except ReplayError as e:
                raise LeaderboardError(str(e), "bad_replay") from None
        if not replay.finished:
            raise LeaderboardError(
                f"the run did not finish (end reason {replay.end_reason or 'none'!r}); only "
                "finished runs go on the leaderboard",
                "unfinished",
            )
        run_id = replay.run_id()
        if self._has(run_id):
            raise LeaderboardError(f"run {run_id} is already on the leaderboard", "duplicate")
        try:
            report = verify(replay)
        except ReplayError as e:
            raise LeaderboardError(str(e), "bad_replay") from None
        if not report.accepted:
            where = f" at step {report.step}" if report.step is not None else ""
            raise LeaderboardError(
                f"verification failed{where}: {report.message}", "rejected", report
            )
        if player is None:
            player = str(replay.meta.get("player") or "")
        rules, standard = rules_of(replay)
        blob = replay.to_bytes(compress=True)
        added = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        c = self.conn
        c.execute("BEGIN IMMEDIATE")
        try:
            try:
                cur = c.execute(
                    "INSERT INTO runs (run_id, stage_name, stage_digest, rules, standard, "
                    "control_hz, vehicle_digest, finish_time_s, steps, player, added_utc, "
                    "replay) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                    (
                        run_id,
                        replay.stage["name"],
                        replay.stage["digest"],
                        rules,
                        int(standard),
                        replay.control_hz,
                        replay.vehicle_digest,
                        float(report.finish_time_s),
                        replay.steps,
                        player,
                        added,
                        blob,
                    ),
                )
            except sqlite3.IntegrityError:
                raise LeaderboardError(
                    f"run {run_id} is already on the leaderboard", "duplicate"
                ) from None
            rowid = cur.lastrowid
            if self._midway is not None:
                self._midway()
            c.executemany(
                "INSERT INTO splits (run, idx, time_s) VALUES (?, ?, ?)",
                [(rowid, i, t) for i, t in enumerate(replay.checkpoint_times_s)],
            )
            c.execute("COMMIT")
        except BaseException:
            c.execute("ROLLBACK")
            raise
        entry = self._entry_for(run_id)
        return entry, report

    def _has(self, run_id: str) -> bool:
        return (
            self.conn.execute("SELECT 1 FROM runs WHERE run_id = ?", (run_id,)).fetchone()
            is not None
        )

    def _splits(self, rowid: int) -> tuple[float | None, ...]:
        rows = self.conn.execute(
            "SELECT time_s FROM splits WHERE run = ? ORDER BY idx", (rowid,)
        ).fetchall()
        return tuple(r[0] for r in rows)

    def _entry_for(self, run_id: str) -> Entry:
        row = self.conn.execute(
            "SELECT stage_name, stage_digest, rules FROM runs WHERE run_id = ?", (run_id,)
        ).fetchone()
        for e in self.best(row[0], digest=row[1], rules=row[2], limit=None):
            if e.run_id == run_id:
                return e
        raise LeaderboardError(f"run {run_id} vanished", "database")  # pragma: no cover

    # -------------------------------------------------------------------------- query
    def best(
        self,
        stage: str,
        *,
        digest: str | None = "current",
        rules: str | None = None,
        limit: int | None = 10,
    ) -> list[Entry]:
        """Best verified times on ``stage``, fastest first, ranked within each rules class.

        Args:
            stage: stage name.
            digest: ``"current"`` (the library stage of that name as installed, or every
                version if it is not a library stage), a stage digest, or ``None`` (every
                version).
            rules: only this rules class (``"standard"`` or a rules digest); ``None`` = all.
            limit: at most this many entries per (stage version, rules) class.
        """
        if digest == "current":
            digest = current_stage_digest(stage)
        q = (
            "SELECT id, finish_time_s, player, stage_name, stage_digest, rules, standard, "
            "control_hz, steps, added_utc, run_id FROM runs WHERE stage_name = ?"
        )
        args: list[Any] = [stage]
        if digest is not None:
            q += " AND stage_digest = ?"
            args.append(digest)
        if rules == "standard":
            q += " AND standard = 1"
        elif rules is not None:
            q += " AND rules = ?"
            args.append(rules)
        q += " ORDER BY standard DESC, stage_digest, rules, finish_time_s, id"
        out: list[Entry] = []
        rank: dict[tuple[str, str], int] = {}
        for row in self.conn.execute(q, args).fetchall():
            key = (row[4], row[5])
            r = rank.get(key, 0) + 1
            rank[key] = r
            if limit is not None and r > limit:
                continue
            out.append(
                Entry(
                    rank=r,
                    finish_time_s=float(row[1]),
                    player=row[2],
                    stage=row[3],
                    stage_digest=row[4],
                    rules=row[5],
                    standard=bool(row[6]),
                    control_hz=int(row[7]),
                    steps=int(row[8]),
                    added_utc=row[9],
                    run_id=row[10],
                    checkpoint_times_s=self._splits(int(row[0])),
                )
            )
        return out

    def count(self) -> int:
        return int(self.conn.execute("SELECT COUNT(*) FROM runs").fetchone()[0])

    def replay_of(self, run_id: str) -> Replay:
        """The stored replay of a run."""
        row = self.conn.execute("SELECT replay FROM runs WHERE run_id = ?", (run_id,)).fetchone()
        if row is None:
            raise LeaderboardError(f"no run {run_id}", "database")
        return replay_from_bytes(bytes(row[0]), f"leaderboard run {run_id}")


def format_table(entries: list[Entry]) -> str:
    """Plain-text tables, one per (stage version, rules) class."""
    if not entries:
        return "no verified runs"
    lines: list[str] = []
    key = None
    for e in entries:
        k = (e.stage_digest, e.rules)
        if k != key:
            key = k
            if lines:
                lines.append("")
            rules = "standard rules" if e.standard else f"rules {e.rules}"
            lines.append(f"{e.stage} (stage {e.stage_digest[:12]}), {rules}, {e.control_hz} Hz")
            lines.append(f"{'#':>3}  {'time':>10}  {'player':<16}  {'added (UTC)':<20}  run")
        t = e.finish_time_s
        mins = int(t // 60)
        ts = f"{mins}:{t - 60 * mins:06.3f}" if mins else f"{t:.3f}"
        player = e.player or "-"
        lines.append(f"{e.rank:>3}  {ts:>10}  {player:<16.16}  {e.added_utc:<20}  {e.run_id[:12]}")
    return "\n".join(lines)
