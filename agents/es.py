"""Evolution strategies for a residual policy that tunes the heuristic driver (recipes with
``[run] algo = "es"``): antithetic perturbations ranked by :func:`member_fitness`, Adam steps,
a linear policy on the normalised observation whose outputs are a ``"tuning"`` residual
(``theta = 0`` is the base driver), saved as a ``"linear"`` model zip. The method and its
runs: docs/agents.md, "Evolution strategies" under "es-general".
"""

from __future__ import annotations

import dataclasses
import math
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from agents.benchmark import run_stages
from agents.evaluate import ValidationLog, validation_stages
from agents.models import LinearModel, ResidualDriver, ResidualSpec, normalize_obs
from agents.rundir import versions, write_json
from rally_env.spaces import ObsLayout
from rally_env.vector import RallyVectorEnv

#: Observation clip and epsilon of the normalisation (those of SB3's ``VecNormalize``).
CLIP_OBS = 10.0
EPSILON = 1e-8


@dataclass(frozen=True)
class ESSettings:
    """Settings of an evolution-strategies run (a recipe's ``[es]`` table).

    Attributes:
        iterations: parameter updates.
        pairs: antithetic pairs of perturbations per iteration.
        stages: fresh training stages per iteration (every member drives each).
        sigma: standard deviation of the parameter perturbations.
        lr: Adam step size.
        norm_stages: stages the base driver drives for the observation statistics.
        inputs: the observation fields (or groups of fields, :class:`rally_env.spaces.ObsLayout`)
            the policy reads; ``None``: all of them, ``()``: none (a constant tuning).
        line: the policy also sets the driver's line (the fourth tuning output); ``False``
            leaves it on the centerline.
        dnf_score: what a run that does not finish scores on its stage in the fitness, in
            [0, 1] (the benchmark's score gives 0; docs/agents.md).
    """

    iterations: int = 40
    pairs: int = 16
    stages: int = 24
    sigma: float = 0.02
    lr: float = 0.01
    norm_stages: int = 16
    inputs: tuple[str, ...] | None = None
    line: bool = True
    dnf_score: float = 0.0


def check_inputs(v: Any, road_ahead: bool = True) -> tuple[str, ...]:
    """``v`` as a tuple of observation field or group names (``ValueError`` naming a bad
    one) of the observation with or without the road-ahead block."""
    lay = ObsLayout(4, road_ahead=road_ahead)
    if not isinstance(v, (list, tuple)) or not all(isinstance(x, str) for x in v):
        raise ValueError(f"must be a list of observation field or group names, got {v!r}")
    bad = [x for x in v if x not in lay.index and x not in lay.groups]
    if bad:
        raise ValueError(f"not observation fields or groups: {bad}")
    return tuple(v)


def input_columns(inputs: tuple[str, ...] | None, road_ahead: bool = True) -> np.ndarray | None:
    """The observation columns of ``inputs`` (sorted, each once); ``None`` for all."""
    if inputs is None:
        return None
    lay = ObsLayout(4, road_ahead=road_ahead)
    cols: set[int] = set()
    for name in inputs:
        if name in lay.index:
            cols.add(int(lay.index[name]))
        else:
            cols.update(int(i) for i in np.arange(lay.size)[lay.groups[name]])
    return np.array(sorted(cols), np.int64)


