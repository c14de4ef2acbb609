"""The default test run (README: ``pip install -e ".[dev,render,train]"`` then ``pytest -q``)
reports no skip for the suites of extras it does not install: the compat, server and Ray
suites are deselected by pyproject's ``-m 'not compat and not server and not ray'``, never
skipped by a failed import."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
#: what the compat, minari, server and ray extras install (and the default install does not)
NOT_INSTALLED = (
    "minari",
    "h5py",
    "torchrl",
    "skrl",
    "rl_zoo3",
    "fastapi",
    "uvicorn",
    "httpx",
    "psycopg",
    "playwright",
    "ray",
)


def test_the_default_run_skips_nothing_for_an_extra_it_does_not_install(tmp_path):
    # a machine without those extras, whatever this one has: each name imports as an error
    for name in NOT_INSTALLED:
        (tmp_path / name).mkdir()
        (tmp_path / name / "__init__.py").write_text(f"raise ImportError('no {name} here')\n")
    env = {"PYTHONPATH": f"{tmp_path}:{ROOT}", "PATH": "/usr/bin:/bin"}
    r = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "-rs", "-p", "no:cacheprovider"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    summary = r.stdout.splitlines()[-1]
    assert "deselected" in summary and "error" not in summary, summary
    assert "SKIPPED" not in r.stdout, (
        "a module skips at import for an extra the default run does not install; import the "
        "library in a fixture instead (tests/server/conftest.py: server_extra) so the default "
        "-m deselects its tests:\n" + r.stdout[r.stdout.find("short test summary") :]
    )
