"""Minari: `rally dataset` writes a dataset; it loads back and rebuilds its env."""

from __future__ import annotations

import numpy as np
import pytest

from rally_env import INFO_KEYS
from rally_env.cli import main
from tests.rally_env.test_replay_support import run_py

pytestmark = [pytest.mark.compat, pytest.mark.usefixtures("minari")]


@pytest.fixture
def minari():
    """The minari module (skips without the compat or minari extra)."""
    pytest.importorskip("h5py")
    return pytest.importorskip("minari")


def test_rally_dataset_writes_loads_and_recovers(tmp_path, capsys, monkeypatch, minari):
    monkeypatch.setenv("MINARI_DATASETS_PATH", str(tmp_path))
    argv = [
        "dataset",
        "--agent",
        "heuristic",
        "--stages",
        "opener,skidpad",
        "--episodes",
        "1",
        "--max-steps",
        "40",
        "--out",
        "rally/heuristic-test-v0",
        "--dir",
        str(tmp_path),
    ]
    assert main(argv) == 0
    assert "wrote Minari dataset rally/heuristic-test-v0: 2 episodes, 80 steps" in (
        capsys.readouterr().out
    )
    assert main(argv) == 2  # the name exists: refused, nothing overwritten
    assert "exists already" in capsys.readouterr().err
    ds = minari.load_dataset("rally/heuristic-test-v0")
    assert ds.total_episodes == 2 and ds.total_steps == 80
    meta = ds.storage.metadata
    assert meta["algorithm_name"] == "heuristic" and meta["rally_agent"] == "heuristic"
    assert list(meta["rally_stages"]) == ["opener", "skidpad"]
    stages = set()
    for ep in ds.iterate_episodes():
        assert ep.observations.shape == (41, 59) and ep.actions.shape == (40, 4)
        assert ep.rewards.shape == (40,) and not ep.terminations.any()
        for k in INFO_KEYS:
            assert k in ep.infos and len(ep.infos[k]) == 41, k
        stages.add(int(ep.infos["stage_index"][0]))
        assert np.all(ep.infos["stage_time_s"][1:] > 0)
    assert stages == {0, 1}  # one episode on each stage
    # the env comes back from the dataset alone, in a process that never imported rally_env
    code = (
        "import minari\n"
        "env = minari.load_dataset('rally/heuristic-test-v0').recover_environment()\n"
        "obs, info = env.reset(seed=0)\n"
        "print(env.spec.id, env.unwrapped.config.stage, obs.shape)\n"
    )
    r = run_py(code, env={"MINARI_DATASETS_PATH": str(tmp_path)}, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    assert "RallyDirect-v0 ('opener', 'skidpad') (59,)" in r.stdout


def test_bad_dataset_names_and_counts_are_refused(tmp_path, capsys):
    base = ["dataset", "--stages", "opener", "--dir", str(tmp_path)]
    assert main([*base, "--out", "no version"]) == 2
    assert "name-v<N>" in capsys.readouterr().err
    assert main([*base, "--out", "rally/x-v0", "--episodes", "0"]) == 2
    assert not list(tmp_path.rglob("*.hdf5"))
