"""Python first: while the precompile workers fill a cold numba cache, a small env runs the
Python twins of what is not compiled yet (physics.jit.interpret_while, rally_env.precompile),
with the same results bit for bit."""

from __future__ import annotations

import json
import textwrap
import time

import numba
import pytest

from physics import jit
from rally_env import precompile as P
from tests.rally_env.test_replay_support import run_py

JIT_ON = not numba.config.DISABLE_JIT
pytestmark = pytest.mark.skipif(not JIT_ON, reason="JIT disabled")

# one run of Rally-v0: per step a digest of the observation and the reward, then the state's
# digest; ``tick()`` is called after every step (the subprocesses use it to end the tier)
_DRIVE = textwrap.dedent(
    """
    import hashlib
    import numpy as np
    import gymnasium as gym
    import rally_env
    from rally_env.core import state_digest

    def drive(tick=lambda i: None, steps=60):
        env = gym.make("Rally-v0")
        obs, _ = env.reset(seed=4)
        rng = np.random.default_rng(7)
        out = [hashlib.sha256(obs.tobytes()).hexdigest()[:16]]
        for i in range(steps):
            a = np.array([rng.uniform(-0.4, 0.4), 0.9, 0.0, 0.0], np.float32)
            obs, r, term, trunc, _ = env.step(a)
            out.append([hashlib.sha256(obs.tobytes()).hexdigest()[:16], float(r), term, trunc])
            tick(i)
        out.append(state_digest(env.unwrapped.get_state()))
        env.close()
        return out
    """
)


def _compiled_run() -> list:
    ns: dict = {}
    exec(_DRIVE, ns)
    return ns["drive"]()


