"""``rally eval``'s table says how the runs that did not finish ended (before, "0/10  -  -"
with the end reasons only in ``--json``), and the command says what it does as it starts."""

from __future__ import annotations

import json
import math
from collections import Counter

import pytest

from agents.evaluate import RunResult, format_table, unfinished_ends
from rally_env.cli import main


def _run(stage: str, end: str) -> RunResult:
    fin = end == "finished"
    return RunResult(stage, 0, fin, end, 80.0 if fin else math.nan, 10.0, 5.0, 0.0, 1.0, 20)


def test_unfinished_ends_counts_the_end_reasons_most_frequent_first():
    runs = [_run("a", "stuck")] * 3 + [_run("a", "off_stage")] * 7 + [_run("a", "finished")]
    runs += [_run("b", "finished")]
    assert unfinished_ends(runs, "a") == "off_stage 7, stuck 3"
    assert unfinished_ends(runs, "b") == "-"
    assert unfinished_ends([_run("a", "wrong_way"), _run("a", "rolled")], "a") == (
        "rolled 1, wrong_way 1"
    )


def test_format_table_checks_the_unfinished_column():
    with pytest.raises(ValueError, match="1 entries for 0 stage rows"):
        format_table([], rich=False, unfinished=["-"])


@pytest.mark.parametrize("plain", [True, False])
def test_rally_eval_table_shows_the_end_reasons(tmp_path, capsys, plain):
    out_json = tmp_path / "e.json"
    argv = ["eval", "--agent", "random", "--stages", "opener", "--episodes", "2"]
    argv += ["--json", str(out_json)] + (["--plain"] if plain else [])
    assert main(argv) == 0
    out, err = capsys.readouterr()
    runs = json.loads(out_json.read_text())["runs"]
    ends = Counter(r["end_reason"] for r in runs if not r["finished"])
    assert ends, "the random agent finished opener: pick another stage for this test"
    expected = ", ".join(f"{k} {n}" for k, n in sorted(ends.items(), key=lambda x: (-x[1], x[0])))
    header = next(line for line in out.splitlines() if "median s" in line)
    row = next(line for line in out.splitlines() if "opener" in line and "random" in line)
    assert "did not finish" in header
    assert row.rstrip(" │").endswith(expected)
    assert err.splitlines()[0] == "rally eval: random on 1 stage(s) x 2 episode(s) (seeds 0..1)"
    assert err.splitlines()[-1].startswith("  rally eval: 2/2 episodes in ")
