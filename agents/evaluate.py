"""Stage-time evaluation: ``agents.evaluate(policy, stages, seeds)`` and its table, JSON, CSV
(docs/agents.md, "Evaluation"), and a training run's ``eval_log.csv``."""

from __future__ import annotations

import csv
import importlib.util
import io
import json
import math
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

import numpy as np

import tracks
from physics import ROVER
from rally_env.env import RallyEnv
from rally_env.info import end_reason
from rally_env.replay import RecordReplay
from rally_env.spaces import DEFAULT_LAYOUT

PAR_TIMES_PATH = Path(__file__).parent / "par_times.json"
#: First generator seed of the held-out evaluation stages (training draws below 2**31 - 1).
HELD_OUT_SEED_BASE = 2**31
#: Validation stages of a training recipe's evaluation: ``gen-<VALIDATION_SEED_BASE + i>``
#: (outside the seeds ``stage="random"`` trains on and outside the benchmark's test sets).
VALIDATION_SEED_BASE = 4_000_000_000
#: Version of the JSON written by ``rally eval --json``.
EVAL_SCHEMA_VERSION = 1


@dataclass
class RunResult:
    """One episode: how it ended, its figures (s, m, m/s; ``stage_time_s`` NaN when not
    finished), its per-step telemetry when recorded, its actions and its compute. Every field:
    docs/agents.md, "Evaluation"."""

    stage: str
    seed: int
    finished: bool
    end_reason: str
    stage_time_s: float
    episode_time_s: float
    progress_m: float
    off_road_s: float
    mean_speed_mps: float
    steps: int
    telemetry: dict[str, np.ndarray] = field(default_factory=dict, repr=False)
    actions: np.ndarray | None = field(default=None, repr=False)
    compute: dict[str, Any] = field(default_factory=dict)

    def figures(self) -> dict[str, Any]:
        d = asdict(self)
        del d["telemetry"], d["actions"]
        if not d["compute"]:
            del d["compute"]
        return _clean(d)


@dataclass
class StageSummary:
    """The figures of one stage over its episodes (see :data:`SUMMARY_FIELDS`)."""

    stage: str
    agent: str
    episodes: int
    finished: int
    finish_rate: float
    median_time_s: float
    best_time_s: float
    reference_time_s: float
    gap_reference_pct: float
    par_time_s: float
    gap_par_pct: float
    off_road_s: float
    mean_speed_mps: float

    def figures(self) -> dict[str, Any]:
        return _clean(asdict(self))


#: Per-stage figures (:class:`StageSummary`'s fields), in table / CSV column order.
SUMMARY_FIELDS = tuple(f.name for f in fields(StageSummary))


@dataclass
class EvalResult:
    """What :func:`evaluate` returns: ``.stages`` (summaries), ``.runs`` (every episode)."""

    agent: str
    stages: list[StageSummary]
    runs: list[RunResult]
    seeds: list[int]
    wall_time_s: float

    def summary(self, stage: str) -> StageSummary:
        for s in self.stages:
            if s.stage == stage:
                return s
        raise KeyError(stage)

    def to_dict(self) -> dict[str, Any]:
        """The JSON document (schema version :data:`EVAL_SCHEMA_VERSION`)."""
        return {
            "schema": "rally-eval",
            "version": EVAL_SCHEMA_VERSION,
            "agent": self.agent,
            "seeds": list(self.seeds),
            "wall_time_s": self.wall_time_s,
            "stages": [s.figures() for s in self.stages],
            "runs": [r.figures() for r in self.runs],
        }

    def write_json(self, path: str | Path) -> Path:
        """Write :meth:`to_dict` as JSON to ``path`` (``"-"``: standard output)."""
        return _write_out(path, json.dumps(self.to_dict(), indent=2, allow_nan=False) + "\n")

    def write_csv(self, path: str | Path) -> Path:
        """Write one row of figures per stage to ``path`` (``"-"``: standard output)."""
        buf = io.StringIO()
        w = csv.DictWriter(buf, fieldnames=list(SUMMARY_FIELDS))
        w.writeheader()
        for s in self.stages:
            w.writerow({k: ("" if v is None else v) for k, v in s.figures().items()})
        return _write_out(path, buf.getvalue(), newline="")

    def table(self, rich: bool | None = None) -> str:
        """The per-stage table as text (rich's rendering when available, else plain), with
        how the runs that did not finish ended (:meth:`unfinished`)."""
        return format_table(self.stages, rich=rich, unfinished=self.unfinished())

    def unfinished(self) -> list[str]:
        """Per stage (in the order of ``stages``), how its runs that did not finish ended:
        ``"off_stage 7, stuck 3"`` (most frequent first), ``"-"`` when every run finished."""
        return [unfinished_ends(self.runs, s.stage) for s in self.stages]


