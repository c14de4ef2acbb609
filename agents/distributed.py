"""Evaluation, the benchmark and replay verification spread over a Ray cluster
(``--ray-address``; docs/ray.md): one task per (stage, seed) episode of ``rally eval``, per
chunk of stages of ``rally benchmark`` (:func:`agents.benchmark.benchmark_chunks`) and per
replay of ``rally verify`` / ``rally leaderboard add``. Only plain data travels (``--agent``
strings, model files' bytes, stage names, JSON); ``ray`` is imported only when a cluster is
asked for.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import re
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

import tracks
from agents.evaluate import (
    EvalResult,
    RunResult,
    load_par_times,
    print_stage_line,
    resolve_stages,
    run_episode,
    summarize,
)
from rally_env.cluster import RayUnavailableError as RayUnavailableError  # re-exported
from rally_env.cluster import connect
from rally_env.config import RallyConfig
from rally_env.env import RallyEnv
from rally_env.replay import RecordReplay
from rally_env.replay.budgets import DEFAULT_BUDGETS
from rally_env.replay.errors import ReplayError
from rally_env.replay.format import read_regular_file, replay_from_bytes
from rally_env.replay.verify import VerifyReport, unusable

#: How often Ray re-runs a task whose worker died (system failures only: an exception the
#: task raises is not retried, as a deterministic task would raise it again).
TASK_RETRIES = 3
#: Default wall-time limit of one verification task (s); see :func:`verify_many`.
VERIFY_TASK_TIMEOUT_S = 600.0
#: Default memory budget of one verification task (MiB); see :func:`verify_many`.
VERIFY_TASK_MEMORY_MB = 2048.0


def add_ray_address(p: Any, what: str) -> None:
    """The ``--ray-address`` option of a ``rally`` subcommand's parser."""
    p.add_argument(
        "--ray-address",
        default=None,
        metavar="ADDR",
        help=f"{what}: 'local' (a Ray started for this run), 'auto' (the cluster this "
        "machine joined) or HOST:PORT; needs the ray extra on every node (docs/ray.md)",
    )


# ------------------------------------------------------------------------------ evaluation
def _check_agent(agent: Any) -> None:
    if not isinstance(agent, str):
        raise ValueError(
            "a distributed evaluation takes the agent as its --agent string (heuristic, a "
            "shipped name, a .zip path or module:function), not a Python object"
        )
    if agent == "random":
        raise ValueError(
            "--agent random draws every episode's actions from one generator, so its runs "
            "depend on the order they are driven in; evaluate it without --ray-address"
        )


def _model_bytes(agent: str) -> dict[str, bytes] | None:
    """The files of a model the workers load, ``{name: bytes}``: a ``.zip`` model, or an
    exported ``policy.json`` with its ``policy.npz`` (``None`` for other agents)."""
    from agents.models import _vecnormalize_for, read_meta

    p = Path(agent)
    if agent.endswith(".json") or (p / "policy.json").is_file():
        j = p if agent.endswith(".json") else p / "policy.json"
        if not j.is_file():
            raise FileNotFoundError(f"exported policy not found: {agent}")
        npz = j.with_name("policy.npz")
        return {"policy.json": j.read_bytes(), "policy.npz": npz.read_bytes()}
    if not (agent.endswith(".zip") or p.suffix == ".zip"):
        return None
    if not p.is_file():
        raise FileNotFoundError(f"model file not found: {agent}")
    meta = read_meta(p)
    if not meta.get("obs_norm") and _vecnormalize_for(p) is not None:
        raise ValueError(
            f"{agent}: its observation normalisation is only in a pickled vecnormalize.pkl, "
            "which is not sent to workers; save the model with rally train (the statistics "
            "go into the zip's metadata) or evaluate it without --ray-address"
        )
    return {p.name: p.read_bytes()}


_POLICIES: dict[tuple[str, str, str], Any] = {}


def _worker_policy(agent: str, action_space: str, model: dict[str, bytes] | None, seed: int) -> Any:
    """The policy of a task, built once per worker process (a loaded model is reused)."""
    from agents.policies import make_policy

    if model is None:
        return make_policy(agent, seed=seed, action_space=action_space)
    h = hashlib.sha256()
    for name in sorted(model):
        h.update(name.encode() + b"\0" + hashlib.sha256(model[name]).digest())
    key = (agent, action_space, h.hexdigest())
    if key not in _POLICIES:
        d = Path(tempfile.mkdtemp(prefix="rally-model-"))
        for name, data in model.items():
            (d / Path(name).name).write_bytes(data)
        main = "policy.json" if "policy.json" in model else Path(next(iter(model))).name
        _POLICIES[key] = make_policy(str(d / main), seed=seed, action_space=action_space)
    return _POLICIES[key]


