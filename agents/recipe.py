"""Training recipes: ``rally train --config agents/configs/general.toml`` and the one training
entry, :func:`train`.

A recipe holds every setting of a training run, so one command reproduces it from scratch.
Its sections per algorithm (``[run] algo``: ``ppo``, ``rllib-ppo``, ``es``; :data:`_SECTIONS`),
the warm start, the residual, the curriculum phases and the validation are docs/agents.md
("Training recipes"); ``rllib-ppo``: docs/ray.md. An unknown or ill-typed key, or a section
of another algorithm, is refused with a :class:`RecipeError` that names it.
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import functools
import math
import sys
import time
import tomllib
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from stable_baselines3 import PPO
from stable_baselines3.common.callbacks import CallbackList
from stable_baselines3.common.running_mean_std import RunningMeanStd
from stable_baselines3.common.vec_env import VecMonitor

import agents.es
import agents.rllib
from agents import sb3
from agents.es import ESSettings, check_inputs, input_columns
from agents.evaluate import validation_stages
from agents.models import (
    MAX_HOLD,
    RESIDUAL_BASES,
    RESIDUAL_KINDS,
    ResidualSpec,
    obs_env_kwargs,
)
from agents.rllib import RLLIB_PPO_DEFAULTS
from agents.sb3 import TRAIN_DEFAULTS, VALIDATION_STAGES, algo_defaults, train_env_kwargs
from rally_env.config import RallyConfig
from rally_env.errors import ConfigError

#: What a recipe's ``[ppo]`` starts from (a key it gives replaces one of these): the PPO
#: settings of the first recipes, kept so each recipe file reproduces its run; ``rally
#: train``'s own defaults (:data:`agents.sb3.PPO_DEFAULTS`) moved on.
RECIPE_PPO_BASE: dict[str, Any] = {
    "n_steps": 512,
    "batch_size": 512,
    "n_epochs": 10,
    "learning_rate": 3e-4,
    "gamma": 0.995,
    "gae_lambda": 0.95,
    "clip_range": 0.2,
    "ent_coef": 0.0,
    "vf_coef": 0.5,
    "max_grad_norm": 0.5,
    "policy_kwargs": {"net_arch": [64, 64], "log_std_init": -1.0},
}
#: A recipe's ``[ppo]`` keys: :data:`RECIPE_PPO_BASE`'s, more of SB3's PPO and the policy's own
_PPO_KEYS = {
    *RECIPE_PPO_BASE,
    "target_kl",
    "clip_range_vf",
    "normalize_advantage",
    "use_sde",
    "sde_sample_freq",
    "inputs",
    "handbrake",
}
_POLICY_KWARGS = {"net_arch", "log_std_init", "ortho_init", "activation_fn", "squash_output"}


class RecipeError(ValueError):
    """A recipe file that cannot be run: names the file, the key and the problem."""


@dataclass(frozen=True)
class WarmStart:
    """Behaviour cloning of the heuristic driver (see the module docstring).

    Attributes:
        steps: env steps of driver data (0 = no warm start).
        noise: Gaussian action noise the driver drives with (its clean action is the label).
        epochs, batch_size, lr: the regression of the policy mean onto the labels.
        critic_steps: env steps of PPO with the policy frozen (value function only).
        dagger_rounds: rounds after the first fit in which the clone drives (with
            ``dagger_noise``) and the driver labels the states it reaches; each round adds
            ``dagger_steps`` env steps to the data and refits for ``dagger_epochs`` epochs.
        teacher: ``"blind"``, the heuristic driver reading RallyDirect-v0's fields only, or
            ``"ahead"``, the driver that also reads the road-ahead block (needs
            ``road_ahead``); it runs at the env's ``control_hz``.
    """

    steps: int = 0
    noise: float = 0.3
    epochs: int = 10
    batch_size: int = 256
    lr: float = 1e-3
    critic_steps: int = 0
    dagger_rounds: int = 0
    dagger_steps: int = 0
    dagger_noise: float = 0.1
    dagger_epochs: int = 4
    teacher: str = "blind"


@dataclass(frozen=True)
class Residual:
    """A residual policy: the env action is the base driver's, moved by the policy's output
    times ``scale`` (:func:`agents.models.residual_action`); the policy's last layer starts
    at zero, so training starts from the base driver. ``base = ""`` is a plain policy.
    ``kind = "tuning"`` moves the base driver's speed plan instead of its actions, and
    ``hold`` > 1 makes the policy decide every ``hold`` control steps
    (:class:`agents.models.ResidualSpec`); the recipe's step counts stay env steps."""

    base: str = ""
    scale: float = 0.5
    kind: str = "action"
    hold: int = 1

    def spec(self) -> Any:
        """The :class:`agents.models.ResidualSpec`, or ``None`` for a plain policy."""
        return ResidualSpec(self.base, self.scale, self.kind, self.hold) if self.base else None


