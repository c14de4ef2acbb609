"""What the run page draws: a run's trace from the server's own re-simulation, and stage maps.

A trace holds, per control step (after the reset and after every action), the car's time,
position, heading, speed and progress along the stage, plus the re-simulated split and finish
times and the stage's geometry (centerline and half width every few metres, the timing
lines). It is computed in a verification worker (never from the uploaded claims), stored
gzip-compressed in the ``traces`` table and served as JSON.
"""

from __future__ import annotations

import gzip
import json
import math
from typing import Any

import numpy as np

from physics import layout as L
from rally_env import kernels as K
from rally_env.replay.budgets import Budgets
from rally_env.replay.format import Replay, time_json
from rally_env.replay.resim import Resim


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
    """Re-simulate ``replay`` and sample the car after the reset and after every step."""
    sim = Resim(replay, budgets)
    core = sim.core
    stage = core.bank.slots[int(core.eistate[0, K.EI_SLOT])]
    rows: list[tuple[float, ...]] = []

    def sample() -> None:
        s = core.sim.state[0]
        t = int(core.sim.istate[0, L.I_SUBSTEPS]) / L.SUBSTEP_HZ
        w, qx, qy, qz = (float(v) for v in s[L.QUAT_W : L.QUAT_Z + 1])
        v = s[L.VEL_X : L.VEL_Z + 1]
        rows.append(
            (
                t,
                float(s[L.POS_X]),
                float(s[L.POS_Y]),
                math.atan2(2.0 * (w * qz + qx * qy), 1.0 - 2.0 * (qy * qy + qz * qz)),
                math.sqrt(float(v @ v)),
                float(sim.info["progress_m"]),
            )
        )

    sample()
    while sim.step():
        sample()
    a = np.array(rows, np.float64).reshape(-1, 6)
    return {
        "run_id": replay.run_id(),
        "control_hz": int(replay.control_hz),
        "steps": int(replay.steps),
        "stage": stage_geometry(stage),
        "t": _r(a[:, 0], 4),
        "x": _r(a[:, 1], 3),
        "y": _r(a[:, 2], 3),
        "heading": _r(a[:, 3], 4),
        "speed": _r(a[:, 4], 3),
        "progress": _r(a[:, 5], 2),
        "checkpoint_times_s": [time_json(c) for c in core.checkpoint_times(0)],
        "finish_time_s": time_json(sim.info["finish_time_s"]),
    }


def encode(doc: dict[str, Any]) -> bytes:
    """A trace as stored: gzip-compressed JSON."""
    return gzip.compress(json.dumps(doc, separators=(",", ":")).encode(), 6, mtime=0)
