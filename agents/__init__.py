"""Agents for rally-env: the heuristic driver, the reference-time solver, stage-time
evaluation, and stable-baselines3 training. Usage, and why ``import agents`` never imports
stable-baselines3 or torch: docs/agents.md.
"""

from __future__ import annotations

from typing import Any

_LAZY = {
    "evaluate": "agents.evaluate",
    "EvalResult": "agents.evaluate",
    "StageSummary": "agents.evaluate",
    "RunResult": "agents.evaluate",
    "resolve_stages": "agents.evaluate",
    "HeuristicDriver": "agents.heuristic",
    "HeuristicParams": "agents.heuristic",
    "reference_time": "agents.reference",
    "ReferenceProfile": "agents.reference",
    "make_policy": "agents.policies",
}

__all__ = sorted(_LAZY)


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'agents' has no attribute {name!r}")
