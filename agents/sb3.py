"""stable-baselines3 on the native vector env (docs/agents.md, "Training"): the ``VecEnv``
adapter :class:`RallyVecEnv` (``DummyVecEnv``'s infos, seeding and images, same-step
autoreset), the heuristic warm start, and :func:`train`, the backend of ``rally train``'s
flags. This module imports stable-baselines3 and torch: nothing in ``rally_env`` imports it.
"""

from __future__ import annotations

import contextlib
import copy
import importlib
import math
import time
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import torch
from stable_baselines3 import PPO, SAC
from stable_baselines3.common.callbacks import BaseCallback, CallbackList
from stable_baselines3.common.running_mean_std import RunningMeanStd
from stable_baselines3.common.vec_env import VecMonitor, VecNormalize
from stable_baselines3.common.vec_env.base_vec_env import VecEnv

from agents.benchmark import run_stages
from agents.es import input_columns
from agents.evaluate import (
    ValidationLog,
    evaluate,
    resolve_stages,
    stage_label,
    validation_stages,
)
from agents.heuristic import HeuristicDriver, HeuristicParams
from agents.models import (  # saved-model IO (evaluation and policies need no training code)
    ResidualDriver,
    ResidualSpec,
    _vecnormalize_for,
    from_policy_action,
    heuristic_targets,
    obs_env_kwargs,
    obs_norm_meta,
    write_meta,
)
from agents.policies import SHIPPED, SB3Policy, policy_env_kwargs, resolve_agent
from agents.rundir import versions, write_json
from rally_env.learn import LEARN_ENV_KWARGS, learn_kwargs
from rally_env.spaces import DEFAULT_LAYOUT
from rally_env.vector import RallyVectorEnv

#: PPO defaults (``rally train --algo ppo``), for the settings of :data:`TRAIN_ENV_DEFAULTS`
#: (decisions at 10 Hz); why these: docs/agents.md.
PPO_DEFAULTS: dict[str, Any] = {
    "n_steps": 128,
    "batch_size": 2048,
    "n_epochs": 5,
    "learning_rate": 3e-4,
    "gamma": 0.995,
    "gae_lambda": 0.95,
    "clip_range": 0.2,
    "ent_coef": 0.0,
    "vf_coef": 0.5,
    "max_grad_norm": 0.5,
    "target_kl": 0.02,
    "policy_kwargs": {"net_arch": {"pi": [128, 128], "vf": [256, 256]}, "log_std_init": -1.0},
}
#: SAC defaults (``rally train --algo sac``): PPO's discount, four gradient steps per step.
SAC_DEFAULTS: dict[str, Any] = {
    "learning_rate": 3e-4,
    "buffer_size": 1_000_000,
    "batch_size": 256,
    "gamma": 0.995,
    "tau": 0.005,
    "train_freq": 1,
    "gradient_steps": 4,
    "learning_starts": 10_000,
    "policy_kwargs": {"net_arch": [256, 256]},
}
#: What a recipe's ``[ppo]`` starts from (a key it gives replaces one of these): the PPO
#: settings of the first recipes, kept so each recipe file reproduces its run; ``rally
#: train``'s own defaults (:data:`PPO_DEFAULTS`) moved on.
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
#: Validation stages ``rally train --stage random`` selects ``best_model.zip`` on
#: (``validation:N``: generated, disjoint from the training seeds and every test set).
VALIDATION_STAGES = 50
#: The env ``rally train`` trains on unless told otherwise: ``RallyLearn-v0``'s settings
#: (:data:`rally_env.LEARN_ENV_KWARGS`: decisions at 10 Hz, crash cost 100)
#: and no handbrake (``TRAIN_DEFAULTS["handbrake"]``). ``env_kwargs`` given to :func:`train`
#: go over these (a ``reward_weights`` dict is merged).
TRAIN_ENV_DEFAULTS: dict[str, Any] = {k: v for k, v in LEARN_ENV_KWARGS.items() if k != "stage"}
#: Environment / wrapper defaults of ``rally train``.
TRAIN_DEFAULTS: dict[str, Any] = {
    "n_envs": 32,
    "norm_obs": True,
    "norm_reward": True,
    "clip_obs": 10.0,
    "eval_freq": 500_000,
    "eval_seeds": 3,
    "checkpoint_freq": 1_000_000,
    "threads": 1,
    # the policy's actions: steer, throttle, brake (False) or those and the handbrake (True)
    "handbrake": False,
    # PPO only: behaviour-clone the heuristic driver on this many env steps before training
    # (0 = off); these steps count in the benchmark's step budget
    "warmstart_steps": 0,
}
#: The ``VecNormalize`` settings of :data:`TRAIN_DEFAULTS`.
_NORMALIZE_KEYS = ("norm_obs", "norm_reward", "clip_obs")


def train_env_kwargs(env_kwargs: dict[str, Any] | None) -> dict[str, Any]:
    """:data:`TRAIN_ENV_DEFAULTS` with ``env_kwargs`` over them (``reward_weights`` merged)."""
    return {k: v for k, v in learn_kwargs(env_kwargs or {}).items() if k != "stage"}


def algo_defaults(algo: str) -> dict[str, Any]:
    """A copy of :data:`PPO_DEFAULTS` or :data:`SAC_DEFAULTS` (``ValueError`` for another)."""
    defaults = {"ppo": PPO_DEFAULTS, "sac": SAC_DEFAULTS}.get(algo.lower())
    if defaults is None:
        raise ValueError(f"algo must be 'ppo' or 'sac', got {algo.lower()!r}")
    return copy.deepcopy(defaults)


