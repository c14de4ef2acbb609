"""torchrl: GymEnv by id (single and num_envs=4) and GymWrapper on the native vector env."""

from __future__ import annotations

import numpy as np
import pytest

from rally_env import INFO_KEYS, RallyVectorEnv

pytestmark = [pytest.mark.compat, pytest.mark.usefixtures("torchrl")]


@pytest.fixture
def torchrl():
    """The torchrl module (skips without the compat extra)."""
    return pytest.importorskip("torchrl")


def test_gym_env_single_reads_every_info_key():
    """Failed before: a float subclass and strings in the info ("'float' object has no
    attribute 'dtype'")."""
    from torchrl.envs import GymEnv
    from torchrl.envs.utils import check_env_specs

    env = GymEnv("rally_env:RallyDirect-v0").auto_register_info_dict()
    check_env_specs(env)
    td = env.rollout(5)
    for k in INFO_KEYS:
        assert k in td["next"].keys(), k
    assert td["next", "checkpoint_times_s"].shape == (5, 2)


def test_gym_env_num_envs_4():
    """Failed before: 'batch dimension mismatch ... value.shape=torch.Size([2, 4])' from the
    object arrays Gymnasium's async vector env made of the info."""
    from torchrl.envs import GymEnv
    from torchrl.envs.utils import check_env_specs

    env = GymEnv("rally_env:RallyDirect-v0", num_envs=4)
    try:
        check_env_specs(env)
        td = env.rollout(5)
        assert td.batch_size == (4, 5)
        assert td["next", "finish_time_s"].shape == (4, 5)
    finally:
        env.close()


@pytest.mark.parametrize("mode", ["SameStep", "Disabled"])
def test_gym_wrapper_on_the_native_vector_env(mode):
    """Failed before in SameStep: the nested reward_terms dict and the string arrays."""
    from torchrl.envs import GymWrapper
    from torchrl.envs.utils import check_env_specs

    env = GymWrapper(RallyVectorEnv(4, autoreset_mode=mode, termination={"time_limit_s": 0.5}))
    check_env_specs(env)
    td = env.rollout(12, break_when_any_done=False if mode == "SameStep" else True)
    assert td.batch_size[0] == 4
    if mode == "SameStep":
        # the episodes end (0.5 s = 10 steps) and reset inside the rollout
        assert td["next", "done"].any()
        assert "end_code" in td["next"].keys()
        assert np.isin(td["next", "end_code"].numpy(), [0, 6]).all()
