"""RLlib (Ray's RL library, new API stack; docs/ray.md): the env in env-runner actors
(:func:`env_creator`, registered with Ray Tune as :data:`ENV_NAME`; with
``vector_entry_point`` one native :class:`rally_env.RallyVectorEnv` per runner), PPO training
(``rally train --algo rllib-ppo``) and the export of the trained actor to a numpy policy
(``policy.json`` + ``policy.npz``, :class:`agents.models.ExportedPolicy`) that ``rally eval
--agent`` runs without Ray or torch. The policy acts in ``[-1, 1]^4``
(:func:`agents.models.from_policy_action`), as ``rally train``'s SB3 models do.
"""

from __future__ import annotations

import csv
import json
import math
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np

from agents.distributed import connect
from agents.evaluate import ValidationLog, evaluate, stage_label
from agents.models import EXPORT_FORMAT, EXPORT_VERSION, ExportedPolicy, from_policy_action
from agents.rundir import write_json
from rally_env.env import RallyEnv
from rally_env.vector import RallyVectorEnv

#: The name the env is registered under with Ray Tune.
ENV_NAME = "rally-rllib"
#: PPO settings ``rally train --algo rllib-ppo`` starts from (``--set KEY=JSON`` overrides);
#: where they are not RLlib's (``vf_clip_param``, ``use_kl_loss``, ``grad_clip``, ``obs_norm``:
#: :func:`obs_filter`, the policy head: :func:`_init_policy_head`), why: docs/ray.md.
RLLIB_PPO_DEFAULTS: dict[str, Any] = {
    "lr": 3e-4,
    "gamma": 0.99,
    "lambda_": 0.95,
    "clip_param": 0.2,
    "vf_clip_param": 1e6,
    "use_kl_loss": False,
    "grad_clip": 0.5,
    "entropy_coeff": 0.0,
    "vf_loss_coeff": 0.5,
    "num_epochs": 10,
    "minibatch_size": 256,
    "train_batch_size_per_learner": 4096,
    "fcnet_hiddens": [256, 256],
    "fcnet_activation": "tanh",
    "obs_norm": True,
    "init_pi_scale": 0.01,
    "init_log_std": -1.0,
}
#: Settings of RLLIB_PPO_DEFAULTS that are not RLlib's: how a new run's policy head starts.
HEAD_INIT_KEYS = ("init_pi_scale", "init_log_std")
#: RLlib's MeanStdFilter: ``(obs - mean) / (std + OBS_NORM_EPS)``, clipped to +-OBS_NORM_CLIP.
OBS_NORM_EPS = 1e-8
OBS_NORM_CLIP = 10.0


def obs_filter(env: Any = None, *args: Any, **kwargs: Any) -> Any:
    """The env-to-module connector of ``obs_norm``: RLlib's ``MeanStdFilter`` (a function
    of this module, so every env runner finds it)."""
    from ray.rllib.connectors.env_to_module import MeanStdFilter

    return MeanStdFilter(clip_by_value=OBS_NORM_CLIP)


def _runner_obs_stats(runner: Any) -> tuple[list[float], list[float]] | None:
    """(mean, std) of an env runner's MeanStdFilter, or None (no filter, or nothing seen),
    read from the runner's public state (``EnvRunner.get_state``)."""
    from ray.rllib.core import COMPONENT_ENV_TO_MODULE_CONNECTOR
    from ray.rllib.utils.filter import RunningStat

    state = runner.get_state(components=COMPONENT_ENV_TO_MODULE_CONNECTOR)
    return filter_state_stats(
        state.get(COMPONENT_ENV_TO_MODULE_CONNECTOR, {}), RunningStat.from_state
    )


def filter_state_stats(
    pipeline_state: dict[str, Any], from_state: Any
) -> tuple[list[float], list[float]] | None:
    """(mean, std) in the state of an env-to-module pipeline (its pieces' states by class
    name): the MeanStdFilter's running statistics of its first agent, restored with
    ``from_state`` (RLlib's ``RunningStat.from_state``); None without such a filter or with
    fewer than two observations seen."""
    per_agent = pipeline_state.get("MeanStdFilter") or {}
    stats = next(iter(per_agent.values()), {}).get("running_stats") or []
    rs = from_state(stats[0]) if stats else None
    if rs is None or rs.num_pushes < 2:
        return None
    return np.asarray(rs.mean, np.float64).tolist(), np.asarray(rs.std, np.float64).tolist()


