"""Shared helpers for the rally_env tests."""

from __future__ import annotations

import math

import numpy as np
import pytest

import rally_env  # noqa: F401  (registers Rally-v0)
from tracks import Finish, PathBuilder, Section, Stage, Start, TerrainSpec

FULL_THROTTLE = np.array([0.0, 1.0, 0.0, 0.0], np.float32)
STILL = np.zeros(4, np.float32)


def rollout(env, actions, reset_on_end: bool = False):
    """Step ``env`` through ``actions``; returns the list of step results."""
    out = []
    for a in actions:
        res = env.step(a)
        out.append(res)
        if reset_on_end and (res[2] or res[3]):
            env.reset()
    return out


def run_episode(env, policy, max_steps: int = 100_000):
    """Run to the end with ``policy(obs, info) -> action``; returns (return, steps, infos)."""
    obs, info = env.reset(seed=0)
    total = 0.0
    infos = [info]
    for t in range(max_steps):
        obs, r, term, trunc, info = env.step(policy(obs, info))
        total += r
        infos.append(info)
        if term or trunc:
            return total, t + 1, infos
    raise AssertionError("episode did not end")


def random_actions(n_steps: int, seed: int, n_cars: int | None = None) -> np.ndarray:
    """Random actions biased to drive forward, including out-of-range values (clipped)."""
    rng = np.random.default_rng(seed)
    shape = (n_steps, 4) if n_cars is None else (n_steps, n_cars, 4)
    a = rng.uniform(-1.2, 1.2, size=shape)
    a[..., 1] = rng.uniform(0.3, 1.1, size=shape[:-1])
    a[..., 2] = rng.uniform(-0.1, 0.3, size=shape[:-1])
    a[..., 3] = rng.uniform(-0.1, 0.1, size=shape[:-1])
    return a.astype(np.float32)


def heading_controller(target_of_x):
    """A steering controller holding a heading (rad, relative to the road) that depends on x."""

    def policy(obs, info):
        x = info["position_m"][0]
        target = target_of_x(x)
        steer = float(np.clip(2.0 * (target - info["heading_error_rad"]), -1.0, 1.0))
        return np.array([steer, 0.7, 0.0, 0.0], np.float32)

    return policy


@pytest.fixture(scope="session")
def hairpin_stage() -> Stage:
    """Two straight legs ~27 m apart joined by a 180-degree hairpin of radius 13 m."""
    b = PathBuilder(knot_spacing_m=10.0)
    b.straight(200.0).turn(13.0, 180.0).straight(200.0)
    knots = b.knots()

    def make(finish_s):
        return Stage(
            name="hairpin",
            knots=knots,
            sections=(Section(0.0, 8.0, "gravel"),),
            finish=Finish(s_m=finish_s),
            start=Start(20.0, 0.0),
            terrain=TerrainSpec(amplitude_m=0.0, roughness_m=0.0, berm_height_m=0.0),
        )

    length = make(100.0).length_m
    return make(math.floor(length - 20.0))


class FakeProc:
    """A precompile worker that never runs: its command line goes to ``spawned``."""

    def __init__(self, spawned: list, args: list, *_: object) -> None:
        spawned.append(args)
        self.waited = False
        self.killed = False

    def wait(self, timeout=None):
        self.waited = True
        return 0

    def kill(self):
        self.killed = True

    def poll(self):
        return 0 if self.waited or self.killed else None


@pytest.fixture
def fresh_module(monkeypatch):
    """``rally_env.precompile`` as in a new process on two cores, on a cold cache."""
    from rally_env import precompile as P

    monkeypatch.setattr(P, "_cores", lambda: 2)
    monkeypatch.setattr(P, "is_warm", lambda kind, fp: False)
    for name, value in (("_started", set()), ("_procs", {}), ("_others", set())):
        monkeypatch.setattr(P, name, value)
    monkeypatch.setattr(P, "_done", [])
    monkeypatch.setattr(P, "_noticed", [])
    return P


@pytest.fixture
def spawned(monkeypatch):
    """Precompile workers never start: the list of the command lines they were given."""
    from rally_env import precompile as P

    out: list = []
    monkeypatch.setattr(P.subprocess, "Popen", lambda *a, **k: FakeProc(out, *a))
    return out
