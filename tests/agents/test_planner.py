"""The oracle planner (agents.planner): settings refused by name, a deterministic drive to the
finish whose replay verifies, and its plumbing through rally eval / rally benchmark."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

import tracks
from agents.benchmark import load_oracle, run_stages, write_oracle
from agents.evaluate import run_episode
from agents.planner import MPCPlanner, PlannerSettings, PlannerSettingsError
from agents.policies import make_policy
from rally_env import RallyEnv, RecordReplay
from rally_env.replay import verify_bytes

TINY = "samples=6,horizon=20,tail=40,iterations=2,replan=5,knot=5,threads=false"


@pytest.fixture(scope="module")
def short_stage():
    """A 300 m generated stage: a planned run to its finish takes a few seconds."""
    return tracks.generate(7, length_m=300.0, difficulty=0.3)


@pytest.mark.parametrize(
    ("changes", "field"),
    [
        ({"samples": 2}, "samples"),
        ({"samples": 8.5}, "samples"),
        ({"horizon": 0}, "horizon"),
        ({"tail": -1}, "tail"),
        ({"iterations": True}, "iterations"),
        ({"replan": 50, "horizon": 40}, "replan"),
        ({"sigma_steer": -0.1}, "sigma_steer"),
        ({"sigma_pedal": math.nan}, "sigma_pedal"),
        ({"temperature": 0.0}, "temperature"),
        ({"decay": 1.5}, "decay"),
        ({"crash_cost_m": "a lot"}, "crash_cost_m"),
        ({"end_off_road_cost_m": None}, "end_off_road_cost_m"),
        ({"seed": -3}, "seed"),
        ({"threads": "yes"}, "threads"),
    ],
)
def test_bad_settings_are_refused_naming_the_field(changes, field):
    with pytest.raises(PlannerSettingsError) as e:
        PlannerSettings(**changes)
    assert e.value.field == field
    assert field in str(e.value)


def test_settings_from_a_spec_and_from_toml(tmp_path):
    s = PlannerSettings.from_spec("samples=128, horizon=40,sigma_pedal=0.5,threads=false")
    assert (s.samples, s.horizon, s.sigma_pedal, s.threads) == (128, 40, 0.5, False)
    assert PlannerSettings.from_spec("") == PlannerSettings()
    for bad, field in (("samples=many", "samples"), ("width=3", "width"), ("samples", "samples")):
        with pytest.raises(PlannerSettingsError, match=field):
            PlannerSettings.from_spec(bad)
    f = tmp_path / "p.toml"
    f.write_text("[planner]\nsamples = 32\ntail = 60\n")
    assert PlannerSettings.from_spec(str(f)) == PlannerSettings(samples=32, tail=60)
    f.write_text("samples = 32\nhorizon_s = 2\n")
    with pytest.raises(PlannerSettingsError, match="horizon_s"):
        PlannerSettings.from_spec(str(f))
    with pytest.raises(PlannerSettingsError, match="no such file"):
        PlannerSettings.from_spec(str(tmp_path / "missing.toml"))
    pol = make_policy("mpc:samples=8,tail=0")
    assert isinstance(pol, MPCPlanner) and pol.settings.samples == 8
    with pytest.raises(ValueError, match="samples"):
        make_policy("mpc:samples=1")


def test_the_planner_drives_to_the_finish_deterministically_and_its_replay_verifies(
    short_stage, tmp_path
):
    def drive(spec, directory):
        policy = make_policy(spec)
        env = RecordReplay(
            RallyEnv(stage=short_stage, **policy.env_kwargs), directory=str(directory)
        )
        run = run_episode(policy, short_stage, 0, env=env)
        env.close()
        return run

    a, b = drive(f"mpc:{TINY}", tmp_path / "r0"), drive(f"mpc:{TINY}", tmp_path / "r1")
    assert a.finished and a.end_reason == "finished"
    assert np.array_equal(a.actions, b.actions)
    assert a.stage_time_s == b.stage_time_s
    # what it cost, per episode
    s = PlannerSettings.from_spec(TINY)
    assert a.compute["plans"] == math.ceil(a.steps / s.replan)
    per_plan = s.samples * s.iterations * (s.horizon + s.tail)  # car-steps of one plan
    assert 0 < a.compute["car_steps"] <= a.compute["plans"] * per_plan
    assert a.compute["cpu_s"] > 0
    files = sorted((tmp_path / "r0").glob("*.json*"))
    assert len(files) == 1
    rep = verify_bytes(files[0].read_bytes())
    assert rep.accepted, rep.reason
    # another seed searches differently
    other = drive(f"mpc:{TINY},seed=1", tmp_path / "r2")
    assert not np.array_equal(other.actions, a.actions)


def test_the_benchmark_harness_drives_the_planner_and_writes_the_oracle(short_stage, tmp_path):
    pol = make_policy(f"mpc:{TINY}")
    runs, _ = run_stages(pol, [short_stage, short_stage], chunk=2)
    assert all(r.finished for r in runs)
    assert runs[0].stage_time_s == runs[1].stage_time_s  # the same stage, the same drive
    assert all(r.compute["car_steps"] > 0 for r in runs)


def test_write_oracle_refuses_a_run_that_did_not_finish(tmp_path):
    from agents.benchmark import BenchmarkResult, StageRow

    def row(finished):
        return StageRow(
            set="library",
            stage="opener",
            digest="d",
            seed=None,
            length_m=None,
            difficulty=None,
            finished=finished,
            end_reason="finished" if finished else "off_stage",
            stage_time_s=70.0 if finished else math.nan,
            reference_time_s=67.0,
            heuristic_time_s=83.0,
            score=0.9,
            gap_reference_pct=1.0,
            gap_heuristic_pct=-10.0,
            off_road_s=0.0,
            progress_m=1000.0,
            steps=1400,
            compute={"cpu_s": 1.0},
        )

    path = tmp_path / "oracle.json"
    with pytest.raises(ValueError, match="did not finish"):
        write_oracle(BenchmarkResult("mpc", {}, [row(False)], []), "cmd", path)
    assert not path.exists()
    write_oracle(BenchmarkResult("mpc", {}, [row(True)], []), "rally benchmark x", path)
    got = load_oracle(path)
    assert got["d"]["oracle_time_s"] == 70.0 and got["d"]["command"] == "rally benchmark x"
    assert json.loads(path.read_text())["schema"] == "rally-oracle-times"


def test_the_planners_drivers_run_at_the_env_s_control_rate(short_stage):
    # a driver tuned for 20 Hz on a 10 Hz env integrates its errors at the wrong rate
    planner = make_policy(f"mpc:{TINY}")
    for hz in (10, 20):
        env = RallyEnv(stage=short_stage, control_hz=hz, **planner.env_kwargs)
        env.reset(seed=0)
        planner.bind([env])
        ep = planner._episodes[0]
        assert ep.driver.params.control_hz == ep.batch_driver.params.control_hz == hz
        planner.finish()
        env.close()
    planner.close()
