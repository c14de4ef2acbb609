"""Par times: the heuristic driver's stage time on each library stage.

``python -m agents.par`` (or ``rally par``) writes :data:`agents.evaluate.PAR_TIMES_PATH`
(``agents/par_times.json``). The stage files' own ``par_time_s`` field belongs to ``tracks``;
copy these values there when the library is next regenerated.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any


def compute_par_times(stages: Any = "library") -> dict[str, float]:
    """``{stage: heuristic finish time (s)}``; raises if the heuristic fails a stage."""
    from agents.evaluate import evaluate

    res = evaluate("heuristic", stages, [0])
    out = {}
    for s in res.stages:
        if s.finished != s.episodes:
            raise RuntimeError(f"the heuristic driver did not finish {s.stage}")
        out[s.stage] = round(s.median_time_s, 2)
    return out


def write_par_times(stages: Any = "library", path: str | Path | None = None):
    from agents.evaluate import PAR_TIMES_PATH
    from agents.heuristic import HeuristicParams
    from agents.reference import reference_time

    times = compute_par_times(stages)
    p = Path(path) if path else PAR_TIMES_PATH
    doc = {
        "about": "heuristic driver (agents.heuristic, default HeuristicParams) stage times, "
        "reset seed 0; written by `rally par` / `python -m agents.par`",
        "heuristic_params": {
            k: getattr(HeuristicParams(), k) for k in HeuristicParams.__dataclass_fields__
        },
        "par_time_s": times,
        "reference_time_s": {k: round(reference_time(k).time_s, 2) for k in times},
    }
    p.write_text(json.dumps(doc, indent=2) + "\n")
    return p, times


if __name__ == "__main__":
    path, times = write_par_times(sys.argv[1] if len(sys.argv) > 1 else "library")
    for k, v in times.items():
        print(f"{k:16s} {v:8.2f} s")
    print(f"wrote {path}")
