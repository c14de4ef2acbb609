"""Long commands say what they do: ``agents.progress.Progress`` in a log (plain lines, no
bar), and ``rally verify`` / ``rally leaderboard add`` as they start."""

from __future__ import annotations

import io
from pathlib import Path

from agents.progress import Progress
from rally_env.cli import main

FIXTURE = Path(__file__).resolve().parents[1] / "rally_env" / "fixtures" / "replays"


def test_progress_in_a_log_writes_plain_lines_and_a_last_one():
    log = io.StringIO()  # not a terminal
    p = Progress(3, "rally eval", "episode", every_s=0.0, stream=log)
    for note in ("opener 83.37 s", "opener stuck", "forest 100.00 s"):
        p.update(note)
    p.close()
    lines = log.getvalue().splitlines()
    assert [ln.split(" in ")[0] for ln in lines] == [
        "  rally eval: 1/3 episodes",
        "  rally eval: 2/3 episodes",
        "  rally eval: 3/3 episodes",
    ]
    assert lines[-1].endswith("(last: forest 100.00 s)") and "\r" not in log.getvalue()
    quiet = io.StringIO()
    p = Progress(2, "x", "item", every_s=3600.0, stream=quiet)
    p.update()
    p.update()
    p.close()
    assert quiet.getvalue().startswith("  x: 2/2 items in ")  # only the last line
    off = io.StringIO()
    p = Progress(1, "x", "item", enabled=False, stream=off)
    p.update()
    p.close()
    assert off.getvalue() == ""


def test_progress_counted_in_all_never_goes_back():
    log = io.StringIO()
    p = Progress(1500, "mpc opener", "metre", every_s=0.0, stream=log)
    for done in (120, 80, 700):  # a car rolling back does not undo the progress
        p.update(done=done)
    p.close()
    assert [ln.split(" in ")[0] for ln in log.getvalue().splitlines()] == [
        "  mpc opener: 120/1500 metres",
        "  mpc opener: 120/1500 metres",
        "  mpc opener: 700/1500 metres",
        "  mpc opener: 700/1500 metres",
    ]


def test_rally_verify_says_what_it_does_as_it_starts(capsys):
    files = sorted(FIXTURE.glob("*.rrp.json.gz"))[:2]
    assert len(files) == 2
    main(["verify", *map(str, files)])
    err = capsys.readouterr().err
    assert err.splitlines()[0] == (
        "rally: verifying 2 replay(s): each is re-simulated from the file alone"
    )