def _subprocess_run(script: str, env: dict[str, str]) -> list:
    r = run_py(_DRIVE + textwrap.dedent(script), env=env, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    return json.loads(r.stdout.strip().splitlines()[-1])


def test_python_twins_drive_bit_identically_to_compiled_code(tmp_path):
    """An empty cache, no workers and Python first held on: nothing compiles, every kernel
    runs as its twin, and the run is the compiled run to the bit."""
    got = _subprocess_run(
        """
        import json
        from physics import jit, kernel
        from rally_env import kernels as K
        from importlib import import_module
        bake = import_module("tracks.bake")
        jit.interpret_while(lambda: True)
        out = drive()
        compiled = [d for d in (kernel.step_cars, K.reset_cars, K.post_step, bake._fill_tiles)
                    if d.signatures]
        assert not compiled, compiled
        print(json.dumps(out))
        """,
        {"NUMBA_CACHE_DIR": str(tmp_path), "RALLY_PRECOMPILE": "0"},
    )
    assert got == _compiled_run()


def test_a_run_switches_to_compiled_code_mid_episode():
    """Twins for the first 20 steps (the cache is made to look empty), then the tier ends
    and the kernels load from the cache: the same run as compiled from the start."""
    want = _compiled_run()  # also puts the kernels in the suite's cache
    got = _subprocess_run(
        """
        import json
        from physics import jit, kernel
        steps = [0]
        real = jit._in_cache
        jit._in_cache = lambda d, s: False
        jit.interpret_while(lambda: steps[0] < 20)
        def tick(i):
            steps[0] = i + 1
            if steps[0] == 20:
                assert not kernel.step_cars.signatures  # still Python so far
                jit._in_cache = real
        out = drive(tick)
        assert not jit.interpreting() and kernel.step_cars.signatures
        print(json.dumps(out))
        """,
        {"RALLY_PRECOMPILE": "0"},
    )
    assert got == want


@jit.njit(cache=True)
def _plus_one(x):
    return _inner_double(x) + 1.0


@jit.njit_inner
def _inner_double(x):
    return 2.0 * x


def test_a_tiered_function_runs_as_python_until_the_cache_has_it(monkeypatch):
    busy = [True]
    monkeypatch.setattr(jit, "_in_cache", lambda d, s: False)
    jit.interpret_while(lambda: busy[0])
    try:
        assert _plus_one(2.0) == 5.0
        assert _plus_one.signatures == []  # ran as Python, compiled nothing
        assert _inner_double(3.0) == 6.0  # a kernel-only helper's twin, from Python
        monkeypatch.setattr(jit, "_in_cache", lambda d, s: True)  # "a worker cached it"
        jit._next_look.clear()  # (the index is read at most every 0.1 s per function)
        assert _plus_one(2.0) == 5.0
        assert len(_plus_one.signatures) == 1
    finally:
        jit.stop_interpreting()
    assert not jit.interpreting()
    with pytest.raises(TypeError, match="compiled code only"):
        _inner_double(3.0)


def test_the_tier_ends_when_its_condition_turns_false():
    busy = [True]
    jit.interpret_while(lambda: busy[0])
    try:
        assert jit.interpreting()
        busy[0] = False
        deadline = 100
        while jit.interpreting() and deadline:  # checked at most every 50 ms
            deadline -= 1
            time.sleep(0.01)
        assert not jit.interpreting()
    finally:
        jit.stop_interpreting()


def test_twins_call_twins():
    twin = jit.python_twin(_plus_one)
    assert not isinstance(twin, numba.core.dispatcher.Dispatcher)
    assert twin.__globals__["_inner_double"] is jit.python_twin(_inner_double)
    assert twin(1.5) == 4.0


def test_twins_reach_helpers_through_module_aliases_as_twins():
    """Compiled code may call ``K._records(...)`` through a module alias: a twin's ``K`` gives
    twins, so a twin never calls a kernel-only helper's dispatcher (which would refuse it once
    Python first is over)."""
    from rally_env import info, kernels

    K = jit.python_twin(info._fill_cars).__globals__["K"]
    assert K._records is jit.python_twin(kernels._records)
    assert K.N_E == kernels.N_E
    with pytest.raises(AttributeError, match="no attribute"):
        K.no_such_name  # noqa: B018


@pytest.fixture
def cold(fresh_module, spawned, monkeypatch):
    """A new process on a cold cache with Python first on: (a default config, spawned)."""
    from rally_env.config import RallyConfig

    monkeypatch.setattr(P, "_cached", lambda d, s: False)
    monkeypatch.setenv("RALLY_INTERPRET", "1")
    if P._load_file() is None:
        pytest.skip("the signatures were recorded with another numba: no worker here")
    return RallyConfig.build(stage="opener"), spawned


def test_a_small_env_on_a_cold_cache_starts_two_workers_and_runs_python(cold):
    cfg, spawned = cold
    assert P.start(cfg, False, 1) is True
    assert [a[-2:] for a in spawned] == [
        ["rally_env.precompile", "serial-all"],
        ["serial-all", "back"],
    ]
    assert jit.interpreting()
    # a small threaded env joins: its worker compiles its post-step kernel too
    assert P.start(cfg, True, 4) is True
    assert spawned[-1][-1] == "threaded-all" and jit.interpreting()
    P.wait(useful=False)  # an env of other types: the workers stop, and so does the tier
    jit.stop_interpreting()
    assert all(p.killed for p in P._done) or not P._procs


def test_python_first_lasts_while_a_worker_runs(cold):
    cfg, _ = cold
    P.start(cfg, False, 1)
    procs = list(P._procs.values())
    assert len(procs) == 2 and jit.interpreting()
    procs[0].waited = True
    jit._TIER.checked = 0.0
    assert jit.interpreting()  # the other still compiles
    procs[1].waited = True
    jit._TIER.checked = 0.0
    assert not jit.interpreting()


def test_python_first_ends_after_wait_s_even_if_a_worker_hangs(cold, monkeypatch):
    cfg, _ = cold
    P.start(cfg, False, 1)
    assert jit.interpreting()
    monkeypatch.setattr(P, "WAIT_S", 0.0)  # the workers never finish ("hang")
    jit._TIER.checked = 0.0
    assert not jit.interpreting()


def test_a_big_or_threaded_env_does_not_run_python(cold, monkeypatch):
    cfg, spawned = cold
    P.start(cfg, True, 4)  # threaded: its own worker, no tier
    assert [a[-1] for a in spawned] == ["threaded"] and not jit.interpreting()
    monkeypatch.setattr(P, "_started", set())
    spawned.clear()
    P.start(cfg, False, P.INTERPRET_MAX_CARS + 1)
    assert [a[-1] for a in spawned] == ["serial"] and not jit.interpreting()
    # a big env ends a small env's Python first
    monkeypatch.setattr(P, "_started", set())
    jit.interpret_while(lambda: True)
    P.start(cfg, False, P.INTERPRET_MAX_CARS + 1)
    assert not jit.interpreting()


def test_python_first_is_off_with_rally_interpret_0(cold, monkeypatch):
    cfg, spawned = cold
    monkeypatch.setenv("RALLY_INTERPRET", "0")
    assert P.start(cfg, False, 1) is True
    assert [a[-1] for a in spawned] == ["serial"] and not jit.interpreting()
