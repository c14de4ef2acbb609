"""The Ray suite (``pytest -m ray``; needs the ray extra): a Ray cluster on this machine,
started once for the session with ``ray start --head`` and stopped after it; the suite
connects to it by address, as a driver connects to a remote cluster.

Only loopback: a multi-node Ray cluster replaces ``127.0.0.1`` with the machine's own network
address (and refuses to run when told not to), so the suite runs one node with two worker CPUs
and ``RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0``, which keeps every Ray address on ``127.0.0.1``.
Every call is bounded by a timeout. The teardown runs ``ray stop``, which stops every Ray
process of this machine: do not run this suite beside another Ray cluster on the same machine.
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

# Set before anything imports ray: Ray reads this once, at import, and with it unset a driver
# given ``127.0.0.1:PORT`` rewrites the address to the machine's network address, where a
# loopback-only cluster does not answer.
os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"
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
    # single-node mode: Ray keeps its node address on loopback (see the module docstring)
    env["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"
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
    """``(ray module, address)`` of the cluster this process is connected to."""
    ray = pytest.importorskip("ray")
    from ray._private import services

    # the driver's own view of loopback: must stay loopback (see the module constant above)
    assert services.resolve_ip_for_localhost("127.0.0.1") == "127.0.0.1", (
        "ray was imported before tests/ray/conftest.py set RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0"
    )
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
                "2",
                "--include-dashboard=false",
                *common,
            ],
            START_TIMEOUT_S,
        )
        os.environ.update({k: v for k, v in _env().items() if k != "PYTHONPATH"})
        ray.init(address=f"127.0.0.1:{port}", log_to_driver=False)
        alive = [n for n in ray.nodes() if n["Alive"]]
        assert [n["NodeManagerAddress"] for n in alive] == ["127.0.0.1"], alive
        yield ray, f"127.0.0.1:{port}"
    finally:
        if ray.is_initialized():
            ray.shutdown()
        stop_cluster()
        shutil.rmtree(temp, ignore_errors=True)