class LinearTuner:
    """``a = clip(W z + b, -1, 1)`` on the normalised observation, batched over cars that
    may each have their own parameters; ``W`` reads only the observation columns
    ``inputs`` (all when ``None``; none: a constant tuning)."""

    def __init__(self, mean: np.ndarray, var: np.ndarray, n_out: int, inputs: Any = None) -> None:
        self.mean = np.asarray(mean, np.float32)
        self.var = np.asarray(var, np.float32)
        d = self.mean.shape[0]
        self.inputs = np.arange(d) if inputs is None else np.asarray(inputs, np.int64)
        self.n_in = len(self.inputs)
        self.n_out = n_out
        self.n_params = n_out * (self.n_in + 1)

    def normalize(self, obs: np.ndarray) -> np.ndarray:
        return normalize_obs(np.asarray(obs, np.float32), (self.mean, self.var, CLIP_OBS, EPSILON))

    def split(self, theta: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``(W (..., n_out, n_in), b (..., n_out))`` of parameters ``theta (..., n_params)``."""
        t = np.asarray(theta, np.float32)
        w = t[..., : self.n_out * self.n_in].reshape(*t.shape[:-1], self.n_out, self.n_in)
        return w, t[..., self.n_out * self.n_in :]

    def full_weights(self, theta: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``(W (n_out, D), b)`` over the whole observation (zeros where it does not read)."""
        w, b = self.split(theta)
        full = np.zeros((self.n_out, self.mean.shape[0]), np.float32)
        full[:, self.inputs] = w
        return full, b

    def outputs(self, obs: np.ndarray, theta_per_car: np.ndarray, width: int = 0) -> np.ndarray:
        """Outputs (N, max(n_out, width)) for observations (N, D) and parameters
        (N, n_params); the columns past ``n_out`` are 0."""
        w, b = self.split(theta_per_car)
        z = self.normalize(obs)[:, self.inputs]
        a = np.clip(np.einsum("nod,nd->no", w, z) + b, -1.0, 1.0)
        return np.pad(a, ((0, 0), (0, max(0, width - self.n_out))))


def drive_batch(
    spec: ResidualSpec,
    tuner: LinearTuner | None,
    theta_per_car: np.ndarray | None,
    seeds: list[int],
    env_kwargs: dict[str, Any],
    collect: bool = False,
) -> dict[str, Any]:
    """One episode per car: car ``i`` on the generated stage of reset seed ``seeds[i]``
    (``stage="random"``), its outputs from its own parameters (``tuner None``: the base
    driver). Returns per car ``finished``, ``time_s`` (finish time, nan when not finished)
    and ``steps``; with ``collect``, also the observations at the decision steps. The cars
    drive through the vector env's own ``step``; an ended car's next episode counts for
    nothing (docs/agents.md, "Evolution strategies")."""
    n = len(seeds)
    venv = RallyVectorEnv(n, stage="random", autoreset_mode="NextStep", **env_kwargs)
    try:
        obs, _ = venv.reset(seed=[int(s) for s in seeds])
        drv = ResidualDriver(*spec)
        drv.reset(n)
        active = np.ones(n, bool)
        finished = np.zeros(n, bool)
        time_s = np.full(n, math.nan)
        steps = np.zeros(n, np.int64)
        seen: list[np.ndarray] = []
        t = 0
        while active.any():
            if t % spec.hold == 0:
                if collect:
                    seen.append(obs[active].copy())
                if tuner is not None:
                    drv.hold_outputs(tuner.outputs(obs, theta_per_car, spec.n_outputs))
            obs, _, term, trunc, info = venv.step(drv.base_act(obs))
            steps[active] += 1
            done = (term | trunc) & active
            if done.any():
                fin = np.asarray(info["finished"], bool) & done
                finished |= fin
                time_s[fin] = np.asarray(info["finish_time_s"], float)[fin]
                active &= ~done
            t += 1
    finally:
        venv.close()
    out: dict[str, Any] = {"finished": finished, "time_s": time_s, "steps": steps}
    if collect:
        out["obs"] = np.concatenate(seen)
    return out


def _centered_ranks(x: np.ndarray) -> np.ndarray:
    r = np.empty(len(x))
    r[np.argsort(x, kind="stable")] = np.arange(len(x))
    return r / max(len(x) - 1, 1) - 0.5


def member_fitness(times: np.ndarray, finished: np.ndarray, dnf_score: float = 0.0) -> np.ndarray:
    """Fitness (members,) from stage times and finishes (members, stages), member 0 the
    unperturbed parameters: the mean over stages of ``t_center / t`` (``t_center``: member
    0's time, or the fastest member's where it did not finish; ``dnf_score`` for a run that
    did not finish); a stage nobody finished counts for no one."""
    t = np.where(finished, times, np.inf)
    ref = np.where(finished[0], t[0], t.min(axis=0))
    ok = np.isfinite(ref)
    rel = np.where(finished[:, ok], ref[ok] / t[:, ok], dnf_score)
    return rel.mean(axis=1) if ok.any() else np.zeros(len(times))


class Adam:
    def __init__(self, n: int, lr: float, b1: float = 0.9, b2: float = 0.999):
        self.lr, self.b1, self.b2 = lr, b1, b2
        self.m = np.zeros(n)
        self.v = np.zeros(n)
        self.t = 0

    def step(self, g: np.ndarray) -> np.ndarray:
        """The ascent step for gradient ``g``."""
        self.t += 1
        self.m = self.b1 * self.m + (1 - self.b1) * g
        self.v = self.b2 * self.v + (1 - self.b2) * g * g
        mh = self.m / (1 - self.b1**self.t)
        vh = self.v / (1 - self.b2**self.t)
        return self.lr * mh / (np.sqrt(vh) + 1e-8)


def train_seeds(seed: int, iteration: int, n: int) -> list[int]:
    """The training stages' reset seeds of iteration ``iteration`` (-1: the statistics'
    stages), a stream of the run's seed."""
    rng = np.random.default_rng([seed, iteration + 1])
    return [int(s) for s in rng.integers(0, 2**31, n)]


def run_es(
    spec: ResidualSpec,
    es: ESSettings,
    env_kwargs: dict[str, Any],
    seed: int = 0,
    on_iteration: Any = None,
    evaluate: Any = None,
    eval_every: int = 5,
    inputs: Any = None,
) -> dict[str, Any]:
    """Train the ``"tuning"`` residual ``spec`` on generated stages (``env_kwargs``: the other
    ``RallyEnv`` arguments; ``seed``: the stages' and perturbations'); returns the tuner, the
    final parameters and the per-iteration log. ``on_iteration(row)`` gets each iteration's
    row; ``evaluate(tuner, theta, env_steps, iteration)`` runs first (iteration 0), every
    ``eval_every`` iterations and after the last one (the validation curve)."""
    if spec.kind != "tuning":
        raise ValueError(f"evolution strategies train a 'tuning' residual, not {spec.kind!r}")
    t0 = time.perf_counter()
    norm = drive_batch(
        spec, None, None, train_seeds(seed, -1, es.norm_stages), env_kwargs, collect=True
    )
    env_steps = int(norm["steps"].sum())
    n_out = spec.n_outputs if es.line else spec.n_outputs - 1
    tuner = LinearTuner(norm["obs"].mean(axis=0), norm["obs"].var(axis=0), n_out, inputs)
    theta = np.zeros(tuner.n_params)
    opt = Adam(tuner.n_params, es.lr)
    rng = np.random.default_rng([seed, 1])
    log: list[dict[str, Any]] = []
    if evaluate is not None:
        evaluate(tuner, theta, env_steps, 0)
    for it in range(es.iterations):
        eps = rng.standard_normal((es.pairs, tuner.n_params))
        members = np.concatenate([theta[None], theta + es.sigma * eps, theta - es.sigma * eps])
        seeds = train_seeds(seed, it, es.stages)
        m = len(members)
        per_car = np.repeat(members, es.stages, axis=0)
        res = drive_batch(spec, tuner, per_car, seeds * m, env_kwargs)
        env_steps += int(res["steps"].sum())
        times = res["time_s"].reshape(m, es.stages)
        fin = res["finished"].reshape(m, es.stages)
        fit = member_fitness(times, fin, es.dnf_score)
        ranks = _centered_ranks(fit[1:])
        diff = ranks[: es.pairs] - ranks[es.pairs :]
        grad = diff @ eps / (2 * es.pairs * es.sigma)
        theta = theta + opt.step(grad)
        row = {
            "iteration": it + 1,
            "env_steps": env_steps,
            "wall_time_s": round(time.perf_counter() - t0, 1),
            "center_finished": int(fin[0].sum()),
            "members_finish_rate": float(fin[1:].mean()),
            "members_fitness_mean": float(fit[1:].mean()),
            "members_fitness_best": float(fit[1:].max()),
            "theta_norm": float(np.linalg.norm(theta)),
        }
        log.append(row)
        if on_iteration is not None:
            on_iteration(row)
        if evaluate is not None and ((it + 1) % eval_every == 0 or it + 1 == es.iterations):
            evaluate(tuner, theta, env_steps, it + 1)
    return {"tuner": tuner, "theta": theta, "log": log, "env_steps": env_steps}


class TunerPolicy:
    """The tuner and parameters as a batched policy (``reset(n)``, ``policy(obs)``) on top of
    its base driver, for evaluation during training."""

    def __init__(self, spec: ResidualSpec, tuner: LinearTuner, theta: np.ndarray):
        self.spec, self.tuner, self.theta = spec, tuner, np.asarray(theta)
        self.env_kwargs = {"road_ahead": True}
        self.name = "es"
        self._drv = ResidualDriver(*spec)

    def reset(self, n: int = 1) -> None:
        self._drv.reset(n)

    def __call__(self, obs: np.ndarray) -> np.ndarray:
        o = np.atleast_2d(obs)
        a = self.tuner.outputs(
            o, np.broadcast_to(self.theta, (o.shape[0], self.theta.size)), self.spec.n_outputs
        )
        out = self._drv.act(o, a)
        return out if np.ndim(obs) > 1 else out[0]


def save_model(
    path: str | Path,
    spec: ResidualSpec,
    tuner: LinearTuner,
    theta: np.ndarray,
    meta: dict[str, Any],
) -> Path:
    """Save as a ``"linear"`` model zip (:class:`agents.models.LinearModel`: plain weights
    ``W, b`` over the whole observation) with the observation statistics and the residual in
    its metadata."""
    w, b = tuner.full_weights(theta)
    pad = spec.n_outputs - tuner.n_out  # outputs the policy does not set stay 0
    w = np.concatenate([w, np.zeros((pad, w.shape[1]), w.dtype)])
    b = np.concatenate([b, np.zeros(pad, b.dtype)])
    return LinearModel(w, b).save(
        Path(path),
        {
            "trained_by": "es",
            "actions": "the outputs of a 'tuning' residual (agents.models.ResidualSpec)",
            "obs_norm": {
                "mean": tuner.mean.astype(float).tolist(),
                "var": tuner.var.astype(float).tolist(),
                "clip_obs": CLIP_OBS,
                "epsilon": EPSILON,
            },
            "env": {"road_ahead": True},
            "residual": spec.to_meta(),
            **meta,
        },
    )


def run_es_recipe(recipe: Any, out: str | Path | None = None, progress: bool = True) -> dict:
    """Train an ``es`` recipe (:func:`agents.recipe.load_recipe`); writes in ``out`` what
    docs/agents.md lists (``es_log.csv``, one row per iteration, beside a PPO recipe's files)
    and returns the summary."""
    out = Path(out or recipe.out)
    out.mkdir(parents=True, exist_ok=True)
    spec = recipe.residual.spec()
    es: ESSettings = recipe.es
    config = {"recipe": recipe.to_dict(), "versions": versions()}
    write_json(out / "config.json", config)
    env_kwargs = {k: v for k, v in recipe.env.items() if k != "stage"}
    stages = validation_stages(recipe.eval.stages)
    log = ValidationLog(out, stages, "env steps (millions)")
    (out / "es_log.csv").write_text("")
    t0 = time.perf_counter()
    best: dict[str, Any] = {}
    last: dict[str, Any] = {}

    def evaluate(tuner: LinearTuner, theta: np.ndarray, env_steps: int, it: int) -> None:
        runs, _ = run_stages(TunerPolicy(spec, tuner, theta), stages, chunk=len(stages))
        m, better = log.add(runs, it, env_steps, "es" if it else "start")
        if progress:
            print(
                f"es: {env_steps:,} env steps: validation finish rate {m['finish_rate']:.2f}, "
                f"median score {m['median_score']:.4f}",
                flush=True,
            )
        last.update(m, env_steps=int(env_steps))
        if better:
            best.update(env_steps=env_steps)
            meta = {"env_steps": int(env_steps), "es": dataclasses.asdict(es)}
            save_model(out / "best_model.zip", spec, tuner, theta, meta)

    def on_iteration(row: dict[str, Any]) -> None:
        path = out / "es_log.csv"
        with path.open("a") as f:
            if path.stat().st_size == 0:
                f.write(",".join(row) + "\n")
            f.write(",".join(str(v) for v in row.values()) + "\n")

    res = run_es(
        spec,
        es,
        env_kwargs,
        seed=recipe.seed,
        on_iteration=on_iteration,
        evaluate=evaluate if stages else None,
        eval_every=recipe.eval_every,
        inputs=input_columns(es.inputs),
    )
    train_s = time.perf_counter() - t0
    meta = {"env_steps": int(res["env_steps"]), "es": dataclasses.asdict(es), "config": config}
    model_path = save_model(out / "model.zip", spec, res["tuner"], res["theta"], meta)
    log.plot()
    summary = {
        "model": str(model_path),
        "best_model": str(out / "best_model.zip"),
        "timesteps": es.iterations,
        "env_steps": int(res["env_steps"]),
        "final_eval": last,
        "best_eval": {
            "finish_rate": log.best[0],
            "median_score": log.best[1],
            "env_steps": best.get("env_steps"),
        },
        "timing_s": {"train_s": train_s},
        "env_steps_per_s": res["env_steps"] / max(train_s, 1e-9),
        "eval_log": str(log.path),
        "learning_curve": str(out / "learning_curve.png"),
    }
    write_json(out / "summary.json", summary)
    return summary
