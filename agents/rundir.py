"""A training run's output directory (``rally train --out``), one run per directory
(:func:`claim_run_dir`; docs/agents.md, "Training"), and the JSON files a run writes there.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

from agents.evaluate import json_safe
from rally_env.paths import OutputPathError, check_output_dir

#: What a ``rally train`` run writes in its directory (stable-baselines3, a recipe, evolution
#: strategies, RLlib): what ``--overwrite`` removes. Nothing else is ever removed.
RUN_ENTRIES: tuple[str, ...] = (
    "model.zip",
    "best_model.zip",
    "vecnormalize.pkl",
    "config.json",
    "summary.json",
    "eval_log.csv",
    "es_log.csv",
    "progress.csv",
    "learning_curve.png",
    "checkpoints",
    "checkpoint",
    "policy",
    "tb",
)


class RunDirectoryError(OutputPathError):
    """``--out`` holds another run (or other files) and the command did not say what to do
    with it."""


def claim_run_dir(
    out: str | Path, *, resume: bool = False, overwrite: bool = False, what: str = "--out"
) -> Path:
    """Make ``out`` (named ``what`` in messages) the directory of a new run, created and
    writable; with ``resume`` (a run continuing a checkpoint) an existing run's files stay;
    ``overwrite`` removes them (:data:`RUN_ENTRIES`) first (docs/agents.md, "Training").

    Raises:
        RunDirectoryError: a non-empty directory without ``resume`` or ``overwrite``, or
            ``overwrite`` of a directory with files no run writes, or both flags.
        OutputPathError: the directory cannot be written.
    """
    p = Path(out)
    if resume and overwrite:
        raise RunDirectoryError(
            "--resume and --overwrite do not go together: --overwrite removes the run "
            "(checkpoints included) that --resume would continue"
        )
    entries = sorted(e.name for e in p.iterdir()) if p.is_dir() else []
    if entries and not resume:
        if not overwrite:
            shown = ", ".join(entries[:6]) + (", ..." if len(entries) > 6 else "")
            raise RunDirectoryError(
                f"{what} {p} is not empty ({shown}): a new run would mix its files with "
                "those; choose another --out, continue a checkpoint with --resume "
                "CKPT.zip, or replace the old run with --overwrite"
            )
        foreign = [e for e in entries if e not in RUN_ENTRIES]
        if foreign:
            raise RunDirectoryError(
                f"{what} {p}: --overwrite removes only a run's files, and it also holds "
                f"{', '.join(foreign)}; move those or choose another --out (nothing was removed)"
            )
        for name in entries:
            e = p / name
            if e.is_dir() and not e.is_symlink():
                shutil.rmtree(e)
            else:
                e.unlink()
    return check_output_dir(p, what)


def write_json(path: Path, doc: dict[str, Any]) -> None:
    """A run's ``config.json`` or ``summary.json``: strict JSON (NaN -> null; ``json.loads``
    of any reader, not just Python's, takes it)."""
    path.write_text(json.dumps(json_safe(doc), indent=2, allow_nan=False) + "\n")


def versions() -> dict[str, str]:
    """The stable-baselines3 and torch versions a run's ``config.json`` records (the
    ``train`` extra: imported here, when a run starts)."""
    import stable_baselines3
    import torch

    return {"stable_baselines3": stable_baselines3.__version__, "torch": torch.__version__}