def _run_to_doc(run: Any) -> dict[str, Any]:
    doc = run.figures()
    doc["stage_time_s"] = None if math.isnan(run.stage_time_s) else run.stage_time_s
    doc["actions"] = None if run.actions is None else run.actions.tolist()
    doc["telemetry"] = {k: [v.dtype.str, v.tolist()] for k, v in run.telemetry.items()}
    return doc


#: What :func:`_run_from_doc` reads apart (``compute``, the cost of a drive, stays behind)
_NOT_FIGURES = ("telemetry", "actions", "compute")


def _run_from_doc(doc: dict[str, Any]) -> Any:
    run = RunResult(**{k: v for k, v in doc.items() if k not in _NOT_FIGURES})
    if run.stage_time_s is None:
        run.stage_time_s = math.nan
    run.telemetry = {k: np.array(v, dtype=np.dtype(dt)) for k, (dt, v) in doc["telemetry"].items()}
    if doc["actions"] is not None:
        run.actions = np.array(doc["actions"], dtype=np.float32)
    return run


def episode_job(job_json: str, model: dict[str, bytes] | None = None) -> str:
    """Drive one (stage, seed) episode as :func:`agents.evaluate.evaluate` does (a Ray task).

    Args:
        job_json: ``{"agent", "action_space", "policy_seed", "name", "stage", "seed",
            "record", "env_kwargs", "replay"}`` as JSON.
        model: ``{file name: bytes}`` of a ``.zip`` model or an exported policy.

    Returns:
        JSON text: ``{"run": RunResult fields with actions and telemetry as lists,
        "replay": the episode's replay file text (JSON) or null, "replay_name": its file name}``.
    """
    job = json.loads(job_json)
    pol = _worker_policy(job["agent"], job["action_space"], model, int(job["policy_seed"]))
    env = RallyEnv(stage=job["stage"], **job["env_kwargs"])
    rec = None
    if job["replay"]:
        env = rec = RecordReplay(env, meta={"agent": job["name"]})
    try:
        run = run_episode(pol, job["stage"], int(job["seed"]), env=env, record=job["record"])
    finally:
        env.close()
    run.stage = job["stage"]
    out: dict[str, Any] = {"run": _run_to_doc(run), "replay": None, "replay_name": None}
    if rec is not None and rec.replays:
        rp = rec.replays[-1]
        out["replay"] = rp.to_bytes(compress=False).decode("utf-8")
        out["replay_name"] = rp.default_name()
    return json.dumps(out, allow_nan=False)


def reference_job(job_json: str) -> str:
    """The reference time of one stage for its env's vehicle (``{"stage", "env_kwargs"}`` as
    JSON), as :func:`agents.evaluate.summarize` computes it, as JSON text
    ``{"reference_time_s": float}``: a Ray task, so the driver does not compute them all."""
    from agents.reference import reference_time

    job = json.loads(job_json)
    vehicle = _check_stage(job["stage"], job["env_kwargs"])
    return json.dumps({"reference_time_s": reference_time(job["stage"], vehicle=vehicle).time_s})


def _check_stage(stage: str, env_kwargs: dict[str, Any]) -> Any:
    """The vehicle of ``stage``'s env (for its summary), checking the name the workers get:
    a library stage or ``gen-<seed>`` (a stage file would have to be on every node).

    Raises:
        ValueError: anything else, or settings that do not build (naming it).
    """
    if stage not in tracks.list_stages() and not re.fullmatch(r"gen-\d+", stage):
        RallyEnv(stage=stage, **env_kwargs).close()  # an unknown name: the env's own message
        raise ValueError(
            f"stage {stage!r}: a distributed evaluation takes library stages and gen-<seed> "
            "(a stage file is not sent to the workers)"
        )
    return RallyConfig.build(stage=stage, **env_kwargs).vehicle


def _remote(ray: Any, fn: Any, **options: Any) -> Any:
    return ray.remote(max_retries=TASK_RETRIES, retry_exceptions=False, **options)(fn)


