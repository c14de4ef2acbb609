"""Bad output paths and numbers are refused with a message (exit 2) before any work starts."""

from __future__ import annotations

import pytest

from rally_env.cli import main


@pytest.mark.parametrize(
    "argv",
    [
        ["record", "--out", "{d}"],
        ["record", "--out", "{d}/noext"],
        ["record", "--out", "{f}/run.mp4"],
        ["record", "--max-seconds", "-1", "--out", "{d}/a.mp4"],
        ["record", "--agent", "{f}", "--out", "{d}/a.mp4"],
        ["eval", "--json", "{d}"],
        ["eval", "--csv", "{f}/o.csv"],
        ["par", "--out", "{d}"],
        ["train", "--out", "{f}"],
        ["train", "--resume", "{d}/nope.zip", "--out", "{d}/r"],
        ["train", "--resume", "{f}", "--out", "{d}/r"],
        ["train", "--timesteps", "0", "--out", "{d}/r"],
        ["train", "--timesteps", "-5", "--out", "{d}/r"],
        ["train", "--n-envs", "0", "--out", "{d}/r"],
    ],
)
def test_refused_before_the_work_starts(argv, tmp_path, capsys):
    f = tmp_path / "notzip.zip"
    f.write_text("junk")
    before = sorted(p.name for p in tmp_path.iterdir())
    rc = main([a.format(d=tmp_path, f=f) for a in argv])
    err = capsys.readouterr().err
    assert rc == 2 and "error" in err and "Traceback" not in err
    assert sorted(p.name for p in tmp_path.iterdir()) == before


def test_a_parent_that_is_a_file_is_named(tmp_path, capsys):
    """Before, ``mkdir`` under a file gave "(File exists)" as the reason."""
    f = tmp_path / "plain"
    f.write_text("x")
    assert main(["eval", "--csv", f"{f}/o.csv"]) == 2
    assert f"{f} is not a directory" in capsys.readouterr().err
    assert main(["leaderboard", "show", "--stage", "opener", "--db", f"{f}/lb.db"]) == 2
    assert f"{f} is not a directory" in capsys.readouterr().err


@pytest.mark.parametrize("agent", ["os:getcwd", "os:sep"])
def test_a_module_function_that_is_no_policy_is_named(agent, capsys):
    """Before, ``os:getcwd`` was called and its result reported as an unknown agent name."""
    assert main(["eval", "--agent", agent, "--stages", "opener"]) == 2
    err = capsys.readouterr().err
    assert f"agent {agent!r} is not a policy: it gives a str" in err and "Traceback" not in err
