"""The precompile worker (rally_env.precompile) and the kernels compiled for kernels only
(physics.jit.njit_inner)."""

from __future__ import annotations

import os
import pickle
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


def _recorded() -> dict:
    with open(P.SIGNATURES, "rb") as f:
        return pickle.load(f)


def _skip_other_numba(data):
    if data["numba"] != numba.__version__:
        pytest.skip(
            f"recorded with numba {data['numba']}, this is {numba.__version__}: the worker "
            "stays off here (python -m rally_env.precompile_record re-records)"
        )


@pytest.mark.skipif(not JIT_ON, reason="JIT disabled")
def test_the_recorded_signatures_are_what_the_default_envs_compile():
    data = _recorded()
    _skip_other_numba(data)
    env = gym.make("Rally-v0")
    env.reset(seed=0)
    env.step(env.action_space.sample())
    assert tuple(data["fingerprint"]) == P.fingerprint(env.unwrapped.config)
    env.close()
    vec = RallyVectorEnv(num_envs=4, parallel=True)
    vec.reset(seed=0)
    vec.step(np.stack([vec.single_action_space.sample() for _ in range(4)]))
    vec.close()
    for kind, kernels in P.KERNELS.items():
        for (mod, name), sigs in zip(kernels, data["signatures"][kind], strict=True):
            disp = getattr(sys.modules[mod], name)
            for sig in sigs:
                assert sig in disp.signatures, (
                    f"{mod}.{name}: a default {kind} env no longer compiles the recorded "
                    "signature; run python -m rally_env.precompile_record"
                )


@pytest.mark.skipif(not JIT_ON, reason="JIT disabled")
def test_the_post_step_kernel_compiled_beside_the_worker_is_the_one_a_step_calls(
    fresh_module, monkeypatch
):
    """A threaded env whose worker runs compiles its post-step kernel during its first reset,
    for the argument types its steps then pass (no second specialization)."""
    from rally_env import kernels as K

    _skip_other_numba(_recorded())
    compiled = []
    monkeypatch.setattr(P, "start", lambda config, threaded=False, n_cars=1: True)
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


_CHECK = textwrap.dedent(
    """
    from rally_env import precompile as P
    kernels = P._load_signatures("serial") + P._load_signatures("threaded")
    print(all(P._cached(d, s) for d, sigs in kernels for s in sigs), len(kernels))
    """
)


@pytest.mark.skipif(not JIT_ON, reason="JIT disabled")
def test_the_worker_fills_an_empty_cache_with_every_recorded_kernel(tmp_path):
    _skip_other_numba(_recorded())
    env = dict(os.environ, NUMBA_CACHE_DIR=str(tmp_path), PYTHONPATH=str(ROOT))

    def run(args):
        return subprocess.run(
            [sys.executable, *args], env=env, cwd=ROOT, capture_output=True, text=True, timeout=600
        )

    n = str(len(P.SERIAL) + len(P.THREADED))
    assert run(["-c", _CHECK]).stdout.split() == ["False", n]  # empty
    assert run(["-m", "rally_env.precompile", "serial"]).returncode == 0
    assert run(["-m", "rally_env.precompile", "threaded"]).returncode == 0
    assert run(["-c", _CHECK]).stdout.split() == ["True", n]
    again = "from rally_env import precompile as P; print(P.compile_all('threaded'))"
    assert run(["-c", again]).stdout.split() == ["0"]  # nothing loaded only to be dropped
    # the lists of Python first: the stage's functions too, and the threaded post-step kernel
    every = _CHECK.replace(
        '"serial") + P._load_signatures("threaded")',
        '"serial-all") + P._load_signatures("threaded-all")',
    )
    n_all = str(len(P.SERIAL_ALL) + len(P.THREADED_ALL))
    assert run(["-c", every]).stdout.split() == ["False", n_all]
    # the second worker passes over what is cached (the end of the list is) and fills the rest
    assert run(["-m", "rally_env.precompile", "serial-all", "back"]).returncode == 0
    assert run(["-m", "rally_env.precompile", "threaded-all"]).returncode == 0
    assert run(["-c", every]).stdout.split() == ["True", n_all]


_CACHED = textwrap.dedent(
    """
    from rally_env import precompile as P
    print("".join("1" if all(P._cached(d, s) for s in sigs) else "0"
                  for d, sigs in P._load_signatures("serial")))
    """
)


def _claimed_run(tmp_path, monkeypatch, claim: int, code: list[str]) -> tuple[str, str]:
    """Hold the claim on serial kernel ``claim`` of a fresh cache while a process runs
    ``code``; (its last output line, which kernels the cache then holds as 0/1)."""
    _skip_other_numba(_recorded())
    monkeypatch.setenv("NUMBA_CACHE_DIR", str(tmp_path))  # the claims' lock files name it
    env = dict(os.environ, PYTHONPATH=str(ROOT))

    def run(args):
        out = subprocess.run(
            [sys.executable, *args], env=env, cwd=ROOT, capture_output=True, text=True, timeout=600
        )
        assert out.returncode == 0, out.stderr[-2000:]
        return out.stdout.strip().splitlines()[-1] if out.stdout.strip() else ""

    fd = P._claim("serial", claim)
    assert fd is not None
    try:
        last = run(code)
    finally:
        P._unlock(fd)
    return last, run(["-c", _CACHED])