@dataclass(frozen=True)
class Phase:
    """From env step ``from_step`` on, train with these ``env`` overrides."""

    from_step: int
    env: dict[str, Any]


@dataclass(frozen=True)
class EvalSpec:
    """Validation: ``stages`` stages (``gen-<VALIDATION_SEED_BASE + i>``), every ``freq``
    steps, one episode each (deterministic policy)."""

    freq: int = 500_000
    stages: int = 20


@dataclass(frozen=True)
class RayRun:
    """Where an ``rllib-ppo`` recipe trains: the cluster (``"local"``: a Ray started for the
    run, ``"auto"`` or ``HOST:PORT``), the env-runner actors and the cars of each one's native
    vector env."""

    address: str = "local"
    num_env_runners: int = 0
    envs_per_runner: int = 8


@dataclass(frozen=True)
class Recipe:
    """Every setting of a training run (see the module docstring)."""

    source: str
    algo: str = "ppo"
    timesteps: int = 1_000_000
    n_envs: int = 16
    seed: int = 0
    out: str = "runs/recipe"
    threads: int = 1
    checkpoint_freq: int = 1_000_000
    env: dict[str, Any] = field(default_factory=dict)
    ppo: dict[str, Any] = field(default_factory=dict)
    warmstart: WarmStart = field(default_factory=WarmStart)
    residual: Residual = field(default_factory=Residual)
    phases: tuple[Phase, ...] = ()
    eval: EvalSpec = field(default_factory=EvalSpec)
    #: ``ppo`` only (``[ppo] inputs``): the observation fields or groups the actor reads
    #: (:func:`restrict_actor_inputs`); ``None``: all of them
    inputs: tuple[str, ...] | None = None
    #: ``ppo`` only (``[ppo] handbrake``): ``false``: a plain policy acts on steer, throttle
    #: and brake (the handbrake stays off)
    handbrake: bool = True
    #: ``rllib-ppo`` only: the cluster, RLlib's hyperparameters, episodes per evaluation
    ray: RayRun = field(default_factory=RayRun)
    rllib: dict[str, Any] = field(default_factory=dict)
    eval_seeds: int = 1
    #: ``es`` only: the :class:`agents.es.ESSettings`; validation every ``eval_every``
    #: iterations
    es: Any = None
    eval_every: int = 0
    #: whose defaults and evaluation the run has: ``"recipe"`` (a recipe file's:
    #: :data:`RECIPE_PPO_BASE`, validation scores) or ``"command"`` (``rally train``'s
    #: flags, :func:`command_recipe`: :data:`agents.sb3.PPO_DEFAULTS` or ``SAC_DEFAULTS``,
    #: stage times on ``eval_stages`` over ``eval_seeds`` runs each)
    defaults: str = "recipe"
    #: ``sac`` only (``rally train --algo sac``): hyperparameters over ``SAC_DEFAULTS``
    sac: dict[str, Any] = field(default_factory=dict)
    #: ``"command"`` only: the stages evaluated (a stage spec, ``"validation:50"``, ...)
    eval_stages: Any = None

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


# ------------------------------------------------------------------------------- loading
def _check_keys(src: str, section: str, got: dict[str, Any], known: set[str]) -> None:
    bad = sorted(set(got) - known)
    if bad:
        where = f"{section}." if section else ""
        raise RecipeError(
            f"{src}: unknown key{'s' if len(bad) > 1 else ''} "
            f"{', '.join(where + b for b in bad)} (known: {', '.join(sorted(known))})"
        )


def _int(src: str, key: str, v: Any, lo: int = 0) -> int:
    if isinstance(v, bool) or not isinstance(v, int) or v < lo:
        raise RecipeError(f"{src}: {key} must be an integer >= {lo}, got {v!r}")
    return v


def _num(src: str, key: str, v: Any, lo: float = 0.0) -> float:
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v < lo:
        raise RecipeError(f"{src}: {key} must be a finite number >= {lo}, got {v!r}")
    return float(v)


def _table(src: str, doc: dict[str, Any], key: str) -> dict[str, Any]:
    v = doc.get(key, {})
    if not isinstance(v, dict):
        raise RecipeError(f"{src}: [{key}] must be a table")
    return v


def load_recipe(path: str | Path) -> Recipe:
    """Read and check a recipe file (TOML). Raises :class:`RecipeError` on any bad key/value."""
    p = Path(path)
    src = str(p)
    try:
        doc = tomllib.loads(p.read_text())
    except OSError as e:
        raise RecipeError(f"{src}: cannot read it ({e.strerror or e})") from None
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as e:
        raise RecipeError(f"{src}: not valid TOML ({e})") from None
    return recipe_from_dict(doc, src)


