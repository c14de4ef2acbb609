"""The Ray suite (``pytest -m ray``; needs the ray extra): a two-node Ray cluster on this
machine, started once for the session and stopped after it.

The head and a second node are started with ``ray start ... --node-ip-address 127.0.0.1``;
Ray itself replaces a loopback address with this machine's own address (multi-node clusters
refuse loopback), so both nodes listen on this machine only. Every call is bounded by a
timeout. The teardown runs ``ray stop``, which stops every Ray process of this machine: do not
run this suite beside another Ray cluster on the same machine.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
START_TIMEOUT_S = 120
STOP_TIMEOUT_S = 60


def _ray_cli() -> str:
    exe = Path(sys.executable).with_name("ray")
    return str(exe) if exe.exists() else (shutil.which("ray") or "ray")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    env["RAY_USAGE_STATS_ENABLED"] = "0"
    # a throwaway cluster on this machine: no token (a token file a local ray.init() left in
    # ~/.ray would otherwise be required by one node and not sent by another)
    env["RAY_AUTH_MODE"] = "disabled"
    env.setdefault("RALLY_PREFETCH", "0")
    return env


def _run(args: list[str], timeout: float) -> None:
    r = subprocess.run(
        [_ray_cli(), *args], env=_env(), capture_output=True, text=True, timeout=timeout
    )
    if r.returncode != 0:
        raise RuntimeError(f"ray {' '.join(args)} failed ({r.returncode}):\n{r.stderr[-3000:]}")


def stop_cluster() -> None:
    try:
        _run(["stop"], STOP_TIMEOUT_S)
    except (RuntimeError, subprocess.TimeoutExpired):
        _run(["stop", "--force"], STOP_TIMEOUT_S)


@pytest.fixture(scope="session")
def ray_cluster():
    """``(ray module, address)`` of a two-node cluster this process is connected to."""
    ray = pytest.importorskip("ray")
    port = _free_port()
    temp = tempfile.mkdtemp(prefix="rt", dir="/tmp")  # short: Ray's socket paths go in it
    common = ["--node-ip-address", "127.0.0.1", "--temp-dir", temp, "--disable-usage-stats"]
    try:
        _run(
            [
                "start",
                "--head",
                "--port",
                str(port),
                "--num-cpus",
                "1",
                "--include-dashboard=false",
                *common,
            ],
            START_TIMEOUT_S,
        )
        _run(
            ["start", "--address", f"127.0.0.1:{port}", "--num-cpus", "1", *common], START_TIMEOUT_S
        )
        os.environ.update({k: v for k, v in _env().items() if k != "PYTHONPATH"})
        ray.init(address=f"127.0.0.1:{port}", log_to_driver=False)
        alive = [n for n in ray.nodes() if n["Alive"]]
        assert len(alive) == 2, alive
        yield ray, f"127.0.0.1:{port}"
    finally:
        if ray.is_initialized():
            ray.shutdown()
        stop_cluster()
        shutil.rmtree(temp, ignore_errors=True)
