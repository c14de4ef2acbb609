"""Stage maps (Pillow) and the import rule: ``import tracks`` loads neither Pillow nor pygame."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

import tracks

pytest.importorskip("PIL")


def test_import_tracks_is_light():
    code = (
        "import sys, tracks; tracks.load_stage('skidpad'); "
        "print(any(m.split('.')[0] in ('pygame', 'PIL') for m in sys.modules))"
    )
    root = Path(tracks.__file__).resolve().parent.parent
    env = dict(os.environ, PYTHONPATH=str(root) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        check=True,
    )
    assert out.stdout.strip() == "False"


def test_render_stage_map():
    from tracks.render import render_stage

    img = render_stage(tracks.load_stage("rallycross"), size=200)
    assert img.size == (200, 200)
    colors = img.getcolors(maxcolors=200 * 200)
    assert colors is not None and len(colors) > 50  # it drew something


def test_render_cli(tmp_path, capsys):
    from tracks.render import main

    out = tmp_path / "map.png"
    assert main(["skidpad", "--out", str(out), "--size", "160"]) == 0
    assert out.stat().st_size > 1000
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert main(["no-such-stage", "--out", str(out)]) == 2
    assert capsys.readouterr().err.startswith("error: no stage named 'no-such-stage'; ")
