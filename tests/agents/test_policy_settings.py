"""What a saved model carries besides its weights: the observation settings of its env
(``road_ahead``) and, for a residual policy, the base driver it acts on top of."""

from __future__ import annotations

import json
from types import SimpleNamespace

import numpy as np
import pytest

pytest.importorskip("stable_baselines3")

from agents.evaluate import run_episode
from agents.heuristic import HeuristicDriver
from agents.models import (
    ResidualSpec,
    obs_env_kwargs,
    residual_action,
    residual_meta,
    write_meta,
)
from agents.policies import SB3Policy, policy_env_kwargs
from tests.agents.helpers import heuristic_obs

_obs_batch = heuristic_obs


def test_the_heuristic_reads_the_v0_fields_of_a_wider_observation():
    wide = _obs_batch(True)
    assert wide.shape[1] > 59
    a, b = HeuristicDriver(), HeuristicDriver()
    np.testing.assert_array_equal(a(wide), b(wide[:, :59]))
    with pytest.raises(ValueError, match="shape"):
        HeuristicDriver()(wide[:, :60])


def test_a_zero_residual_is_the_base_action():
    base = HeuristicDriver()(_obs_batch(False))
    assert (base[:, 2] > 0).any() or (base[:, 1] > 0).any()
    np.testing.assert_allclose(residual_action(base, np.zeros_like(base), 0.5), base, atol=1e-6)
    moved = residual_action(base, np.full_like(base, 0.2), 0.5)
    np.testing.assert_allclose(moved[:, 0], np.clip(base[:, 0] + 0.1, -1, 1), atol=1e-6)
    # a released brake stays released under a small residual
    off = base[:, 2] == 0.0
    assert np.all(moved[off, 2] == 0.0)


def test_metadata_checks():
    assert obs_env_kwargs({"env": {"road_ahead": True, "stage": "x"}}) == {"road_ahead": True}
    assert obs_env_kwargs({}) == {}
    with pytest.raises(ValueError, match="road_ahead"):
        obs_env_kwargs({"env": {"road_ahead": "yes"}})
    assert residual_meta({}) is None
    spec = residual_meta({"residual": {"base": "heuristic", "scale": 0.5}})
    assert spec == ResidualSpec("heuristic", 0.5)
    for bad in ({"base": "pilot", "scale": 0.5}, {"base": "heuristic", "scale": 0.0}):
        with pytest.raises(ValueError, match="residual"):
            residual_meta({"residual": bad})


def test_policy_settings_merge_with_the_callers():
    p = SimpleNamespace(env_kwargs={"road_ahead": True})
    assert policy_env_kwargs(p, {"control_hz": 20}) == {"control_hz": 20, "road_ahead": True}
    assert policy_env_kwargs(object(), None) == {}
    with pytest.raises(ValueError, match="road_ahead"):
        policy_env_kwargs(p, {"road_ahead": False})


def test_a_saved_residual_model_drives_its_own_env_on_top_of_its_base(tmp_path):
    import torch
    from stable_baselines3 import PPO

    from agents.sb3 import RallyVecEnv

    venv = RallyVecEnv(2, stage="opener", road_ahead=True, residual=("heuristic", 0.5))
    model = PPO("MlpPolicy", venv, n_steps=16, batch_size=16, seed=0, device="cpu")
    with torch.no_grad():
        model.policy.action_net.weight.zero_()
        model.policy.action_net.bias.zero_()
    path = tmp_path / "m.zip"
    model.save(str(path))
    venv.close()
    write_meta(
        path,
        {
            "algo": "ppo",
            "env": {"road_ahead": True},
            "residual": {"base": "heuristic", "scale": 0.5},
        },
    )
    pol = SB3Policy(path)
    assert pol.env_kwargs == {"road_ahead": True} and pol.residual == ResidualSpec("heuristic", 0.5)
    # the env is built with the model's observation (a 59-wide one would not fit the net)
    run = run_episode(pol, "opener", 0, record=False, max_steps=60)
    ref = run_episode(HeuristicDriver(), "opener", 0, record=False, max_steps=60)
    np.testing.assert_allclose(run.actions, ref.actions, atol=1e-5)


def test_shipping_a_model_keeps_what_it_does(tmp_path):
    import torch
    from stable_baselines3 import PPO

    from agents.models import ship_model
    from agents.sb3 import RallyVecEnv

    venv = RallyVecEnv(2, stage="opener")
    model = PPO("MlpPolicy", venv, n_steps=16, batch_size=16, n_epochs=1, seed=0, device="cpu")
    model.learn(32)  # the optimizer has running moments now
    path = tmp_path / "m.zip"
    model.save(str(path))
    venv.close()
    write_meta(path, {"algo": "ppo"})
    shipped = ship_model(path, tmp_path / "shipped.zip")
    a, b = SB3Policy(path), SB3Policy(shipped)
    obs = _obs_batch(False, 10)
    np.testing.assert_array_equal(a(obs), b(obs))
    state = b.model.policy.optimizer.state_dict()["state"]
    assert state and all(
        not torch.any(v) for st in state.values() for k, v in st.items() if k != "step"
    )
    with pytest.raises(ValueError, match="optimizer"):
        ship_model(_zip_without_optimizer(shipped, tmp_path / "bare.zip"), tmp_path / "x.zip")