#: the algorithms a recipe trains with, and the sections each one reads
RECIPE_ALGOS = ("ppo", "rllib-ppo", "es")
_SECTIONS = {
    "ppo": {"run", "env", "ppo", "warmstart", "residual", "phase", "eval"},
    "rllib-ppo": {"run", "env", "ray", "rllib", "eval"},
    "es": {"run", "env", "residual", "es", "eval"},
}
_RUN_KEYS = {
    "ppo": {"algo", "timesteps", "n_envs", "seed", "out", "threads", "checkpoint_freq"},
    "rllib-ppo": {"algo", "timesteps", "seed", "out", "checkpoint_freq"},
    "es": {"algo", "seed", "out"},
}


def _algo(src: str, doc: dict[str, Any]) -> str:
    run = _table(src, doc, "run")
    algo = run.get("algo", "ppo")
    if algo not in RECIPE_ALGOS:
        raise RecipeError(f"{src}: run.algo must be one of {RECIPE_ALGOS}, got {algo!r}")
    bad = sorted(set(doc) - _SECTIONS[algo])
    if bad:
        other = [b for b in bad if any(b in v for v in _SECTIONS.values())]
        if other:
            raise RecipeError(
                f"{src}: [{'], ['.join(other)}] {'is' if len(other) == 1 else 'are'} not for "
                f"run.algo = {algo!r} (its sections: {', '.join(sorted(_SECTIONS[algo]))})"
            )
        _check_keys(src, "", doc, _SECTIONS[algo])
    _check_keys(src, "run", run, _RUN_KEYS[algo])
    return algo


def recipe_from_dict(doc: dict[str, Any], src: str = "<recipe>") -> Recipe:
    """A :class:`Recipe` from the parsed TOML document (every key checked)."""
    algo = _algo(src, doc)
    if algo == "rllib-ppo":
        return _rllib_recipe(doc, src)
    if algo == "es":
        return _es_recipe(doc, src)
    run = _table(src, doc, "run")
    env = _table(src, doc, "env")
    _check_env(src, "env", env)
    ppo = copy.deepcopy(_table(src, doc, "ppo"))
    _check_keys(src, "ppo", ppo, _PPO_KEYS)
    inputs = ppo.pop("inputs", None)
    handbrake = ppo.pop("handbrake", True)
    if not isinstance(handbrake, bool):
        raise RecipeError(f"{src}: ppo.handbrake must be true or false, got {handbrake!r}")
    if not handbrake and _table(src, doc, "residual").get("base"):
        raise RecipeError(f"{src}: ppo.handbrake = false is for a plain policy, not a residual")
    if inputs is not None:
        try:
            inputs = check_inputs(inputs, road_ahead=env.get("road_ahead") is True)
        except ValueError as e:
            raise RecipeError(f"{src}: ppo.inputs: {e}") from None
    pk = ppo.get("policy_kwargs", {})
    if not isinstance(pk, dict):
        raise RecipeError(f"{src}: ppo.policy_kwargs must be a table")
    _check_keys(src, "ppo.policy_kwargs", pk, _POLICY_KWARGS)
    ws = _table(src, doc, "warmstart")
    _check_keys(src, "warmstart", ws, {f.name for f in dataclasses.fields(WarmStart)})
    kw: dict[str, Any] = {"teacher": ws.get("teacher", "blind")}
    for f in dataclasses.fields(WarmStart):  # counts >= 0 (epochs, batch size >= 1), rates
        v, key = ws.get(f.name, f.default), f"warmstart.{f.name}"
        if isinstance(f.default, int):
            kw[f.name] = _int(src, key, v, int(f.name in ("epochs", "batch_size", "dagger_epochs")))
        elif isinstance(f.default, float):
            kw[f.name] = _num(src, key, v)
    warm = WarmStart(**kw)
    if warm.teacher not in ("blind", "ahead"):
        raise RecipeError(
            f'{src}: warmstart.teacher must be "blind" or "ahead", got {warm.teacher!r}'
        )
    if warm.teacher == "ahead" and env.get("road_ahead") is not True:
        raise RecipeError(f'{src}: warmstart.teacher = "ahead" needs env.road_ahead = true')
    if warm.dagger_rounds > 0 and (warm.steps == 0 or warm.dagger_steps == 0):
        raise RecipeError(
            f"{src}: warmstart.dagger_rounds needs warmstart.steps and warmstart.dagger_steps > 0"
        )
    rs = _table(src, doc, "residual")
    resid = _residual(src, rs, Residual(), RESIDUAL_KINDS) if rs else Residual()
    if resid.base and warm.steps > 0:
        raise RecipeError(f"{src}: [residual] starts from its base driver: no [warmstart]")
    phases: list[Phase] = []
    raw = doc.get("phase", [])
    if not isinstance(raw, list):
        raise RecipeError(f"{src}: [[phase]] must be an array of tables")
    for i, ph in enumerate(raw):
        if not isinstance(ph, dict):
            raise RecipeError(f"{src}: phase[{i}] must be a table")
        _check_keys(src, f"phase[{i}]", ph, {"from_step", "env"})
        start = _int(src, f"phase[{i}].from_step", ph.get("from_step", 0))
        last = phases[-1].from_step if phases else -1
        if start <= last:
            raise RecipeError(f"{src}: phase[{i}].from_step must grow, got {start} after {last}")
        if i == 0 and start != 0:
            raise RecipeError(f"{src}: phase[0].from_step must be 0, got {start}")
        penv = ph.get("env", {})
        if not isinstance(penv, dict):
            raise RecipeError(f"{src}: phase[{i}].env must be a table")
        _check_env(src, f"phase[{i}].env", {**env, **penv})
        phases.append(Phase(start, penv))
    ev = _table(src, doc, "eval")
    _check_keys(src, "eval", ev, {"freq", "stages"})
    # timesteps = 0: the warm start alone (behaviour cloning and DAgger, no PPO)
    timesteps = _int(src, "run.timesteps", run.get("timesteps", 1_000_000), 0)
    if timesteps == 0 and (warm.steps == 0 or warm.critic_steps > 0 or phases):
        raise RecipeError(
            f"{src}: run.timesteps = 0 (no PPO) is a warm start alone: it needs "
            "warmstart.steps > 0, no warmstart.critic_steps and no [[phase]]"
        )
    return Recipe(
        source=src,
        algo=algo,
        timesteps=timesteps,
        n_envs=_int(src, "run.n_envs", run.get("n_envs", 16), 1),
        seed=_int(src, "run.seed", run.get("seed", 0)),
        out=str(run.get("out", "runs/recipe")),
        threads=_int(src, "run.threads", run.get("threads", 1), 1),
        checkpoint_freq=_int(src, "run.checkpoint_freq", run.get("checkpoint_freq", 1_000_000)),
        env=env,
        ppo=ppo,
        warmstart=warm,
        residual=resid,
        phases=tuple(phases),
        eval=EvalSpec(
            freq=_int(src, "eval.freq", ev.get("freq", 500_000)),
            stages=_int(src, "eval.stages", ev.get("stages", 20)),
        ),
        inputs=inputs,
        handbrake=handbrake,
    )


