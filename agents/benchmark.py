"""The generalization benchmark, ``rally benchmark``: the held-out test sets :data:`SETS`,
the :func:`score`, the metrics of :func:`set_metrics`, the baseline and oracle files; the
protocol and how the stages are driven (in chunks, in lockstep): docs/benchmark.md."""

from __future__ import annotations

import json
import math
import os
import sys
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

import tracks
from agents.distributed import (
    _check_agent,
    _model_bytes,
    _remote,
    _run_from_doc,
    _run_to_doc,
    _worker_policy,
    connect,
)
from agents.evaluate import HELD_OUT_SEED_BASE, RunResult, _clean, ended_run
from agents.progress import Progress
from rally_env.env import RallyEnv

#: Version of the JSON ``rally benchmark --json`` writes.
SCHEMA_VERSION = 1
#: The shipped heuristic baseline (reference and heuristic times per test stage).
BASELINE_PATH = Path(__file__).parent / "benchmark_baseline.json"
BASELINE_SCHEMA = "rally-benchmark-baseline"
#: The oracle planner's times on test stages (``rally benchmark --agent mpc --write-oracle``):
#: the measured ceiling every agent's gap is reported against.
ORACLE_PATH = Path(__file__).parent / "oracle_times.json"
ORACLE_SCHEMA = "rally-oracle-times"
#: Training draws generator seeds below this; every test seed is at or above it.
TRAIN_SEED_LIMIT = 2**31
#: Cars (stages) driven together by default.
DEFAULT_CHUNK = 25


@dataclass(frozen=True)
class BenchmarkSet:
    """One test set: generated stages (``tracks.generate(seed, length_m, difficulty)`` of each
    of ``seeds``) or, with ``library``, the built-in stage library."""

    name: str
    description: str
    seeds: tuple[int, ...] = ()
    length_m: float = 2000.0
    difficulty: float = 0.5
    library: bool = False

    def stage_specs(self) -> list[dict[str, Any]]:
        """Per stage: ``{"stage": name, "seed", "length_m", "difficulty"}`` (library stages:
        name only, the rest ``None``)."""
        if self.library:
            return [
                {"stage": n, "seed": None, "length_m": None, "difficulty": None}
                for n in tracks.list_stages()
            ]
        return [
            {
                "stage": _gen_name(s, self.length_m, self.difficulty),
                "seed": int(s),
                "length_m": self.length_m,
                "difficulty": self.difficulty,
            }
            for s in self.seeds
        ]

    def build(self, spec: dict[str, Any]) -> Any:
        """The :class:`tracks.Stage` of one of :meth:`stage_specs`."""
        return build_stage(spec)

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["seeds"] = list(self.seeds)
        d["n_stages"] = len(self.stage_specs())
        return d


def build_stage(spec: dict[str, Any]) -> Any:
    """The :class:`tracks.Stage` of a stage spec (:meth:`BenchmarkSet.stage_specs`): a library
    stage by name (``seed`` None) or ``tracks.generate(seed, length_m, difficulty)``."""
    if spec["seed"] is None:
        return tracks.load_stage(spec["stage"])
    return tracks.generate(spec["seed"], length_m=spec["length_m"], difficulty=spec["difficulty"])


def _gen_name(seed: int, length_m: float, difficulty: float) -> str:
    # the name tracks.generate gives (arguments appended when not the defaults)
    name = f"gen-{int(seed)}"
    if (float(length_m), float(difficulty)) != (2000.0, 0.5):
        name += f"-{float(length_m):.0f}m-d{float(difficulty):.2f}"
    return name


SETS: dict[str, BenchmarkSet] = {
    "library": BenchmarkSet("library", "the 8 library stages", library=True),
    "default": BenchmarkSet(
        "default",
        "100 generated stages at the default settings (2 km, difficulty 0.5)",
        tuple(HELD_OUT_SEED_BASE + i for i in range(100)),
    ),
    "hard": BenchmarkSet(
        "hard",
        "50 generated stages at difficulty 0.8 (2 km)",
        tuple(HELD_OUT_SEED_BASE + 10_000 + i for i in range(50)),
        difficulty=0.8,
    ),
    "long": BenchmarkSet(
        "long",
        "20 generated stages of 5 km (difficulty 0.5)",
        tuple(HELD_OUT_SEED_BASE + 20_000 + i for i in range(20)),
        length_m=5000.0,
    ),
}


