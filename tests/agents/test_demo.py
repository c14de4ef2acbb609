"""`rally demo` end to end in the reduced (--quick) mode."""

from __future__ import annotations

import json
import re

from rally_env.cli import main


def test_demo_quick(tmp_path, capsys):
    rc = main(["demo", "--quick", "--out", str(tmp_path)])
    assert rc == 0
    out = capsys.readouterr().out
    assert "reference time" in out and "heuristic" in out
    # a line per phase as it starts (before, nothing for the first 23-52 s)
    lines = out.splitlines()
    assert lines[0].startswith("rally demo: the heuristic driver and the shipped policies")
    assert lines[1] == "computing the reference time (the point-mass solver) ..."
    assert lines[3] == "driving heuristic on opener ..."
    assert re.fullmatch(r"  heuristic: opener \d+\.\d\d s", lines[4])
    assert "driving ppo-opener on opener ..." in lines
    doc = json.loads((tmp_path / "demo.json").read_text())
    assert doc["stage"] == "opener" and doc["reference_time_s"] > 0
    agents = [r["agent"] for r in doc["results"]]
    assert agents[0] == "heuristic"
    heur = doc["results"][0]["stages"][0]
    assert heur["finished"] == 1
    try:
        import imageio_ffmpeg  # noqa: F401
        import pygame  # noqa: F401
    except ImportError:
        return
    videos = list(tmp_path.glob("*.mp4"))
    assert len(videos) == 1 and videos[0].stat().st_size > 1000


def test_demo_starts_the_precompile_worker_before_it_compiles_anything(tmp_path, monkeypatch):
    """With an empty numba cache the env's step kernels compile on another core from the
    demo's first line, beside the reference solver (rally_env.precompile)."""
    import pytest

    import agents.reference
    from rally_env import precompile

    calls = []

    def start(config, threaded=False):
        calls.append(("start", config.stage, threaded))

    monkeypatch.setattr(precompile, "start", start)

    def reference_time(*a, **k):
        calls.append(("reference",))
        raise RuntimeError("stop here")

    monkeypatch.setattr(agents.reference, "reference_time", reference_time)
    with pytest.raises(RuntimeError, match="stop here"):
        main(["demo", "--quick", "--out", str(tmp_path)])
    assert calls == [("start", "opener", False), ("reference",)]
