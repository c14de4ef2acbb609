"""What the run page draws: a run's trace from the server's own re-simulation (per control
step: time, position, heading, speed, progress; the re-simulated times) and stage maps
(``docs/server.md``, ``GET /api/v1/runs/{id}/trace``).
"""

from __future__ import annotations

import gzip
import json
from typing import Any

import numpy as np

from rally_env.replay.budgets import Budgets
from rally_env.replay.format import Replay, time_json
from rally_env.replay.ghost import resim_ghost


def _r(a: Any, nd: int) -> list[float]:
    return [round(float(v), nd) for v in np.asarray(a, np.float64)]


def stage_geometry(stage: Any, step_m: float = 4.0) -> dict[str, Any]:
    """A stage's map: centerline samples about ``step_m`` apart with the half width, the
    start, the checkpoint lines and the finish line (positions and directions)."""
    p = stage.path
    k = max(1, round(step_m / p.ds_m))
    idx = np.arange(0, p.s_m.shape[0], k)
    if idx[-1] != p.s_m.shape[0] - 1:
        idx = np.append(idx, p.s_m.shape[0] - 1)

    def line(s: float) -> dict[str, float]:
        (x, y), (tx, ty) = p.point_at(s), p.tangent_at(s)
        return {
            "s_m": round(float(s), 2),
            "x": round(float(x), 2),
            "y": round(float(y), 2),
            "tx": round(float(tx), 4),
            "ty": round(float(ty), 4),
            "hw": round(float(p.half_width_at(s)), 2),
        }

    return {
        "name": stage.name,
        "digest": stage.digest(),
        "closed": bool(p.closed),
        "length_m": round(float(p.length_m), 2),
        "x": _r(p.x_m[idx], 2),
        "y": _r(p.y_m[idx], 2),
        "hw": _r(p.half_width_m[idx], 2),
        "start": line(0.0),
        "checkpoints": [line(s) for s in stage.checkpoints_m],
        "finish": line(float(stage.finish_s_m)) if not p.closed else line(0.0),
    }


def trace_of(replay: Replay, budgets: Budgets | None = None) -> dict[str, Any]:
    """Re-simulate ``replay`` (:func:`~rally_env.replay.ghost.resim_ghost`): the car after
    the reset and after every step."""
    g, stage = resim_ghost(replay, budgets)
    heading = [g.pose(i)["heading_rad"] for i in range(len(g))]
    return {
        "run_id": replay.run_id(),
        "control_hz": int(replay.control_hz),
        "steps": int(replay.steps),
        "stage": stage_geometry(stage),
        "t": _r(g.t_s, 4),
        "x": _r(g.pos_m[:, 0], 3),
        "y": _r(g.pos_m[:, 1], 3),
        "heading": _r(heading, 4),
        "speed": _r(g.speed_mps, 3),
        "progress": _r(g.progress_m, 2),
        "checkpoint_times_s": [time_json(c) for c in g.checkpoint_times_s],
        "finish_time_s": time_json(g.finish_time_s),
    }


def encode(doc: dict[str, Any]) -> bytes:
    """A trace as stored: gzip-compressed JSON."""
    return gzip.compress(json.dumps(doc, separators=(",", ":")).encode(), 6, mtime=0)
