"""A local leaderboard of verified stage times (SQLite, standard library only), and
:class:`Board`, the code that files, ranks and reads runs for it and for the server (what gets
in, how runs are ranked and an example: ``docs/replays.md``, "Leaderboard").
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from rally_env.errors import RallyEnvError
from rally_env.paths import why_not_writable
from rally_env.replay.budgets import DEFAULT_BUDGETS, Budgets
from rally_env.replay.errors import ReplayError
from rally_env.replay.format import Replay, load_replay, replay_from_bytes
from rally_env.replay.verify import VerifyReport, drive_id, verify

SCHEMA_VERSION = 1
SCHEMA_VERSION_SQL = "SELECT value FROM meta WHERE key = 'schema_version'"
ENV_DB = "RALLY_LEADERBOARD"

#: The board's tables (SQLite; the server's PostgreSQL store adapts the types).
BOARD_SCHEMA = """
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


#: What :func:`current_stage_digest` gives for a ``gen-`` name that stands for no single stage:
#: a digest no stage has, so its board is empty.
NO_STAGE = "-"


def current_stage_digest(name: str) -> str | None:
    """The digest a board of ``name`` holds runs of: that of the stage the name makes here
    (library, ``gen-<seed>`` or drawn stage), :data:`NO_STAGE` for any other ``gen-`` name,
    None for a stage of the user's own (every version); ``docs/server.md``, "Boards and names"."""
    from rally_env.stages import board_stage

    try:
        st = board_stage(name)
    except (ValueError, OSError):
        return NO_STAGE
    if st is None:
        return NO_STAGE if name.startswith("gen-") else None
    return st.digest()


def stage_name_problem(report: VerifyReport) -> str | None:
    """Why an accepted run cannot be filed under its stage's name (one that stands for
    another stage, :func:`current_stage_digest`), or None."""
    want = current_stage_digest(report.stage)
    if want is None or want == report.stage_digest:
        return None
    if want == NO_STAGE:
        return (
            f"the stage is named {report.stage!r}, a generated stage's name that stands for no "
            "single stage; a stage of your own needs a name of its own"
        )
    return (
        f"the stage is named {report.stage!r} but is not the stage that name stands for "
        f"(its digest is {report.stage_digest}, {report.stage!r}'s is {want}); a stage of your "
        "own needs a name of its own"
    )


def refusal(report: VerifyReport, name_problem: str | None = None) -> tuple[str, str] | None:
    """``(reason, message)`` of why a verified run stays off the board, or None: not accepted
    (the report's reason; the message of an unusable file, else ``verification failed at step
    N: ...``), ``stage_name`` (``name_problem``: :func:`stage_name_problem`) or
    ``unfinished``."""
    if report.status == "unusable":
        return report.reason, report.message
    if not report.accepted:
        where = f" at step {report.step}" if report.step is not None else ""
        return report.reason, f"verification failed{where}: {report.message}"
    if name_problem is not None:
        return "stage_name", name_problem
    if report.finish_time_s is None:
        return "unfinished", unfinished_message(report.end_reason)
    return None


def unfinished_message(end_reason: str) -> str:
    """Why a run that did not finish is refused."""
    return (
        f"the run did not finish (end reason {end_reason or 'none'!r}); "
        "only finished runs go on the leaderboard"
    )


