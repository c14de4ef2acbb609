"""Agents for rally-env: the heuristic driver, the reference-time solver, stage-time
evaluation, and stable-baselines3 training.

    import agents
    agents.reference_time("opener").time_s          # point-mass reference time (s)
    res = agents.evaluate("heuristic", "opener", seeds=range(3))
    print(res.table())

This is the only package that imports stable-baselines3 or torch (the ``train`` extra): at
module level only in its training modules, ``agents.sb3`` and ``agents.recipe``; elsewhere
inside the functions that load or train a model, so ``import agents`` and the driving,
evaluation and evolution-strategies modules work without it. See docs/agents.md.
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
    "heuristic_policy": "agents.heuristic",
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
