"""Faults around compiling: a numba cache file cut short (a full disk, a killed process) is
deleted and compiled again (only a second failure raises an error naming the cache and
``rally warmup --clear``, which deletes the project's entries); the precompile workers die
with the process that started them."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numba
import pytest

import rally_env  # noqa: F401
from rally_env import precompile as P

ROOT = Path(__file__).resolve().parents[2]
JIT_ON = not numba.config.DISABLE_JIT

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
from rally_env import precompile as P
import cachemod
print(P.cache_safe(cachemod.f, 20))
"""

RECOMPILE = "compiling it again"


def _run(tmp_path: Path, code: str) -> subprocess.CompletedProcess:
    e = dict(os.environ)
    e["NUMBA_CACHE_DIR"] = str(tmp_path / "cache")
    e["PYTHONPATH"] = os.pathsep.join((str(tmp_path), str(ROOT), e.get("PYTHONPATH", "")))
    return subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=e, timeout=600
    )


def _truncate(p: Path) -> None:
    p.write_bytes(p.read_bytes()[: max(1, p.stat().st_size // 3)])


@pytest.mark.skipif(not JIT_ON, reason="JIT disabled")
@pytest.mark.parametrize("which", ["nbc", "nbi"])
def test_a_truncated_cache_file_is_compiled_again(tmp_path, which):
    (tmp_path / "cachemod.py").write_text(textwrap.dedent(MODULE))
    first = _run(tmp_path, SCRIPT)
    assert first.returncode == 0 and first.stdout.split() == ["41"], first.stderr
    files = sorted((tmp_path / "cache").rglob(f"cachemod.f-*.{which}"))
    assert files, list((tmp_path / "cache").rglob("*"))
    for p in files:
        _truncate(p)
    again = _run(tmp_path, SCRIPT)
    assert again.returncode == 0 and again.stdout.split() == ["41"], again.stderr
    assert again.stderr.count(RECOMPILE) == 1 and "cachemod.f-" in again.stderr
    assert all(p.stat().st_size > 1 for p in files)  # written anew
    last = _run(tmp_path, SCRIPT)
    assert last.returncode == 0 and last.stdout.split() == ["41"] and not last.stderr


FAILS = """
from rally_env import precompile as P
def cut_short():
    raise EOFError("Ran out of input")
P.cache_safe(cut_short)
"""


@pytest.mark.skipif(not JIT_ON, reason="JIT disabled")
def test_an_entry_still_unreadable_after_the_retry_names_the_cache_and_the_fix(tmp_path):
    broken = _run(tmp_path, FAILS)
    assert broken.returncode != 0 and broken.stderr.count(RECOMPILE) == 1
    assert "CacheFileError" in broken.stderr and "rally warmup --clear" in broken.stderr
    assert str(tmp_path / "cache") in broken.stderr


ENV = """
import hashlib
import gymnasium as gym
import numpy as np
import rally_env
env = gym.make("Rally-v0")
obs, _ = env.reset(seed=3)
for _ in range(30):
    obs, *_ = env.step(np.array([0.6, 0.1, 0.0, 0.0], np.float32))
print(hashlib.sha256(obs.tobytes()).hexdigest())
"""


@pytest.mark.skipif(not JIT_ON, reason="JIT disabled")
def test_an_env_recompiles_a_truncated_entry_and_steps_the_same(tmp_path):
    clean = _run(tmp_path, ENV)  # an empty cache: compiles and writes every entry
    assert clean.returncode == 0, clean.stderr[-3000:]
    cache = tmp_path / "cache"
    cut = sorted(cache.rglob("kernel.step_cars-*.nbc")) + sorted(
        cache.rglob("kernels.reset_cars-*.nbi")
    )
    assert len(cut) == 2, sorted(p.name for p in cache.rglob("*.nb[ic]"))
    for p in cut:
        _truncate(p)
    again = _run(tmp_path, ENV)
    assert again.returncode == 0, again.stderr[-3000:]
    assert again.stdout == clean.stdout
    assert again.stderr.count(RECOMPILE) == 2, again.stderr
    assert "step_cars" in again.stderr and "reset_cars" in again.stderr
    assert all(p.stat().st_size > 1 for p in cut)
    warm = _run(tmp_path, ENV)  # the entries written anew load
    assert warm.returncode == 0 and warm.stdout == clean.stdout
    assert RECOMPILE not in warm.stderr and "compiling the simulator" not in warm.stderr


CLEAR = """
import numpy as np
from rally_env import precompile as P
from rally_env.warmup import clear_cache
from physics import kernel
from physics import layout as L
kernel.reach_m(np.zeros((1, L.N_PARAMS)), 0)
print(len(list(__import__("pathlib").Path(kernel.reach_m.stats.cache_path).glob("*.nb[ic]"))))
P.mark_warm("serial", (0, False, False))
print(clear_cache(), P.is_warm("serial", (0, False, False)))
"""


@pytest.mark.skipif(not JIT_ON, reason="JIT disabled")
def test_clearing_the_cache_deletes_the_project_entries_and_the_stamps(tmp_path):
    out = _run(tmp_path, CLEAR)
    assert out.returncode == 0, out.stderr[-3000:]
    files, deleted, warm = out.stdout.split()
    assert int(files) >= 2 and int(deleted) >= int(files) and warm == "False"
    assert not list((tmp_path / "cache").rglob("*.nb[ic]"))


PARENT = """
import os, sys, time
from rally_env import precompile as P
p = P._spawn("serial")
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