def with_overrides(hp: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    """``hp`` with the hyperparameters ``over`` over it (a ``policy_kwargs`` table merged)."""
    for k, v in over.items():
        merge = k == "policy_kwargs" and isinstance(v, dict)
        hp[k] = {**hp.get(k, {}), **v} if merge else v
    return hp


# ------------------------------------------------------------------------------- actions
POLICY_ACTION_SPACE = gym.spaces.Box(-1.0, 1.0, shape=(4,), dtype=np.float32)


class PolicyActionWrapper(gym.ActionWrapper):
    """A single ``RallyEnv`` taking policy actions in ``[-1, 1]^4`` (for ``DummyVecEnv``)."""

    def __init__(self, env: gym.Env):
        super().__init__(env)
        self.action_space = POLICY_ACTION_SPACE

    def action(self, action: np.ndarray) -> np.ndarray:
        return from_policy_action(action)


# ------------------------------------------------------------------------------- adapter
def _indices(indices: Any, n: int) -> list[int]:
    """The car indices a ``VecEnv`` method's ``indices`` argument names (all for ``None``)."""
    if indices is None:
        return list(range(n))
    if isinstance(indices, (int, np.integer)):
        return [int(indices)]
    return [int(i) for i in indices]


class RallyVecEnv(VecEnv):
    """:class:`rally_env.RallyVectorEnv` as a stable-baselines3 ``VecEnv`` (its infos, seeding,
    images and held residual steps: docs/agents.md, "Training"). The policy acts in ``[-1,
    1]^4`` (:func:`agents.models.from_policy_action`), ``[-1, 1]^3`` without ``handbrake``, or
    moves the base driver of ``residual`` (a :class:`agents.models.ResidualSpec` or its
    fields); ``render_mode``: ``None``, ``"rgb_array"`` or ``"human"``; ``**env_kwargs``:
    ``RallyEnv`` arguments.
    """

    def __init__(
        self,
        num_envs: int = 8,
        render_mode: str | None = None,
        residual: tuple | None = None,
        handbrake: bool = True,
        **env_kwargs: Any,
    ):
        self.venv = RallyVectorEnv(
            num_envs, autoreset_mode="SameStep", render_mode=render_mode, **env_kwargs
        )
        self.residual = None if residual is None else ResidualDriver(*residual)
        act = POLICY_ACTION_SPACE
        if not handbrake:
            act = gym.spaces.Box(-1.0, 1.0, shape=(3,), dtype=np.float32)
        if self.residual is not None:
            act = gym.spaces.Box(-1.0, 1.0, (self.residual.spec.n_outputs,), np.float32)
        super().__init__(num_envs, self.venv.single_observation_space, act)
        self._actions: np.ndarray | None = None
        self._outputs: np.ndarray | None = None  # a held residual's outputs for this step
        self.render_mode = self.venv.render_mode
        self._obs: np.ndarray | None = None  # what the residual's base driver acts on
        self._car_seeds: list[int | None] = [None] * num_envs  # for the next reset

    # SB3 API
    def seed(self, seed: int | None = None) -> list[int | None]:
        """Car i gets ``seed + i`` at the next reset (``VecEnv.seed``'s contract; ``None``
        draws a seed, as SB3 does)."""
        if seed is None:
            seed = int(np.random.default_rng().integers(0, np.iinfo(np.uint32).max))
        self._car_seeds = [int(seed) + i for i in range(self.num_envs)]
        return list(self._car_seeds)

    def reset(self) -> np.ndarray:
        # a car without a seed continues its stream, as DummyVecEnv's envs do
        obs, info = self.venv.reset(seed=self._car_seeds)
        self._car_seeds = [None] * self.num_envs  # a seed is used at one reset only
        self.reset_infos = _car_infos(info, self.num_envs)
        if self.residual is not None:
            self.residual.reset(self.num_envs)
            self._obs = obs
        return obs

    def step_async(self, actions: np.ndarray) -> None:
        a = np.asarray(actions, dtype=np.float32).reshape(self.num_envs, -1)
        if self.residual is not None:
            self._outputs = a
        else:
            self._actions = from_policy_action(a)

    def step_wait(self):
        if self.residual is not None:
            return self._step_held()
        obs, rew, term, trunc, info = self.venv.step(self._actions)
        dones = term | trunc
        ends = _ends(info, dones, term, trunc, self.num_envs)
        return obs, rew.astype(np.float32), dones, _step_infos(info, ends, self.num_envs)

    def _step_held(self):
        """``hold`` env steps (one without a hold) with the residual's outputs held (see the
        class); a car whose episode ends starts the next with fresh memory, neutral outputs."""
        res, n = self.residual, self.num_envs
        res.hold_outputs(self._outputs)
        total = np.zeros(n, np.float32)
        ended = np.zeros(n, bool)
        ends: dict[int, dict] = {}
        obs, info = self._obs, {}
        for _ in range(res.hold):
            obs, rew, term, trunc, info = self.venv.step(res.base_act(obs))
            total += np.where(ended, np.float32(0.0), rew.astype(np.float32))
            d = term | trunc
            if d.any():
                res.reset(n, d)
                ends.update(_ends(info, d & ~ended, term, trunc, n))
                ended |= d
        self._obs = obs
        return obs, total, ended, _step_infos(info, ends, n)

    def close(self) -> None:
        self.venv.close()

    def get_attr(self, attr_name: str, indices: Any = None) -> list[Any]:
        n = len(_indices(indices, self.num_envs))
        return [getattr(self.venv, attr_name)] * n

    def set_attr(self, attr_name: str, value: Any, indices: Any = None) -> None:
        setattr(self.venv, attr_name, value)

    def env_method(self, method_name: str, *args: Any, indices: Any = None, **kw: Any) -> list:
        n = len(_indices(indices, self.num_envs))
        return [getattr(self.venv, method_name)(*args, **kw)] * n

    def env_is_wrapped(self, wrapper_class: type, indices: Any = None) -> list[bool]:
        return [False] * len(_indices(indices, self.num_envs))

    def get_images(self) -> list[np.ndarray | None]:
        """One (H, W, 3) uint8 frame per car (``render_mode="rgb_array"``), as
        ``DummyVecEnv.get_images`` returns them."""
        if self.render_mode != "rgb_array":
            warnings.warn(
                f"The render mode is {self.render_mode}, but get_images() needs "
                '"rgb_array": create RallyVecEnv(render_mode="rgb_array")',
                stacklevel=2,
            )
            return [None for _ in range(self.num_envs)]
        return list(self.venv.render_cars())


def _car_infos(info: dict[str, Any], n: int) -> list[dict[str, Any]]:
    """Per-car info dicts (the single env's keys; numpy scalars and rows) from a vector info
    of arrays over cars."""
    keys = [k for k in info if not k.startswith("_") and k not in ("final_obs", "final_info")]
    return [{k: info[k][i] for k in keys} for i in range(n)]


def _ends(info: dict[str, Any], cars: np.ndarray, term: Any, trunc: Any, n: int) -> dict:
    """``{car: its final info}`` of the cars in the bool array ``cars`` (their episode ended
    at this env step), with SB3's ``terminal_observation`` and ``TimeLimit.truncated``."""
    if not cars.any():
        return {}
    final = _car_infos(info["final_info"], n)
    for k in np.flatnonzero(cars):
        final[k]["terminal_observation"] = np.asarray(info["final_obs"][k], dtype=np.float32)
        final[k]["TimeLimit.truncated"] = bool(trunc[k] and not term[k])
    return {int(k): final[k] for k in np.flatnonzero(cars)}


def _step_infos(info: dict[str, Any], ends: dict, n: int) -> list[dict[str, Any]]:
    """The per-car infos of a step: a car's final info where its episode ended, else its
    info of ``info``, not truncated."""
    infos = _car_infos(info, n)
    return [ends[k] if k in ends else {**infos[k], "TimeLimit.truncated": False} for k in range(n)]


def make_vec_env(n_envs: int, stage: Any = "opener", seed: int | None = 0, **kw: Any):
    """A seeded :class:`RallyVecEnv` (car i gets seed ``seed + i`` at the first reset)."""
    venv = RallyVecEnv(n_envs, stage=stage, **kw)
    if seed is not None:
        venv.seed(seed)
    return venv


# ------------------------------------------------------------------- heuristic warm start
def collect_heuristic(
    n_steps: int,
    stage: Any,
    n_envs: int,
    seed: int,
    noise: float = 0.3,
    learner: Any = None,
    teacher: str = "blind",
    **env_kwargs: Any,
) -> tuple[np.ndarray, np.ndarray]:
    """``(obs, targets)`` labelled with the heuristic driver's clean actions.

    Without ``learner`` the driver itself drives, with Gaussian action noise (so the data
    covers recoveries); with ``learner`` (a policy ``obs (N, D) -> env actions (N, 4)``) the
    learner drives, with the same noise, and the driver only labels what it sees (DAgger).
    ``teacher="blind"``: the driver reads the :data:`rally_env.spaces.DEFAULT_LAYOUT` fields
    only; ``"ahead"``: also the road-ahead block (``road_ahead=True``); else a model
    ``--agent`` takes (a shipped name or a ``.zip``, e.g. ``"es-general"``), run at the env's
    rate (:meth:`agents.policies.SB3Policy.at_rate`) on observations it was trained with.
    """
    if teacher == "ahead" and env_kwargs.get("road_ahead") is not True:
        raise ValueError("teacher 'ahead' reads the road-ahead block: road_ahead=True")
    venv = RallyVectorEnv(n_envs, autoreset_mode="SameStep", stage=stage, **env_kwargs)
    nd = DEFAULT_LAYOUT.size if teacher == "blind" else venv.single_observation_space.shape[0]
    hz = venv.config.control_hz
    if teacher in ("blind", "ahead"):
        drv = HeuristicDriver(HeuristicParams(control_hz=hz), read_ahead=teacher == "ahead")
    else:
        drv = model_teacher(teacher, hz, env_kwargs)
    rng = np.random.default_rng(seed)
    obs, _ = venv.reset(seed=seed)
    drv.reset(n_envs)
    xs, ys = [], []
    lo, hi = venv.single_action_space.low, venv.single_action_space.high
    for _ in range(max(1, n_steps // n_envs)):
        a = drv(obs[:, :nd])
        xs.append(obs.copy())
        ys.append(heuristic_targets(a))
        a_exec = a if learner is None else np.asarray(learner(obs), dtype=np.float32)
        a_exec = a_exec + rng.normal(0.0, noise, size=a.shape).astype(np.float32)
        a_exec[:, 3] = 0.0
        obs, _, term, trunc, _ = venv.step(np.clip(a_exec, lo, hi))
        done = term | trunc
        if done.any():
            drv.reset(n_envs, done)
    venv.close()
    return np.concatenate(xs), np.concatenate(ys)


def model_teacher(spec: str, control_hz: int, env_kwargs: dict[str, Any]) -> SB3Policy:
    """A model as a DAgger teacher (``[warmstart] teacher``): ``spec`` a shipped name or a
    ``.zip`` (:func:`agents.policies.resolve_agent`), deciding at ``control_hz``.

    Raises:
        ValueError: ``spec`` is not such a model, or its observation settings are not the
            env's (``env_kwargs``); FileNotFoundError: no such ``.zip``.
    """
    pol = resolve_agent(spec) if spec in SHIPPED or spec.endswith(".zip") else None
    if not isinstance(pol, SB3Policy):
        raise ValueError(
            f"teacher must be 'blind', 'ahead', a shipped model ({', '.join(SHIPPED)}) or a "
            f".zip model, got {spec!r}"
        )
    if "road_ahead" in pol.env_kwargs:  # raises when the env's observation lacks it
        policy_env_kwargs(pol, {"road_ahead": env_kwargs.get("road_ahead", False)})
    return pol.at_rate(control_hz)


def warm_start(
    model: Any,
    vn: Any,
    obs: np.ndarray,
    targets: np.ndarray,
    epochs: int = 10,
    batch_size: int = 256,
    lr: float = 1e-3,
    seed: int = 0,
    update_stats: bool = True,
) -> float:
    """Behaviour-clone the policy mean onto ``targets``; seeds ``vn``'s observation stats
    (unless ``update_stats`` is false: DAgger's later rounds refit on data already counted).
    Returns the last epoch's mean squared error (policy space)."""
    if update_stats:
        vn.obs_rms.update(obs)
    x = torch.as_tensor(vn.normalize_obs(obs).astype(np.float32))
    # a policy without a handbrake output learns the first three targets
    y = torch.as_tensor(targets[:, : model.action_space.shape[0]].astype(np.float32))
    pol = model.policy
    params = [*pol.mlp_extractor.policy_net.parameters(), *pol.action_net.parameters()]
    if hasattr(pol, "features_extractor"):
        params += list(pol.features_extractor.parameters())
    opt = torch.optim.Adam(params, lr=lr)
    g = torch.Generator().manual_seed(seed)
    n = x.shape[0]
    loss_v = math.nan
    for _ in range(epochs):
        perm = torch.randperm(n, generator=g)
        tot = 0.0
        for i in range(0, n, batch_size):
            idx = perm[i : i + batch_size]
            feats = pol.extract_features(x[idx], pol.pi_features_extractor)
            lat = pol.mlp_extractor.forward_actor(feats)
            mean = pol.action_net(lat)
            loss = torch.mean((mean - y[idx]) ** 2)
            opt.zero_grad()
            loss.backward()
            opt.step()
            tot += loss.item() * len(idx)
        loss_v = tot / n
    return loss_v


def restrict_actor_inputs(model: Any, cols: np.ndarray) -> None:
    """Make a stable-baselines3 policy's actor read only the observation columns ``cols``: the
    first layer of its action path (the action net without hidden layers) gets zero weights on
    every other column, kept zero by a gradient hook (docs/agents.md, ``[ppo] inputs``).
    ``ValueError`` for columns outside the observation."""
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


def _warm_start(recipe: Any, model: Any, venv: Any, evaluator: Any) -> list[float]:
    """Behaviour cloning of the heuristic (round 0), then DAgger rounds (see
    :class:`WarmStart`); each fit is evaluated on the validation stages. Returns the final
    fit's error per round."""
    ws = recipe.warmstart
    env0 = phase_env(recipe, 0)
    stage0 = env0.pop("stage", "random")
    mses: list[float] = []
    obs = tg = None
    for r in range(ws.dagger_rounds + 1):
        o, t = collect_heuristic(
            ws.dagger_steps if r else ws.steps,
            stage0,
            recipe.n_envs,
            recipe.seed + r,
            noise=ws.dagger_noise if r else ws.noise,
            learner=_LivePolicy(model, venv) if r else None,
            teacher=ws.teacher,
            **env0,
        )
        # all the labels so far; one copy at a time (the rounds' pieces are not kept)
        obs, tg = (o, t) if r == 0 else (np.concatenate([obs, o]), np.concatenate([tg, t]))
        mse = warm_start(
            model,
            venv,
            obs,
            tg,
            epochs=ws.dagger_epochs if r else ws.epochs,
            batch_size=ws.batch_size,
            lr=ws.lr,
            seed=recipe.seed,
            update_stats=r == 0,
        )
        mses.append(mse)
        evaluator.evaluate_now(model, venv, env_steps=len(obs), phase=f"dagger{r}" if r else "bc")
    evaluator.warm_steps = len(obs)
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


# ----------------------------------------------------------------------------- training
def phase_env(recipe: Any, step: int) -> dict[str, Any]:
    """A recipe's env settings at env step ``step`` (its ``[[phase]]`` overrides applied)."""
    env = dict(recipe.env)
    for ph in recipe.phases:
        if ph.from_step <= step:
            env.update(ph.env)
    return env


def train(
    recipe: Any,
    out: str | Path | None = None,
    *,
    resume: str | Path | None = None,
    say: Callable[[str], None] | None = None,
    progress_bar: bool = True,
    progress_lines_s: float | None = None,
    tensorboard: bool = True,
) -> dict[str, Any]:
    """Train PPO or SAC on the native vector env as a recipe says: a ``"command"`` recipe
    (``rally train``'s flags, :func:`agents.recipe.command_recipe`) or a ``ppo`` recipe file
    (its residual, warm start with DAgger, critic steps and phases: docs/agents.md); the
    backend :func:`agents.recipe.train` sends both to.

    Args:
        out: the run directory (default the recipe's ``out``).
        resume: a checkpoint zip a ``"command"`` run continues (with its ``VecNormalize``).
        say: where the run's own lines go, e.g. ``print``; ``None``: nowhere (a recipe file's
            run says no plan).
        progress_bar: SB3's progress bar (needs rich and tqdm: the ``train`` extra).
        progress_lines_s: a :class:`ProgressLines` line through ``say`` every such interval
            of wall time (s), for logs where a progress bar does not show; ``None``: none.

    Returns:
        A summary dict: paths, wall time, timesteps, last evaluation.
    """
    command = recipe.defaults == "command"
    algo, n_envs, seed, ws = recipe.algo, recipe.n_envs, recipe.seed, recipe.warmstart
    env_kwargs = dict(recipe.env)
    stage = env_kwargs.pop("stage", "random")
    torch.set_num_threads(recipe.threads)
    hp = algo_defaults(algo) if command else copy.deepcopy(RECIPE_PPO_BASE)
    hp = with_overrides(hp, recipe.sac if algo == "sac" else recipe.ppo)
    out = Path(out or recipe.out)
    out.mkdir(parents=True, exist_ok=True)
    spec = recipe.residual.spec()
    hold = spec.hold if spec is not None else 1  # SB3 steps a held residual's policy steps
    obs_env = obs_env_kwargs({"env": env_kwargs})
    tb = str(out / "tb") if tensorboard and _installed("tensorboard") else None
    steps = 0
    if command:
        batch_note = batch_within_rollout(algo, hp, n_envs)
        steps, rounding = run_steps(algo, int(recipe.timesteps), n_envs, hp)
        if say is not None:
            _say_plan(say, recipe, (steps, out, resume, tb), [rounding, batch_note], tensorboard)
        config = _command_config(recipe, hp, resume)
    else:
        config = {"recipe": recipe.to_dict(), "hyperparams": hp, "versions": versions()}
    write_json(out / "config.json", config)

    def make_env(step: int) -> Any:
        env = phase_env(recipe, step)
        stage = env.pop("stage", "random")
        venv = make_vec_env(
            n_envs, stage=stage, seed=seed + step, residual=spec, handbrake=recipe.handbrake, **env
        )
        return VecMonitor(venv)

    venv, model = _sb3_model(make_env(0), algo, hp, seed, resume, tb)
    if spec is not None:  # start from the base driver: a zero residual
        with torch.no_grad():
            model.policy.action_net.weight.zero_()
            model.policy.action_net.bias.zero_()
    if recipe.inputs is not None:
        road_ahead = env_kwargs.get("road_ahead") is True
        restrict_actor_inputs(model, input_columns(recipe.inputs, road_ahead))
    if command:
        seeds = list(range(1000, 1000 + max(0, recipe.eval_seeds)))
        # many stages, one run each (validation): driven together, like the benchmark
        batched = len(seeds) == 1 and len(resolve_stages(recipe.eval_stages)) > 1
        evaluator = Evaluator(
            recipe.eval_stages,
            seeds,
            recipe.eval.freq,
            out,
            env_kwargs,
            rank="score" if batched else "time",
            batched=batched,
        )
    else:
        evaluator = Evaluator(
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
    timing: dict[str, float] = {}
    if command and not resume and algo == "ppo" and ws.steps > 0:
        obs, tg = collect_heuristic(ws.steps, stage, n_envs, seed, **env_kwargs)
        config["warmstart_mse"] = warm_start(model, venv, obs, tg, seed=seed)
    elif not command and ws.steps > 0:
        t0 = time.perf_counter()
        config["warmstart_mse"] = _warm_start(recipe, model, venv, evaluator)
        # the clone was fitted to these statistics: PPO's own states must not shift them
        freeze_obs_stats(venv)
        timing["warmstart_s"] = time.perf_counter() - t0
    cbs: list[Any] = [evaluator]
    if recipe.checkpoint_freq > 0:
        meta = {"algo": algo, "env": obs_env, **evaluator.residual_meta()}
        freq = recipe.checkpoint_freq // (n_envs * hold)
        cbs.append(Checkpoints(freq, out / "checkpoints", algo, meta))

    def callbacks(total: int) -> CallbackList:
        if progress_lines_s is None or say is None:
            return CallbackList(cbs)
        lines = ProgressLines(total, progress_lines_s, say, evaluator if command else None)
        return CallbackList([*cbs, lines])

    if command:
        config["timesteps_run"] = steps
    write_json(out / "config.json", config)
    t0 = time.perf_counter()
    if command:
        model.learn(
            total_timesteps=steps,
            callback=callbacks(steps),
            progress_bar=progress_bar and _installed("rich", "tqdm"),
            reset_num_timesteps=not resume,
            tb_log_name=algo,
        )
    else:
        if spec is not None:  # where the curve starts: the base driver
            evaluator.evaluate_now(model, venv, env_steps=0, phase="start")
        if ws.critic_steps > 0:  # the value function learns what the starting policy earns
            with _actor_frozen(model):
                model.learn(max(1, ws.critic_steps // hold), callback=CallbackList(cbs))
        venv = _learn_phases(recipe, model, venv, hp, hold, make_env, callbacks, progress_bar)
    timing["train_s"] = time.perf_counter() - t0
    path = out / "model.zip"
    model.save(str(path))
    venv.save(str(out / "vecnormalize.pkl"))
    meta = {"algo": algo, "obs_norm": obs_norm_meta(venv), "env": obs_env, "config": config}
    write_meta(path, {**meta, **evaluator.residual_meta()})
    final = evaluator.evaluate_now(model, venv, final=True) if recipe.eval_seeds > 0 else None
    curve = evaluator.log.plot()
    summary = _summary(recipe, out, model, hold, final, curve, config, timing)
    write_json(out / "summary.json", summary)
    venv.close()
    return summary


def _command_config(recipe: Any, hp: dict[str, Any], resume: Any) -> dict[str, Any]:
    """``config.json`` of a ``"command"`` run: its settings after the defaults."""
    env_kwargs = dict(recipe.env)
    stage = env_kwargs.pop("stage")
    eval_stages = recipe.eval_stages
    return {
        "algo": recipe.algo,
        "stage": stage_label(stage),
        "timesteps": int(recipe.timesteps),
        "n_envs": recipe.n_envs,
        "seed": int(recipe.seed),
        "hyperparams": hp,
        **{k: TRAIN_DEFAULTS[k] for k in _NORMALIZE_KEYS},
        "eval_freq": recipe.eval.freq,
        "eval_seeds": recipe.eval_seeds,
        "eval_stages": eval_stages if isinstance(eval_stages, str) else list(eval_stages),
        "checkpoint_freq": recipe.checkpoint_freq,
        "threads": recipe.threads,
        "warmstart_steps": recipe.warmstart.steps if (recipe.algo == "ppo" and not resume) else 0,
        "env_kwargs": env_kwargs,
        "handbrake": recipe.handbrake,
        "resume": str(resume) if resume else None,
        "versions": versions(),
    }


def _learn_phases(
    recipe: Any,
    model: Any,
    venv: Any,
    hp: dict[str, Any],
    hold: int,
    make_env: Callable[[int], Any],
    callbacks: Callable[[int], Any],
    bar: bool,
) -> Any:
    """A recipe file's PPO up to its ``timesteps`` env steps, each ``[[phase]]`` on a new env
    (``make_env(env step)``) with the statistics so far; returns the last env."""
    bounds = [ph.from_step for ph in recipe.phases] or [0]
    for i, end_env in enumerate([*bounds[1:], recipe.timesteps]):
        end = end_env // hold
        if model.num_timesteps >= end:
            continue
        if i > 0:  # a new phase: a new env with the same statistics
            old = venv
            venv = normalized(make_env(model.num_timesteps * hold), hp["gamma"])
            venv.obs_rms, venv.ret_rms = old.obs_rms, old.ret_rms
            old.close()
            model.set_env(venv)
        per = int(hp["n_steps"]) * recipe.n_envs
        steps = max(per, (end - model.num_timesteps) // per * per)
        model.learn(steps, callback=callbacks(steps), reset_num_timesteps=False, progress_bar=bar)
    return venv


def _sb3_model(
    venv: Any, algo: str, hp: dict[str, Any], seed: int, resume: str | Path | None, tb: str | None
) -> tuple[Any, Any]:
    """``(VecNormalize, model)`` on ``venv``: a new model on fresh statistics, or the
    checkpoint ``resume`` with the statistics saved beside it."""
    cls = {"ppo": PPO, "sac": SAC}[algo]
    if not resume:
        venv = normalized(venv, hp["gamma"])
        return venv, cls("MlpPolicy", venv, seed=seed, device="cpu", tensorboard_log=tb, **hp)
    resume = Path(resume)
    vn_path = _vecnormalize_for(resume)
    if vn_path is not None:
        venv = VecNormalize.load(str(vn_path), venv)
        venv.training = True
    else:
        venv = normalized(venv, hp["gamma"])
    return venv, cls.load(str(resume), env=venv, device="cpu", tensorboard_log=tb)


def _summary(
    recipe: Any,
    out: Path,
    model: Any,
    hold: int,
    final: Any,
    curve: Any,
    config: dict[str, Any],
    timing: dict[str, float],
) -> dict[str, Any]:
    """``summary.json`` of a ``"command"`` run or of a recipe file's."""
    n = int(model.num_timesteps)
    if recipe.defaults == "command":
        return {
            "model": str(out / "model.zip"),
            "config": str(out / "config.json"),
            "timesteps": n,
            "warmstart_steps": config["warmstart_steps"],
            "wall_time_s": timing["train_s"],
            "final_eval": final,
            "eval_log": str(out / "eval_log.csv"),
            "learning_curve": None if curve is None else str(curve),
        }
    return {
        "model": str(out / "model.zip"),
        "best_model": str(out / "best_model.zip"),
        "timesteps": n,
        "env_steps": n * hold,
        "final_eval": final,
        "timing_s": timing,
        "env_steps_per_s": n * hold / max(timing["train_s"], 1e-9),
        "eval_log": str(out / "eval_log.csv"),
        "learning_curve": str(out / "learning_curve.png"),
    }


def _say_plan(
    say: Callable[[str], None], recipe: Any, run: tuple, notes: list[str], tensorboard: bool
) -> None:
    """The run's first lines: what it trains, where it writes (``run``: steps, out, resume,
    the TensorBoard directory or None), then the ``notes`` and a missing TensorBoard."""
    steps, out, resume, tb = run
    what = ["model.zip", "config.json", "eval_log.csv", "best_model.zip"]
    if recipe.checkpoint_freq > 0:
        what.append("checkpoints/")
    if tb is not None:
        what.append("TensorBoard logs in tb/")
    say(
        f"rally train: {recipe.algo.upper()} on {stage_label(recipe.env['stage'])}, "
        f"{steps:,} env steps, {recipe.n_envs} cars, seed {recipe.seed}"
        f"{f', resuming {resume}' if resume else ''} -> {out} ({', '.join(what)})"
    )
    for note in filter(None, notes):
        say(note)
    if tensorboard and tb is None:
        say('no TensorBoard logs: tensorboard is not installed (pip install "rally-env[train]")')


def batch_within_rollout(algo: str, hp: dict[str, Any], n_envs: int) -> str:
    """Cut PPO's ``batch_size`` in ``hp`` to one rollout (``n_steps`` x cars) when it is larger
    (SB3 would truncate every minibatch and warn); returns the line saying so, or ""."""
    roll = int(hp.get("n_steps", 0)) * n_envs
    if algo != "ppo" or int(hp["batch_size"]) <= roll:
        return ""
    note = (
        f"batch_size {int(hp['batch_size']):,} -> {roll:,}: a minibatch is at most one "
        f"rollout (n_steps {int(hp['n_steps'])} x {n_envs} cars)"
    )
    hp["batch_size"] = roll
    return note


def run_steps(algo: str, timesteps: int, n_envs: int, hp: dict[str, Any]) -> tuple[int, str]:
    """The env steps a run of ``timesteps`` takes (PPO: whole rollouts of ``n_steps`` x
    ``n_envs``, at least one; SAC: a multiple of ``n_envs``; never more than asked), and a
    line saying why when they differ."""
    if algo == "ppo":
        per = int(hp["n_steps"]) * n_envs
        unit = f"whole rollouts of n_steps {int(hp['n_steps'])} x {n_envs} cars = {per:,}"
    else:
        per = n_envs
        unit = f"a multiple of the {n_envs} cars it steps at once"
    steps = max(per, timesteps // per * per)
    if steps == timesteps:
        return steps, ""
    why = "rounded down so a run never takes more steps than asked"
    if steps > timesteps:  # less than one rollout asked: one rollout
        why = "and a run takes at least one"
    return steps, (
        f"--timesteps {timesteps:,} -> {steps:,} env steps: {algo.upper()} trains in {unit} "
        f"steps, {why}"
    )


def normalized(venv: Any, gamma: float) -> Any:
    """``venv`` behind a fresh ``VecNormalize`` with the training defaults."""
    return VecNormalize(venv, **{k: TRAIN_DEFAULTS[k] for k in _NORMALIZE_KEYS}, gamma=gamma)


def _installed(*modules: str) -> bool:
    """Whether ``modules`` import (SB3's progress bar: rich and tqdm; TensorBoard)."""
    try:
        for m in modules:
            importlib.import_module(m)
    except ImportError:
        return False
    return True


class _LivePolicy:
    """The model being trained as an evaluation policy (current normalisation stats)."""

    def __init__(self, model: Any, vn: Any, residual: tuple | None = None):
        self.model = model
        self.vn = vn
        self.name = "training"
        self.residual = None if residual is None else ResidualDriver(*residual)

    def reset(self, n: int = 1) -> None:
        if self.residual is not None:
            self.residual.reset(n)

    def __call__(self, obs: np.ndarray) -> np.ndarray:
        raw = np.atleast_2d(obs).astype(np.float32)
        a, _ = self.model.predict(self.vn.normalize_obs(raw), deterministic=True)
        return from_policy_action(a) if self.residual is None else self.residual.act(raw, a)


class Evaluator(BaseCallback):
    """The evaluations of an SB3 run: every ``freq`` env steps (and at each
    :meth:`evaluate_now`) the deterministic policy on ``stages``, a row of ``eval_log.csv``
    (:class:`agents.evaluate.ValidationLog`), TensorBoard ``eval/*``, and the best model so
    far as ``best_model.zip``; ``log.plot()`` draws ``learning_curve.png``.

    Args:
        stages: what :func:`agents.evaluate.resolve_stages` takes.
        seeds: the reset seeds, one run each per stage (``batched``: one run, seed 0).
        env_kwargs: the env settings evaluated with; the saved model's metadata keeps their
            observation settings.
        rank: ``"score"`` (validation stages: finish rate, then median score) or ``"time"``.
        batched: drive the stages together, one run each (:func:`agents.benchmark.run_stages`).
        residual: the :class:`agents.models.ResidualSpec` fields of a residual policy.
        hold: env steps per SB3 timestep (a held residual's policy step).
    """

    def __init__(
        self,
        stages: Any,
        seeds: list[int],
        freq: int,
        out: Path,
        env_kwargs: dict[str, Any] | None = None,
        *,
        rank: str,
        batched: bool = False,
        residual: Any = None,
        hold: int = 1,
        xlabel: str = "env steps (millions)",
    ):
        super().__init__(verbose=0)
        self.stages = resolve_stages(stages) if stages else []
        self.seeds = list(seeds)
        self.env_kwargs = dict(env_kwargs or {})
        self.freq = freq
        self.out = Path(out)
        self.batched = batched
        self.residual = residual
        self.hold = hold
        #: env steps the warm start used before the first SB3 step (the curve's x offset)
        self.warm_steps = 0
        self._next = 0
        names = [stage_label(s) for s in self.stages]
        self.log = ValidationLog(self.out, names, xlabel, rank=rank)
        #: the last periodic evaluation's figures (None before the first)
        self.last: dict[str, Any] | None = None

    def _on_training_start(self) -> None:
        if self._next <= self.num_timesteps * self.hold:
            self._next = self.num_timesteps * self.hold + self.freq

    def _on_step(self) -> bool:
        due = self.freq > 0 and self.stages and self.seeds
        if due and self.num_timesteps * self.hold >= self._next:
            self._next += self.freq
            self.evaluate_now(self.model, self.model.get_env())
        return True

    def residual_meta(self) -> dict[str, Any]:
        """The ``"residual"`` entry of a saved model's metadata (empty for a plain one)."""
        return {} if self.residual is None else {"residual": ResidualSpec(*self.residual).to_meta()}

    def evaluate_now(
        self,
        model: Any,
        vn: Any,
        final: bool = False,
        env_steps: int | None = None,
        phase: str | None = None,
    ) -> dict[str, Any]:
        """One evaluation (``phase``: default ``final`` or the algorithm); ``env_steps``
        defaults to the warm start's steps plus SB3's. Returns its figures."""
        if not self.stages:
            return {}
        pol = _LivePolicy(model, vn, self.residual)
        buf = getattr(model, "ep_info_buffer", None)
        figures = {"ep_return": float(np.mean([e["r"] for e in buf])) if buf else math.nan}
        if self.batched:
            runs, _ = run_stages(pol, self.stages, env_kwargs=self.env_kwargs)
        else:
            res = evaluate(
                pol, self.stages, self.seeds, agent_name="training", env_kwargs=self.env_kwargs
            )
            runs = res.runs
            times = [s.median_time_s for s in res.stages]
            ok = all(math.isfinite(t) for t in times)
            figures["median_time_s"] = float(np.mean(times)) if ok else math.nan
        n = int(model.num_timesteps)
        env_steps = self.warm_steps + n * self.hold if env_steps is None else int(env_steps)
        phase = phase or ("final" if final else type(model).__name__.lower())
        m, better = self.log.add(runs, n, env_steps, phase, final, figures)
        if getattr(self, "model", None) is not None and not final:  # inside model.learn
            for k in ("finish_rate", "median_score", "mean_score", "median_time_s"):
                if math.isfinite(m[k]):
                    tag = "median_stage_time_s" if k == "median_time_s" else k
                    self.logger.record(f"eval/{tag}", m[k])
        if better:
            p = self.out / "best_model.zip"
            model.save(str(p))
            meta = {"algo": type(model).__name__.lower(), "obs_norm": obs_norm_meta(vn)}
            meta |= {"env": obs_env_kwargs({"env": self.env_kwargs}), "timesteps": n}
            write_meta(p, {**meta, "env_steps": env_steps, "phase": phase, **self.residual_meta()})
        figures = {"timesteps": n, "env_steps": env_steps, **m}
        if not final:
            self.last = figures
        return figures


class Checkpoints(BaseCallback):
    """Every ``save_freq`` calls: ``{prefix}_{steps}_steps.zip`` with the run's metadata
    ``meta`` and its ``obs_norm`` (so ``rally eval`` drives a checkpoint as the final model)
    and ``{prefix}_vecnormalize_{steps}_steps.pkl`` (what ``--resume`` reads) in ``path``."""

    def __init__(self, save_freq: int, path: Path, prefix: str, meta: dict[str, Any]):
        super().__init__(verbose=0)
        self.save_freq = max(1, int(save_freq))
        self.path = Path(path)
        self.prefix = prefix
        self.meta = dict(meta)

    def _on_step(self) -> bool:
        if self.n_calls % self.save_freq == 0:
            self.path.mkdir(parents=True, exist_ok=True)
            n = int(self.num_timesteps)
            zp = self.path / f"{self.prefix}_{n}_steps.zip"
            self.model.save(str(zp))
            vn = self.model.get_vec_normalize_env()
            meta = dict(self.meta, timesteps=n)
            if vn is not None:
                vn.save(str(self.path / f"{self.prefix}_vecnormalize_{n}_steps.pkl"))
                meta["obs_norm"] = obs_norm_meta(vn)
            write_meta(zp, meta)
        return True


class ProgressLines(BaseCallback):
    """A plain progress line at the first rollout end after every ``every_s`` seconds of
    wall time (0: every rollout end): steps done of ``total``, steps/s, and the last
    evaluation of ``evaluator`` (an :class:`Evaluator`)."""

    def __init__(
        self, total: int, every_s: float, say: Callable[[str], None], evaluator: Any = None
    ):
        super().__init__(verbose=0)
        self.total = int(total)
        self.every_s = float(every_s)
        self.say = say
        self.evaluator = evaluator
        self._t0 = self._due = 0.0
        self._start = 0

    def _on_training_start(self) -> None:
        self._t0 = time.perf_counter()
        self._due = self._t0 + self.every_s
        self._start = self.num_timesteps

    def _on_step(self) -> bool:
        return True

    def _on_rollout_end(self) -> None:
        now = time.perf_counter()
        if now < self._due:
            return
        self._due = now + self.every_s
        done = self.num_timesteps - self._start
        rate = done / max(now - self._t0, 1e-9)
        line = (
            f"  {done:,}/{self.total:,} steps ({100.0 * done / max(self.total, 1):.0f} %), "
            f"{rate:,.0f} steps/s"
        )
        if 0 < done < self.total and rate > 0:
            left = (self.total - done) / rate
            eta = f"{left:.0f} s" if left < 120 else f"{left / 60:.0f} min"
            line += f", about {eta} to go"
        last = getattr(self.evaluator, "last", None)
        if last is not None:
            med = last["median_time_s"]
            line += (
                f"; evaluation at {last['timesteps']:,}: finish rate {last['finish_rate']:.2f}, "
                f"median stage time {'-' if not math.isfinite(med) else f'{med:.2f} s'}"
            )
        self.say(line)
