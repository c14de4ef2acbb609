"""Helpers shared by the replay and leaderboard tests (no tests here)."""

from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np

from rally_env import DEFAULT_LAYOUT, RallyEnv
from rally_env.replay import RecordReplay, Replay

ROOT = Path(__file__).resolve().parents[2]
_IX = DEFAULT_LAYOUT.index


def drive(obs: np.ndarray, vmax: Any = 16.0) -> np.ndarray:
    """A pure-pursuit driver on the observation's lookahead (vectorized over cars)."""
    obs = np.asarray(obs, np.float64)
    x = obs[..., _IX["look_x_20m"]] * 20.0
    y = obs[..., _IX["look_y_20m"]] * 20.0
    steer = np.clip(2.5 * np.arctan2(y, x), -1.0, 1.0)
    v = obs[..., _IX["speed"]] * 50.0
    c = (
        np.maximum.reduce(
            [np.abs(obs[..., _IX[k]]) for k in ("look_curv_20m", "look_curv_30m", "look_curv_45m")]
        )
        / 10.0
    )
    vt = np.minimum(vmax, np.sqrt(0.5 * 3.72 / np.maximum(c, 1e-3)))
    thr = np.clip((vt - v) * 0.5, 0.0, 1.0)
    brk = np.clip((v - vt) * 0.3, 0.0, 1.0)
    return np.stack([steer, thr, brk, np.zeros_like(v)], -1).astype(np.float32)


def record_run(
    seed: int = 3, vmax: float = 16.0, max_steps: int = 100_000, **env_kwargs: Any
) -> tuple[Replay, dict[str, Any]]:
    """Drive one episode with :func:`drive` under RecordReplay; (replay, last info)."""
    env_kwargs.setdefault("stage", "opener")
    env = RecordReplay(RallyEnv(**env_kwargs), save_partial=True)
    obs, info = env.reset(seed=seed)
    for _ in range(max_steps):
        obs, _, term, trunc, info = env.step(drive(obs, vmax))
        if term or trunc:
            break
    env.close()
    return env.replays[-1], info


def tiny_stage():
    from tracks import Finish, PathBuilder, Section, Stage, Start

    b = PathBuilder(knot_spacing_m=10.0)
    b.straight(60.0).turn(30.0, 45.0).straight(40.0)
    return Stage(
        name="tiny",
        knots=b.knots(),
        sections=(Section(0.0, 8.0, "gravel"),),
        finish=Finish(s_m=90.0),
        start=Start(10.0, 0.0),
    )


def read_doc(path: Path) -> dict[str, Any]:
    data = path.read_bytes()
    if data[:2] == b"\x1f\x8b":
        data = gzip.decompress(data)
    return json.loads(data)


def write_doc(path: Path, doc: dict[str, Any]) -> Path:
    path.write_bytes(gzip.compress(json.dumps(doc).encode()))
    return path


def run_py(code: str, *args: str, env: dict[str, str] | None = None, timeout: float = 120):
    """Run python code in a fresh process with the repo on the path."""
    e = dict(os.environ)
    e["PYTHONPATH"] = str(ROOT) + os.pathsep + e.get("PYTHONPATH", "")
    if env:
        e.update(env)
    return subprocess.run(
        [sys.executable, "-c", code, *args],
        capture_output=True,
        text=True,
        env=e,
        timeout=timeout,
        cwd=str(ROOT),
    )


def run_cli(*args: str, env: dict[str, str] | None = None, timeout: float = 120):
    return run_py(
        "import sys; from rally_env.cli import main; sys.exit(main())",
        *args,
        env=env,
        timeout=timeout,
    )
