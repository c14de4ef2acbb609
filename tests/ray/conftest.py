"""The Ray suite (``pytest -m ray``; needs the ray extra): a two-node Ray cluster on this
machine, on loopback only, started once for the session and stopped after it; the suite
connects to it by address, as a driver connects to a remote cluster.

The nodes are started with Ray's own test cluster (``ray.cluster_utils.Cluster``: a head and
a second node, one worker CPU each, every process bound to ``127.0.0.1``) with
``RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0``: with it unset, Ray replaces ``127.0.0.1`` with the
machine's network address (in the nodes and in this driver), and the suite must stay on
loopback. Every node and worker process is this session's child and is stopped at teardown.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

# Set before anything imports ray: Ray reads this once, at import, and with it unset a driver
# given ``127.0.0.1:PORT`` rewrites the address to the machine's network address, where a
# loopback-only cluster does not answer. The nodes inherit it from this environment.
os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    env["RAY_USAGE_STATS_ENABLED"] = "0"
    # a throwaway cluster on this machine: no token (a token file a local ray.init() left in
    # ~/.ray would otherwise be required by one node and not sent by another)
    env["RAY_AUTH_MODE"] = "disabled"
    env.setdefault("RALLY_PREFETCH", "0")
    return env


@contextlib.contextmanager
def two_node_cluster():
    """Start the two loopback nodes (see the module docstring), connect this process, yield
    ``(ray module, address)``, and stop everything on exit."""
    import ray
    from ray._private import services
    from ray.cluster_utils import Cluster

    # the driver's own view of loopback: must stay loopback (see the module constant above)
    assert services.resolve_ip_for_localhost("127.0.0.1") == "127.0.0.1", (
        "ray was imported before tests/ray/conftest.py set RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0"
    )
    # the nodes (and the workers they start) inherit this environment
    os.environ.update(_env())
    temp = tempfile.mkdtemp(prefix="rt", dir="/tmp")  # short: Ray's socket paths go in it
    # Ray's test cluster writes the head's address to ``<system temp>/ray/ray_current_cluster``
    # whatever ``temp_dir`` says, and does not create that directory: on a machine where Ray
    # never ran, the cluster fails to start without it
    try:
        from ray._common.utils import get_default_ray_temp_dir
    except ImportError:  # another Ray layout: the same default
        default_dir = os.path.join(tempfile.gettempdir(), "ray")
    else:
        default_dir = get_default_ray_temp_dir()
    os.makedirs(default_dir, exist_ok=True)
    node = {"num_cpus": 1, "node_ip_address": "127.0.0.1", "temp_dir": temp}
    cluster = None
    try:
        cluster = Cluster(
            initialize_head=True,
            head_node_args={**node, "include_dashboard": False},
            shutdown_at_exit=True,
        )
        cluster.add_node(**node)
        ray.init(address=cluster.address, log_to_driver=False)
        alive = [n for n in ray.nodes() if n["Alive"]]
        assert [n["NodeManagerAddress"] for n in alive] == ["127.0.0.1", "127.0.0.1"], alive
        assert cluster.address.startswith("127.0.0.1:"), cluster.address
        yield ray, cluster.address
    finally:
        if ray.is_initialized():
            ray.shutdown()
        if cluster is not None:
            cluster.shutdown()
        shutil.rmtree(temp, ignore_errors=True)


@pytest.fixture(scope="session")
def ray_cluster():
    """``(ray module, address)`` of the two-node cluster this process is connected to."""
    pytest.importorskip("ray")
    with two_node_cluster() as got:
        yield got


@pytest.fixture(scope="session")
def replay_files(tmp_path_factory):
    """An honest recorded run, the same run with one action changed, and a file that is not
    a replay."""
    from tests.rally_env.test_replay import _tamper_action
    from tests.rally_env.test_replay_support import record_run, write_doc

    d = tmp_path_factory.mktemp("replays")
    rp, _ = record_run(seed=3)
    honest = rp.save(d / "honest.rrp.json.gz")
    doc = rp.to_dict()
    _tamper_action(doc, 100)
    tampered = write_doc(d / "tampered.rrp.json.gz", doc)
    junk = d / "junk.rrp.json"
    junk.write_text('{"version": 1')
    return honest, tampered, junk