def obs_stats(algo: Any) -> tuple[np.ndarray, np.ndarray] | None:
    """The observation statistics the module is trained against (the env runners' merged
    MeanStdFilter state, which RLlib syncs every iteration), or None without ``obs_norm``."""
    got = algo.env_runner_group.foreach_env_runner(_runner_obs_stats, local_env_runner=True)
    g = next((g for g in got if g is not None), None)
    return None if g is None else (np.asarray(g[0], np.float64), np.asarray(g[1], np.float64))


def env_creator(env_config: Any) -> Any:
    """The env of an RLlib env runner: ``RallyEnv`` or, when RLlib passes ``num_envs``
    (``vector_entry_point``), one ``RallyVectorEnv`` of that many cars; actions in
    ``[-1, 1]^4`` (:func:`agents.models.from_policy_action`)."""
    kw = dict(env_config)
    n = kw.pop("num_envs", None)
    box = gym.spaces.Box(-1.0, 1.0, (4,), np.float32)
    if n is None:
        return gym.wrappers.TransformAction(RallyEnv(**kw), from_policy_action, box)
    venv = RallyVectorEnv(num_envs=int(n), **kw)
    return gym.wrappers.vector.TransformAction(venv, from_policy_action, single_action_space=box)


def register() -> str:
    """Register :func:`env_creator` with Ray Tune (in this process; Ray ships the registry to
    the actors); the name to give ``config.environment``."""
    from ray.tune.registry import register_env

    register_env(ENV_NAME, env_creator)
    return ENV_NAME


def ppo_config(
    stage: str = "opener",
    *,
    num_env_runners: int = 0,
    envs_per_runner: int = 8,
    seed: int = 0,
    env_kwargs: dict[str, Any] | None = None,
    hyperparams: dict[str, Any] | None = None,
) -> Any:
    """The RLlib ``PPOConfig`` of ``rally train --algo rllib-ppo``.

    Raises:
        ValueError: an unknown hyperparameter (naming it).
    """
    from ray.rllib.algorithms.ppo import PPOConfig
    from ray.rllib.core.rl_module.rl_module import RLModuleSpec

    hp = dict(RLLIB_PPO_DEFAULTS)
    for k, v in (hyperparams or {}).items():
        if k not in hp:
            raise ValueError(f"unknown rllib-ppo setting {k!r}; known: {', '.join(sorted(hp))}")
        hp[k] = v
    model = {k: hp.pop(k) for k in ("fcnet_hiddens", "fcnet_activation")}
    if not isinstance(hp["obs_norm"], bool):
        raise ValueError(f"rllib-ppo setting obs_norm must be true or false: {hp['obs_norm']!r}")
    for k in HEAD_INIT_KEYS:
        v = hp.pop(k)
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
            raise ValueError(f"rllib-ppo setting {k} must be a finite number: {v!r}")
    runners: dict[str, Any] = {}
    if hp.pop("obs_norm"):
        runners["env_to_module_connector"] = obs_filter
    name = register()
    return (
        PPOConfig()
        .environment(name, env_config={"stage": stage, **(env_kwargs or {})})
        .env_runners(
            num_env_runners=int(num_env_runners),
            num_envs_per_env_runner=int(envs_per_runner),
            gym_env_vectorize_mode="vector_entry_point",
            num_cpus_per_env_runner=1,
            **runners,
        )
        .training(**hp)
        .rl_module(rl_module_spec=RLModuleSpec(model_config=model))
        .debugging(seed=int(seed))
    )


def _start(algo: Any, resume: str | None, hp: dict[str, Any]) -> int:
    """Restore the checkpoint ``resume`` and return its lifetime env steps (its metrics hold
    them), or start a new run's policy head (:func:`_init_policy_head`) and return 0."""
    if resume is None:
        _init_policy_head(algo, hp["init_pi_scale"], hp["init_log_std"])
        return 0
    from ray.rllib.utils.metrics import ENV_RUNNER_RESULTS, NUM_ENV_STEPS_SAMPLED_LIFETIME

    algo.restore_from_path(str(Path(resume).resolve()))
    return int(algo.metrics.peek((ENV_RUNNER_RESULTS, NUM_ENV_STEPS_SAMPLED_LIFETIME), default=0))


