"""Helpers for the server tests and benchmarks/server_load.py: a real ``rally serve`` process
on 127.0.0.1, a real PostgreSQL, and the runs they are fed (no tests here)."""

from __future__ import annotations

import contextlib
import glob
import os
import pwd
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

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
