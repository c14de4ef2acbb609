"""Helpers for the server tests and benchmarks/server_load.py: a real ``rally serve`` process
on 127.0.0.1, a real PostgreSQL, the runs they are fed, and the load run that
tests/server/test_load.py and the benchmark share (no tests here)."""

from __future__ import annotations

import contextlib
import glob
import gzip
import json
import os
import pwd
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

try:  # the server extra; without it the server tests skip (tests/server/conftest.py)
    import httpx
except ImportError:
    httpx = None

ROOT = Path(__file__).resolve().parents[2]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def env() -> dict[str, str]:
    e = dict(os.environ)
    e["PYTHONPATH"] = str(ROOT) + os.pathsep + e.get("PYTHONPATH", "")
    return e


def rally(*args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "rally_env", *args],
        capture_output=True,
        text=True,
        env=env(),
        timeout=timeout,
        cwd=ROOT,
    )


def add_token(db: str, name: str) -> str:
    r = rally("serve", "token", "add", name, "--db", db)
    assert r.returncode == 0, r.stderr
    return r.stdout.strip()


class Server:
    """``rally serve`` in its own process group on 127.0.0.1 (stopped by :meth:`stop`)."""

    def __init__(self, db: str, *args: str, log: Path | None = None):
        self.db, self.args = db, list(args)
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self._own_log = log is None
        self.log = log or Path(tempfile.mkstemp(prefix="rally-serve-", suffix=".log")[1])
        self.proc: subprocess.Popen | None = None

    def start(self, timeout: float = 600) -> Server:
        with open(self.log, "ab") as f:
            self.proc = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "rally_env",
                    "serve",
                    "--host",
                    "127.0.0.1",
                    "--port",
                    str(self.port),
                    "--db",
                    self.db,
                    "--log-level",
                    "info",
                    *self.args,
                ],
                stdout=f,
                stderr=subprocess.STDOUT,
                env=env(),
                cwd=ROOT,
                start_new_session=True,
            )
        t0 = time.monotonic()
        while time.monotonic() - t0 < timeout:
            if self.proc.poll() is not None:
                raise RuntimeError(f"rally serve exited: {self.log.read_text()[-3000:]}")
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(self.url + "/api/v1/health", timeout=2).status_code == 200:
                    return self
            time.sleep(0.2)
        raise RuntimeError("rally serve did not come up")

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def kill9(self) -> None:
        """SIGKILL the server and its worker processes (the whole process group)."""
        assert self.proc is not None
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait(30)

    def stop(self) -> None:
        """SIGTERM (uvicorn shuts down, the workers are stopped), then SIGKILL to anything of
        the process group still there."""
        if self.proc is not None and self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.kill9()
        if self.proc is not None:
            with contextlib.suppress(ProcessLookupError):  # any worker left behind
                os.killpg(self.proc.pid, signal.SIGKILL)
        if self._own_log:
            self.log.unlink(missing_ok=True)

    def pids(self) -> list[int]:
        """The server and its children (for memory figures)."""
        out = []
        for d in glob.glob("/proc/[0-9]*/stat"):
            with contextlib.suppress(OSError, ValueError, IndexError):
                fields = Path(d).read_text().rsplit(")", 1)[1].split()
                if int(fields[2]) == self.proc.pid:  # process group
                    out.append(int(d.split("/")[2]))
        return out

    def rss_mb(self) -> float:
        total = 0
        for pid in self.pids():
            with contextlib.suppress(OSError, ValueError):
                for line in Path(f"/proc/{pid}/status").read_text().splitlines():
                    if line.startswith("VmRSS:"):
                        total += int(line.split()[1])
        return total / 1024


def submit(url: str, token: str, data: bytes, player: str | None = None) -> httpx.Response:
    params = {} if player is None else {"player": player}
    return httpx.post(
        url + "/api/v1/runs",
        content=data,
        params=params,
        headers={"Authorization": f"Bearer {token}", "Content-Type": "application/octet-stream"},
        timeout=60,
    )