def _write_out(path: str | Path, text: str, newline: str | None = None) -> Path:
    """Write ``text`` to ``path`` (its directory made), or to standard output for ``"-"``."""
    if str(path) == "-":
        sys.stdout.write(text)
        return Path("-")
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(text, newline=newline)
    return p


def unfinished_ends(runs: Sequence[RunResult], stage: str) -> str:
    """How the runs of ``runs`` on ``stage`` that did not finish ended: each end reason with
    its count, most frequent first (``"off_stage 7, stuck 3"``); ``"-"`` for none."""
    counts = Counter(r.end_reason for r in runs if r.stage == stage and not r.finished)
    if not counts:
        return "-"
    return ", ".join(f"{k} {n}" for k, n in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])))


def json_safe(v: Any) -> Any:
    """``v`` ready for strict JSON (``json.dumps(..., allow_nan=False)``): NaN and inf ->
    ``None`` (null), numpy scalars and arrays -> Python numbers and lists, tuples -> lists,
    paths and other objects -> ``str``; dicts and lists recursively."""
    if isinstance(v, dict):
        return {str(k): json_safe(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [json_safe(x) for x in v]
    if isinstance(v, np.ndarray):
        return json_safe(v.tolist())
    if isinstance(v, (bool, np.bool_)):
        return bool(v)
    if isinstance(v, (int, np.integer)):
        return int(v)
    if isinstance(v, (float, np.floating)):
        v = float(v)
        return v if math.isfinite(v) else None
    if v is None or isinstance(v, str):
        return v
    return str(v)


def _clean(d: dict[str, Any]) -> dict[str, Any]:
    """NaN -> None (JSON null), numpy scalars -> Python (one level: lists stay as they are)."""
    return {k: v if isinstance(v, (list, dict)) else json_safe(v) for k, v in d.items()}


# ---------------------------------------------------------------------------------- stages
def resolve_stages(spec: str | Sequence[Any]) -> list[Any]:
    """``"opener,forest"``, ``"library"``, ``"random:N"`` (held out: the benchmark's default
    test stages), ``"validation:N"`` (a training run's validation stages, disjoint from every
    test set and from the training seeds) or a list -> stage list."""
    if not isinstance(spec, str):
        return [x for s in spec for x in (resolve_stages(s) if isinstance(s, str) else [s])]
    out: list[Any] = []
    for part in [p.strip() for p in spec.split(",") if p.strip()]:
        if part == "library":
            out.extend(tracks.list_stages())
        elif part.startswith(("random:", "validation:")):
            kind, _, count = part.partition(":")
            n = int(count) if count.strip().isdigit() else 0
            if n < 1:
                raise ValueError(f"{kind}:N needs N >= 1, got {part!r}")
            base = VALIDATION_SEED_BASE if kind == "validation" else HELD_OUT_SEED_BASE
            out.extend(f"gen-{base + i}" for i in range(n))
        else:
            out.append(part)
    if not out:
        raise ValueError(f"no stages in {spec!r}")
    return out


def load_par_times() -> dict[str, float]:
    """``{stage: par time (s)}``: the library stage files' ``par_time_s``, completed by what
    ``python -m agents.par`` last wrote (the heuristic driver's times)."""
    out: dict[str, float] = {}
    if PAR_TIMES_PATH.exists():
        data = json.loads(PAR_TIMES_PATH.read_text())
        out.update({k: float(v) for k, v in data.get("par_time_s", {}).items()})
    for name in tracks.list_stages():
        par = tracks.load_stage(name).par_time_s
        if par is not None:
            out[name] = float(par)
    return out


def stage_label(stage: Any) -> str:
    """A stage's name (a ``tracks.Stage``'s ``name``, or the string itself)."""
    return stage if isinstance(stage, str) else getattr(stage, "name", str(stage))


# --------------------------------------------------------------------------------- running
def run_episode(
    policy: Any,
    stage: Any,
    seed: int,
    env: Any = None,
    record: bool = True,
    env_kwargs: dict[str, Any] | None = None,
    max_steps: int | None = None,
) -> RunResult:
    """Drive one episode of ``policy`` on ``stage`` from ``reset(seed=seed)``."""
    from agents.policies import (
        act_one,
        bind_policy,
        finish_policy,
        policy_env_kwargs,
        reset_policy,
    )

    ix = DEFAULT_LAYOUT.index
    if env is None:
        env = RallyEnv(stage=stage, **policy_env_kwargs(policy, env_kwargs))
    dt = 1.0 / env.config.control_hz
    obs, info = env.reset(seed=int(seed))
    reset_policy(policy)
    bind_policy(policy, [env])
    prog, spd, offr, vf, vl, yr, grip = [], [], [], [], [], [], []
    acts = []
    steps = 0
    while True:
        a = act_one(policy, obs)
        obs, _, term, trunc, info = env.step(a)
        steps += 1
        acts.append(np.asarray(a, dtype=np.float32).reshape(-1))
        prog.append(info["progress_m"])
        spd.append(info["speed_mps"])
        offr.append(bool(info["off_road"]))
        if record:
            vf.append(obs[ix["v_forward"]] * 50.0)
            vl.append(obs[ix["v_left"]] * 20.0)
            yr.append(obs[ix["yaw_rate"]] * 2.0)
            grip.append(float(np.mean(obs[[ix[f"grip_{w}"] for w in ("FL", "FR", "RL", "RR")]])))
        if term or trunc or (max_steps is not None and steps >= max_steps):
            break
    compute = finish_policy(policy, 1)[0]
    tel: dict[str, np.ndarray] = {}
    if record:
        vf_a, vl_a, yr_a = np.array(vf), np.array(vl), np.array(yr)
        a_long = np.gradient(vf_a, dt) - vl_a * yr_a if steps > 1 else np.zeros(steps)
        a_lat = np.gradient(vl_a, dt) + vf_a * yr_a if steps > 1 else np.zeros(steps)
        g = env.config.vehicle.gravity_mps2
        mu = env.config.vehicle.mu_base * np.array(grip)
        tel = {
            "progress_m": np.array(prog),
            "speed_mps": np.array(spd),
            "a_long_mps2": a_long,
            "a_lat_mps2": a_lat,
            "usage": np.hypot(a_long, a_lat) / np.maximum(mu * g, 1e-6),
            "off_road": np.array(offr),
        }
    return ended_run(
        env,
        info,
        seed,
        steps,
        float(np.sum(offr)) * dt,
        float(np.mean(spd)) if spd else 0.0,
        telemetry=tel,
        actions=np.array(acts, dtype=np.float32),
        compute=compute,
    )


def ended_run(
    env: Any,
    info: dict[str, Any],
    seed: int,
    steps: int,
    off_road_s: float,
    mean_speed_mps: float,
    **extra: Any,
) -> RunResult:
    """The :class:`RunResult` of an episode of ``env`` that ended with ``info`` (``extra``:
    its telemetry, actions, compute)."""
    fin = bool(info["finished"])
    return RunResult(
        stage=env.unwrapped.core.stage_name(0),
        seed=int(seed),
        finished=fin,
        end_reason=str(end_reason(info)),
        stage_time_s=float(info["finish_time_s"]) if fin else math.nan,
        episode_time_s=float(info["stage_time_s"]),
        progress_m=float(info["progress_m"]),
        off_road_s=off_road_s,
        mean_speed_mps=mean_speed_mps,
        steps=int(steps),
        **extra,
    )


def summarize(
    stage: str,
    agent: str,
    runs: Sequence[RunResult],
    par: dict[str, float] | None = None,
    vehicle: Any = None,
    reference_time_s: float | None = None,
) -> StageSummary:
    """The figures of one stage. ``vehicle``: the env's vehicle (default the rover); the
    reference time is computed for it (unless ``reference_time_s`` gives it, as a distributed
    evaluation's workers computed it), and par times (the heuristic driver's, with the
    Rally-v0 rover) apply only to that rover."""
    from agents.reference import reference_time

    par = load_par_times() if par is None else par
    times = np.array([r.stage_time_s for r in runs if r.finished])
    ref = (
        reference_time(stage, vehicle=vehicle).time_s
        if reference_time_s is None
        else float(reference_time_s)
    )
    med = float(np.median(times)) if times.size else math.nan
    best = float(np.min(times)) if times.size else math.nan
    p = par.get(stage, math.nan) if vehicle is None or vehicle == ROVER else math.nan
    return StageSummary(
        stage=stage,
        agent=agent,
        episodes=len(runs),
        finished=int(times.size),
        finish_rate=times.size / max(1, len(runs)),
        median_time_s=med,
        best_time_s=best,
        reference_time_s=ref,
        gap_reference_pct=100.0 * (med / ref - 1.0) if times.size else math.nan,
        par_time_s=p,
        gap_par_pct=100.0 * (med / p - 1.0) if times.size and math.isfinite(p) else math.nan,
        off_road_s=float(np.mean([r.off_road_s for r in runs])) if runs else math.nan,
        mean_speed_mps=float(np.mean([r.mean_speed_mps for r in runs])) if runs else math.nan,
    )


def evaluate(
    policy: Any,
    stages: str | Sequence[Any] = "opener",
    seeds: Iterable[int] = (0,),
    *,
    record: bool = False,
    env_kwargs: dict[str, Any] | None = None,
    agent_name: str | None = None,
    progress: bool = False,
    replay_dir: str | None = None,
    on_run: Callable[[RunResult], None] | None = None,
) -> EvalResult:
    """Evaluate a policy (anything :func:`agents.policies.make_policy` resolves): one episode
    per (stage of :func:`resolve_stages`, reset seed); an :class:`EvalResult`.

    ``record``: per-step telemetry in every :class:`RunResult`; ``env_kwargs``: more
    ``RallyEnv`` arguments; ``agent_name``: the table's (default the policy's); ``progress``: a
    line per stage on stderr; ``replay_dir``: every episode saved there as a replay
    (:class:`rally_env.RecordReplay`); ``on_run``: called with each run as it ends.
    """
    from agents.policies import make_policy, policy_env_kwargs, policy_name

    seeds = [int(s) for s in seeds]
    if not seeds:
        raise ValueError("seeds must not be empty")
    pol = make_policy(policy, seed=seeds[0], progress=progress)
    env_kwargs = policy_env_kwargs(pol, env_kwargs)
    name = agent_name or policy_name(pol, policy)
    t0 = time.perf_counter()
    par = load_par_times()
    summaries, runs = [], []
    for stage in resolve_stages(stages):
        env = RallyEnv(stage=stage, **(env_kwargs or {}))
        if replay_dir is not None:
            env = RecordReplay(env, directory=replay_dir, meta={"agent": name})
        sname = stage_label(stage)
        sr = []
        for s in seeds:
            sr.append(run_episode(pol, stage, s, env=env, record=record))
            sr[-1].stage = sname
            if on_run is not None:
                on_run(sr[-1])
        env.close()
        runs.extend(sr)
        summaries.append(summarize(sname, name, sr, par, vehicle=env.unwrapped.config.vehicle))
        if progress:
            print_stage_line(summaries[-1])
    return EvalResult(name, summaries, runs, seeds, time.perf_counter() - t0)


def print_stage_line(s: StageSummary) -> None:
    """A stage's line on stderr (``evaluate(..., progress=True)``)."""
    print(
        f"  {s.agent} on {s.stage}: {s.finished}/{s.episodes} finished, "
        f"median {s.median_time_s:.2f} s",
        file=sys.stderr,
    )


# ---------------------------------------------------------------------------------- table
_HEAD = {
    "stage": "stage",
    "agent": "agent",
    "finish_rate": "finish",
    "median_time_s": "median s",
    "best_time_s": "best s",
    "reference_time_s": "ref s",
    "gap_reference_pct": "gap ref %",
    "par_time_s": "par s",
    "gap_par_pct": "gap par %",
    "off_road_s": "off-road s",
    "mean_speed_mps": "mean m/s",
}


def _fmt(key: str, v: Any, s: StageSummary) -> str:
    if key == "finish_rate":
        return f"{s.finished}/{s.episodes}"
    if isinstance(v, float):
        if not math.isfinite(v):
            return "-"
        if key.endswith("_pct"):
            return f"{v:+.1f}"
        return f"{v:.2f}" if key.endswith("_s") else f"{v:.1f}"
    return str(v)


def format_table(
    stages: Sequence[StageSummary],
    rich: bool | None = None,
    unfinished: Sequence[str] | None = None,
) -> str:
    """The stage-time table (``rich`` rendering if installed and not disabled, else plain);
    ``unfinished``: a last column, per stage row how its runs that did not finish ended
    (:func:`unfinished_ends`)."""
    head = dict(_HEAD)
    rows = [[_fmt(c, getattr(s, c), s) for c in head] for s in stages]
    if unfinished is not None:
        if len(unfinished) != len(rows):
            raise ValueError(f"unfinished: {len(unfinished)} entries for {len(rows)} stage rows")
        head["unfinished"] = "did not finish"
        for r, u in zip(rows, unfinished, strict=True):
            r.append(u)
    cols = list(head)
    if rich is not False:
        try:
            from rich.console import Console
            from rich.table import Table

            t = Table(title="stage times (reference: point-mass racing line)")
            for c in cols:
                left = c in ("stage", "agent", "unfinished")
                t.add_column(head[c], justify="left" if left else "right")
            for r in rows:
                t.add_row(*r)
            buf = io.StringIO()
            Console(file=buf, width=140, force_terminal=False, color_system=None).print(t)
            return buf.getvalue()
        except ImportError:
            if rich:
                raise
    widths = [max(len(head[c]), *(len(r[i]) for r in rows)) for i, c in enumerate(cols)]
    lines = [[head[c] for c in cols], ["-" * w for w in widths], *rows]
    return "".join(
        "  ".join(x.rjust(w) for x, w in zip(r, widths, strict=True)) + "\n" for r in lines
    )


# The columns of a training run's ``eval_log.csv`` (docs/agents.md) and how each is written.
_EVAL_LOG_FORMAT = {
    "timesteps": "d",
    "env_steps": "d",
    "phase": "s",
    "wall_time_s": ".1f",
    "finish_rate": ".4f",
    "median_score": ".4f",
    "mean_score": ".4f",
    "median_time_s": ".3f",
    "best_time_s": ".3f",
    "mean_progress_m": ".1f",
    "ep_return": ".3f",
}
#: The columns of a training run's ``eval_log.csv`` (one row per evaluation).
EVAL_LOG_FIELDS = tuple(_EVAL_LOG_FORMAT)
#: The header line of ``eval_log.csv`` (:data:`EVAL_LOG_FIELDS`).
EVAL_LOG_HEADER = ",".join(EVAL_LOG_FIELDS) + "\n"


def validation_stages(n: int) -> list[str]:
    """A training recipe's ``n`` validation stages (see :data:`VALIDATION_SEED_BASE`)."""
    return [f"gen-{VALIDATION_SEED_BASE + i}" for i in range(n)]


def score(reference_s: float, stage_time_s: float | None) -> float:
    """``reference_time / stage_time``, 0 for a run that did not finish (1.0 = the
    reference)."""
    if stage_time_s is None or not math.isfinite(stage_time_s) or stage_time_s <= 0.0:
        return 0.0
    return float(reference_s / stage_time_s)


class ValidationLog:
    """A training run's ``out/eval_log.csv`` (every backend's; docs/agents.md, "Training"),
    one row per evaluation on ``stages`` (names), its best so far and ``learning_curve.png``
    (x axis ``xlabel``); an existing log (a resumed run) goes on, migrated first
    (:func:`migrate_eval_log`). ``rank``: the best has the highest finish rate, then
    (``"score"``) the highest median :func:`score` or (``"time"``) the lowest median time.

    Raises:
        ValueError: another ``rank``, or a column of the existing log this schema does not
            know (the file is left as it is).
    """

    def __init__(self, out: str | Path, stages: list[str], xlabel: str, rank: str = "score"):
        if rank not in ("score", "time"):
            raise ValueError(f"rank must be 'score' or 'time', got {rank!r}")
        self.out = Path(out)
        self.stages = list(stages)
        self.xlabel = xlabel
        self.rank = rank
        self.path = self.out / "eval_log.csv"
        #: (finish rate, median score) of the best evaluation so far
        self.best: tuple[float, float] = (-1.0, -1.0)
        self._best_key: tuple[float, float] = (-1.0, -math.inf)
        self._refs: dict[str, float] | None = None
        self._t0 = time.perf_counter()
        if not self.path.exists():
            self.path.write_text(EVAL_LOG_HEADER)
            return
        migrate_eval_log(self.path)  # a resumed run: its best so far stays the one to beat
        with self.path.open(newline="") as f:
            rows = list(csv.DictReader(f))
        for i, row in enumerate(rows, start=2):
            try:
                figures = {k: float(row[k]) for k in _RANKED}
            except (TypeError, ValueError):
                bad = {k: row.get(k) for k in _RANKED}
                raise ValueError(f"{self.path}: line {i}: not a number in {bad}") from None
            if row["phase"] != "final":
                self._rank(figures)

    def figures(self, runs: list[Any]) -> dict[str, float]:
        """The figures of one evaluation's runs (:class:`RunResult`): finish rate, scores
        (``nan`` when ranked by time), median and best time of the finished runs, mean
        stage position reached."""
        fin = [bool(r.finished) for r in runs]
        s: list[float] = []  # scores: ranked by time, none
        if self.rank == "score":
            if self._refs is None:  # the reference time of each stage
                from agents.reference import reference_time

                self._refs = {st: float(reference_time(st).time_s) for st in self.stages}
            s = [score(self._refs[r.stage], r.stage_time_s if r.finished else None) for r in runs]
        done = [r.stage_time_s for r in runs if r.finished]
        progress = [getattr(r, "progress_m", math.nan) for r in runs]
        return {
            "finish_rate": float(np.mean(fin)) if fin else math.nan,
            "median_score": float(np.median(s)) if s else math.nan,
            "mean_score": float(np.mean(s)) if s else math.nan,
            "median_time_s": float(np.median(done)) if done else math.nan,
            "best_time_s": float(min(done)) if done else math.nan,
            "mean_progress_m": float(np.mean(progress)) if progress else math.nan,
        }

    def add(
        self,
        runs: list[Any],
        timesteps: int,
        env_steps: int,
        phase: str,
        final: bool = False,
        figures: dict[str, float] | None = None,
    ) -> tuple[dict[str, float], bool]:
        """Append the row of one evaluation's runs (:class:`RunResult`): their
        :meth:`figures`, updated by ``figures`` (what the backend measures itself, such as
        ``ep_return``). Returns the row's figures and whether they are the best so far (a
        ``final`` evaluation, of the last model, never is)."""
        m = {"ep_return": math.nan, **self.figures(runs), **(figures or {})}
        row = {"timesteps": int(timesteps), "env_steps": int(env_steps), "phase": phase, **m}
        row["wall_time_s"] = time.perf_counter() - self._t0
        with self.path.open("a") as f:
            f.write(",".join(format(row[k], c) for k, c in _EVAL_LOG_FORMAT.items()) + "\n")
        return m, not final and self._rank(m)

    def _rank(self, m: dict[str, float]) -> bool:
        """Whether the figures ``m`` beat the best so far (then they are the best)."""
        fr, second = m["finish_rate"], m["median_score"]
        if self.rank == "time" or not math.isfinite(second):
            med = m["median_time_s"]
            second = -med if math.isfinite(med) else -math.inf
        if (fr, second) <= self._best_key:
            return False
        self._best_key = (fr, second)
        self.best = (fr, m["median_score"])
        return True

    def plot(self) -> Path | None:
        """``learning_curve.png``: the finish rate and median score (when ranked by score)
        against env steps; ``None`` without a row or without pygame (the ``render`` extra)."""
        if importlib.util.find_spec("pygame") is None:
            return None
        from agents.plots import validation_curve

        n = len(self.stages)
        title = None if self.rank == "score" else f"evaluation on {n} stage{'s' * (n != 1)}"
        return validation_curve(
            self.path, self.out / "learning_curve.png", n, self.xlabel, title=title
        )


_RANKED = ("finish_rate", "median_score", "median_time_s")


def migrate_eval_log(path: str | Path) -> bool:
    """Rewrite an older version's ``eval_log.csv`` (docs/agents.md, "Training") with
    :data:`EVAL_LOG_FIELDS`: a missing figure ``nan``, phase empty, timesteps the env steps or
    the other way round. Returns whether it rewrote the file.

    Raises:
        ValueError: a column this schema does not know (the file is left as it is).
    """
    path = Path(path)
    with path.open(newline="") as f:
        reader = csv.DictReader(f)
        rows = list(reader)
        head = list(reader.fieldnames or [])
    if head == list(EVAL_LOG_FIELDS):
        return False
    unknown = [c for c in head if c not in EVAL_LOG_FIELDS]
    if unknown:
        raise ValueError(
            f"{path}: columns {unknown} are not eval_log.csv columns ({','.join(EVAL_LOG_FIELDS)})"
        )
    lines = [EVAL_LOG_HEADER]
    for r in rows:
        r.setdefault("timesteps", r.get("env_steps", "nan"))
        r.setdefault("env_steps", r["timesteps"])
        r.setdefault("phase", "")
        cells = [r.get(k) for k in EVAL_LOG_FIELDS]
        lines.append(",".join("nan" if c is None else c for c in cells) + "\n")
    path.write_text("".join(lines))
    return True