def _rllib_recipe(doc: dict[str, Any], src: str) -> Recipe:
    """An ``rllib-ppo`` recipe (see the module docstring)."""
    run = _table(src, doc, "run")
    env = _table(src, doc, "env")
    _check_env(src, "env", env)
    ray = _table(src, doc, "ray")
    _check_keys(src, "ray", ray, {f.name for f in dataclasses.fields(RayRun)})
    address = ray.get("address", "local")
    if not isinstance(address, str) or not address:
        raise RecipeError(f"{src}: ray.address must be 'local', 'auto' or HOST:PORT")
    rllib = copy.deepcopy(_table(src, doc, "rllib"))
    _check_keys(src, "rllib", rllib, set(RLLIB_PPO_DEFAULTS))
    ev = _table(src, doc, "eval")
    _check_keys(src, "eval", ev, {"freq", "seeds"})
    return Recipe(
        source=src,
        algo="rllib-ppo",
        timesteps=_int(src, "run.timesteps", run.get("timesteps", 1_000_000), 1),
        seed=_int(src, "run.seed", run.get("seed", 0)),
        out=str(run.get("out", "runs/recipe")),
        checkpoint_freq=_int(src, "run.checkpoint_freq", run.get("checkpoint_freq", 0)),
        env=env,
        ray=RayRun(
            address=address,
            num_env_runners=_int(src, "ray.num_env_runners", ray.get("num_env_runners", 0)),
            envs_per_runner=_int(src, "ray.envs_per_runner", ray.get("envs_per_runner", 8), 1),
        ),
        rllib=rllib,
        eval=EvalSpec(freq=_int(src, "eval.freq", ev.get("freq", 0)), stages=0),
        eval_seeds=_int(src, "eval.seeds", ev.get("seeds", 1), 1),
    )


def _residual(src: str, rs: dict[str, Any], default: Residual, kinds: tuple) -> Residual:
    """The ``[residual]`` table ``rs`` (its base required; the other keys default to
    ``default``'s), its kind one of ``kinds``."""
    _check_keys(src, "residual", rs, {"base", "scale", "kind", "hold"})
    if rs.get("base") not in RESIDUAL_BASES:
        raise RecipeError(f"{src}: residual.base must be one of {RESIDUAL_BASES}")
    kind = rs.get("kind", default.kind)
    if kind not in kinds:
        raise RecipeError(f"{src}: residual.kind must be one of {kinds}, got {kind!r}")
    resid = Residual(
        base=str(rs["base"]),
        scale=_num(src, "residual.scale", rs.get("scale", default.scale), 1e-3),
        kind=str(kind),
        hold=_int(src, "residual.hold", rs.get("hold", default.hold), 1),
    )
    if resid.hold > MAX_HOLD:
        raise RecipeError(f"{src}: residual.hold must be <= {MAX_HOLD}, got {resid.hold!r}")
    if resid.scale > 2.0:
        raise RecipeError(f"{src}: residual.scale must be <= 2, got {resid.scale!r}")
    return resid


