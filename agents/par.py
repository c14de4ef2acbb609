"""Par times, the heuristic driver's stage time on each library stage: ``rally par`` (or
``python -m agents.par``) writes ``agents/par_times.json`` and the ``par_time_s`` line of each
library stage file (metadata, out of the stage's digest: docs/stages.md)."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path
from typing import Any

_PAR_LINE = re.compile(r"^(#\s*)?par_time_s\s*=.*$", re.MULTILINE)
PAR_COMMENT = "  # the heuristic driver's time (rally par)"


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


def write_stage_file_par(name: str, par_time_s: float) -> Path:
    """Set the ``par_time_s`` line of library stage file ``tracks/stages/<name>.toml``, only
    if the file then reads back as the same stage (digest) with that par time (else
    ``ValueError``, nothing written)."""
    import tracks
    from tracks.io import load_stage

    path = Path(tracks.__file__).parent / "stages" / f"{name}.toml"
    text = path.read_text(encoding="utf-8")
    if not _PAR_LINE.search(text):
        raise ValueError(f"{path}: no par_time_s line to rewrite")
    new = _PAR_LINE.sub(f"par_time_s = {par_time_s:.2f}{PAR_COMMENT}", text, count=1)
    before = load_stage(str(path))
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(new, encoding="utf-8")
    try:
        after = load_stage(str(tmp))
        if after.digest() != before.digest() or after.par_time_s != round(par_time_s, 2):
            raise ValueError(f"{path}: rewriting par_time_s would change the stage")
        tmp.replace(path)
    finally:
        tmp.unlink(missing_ok=True)
    return path


def write_par_times(
    stages: Any = "library", path: str | Path | None = None
) -> tuple[Path, dict[str, float]]:
    """Compute the par times and write them as JSON to ``path`` (default the package's, then
    also into each library stage file); returns (the JSON path, ``{stage: par time (s)}``)."""
    import tracks
    from agents.evaluate import PAR_TIMES_PATH
    from agents.heuristic import fingerprint
    from agents.reference import reference_time

    times = compute_par_times(stages)
    p = Path(path) if path else PAR_TIMES_PATH
    doc = {
        "about": "heuristic driver (agents.heuristic, default settings: it reads the road "
        "ahead) stage times, reset seed 0; written by `rally par` / `python -m agents.par`",
        "heuristic_params": fingerprint(),
        "par_time_s": times,
        "reference_time_s": {k: round(reference_time(k).time_s, 2) for k in times},
    }
    p.write_text(json.dumps(doc, indent=2) + "\n")
    if path is None:
        library = set(tracks.list_stages())
        for name, t in times.items():
            if name in library:
                write_stage_file_par(name, t)
    return p, times


if __name__ == "__main__":
    path, times = write_par_times(sys.argv[1] if len(sys.argv) > 1 else "library")
    for k, v in times.items():
        print(f"{k:16s} {v:8.2f} s")
    print(f"wrote {path}")