def _init_policy_head(algo: Any, pi_scale: float, log_std: float) -> None:
    """Start a new run's policy as stable-baselines3 starts PPO: the Gaussian's mean weights
    of the pi head's output layer scaled by ``pi_scale`` (and its mean bias zeroed) and its
    log-std outputs a constant ``log_std`` (zero weights); then the env runners get those
    weights. The output layer gives ``[mean (4), log std (4)]`` (RLlib's DiagGaussian)."""
    import torch
    from ray.rllib.core import DEFAULT_MODULE_ID

    def init(learner: Any) -> None:
        pi = learner.module[DEFAULT_MODULE_ID].pi
        last = [m for m in pi.modules() if isinstance(m, torch.nn.Linear)][-1]
        n = last.out_features // 2
        with torch.no_grad():
            last.weight[:n].mul_(float(pi_scale))
            last.bias[:n].zero_()
            last.weight[n:].zero_()
            last.bias[n:].fill_(float(log_std))

    for r in algo.learner_group.foreach_learner(init):
        r.get()  # raises what the learner raised
    algo.env_runner_group.sync_weights(from_worker_or_learner_group=algo.learner_group)


# --------------------------------------------------------------------------------- export
def _actor_layers(module: Any) -> list[tuple[np.ndarray, np.ndarray]]:
    """``[(W, b), ...]`` of the default PPO module's actor: encoder MLP then the pi head."""
    import torch

    def arr(t: Any) -> np.ndarray:
        return t.detach().cpu().numpy().astype(np.float32)

    parts = (module.encoder.actor_encoder, module.pi)
    linear = [m for part in parts for m in part.modules() if isinstance(m, torch.nn.Linear)]
    return [(arr(m.weight), arr(m.bias)) for m in linear]


def export_policy(
    module: Any,
    out_dir: str | Path,
    meta: dict[str, Any],
    obs_norm: tuple[np.ndarray, np.ndarray] | None = None,
) -> Path:
    """Write the module's deterministic policy to ``out_dir`` (``policy.json`` +
    ``policy.npz``); the path of ``policy.json`` (what ``rally eval --agent`` takes).
    ``obs_norm``: the (mean, std) the module's observations were normalised with
    (:func:`obs_stats`), stored as ``obs_mean`` / ``obs_std`` arrays.

    Raises:
        ValueError: the module is not the default PPO MLP (nothing written).
    """
    activation = meta.get("activation", "tanh")
    if activation not in ("tanh", "relu"):
        raise ValueError(f"cannot export activation {activation!r} (tanh or relu)")
    layers = _actor_layers(module)
    if not layers:
        raise ValueError("the module has no actor MLP to export")
    d = Path(out_dir)
    d.mkdir(parents=True, exist_ok=True)
    arrays = {f"{k}{i}": a for i, wb in enumerate(layers) for k, a in zip("wb", wb, strict=True)}
    norm = None
    if obs_norm is not None:
        arrays["obs_mean"] = np.asarray(obs_norm[0], np.float64)
        arrays["obs_std"] = np.asarray(obs_norm[1], np.float64)
        norm = {"eps": OBS_NORM_EPS, "clip": OBS_NORM_CLIP}
    np.savez(d / "policy.npz", **arrays)
    doc = {
        "format": EXPORT_FORMAT,
        "version": EXPORT_VERSION,
        "layers": len(layers),
        "activation": activation,
        "obs_dim": int(layers[0][0].shape[1]),
        "action_dim": 4,
        "actions": "policy [-1, 1]^4 (from_policy_action); the mean of the Gaussian head",
        "obs_norm": norm,
        **meta,
    }
    (d / "policy.json").write_text(json.dumps(doc, indent=1) + "\n")
    return d / "policy.json"