def _es_recipe(doc: dict[str, Any], src: str) -> Recipe:
    """An ``es`` recipe (:mod:`agents.es`): a ``"tuning"`` residual trained by evolution
    strategies on ``stage = "random"``."""
    run = _table(src, doc, "run")
    env = dict(_table(src, doc, "env"))
    _check_env(src, "env", env)
    if env.get("stage", "random") != "random":
        raise RecipeError(f"{src}: env.stage must be 'random' for run.algo = 'es'")
    env.setdefault("stage", "random")
    if env.get("road_ahead") is not True:
        raise RecipeError(f"{src}: run.algo = 'es' reads the road ahead: env.road_ahead = true")
    resid = _residual(
        src,
        _table(src, doc, "residual"),
        Residual(scale=0.25, kind="tuning", hold=10),
        ("tuning",),
    )
    es = _table(src, doc, "es")
    _check_keys(src, "es", es, {f.name for f in dataclasses.fields(ESSettings)})
    kw: dict[str, Any] = {}
    for f in [f for f in dataclasses.fields(ESSettings) if f.name in es]:
        v = es[f.name]
        if f.name == "inputs":
            try:
                kw[f.name] = check_inputs(v)
            except ValueError as e:
                raise RecipeError(f"{src}: es.inputs: {e}") from None
        elif isinstance(f.default, bool):
            if not isinstance(v, bool):
                raise RecipeError(f"{src}: es.{f.name} must be true or false, got {v!r}")
            kw[f.name] = v
        elif isinstance(f.default, int):
            kw[f.name] = _int(src, f"es.{f.name}", v, 1)
        elif f.name == "dnf_score":  # a crash scores 0 (the benchmark's score) up to 1
            kw[f.name] = _num(src, "es.dnf_score", v, 0.0)
            if kw[f.name] > 1.0:
                raise RecipeError(f"{src}: es.dnf_score must be <= 1, got {v!r}")
        else:
            kw[f.name] = _num(src, f"es.{f.name}", v, 1e-12)
    ev = _table(src, doc, "eval")
    _check_keys(src, "eval", ev, {"every", "stages"})
    return Recipe(
        source=src,
        algo="es",
        seed=_int(src, "run.seed", run.get("seed", 0)),
        out=str(run.get("out", "runs/recipe")),
        env=env,
        residual=resid,
        es=ESSettings(**kw),
        eval=EvalSpec(freq=0, stages=_int(src, "eval.stages", ev.get("stages", 50))),
        eval_every=_int(src, "eval.every", ev.get("every", 5), 1),
    )


def _check_env(src: str, where: str, env: dict[str, Any]) -> None:
    """The env settings must build (``RallyConfig`` names any bad one)."""
    if "render_mode" in env:
        raise RecipeError(f"{src}: {where}.render_mode: a training env does not render")
    try:
        RallyConfig.build(**env)
    except ConfigError as e:
        raise RecipeError(f"{src}: {where}: {e}") from None


# ------------------------------------------------------------------------------ running
def phase_env(recipe: Recipe, step: int) -> dict[str, Any]:
    """The env settings at env step ``step``."""
    env = dict(recipe.env)
    for ph in recipe.phases:
        if ph.from_step <= step:
            env.update(ph.env)
    return env


#: ``Recipe.source`` of a recipe made of ``rally train``'s flags
COMMAND = "rally train"
#: ``rally train``'s flags without ``--config`` (as :func:`command_recipe` takes them)
COMMAND_FLAGS = frozenset(
    {
        "timesteps",
        "n_envs",
        "seed",
        "out",
        "hyperparams",
        "eval_freq",
        "eval_seeds",
        "eval_stages",
        "checkpoint_freq",
        "threads",
        "env_kwargs",
        "warmstart_steps",
        "handbrake",
        "address",
        "num_env_runners",
        "envs_per_runner",
    }
)


