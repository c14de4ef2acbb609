"""rl-zoo3 through its own command line: train a few hundred steps, enjoy, record a video."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.rally_env.test_replay_support import run_py

pytestmark = [pytest.mark.compat, pytest.mark.usefixtures("rl_zoo3")]


@pytest.fixture
def rl_zoo3():
    """Skips without the compat extra."""
    return pytest.importorskip("rl_zoo3")


ROOT = Path(__file__).resolve().parents[2]
CONF = ROOT / "agents" / "configs" / "rl_zoo3" / "ppo.yml"
SMALL = ["--hyperparams", "n_envs:2", "n_steps:64", "batch_size:64", "n_epochs:1"]
#: ``python -m MODULE ARGS`` in a fresh process
RUN_MODULE = (
    "import runpy, sys\n"
    "sys.argv = sys.argv[1:]\n"
    "runpy.run_module(sys.argv[0], run_name='__main__', alter_sys=True)\n"
)


def _zoo(command: str, logs: Path, *args: str) -> None:
    """``python -m <command words> --algo ppo --env RallyLearn-v0 -f LOGS ARGS``."""
    common = ["--algo", "ppo", "--env", "RallyLearn-v0", "-f", str(logs), *args]
    r = run_py(RUN_MODULE, *command.split(), *common, env={"SDL_VIDEODRIVER": "dummy"}, timeout=600)
    assert r.returncode == 0, (command, r.stdout[-3000:], r.stderr[-3000:])


def test_train_enjoy_record_video(tmp_path):
    logs = tmp_path / "logs"
    plain = ["--gym-packages", "rally_env"]  # what rl-zoo3's own scripts need
    _zoo("rl_zoo3.train", logs, *plain, "--conf-file", str(CONF), "-n", "256", *SMALL,
         "--eval-freq", "-1", "--seed", "0")  # fmt: skip
    run = logs / "ppo" / "RallyLearn-v0_1"
    assert (run / "RallyLearn-v0.zip").exists()
    assert (run / "RallyLearn-v0" / "vecnormalize.pkl").exists()
    _zoo("rl_zoo3.enjoy", logs, *plain, "--exp-id", "1", "-n", "30", "--no-render")
    video = tmp_path / "video"
    _zoo("agents.zoo record_video", logs, "--exp-id", "1", "-n", "10", "-o", str(video))
    assert list(video.glob("*.mp4"))


@pytest.mark.parametrize("algo", ["ppo", "sac"])
def test_zoo_hyperparameters_are_rally_trains(algo):
    """The shipped zoo files hold rally train's values (they cannot drift apart)."""
    import yaml

    from agents.sb3 import TRAIN_DEFAULTS, TRAIN_ENV_DEFAULTS, algo_defaults
    from agents.zoo import config_path
    from rally_env import LEARN_ENV_ID, LEARN_ENV_KWARGS

    doc = yaml.safe_load(config_path(algo).read_text())
    entry = doc[f"rally_env:{LEARN_ENV_ID}"]
    assert doc[LEARN_ENV_ID] == entry
    hp = algo_defaults(algo)
    pk = hp.pop("policy_kwargs")
    assert eval(entry["policy_kwargs"], {"dict": dict}) == pk
    for k, v in hp.items():
        assert entry[k] == v, k
    assert entry["n_envs"] == TRAIN_DEFAULTS["n_envs"]
    norm = eval(entry["normalize"])
    assert norm == {
        "norm_obs": TRAIN_DEFAULTS["norm_obs"],
        "norm_reward": TRAIN_DEFAULTS["norm_reward"],
        "clip_obs": TRAIN_DEFAULTS["clip_obs"],
    }
    # the env is rally train's: RallyLearn-v0's settings are TRAIN_ENV_DEFAULTS, no handbrake
    assert "env_wrapper" not in entry and entry["env_kwargs"] == {"stage": "random"}
    assert {k: v for k, v in LEARN_ENV_KWARGS.items() if k != "stage"} == TRAIN_ENV_DEFAULTS
    assert TRAIN_DEFAULTS["handbrake"] is False
