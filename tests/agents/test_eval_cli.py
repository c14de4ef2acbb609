"""agents.evaluate, `rally eval --json/--csv` schema, policy resolution."""

from __future__ import annotations

import csv
import io
import json
import math
import sys
import types

import numpy as np
import pytest

from agents.evaluate import (
    HELD_OUT_SEED_BASE,
    SUMMARY_FIELDS,
    evaluate,
    resolve_stages,
)
from agents.policies import make_policy
from rally_env.cli import main

SHORT = {"termination": {"time_limit_s": 4.0}}


def test_resolve_stages():
    import tracks

    assert resolve_stages("opener,forest") == ["opener", "forest"]
    assert resolve_stages("library") == tracks.list_stages()
    held = resolve_stages("random:3")
    assert held == [f"gen-{HELD_OUT_SEED_BASE + i}" for i in range(3)]
    # training's "random" stages draw generator seeds in [0, 2**31 - 1): disjoint
    assert min(int(s.split("-")[1]) for s in held) >= 2**31 - 1
    with pytest.raises(ValueError):
        resolve_stages("random:0")


def test_evaluate_random_policy_figures():
    res = evaluate("random", "opener", [0, 1], env_kwargs=SHORT, record=True)
    s = res.summary("opener")
    assert s.episodes == 2 and s.finished == 0 and s.finish_rate == 0.0
    assert math.isnan(s.median_time_s)
    assert s.reference_time_s > 0
    assert len(res.runs) == 2 and res.runs[0].telemetry["speed_mps"].shape == (res.runs[0].steps,)
    d = res.to_dict()
    json.dumps(d, allow_nan=False)  # NaN -> null
    assert d["stages"][0]["median_time_s"] is None


def test_user_callable_policy():
    mod = types.ModuleType("my_user_policy")

    def drive(obs):
        a = np.zeros((obs.shape[0], 4), np.float32)
        a[:, 1] = 1.0
        return a

    def factory():
        return drive

    mod.drive = drive
    mod.factory = factory
    sys.modules["my_user_policy"] = mod
    try:
        assert make_policy("my_user_policy:drive") is drive
        assert make_policy("my_user_policy:factory") is drive
        res = evaluate("my_user_policy:drive", "opener", [0], env_kwargs=SHORT)
        assert res.runs[0].progress_m > 5.0  # full throttle, straight ahead
    finally:
        del sys.modules["my_user_policy"]
    with pytest.raises(ValueError):
        make_policy("nope")


def test_rally_eval_json_and_csv(tmp_path, capsys):
    js, cs = tmp_path / "e.json", tmp_path / "e.csv"
    rc = main(
        [
            "eval",
            "--agent",
            "heuristic",
            "--stages",
            "opener",
            "--episodes",
            "1",
            "--json",
            str(js),
            "--csv",
            str(cs),
            "--plain",
        ]
    )
    assert rc == 0
    out = capsys.readouterr().out
    assert "opener" in out and "gap ref %" in out
    doc = json.loads(js.read_text())
    assert doc["schema"] == "rally-eval" and doc["version"] == 1
    assert doc["agent"] == "heuristic" and doc["seeds"] == [0]
    (st,) = doc["stages"]
    assert set(st) == set(SUMMARY_FIELDS)
    assert st["finished"] == 1 and st["finish_rate"] == 1.0
    assert st["median_time_s"] == st["best_time_s"] > st["reference_time_s"]
    assert st["gap_reference_pct"] == pytest.approx(
        100 * (st["median_time_s"] / st["reference_time_s"] - 1)
    )
    (run,) = doc["runs"]
    assert {"stage", "seed", "finished", "end_reason", "stage_time_s", "off_road_s"} <= set(run)
    rows = list(csv.DictReader(cs.open()))
    assert len(rows) == 1 and rows[0]["stage"] == "opener"
    assert list(rows[0]) == list(SUMMARY_FIELDS)
    assert float(rows[0]["median_time_s"]) == pytest.approx(st["median_time_s"])


def test_rally_eval_json_to_stdout_writes_no_file(tmp_path, capsys, monkeypatch):
    """``--json -`` is standard output, which then holds the JSON alone (the table goes to
    stderr); it wrote a file named ``-``."""
    monkeypatch.chdir(tmp_path)
    args = ["eval", "--agent", "line", "--stages", "opener", "--episodes", "1", "--plain"]
    assert main([*args, "--json", "-"]) == 0
    cap = capsys.readouterr()
    doc = json.loads(cap.out)
    assert doc["schema"] == "rally-eval" and doc["stages"][0]["stage"] == "opener"
    assert "opener" in cap.err and not (tmp_path / "-").exists()
    assert main([*args, "--csv", "-"]) == 0
    rows = list(csv.DictReader(io.StringIO(capsys.readouterr().out)))
    assert [r["stage"] for r in rows] == ["opener"] and not (tmp_path / "-").exists()
    assert main([*args, "--json", "-", "--csv", "-"]) == 2
    assert "only one of them" in capsys.readouterr().err


def test_rally_eval_plots(tmp_path):
    pytest.importorskip("pygame")
    rc = main(
        ["eval", "--agent", "heuristic", "--stages", "opener", "--plots", str(tmp_path), "--plain"]
    )
    assert rc == 0
    pngs = list(tmp_path.glob("*.png"))
    assert len(pngs) == 1 and pngs[0].stat().st_size > 1000


def test_import_rally_env_and_agents_stay_light():
    import subprocess

    code = (
        "import sys, rally_env, rally_env.cli, agents; rally_env.cli.build_parser(); "
        "import agents.evaluate, agents.heuristic, agents.reference; "
        "bad = [m for m in ('torch', 'stable_baselines3', 'pygame') if m in sys.modules]; "
        "print(bad); sys.exit(1 if bad else 0)"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr


def test_rally_eval_saves_verifiable_replays(tmp_path, capsys):
    from rally_env.replay import verify

    rdir = tmp_path / "replays"
    args = ["eval", "--agent", "heuristic", "--stages", "opener", "--episodes", "1"]
    assert main([*args, "--replays", str(rdir), "--plain"]) == 0
    (replay,) = rdir.glob("*.rrp.json.gz")
    report = verify(replay)
    assert report.accepted, report.message


def test_rally_eval_on_a_library_vehicle_uses_its_reference_and_no_par(tmp_path, capsys):
    import json

    from agents.reference import reference_time
    from physics.vehicles import vehicle

    out = tmp_path / "e.json"
    args = ["eval", "--agent", "random", "--stages", "opener", "--vehicle", "rally-car"]
    assert main([*args, "--json", str(out), "--plain"]) == 0
    (stage,) = json.loads(out.read_text())["stages"]
    assert stage["reference_time_s"] == pytest.approx(
        reference_time("opener", vehicle=vehicle("rally-car")).time_s
    )
    assert stage["par_time_s"] is None or not math.isfinite(stage["par_time_s"])
