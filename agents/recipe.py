"""Training recipes: ``rally train --config agents/configs/general.toml`` and the one training
entry, :func:`train`.

A recipe holds every setting of a training run, so one command reproduces it from scratch.
Its sections per algorithm (``[run] algo``: ``ppo``, ``rllib-ppo``, ``es``; :data:`_SECTIONS`),
the warm start, the residual, the curriculum phases and the validation are docs/agents.md
("Training recipes"); ``rllib-ppo``: docs/ray.md. An unknown or ill-typed key, or a section
of another algorithm, is refused with a :class:`RecipeError` that names it.
"""

from __future__ import annotations

import copy
import dataclasses
import functools
import math
import sys
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import agents.es
import agents.rllib
from agents import sb3
from agents.es import ESSettings, check_inputs
from agents.models import MAX_HOLD, RESIDUAL_BASES, RESIDUAL_KINDS, ResidualSpec
from agents.policies import SHIPPED
from agents.rllib import RLLIB_PPO_DEFAULTS
from agents.sb3 import RECIPE_PPO_BASE as RECIPE_PPO_BASE  # re-exported
from agents.sb3 import TRAIN_DEFAULTS, VALIDATION_STAGES, algo_defaults, train_env_kwargs
from agents.sb3 import FixedRunningMeanStd as FixedRunningMeanStd  # old vecnormalize.pkl
from agents.sb3 import freeze_obs_stats as freeze_obs_stats  # re-exported
from agents.sb3 import phase_env as phase_env  # re-exported
from agents.sb3 import restrict_actor_inputs as restrict_actor_inputs  # re-exported
from rally_env.config import RallyConfig
from rally_env.errors import ConfigError

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
    """A ``ppo`` recipe's ``[warmstart]``: behaviour cloning of a teacher (``teacher``: the
    heuristic driver, ``"blind"`` or ``"ahead"``, or a model such as ``"es-general"``), then
    ``dagger_rounds`` DAgger rounds, then ``critic_steps`` env steps of PPO with the policy
    frozen; step counts are env steps, 0 ``steps`` is no warm start. Each field:
    docs/agents.md, "Training recipes"."""

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
    """A recipe's ``[residual]``: the policy's outputs move a base driver's actions or speed
    plan, held ``hold`` control steps (:class:`agents.models.ResidualSpec`; docs/agents.md,
    "Training recipes"); ``base = ""`` is a plain policy."""

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


def _settings(
    src: str, section: str, table: dict[str, Any], default: Any, lo: dict[str, float], **given: Any
) -> Any:
    """``default`` (a frozen dataclass) with the values of the ``[section]`` table, whose keys
    must be its fields: a bool field takes true or false, an int field an integer >= ``lo``
    (default 0), a float field a finite number >= ``lo``; ``given`` values go in as they are."""
    fields = dataclasses.fields(default)
    _check_keys(src, section, table, {f.name for f in fields})
    kw = dict(given)
    for f in [f for f in fields if f.name not in given]:
        v = table.get(f.name, getattr(default, f.name))
        key, low = f"{section}.{f.name}", lo.get(f.name, 0)
        if isinstance(f.default, bool):
            if not isinstance(v, bool):
                raise RecipeError(f"{src}: {key} must be true or false, got {v!r}")
            kw[f.name] = v
        elif isinstance(f.default, int):
            kw[f.name] = _int(src, key, v, int(low))
        elif isinstance(f.default, float):
            kw[f.name] = _num(src, key, v, float(low))
    return dataclasses.replace(default, **kw)


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
#: The integer settings of each algorithm's recipe: (section.key, default, least value)
_INTS = {
    "ppo": (
        ("run.timesteps", 1_000_000, 0),
        ("run.n_envs", 16, 1),
        ("run.seed", 0, 0),
        ("run.threads", 1, 1),
        ("run.checkpoint_freq", 1_000_000, 0),
        ("eval.freq", 500_000, 0),
        ("eval.stages", 20, 0),
    ),
    "rllib-ppo": (
        ("run.timesteps", 1_000_000, 1),
        ("run.seed", 0, 0),
        ("run.checkpoint_freq", 0, 0),
        ("eval.freq", 0, 0),
        ("eval.seeds", 1, 1),
    ),
    "es": (("run.seed", 0, 0), ("eval.stages", 50, 0), ("eval.every", 5, 1)),
}


def _keys(algo: str, section: str) -> set[str]:
    """The integer keys of ``[section]`` in ``algo``'s recipe (:data:`_INTS`)."""
    return {k.split(".")[1] for k, _, _ in _INTS[algo] if k.startswith(section + ".")}


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
    _check_keys(src, "run", run, {"algo", "out", *_keys(algo, "run")})
    return algo


