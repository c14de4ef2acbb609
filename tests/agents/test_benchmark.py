"""The benchmark harness: set definitions, the score, exact figures on a tiny set, strict JSON."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

import tracks
from agents import benchmark as B
from agents.evaluate import HELD_OUT_SEED_BASE, run_episode
from agents.heuristic import HeuristicDriver


def test_set_definitions_are_fixed():
    assert list(B.SETS) == ["library", "default", "hard", "long"]
    assert [sp["stage"] for sp in B.SETS["library"].stage_specs()] == tracks.list_stages()
    assert len(tracks.list_stages()) == 8
    d, h, lg = B.SETS["default"], B.SETS["hard"], B.SETS["long"]
    assert d.seeds == tuple(2**31 + i for i in range(100))
    assert h.seeds == tuple(2**31 + 10_000 + i for i in range(50))
    assert lg.seeds == tuple(2**31 + 20_000 + i for i in range(20))
    assert (d.length_m, d.difficulty) == (2000.0, 0.5)
    assert (h.length_m, h.difficulty) == (2000.0, 0.8)
    assert (lg.length_m, lg.difficulty) == (5000.0, 0.5)
    # disjoint from each other and from training (seeds below 2**31)
    seeds = [s for bs in (d, h, lg) for s in bs.seeds]
    assert len(set(seeds)) == len(seeds) and min(seeds) >= B.TRAIN_SEED_LIMIT == 2**31
    # the default set is `rally eval --stages random:100`
    from agents.evaluate import resolve_stages

    assert [sp["stage"] for sp in d.stage_specs()] == resolve_stages("random:100")
    assert HELD_OUT_SEED_BASE == 2**31


def test_stages_are_what_the_generator_makes_and_are_named_like_it():
    for bs in (B.SETS["default"], B.SETS["hard"], B.SETS["long"]):
        sp = bs.stage_specs()[0]
        st = bs.build(sp)
        ref = tracks.generate(sp["seed"], length_m=sp["length_m"], difficulty=sp["difficulty"])
        assert st.digest() == ref.digest() and st.name == sp["stage"] == ref.name


def test_the_shipped_baseline_covers_every_test_stage():
    base = B.load_baseline()
    for bs in B.SETS.values():
        specs = bs.stage_specs()
        names = {v["stage"] for v in base.values()}
        assert {sp["stage"] for sp in specs} <= names, bs.name
    assert all(v["reference_time_s"] > 0 for v in base.values())
    assert all("heuristic_time_s" in v for v in base.values())  # made with today's settings


def test_the_shipped_oracle_covers_the_library_and_the_first_default_stages():
    """The oracle file holds a finished planner run, with its command and compute, for the 8
    library stages and the first 20 of the default set, keyed by what the benchmark builds."""
    oracle = B.load_oracle()
    base = B.load_baseline()
    for name, n in (("library", 8), ("default", 20)):
        bs = B.SETS[name]
        for sp in bs.stage_specs()[:n]:
            dg = bs.build(sp).digest()
            rec = oracle[dg]
            assert rec["stage"] == sp["stage"] and rec["set"] == name
            assert rec["command"].startswith("rally benchmark --agent mpc")
            assert rec["compute"]["car_steps"] > 0 and rec["compute"]["cpu_s"] > 0
            assert 0 < base[dg]["reference_time_s"] < rec["oracle_time_s"]


def test_the_shipped_baseline_is_what_the_heuristic_drives_today():
    base = B.load_baseline()
    st = B.SETS["default"].build(B.SETS["default"].stage_specs()[0])
    rec = base[st.digest()]
    r = run_episode(HeuristicDriver(), st, 0, record=False)
    assert r.finished and rec["heuristic_time_s"] == r.stage_time_s


def test_par_times_and_the_baseline_are_one_heuristic():
    """`rally par` and `rally benchmark --agent heuristic --write-baseline` are rerun together:
    both files carry today's heuristic settings and the same library stage times."""
    from agents.evaluate import PAR_TIMES_PATH, load_par_times

    par_doc = json.loads(PAR_TIMES_PATH.read_text())
    base_doc = json.loads(B.BASELINE_PATH.read_text())
    assert par_doc["heuristic_params"] == B.heuristic_fingerprint()
    assert base_doc["heuristic_params"] == B.heuristic_fingerprint()
    base = {v["stage"]: v for v in base_doc["stages"].values()}
    par = load_par_times()  # the stage files' par_time_s
    for name in tracks.list_stages():
        h = base[name]["heuristic_time_s"]
        assert h is not None, name
        assert round(h, 2) == par_doc["par_time_s"][name] == par[name], name
        assert round(base[name]["reference_time_s"], 2) == par_doc["reference_time_s"][name]


