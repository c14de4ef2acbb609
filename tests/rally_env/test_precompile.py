"""The first start on a cold numba cache (rally_env.precompile) and the kernels compiled for
kernels only (physics.jit.njit_inner)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import gymnasium as gym
import numba
import numpy as np
import pytest

import rally_env  # noqa: F401
from physics import kernel
from physics.jit import InnerDispatcher
from rally_env import precompile as P
from rally_env.vector import RallyVectorEnv

ROOT = Path(__file__).resolve().parents[2]
JIT_ON = not numba.config.DISABLE_JIT


def _config(**kw):
    from rally_env.config import RallyConfig

    return RallyConfig.build(**kw)  # (a gym.make would start the precompile worker itself)


@pytest.mark.skipif(not JIT_ON, reason="JIT disabled")
def test_the_recorded_signatures_are_what_the_default_envs_compile():
    data = P._load_file()
    env = gym.make("Rally-v0")
    env.reset(seed=0)
    env.step(env.action_space.sample())
    assert tuple(data["fingerprint"]) == P.fingerprint(env.unwrapped.config)
    env.close()
    vec = RallyVectorEnv(num_envs=4, parallel=True)
    vec.reset(seed=0)
    vec.step(np.stack([vec.single_action_space.sample() for _ in range(4)]))
    vec.close()
    for kind in P.KERNELS:
        for disp, sigs in P._load_signatures(kind):
            for sig in sigs:
                assert sig in disp.signatures, (
                    f"{disp.py_func.__qualname__}: a default {kind} env no longer compiles the "
                    "recorded signature; run python -m rally_env.warmup record"
                )


def test_a_description_gives_back_its_type():
    for kind in P.KERNELS:
        for sigs in P._load_file()["signatures"][kind]:
            for descs in sigs:
                for d in descs:
                    assert P.describe(numba.typeof(P.placeholder(d))) == d


@pytest.mark.skipif(not JIT_ON, reason="JIT disabled")
def test_the_post_step_kernel_compiled_beside_the_worker_is_the_one_a_step_calls(
    fresh_module, monkeypatch
):
    """A threaded env whose worker runs compiles its post-step kernel during its first reset,
    for the argument types its steps then pass (no second specialization)."""
    from rally_env import kernels as K

    compiled = []
    monkeypatch.setattr(P, "start", lambda config, threaded=False: True)
    monkeypatch.setattr(P, "running", lambda threaded=False: True)
    monkeypatch.setattr(P, "wait", lambda *a, **k: None)
    monkeypatch.setattr(P, "compile_beside", lambda d, args: compiled.append((d, args)))
    vec = RallyVectorEnv(num_envs=4, parallel=True)
    vec.reset(seed=0)
    monkeypatch.undo()
    vec.step(np.stack([vec.single_action_space.sample() for _ in range(4)]))
    ((disp, args),) = compiled
    assert disp is K.post_step_parallel
    assert tuple(numba.typeof(a) for a in args) in disp.signatures
    assert len(disp.signatures) == 1
    vec.close()


_LOADS = textwrap.dedent(
    """
    from rally_env import precompile as P
    hits = misses = 0
    for kind in P.KERNELS:
        for d, sigs in P._load_signatures(kind):
            for s in sigs:
                d.compile(s)
            hits += sum(d.stats.cache_hits.values())
            misses += sum(d.stats.cache_misses.values())
    print(hits, misses)
    """
)


def _run(args, env):
    out = subprocess.run(
        [sys.executable, *args], env=env, cwd=ROOT, capture_output=True, text=True, timeout=900
    )
    assert out.returncode == 0, out.stderr[-3000:]
    return out.stdout.split()


@pytest.mark.skipif(not JIT_ON, reason="JIT disabled")
def test_the_worker_fills_an_empty_cache_with_every_recorded_kernel(tmp_path):
    env = dict(os.environ, NUMBA_CACHE_DIR=str(tmp_path), PYTHONPATH=str(ROOT))
    _run(["-m", "rally_env.precompile", "serial"], env)
    _run(["-m", "rally_env.precompile", "threaded"], env)
    hits, misses = _run(["-c", _LOADS], env)
    assert int(hits) >= len(P.SERIAL) + len(P.THREADED) and misses == "0"  # all loaded


@pytest.mark.skipif(not JIT_ON, reason="JIT disabled")
def test_the_worker_stops_at_a_kernel_the_env_claimed(tmp_path, monkeypatch):
    # the env compiles from the end of the list back and holds each kernel's claim: the
    # worker, first to last, compiles up to it and leaves the rest to the env
    monkeypatch.setenv("NUMBA_CACHE_DIR", str(tmp_path))  # the claims' lock files name it
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    fd = P._claim("serial", 1)
    assert fd is not None
    try:
        code = "from rally_env import precompile as P; print(P.compile_all('serial'))"
        assert _run(["-c", code], env)[-1] == "1"
    finally:
        P._unlock(fd)


class _Kernel:
    """A stand-in kernel: records when it was compiled."""

    def __init__(self, i: int, log: list) -> None:
        self.i, self.log = i, log

    def compile(self, sig) -> None:
        self.log.append(self.i)


def _kernels(monkeypatch, n: int) -> list:
    log: list = []
    kernels = [(_Kernel(i, log), [()]) for i in range(n)]
    monkeypatch.setattr(P, "_load_signatures", lambda kind="serial": kernels)
    return log


def test_an_env_compiles_the_last_kernels_then_takes_the_workers_in_turn(
    fresh_module, monkeypatch, tmp_path
):
    """The worker holds the claim on kernel 2 of 6: the env compiles 5, 4, 3, then takes 2
    when the worker releases it, then 1 and 0 (from the cache)."""
    pytest.importorskip("fcntl")
    monkeypatch.setenv("NUMBA_CACHE_DIR", str(tmp_path))
    log = _kernels(monkeypatch, 6)
    P._others.add("serial")  # another process's worker
    fd = P._claim("serial", 2)
    released = []

    def release():
        time.sleep(0.3)
        released.append(list(log))
        P._unlock(fd)

    threading.Thread(target=release).start()
    P.wait()
    assert released == [[5, 4, 3]]
    assert log == [5, 4, 3, 2, 1, 0]


def test_a_stalled_claim_is_waited_on_about_as_long_as_compiling_would_take(
    fresh_module, monkeypatch, tmp_path
):
    pytest.importorskip("fcntl")
    monkeypatch.setenv("NUMBA_CACHE_DIR", str(tmp_path))
    log = _kernels(monkeypatch, 3)
    monkeypatch.setattr(P, "KERNEL_COMPILE_S", 0.2)
    P._others.add("serial")
    fd = P._claim("serial", 2)  # held for ever by a stalled process
    try:
        t0 = time.monotonic()
        P.wait()
        assert time.monotonic() - t0 < 30.0
        assert log == [2, 1, 0]  # compiled here after the wait
    finally:
        P._unlock(fd)


def test_no_worker_when_turned_off_warm_or_for_other_envs(fresh_module, monkeypatch, capsys):
    spawned = []
    monkeypatch.setattr(P.subprocess, "Popen", lambda *a, **k: spawned.append(a))
    cfg = _config()

    def again(c=cfg):
        monkeypatch.setattr(P, "_started", set())
        return P.start(c)

    monkeypatch.setenv("RALLY_PRECOMPILE", "0")
    assert again() is False
    monkeypatch.delenv("RALLY_PRECOMPILE")
    monkeypatch.setattr(P, "_cores", lambda: 1)  # the worker would only compete
    assert again() is False
    monkeypatch.setattr(P, "_cores", lambda: 2)
    assert again(_config(road_ahead=True)) is False  # other types than the recorded ones
    monkeypatch.setattr(P, "_load_file", lambda: None)  # no recorded types
    assert again() is False
    assert spawned == []
    # each of those cold starts compiles in this process: said once
    assert capsys.readouterr().err.count("compiling the simulator once (about 25 s") == 1
    monkeypatch.setattr(P, "_noticed", [])
    monkeypatch.setattr(P, "is_warm", lambda kind, fp: True)  # a warm cache
    assert again() is False
    assert spawned == [] and capsys.readouterr().err == ""  # a warm start says nothing


@pytest.mark.skipif(not JIT_ON, reason="JIT disabled")
def test_a_cold_cache_starts_one_worker_per_process_and_kind(fresh_module, spawned, capsys):
    cfg = _config()
    assert P.start(cfg) is True
    assert P.start(cfg) is True  # once per process
    assert P.start(cfg, threaded=True) is True
    assert [a[-1] for a in spawned] == ["serial", "threaded"]
    assert capsys.readouterr().err.count("compiling the simulator once (about 15 s") == 1
    assert P.running() and P.running(True)
    proc = P._procs["threaded"]
    P.wait(True, useful=False)  # an env of other types stops the worker
    assert proc.killed and not P.running(True)


def test_a_worker_of_another_process_is_shared_through_the_lock(fresh_module, monkeypatch):
    pytest.importorskip("fcntl")
    monkeypatch.setattr(P.subprocess, "Popen", lambda *a, **k: pytest.fail("spawned a second"))
    fd = P._try_lock(P._lock_path())  # "another process's worker" holds the lock
    assert fd is not None
    try:
        assert P.start(_config()) is True
        assert P.running()
    finally:
        P._unlock(fd)


def test_the_warm_stamp_follows_the_sources(monkeypatch, tmp_path):
    monkeypatch.setattr(P, "_stamp_path", lambda kind, fp: tmp_path / f"{kind}-{fp}")
    monkeypatch.setattr(P, "_marked", set())
    fp = (0, False, False)
    assert not P.is_warm("serial", fp)
    P.mark_warm("serial", fp)
    assert P.is_warm("serial", fp) and not P.is_warm("threaded", fp)
    monkeypatch.setattr(P, "_sources_digest", lambda: "a source changed")
    assert not P.is_warm("serial", fp)


@pytest.mark.skipif(not JIT_ON, reason="JIT disabled")
def test_a_kernel_only_helper_refuses_a_call_from_python():
    assert isinstance(kernel._substep, InnerDispatcher)
    with pytest.raises(TypeError, match="compiled for calls from compiled code only"):
        kernel._substep(0, np.zeros((1, 1)))
    # entry points keep their wrappers
    assert not isinstance(kernel.step_cars, InnerDispatcher)


def test_rally_warmup_compiles_ahead_and_clears_first_when_told(monkeypatch, capsys):
    from rally_env import warmup
    from rally_env.cli import main

    calls = []
    monkeypatch.setattr(warmup, "warmup", lambda clear=False: calls.append(clear) or {"env_s": 1.0})
    assert main(["warmup"]) == 0 and main(["warmup", "--clear"]) == 0
    assert calls == [False, True] and '"env_s": 1.0' in capsys.readouterr().out