def score(reference_time_s: float, stage_time_s: float, finished: bool) -> float:
    """The benchmark's score of one run: ``reference_time / stage_time``, 0 for a DNF
    (``ValueError``: a time that is not positive and finite, but a DNF's stage time)."""
    ref = float(reference_time_s)
    if not (math.isfinite(ref) and ref > 0.0):
        raise ValueError(
            f"reference_time_s must be a positive finite time, got {reference_time_s!r}"
        )
    if not finished:
        return 0.0
    t = float(stage_time_s)
    if not (math.isfinite(t) and t > 0.0):
        raise ValueError(
            f"a finished run needs a positive finite stage_time_s, got {stage_time_s!r}"
        )
    return ref / t


def resolve_sets(spec: str | Iterable[str | BenchmarkSet] | None) -> list[BenchmarkSet]:
    """``"library,default"``, a list of names or :class:`BenchmarkSet`, or None (all sets)."""
    if spec is None:
        return list(SETS.values())
    items = [p.strip() for p in spec.split(",") if p.strip()] if isinstance(spec, str) else spec
    out = []
    for it in items:
        if not isinstance(it, BenchmarkSet) and it not in SETS:
            raise ValueError(f"unknown benchmark set {it!r}; known: {', '.join(SETS)}")
        out.append(it if isinstance(it, BenchmarkSet) else SETS[it])
    if not out:
        raise ValueError(f"no benchmark sets in {spec!r}")
    return out


def _check_positive(name: str, v: Any) -> None:
    if isinstance(v, bool) or not isinstance(v, int) or v < 1:
        raise ValueError(f"{name} must be a positive integer, got {v!r}")


# ----------------------------------------------------------------------------------- running
def run_stages(
    policy: Any,
    stages: Sequence[Any],
    *,
    chunk: int = DEFAULT_CHUNK,
    env_kwargs: dict[str, Any] | None = None,
    on_done: Callable[[RunResult], None] | None = None,
) -> tuple[list[RunResult], float]:
    """One episode (``reset(seed=0)``) of the batched ``policy`` (``policy(obs (N, D)) ->
    actions (N, 4)``, reset at every chunk) on each stage, ``chunk`` stages stepped together,
    with ``env_kwargs`` (and :func:`agents.policies.policy_env_kwargs`'s); ``on_done`` is called
    with each run as it ends. Returns (the runs in the order of ``stages``, seconds spent
    building the envs)."""
    from agents.policies import bind_policy, finish_policy, policy_env_kwargs, reset_policy

    env_kwargs = policy_env_kwargs(policy, env_kwargs)
    planned = hasattr(policy, "finish")  # its runs carry their compute: reported at the end
    _check_positive("chunk", chunk)
    runs: list[RunResult] = []
    build_s = 0.0
    for c0 in range(0, len(stages), chunk):
        part = stages[c0 : c0 + chunk]
        t0 = time.perf_counter()
        envs = [RallyEnv(stage=st, **(env_kwargs or {})) for st in part]
        obs = np.stack([e.reset(seed=0)[0] for e in envs])
        build_s += time.perf_counter() - t0
        n = len(envs)
        dt = 1.0 / envs[0].config.control_hz
        reset_policy(policy, n)
        bind_policy(policy, envs)
        active = np.ones(n, bool)
        steps = np.zeros(n, np.int64)
        off = np.zeros(n, np.int64)
        speed = np.zeros(n)
        done: list[RunResult | None] = [None] * n
        while active.any():
            act = np.asarray(policy(obs))
            if act.ndim == 1:
                act = act[None, :]
            if act.shape[0] != n:
                raise ValueError(
                    f"the policy returned {act.shape[0]} actions for a batch of {n} observations"
                )
            for k in np.flatnonzero(active):
                o, _, term, trunc, info = envs[k].step(act[k])
                obs[k] = o
                steps[k] += 1
                off[k] += bool(info["off_road"])
                speed[k] += info["speed_mps"]
                if term or trunc:
                    active[k] = False
                    done[k] = ended_run(
                        envs[k], info, 0, steps[k], float(off[k]) * dt, float(speed[k] / steps[k])
                    )
                    if on_done is not None and not planned:
                        on_done(done[k])
        compute = finish_policy(policy, n)
        for k, run in enumerate(done):
            if run is not None:
                run.compute = compute[k]
                if on_done is not None and planned:
                    on_done(run)
        for e in envs:
            e.close()
        runs.extend(r for r in done if r is not None)
    return runs, build_s


