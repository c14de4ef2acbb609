"""``python -m agents.zoo``: the zoo's argv, with the shipped hyperparameters for train."""

from __future__ import annotations

import pytest

from agents.zoo import CONFIG_DIR, config_path, main, zoo_argv


def test_train_gets_the_shipped_conf_file_unless_given():
    argv = zoo_argv("train", ["--algo", "sac", "--env", "RallyDirect-v0"])
    assert argv[:5] == ["rl_zoo3.train", "--algo", "sac", "--env", "RallyDirect-v0"]
    assert argv[-2:] == ["--conf-file", str(CONFIG_DIR / "sac.yml")]
    assert zoo_argv("train", ["--env", "X", "--conf-file", "mine.yml"])[-1] == "mine.yml"
    assert zoo_argv("train", ["--algo=ppo"])[-1] == str(config_path("ppo"))
    assert zoo_argv("enjoy", ["--algo", "ppo"]) == ["rl_zoo3.enjoy", "--algo", "ppo"]
    with pytest.raises(FileNotFoundError, match="only ppo, sac"):
        config_path("dqn")


def test_bad_script_is_refused(capsys):
    assert main(["fly"]) == 2
    assert "usage" in capsys.readouterr().out