@pytest.mark.skipif(not JIT_ON, reason="JIT disabled")
def test_the_worker_stops_at_a_kernel_the_env_claimed(tmp_path, monkeypatch):
    # the env compiles from the end of the list back and holds each kernel's claim meanwhile:
    # the worker, first to last, compiles up to it and leaves the rest to the env
    code = ["-c", "from rally_env import precompile as P; print(P.compile_all('serial'))"]
    last, cached = _claimed_run(tmp_path, monkeypatch, 1, code)
    assert last == "1"  # the first kernel only (its callees in the list are cached with it)
    assert cached[:2] == "10"


@pytest.mark.skipif(not JIT_ON, reason="JIT disabled")
def test_an_env_compiles_the_last_kernels_until_it_meets_the_worker(tmp_path, monkeypatch):
    # the worker holds the claim on the last kernel but one: the env's share compiles the
    # last kernel only, then stops there (and waits for the worker)
    n = len(P.SERIAL)
    code = ["-c", "from rally_env import precompile as P; print(P.share(False))"]
    last, cached = _claimed_run(tmp_path, monkeypatch, n - 2, code)
    assert last == "1"
    assert cached[0] == "0" and cached[-2:] == "01"


def _config(**kw):
    return gym.make("Rally-v0", **kw).unwrapped.config


def test_no_worker_when_turned_off_warm_or_for_other_envs(fresh_module, monkeypatch):
    spawned = []
    monkeypatch.setattr(P.subprocess, "Popen", lambda *a, **k: spawned.append(a))
    cfg = _config()

    def again():
        monkeypatch.setattr(P, "_started", set())
        return P.start(cfg)

    monkeypatch.setenv("RALLY_PRECOMPILE", "0")
    assert again() is False
    monkeypatch.delenv("RALLY_PRECOMPILE")
    monkeypatch.setattr(P, "_cached", lambda d, s: True)  # a warm cache
    assert again() is False
    monkeypatch.setattr(P, "_cached", lambda d, s: False)
    monkeypatch.setattr(P, "_cores", lambda: 1)  # the worker would only compete
    assert again() is False
    monkeypatch.setattr(P, "_cores", lambda: 2)
    cfg = _config(road_ahead=True)  # other types than the recorded ones
    assert again() is False
    cfg = _config()
    monkeypatch.setattr(P, "_load_file", lambda: None)  # another numba version
    assert again() is False
    assert spawned == []


@pytest.mark.skipif(not JIT_ON, reason="JIT disabled")
def test_a_cold_cache_starts_one_worker_per_process_and_kind(fresh_module, spawned, monkeypatch):
    _skip_other_numba(_recorded())
    monkeypatch.setattr(P, "_cached", lambda d, s: False)
    cfg = _config()
    assert P.start(cfg) is True
    assert P.start(cfg) is True  # once per process
    assert P.start(cfg, threaded=True) is True
    # Python first is off in the suite (tests/conftest.py): one worker per kind
    assert [a[-1] for a in spawned] == ["serial", "threaded"]
    proc = P._procs["serial"]
    assert P.running() and P.running(True)
    P.wait()
    assert proc.waited and not P.running()
    P.wait()  # nothing left to wait for
    proc = P._procs["threaded"]
    P.wait(True, useful=False)  # an env of other types stops waiting for it
    assert proc.killed and not proc.waited and not P.running(True)


def test_a_worker_of_another_process_is_waited_for_through_the_lock(fresh_module, monkeypatch):
    pytest.importorskip("fcntl")
    monkeypatch.setattr(P, "_cached", lambda d, s: False)
    cfg = _config()
    recorded = {"fingerprint": P.fingerprint(cfg)}
    monkeypatch.setattr(P, "_load_file", lambda: recorded)
    monkeypatch.setattr(P, "_load_signatures", lambda kind="serial": [(None, [None])])
    monkeypatch.setattr(P.subprocess, "Popen", lambda *a, **k: pytest.fail("spawned a second"))
    fd = P._try_lock(P._lock_path())  # "another process's worker" holds the lock
    assert fd is not None
    released = []
    try:
        assert P.start(cfg) is True

        def release():
            time.sleep(0.3)
            released.append(time.monotonic())
            P._unlock(fd)

        threading.Thread(target=release).start()
        P.wait(timeout=30.0)
        assert released and time.monotonic() >= released[0]
    finally:
        if not released:
            P._unlock(fd)


@pytest.mark.skipif(not JIT_ON, reason="JIT disabled")
def test_a_kernel_only_helper_refuses_a_call_from_python():
    assert isinstance(kernel._substep, InnerDispatcher)
    with pytest.raises(TypeError, match="compiled for calls from compiled code only"):
        kernel._substep(0, np.zeros((1, 1)))
    # entry points keep their wrappers
    assert not isinstance(kernel.step_cars, InnerDispatcher)