def command_recipe(algo: str = "ppo", stage: Any = "opener", **flags: Any) -> Recipe:
    """The recipe of ``rally train``'s flags (``--algo``, ``--stage`` and :data:`COMMAND_FLAGS`;
    a flag left out or ``None`` takes its default: :data:`agents.sb3.TRAIN_DEFAULTS` for
    ``ppo`` and ``sac``, :data:`agents.rllib.RLLIB_PPO_DEFAULTS`'s run for ``rllib-ppo``).

    ``env_kwargs`` go over ``RallyLearn-v0``'s settings (:func:`agents.sb3.train_env_kwargs`)
    for ``ppo`` and ``sac``; ``hyperparams`` over the algorithm's defaults. Without
    ``eval_stages`` a ``stage="random"`` run is evaluated on ``validation:50``, one run each,
    any other on its stage with ``TRAIN_DEFAULTS["eval_seeds"]`` runs.

    Raises:
        TypeError: an unknown flag (naming it).
        ValueError: an unknown algorithm.
    """
    bad = sorted(set(flags) - COMMAND_FLAGS)
    if bad:
        raise TypeError(f"unknown rally train settings: {', '.join(bad)}")
    f = {k: v for k, v in flags.items() if v is not None}
    hp = dict(f.get("hyperparams") or {})
    if algo == "rllib-ppo":
        return Recipe(
            source=COMMAND,
            defaults="command",
            algo=algo,
            timesteps=int(f.get("timesteps", 1_000_000)),
            seed=int(f.get("seed", 0)),
            out=str(f.get("out", f"runs/rllib-ppo-{stage}")),
            checkpoint_freq=int(f.get("checkpoint_freq", 0)),
            env={"stage": stage, **(f.get("env_kwargs") or {})},
            ray=RayRun(
                address=f.get("address") or "local",
                num_env_runners=int(f.get("num_env_runners", 0)),
                envs_per_runner=int(f.get("envs_per_runner", 8)),
            ),
            rllib=hp,
            eval=EvalSpec(freq=int(f.get("eval_freq", 0)), stages=0),
            eval_seeds=int(f.get("eval_seeds", 1)),
        )
    algo = algo.lower()
    algo_defaults(algo)  # names an unknown algorithm
    td = {**TRAIN_DEFAULTS, **f}
    eval_stages = f.get("eval_stages")
    if "eval_seeds" not in f:  # one run per validation stage of a generated-stage run
        td["eval_seeds"] = 1 if stage == "random" and eval_stages is None else td["eval_seeds"]
    if eval_stages is None:
        # generated training stages are selected on validation stages: generated, disjoint
        # from the training seeds and from every benchmark test set, one run each
        eval_stages = f"validation:{VALIDATION_STAGES}" if stage == "random" else stage
    return Recipe(
        source=COMMAND,
        defaults="command",
        algo=algo,
        timesteps=int(f.get("timesteps", 1_000_000)),
        n_envs=int(td["n_envs"]),
        seed=int(f.get("seed", 0)),
        out=str(f.get("out", "runs/ppo-opener")),
        threads=int(td["threads"]),
        checkpoint_freq=int(td["checkpoint_freq"]),
        env={"stage": stage, **train_env_kwargs(f.get("env_kwargs"))},
        ppo=hp if algo == "ppo" else {},
        sac=hp if algo == "sac" else {},
        warmstart=WarmStart(steps=int(td["warmstart_steps"])),
        eval=EvalSpec(freq=int(td["eval_freq"]), stages=0),
        eval_seeds=int(td["eval_seeds"]),
        eval_stages=eval_stages,
        handbrake=bool(td["handbrake"]),
    )


def train(
    recipe: Recipe,
    out: str | Path | None = None,
    *,
    resume: str | Path | None = None,
    progress: bool = True,
    say: Any = None,
) -> dict[str, Any]:
    """Train as the recipe says, with the backend its algorithm names (a ``ppo`` recipe file:
    :func:`train_ppo_recipe`; ``rally train``'s flags for ``ppo`` and ``sac``:
    :func:`agents.sb3.train`; :func:`agents.rllib.train_rllib`; :func:`agents.es.run_es_recipe`);
    returns the summary (also written to ``summary.json`` in ``out``, default the recipe's).

    Args:
        resume: a checkpoint the run continues (``rally train --resume``: a stable-baselines3
            checkpoint zip, or an RLlib checkpoint directory).
        progress: a progress bar in a terminal, plain progress lines in a log.
        say: where a ``"command"`` run's own lines go (e.g. ``print``).

    Raises:
        ValueError: ``resume`` for a recipe file's run (it starts from scratch).
    """
    if resume is not None and recipe.algo != "rllib-ppo" and recipe.defaults != "command":
        raise ValueError(f"{recipe.source}: a recipe file's run starts from scratch (no resume)")
    if recipe.algo == "es":
        return agents.es.run_es_recipe(recipe, out, progress)
    if recipe.algo == "rllib-ppo":
        return agents.rllib.train_rllib(recipe, out, resume=resume, progress=progress)
    if recipe.defaults == "command":
        # a progress bar in a terminal; in a log, a plain line every 30 s
        bar = progress and sys.stdout.isatty() and sb3._installed("rich", "tqdm")
        return sb3.train(
            recipe,
            out,
            resume=resume,
            say=say,
            progress_bar=bar,
            progress_lines_s=30.0 if progress and not bar else None,
        )
    return train_ppo_recipe(recipe, out, progress)


