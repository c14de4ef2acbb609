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
    "evaluate": ("agents.evaluate", "evaluate"),
    "EvalResult": ("agents.evaluate", "EvalResult"),
    "StageSummary": ("agents.evaluate", "StageSummary"),
    "RunResult": ("agents.evaluate", "RunResult"),
    "resolve_stages": ("agents.evaluate", "resolve_stages"),
    "HeuristicDriver": ("agents.heuristic", "HeuristicDriver"),
    "HeuristicParams": ("agents.heuristic", "HeuristicParams"),
    "heuristic_policy": ("agents.heuristic", "heuristic_policy"),
    "reference_time": ("agents.reference", "reference_time"),
    "ReferenceProfile": ("agents.reference", "ReferenceProfile"),
    "make_policy": ("agents.policies", "make_policy"),
}

__all__ = sorted(_LAZY)


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        mod, attr = _LAZY[name]
        return getattr(importlib.import_module(mod), attr)
    raise AttributeError(f"module 'agents' has no attribute {name!r}")
