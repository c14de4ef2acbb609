"""Policies for evaluation: what ``--agent`` accepts, resolved to a batched callable.

A *policy* here is any callable ``policy(obs) -> actions`` taking a float32 observation batch
``(N, obs_dim)`` and returning actions ``(N, 4)`` (or ``(N,)`` discrete); an optional
``reset(n)`` method is called at the start of every episode. :func:`make_policy` resolves:

* ``"heuristic"``: :class:`agents.heuristic.HeuristicDriver`,
* ``"random"``: :class:`rally_env.policies.RandomPolicy` (seeded uniform random actions),
* ``"ppo-opener"`` (or any name in :data:`SHIPPED`): a policy shipped in ``agents/policies/``,
* ``"path/to/model.zip"``: a stable-baselines3 model saved by ``rally train`` (the
  ``vecnormalize.pkl`` beside it is used when present),
* ``"package.module:function"``: a user callable; if calling it with no arguments returns a
  callable (a factory), that is the policy, else the callable itself is the policy.

Only the SB3 case imports torch / stable-baselines3, and only when it is used.
"""

from __future__ import annotations

import importlib
import inspect
from pathlib import Path
from typing import Any

import numpy as np

from agents.heuristic import HeuristicDriver
from rally_env.policies import RandomPolicy

POLICY_DIR = Path(__file__).parent / "policies"
#: Policies shipped with the package: name -> zip file in ``agents/policies/``.
SHIPPED = {"ppo-opener": "ppo-opener.zip"}


class SB3Policy:
    """A stable-baselines3 model as a batched deterministic policy.

    Observations are normalised with the model's saved ``VecNormalize`` statistics (if any)
    and the policy's ``[-1, 1]`` actions are mapped back to the env's action box.
    """

    def __init__(self, path: str | Path, deterministic: bool = True):
        from agents.models import load_model

        self.path = Path(path)
        self.name = self.path.stem
        self.model, self.obs_rms, self.meta = load_model(self.path)
        self.deterministic = deterministic

    def reset(self, n: int = 1) -> None:
        pass

    def __call__(self, obs: np.ndarray) -> np.ndarray:
        from agents.models import from_policy_action

        o = np.atleast_2d(np.asarray(obs, dtype=np.float32))
        if self.obs_rms is not None:
            mean, var, clip, eps = self.obs_rms
            o = np.clip((o - mean) / np.sqrt(var + eps), -clip, clip).astype(np.float32)
        a, _ = self.model.predict(o, deterministic=self.deterministic)
        a = from_policy_action(np.asarray(a, dtype=np.float32))
        return a if np.ndim(obs) > 1 else a[0]


def shipped_policy_path(name: str) -> Path:
    """Path of a shipped policy (``FileNotFoundError`` when it is not in the package)."""
    p = POLICY_DIR / SHIPPED[name]
    if not p.exists():
        raise FileNotFoundError(
            f"shipped policy {name!r} not found at {p}; train it with "
            "`rally train --algo ppo --stage opener --out runs/ppo-opener` "
            "(see docs/agents.md)"
        )
    return p


def make_policy(spec: Any, seed: int = 0) -> Any:
    """Resolve an ``--agent`` value (or pass a callable through) to a policy."""
    if callable(spec) and not isinstance(spec, str):
        return spec
    if not isinstance(spec, str):
        raise TypeError(f"agent must be a name, a path or a callable, got {spec!r}")
    if spec == "heuristic":
        return HeuristicDriver()
    if spec == "random":
        return RandomPolicy(seed)
    if spec in SHIPPED:
        pol = SB3Policy(shipped_policy_path(spec))
        pol.name = spec
        return pol
    if spec.endswith(".zip") or Path(spec).suffix == ".zip":
        if not Path(spec).exists():
            raise FileNotFoundError(f"model file not found: {spec}")
        return SB3Policy(spec)
    if ":" in spec:
        mod_name, _, attr = spec.partition(":")
        try:
            obj = getattr(importlib.import_module(mod_name), attr)
        except (ImportError, AttributeError) as e:
            raise ValueError(f"cannot load policy {spec!r}: {e}") from None
        if inspect.isclass(obj):
            return obj()
        try:
            sig = inspect.signature(obj)
            required = [
                p
                for p in sig.parameters.values()
                if p.default is p.empty and p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)
            ]
        except (TypeError, ValueError):
            required = [None]
        if not required:  # a factory
            return obj()
        return obj
    raise ValueError(
        f"unknown agent {spec!r}: use heuristic, random, {', '.join(SHIPPED)}, a .zip model "
        "path or module:function"
    )


def resolve_agent(spec: Any, seed: int | None = None) -> tuple[Any, str]:
    """The ``rally_env.policies`` entry point: ``(policy, label)`` for an ``--agent`` value."""
    pol = make_policy(spec, seed=0 if seed is None else int(seed))
    return pol, policy_name(pol, spec)


def policy_name(policy: Any, spec: Any = None) -> str:
    if isinstance(spec, str):
        return spec
    return str(getattr(policy, "name", getattr(policy, "__name__", type(policy).__name__)))