def test_score_formula():
    assert B.score(100.0, 125.0, True) == 0.8
    assert B.score(100.0, 80.0, True) == 1.25
    assert B.score(100.0, math.nan, False) == 0.0  # a DNF scores 0
    assert B.score(100.0, 50.0, False) == 0.0
    with pytest.raises(ValueError, match="reference_time_s"):
        B.score(0.0, 10.0, True)
    with pytest.raises(ValueError, match="stage_time_s"):
        B.score(100.0, math.nan, True)


def _steer_policy(obs):
    """A scripted driver: steer at the centerline point 10 m ahead, fixed throttle."""
    o = np.atleast_2d(obs)
    a = np.zeros((o.shape[0], 4), np.float32)
    a[:, 0] = np.clip(3.0 * o[:, 34], -1.0, 1.0)  # look_y_10m
    a[:, 1] = 0.5
    return a


def _no_nan(x):
    raise AssertionError(f"non-JSON constant {x}")


def _brake_policy(obs):
    a = np.zeros((np.atleast_2d(obs).shape[0], 4), np.float32)
    a[:, 2] = 1.0
    return a


TINY = B.BenchmarkSet("tiny", "two short generated stages", (11, 16), length_m=250.0)


def test_harness_figures_on_a_tiny_set_are_exact(tmp_path):
    res = B.run_benchmark(
        _steer_policy, [TINY], chunk=2, agent_name="steer", baseline=tmp_path / "none.json"
    )
    rows = res.rows
    assert [r.stage for r in rows] == ["gen-11-250m-d0.50", "gen-16-250m-d0.50"]
    from agents.reference import reference_time

    times, refs, heur = [], [], []
    for sp, row in zip(TINY.stage_specs(), rows, strict=True):
        st = TINY.build(sp)
        one = run_episode(_steer_policy, st, 0, record=False)  # the same run, one env at a time
        h = run_episode(HeuristicDriver(), st, 0, record=False)
        assert one.finished and h.finished
        assert row.finished and row.stage_time_s == one.stage_time_s
        assert row.off_road_s == one.off_road_s and row.steps == one.steps
        ref = reference_time(st).time_s
        assert row.reference_time_s == ref and row.heuristic_time_s == h.stage_time_s
        assert row.score == ref / one.stage_time_s
        times.append(one.stage_time_s)
        refs.append(ref)
        heur.append(h.stage_time_s)
    m = res.sets["tiny"]
    scores = [r / t for r, t in zip(refs, times, strict=True)]
    assert m["stages"] == 2 and m["finished"] == 2 and m["finish_rate"] == 1.0
    assert m["score_median"] == np.median(scores) and m["score_mean"] == np.mean(scores)
    gaps = [100.0 * (t / r - 1.0) for t, r in zip(times, refs, strict=True)]
    assert m["gap_reference_median_pct"] == np.median(gaps)
    hg = [100.0 * (t / h - 1.0) for t, h in zip(times, heur, strict=True)]
    assert m["gap_heuristic_median_pct"] == np.median(hg)
    assert m["off_road_mean_s"] == np.mean([r.off_road_s for r in rows])


def test_a_set_of_dnfs_scores_zero_and_writes_strict_json(tmp_path, capsys):
    res = B.run_benchmark(
        _brake_policy, [TINY], agent_name="brake", baseline=tmp_path / "none.json", progress=True
    )
    # in a log (stderr is no terminal) the progress ends with a plain line of the counts
    err = capsys.readouterr().err
    assert "rally benchmark brake: 2/2 stages in " in err and "(last: 0/2 finished)" in err
    m = res.sets["tiny"]
    assert m["finished"] == 0 and m["score_median"] == 0.0 and m["score_mean"] == 0.0
    assert math.isnan(m["gap_reference_median_pct"])
    out = res.write_json(tmp_path / "b.json")
    doc = json.loads(out.read_text(), parse_constant=_no_nan)
    assert doc["schema"] == "rally-benchmark" and doc["version"] == B.SCHEMA_VERSION
    assert doc["sets"]["tiny"]["gap_reference_median_pct"] is None
    assert all(r["stage_time_s"] is None and r["score"] == 0.0 for r in doc["stages"])
    assert "| `brake` | tiny | 2 | 0 (0 %) |" in res.markdown()


