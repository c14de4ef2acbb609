"""skrl's Gymnasium wrapper on the native vector env, rendering through ``call("render")``."""

from __future__ import annotations

import numpy as np
import pytest

from rally_env import RallyVectorEnv

pytestmark = pytest.mark.compat


def test_wrap_env_steps_and_renders():
    """Failed before: skrl renders a vector env with env.call("render"), which it lacked."""
    pytest.importorskip("skrl")
    torch = pytest.importorskip("torch")
    from skrl.envs.wrappers.torch import wrap_env

    env = wrap_env(RallyVectorEnv(3, render_mode="rgb_array"), wrapper="gymnasium")
    assert env.num_envs == 3
    obs, _ = env.reset()
    assert tuple(obs.shape) == (3, 59)
    act = torch.tensor(np.tile([0.0, 1.0, 0.0, 0.0], (3, 1)), dtype=torch.float32)
    for _ in range(3):
        obs, rew, term, _, _ = env.step(act)
    assert tuple(rew.shape) == (3, 1) and tuple(term.shape) == (3, 1)
    frames = env.render()
    assert len(frames) == 3 and frames[0].shape == (400, 600, 3)
    env.close()