class Board:
    """The code that files, ranks and reads verified runs in the board's tables, for
    :class:`Leaderboard` and the server's store, behind a DB-API driver: a subclass gives
    ``_connect()`` and ``tx(write=True)`` (a transaction yielding a cursor); :attr:`ph` is the
    driver's placeholder. Connections are per thread (thread-safe)."""

    ph = "?"
    url = ""
    #: Test hook: called inside the insert transaction, between the run row and its splits.
    _midway: Callable[[], Any] | None = None

    def __init__(self) -> None:
        self._local = threading.local()
        self._all: list[Any] = []
        self._lock = threading.Lock()

    def _conn(self) -> Any:
        c = getattr(self._local, "conn", None)
        if c is None:
            c = self._connect()
            self._local.conn = c
            with self._lock:
                self._all.append(c)
        return c

    def q(self, sql: str) -> str:
        """``sql`` written with ``?`` placeholders, in the driver's."""
        return sql if self.ph == "?" else sql.replace("?", self.ph)

    def _one(self, sql: str, *args: Any) -> Any:
        """The first row (or None) of a query written with ``?`` placeholders, read alone."""
        with self.tx(write=False) as cur:
            cur.execute(self.q(sql), args)
            return cur.fetchone()

    def close(self) -> None:
        with self._lock:
            for c in self._all:
                with contextlib.suppress(Exception):
                    c.close()
            self._all.clear()
        self._local = threading.local()

    def _create_schema(self, cur: Any, sql: str) -> str:
        """Create the tables of ``sql`` and record the schema version, unless there; the
        version the database holds."""
        run_script(cur, sql)
        cur.execute(
            self.q("INSERT INTO meta (key, value) VALUES ('schema_version', ?) ")
            + "ON CONFLICT (key) DO NOTHING",
            (str(SCHEMA_VERSION),),
        )
        cur.execute(SCHEMA_VERSION_SQL)
        return str(cur.fetchone()[0])

    def __enter__(self) -> Any:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    # -------------------------------------------------------------------------- write
    def file_run(
        self,
        cur: Any,
        report: VerifyReport,
        blob: bytes,
        player: str,
        drive: str | None,
        added_utc: str | None = None,
    ) -> tuple[int | None, str | None]:
        """File a verified run's row and splits in the transaction of ``cur``. ``drive``: its
        :func:`~rally_env.replay.verify.drive_id` (None: not checked), compared with the drive
        of each stored run like it (re-derived from its replay); ``added_utc``: default now.

        Returns:
            ``(row id, None)``, or ``(None, run id)`` of the stored run that is the same
            drive or the same run (nothing is written then).
        """
        if drive is not None:  # a stored run of the same drive, re-derived from its replay
            cur.execute(
                self.q(
                    "SELECT run_id, rules, stage_digest, replay FROM runs WHERE stage_digest = ? "
                    "AND rules = ? AND steps = ? AND finish_time_s = ?"
                ),
                (report.stage_digest, report.rules, report.steps, float(report.finish_time_s)),
            )
            for run_id, rules, digest, old_blob in cur.fetchall():
                try:
                    old = replay_from_bytes(bytes(old_blob), f"leaderboard run {run_id}")
                except ReplayError:
                    continue
                if drive_id(digest, rules, old.initial_hash, old.actions) == drive:
                    return None, str(run_id)
        row = {
            "run_id": report.run_id,
            "stage_name": report.stage,
            "stage_digest": report.stage_digest,
            "rules": report.rules,
            "standard": int(report.standard),
            "control_hz": report.control_hz,
            "vehicle_digest": report.vehicle_digest,
            "finish_time_s": float(report.finish_time_s),
            "steps": report.steps,
            "player": player,
            "added_utc": added_utc or utc_now(),
            "replay": blob,
        }
        cur.execute(
            self.q(f"INSERT INTO runs ({', '.join(row)}) VALUES ({', '.join('?' * len(row))})")
            + " ON CONFLICT (run_id) DO NOTHING RETURNING id",
            tuple(row.values()),
        )
        got = cur.fetchone()
        if got is None:
            return None, report.run_id
        rowid = int(got[0])
        if self._midway is not None:
            self._midway()
        cur.executemany(
            self.q("INSERT INTO splits (run, idx, time_s) VALUES (?, ?, ?)"),
            [(rowid, i, t) for i, t in enumerate(report.checkpoint_times_s)],
        )
        return rowid, None

    # -------------------------------------------------------------------------- query
    def best(
        self,
        stage: str,
        digest: str | None = "current",
        rules: str | None = None,
        limit: int | None = 10,
    ) -> list[Entry]:
        """Best verified times on ``stage``, fastest first, ranked within each rules class.

        Args:
            stage: stage name.
            digest: ``"current"`` (the stage that name makes in this installation,
                :func:`current_stage_digest`; every version for a stage of the user's own), a
                stage digest, or ``None`` (every version).
            rules: only this rules class (``"standard"`` or a rules digest); ``None`` = all.
            limit: at most this many entries per (stage version, rules) class.
        """
        if limit is not None and (
            isinstance(limit, bool) or not isinstance(limit, int) or limit < 1
        ):
            raise ValueError(f"limit must be an integer >= 1 or None, got {limit!r}")
        if digest == "current":
            digest = current_stage_digest(stage)
        q = f"SELECT {ENTRY_COLUMNS} FROM runs WHERE stage_name = ?"
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
        rank: dict[tuple[str, str], int] = {}  # within each (stage version, rules) class
        try:
            with self.tx(write=False) as cur:
                cur.execute(self.q(q), args)
                for row in cur.fetchall():
                    key = (row[4], row[5])
                    rank[key] = r = rank.get(key, 0) + 1
                    if limit is None or r <= limit:
                        out.append(entry_of(row, r, self.splits(cur, int(row[0]))))
        except sqlite3.Error as e:
            raise LeaderboardError(
                f"{self.url}: cannot read the database ({e})", "database"
            ) from None
        return out

    def splits(self, cur: Any, rowid: int) -> tuple[float | None, ...]:
        """The split times of the run in row ``rowid``, in order."""
        cur.execute(self.q("SELECT time_s FROM splits WHERE run = ? ORDER BY idx"), (rowid,))
        return tuple(r[0] for r in cur.fetchall())

    def count(self) -> int:
        """How many runs are on the board."""
        with self.tx(write=False) as cur:
            cur.execute("SELECT COUNT(*) FROM runs")
            return int(cur.fetchone()[0])

    def has_run(self, run_id: str) -> bool:
        return self._one("SELECT 1 FROM runs WHERE run_id = ?", run_id) is not None

    def stage_names(self) -> list[str]:
        """Stages with at least one run on the board."""
        with self.tx(write=False) as cur:
            cur.execute("SELECT DISTINCT stage_name FROM runs ORDER BY stage_name")
            return [str(r[0]) for r in cur.fetchall()]

    def replay_blob(self, run_id: str) -> bytes | None:
        """The stored replay file of a run (compressed bytes), or None."""
        row = self._one("SELECT replay FROM runs WHERE run_id = ?", run_id)
        return None if row is None else bytes(row[0])

    def replay_of(self, run_id: str) -> Replay:
        """The stored replay of a run (checked like any replay)."""
        blob = self.replay_blob(run_id)
        if blob is None:
            raise LeaderboardError(f"no run {run_id}", "database")
        return replay_from_bytes(blob, f"leaderboard run {run_id}")