def wait_verdict(url: str, sub_id: str, timeout: float = 300) -> dict[str, Any]:
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout:
        d = httpx.get(f"{url}/api/v1/runs/{sub_id}", timeout=30).json()
        if d["status"] in ("accepted", "rejected"):
            return d
        time.sleep(0.2)
    raise TimeoutError(f"no verdict for {sub_id} in {timeout} s")


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


# ------------------------------------------------------------------------------ load
#: The kinds of :func:`load_mix`'s hostile share, in turn.
HOSTILE_KINDS = ("theft", "spoof", "bomb")


def load_mix(
    n_honest: int, n_tampered: int, seed: int = 0, n_hostile: int = 0
) -> tuple[list[tuple[str, bytes]], set[str]]:
    """The submissions of a load run, shuffled: ``n_honest`` distinct honest finished opener
    runs (recorded here) and ``n_tampered`` tampered copies of them (one action changed, or a
    finish claimed 1 ms faster, alternately), and ``n_hostile`` attacks (in turn: the theft of
    an honest run of the mix with a free setting changed, ``hostile_replays.stolen``; a
    finished run on a straight named ``gen-<k>``, ``spoofed_gen_stage``; the pool bomb,
    ``pool_bomb``). Returns ``[(kind, bytes)]`` with kind "honest", "tampered" or one of
    :data:`HOSTILE_KINDS` (a theft as ``theft:<run id of the run it copies>``: it is sent once
    that run has its verdict, as a thief downloads it), and the run ids of the honest runs."""
    import numpy as np

    from tests.rally_env.test_replay_support import record_run

    honest: list[tuple[bytes, str]] = []
    seen: set[str] = set()
    want = max(n_honest, 1 if n_tampered else 0)
    i = 0
    while len(honest) < want and i < 4 * want + 10:  # distinct finished runs
        r, _ = record_run(seed=i, vmax=11.0 + 5.0 * i / max(want, 1))
        i += 1
        if r.finished and r.run_id() not in seen:
            seen.add(r.run_id())
            honest.append((r.to_bytes(compress=True), r.run_id()))
    if len(honest) < want:
        raise RuntimeError(f"could record only {len(honest)} distinct finished runs of {want}")
    rng = np.random.default_rng(seed)
    items: list[tuple[str, bytes]] = [("honest", d) for d, _ in honest[:n_honest]]
    for k in range(n_tampered):
        src = honest[k % len(honest)][0]
        if k % 2:
            items.append(("tampered", faster(src)))
        else:
            items.append(("tampered", tampered_action(src, int(rng.integers(50, 1500)))))
    if n_hostile:
        from tests.rally_env.hostile_replays import pool_bomb, spoofed_gen_stage, stolen

        for k in range(n_hostile):
            kind = HOSTILE_KINDS[k % len(HOSTILE_KINDS)]
            if kind == "theft" and n_honest:
                data, rid = honest[(k // len(HOSTILE_KINDS)) % n_honest]
                items.append((f"theft:{rid}", stolen(json.loads(gzip.decompress(data)))))
            elif kind == "spoof":
                items.append(("spoof", spoofed_gen_stage(f"gen-{k}", 300.0 + k)))
            else:
                doc = json.loads(gzip.decompress(honest[0][0]))
                items.append(("bomb", pool_bomb(doc)))
    order = rng.permutation(len(items))
    return [items[j] for j in order], {rid for _, rid in honest[:n_honest]}


@dataclass
class LoadResult:
    """What :func:`run_load` saw: one ``(kind, status, reason, seconds upload to verdict)`` per
    verdict, refused uploads, the wall time, the server's peak RSS (with its workers) and the
    named checks (all must hold)."""

    results: list[tuple[str, str, str, float]] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    wall_s: float = 0.0
    peak_mb: float = 0.0
    checks: dict[str, bool] = field(default_factory=dict)
    killed: list[int] = field(default_factory=list)

    def failed(self) -> list[str]:
        return [name for name, ok in self.checks.items() if not ok]


def run_load(
    db: str,
    items: list[tuple[str, bytes]],
    honest_ids: set[str],
    clients: int,
    workers: int = 2,
    max_seconds: float = 1500.0,
    kill_worker_after: int | None = None,
) -> LoadResult:
    """Start ``rally serve`` on ``db`` (a SQLite path or a ``postgresql://`` URL) on 127.0.0.1,
    and have ``clients`` concurrent clients (one token each) submit ``items``: each uploads a
    run, polls until its verdict, uploads the next (a theft waits for the verdict of the run it
    copies). With ``kill_worker_after`` = n, one verification worker is killed (SIGKILL) once n
    verdicts are in, while it verifies. Everything stops by ``max_seconds`` (a run without a
    verdict by then fails the checks); the server is stopped before returning. Results keep
    the kind without the theft's run id."""
    out = LoadResult()
    n_h = sum(1 for kind, _ in items if kind == "honest")
    n_t = len(items) - n_h
    verdict_of: dict[str, threading.Event] = {rid: threading.Event() for rid in honest_ids}
    tokens = [add_token(db, f"client{c}") for c in range(clients)]
    server = Server(
        db,
        "--workers",
        str(workers),
        "--max-queue",
        str(len(items) + 10),
        "--token-rate",
        "100000/60",
        "--address-rate",
        "100000/60",
        "--log-level",
        "warning",
    )
    server.start(timeout=min(600.0, max_seconds))
    deadline = time.monotonic() + max_seconds
    out.peak_mb = server.rss_mb()
    done = threading.Event()
    lock = threading.Lock()

    def sample() -> None:
        while not done.wait(0.2):
            out.peak_mb = max(out.peak_mb, server.rss_mb())

    killed: list[int] = []

    def kill_one() -> None:
        """SIGKILL a worker that holds a run (it never sends that run's verdict)."""
        for pid in server.pids():
            with contextlib.suppress(OSError, ValueError):
                cmd = Path(f"/proc/{pid}/cmdline").read_bytes()
                stat = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
                busy = stat[0] == "R"
                if b"spawn_main" in cmd and int(stat[1]) == server.proc.pid and busy:
                    os.kill(pid, signal.SIGKILL)
                    killed.append(pid)
                    return

    def client(c: int) -> None:
        mine = items[c::clients]
        with httpx.Client(base_url=server.url, timeout=60) as h:
            for kind, data in mine:
                if time.monotonic() > deadline:
                    return
                if kind.startswith("theft:"):  # copied once the original is on the board
                    src = verdict_of.get(kind.split(":", 1)[1])
                    if src is not None:
                        src.wait(max(0.0, deadline - time.monotonic()))
                    kind = "theft"
                t = time.perf_counter()
                r = submit(server.url, tokens[c], data)
                if r.status_code != 202:
                    with lock:
                        out.errors.append(f"upload: HTTP {r.status_code} {r.text[:200]}")
                    continue
                sub = r.json()["id"]
                while time.monotonic() < deadline:
                    d = h.get(f"/api/v1/runs/{sub}").json()
                    if d["status"] in ("accepted", "rejected"):
                        with lock:
                            out.results.append(
                                (kind, d["status"], d["reason"], time.perf_counter() - t)
                            )
                            if d.get("run_id") in verdict_of and kind == "honest":
                                verdict_of[d["run_id"]].set()
                            kill = (
                                kill_worker_after is not None
                                and not killed
                                and len(out.results) >= kill_worker_after
                            )
                        while kill and not killed and time.monotonic() < deadline:
                            kill_one()
                            time.sleep(0.01)
                        break
                    time.sleep(0.05)

    mon = threading.Thread(target=sample, daemon=True)
    mon.start()
    t_run = time.perf_counter()
    try:
        threads = [threading.Thread(target=client, args=(c,)) for c in range(clients)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        out.wall_s = time.perf_counter() - t_run
        done.set()
        counts = httpx.get(server.url + "/api/v1/health", timeout=30).json()
        board = httpx.get(
            server.url + "/api/v1/boards/opener?limit=100&rules=all", timeout=30
        ).json()
        board_ids = [e["run_id"] for e in board["entries"]]
        alive = server.alive()
    finally:
        done.set()
        server.stop()
    if db.startswith("postgresql"):
        from rally_env.server.store import open_store

        st = open_store(db)
        try:
            integrity = st.integrity_check()
            n_sub = sum(st.counts()[k] for k in ("queued", "verifying", "accepted", "rejected"))
            dup = 0  # runs.run_id is the primary key
        finally:
            st.close()
    else:
        import sqlite3

        with contextlib.closing(sqlite3.connect(db)) as conn:
            integrity = conn.execute("PRAGMA integrity_check").fetchone()[0]
            n_sub = conn.execute("SELECT COUNT(*) FROM submissions").fetchone()[0]
            dup = conn.execute("SELECT COUNT(*) - COUNT(DISTINCT run_id) FROM runs").fetchone()[0]
    res = out.results
    out.killed = killed
    out.checks = {
        "every honest run accepted": sum(
            1 for k, s, _, _ in res if k == "honest" and s == "accepted"
        )
        == n_h,
        "every tampered run and forgery rejected": sum(
            1 for k, s, _, _ in res if k != "honest" and s == "rejected"
        )
        == n_t,
        "a verdict for every submission": len(res) == len(items),
        "no row lost or duplicated": n_sub == len(items)
        and counts["runs"] == n_h
        and dup == 0
        and (n_h > 100 or set(board_ids) == honest_ids),
        "no upload refused": not out.errors,
        "integrity check ok": integrity == "ok",
        "server stayed up": alive,
    }
    if kill_worker_after is not None:
        out.checks["a worker was killed while it verified"] = bool(killed)
    return out


# ------------------------------------------------------------------------------ PostgreSQL
def pg_bindir() -> str | None:
    found = shutil.which("initdb")
    if found:
        return str(Path(found).resolve().parent)
    dirs = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"))
    return str(Path(dirs[-1]).parent) if dirs else None


class Postgres:
    """A throwaway PostgreSQL cluster in a temporary directory, on 127.0.0.1 only.

    ``initdb`` refuses to run as root: as root the cluster belongs to the ``postgres`` user
    that Debian's package creates (commands run through ``runuser``)."""

    def __init__(self) -> None:
        self.bindir = pg_bindir()
        if self.bindir is None:
            raise RuntimeError("PostgreSQL is not installed (apt-get install postgresql)")
        self.dir = Path(tempfile.mkdtemp(prefix="rally-pg-"))
        self.port = free_port()
        self.user = "postgres" if os.geteuid() == 0 else pwd.getpwuid(os.geteuid()).pw_name
        if os.geteuid() == 0:
            pw = pwd.getpwnam("postgres")
            os.chown(self.dir, pw.pw_uid, pw.pw_gid)
        self.url = f"postgresql://{self.user}@127.0.0.1:{self.port}/rally"

    def _run(self, *cmd: str) -> None:
        pre = ["runuser", "-u", "postgres", "--"] if os.geteuid() == 0 else []
        r = subprocess.run([*pre, *cmd], capture_output=True, text=True, timeout=120, cwd="/")
        if r.returncode != 0:
            raise RuntimeError(f"{cmd[0]} failed: {r.stdout}\n{r.stderr}")

    def start(self) -> Postgres:
        data = self.dir / "data"
        self._run(
            f"{self.bindir}/initdb",
            "-D",
            str(data),
            "-A",
            "trust",
            "-U",
            self.user,
            "-E",
            "UTF8",
            "--no-sync",
        )
        opts = (
            f"-c listen_addresses=127.0.0.1 -p {self.port} -k {self.dir} -c fsync=off "
            "-c full_page_writes=off -c max_connections=100"
        )
        self._run(
            f"{self.bindir}/pg_ctl",
            "-D",
            str(data),
            "-o",
            opts,
            "-l",
            str(self.dir / "log"),
            "-w",
            "-t",
            "60",
            "start",
        )
        import psycopg

        with psycopg.connect(
            f"postgresql://{self.user}@127.0.0.1:{self.port}/postgres", autocommit=True
        ) as c:
            c.execute("CREATE DATABASE rally")
        return self

    def stop(self) -> None:
        with contextlib.suppress(Exception):
            self._run(
                f"{self.bindir}/pg_ctl", "-D", str(self.dir / "data"), "-m", "fast", "-w", "stop"
            )
        shutil.rmtree(self.dir, ignore_errors=True)