def recipe_from_dict(doc: dict[str, Any], src: str = "<recipe>") -> Recipe:
    """A :class:`Recipe` from the parsed TOML document (every key checked)."""
    algo = _algo(src, doc)
    env = dict(_table(src, doc, "env"))
    _check_env(src, "env", env)
    part = {"ppo": _ppo_part, "rllib-ppo": _rllib_part, "es": _es_part}[algo](doc, src, env)
    _check_keys(src, "eval", _table(src, doc, "eval"), _keys(algo, "eval"))
    ints: dict[str, int] = {}  # by Recipe field: run.X is X, eval.X is eval_X
    for key, default, lo in _INTS[algo]:
        section, name = key.split(".")
        field = name if section == "run" else f"eval_{name}"
        ints[field] = _int(src, key, _table(src, doc, section).get(name, default), lo)
    if algo == "ppo" and ints["timesteps"] == 0:  # the warm start alone (no PPO)
        ws = part["warmstart"]
        if ws.steps == 0 or ws.critic_steps > 0 or part["phases"]:
            raise RecipeError(
                f"{src}: run.timesteps = 0 (no PPO) is a warm start alone: it needs "
                "warmstart.steps > 0, no warmstart.critic_steps and no [[phase]]"
            )
    return Recipe(
        source=src,
        algo=algo,
        out=str(_table(src, doc, "run").get("out", "runs/recipe")),
        env=env,
        eval=EvalSpec(freq=ints.pop("eval_freq", 0), stages=ints.pop("eval_stages", 0)),
        **ints,
        **part,
    )


