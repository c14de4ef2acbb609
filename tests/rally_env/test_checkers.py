"""Gymnasium's and stable-baselines3's env checkers, registration, spaces and import hygiene."""

from __future__ import annotations

import inspect
import subprocess
import sys
import warnings

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env

import rally_env
from rally_env import RallyEnv, RallyVectorEnv

SB3_ACTION_WARNING = "symmetric and normalized Box action space"


def _no_warnings(fn, allowed: tuple[str, ...] = ()):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        fn()
    unexpected = [str(w.message) for w in caught if not any(a in str(w.message) for a in allowed)]
    assert not unexpected, unexpected


@pytest.mark.parametrize("kwargs", [{}, {"discrete_actions": True}, {"randomize": True}])
def test_gymnasium_check_env(kwargs):
    env = gym.make("RallyDirect-v0", **kwargs)
    _no_warnings(lambda: check_env(env.unwrapped, skip_render_check=True))


def test_gymnasium_check_env_with_rendering():
    pytest.importorskip("pygame")
    env = gym.make("RallyDirect-v0", render_mode="rgb_array")
    _no_warnings(lambda: check_env(env.unwrapped))


def test_sb3_check_env():
    sb3 = pytest.importorskip("stable_baselines3")
    from stable_baselines3.common.env_checker import check_env as sb3_check

    env = RallyEnv()
    # The only warning: SB3 recommends a symmetric [-1, 1] action Box, but the issue fixes
    # throttle/brake/handbrake to [0, 1] (CarRacing's convention).
    _no_warnings(lambda: sb3_check(env, warn=True), allowed=(SB3_ACTION_WARNING,))
    _no_warnings(lambda: sb3_check(RallyEnv(discrete_actions=True), warn=True))
    assert sb3 is not None


@pytest.mark.parametrize("vehicle", ["rover", "rally-car", "truck", "tank", "bike"])
def test_sb3_check_env_every_v1_vehicle(vehicle):
    pytest.importorskip("stable_baselines3")
    from stable_baselines3.common.env_checker import check_env as sb3_check

    env = RallyEnv(version=1, vehicle=vehicle)
    _no_warnings(lambda: sb3_check(env, warn=True), allowed=(SB3_ACTION_WARNING,))


def test_registration_and_make_vec():
    for env_id in (*rally_env.ENV_IDS, *rally_env.LEGACY_ENV_IDS):
        assert env_id in gym.registry
        assert gym.spec(env_id).vector_entry_point == "rally_env.vector:RallyVectorEnv"
    rally_env.register_envs()  # idempotent, no warning
    gym.register_envs(rally_env)
    env = gym.make("rally_env:RallyDirect-v0")
    assert isinstance(env.unwrapped, RallyEnv)
    assert env.unwrapped.config.stage == "opener"
    envs = gym.make_vec("RallyDirect-v0", num_envs=4, vectorization_mode="vector_entry_point")
    assert isinstance(envs, RallyVectorEnv)
    assert envs.num_envs == 4
    assert envs.observation_space.shape == (4, env.observation_space.shape[0])
    assert envs.metadata["autoreset_mode"] == gym.vector.AutoresetMode.NEXT_STEP


def test_metadata_and_render():
    pytest.importorskip("pygame")
    env = RallyEnv(render_mode="rgb_array")
    assert env.metadata["render_modes"] == ["human", "rgb_array"]
    assert env.metadata["render_fps"] == 20
    env.reset(seed=0)
    frame = env.render()
    assert frame.shape == (400, 600, 3) and frame.dtype == np.uint8
    with pytest.warns(UserWarning, match="render_mode=None"):
        assert RallyEnv().render() is None


def test_ids_say_the_model_and_make_without_a_nag():
    """Failed before: every make of the seed model printed Gymnasium's "Rally-v0 is out of
    date" (the wheel-speed model was registered as its next version)."""
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        a = gym.make("RallyDirect-v0")
        b = gym.make("RallyWheelSpeed-v1")
    assert a.unwrapped.config.version == 0 and b.unwrapped.config.version == 1
    # the old ids stay the same envs
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        old0, old1 = gym.make("Rally-v0"), gym.make("Rally-v1")
    assert np.array_equal(old0.reset(seed=3)[0], a.reset(seed=3)[0])
    assert np.array_equal(old1.reset(seed=3)[0], b.reset(seed=3)[0])
    assert old0.observation_space == a.observation_space
    assert old1.observation_space == b.observation_space


def test_module_qualified_id_works_in_a_fresh_process():
    """``rally_env:RallyDirect-v0`` needs no import (Gymnasium 1.x loads no entry points)."""
    code = (
        "import warnings; warnings.simplefilter('error')\n"
        "import gymnasium as gym\n"
        "for i in ('rally_env:RallyDirect-v0', 'rally_env:RallyWheelSpeed-v1'):\n"
        "    gym.make(i).reset(seed=0)\n"
        "print('ok')\n"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0 and r.stdout.strip() == "ok", r.stderr[-2000:]


def test_spaces():
    env = RallyEnv()
    a = env.action_space
    assert a.dtype == np.float32 and a.shape == (4,)
    assert a.low.tolist() == [-1, 0, 0, 0] and a.high.tolist() == [1, 1, 1, 1]
    o = env.observation_space
    assert o.dtype == np.float32 and np.all(np.isfinite(o.low)) and np.all(np.isfinite(o.high))
    assert o.shape == (rally_env.DEFAULT_LAYOUT.size,)
    assert RallyEnv(discrete_actions=True).action_space == gym.spaces.Discrete(15)


def test_import_does_not_load_heavy_packages():
    code = (
        "import sys, rally_env; bad = [m for m in ('pygame', 'torch', 'stable_baselines3') "
        "if m in sys.modules]; print(bad); sys.exit(1 if bad else 0)"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr


def test_docstring_names_every_argument_and_end_and_points_to_the_reference():
    doc = RallyEnv.__doc__
    assert doc.startswith("Rally stage driving") and "docs/env.md" in doc
    params = [p for p in inspect.signature(RallyEnv.__init__).parameters if p != "self"]
    missing = [p for p in params if f"``{p}``" not in doc]
    assert not missing, f"RallyEnv's docstring does not name the arguments {missing}"
    for reason in rally_env.END_REASONS[1:]:
        assert f"``{reason}``" in doc
    assert "InvalidAction" in doc and "Discrete(15)" in doc
    assert len(doc.splitlines()) < 50, "the docstring is a summary; the tables live in docs/env.md"