def evaluate_distributed(
    agent: str,
    stages: str | Sequence[str] = "opener",
    seeds: Sequence[int] = (0,),
    *,
    address: str = "local",
    record: bool = False,
    env_kwargs: dict[str, Any] | None = None,
    agent_name: str | None = None,
    replay_dir: str | None = None,
    action_space: str = "auto",
    progress: bool = False,
) -> Any:
    """:func:`agents.evaluate.evaluate` with one Ray task per (stage, seed) episode, and one
    per stage for its reference time (:func:`reference_job`).

    The result equals the local one (every figure, action and telemetry value, and the replays'
    hashes; only ``wall_time_s`` differs) for any agent whose episodes do not depend on each
    other: every agent but ``random``, which is refused.

    Args:
        agent: an ``--agent`` string (a ``.zip`` model or an exported ``policy.json`` is sent
            to the workers as its files' bytes).
        stages: names, ``library`` or ``random:N`` (:func:`agents.evaluate.resolve_stages`).
        seeds, record, env_kwargs, agent_name, replay_dir: as for ``evaluate``.
        address: the cluster (:func:`connect`).
        action_space: for ``.zip`` models (:class:`agents.policies.SB3Policy`).
        progress: a line per finished stage on stderr.

    Raises:
        ValueError, FileNotFoundError: a bad agent, stage or model (before any task starts).
        RayUnavailableError: Ray is not installed.
    """
    from agents.policies import make_policy, policy_env_kwargs, policy_name

    _check_agent(agent)
    seeds = [int(s) for s in seeds]
    if not seeds:
        raise ValueError("seeds must not be empty")
    stage_list = resolve_stages(stages)
    bad = [s for s in stage_list if not isinstance(s, str)]
    if bad:
        raise ValueError(f"a distributed evaluation takes stages by name, got {bad[0]!r}")
    model = _model_bytes(agent)
    # the agent is built here once: a bad spec fails before any task, and names the runs
    pol = make_policy(agent, seed=seeds[0], action_space=action_space)
    name = agent_name or policy_name(pol, agent)
    # as evaluate does: the env gets the observation the agent asks for (e.g. road_ahead)
    env_kwargs = policy_env_kwargs(pol, env_kwargs)
    json.dumps(env_kwargs)  # settings travel as JSON: refuse anything else now
    vehicles = {st: _check_stage(st, env_kwargs) for st in stage_list}
    t0 = time.perf_counter()
    ray = connect(address)
    task = _remote(ray, episode_job)
    model_ref = ray.put(model) if model is not None else None
    job = {
        "agent": agent,
        "action_space": action_space,
        "policy_seed": seeds[0],
        "name": name,
        "record": bool(record),
        "env_kwargs": env_kwargs,
        "replay": replay_dir is not None,
    }
    refs = [
        task.remote(json.dumps({**job, "stage": st, "seed": s}), model_ref)
        for st in stage_list
        for s in seeds
    ]
    ref_task = _remote(ray, reference_job)
    ref_refs = [
        ref_task.remote(json.dumps({"stage": st, "env_kwargs": env_kwargs})) for st in stage_list
    ]
    docs = [json.loads(t) for t in ray.get(refs)]
    ref_times = [float(json.loads(t)["reference_time_s"]) for t in ray.get(ref_refs)]
    par = load_par_times()
    runs, summaries = [], []
    for i, st in enumerate(stage_list):
        sr = [_run_from_doc(d["run"]) for d in docs[i * len(seeds) : (i + 1) * len(seeds)]]
        runs.extend(sr)
        summaries.append(
            summarize(st, name, sr, par, vehicle=vehicles[st], reference_time_s=ref_times[i])
        )
        if progress:
            print_stage_line(summaries[-1])
    if replay_dir is not None:
        d = Path(replay_dir)
        d.mkdir(parents=True, exist_ok=True)
        for doc in docs:
            if doc["replay"] is not None:
                rp = replay_from_bytes(doc["replay"].encode("utf-8"), doc["replay_name"])
                rp.save(d / doc["replay_name"])
    return EvalResult(name, summaries, runs, seeds, time.perf_counter() - t0)


# ---------------------------------------------------------------------------- verification
def verify_job(data: bytes, where: str, limits_json: str) -> str:
    """Verify one replay's bytes (what a Ray task runs): the report's ``to_dict()`` as JSON.
    Never raises for bad input (:func:`verify_bytes`). The verification runs in a verifier
    process of this worker's under ``limits_json`` (:func:`rally_env.replay.workers.ray_task`:
    an address-space limit and a time budget); past either the replay is ``unusable`` /
    ``over_budget``."""
    from rally_env.replay.workers import ray_task

    out = ray_task("report", data, limits_json, where)
    if "report" in out:
        return json.dumps(out["report"])
    reason = "over_budget" if out["error"] == "over_budget" else "internal"
    return json.dumps(_unusable(f"{where}: {out.get('message', out['error'])}", reason).to_dict())