def test_same_agent_same_figures(tmp_path):
    a = B.run_benchmark("heuristic", [TINY], chunk=1, baseline=tmp_path / "none.json")
    b = B.run_benchmark("heuristic", [TINY], chunk=2, baseline=tmp_path / "none.json")
    assert [r.stage_time_s for r in a.rows] == [r.stage_time_s for r in b.rows]
    assert a.sets == b.sets


def test_start_and_limit_pick_a_slice_of_each_set(tmp_path):
    full = B.run_benchmark(_brake_policy, [TINY], agent_name="b", baseline=tmp_path / "n.json")
    tail = B.run_benchmark(
        _brake_policy, [TINY], start=1, agent_name="b", baseline=tmp_path / "n.json"
    )
    assert [r.stage for r in tail.rows] == [full.rows[1].stage] == ["gen-16-250m-d0.50"]
    assert tail.partial and not full.partial
    head = B.run_benchmark(
        _brake_policy, [TINY], start=0, limit=1, agent_name="b", baseline=tmp_path / "n.json"
    )
    assert [r.stage for r in head.rows] == ["gen-11-250m-d0.50"]


def test_bad_arguments_are_refused():
    with pytest.raises(ValueError, match="unknown benchmark set 'nope'"):
        B.resolve_sets("library,nope")
    with pytest.raises(ValueError, match="limit"):
        B.run_benchmark("heuristic", "library", limit=0)
    with pytest.raises(ValueError, match="start must be a non-negative integer"):
        B.run_benchmark("heuristic", "library", start=-1)
    with pytest.raises(ValueError, match="chunk"):
        B.run_stages(_brake_policy, ["opener"], chunk=0)


def test_a_baseline_or_oracle_file_of_another_kind_is_refused(tmp_path):
    (tmp_path / "o.json").write_text(B.ORACLE_PATH.read_text())
    with pytest.raises(ValueError, match=r"o\.json: not a rally benchmark baseline"):
        B.load_baseline(tmp_path / "o.json")
    (tmp_path / "b.json").write_text(B.BASELINE_PATH.read_text())
    with pytest.raises(ValueError, match=r"b\.json: not a rally oracle file"):
        B.load_oracle(tmp_path / "b.json")
    assert B.load_oracle(tmp_path / "none.json") == {} == B.load_baseline(tmp_path / "none.json")


def test_cli_quick_look_writes_json_and_markdown(tmp_path, capsys):
    from rally_env.cli import main

    j, md = tmp_path / "b.json", tmp_path / "b.md"
    rc = main(
        [
            "benchmark",
            "--agent",
            "random",
            "--sets",
            "library",
            "--limit",
            "1",
            "--json",
            str(j),
            "--markdown",
            str(md),
            "--no-progress",
        ]
    )
    assert rc == 0
    doc = json.loads(j.read_text())
    assert doc["partial"] is True and doc["agent"] == "random" and len(doc["stages"]) == 1
    assert md.read_text().startswith("| agent | set |")
    assert main(["benchmark", "--sets", "nope", "--no-progress"]) == 2
    assert "unknown benchmark set" in capsys.readouterr().err
    assert main(["benchmark", "--agent", "random", "--write-baseline", "--no-progress"]) == 2


def test_cli_twice_gives_the_same_json_and_shows_a_progress_bar(tmp_path, capsys):
    """A deterministic agent: two runs write the same JSON (all but the wall-clock ``timing``)."""
    from rally_env.cli import main

    docs = []
    for i in range(2):
        j = tmp_path / f"b{i}.json"
        argv = ["benchmark", "--agent", "random", "--sets", "library,hard", "--limit", "1"]
        assert main([*argv, "--chunk", "1", "--json", str(j)]) == 0
        err = capsys.readouterr().err
        assert "benchmark random" in err and "2/2" in err  # the progress bar, on stderr
        docs.append(json.loads(j.read_text(), parse_constant=_no_nan))
    a, b = docs
    assert set(a["timing"]) == {"build_s", "reference_s", "heuristic_s", "wall_s"}
    a.pop("timing"), b.pop("timing")
    assert a == b
    assert [r["stage"] for r in a["stages"]] == ["forest", "gen-2147493648-2000m-d0.80"]
    # the stream of a seeded random agent: another seed drives otherwise
    j = tmp_path / "c.json"
    assert main([*argv, "--chunk", "1", "--seed", "1", "--json", str(j), "--no-progress"]) == 0
    c = json.loads(j.read_text())
    assert [r["progress_m"] for r in c["stages"]] != [r["progress_m"] for r in a["stages"]]