def _zip_without_optimizer(src, dst):
    import zipfile

    with zipfile.ZipFile(src) as z, zipfile.ZipFile(dst, "w") as out:
        for n in z.namelist():
            if n != "policy.optimizer.pth":
                out.writestr(n, z.read(n))
    return dst


@pytest.mark.parametrize("name", ["ppo-general", "bc-general", "es-general"])
def test_the_shipped_generalists_load_and_finish_opener(name):
    from agents.evaluate import evaluate
    from agents.policies import POLICY_DIR, SHIPPED, make_policy

    path = POLICY_DIR / SHIPPED[name]
    assert path.stat().st_size <= 2 * 1024 * 1024
    pol = make_policy(name)
    assert pol.env_kwargs == {"road_ahead": True}
    assert (pol.residual is not None) == (name in ("ppo-general", "es-general"))
    res = evaluate(name, "opener", [0])
    run = res.runs[0]
    assert run.finished, (run.end_reason, run.progress_m)


def test_net_general_is_a_network_at_10_hz_and_rally_eval_finishes_opener(tmp_path):
    """The learned driver: a network alone (no residual base), three outputs, deciding at
    10 Hz with the road ahead; ``rally eval --agent net-general`` drives it so."""
    from agents.policies import POLICY_DIR, SHIPPED, make_policy
    from rally_env.cli import main

    path = POLICY_DIR / SHIPPED["net-general"]
    assert path.stat().st_size <= 2 * 1024 * 1024
    pol = make_policy("net-general")
    assert pol.env_kwargs == {"road_ahead": True, "control_hz": 10}
    assert pol.residual is None and pol.model.action_space.shape == (3,)
    assert "[-1, 1]^3" in pol.action_note and "no handbrake" in pol.action_note
    out = tmp_path / "eval.json"
    assert main(["eval", "--agent", "net-general", "--stages", "opener", "--json", str(out)]) == 0
    run = json.loads(out.read_text())["stages"][0]
    assert run["stage"] == "opener" and run["finish_rate"] == 1.0, run


def test_rally_record_takes_a_models_own_rate_and_sets_the_heuristics(
    tmp_path, capsys, monkeypatch
):
    # net-general decides at 10 Hz: --control-hz 10 once raised TypeError (control_hz given
    # twice), and another rate is refused by name; the heuristic is tuned for the asked rate
    from agents.heuristic import HeuristicDriver
    from rally_env.cli import main

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("SDL_VIDEODRIVER", "dummy")
    base = ["record", "--stage", "opener", "--max-seconds", "0.5", "--no-replay", "--quiet"]
    small = ["--width", "160", "--height", "120"]
    argv = [*base, *small, "--agent", "net-general", "--out", str(tmp_path / "a.mp4")]
    assert main([*argv, "--control-hz", "10"]) == 0
    assert main([*argv, "--control-hz", "20"]) == 2
    err = capsys.readouterr().err
    assert "drives with control_hz=10 (its observation settings); it cannot drive an env " in err
    assert "with control_hz=20" in err
    rates = []
    at_rate = HeuristicDriver.at_rate
    monkeypatch.setattr(
        HeuristicDriver, "at_rate", lambda d, hz: rates.append(hz) or at_rate(d, hz)
    )
    argv = [*base, *small, "--agent", "heuristic", "--out", str(tmp_path / "h.mp4")]
    assert main([*argv, "--control-hz", "10"]) == 0
    assert rates[-1] == 10


def test_an_env_rate_sets_the_rate_the_heuristic_and_a_residual_model_drive_at():
    # rally eval / benchmark --env control_hz=10: the heuristic once kept its 20 Hz tuning
    from agents.policies import make_policy, policy_env_kwargs

    h = make_policy("heuristic")
    assert policy_env_kwargs(h, {"control_hz": 10})["control_hz"] == 10
    assert h.params.control_hz == 10
    es = make_policy("es-general")  # decides every 10 steps at its own 20 Hz: 0.5 s
    policy_env_kwargs(es, {"control_hz": 10})
    assert es.residual.hold == 5 and es._base.driver.params.control_hz == 10
    plain = make_policy("heuristic")
    policy_env_kwargs(plain, {"road_ahead": True})  # no rate asked: its own
    assert plain.params.control_hz == 20