class Leaderboard(Board):
    """Verified best times in one SQLite file.

    Args:
        path: the database file (created if missing); default :func:`default_db_path`.
        timeout_s: how long to wait for a database another process is writing (s).
        budgets: what verifying one replay may cost
            (:class:`~rally_env.replay.budgets.Budgets`).

    Raises:
        LeaderboardError: (``database``) the path cannot hold a database (a missing or
            unwritable directory, a file that is not a leaderboard, another schema).
    """

    def __init__(
        self,
        path: str | os.PathLike[str] | None = None,
        timeout_s: float = 10.0,
        budgets: Budgets | None = None,
    ):
        super().__init__()
        self.path = Path(path) if path is not None else default_db_path()
        self.url = str(self.path)
        self.timeout_s = timeout_s
        self.budgets = DEFAULT_BUDGETS if budgets is None else budgets
        try:
            if self.path.is_dir():
                raise LeaderboardError(
                    f"{self.path}: not a usable leaderboard (a directory)", "database"
                )
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._init()
        except (sqlite3.Error, OSError) as e:
            self.close()
            why = why_not_writable(self.path, e) if isinstance(e, OSError) else str(e)
            raise LeaderboardError(
                f"{self.path}: not a usable leaderboard ({why})", "database"
            ) from None

    def _connect(self) -> sqlite3.Connection:
        c = sqlite3.connect(
            self.path, isolation_level=None, timeout=self.timeout_s, check_same_thread=False
        )
        c.execute("PRAGMA foreign_keys = ON")
        return c

    @contextlib.contextmanager
    def tx(self, write: bool = True) -> Iterator[Any]:
        """``BEGIN IMMEDIATE`` (a read: ``BEGIN``) ... ``COMMIT``; any exception rolls back."""
        c = self._conn()
        cur = c.cursor()
        cur.execute("BEGIN IMMEDIATE" if write else "BEGIN")
        try:
            yield cur
            cur.execute("COMMIT")
        except BaseException:
            if c.in_transaction:
                c.execute("ROLLBACK")
            raise

    def _init(self) -> None:
        c = self._conn()  # an existing board is only read (it may be read-only)
        sql = "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'meta'"
        row = c.execute(sql).fetchone() and c.execute(SCHEMA_VERSION_SQL).fetchone()
        if row:
            ver = str(row[0])
        else:
            with self.tx() as cur:
                ver = self._create_schema(cur, BOARD_SCHEMA)
        if ver != str(SCHEMA_VERSION):
            raise LeaderboardError(
                f"{self.path}: leaderboard schema v{ver}, this rally-env uses v{SCHEMA_VERSION}",
                "database",
            )

    # -------------------------------------------------------------------------- add
    def add(
        self,
        replay: Replay | str | os.PathLike[str],
        player: str | None = None,
        report: VerifyReport | None = None,
    ) -> tuple[Entry, VerifyReport]:
        """Verify a run and store it, filed under what the re-simulation found (never the
        replay's claims). ``report``: this replay's verification made elsewhere under these
        budgets, used instead of verifying again (a report of another run is refused).

        Returns:
            the stored entry (with its rank) and the verification report.

        Raises:
            LeaderboardError: the file is unusable (``bad_replay``), the run did not finish
                (``unfinished``), is already stored (``duplicate``: the same drive), is on a stage
                of its own under a name that stands for another stage (``stage_name``), failed
                verification (``rejected``) or the database refused the write (``database``:
                busy past the timeout, read-only); nothing is written then.
        """
        try:
            if not isinstance(replay, Replay):
                replay = load_replay(replay, self.budgets)
            if not replay.finished:
                raise LeaderboardError(unfinished_message(replay.end_reason), "unfinished")
            if self.has_run(replay.run_id()):
                raise LeaderboardError(
                    f"run {replay.run_id()} is already on the leaderboard", "duplicate"
                )
            if report is None:
                report = verify(replay, self.budgets)
            elif report.status == "unusable":
                raise LeaderboardError(report.message, "bad_replay")
            elif report.accepted and report.run_id != replay.run_id():
                raise LeaderboardError(
                    f"the verification report is of run {report.run_id}, not of this replay's "
                    f"run {replay.run_id()}",
                    "rejected",
                    report,
                )
        except ReplayError as e:
            raise LeaderboardError(str(e), "bad_replay") from None
        why = refusal(report, stage_name_problem(report) if report.accepted else None)
        if why is not None:  # (a finished replay's accepted run is finished)
            reason = "stage_name" if why[0] == "stage_name" else "rejected"
            raise LeaderboardError(why[1], reason, report)
        if player is None:
            player = str(replay.meta.get("player") or "")
        # the report's drive id, or (a report made without it) derived from the accepted replay
        drive = report.drive_id or drive_id(
            report.stage_digest, report.rules, replay.initial_hash, replay.actions
        )
        blob = replay.to_bytes(compress=True)
        try:
            with self.tx() as cur:
                rowid, same = self.file_run(cur, report, blob, player[:100], drive)
        except sqlite3.Error as e:
            raise LeaderboardError(
                f"{self.path}: the database refused the write ({e})", "database"
            ) from None
        if rowid is None:
            if same == report.run_id:
                raise LeaderboardError(f"run {same} is already on the leaderboard", "duplicate")
            msg = f"the same drive is already on the leaderboard as run {same}"
            raise LeaderboardError(msg, "duplicate")
        board = self.best(report.stage, report.stage_digest, report.rules, limit=None)
        return next(e for e in board if e.run_id == report.run_id), report