def _ppo_part(doc: dict[str, Any], src: str, env: dict[str, Any]) -> dict[str, Any]:
    """A ``ppo`` recipe's own settings: ``[ppo]``, ``[warmstart]``, ``[residual]``,
    ``[[phase]]``."""
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
    ones = {"epochs": 1, "batch_size": 1, "dagger_epochs": 1}
    warm = _settings(src, "warmstart", ws, WarmStart(), ones, teacher=ws.get("teacher", "blind"))
    t = warm.teacher
    known = t in ("blind", "ahead", *SHIPPED) if isinstance(t, str) else False
    if not known and not (isinstance(t, str) and t.endswith(".zip") and Path(t).is_file()):
        raise RecipeError(
            f'{src}: warmstart.teacher must be "blind", "ahead", a shipped model '
            f"({', '.join(SHIPPED)}) or an existing .zip model, got {t!r}"
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
    return {
        "ppo": ppo,
        "warmstart": warm,
        "residual": resid,
        "phases": tuple(phases),
        "inputs": inputs,
        "handbrake": handbrake,
    }


def _rllib_part(doc: dict[str, Any], src: str, env: dict[str, Any]) -> dict[str, Any]:
    """An ``rllib-ppo`` recipe's own settings: ``[ray]``, ``[rllib]``."""
    ray = _table(src, doc, "ray")
    given = {"address": ray.get("address", "local")}
    run = _settings(src, "ray", ray, RayRun(), {"envs_per_runner": 1}, **given)
    if not isinstance(run.address, str) or not run.address:
        raise RecipeError(f"{src}: ray.address must be 'local', 'auto' or HOST:PORT")
    rllib = copy.deepcopy(_table(src, doc, "rllib"))
    _check_keys(src, "rllib", rllib, set(RLLIB_PPO_DEFAULTS))
    return {"ray": run, "rllib": rllib}


def _residual(src: str, rs: dict[str, Any], default: Residual, kinds: tuple) -> Residual:
    """The ``[residual]`` table ``rs`` (its base required; the other keys default to
    ``default``'s), its kind one of ``kinds``."""
    _check_keys(src, "residual", rs, {f.name for f in dataclasses.fields(Residual)})
    if rs.get("base") not in RESIDUAL_BASES:
        raise RecipeError(f"{src}: residual.base must be one of {RESIDUAL_BASES}")
    kind = rs.get("kind", default.kind)
    if kind not in kinds:
        raise RecipeError(f"{src}: residual.kind must be one of {kinds}, got {kind!r}")
    given = {"base": str(rs["base"]), "kind": str(kind)}
    resid = _settings(src, "residual", rs, default, {"scale": 1e-3, "hold": 1}, **given)
    if resid.hold > MAX_HOLD:
        raise RecipeError(f"{src}: residual.hold must be <= {MAX_HOLD}, got {resid.hold!r}")
    if resid.scale > 2.0:
        raise RecipeError(f"{src}: residual.scale must be <= 2, got {resid.scale!r}")
    return resid


def _es_part(doc: dict[str, Any], src: str, env: dict[str, Any]) -> dict[str, Any]:
    """An ``es`` recipe's own settings (:mod:`agents.es`): a ``"tuning"`` residual trained by
    evolution strategies on ``stage = "random"``."""
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
    try:
        inputs = check_inputs(es["inputs"]) if "inputs" in es else None
    except ValueError as e:
        raise RecipeError(f"{src}: es.inputs: {e}") from None
    lo = {"iterations": 1, "pairs": 1, "stages": 1, "norm_stages": 1, "sigma": 1e-12, "lr": 1e-12}
    settings = _settings(src, "es", es, ESSettings(), lo, inputs=inputs)
    if settings.dnf_score > 1.0:  # a crash scores 0 (the benchmark's score) up to 1
        raise RecipeError(f"{src}: es.dnf_score must be <= 1, got {es['dnf_score']!r}")
    return {"residual": resid, "es": settings}


def _check_env(src: str, where: str, env: dict[str, Any]) -> None:
    """The env settings must build (``RallyConfig`` names any bad one)."""
    if "render_mode" in env:
        raise RecipeError(f"{src}: {where}.render_mode: a training env does not render")
    try:
        RallyConfig.build(**env)
    except ConfigError as e:
        raise RecipeError(f"{src}: {where}: {e}") from None


# ------------------------------------------------------------------------------ running
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
        td = {"checkpoint_freq": 0, "eval_freq": 0, "eval_seeds": 1, **f}
        td.setdefault("out", f"runs/rllib-ppo-{stage}")
        env = {"stage": stage, **(f.get("env_kwargs") or {})}
        ray = RayRun(
            address=f.get("address") or "local",
            num_env_runners=int(f.get("num_env_runners", 0)),
            envs_per_runner=int(f.get("envs_per_runner", 8)),
        )
        own: dict[str, Any] = {"ray": ray, "rllib": hp}
    else:
        algo = algo.lower()
        algo_defaults(algo)  # names an unknown algorithm
        td = {**TRAIN_DEFAULTS, "out": "runs/ppo-opener", **f}
        eval_stages = f.get("eval_stages")
        if "eval_seeds" not in f:  # one run per validation stage of a generated-stage run
            td["eval_seeds"] = 1 if stage == "random" and eval_stages is None else td["eval_seeds"]
        if eval_stages is None:
            # generated training stages are selected on validation stages: generated, disjoint
            # from the training seeds and from every benchmark test set, one run each
            eval_stages = f"validation:{VALIDATION_STAGES}" if stage == "random" else stage
        env = {"stage": stage, **train_env_kwargs(f.get("env_kwargs"))}
        own = {
            "n_envs": int(td["n_envs"]),
            "threads": int(td["threads"]),
            "ppo": hp if algo == "ppo" else {},
            "sac": hp if algo == "sac" else {},
            "warmstart": WarmStart(steps=int(td["warmstart_steps"])),
            "eval_stages": eval_stages,
            "handbrake": bool(td["handbrake"]),
        }
    return Recipe(
        source=COMMAND,
        defaults="command",
        algo=algo,
        timesteps=int(f.get("timesteps", 1_000_000)),
        seed=int(f.get("seed", 0)),
        out=str(td["out"]),
        checkpoint_freq=int(td["checkpoint_freq"]),
        env=env,
        eval=EvalSpec(freq=int(td["eval_freq"]), stages=0),
        eval_seeds=int(td["eval_seeds"]),
        **own,
    )


def train(
    recipe: Recipe,
    out: str | Path | None = None,
    *,
    resume: str | Path | None = None,
    progress: bool = True,
    say: Any = None,
) -> dict[str, Any]:
    """Train as the recipe says, with the backend its algorithm names (stable-baselines3 for a
    ``ppo`` recipe file and ``rally train``'s flags for ``ppo`` and ``sac``:
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
    command = recipe.defaults == "command"
    if resume is not None and recipe.algo != "rllib-ppo" and not command:
        raise ValueError(f"{recipe.source}: a recipe file's run starts from scratch (no resume)")
    if recipe.algo == "es":
        return agents.es.run_es_recipe(recipe, out, progress)
    if recipe.algo == "rllib-ppo":
        return agents.rllib.train_rllib(recipe, out, resume=resume, progress=progress)
    # a progress bar in a terminal; in a log, a plain line every 30 s
    tty = sys.stdout.isatty()
    bar = progress and tty and sb3._installed("rich", "tqdm")
    return sb3.train(
        recipe,
        out,
        resume=resume,
        say=say if command else functools.partial(print, flush=True),
        progress_bar=bar,
        progress_lines_s=30.0 if progress and not (bar if command else tty) else None,
    )