# ------------------------------------------------------------------------------- training
def _steps(result: dict[str, Any]) -> int:
    from ray.rllib.utils.metrics import ENV_RUNNER_RESULTS, NUM_ENV_STEPS_SAMPLED_LIFETIME

    v = result.get(NUM_ENV_STEPS_SAMPLED_LIFETIME)
    if v is None:
        v = result.get(ENV_RUNNER_RESULTS, {}).get(NUM_ENV_STEPS_SAMPLED_LIFETIME, 0)
    return int(v)


def _episode_return(result: dict[str, Any]) -> float:
    from ray.rllib.utils.metrics import ENV_RUNNER_RESULTS, EPISODE_RETURN_MEAN

    v = result.get(ENV_RUNNER_RESULTS, {}).get(EPISODE_RETURN_MEAN, math.nan)
    return float(v) if v is not None else math.nan


class PolicyEvaluations:
    """The evaluations of an RLlib run: each exported policy on the training stage over
    ``seeds`` seeds (``rally eval``'s harness), a row of ``eval_log.csv`` through
    :class:`agents.evaluate.ValidationLog` (ranked by finish rate, then median stage time),
    also sent to TensorBoard (``tb``: a ``SummaryWriter`` or None)."""

    #: the figures sent to TensorBoard (``eval/<name>``)
    SCALARS = ("finish_rate", "median_time_s", "mean_progress_m")

    def __init__(
        self, out: Path, stage: Any, seeds: int, env_kwargs: dict | None, name: str, tb: Any
    ):
        self.stage, self.seeds, self.env_kwargs = stage, int(seeds), env_kwargs
        self.name, self.tb = name, tb
        self.log = ValidationLog(out, [stage_label(stage)], "env steps (millions)", rank="time")

    def add(self, policy_json: Path, steps: int, final: bool = False) -> Any:
        """Evaluate the exported policy; append its row; return the stage's summary."""
        res = evaluate(
            ExportedPolicy(policy_json),
            self.stage,
            range(self.seeds),
            env_kwargs=self.env_kwargs,
            agent_name=self.name,
        )
        m, _ = self.log.add(res.runs, steps, steps, "final" if final else "rllib", final)
        if self.tb is not None:
            for k in self.SCALARS:
                self.tb.add_scalar(f"eval/{k}", m[k], steps)
            self.tb.flush()
        return res.stages[0]


def train_rllib(
    recipe: Any,
    out: str | Path | None = None,
    *,
    resume: str | None = None,
    progress: bool = True,
) -> dict[str, Any]:
    """Train RLlib PPO as an ``rllib-ppo`` recipe (:class:`agents.recipe.Recipe`) says, until
    ``timesteps`` env steps, writing to ``out`` (default the recipe's) the files docs/ray.md
    lists ("Outputs in ``--out``"; the evaluations: :class:`PolicyEvaluations`). ``resume``:
    an RLlib checkpoint directory this run continues (its step count included)."""
    env = dict(recipe.env)
    stage = env.pop("stage", "opener")
    out = Path(out or recipe.out)
    out.mkdir(parents=True, exist_ok=True)
    config = ppo_config(
        stage,
        num_env_runners=recipe.ray.num_env_runners,
        envs_per_runner=recipe.ray.envs_per_runner,
        seed=recipe.seed,
        env_kwargs=env or None,
        hyperparams=dict(recipe.rllib),
    )
    settings = {
        "algo": "rllib-ppo",
        "stage": stage,
        "timesteps": int(recipe.timesteps),
        "num_env_runners": int(recipe.ray.num_env_runners),
        "envs_per_runner": int(recipe.ray.envs_per_runner),
        "seed": int(recipe.seed),
        "ray_address": recipe.ray.address,
        "resume": resume,
        "hyperparams": {**RLLIB_PPO_DEFAULTS, **recipe.rllib},
        "env_kwargs": env,
        "eval_freq": recipe.eval.freq or None,
        "eval_seeds": int(recipe.eval_seeds),
    }
    tb = None  # a TensorBoard writer, when the tensorboard package is installed
    try:
        from torch.utils.tensorboard import SummaryWriter
    except ImportError:
        pass
    else:
        tb = SummaryWriter(str(out / "tb"))
    evals = PolicyEvaluations(out, stage, recipe.eval_seeds, env or None, out.name, tb)
    write_json(out / "config.json", settings)
    connect(recipe.ray.address)
    algo = config.build_algo()
    t0 = time.perf_counter()
    try:
        steps = _start(algo, resume, settings["hyperparams"])
        ckpt_freq = recipe.checkpoint_freq or None
        steps = _iterate(algo, settings, ckpt_freq, out, evals, (steps, t0), progress)
        ckpt = (out / "checkpoint").resolve()
        algo.save_to_path(str(ckpt))
        policy = export_policy(
            algo.get_module(), out / "policy", _policy_meta(settings, out, steps), obs_stats(algo)
        )
    finally:
        algo.stop()
    wall = time.perf_counter() - t0
    s = evals.add(policy, steps, final=True)
    curve = evals.log.plot()
    if tb is not None:
        tb.close()
    summary = {
        "algo": "rllib-ppo",
        "timesteps": steps,
        "wall_time_s": wall,
        "checkpoint": str(ckpt),
        "model": str(policy),
        "final_eval": s.figures(),
        "eval_log": str(evals.log.path),
        "learning_curve": None if curve is None else str(curve),
    }
    write_json(out / "summary.json", summary)
    return summary