def train_ppo_recipe(recipe: Recipe, out: str | Path | None = None, progress: bool = True) -> dict:
    """Train a ``ppo`` recipe file (docs/agents.md); the summary."""
    out = Path(out or recipe.out)
    out.mkdir(parents=True, exist_ok=True)
    torch.set_num_threads(recipe.threads)
    hp = sb3.with_overrides(copy.deepcopy(RECIPE_PPO_BASE), recipe.ppo)
    config = {"recipe": recipe.to_dict(), "hyperparams": hp, "versions": sb3._versions()}
    sb3._write_json(out / "config.json", config)

    spec = recipe.residual.spec()

    def make_env(step: int):
        env = phase_env(recipe, step)
        stage = env.pop("stage", "random")
        v = sb3.make_vec_env(
            recipe.n_envs,
            stage=stage,
            seed=recipe.seed + step,
            residual=spec,
            handbrake=recipe.handbrake,
            **env,
        )
        return VecMonitor(v)

    venv = sb3.normalized(make_env(0), hp["gamma"])
    tb = str(out / "tb") if sb3._installed("tensorboard") else None
    model = PPO("MlpPolicy", venv, seed=recipe.seed, device="cpu", tensorboard_log=tb, **hp)
    if spec is not None:  # start from the base driver: a zero residual
        with torch.no_grad():
            model.policy.action_net.weight.zero_()
            model.policy.action_net.bias.zero_()
    if recipe.inputs is not None:
        road_ahead = recipe.env.get("road_ahead") is True
        restrict_actor_inputs(model, input_columns(recipe.inputs, road_ahead))
    timing: dict[str, float] = {}
    # SB3 counts policy steps; a held residual's policy step is `hold` env steps
    hold = spec.hold if spec is not None else 1
    obs_env = obs_env_kwargs({"env": recipe.env})
    evaluator = sb3.Evaluator(
        validation_stages(recipe.eval.stages),
        [0],
        recipe.eval.freq,
        out,
        obs_env,
        rank="score",
        residual=spec,
        hold=hold,
        xlabel="env steps, warm start included (millions)",
    )
    ws = recipe.warmstart
    if ws.steps > 0:
        t0 = time.perf_counter()
        config["warmstart_mse"] = _warm_start(recipe, model, venv, evaluator)
        # the clone was fitted to these statistics: PPO's own states must not shift them
        freeze_obs_stats(venv)
        timing["warmstart_s"] = time.perf_counter() - t0
    cbs: list[Any] = [evaluator]
    if recipe.checkpoint_freq > 0:
        meta = {"algo": "ppo", "env": obs_env, **evaluator.residual_meta()}
        freq = recipe.checkpoint_freq // (recipe.n_envs * hold)
        cbs.append(sb3.Checkpoints(freq, out / "checkpoints", "ppo", meta))
    sb3._write_json(out / "config.json", config)
    t_train = time.perf_counter()
    if spec is not None:  # where the curve starts: the base driver
        evaluator.evaluate_now(model, venv, env_steps=0, phase="start")
    if ws.critic_steps > 0:  # the value function learns what the starting policy earns
        with _actor_frozen(model):
            model.learn(max(1, ws.critic_steps // hold), callback=CallbackList(cbs))
    bounds = [ph.from_step for ph in recipe.phases] or [0]
    bounds = [*bounds[1:], recipe.timesteps]
    for i, end_env in enumerate(bounds):
        end = end_env // hold
        if model.num_timesteps >= end:
            continue
        if i > 0:  # a new phase: a new env with the same statistics
            old = venv
            venv = sb3.normalized(make_env(model.num_timesteps * hold), hp["gamma"])
            venv.obs_rms, venv.ret_rms = old.obs_rms, old.ret_rms
            old.close()
            model.set_env(venv)
        per = int(hp["n_steps"]) * recipe.n_envs
        steps = max(per, (end - model.num_timesteps) // per * per)
        # a progress bar in a terminal; in a log, a plain line every 30 s
        tty = sys.stdout.isatty()
        say = functools.partial(print, flush=True)
        lines = [sb3.ProgressLines(steps, 30.0, say)] if progress and not tty else []
        model.learn(
            steps,
            callback=CallbackList(cbs + lines),
            reset_num_timesteps=False,
            progress_bar=progress and tty and sb3._installed("rich", "tqdm"),
        )
    timing["train_s"] = time.perf_counter() - t_train
    model_path = sb3.save_run(model, venv, out, "ppo", obs_env, config, **evaluator.residual_meta())
    final = evaluator.evaluate_now(model, venv, final=True, phase="final")
    evaluator.log.plot()
    summary = {
        "model": str(model_path),
        "best_model": str(out / "best_model.zip"),
        "timesteps": int(model.num_timesteps),
        "env_steps": int(model.num_timesteps) * hold,
        "final_eval": final,
        "timing_s": timing,
        "env_steps_per_s": model.num_timesteps * hold / max(timing["train_s"], 1e-9),
        "eval_log": str(out / "eval_log.csv"),
        "learning_curve": str(out / "learning_curve.png"),
    }
    sb3._write_json(out / "summary.json", summary)
    venv.close()
    return summary


def restrict_actor_inputs(model: Any, cols: np.ndarray) -> None:
    """Make a stable-baselines3 policy's actor read only the observation columns ``cols``.

    The first layer of its action path (the action net itself when ``net_arch`` gives the
    policy no hidden layers) gets zero weights on every other column, and a gradient hook
    keeps them zero: Adam moves a weight whose gradient is always zero by exactly nothing.
    The saved model is an ordinary one (those weights are stored as zeros), and the critic
    still reads the whole observation.
    """
    pol = model.policy
    hidden = [m for m in pol.mlp_extractor.policy_net if isinstance(m, torch.nn.Linear)]
    first = hidden[0] if hidden else pol.action_net
    cols = np.asarray(cols, np.int64)
    if cols.ndim != 1 or len(cols) == 0 or cols.min() < 0 or cols.max() >= first.in_features:
        raise ValueError(f"input columns must be in [0, {first.in_features}), got {cols!r}")
    mask = torch.zeros_like(first.weight)
    mask[:, torch.as_tensor(cols)] = 1.0
    with torch.no_grad():
        first.weight.mul_(mask)
    first.weight.register_hook(lambda g: g * mask)


def _warm_start(recipe: Recipe, model: Any, venv: Any, evaluator: Any) -> list[float]:
    """Behaviour cloning of the heuristic, then DAgger rounds (see :class:`WarmStart`); each
    fit is evaluated on the validation stages. Returns the final fit's error per round."""
    ws = recipe.warmstart
    env0 = phase_env(recipe, 0)
    stage0 = env0.pop("stage", "random")

    def fit(obs: np.ndarray, tg: np.ndarray, epochs: int, first: bool) -> float:
        return sb3.warm_start(
            model,
            venv,
            obs,
            tg,
            epochs=epochs,
            batch_size=ws.batch_size,
            lr=ws.lr,
            seed=recipe.seed,
            update_stats=first,
        )

    obs, tg = sb3.collect_heuristic(
        ws.steps, stage0, recipe.n_envs, recipe.seed, noise=ws.noise, teacher=ws.teacher, **env0
    )
    mses = [fit(obs, tg, ws.epochs, True)]
    env_steps = len(obs)
    evaluator.evaluate_now(model, venv, env_steps=env_steps, phase="bc")
    for r in range(ws.dagger_rounds):
        o2, t2 = sb3.collect_heuristic(
            ws.dagger_steps,
            stage0,
            recipe.n_envs,
            recipe.seed + 1 + r,
            noise=ws.dagger_noise,
            learner=sb3._LivePolicy(model, venv),
            teacher=ws.teacher,
            **env0,
        )
        obs, tg = np.concatenate([obs, o2]), np.concatenate([tg, t2])
        env_steps += len(o2)
        mses.append(fit(obs, tg, ws.dagger_epochs, False))
        evaluator.evaluate_now(model, venv, env_steps=env_steps, phase=f"dagger{r + 1}")
    evaluator.warm_steps = env_steps
    return mses


class FixedRunningMeanStd(RunningMeanStd):
    """Observation statistics that no longer update (``VecNormalize.obs_rms`` after a warm
    start: the cloned policy was fitted to them)."""

    def __init__(self, rms: Any):
        super().__init__(shape=rms.mean.shape)
        self.mean = rms.mean.copy()
        self.var = rms.var.copy()
        self.count = rms.count

    def update(self, arr: np.ndarray) -> None:
        pass

    def update_from_moments(self, *args: Any) -> None:
        pass

    def copy(self) -> FixedRunningMeanStd:
        return FixedRunningMeanStd(self)


def freeze_obs_stats(vn: Any) -> None:
    """Stop ``vn`` (a ``VecNormalize``) updating its observation statistics; the return
    statistics (reward scaling) still update."""
    vn.obs_rms = FixedRunningMeanStd(vn.obs_rms)


@contextlib.contextmanager
def _actor_frozen(model: Any) -> Iterator[None]:
    """The policy's own parameters do not learn within (the critic still does)."""
    pol = model.policy
    params = [*pol.mlp_extractor.policy_net.parameters(), *pol.action_net.parameters()]
    params.append(pol.log_std)
    flags = [p.requires_grad for p in params]
    for p in params:
        p.requires_grad_(False)
    yield
    for p, f in zip(params, flags, strict=True):
        p.requires_grad_(f)
