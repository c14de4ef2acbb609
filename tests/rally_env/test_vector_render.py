"""The vector env renders like Gymnasium's vector envs; envs pickle and copy after render()."""

from __future__ import annotations

import copy
import os
import pickle

os.environ.setdefault("SDL_VIDEODRIVER", "dummy")

import gymnasium as gym
import numpy as np
import pytest

from rally_env import RallyEnv, RallyVectorEnv
from rally_env.errors import ConfigError
from tests.rally_env.conftest import FULL_THROTTLE

pytest.importorskip("pygame")


def _moved(venv: RallyVectorEnv, steps: int = 10) -> None:
    venv.reset(seed=0)
    for _ in range(steps):
        venv.step(np.tile(FULL_THROTTLE, (venv.num_envs, 1)))


def test_render_returns_one_frame_per_car_like_sync_vector_env():
    venv = RallyVectorEnv(3, render_mode="rgb_array", stage=["opener", "skidpad"])
    _moved(venv)
    frames = venv.render()
    assert isinstance(frames, tuple) and len(frames) == 3
    for f in frames:
        assert f.shape == (400, 600, 3) and f.dtype == np.uint8
    # car k's frame is what a RallyEnv driving car k draws
    single = RallyEnv(render_mode="rgb_array", stage=["opener", "skidpad"])
    single.reset(seed=0, options={"car_index": 2})
    for _ in range(10):
        single.step(FULL_THROTTLE)
    assert np.array_equal(frames[2], single.render())
    assert venv.call("render")[1].shape == (400, 600, 3)
    venv.close()


def test_all_cars_view_is_an_option():
    venv = RallyVectorEnv(3, render_mode="rgb_array", render_view="all_cars")
    _moved(venv, 3)
    frame = venv.render()
    assert isinstance(frame, np.ndarray) and frame.shape == (400, 600, 3)
    per = RallyVectorEnv(3, render_mode="rgb_array")
    _moved(per, 3)
    assert np.array_equal(per.render_all_cars(0), frame)
    with pytest.raises(ConfigError, match="render_view"):
        RallyVectorEnv(2, render_view="mosaic")


def test_gymnasium_vector_record_video(tmp_path):
    from gymnasium.wrappers.vector import RecordVideo

    venv = gym.make_vec(
        "RallyDirect-v0",
        num_envs=2,
        vectorization_mode="vector_entry_point",
        render_mode="rgb_array",
    )
    rec = RecordVideo(venv, str(tmp_path / "v"), episode_trigger=lambda e: e == 0, video_length=4)
    rec.reset(seed=0)
    for _ in range(4):
        rec.step(np.tile(FULL_THROTTLE, (2, 1)))
    rec.close()
    assert list((tmp_path / "v").glob("*.mp4"))


def test_call_get_attr_set_attr():
    venv = RallyVectorEnv(3)
    assert venv.get_attr("render_mode") == (None, None, None)
    assert venv.call("render") == (None, None, None)
    assert venv.call("num_envs") == (3, 3, 3)
    venv.reset(seed=0)
    states = venv.call("get_state")
    assert len(states) == 3 and states[0]["n_cars"] == 3
    venv.set_attr("render_view", "all_cars")
    assert venv.get_attr("render_view") == ("all_cars",) * 3
    venv.set_attr("render_view", ["per_env"] * 3)
    assert venv.render_view == "per_env"
    with pytest.raises(ValueError, match="share one value"):
        venv.set_attr("render_view", ["per_env", "all_cars", "per_env"])
    with pytest.raises(ValueError, match="expected 3 values"):
        venv.set_attr("render_view", ["per_env"])
    assert venv.render_view == "per_env"
    with pytest.raises(AttributeError):
        venv.get_attr("no_such_thing")


@pytest.mark.parametrize("kind", ["single", "vector"])
def test_pickle_and_deepcopy_after_render(kind):
    """Failed before: the renderer (pygame surfaces) travelled with the env."""
    if kind == "single":
        env = gym.make("RallyDirect-v0", render_mode="rgb_array")
        env.reset(seed=0)
        env.step(FULL_THROTTLE)
        base = env.unwrapped
    else:
        env = RallyVectorEnv(2, render_mode="rgb_array")
        _moved(env, 1)
        base = env
    env.render()
    assert base._renderer is not None
    for clone in (pickle.loads(pickle.dumps(env)), copy.deepcopy(env)):
        cb = clone.unwrapped if kind == "single" else clone
        assert cb._renderer is None
        assert np.array_equal(cb.core.obs, base.core.obs)
        assert cb.core.sim.state_hash() == base.core.sim.state_hash()
        frame = clone.render()  # the copy makes its own renderer
        first = frame if kind == "single" else frame[0]
        assert first.shape == (400, 600, 3)
    assert base._renderer is not None  # the original keeps its own
    env.close()