# ------------------------------------------------------------------- on a Ray cluster
def benchmark_chunk_job(job_json: str, model: dict[str, bytes] | None = None) -> str:
    """A Ray task of ``rally benchmark --ray-address``: the chunk ``job_json`` (``{"agent",
    "policy_seed", "specs": [stage spec of BenchmarkSet.stage_specs, ...]}``) driven as
    :func:`run_stages` drives it locally, ``model`` the ``{file name: bytes}`` of a ``.zip`` or
    an exported policy. Returns the runs (:class:`RunResult` fields) as JSON text."""
    job = json.loads(job_json)
    pol = _worker_policy(job["agent"], "auto", model, int(job["policy_seed"]))
    stages = [build_stage(sp) for sp in job["specs"]]
    runs, _ = run_stages(pol, stages, chunk=max(1, len(stages)))
    return json.dumps([_run_to_doc(r) for r in runs], allow_nan=False)


def benchmark_chunks(
    agent: str,
    spec_lists: Sequence[Sequence[dict[str, Any]]],
    *,
    chunk: int,
    seed: int = 0,
    address: str = "local",
) -> Callable[[int, Callable[[RunResult], None]], list[RunResult]]:
    """Submit every list of stage specs, cut into chunks as :func:`run_stages` cuts it, one
    task per chunk; returns ``runs(k, on_done)``, which waits for the ``k``-th list's runs.

    Raises:
        ValueError, FileNotFoundError: a bad agent or model (before any task starts).
        RayUnavailableError: Ray is not installed.
    """
    _check_agent(agent)
    _check_positive("chunk", chunk)
    model = _model_bytes(agent)
    ray = connect(address)
    task = _remote(ray, benchmark_chunk_job)
    model_ref = ray.put(model) if model is not None else None
    refs = [
        [
            task.remote(
                json.dumps(
                    {"agent": agent, "policy_seed": int(seed), "specs": specs[c : c + chunk]}
                ),
                model_ref,
            )
            for c in range(0, len(specs), chunk)
        ]
        for specs in map(list, spec_lists)
    ]

    def runs(k: int, on_done: Callable[[RunResult], None]) -> list[RunResult]:
        out = []
        for ref in refs[k]:  # each chunk's runs as it comes back
            for doc in json.loads(ray.get(ref)):
                out.append(_run_from_doc(doc))
                on_done(out[-1])
        return out

    return runs


# ------------------------------------------------------------------------------- baseline
def heuristic_fingerprint() -> dict[str, Any]:
    """The heuristic settings a baseline was made with (compared when it is loaded)."""
    from agents.heuristic import fingerprint

    return fingerprint()


def load_baseline(path: str | Path | None = None) -> dict[str, dict[str, Any]]:
    """``{stage digest: {"stage", "reference_time_s", "heuristic_time_s"}}`` from a baseline
    file (empty when it is missing; heuristic times dropped when made with other heuristic
    settings)."""
    p = Path(path) if path is not None else BASELINE_PATH
    doc, stages = _read_stages(p, BASELINE_SCHEMA, "rally benchmark baseline")
    if doc and doc.get("heuristic_params") != heuristic_fingerprint():
        print(
            f"rally benchmark: {p} was made with other heuristic settings; the heuristic's "
            "times are computed again (rerun `rally benchmark --agent heuristic "
            "--write-baseline` to refresh it)",
            file=sys.stderr,
        )
        for v in stages.values():
            v.pop("heuristic_time_s", None)
    return stages


def load_oracle(path: str | Path | None = None) -> dict[str, dict[str, Any]]:
    """``{stage digest: {"stage", "set", "oracle_time_s", "settings", "compute", ...}}`` from
    an oracle file (empty when it is missing)."""
    p = Path(path) if path is not None else ORACLE_PATH
    return _read_stages(p, ORACLE_SCHEMA, "rally oracle file")[1]


