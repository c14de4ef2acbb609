"""Faults around compiling: a held precompile lock is not waited on longer than compiling
would take; a truncated numba cache entry is compiled again and replaced, never fatal; the
precompile workers die with the process that started them; a start that waits for compiling
says so once on stderr, a warm one says nothing."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import gymnasium as gym
import numba
import pytest

import rally_env  # noqa: F401
from rally_env import precompile as P

ROOT = Path(__file__).resolve().parents[2]
JIT_ON = not numba.config.DISABLE_JIT


class Slept(BaseException):
    """Raised by a stand-in ``time.sleep``: the code under test waited (a BaseException, so
    that no ``except Exception`` swallows it)."""


def _config(monkeypatch):
    """A default env's config; the start its env made is forgotten (a fresh process)."""
    cfg = gym.make("Rally-v0").unwrapped.config
    monkeypatch.setattr(P, "_started", set())
    monkeypatch.setattr(P, "_noticed", [])
    return cfg


def _held_lock_setup(monkeypatch, compiled: dict) -> int:
    pytest.importorskip("fcntl")
    cfg = _config(monkeypatch)
    monkeypatch.setattr(P, "_load_file", lambda: {"fingerprint": P.fingerprint(cfg)})
    monkeypatch.setattr(P, "_cached", lambda d, s: compiled["all"])
    monkeypatch.setattr(P, "_load_signatures", lambda kind="serial": [(None, [None])] * 3)
    monkeypatch.setattr(P.subprocess, "Popen", lambda *a, **k: pytest.fail("spawned a worker"))
    fd = P._try_lock(P._lock_path())  # another process's worker holds the lock, for ever
    assert fd is not None
    assert P.start(cfg) is True
    return fd


def test_a_held_lock_is_not_waited_on_once_the_env_compiled_everything(
    fresh_module, monkeypatch, capsys
):
    compiled = {"all": False}
    fd = _held_lock_setup(monkeypatch, compiled)
    try:
        # the env's share compiles every kernel itself (nobody claimed them)
        monkeypatch.setattr(P, "share", lambda *a, **k: compiled.update(all=True) or 3)

        def no_sleep(s):
            raise Slept(f"slept {s} s on the lock with every kernel in the cache")

        monkeypatch.setattr(P.time, "sleep", no_sleep)
        P.wait(timeout=3600.0)
    finally:
        P._unlock(fd)
    assert capsys.readouterr().err.count("compiling the simulator once") == 1


def test_a_stalled_lock_is_waited_on_about_as_long_as_compiling_would_take(
    fresh_module, monkeypatch
):
    compiled = {"all": False}
    fd = _held_lock_setup(monkeypatch, compiled)
    monkeypatch.setattr(P, "share", lambda *a, **k: 0)  # every kernel claimed by the stalled one
    monkeypatch.setattr(P, "KERNEL_COMPILE_S", 0.1)
    try:
        t = threading.Thread(target=P.wait, kwargs={"timeout": 3600.0}, daemon=True)
        t.start()
        t.join(120.0)  # a hang detector: with the lock held for ever, the old wait took WAIT_S
        assert not t.is_alive(), "the env waited on a stalled lock instead of compiling"
    finally:
        P._unlock(fd)


def test_the_compiling_notice_is_said_once_when_a_start_waits_and_never_when_warm(
    fresh_module, spawned, monkeypatch, capsys
):
    data = P._load_file()
    if data is None:
        pytest.skip("signatures recorded with another numba: no worker here")
    cfg = _config(monkeypatch)
    monkeypatch.setattr(P, "_cached", lambda d, s: True)  # a warm cache
    assert P.start(cfg) is False
    P.wait()
    assert capsys.readouterr().err == ""
    monkeypatch.setattr(P, "_started", set())
    monkeypatch.setattr(P, "_cached", lambda d, s: False)  # a cold one
    monkeypatch.setattr(P, "share", lambda *a, **k: 0)
    assert P.start(cfg) is True
    P.wait()
    P.notice()
    err = capsys.readouterr().err
    assert err.count("rally-env: compiling the simulator once (about ") == 1, err
    assert "cached afterwards" in err


