"""Run a Python snippet in a fresh interpreter (the benchmarks measure first steps, compiles
and other trees in processes of their own) and return the last line it printed."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path


def last_line(script: str, env: dict[str, str], cwd: str | Path) -> str:
    """The last line ``python -W ignore -c script`` prints (stdout), run in ``cwd`` with
    ``env``; ``CalledProcessError`` if it fails."""
    out = subprocess.run(
        [sys.executable, "-W", "ignore", "-c", script],
        env=env,
        capture_output=True,
        text=True,
        check=True,
        cwd=cwd,
    )
    return out.stdout.strip().splitlines()[-1]