def _read_stages(p: Path, schema: str, what: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """The JSON of the stage file ``p`` (``{}`` when it is missing) and a copy of its stages;
    refused unless it has this schema."""
    if not p.exists():
        return {}, {}
    doc = json.loads(p.read_text())
    if doc.get("schema") != schema or doc.get("version") != SCHEMA_VERSION:
        raise ValueError(f"{p}: not a {what} (schema {doc.get('schema')!r})")
    return doc, {k: dict(v) for k, v in doc.get("stages", {}).items()}


def write_oracle(result: BenchmarkResult, command: str, path: str | Path | None = None) -> Path:
    """Add the runs of a planner benchmark to the oracle file (a stage already in it is
    replaced); only finished runs are ceilings, so a run that did not finish is refused."""
    p = Path(path) if path is not None else ORACLE_PATH
    stages = load_oracle(p)
    dnf = [r.stage for r in result.rows if not r.finished]
    if dnf:
        raise ValueError(f"the planner did not finish {', '.join(dnf)}: not a ceiling")
    for r in result.rows:
        stages[r.digest] = {
            "stage": r.stage,
            "set": r.set,
            "oracle_time_s": r.stage_time_s,
            "off_road_s": r.off_road_s,
            "agent": result.agent,
            "command": command,
            "compute": dict(r.compute),
        }
    doc = {
        "schema": ORACLE_SCHEMA,
        "version": SCHEMA_VERSION,
        "about": "the oracle planner's stage times (agents.planner: sampling MPC on the "
        "simulator itself), keyed by stage digest, with the settings, the command and the "
        "compute of each run; written by `rally benchmark --agent mpc... --write-oracle`",
        "stages": dict(sorted(stages.items(), key=lambda kv: (kv[1]["set"], kv[1]["stage"]))),
    }
    return _write_text(p, _dumps(doc))


def write_baseline(result: BenchmarkResult, path: str | Path | None = None) -> Path:
    """Write a heuristic benchmark's reference and stage times as the baseline file."""
    if result.agent != "heuristic" or result.partial:
        raise ValueError("the baseline is the full benchmark of the heuristic driver")
    stages = {
        r.digest: {
            "stage": r.stage,
            "reference_time_s": r.reference_time_s,
            "heuristic_time_s": r.stage_time_s if r.finished else None,
        }
        for r in result.rows
    }
    doc = {
        "schema": BASELINE_SCHEMA,
        "version": SCHEMA_VERSION,
        "about": "the benchmark of the heuristic driver on every test stage, keyed by stage "
        "digest: reference times (agents.reference, racing line) and the heuristic's stage "
        "times (null: did not finish); written by `rally benchmark --agent heuristic "
        "--write-baseline`",
        "heuristic_params": heuristic_fingerprint(),
        "stages": dict(sorted(stages.items(), key=lambda kv: kv[1]["stage"])),
    }
    return _write_text(path if path is not None else BASELINE_PATH, _dumps(doc))


# -------------------------------------------------------------------------------- results
@dataclass
class StageRow:
    """One test stage's run (times in s, gaps in %; NaN = undefined, null in JSON)."""

    set: str
    stage: str
    digest: str
    seed: int | None
    length_m: float | None
    difficulty: float | None
    finished: bool
    end_reason: str
    stage_time_s: float
    reference_time_s: float
    heuristic_time_s: float
    score: float
    gap_reference_pct: float
    gap_heuristic_pct: float
    off_road_s: float
    progress_m: float
    steps: int
    #: the oracle planner's time on the stage (NaN: not measured, :data:`ORACLE_PATH`) and
    #: the run's gap to it in %
    oracle_time_s: float = math.nan
    gap_oracle_pct: float = math.nan
    #: what the agent's drive cost, when it reports it (the planner: plans, car_steps,
    #: cpu_s, wall_s)
    compute: dict[str, Any] = field(default_factory=dict)


@dataclass
class BenchmarkResult:
    """What :func:`run_benchmark` returns (``.sets`` metrics, ``.rows`` per stage)."""

    agent: str
    sets: dict[str, dict[str, Any]]
    rows: list[StageRow]
    definitions: list[BenchmarkSet]
    partial: bool = False
    timing: dict[str, float] = field(default_factory=dict)
    #: the agent's own observation settings (e.g. ``road_ahead``): they add to what the
    #: policy sees and change no dynamics, reward or stage
    observation: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """The JSON document (schema version :data:`SCHEMA_VERSION`; NaN is ``None``)."""
        return {
            "schema": "rally-benchmark",
            "version": SCHEMA_VERSION,
            "agent": self.agent,
            "partial": self.partial,
            "protocol": {
                "env": "RallyDirect-v0 (default settings; the agent's own observation and "
                "decision rate: observation), one episode per stage, reset(seed=0)",
                "observation": dict(self.observation),
                "score": "reference_time_s / stage_time_s, 0 if not finished",
                "train_seed_limit": TRAIN_SEED_LIMIT,
                "sets": [s.to_dict() for s in self.definitions],
            },
            "sets": {k: _clean(v) for k, v in self.sets.items()},
            "stages": [_clean(asdict(r)) for r in self.rows],
            "timing": _clean(dict(self.timing)),
        }

    def write_json(self, path: str | Path) -> Path:
        return _write_text(path, _dumps(self.to_dict()))

    def markdown(self) -> str:
        """The per-set table as Markdown."""
        head = (
            "| agent | set | stages | finished | median score | mean score | median gap to "
            "reference | median gap to heuristic | median gap to oracle (stages) | "
            "mean off-road s |\n"
            "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n"
        )
        lines = []
        for name, m in self.sets.items():
            lines.append(
                f"| `{self.agent}` | {name} | {m['stages']} | {m['finished']} "
                f"({100.0 * m['finish_rate']:.0f} %) | {_f(m['score_median'], 3)} | "
                f"{_f(m['score_mean'], 3)} | {_pct(m['gap_reference_median_pct'])} | "
                f"{_pct(m['gap_heuristic_median_pct'])} | "
                f"{_pct(m['gap_oracle_median_pct'])} ({m['gap_oracle_stages']}) | "
                f"{_f(m['off_road_mean_s'], 2)} |"
            )
        return head + "\n".join(lines) + "\n"

    def write_markdown(self, path: str | Path) -> Path:
        return _write_text(path, self.markdown())


def _f(v: float, nd: int) -> str:
    return "-" if v is None or not math.isfinite(v) else f"{v:.{nd}f}"


def _pct(v: float) -> str:
    return "-" if v is None or not math.isfinite(v) else f"{v:+.1f} %"


def _dumps(doc: dict[str, Any]) -> str:
    return json.dumps(doc, indent=2, allow_nan=False) + "\n"


def _write_text(path: str | Path, text: str) -> Path:
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    tmp = p.with_name(p.name + ".tmp")
    tmp.write_text(text)
    os.replace(tmp, p)
    return p


def _median(xs: Sequence[float]) -> float:
    return float(np.median(xs)) if len(xs) else math.nan


def set_metrics(rows: Sequence[StageRow]) -> dict[str, Any]:
    """The figures of one set from its rows (see the module docstring)."""
    n = len(rows)
    fin = [r for r in rows if r.finished]
    both = [r for r in fin if math.isfinite(r.heuristic_time_s)]
    with_oracle = [r for r in fin if math.isfinite(r.oracle_time_s)]
    scores = [r.score for r in rows]
    return {
        "stages": n,
        "finished": len(fin),
        "finish_rate": len(fin) / n if n else math.nan,
        "score_median": _median(scores),
        "score_mean": float(np.mean(scores)) if n else math.nan,
        "gap_reference_median_pct": _median([r.gap_reference_pct for r in fin]),
        "gap_heuristic_median_pct": _median([r.gap_heuristic_pct for r in both]),
        "gap_heuristic_stages": len(both),
        "gap_oracle_median_pct": _median([r.gap_oracle_pct for r in with_oracle]),
        "gap_oracle_stages": len(with_oracle),
        "off_road_mean_s": float(np.mean([r.off_road_s for r in rows])) if n else math.nan,
    }


def run_benchmark(
    agent: Any,
    sets: str | Iterable[str | BenchmarkSet] | None = None,
    *,
    chunk: int = DEFAULT_CHUNK,
    limit: int | None = None,
    start: int = 0,
    seed: int = 0,
    baseline: str | Path | None = None,
    progress: bool = False,
    agent_name: str | None = None,
    address: str | None = None,
    oracle_path: str | Path | None = None,
) -> BenchmarkResult:
    """Run the benchmark of ``agent`` (anything :func:`agents.policies.make_policy` resolves)
    on ``sets`` (default all), as ``rally benchmark`` does with the options of the same names
    (docs/benchmark.md, "Running it"): ``limit`` and ``start`` cut each set (the result is then
    ``partial``); ``seed`` is the agent's; the reference and heuristic times missing from the
    ``baseline`` file (default :data:`BASELINE_PATH`) are computed here; gaps to the oracle come
    from ``oracle_path`` (default :data:`ORACLE_PATH`); ``address``: a Ray cluster to drive the
    chunks on (:func:`benchmark_chunks`; ``agent`` must then be an ``--agent`` string).
    """
    from agents.heuristic import HeuristicDriver
    from agents.policies import make_policy, policy_env_kwargs, policy_name
    from agents.reference import reference_time

    if limit is not None:
        _check_positive("limit", limit)
    if isinstance(start, bool) or not isinstance(start, int) or start < 0:
        raise ValueError(f"start must be a non-negative integer, got {start!r}")
    defs = resolve_sets(sets)
    policy = make_policy(agent, seed=seed, progress=progress)
    name = agent_name or policy_name(policy, agent)
    is_heuristic = isinstance(agent, str) and agent == "heuristic"
    base = load_baseline(baseline)
    oracle = load_oracle(oracle_path)
    if hasattr(policy, "bind"):
        chunk = 1  # a planner drives one stage at a time (its own progress bar per stage)
    t_start = time.perf_counter()
    plan = [(bs, bs.stage_specs()[start:][:limit]) for bs in defs]
    total = sum(len(s) for _, s in plan)
    remote = None
    if address is not None:  # every chunk of every set goes out now; results come back in order
        remote = benchmark_chunks(
            agent, [specs for _, specs in plan], chunk=chunk, seed=seed, address=address
        )
    bar = Progress(total, f"rally benchmark {name}", "stage", enabled=progress)
    n_finished = 0

    def on_done(run: RunResult) -> None:
        nonlocal n_finished
        n_finished += run.finished
        bar.update(f"{n_finished}/{bar.done + 1} finished")

    rows: list[StageRow] = []
    timing = {"build_s": 0.0, "reference_s": 0.0, "heuristic_s": 0.0}
    metrics: dict[str, dict[str, Any]] = {}
    try:
        for k, (bs, specs) in enumerate(plan):
            t0 = time.perf_counter()
            stages = [bs.build(sp) for sp in specs]
            timing["build_s"] += time.perf_counter() - t0
            if remote is not None:
                runs = remote(k, on_done)
            else:
                runs, b_s = run_stages(policy, stages, chunk=chunk, on_done=on_done)
                timing["build_s"] += b_s
            digests = [st.digest() for st in stages]
            # reference and heuristic times: the baseline's, else computed here
            refs, heur, missing = [], [], []
            for i, (st, dg) in enumerate(zip(stages, digests, strict=True)):
                rec = base.get(dg, {})
                if "reference_time_s" in rec:
                    refs.append(float(rec["reference_time_s"]))
                else:
                    t0 = time.perf_counter()
                    refs.append(reference_time(st).time_s)
                    timing["reference_s"] += time.perf_counter() - t0
                if is_heuristic:  # a run that did not finish has a NaN stage time
                    heur.append(runs[i].stage_time_s)
                elif "heuristic_time_s" in rec:
                    h = rec["heuristic_time_s"]
                    heur.append(math.nan if h is None else float(h))
                else:
                    heur.append(math.nan)
                    missing.append(i)
            if missing:
                t0 = time.perf_counter()
                hr, _ = run_stages(HeuristicDriver(), [stages[i] for i in missing], chunk=chunk)
                for i, r in zip(missing, hr, strict=True):
                    heur[i] = r.stage_time_s
                timing["heuristic_s"] += time.perf_counter() - t0
            set_rows = [
                _stage_row(bs.name, sp, dg, r, ref, h, oracle.get(dg, {}))
                for sp, dg, r, ref, h in zip(specs, digests, runs, refs, heur, strict=True)
            ]
            rows.extend(set_rows)
            metrics[bs.name] = set_metrics(set_rows)
    finally:
        bar.close()
    timing["wall_s"] = time.perf_counter() - t_start
    return BenchmarkResult(
        name,
        metrics,
        rows,
        defs,
        partial=limit is not None or start > 0,
        timing=timing,
        observation=policy_env_kwargs(policy),
    )


def _stage_row(
    set_name: str,
    sp: dict[str, Any],
    digest: str,
    r: RunResult,
    ref: float,
    h: float,
    oracle: dict[str, Any],
) -> StageRow:
    """A run's row, with its gaps to the reference, the heuristic and the oracle."""
    t = r.stage_time_s
    o_t = float(oracle.get("oracle_time_s", math.nan))

    def gap(base: float) -> float:
        return 100.0 * (t / base - 1.0) if r.finished and math.isfinite(base) else math.nan

    return StageRow(
        set=set_name,
        **sp,  # stage, seed, length_m, difficulty
        digest=digest,
        finished=r.finished,
        end_reason=r.end_reason,
        stage_time_s=t,
        reference_time_s=ref,
        heuristic_time_s=h,
        score=score(ref, t, r.finished),
        gap_reference_pct=gap(ref),
        gap_heuristic_pct=gap(h),
        off_road_s=r.off_road_s,
        progress_m=r.progress_m,
        steps=r.steps,
        compute=dict(r.compute),
        oracle_time_s=o_t,
        gap_oracle_pct=gap(o_t),
    )