MODULE = """
from physics.jit import njit, njit_inner


@njit_inner
def _helper(x):
    return x * 2


@njit(cache=True)
def f(x):
    return _helper(x) + 1
"""

SCRIPT = """
import sys, warnings
warnings.simplefilter("always")
import physics.jit as jit
import cachemod
jit.notice_cold_compile([cachemod.f], lambda: print("COLD", file=sys.stderr))
st = cachemod.f.stats
print(cachemod.f(20), sum(st.cache_hits.values()), sum(st.cache_misses.values()))
"""


def _run(tmp_path: Path, **env: str) -> subprocess.CompletedProcess:
    e = dict(os.environ)
    e.update(env)
    e["NUMBA_CACHE_DIR"] = str(tmp_path / "cache")
    e["PYTHONPATH"] = os.pathsep.join((str(tmp_path), str(ROOT), e.get("PYTHONPATH", "")))
    return subprocess.run(
        [sys.executable, "-c", SCRIPT], capture_output=True, text=True, env=e, timeout=300
    )


@pytest.mark.skipif(not JIT_ON, reason="JIT disabled")
@pytest.mark.parametrize("interpret", ["0", "1"])
@pytest.mark.parametrize("which", ["nbc", "nbi"])
def test_a_truncated_cache_entry_is_compiled_again_and_replaced(tmp_path, which, interpret):
    (tmp_path / "cachemod.py").write_text(textwrap.dedent(MODULE))
    first = _run(tmp_path, RALLY_INTERPRET=interpret)
    assert first.returncode == 0, first.stderr
    assert first.stdout.split()[0] == "41" and "COLD" in first.stderr
    files = sorted((tmp_path / "cache").rglob(f"*.{which}"))
    assert files, list((tmp_path / "cache").rglob("*"))
    for p in files:
        p.write_bytes(p.read_bytes()[: max(1, p.stat().st_size // 3)])
    broken = _run(tmp_path, RALLY_INTERPRET=interpret)
    assert broken.returncode == 0, broken.stderr
    assert broken.stdout.split()[0] == "41"
    assert "Traceback" not in broken.stderr and "compiling it again" in broken.stderr
    again = _run(tmp_path, RALLY_INTERPRET=interpret)  # the entry was replaced
    assert again.returncode == 0, again.stderr
    value, hits, misses = again.stdout.split()
    assert (value, hits, misses) == ("41", "1", "0"), again.stdout
    assert "COLD" not in again.stderr and "again" not in again.stderr  # a warm start: silent


PARENT = """
import os, sys, time
from rally_env import precompile as P
p = P._spawn(dict(os.environ), "serial")
print(p.pid, flush=True)
time.sleep(600)
"""


def _gone(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return True
    return state in ("Z", "X")


@pytest.mark.skipif(not Path("/proc").is_dir(), reason="reads /proc")
def test_the_workers_die_with_the_process_that_started_them():
    pytest.importorskip("fcntl")
    fd = P._try_lock(P._lock_path("serial"))  # the worker then waits for it: it stays busy
    if fd is None:
        pytest.skip("a real precompile worker is running here")
    e = dict(os.environ)
    e["PYTHONPATH"] = os.pathsep.join((str(ROOT), e.get("PYTHONPATH", "")))
    parent = subprocess.Popen(
        [sys.executable, "-c", PARENT], stdout=subprocess.PIPE, text=True, env=e
    )
    try:
        worker = int(parent.stdout.readline())
        time.sleep(1.0)  # the worker is up and waiting on the lock
        assert not _gone(worker)
        os.kill(parent.pid, signal.SIGKILL)
        parent.wait(30)
        t0 = time.monotonic()
        while not _gone(worker):  # a hang detector: the worker used to outlive its parent
            assert time.monotonic() - t0 < 60, "the worker outlived its parent"
            time.sleep(0.1)
    finally:
        P._unlock(fd)
        if parent.poll() is None:
            parent.kill()