def report_from_dict(doc: dict[str, Any]) -> Any:
    """A :class:`~rally_env.replay.verify.VerifyReport` back from its ``to_dict()``."""
    return VerifyReport(**doc)


def _unusable(message: str, reason: str = "over_budget", elapsed_s: float = 0.0) -> Any:
    """The ``unusable`` report of a replay the cluster could not verify."""
    return VerifyReport(
        accepted=False, status="unusable", reason=reason, message=message, elapsed_s=elapsed_s
    )


@dataclass(frozen=True)
class ReplayInput:
    """One replay to verify: its name in messages and its bytes (read once, by the driver)."""

    where: str
    data: bytes


def verify_many(
    replays: Sequence[ReplayInput],
    *,
    address: str = "local",
    budgets: Any = None,
    task_timeout_s: float = VERIFY_TASK_TIMEOUT_S,
    memory_mb: float = VERIFY_TASK_MEMORY_MB,
) -> list[Any]:
    """Verify replays over the cluster: one task per replay, the same reports as
    :func:`rally_env.replay.verify.verify_bytes` run locally (``elapsed_s`` aside).

    Every replay is held to ``budgets`` (default the verifier's
    :data:`~rally_env.replay.budgets.DEFAULT_BUDGETS`), each task to ``task_timeout_s`` of wall
    time and ``memory_mb`` MiB (0 = no bound) in a verifier process of its own; a replay past a
    bound, or whose Ray worker died :data:`TASK_RETRIES` times, is reported ``unusable`` /
    ``over_budget`` (docs/ray.md, "Verification bounds").

    Returns:
        One :class:`~rally_env.replay.verify.VerifyReport` per replay, in order.
    """
    from rally_env.replay.workers import TaskLimits, limits_json

    budgets = DEFAULT_BUDGETS if budgets is None else budgets
    if not (isinstance(task_timeout_s, (int, float)) and task_timeout_s > 0):
        raise ValueError(f"task timeout must be > 0 s, got {task_timeout_s!r}")
    if not (isinstance(memory_mb, (int, float)) and math.isfinite(memory_mb) and memory_mb >= 0):
        raise ValueError(f"task memory must be >= 0 MiB, got {memory_mb!r}")
    ray = connect(address)
    opts = {"memory": int(memory_mb * 1024 * 1024)} if memory_mb else {}
    task = _remote(ray, verify_job, **opts)
    lj = limits_json(TaskLimits(task_timeout_s, int(memory_mb), budgets))
    refs = [task.remote(r.data, r.where, lj) for r in replays]
    index = {ref: i for i, ref in enumerate(refs)}
    out: list[Any] = [None] * len(refs)
    pending = list(refs)
    # a task's clock starts when the cluster has a slot for it: bound the whole wait by the
    # number of waves the cluster needs, and each wait by the per-task limit
    cpus = max(1, int(ray.cluster_resources().get("CPU", 1)))
    deadline = time.monotonic() + task_timeout_s * math.ceil(len(refs) / cpus)
    while pending:
        left = deadline - time.monotonic()
        done, pending = ray.wait(pending, num_returns=1, timeout=max(0.0, min(left, 5.0)))
        for ref in done:
            i = index[ref]
            try:
                out[i] = report_from_dict(json.loads(ray.get(ref)))
            except ray.exceptions.RayError as e:  # its Ray workers died, retries spent
                out[i] = _unusable(
                    f"{replays[i].where}: the verification's workers died on the cluster "
                    f"({type(e).__name__})"
                )
        if pending and time.monotonic() >= deadline:
            for ref in pending:
                ray.cancel(ref, force=True)
                i = index[ref]
                out[i] = _unusable(
                    f"{replays[i].where}: verification took longer than the task limit of "
                    f"{task_timeout_s:g} s",
                    elapsed_s=task_timeout_s,
                )
            pending = []
    return out


def read_replay_inputs(files: Sequence[str | os.PathLike[str]]) -> list[Any]:
    """Read replay files for :func:`verify_many` under the verifier's file budget: a
    :class:`ReplayInput`, or the ``unusable`` report of a file that cannot be read."""
    out: list[Any] = []
    for f in files:
        try:
            out.append(
                ReplayInput(str(f), read_regular_file(f, DEFAULT_BUDGETS.max_file_bytes, "replay"))
            )
        except ReplayError as e:
            out.append(unusable(e))
    return out