def _policy_meta(settings: dict[str, Any], out: Path, steps: int) -> dict[str, Any]:
    """The description an exported policy of this run carries."""
    return {
        "name": out.name,
        "made_by": "rally train --algo rllib-ppo",
        "activation": settings["hyperparams"]["fcnet_activation"],
        "stage": settings["stage"],
        "env_steps": steps,
        "env_kwargs": settings["env_kwargs"],
    }


def _iterate(
    algo: Any,
    settings: dict[str, Any],
    checkpoint_freq: int | None,
    out: Path,
    evals: PolicyEvaluations,
    start: tuple[int, float],
    progress: bool,
) -> int:
    """``algo.train()`` until the run's env steps, with its rows in ``progress.csv``, its
    checkpoints and its periodic evaluations; ``start``: the env steps and the wall clock
    (``time.perf_counter``) the run starts from. Returns the env steps reached."""
    steps, t0 = start
    timesteps, eval_freq, tb = settings["timesteps"], settings["eval_freq"], evals.tb
    fields = ["iteration", "env_steps", "episode_return_mean", "wall_time_s", "steps_per_s"]
    new = not (out / "progress.csv").exists()
    next_ckpt = checkpoint_freq
    next_eval = None if eval_freq is None else steps + eval_freq
    with (out / "progress.csv").open("a", newline="") as f:
        w = csv.DictWriter(f, fieldnames=fields)
        if new:
            w.writeheader()
        it = 0
        last_t, last_steps = time.perf_counter(), steps
        while steps < timesteps:
            result = algo.train()
            it += 1
            steps = _steps(result)
            now = time.perf_counter()
            row = {
                "iteration": int(result.get("training_iteration", it)),
                "env_steps": steps,
                "episode_return_mean": _episode_return(result),
                "wall_time_s": round(now - t0, 3),
                "steps_per_s": round((steps - last_steps) / max(now - last_t, 1e-9), 1),
            }
            last_t, last_steps = now, steps
            w.writerow(row)
            f.flush()
            if progress:
                print(
                    f"iter {row['iteration']:4d}  steps {steps:>10,d}  return "
                    f"{row['episode_return_mean']:9.2f}  {row['steps_per_s']:9.0f} steps/s",
                    file=sys.stderr,
                )
            if tb is not None:
                tb.add_scalar("rollout/ep_rew_mean", row["episode_return_mean"], steps)
                tb.add_scalar("time/steps_per_s", row["steps_per_s"], steps)
            if next_ckpt is not None and steps >= next_ckpt:
                algo.save_to_path(str((out / "checkpoints" / f"step_{steps}").resolve()))
                next_ckpt = steps + checkpoint_freq
            if next_eval is not None and steps >= next_eval and steps < timesteps:
                with tempfile.TemporaryDirectory() as d:
                    meta = _policy_meta(settings, out, steps)
                    evals.add(export_policy(algo.get_module(), d, meta, obs_stats(algo)), steps)
                next_eval = steps + eval_freq
    return steps