# ------------------------------------------------------------------ SQL of the board
def utc_now() -> str:
    """The time now, as the board shows it (``2024-05-01T12:00:00Z``)."""
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def run_script(cur: Any, sql: str) -> None:
    """Execute each ``;``-separated statement of ``sql`` (a schema)."""
    for stmt in sql.split(";"):
        if stmt.strip():
            cur.execute(stmt)


#: The columns of a ``runs`` row that make an :class:`Entry` (``id`` first: its splits' key).
ENTRY_COLUMNS = (
    "id, finish_time_s, player, stage_name, stage_digest, rules, standard, control_hz, steps, "
    "added_utc, run_id"
)


def entry_of(row: Any, rank: int, splits: tuple[float | None, ...]) -> Entry:
    """The :class:`Entry` of a row of :data:`ENTRY_COLUMNS` (the fields' order, after ``id``)."""
    t, standard, hz, steps = float(row[1]), bool(row[6]), int(row[7]), int(row[8])
    return Entry(rank, t, *row[2:6], standard, hz, steps, *row[9:11], splits)


def printable(text: str) -> str:
    """``text`` safe for a terminal: control and other unprintable characters (escape
    sequences, bidirectional overrides) shown as ``\\xNN`` / ``\\uNNNN`` escapes."""
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in str(text))


def race_time(t: float) -> str:
    """A stage time as the boards show it: ``m:ss.sss``, or ``s.sss`` under a minute."""
    m = int(t // 60)
    return f"{m}:{t - 60 * m:06.3f}" if m else f"{t:.3f}"


def format_table(entries: list[Entry]) -> str:
    """Plain-text tables, one per (stage version, rules) class; names are
    :func:`printable`."""
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
            lines.append(
                f"{printable(e.stage)} (stage {e.stage_digest[:12]}), {rules}, {e.control_hz} Hz"
            )
            lines.append(f"{'#':>3}  {'time':>10}  {'player':<16}  {'added (UTC)':<20}  run")
        ts = race_time(e.finish_time_s)
        player = printable(e.player) or "-"
        lines.append(f"{e.rank:>3}  {ts:>10}  {player:<16.16}  {e.added_utc:<20}  {e.run_id[:12]}")
    return "\n".join(lines)
