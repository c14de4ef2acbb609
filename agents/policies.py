"""Policies for evaluation: what ``--agent`` accepts, resolved to a batched callable.

A *policy* is any callable ``policy(obs (N, D)) -> actions (N, 4)`` (or ``(N,)`` discrete),
with an optional ``reset(n)`` called at the start of every episode. :func:`make_policy`
resolves this package's names (:func:`resolve_agent`: the heuristic driver, the oracle
planner, shipped and ``.zip`` models, exported ``policy.json``) and :mod:`rally_env.policies`'s
own (``random``, ``line``, ``module:function``). Only ``.zip`` models import torch and
stable-baselines3, and only when one is used.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from agents.heuristic import HeuristicDriver
from agents.models import (
    ExportedPolicy,
    ResidualDriver,
    from_policy_action,
    load_model,
    made_by_rally_train,
    normalize_obs,
    obs_env_kwargs,
    residual_meta,
)
from agents.planner import make_planner
from rally_env.config import RallyConfig
from rally_env.policies import policy_env_kwargs as policy_env_kwargs  # re-exported
from rally_env.policies import resolve_policy

POLICY_DIR = Path(__file__).parent / "policies"
#: Policies shipped with the package: name -> zip file in ``agents/policies/`` (what each is
#: and the recipe that made it: docs/agents.md, "Shipped policy").
SHIPPED = {
    "ppo-opener": "ppo-opener.zip",
    "net-general": "net-general.zip",
    "ppo-general": "ppo-general.zip",
    "bc-general": "bc-general.zip",
    "es-general": "es-general.zip",
}


#: ``action_space`` choices of :class:`SB3Policy` (``rally eval --action-space``).
ACTION_SPACES = ("auto", "policy", "env")


class SB3Policy:
    """A stable-baselines3 model as a batched deterministic policy: observations normalised
    with the model's saved ``VecNormalize`` statistics (if any), actions mapped from
    ``[-1, 1]^4`` to the env's box or used as they are (docs/agents.md, "Evaluation").

    Args:
        path: the model zip.
        deterministic: the policy's mean action.
        action_space: ``"auto"`` (the remap for a model whose metadata says ``rally train``
            made it), ``"policy"`` (force the remap) or ``"env"`` (force none).

    Raises:
        ValueError: another ``action_space``.
    """

    def __init__(self, path: str | Path, deterministic: bool = True, action_space: str = "auto"):
        if action_space not in ACTION_SPACES:
            raise ValueError(f"action_space must be one of {ACTION_SPACES}, got {action_space!r}")
        self.path = Path(path)
        self.name = self.path.stem
        self.model, self.obs_rms, self.meta = load_model(self.path)
        self.deterministic = deterministic
        #: observation settings the model was trained with (``RallyEnv`` arguments)
        self.env_kwargs = obs_env_kwargs(self.meta)
        #: ``(base, scale)`` of a residual model: its output moves a base driver's actions
        self.residual = residual_meta(self.meta)
        self._base = None if self.residual is None else ResidualDriver(*self.residual)
        self.from_rally_train = made_by_rally_train(self.meta)
        if action_space == "auto":
            self.remap = self.from_rally_train
            why = (
                "its metadata says rally train made it"
                if self.remap
                else "no rally train metadata in the model"
            )
        else:
            self.remap = action_space == "policy"
            why = f"--action-space {action_space}"
        n_out = int(self.model.action_space.shape[0])
        self.action_note = (
            f"policy actions in [-1, 1]^{n_out} mapped to the env's box (rally train's "
            "convention: throttle (a + 1) / 2, brake"
            + (" and handbrake max(a, 0))" if n_out == 4 else " max(a, 0), no handbrake)")
            + f", because {why}"
            if self.remap
            else f"actions used as the model outputs them, in the env's own action space, "
            f"because {why}"
        )

    def reset(self, n: int = 1, mask: np.ndarray | None = None) -> None:
        """New episodes for all ``n`` cars, or for those in the bool array ``mask``."""
        if self._base is not None:
            self._base.reset(n, mask)

    def at_rate(self, control_hz: int) -> SB3Policy:
        """Drive on an env deciding at ``control_hz`` instead of the model's own rate: a
        residual model's base driver takes that rate's tuning and holds the model's outputs
        as many seconds as before (a DAgger teacher, ``[warmstart] teacher``; ``rally eval
        --env control_hz=...``); at its own rate nothing changes. Returns self."""
        own = self.env_kwargs.get("control_hz", RallyConfig.control_hz)
        if self.residual is not None and control_hz != own:
            hold = max(1, round(self.residual.hold * control_hz / own))
            self.residual = self.residual._replace(hold=hold)
            self._base = ResidualDriver(*self.residual, control_hz=control_hz)
        self.env_kwargs["control_hz"] = control_hz
        return self

    def __call__(self, obs: np.ndarray) -> np.ndarray:
        raw = np.atleast_2d(np.asarray(obs, dtype=np.float32))
        o = raw if self.obs_rms is None else normalize_obs(raw, self.obs_rms)
        a, _ = self.model.predict(o, deterministic=self.deterministic)
        a = np.asarray(a, dtype=np.float32)
        if self.residual is not None:
            a = self._base.act(raw, a)
        elif self.remap:
            a = from_policy_action(a)
        return a if np.ndim(obs) > 1 else a[0]


def reset_policy(policy: Any, n: int = 1) -> None:
    """Call ``policy.reset(n)`` (or ``reset()``) if the policy has one: a new episode."""
    if hasattr(policy, "reset"):
        try:
            policy.reset(n)
        except TypeError:
            policy.reset()


def bind_policy(policy: Any, envs: list[Any]) -> None:
    """Give a policy that plans with the simulator (one with a ``bind`` method, such as the
    oracle planner, :class:`agents.planner.MPCPlanner`) the envs of a batch, one per
    observation row, right after their reset."""
    if hasattr(policy, "bind"):
        policy.bind([getattr(e, "unwrapped", e) for e in envs])


def finish_policy(policy: Any, n: int) -> list[dict[str, Any]]:
    """The batch of ``n`` episodes is over: a policy with a ``finish`` method (the planner)
    closes them and reports what each cost (its compute, as dicts); others report ``{}``."""
    if hasattr(policy, "finish"):
        out = list(policy.finish())
        if len(out) == n:
            return out
    return [{} for _ in range(n)]


def act_one(policy: Any, obs: np.ndarray) -> np.ndarray:
    """The action of a batched policy for one observation ``(D,)``: ``(4,)`` (or ``()``
    for a discrete policy)."""
    a = np.asarray(policy(obs[None, :]))
    return a[0] if a.ndim > 1 or (a.ndim == 1 and a.shape[0] == 1) else a


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


def resolve_agent(
    spec: str, seed: int = 0, action_space: str = "auto", progress: bool = False
) -> Any:
    """The ``rally_env.policies`` resolver this package registers: the policy for an
    ``--agent`` value it knows (``heuristic``, ``mpc[:SETTINGS]``, a shipped name, a
    ``.zip`` model, an exported ``policy.json``), else None (:func:`make_policy` resolves the
    rest: ``line``, ``random``, ``module:function``)."""
    if spec == "heuristic":
        return HeuristicDriver()
    if spec == "mpc" or spec.startswith("mpc:"):
        return make_planner(spec[4:], progress=progress)
    if spec in SHIPPED:
        pol = SB3Policy(shipped_policy_path(spec), action_space=action_space)
        pol.name = spec
        return pol
    if Path(spec).suffix == ".zip":
        if not Path(spec).exists():
            raise FileNotFoundError(f"model file not found: {spec}")
        return SB3Policy(spec, action_space=action_space)
    if spec.endswith(".json") or (Path(spec) / "policy.json").is_file():
        if not Path(spec).exists():
            raise FileNotFoundError(f"exported policy not found: {spec}")
        return ExportedPolicy(spec)
    return None


resolve_agent.names = (  # type: ignore[attr-defined]
    f"heuristic, mpc[:SETTINGS], {', '.join(SHIPPED)}, a .zip model path, an exported policy.json"
)


def make_policy(
    spec: Any, seed: int = 0, action_space: str = "auto", progress: bool = False
) -> Any:
    """Resolve an ``--agent`` value (or pass a callable through) to a policy: this package's
    names (:func:`resolve_agent`) and ``rally_env``'s own
    (:func:`rally_env.policies.resolve_policy`).

    ``action_space`` applies to ``.zip`` models (see :class:`SB3Policy`); ``progress`` to the
    planner (a progress bar per episode: it is slow)."""
    policy, _ = resolve_policy(
        spec, seed=seed, resolvers=[resolve_agent], action_space=action_space, progress=progress
    )
    return policy


def policy_name(policy: Any, spec: Any = None) -> str:
    if isinstance(spec, str):
        return spec
    return str(getattr(policy, "name", getattr(policy, "__name__", type(policy).__name__)))
