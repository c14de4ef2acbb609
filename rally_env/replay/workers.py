"""Bounded replay tasks: verification (and the trace of a verified run) in worker processes
held to a time and memory budget, locally or as Ray tasks; what the leaderboard server's
verifier (:mod:`rally_env.server.pool`) and the distributed verification of ``agents`` run
(``docs/server.md``, "How a run is verified").
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import multiprocessing as mp
import os
import signal
import threading
import time
from dataclasses import dataclass
from typing import Any

from rally_env.replay.budgets import DEFAULT_BUDGETS, Budgets


@dataclass(frozen=True)
class TaskLimits:
    """What one verification may cost: wall time (s) and address space (MiB; 0 = none).

    Attributes:
        timeout_s: the most any task may take (s).
        memory_mb: the worker's address space (MiB; 0 = no limit).
        budgets: what a replay may claim (checked before anything is built).
        cost_factor: a run's time budget is this many times the cost of a default-settings
            run of the same step count, as the worker measured it (:func:`calibrate`).
        min_timeout_s: the least time budget of a run (s): slack for a loaded machine.
        parse_timeout_s: the most a worker may take to read a replay before it reports its
            step count (s).
    """

    timeout_s: float = 60.0
    memory_mb: int = 2048
    budgets: Budgets = DEFAULT_BUDGETS
    cost_factor: float = 4.0
    min_timeout_s: float = 10.0
    parse_timeout_s: float = 20.0

    def run_timeout(self, steps: int, cost: tuple[float, float] | None) -> float:
        """The time budget (s) of a run of ``steps`` control steps, given the measured cost
        ``(setup s, s per step)`` of a default-settings run (None: not measured)."""
        if cost is None:
            return self.timeout_s
        setup_s, step_s = cost
        budget = self.cost_factor * (setup_s + max(int(steps), 0) * step_s)
        return min(self.timeout_s, max(self.min_timeout_s, budget))


class TaskFailed(Exception):
    """A task exceeded its time or memory budget, or its worker died (the worker was
    replaced). ``reason``: ``over_budget`` (the default) or ``verifier_died``."""

    def __init__(self, message: str, reason: str = "over_budget"):
        super().__init__(message)
        self.reason = reason


def calibrate(steps: int = 200) -> tuple[float, float]:
    """(setup s, s per step) of a default-settings run on this machine now: a default env
    built and reset, then ``steps`` steps at full throttle. What a worker's run budgets are
    proportional to (:meth:`TaskLimits.run_timeout`)."""
    import numpy as np

    from rally_env.env import RallyEnv

    t0 = time.perf_counter()
    env = RallyEnv()
    env.reset(seed=0)
    t1 = time.perf_counter()
    a = np.array([0.0, 1.0, 0.0, 0.0], np.float32)
    for _ in range(steps):
        _, _, term, trunc, _ = env.step(a)
        if term or trunc:
            env.reset()
    t2 = time.perf_counter()
    env.close()
    return t1 - t0, (t2 - t1) / steps


def run_task(
    kind: str,
    payload: bytes,
    budgets: Budgets,
    where: str = "<upload>",
    started: Any = None,
) -> dict[str, Any]:
    """One task of a worker: ``verify`` (the report, and for an accepted run its stored
    blob and trace), ``report`` (the report alone) or ``trace``; errors as
    ``{"error": ...}``, never raised. ``where`` names the input in messages; ``started``
    (if given) is called with the replay's claimed step count once it is parsed, before
    anything is built from it."""
    try:
        from rally_env.replay.errors import ReplayError
        from rally_env.replay.format import replay_from_bytes
        from rally_env.replay.trace import encode, trace_of
        from rally_env.replay.verify import unusable, verify_replay

        if kind in ("verify", "report"):
            try:
                replay = replay_from_bytes(payload, where, budgets)
                if started is not None:
                    started(replay.steps)
                rep = verify_replay(replay, budgets)
            except ReplayError as e:
                rep = unusable(e)
            out: dict[str, Any] = {"report": rep}
            if kind == "verify" and rep.accepted and rep.finish_time_s is not None:
                from rally_env.replay.leaderboard import stage_name_problem

                # here, where the run's stage is made already (cached): not in the server
                out["stage_name_problem"] = stage_name_problem(rep)
                out["blob"] = replay.to_bytes(compress=True)
                out["trace"] = encode(trace_of(replay, budgets))
        elif kind == "trace":
            replay = replay_from_bytes(payload, "<stored run>", budgets)
            out = {"trace": encode(trace_of(replay, budgets))}
        else:
            out = {"error": "bad_request", "message": f"unknown task {kind!r}"}
    except MemoryError:
        out = {"error": "memory"}
    except Exception as e:  # a bug, not the input's fault: reported, worker lives on
        out = {"error": "internal", "message": f"{type(e).__name__}: {e}"}
    return out


def _worker_main(conn: Any, limits: TaskLimits) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the server stops its workers itself
    # one car, one episode: no second process generating pool or next stages ahead, whose
    # CPU would escape the run's time budget
    os.environ["RALLY_PREFETCH"] = "0"
    if limits.memory_mb:
        import resource

        lim = int(limits.memory_mb) * 1024 * 1024
        resource.setrlimit(resource.RLIMIT_AS, (lim, lim))
    import rally_env.replay.verify  # noqa: F401  (loaded before the first task's clock)

    try:
        cost: tuple[float, float] | None = calibrate()
    except Exception:  # no measure: the flat time budget
        cost = None
    conn.send(("ready", os.getpid(), cost))
    while True:
        try:
            kind, payload, where = conn.recv()
        except (EOFError, OSError):
            return  # the server is gone
        try:
            out = run_task(
                kind, payload, limits.budgets, where, lambda n: conn.send(("steps", int(n)))
            )
        except MemoryError:  # even reporting ran out of memory
            out = {"error": "memory"}
        try:
            conn.send(out)
        except (EOFError, OSError):
            return


def ray_task(kind: str, payload: bytes, limits_json: str, where: str = "<upload>") -> dict:
    """:func:`run_task` as a Ray task runs it, in a verifier process of its own
    (:func:`bounded_task`): limits in as JSON (:func:`limits_json`), the report out as its
    ``to_dict()``; a task over its budget comes back as ``{"error": "over_budget", ...}``."""
    doc = json.loads(limits_json)
    doc["budgets"] = Budgets(**doc["budgets"])
    limits = TaskLimits(**doc)
    try:
        out = bounded_task(kind, payload, limits, where)
    except TaskFailed as e:
        return {"error": e.reason, "message": str(e)}
    if "report" in out:
        out["report"] = out["report"].to_dict()
    return out


def limits_json(limits: TaskLimits) -> str:
    """``limits`` as :func:`ray_task` reads them."""
    return json.dumps(dataclasses.asdict(limits))


_TASK_WORKERS: dict[TaskLimits, Worker] = {}
_TASK_LOCK = threading.Lock()


def bounded_task(kind: str, payload: bytes, limits: TaskLimits, where: str) -> dict[str, Any]:
    """Run one task in this process's worker process for ``limits`` (started on first use,
    kept, replaced when it dies or runs over): how a Ray worker holds each task to the pool's
    bounds (``docs/server.md``, "Verification on a Ray cluster").

    Raises:
        TaskFailed: over the time or memory budget.
    """
    with _TASK_LOCK:
        w = _TASK_WORKERS.get(limits)
        if w is None:
            w = _TASK_WORKERS[limits] = Worker(limits)
        try:
            return w.call(kind, payload, where)
        except RuntimeError as e:  # the process did not start: its budget is the likely cause
            raise TaskFailed(
                f"the verifier process did not start under its {limits.memory_mb} MiB memory "
                f"budget ({e})"
            ) from None


class Worker:
    """One worker process and the pipe to it (used by one thread at a time)."""

    def __init__(self, limits: TaskLimits, ready_timeout_s: float = 900.0):
        self.limits = limits
        self.ready_timeout_s = ready_timeout_s
        self.proc: Any = None
        self.conn: Any = None
        self.pid = 0
        #: (setup s, s per step) of a default-settings run, as this worker measured it
        self.cost: tuple[float, float] | None = None

    def start(self) -> None:
        ctx = mp.get_context("spawn")
        parent, child = ctx.Pipe()
        self.proc = ctx.Process(target=_worker_main, args=(child, self.limits), daemon=True)
        self.proc.start()
        child.close()
        self.conn = parent
        # the first start compiles or loads the physics: not part of any task's budget
        try:
            if not parent.poll(self.ready_timeout_s):
                raise EOFError
            _, self.pid, self.cost = parent.recv()
        except (EOFError, OSError):
            code = self.proc.exitcode
            self.stop()
            raise RuntimeError(
                f"a verification worker did not start (exit code {code}; a --task-memory-mb "
                "too small for the interpreter and the compiled physics?)"
            ) from None

    def alive(self) -> bool:
        return self.proc is not None and self.proc.is_alive()

    def _death(self) -> str:
        """What ended the worker process (read after it is reaped), and replace it."""
        code = None
        if self.proc is not None:
            self.proc.join(5)
            code = self.proc.exitcode
        self.stop()
        if code is None:
            return "the verifier process stopped answering"
        if code < 0:
            try:
                name = signal.Signals(-code).name
            except ValueError:
                name = f"signal {-code}"
            return f"the verifier process was killed by {name}"
        return f"the verifier process exited with code {code}"

    def stop(self) -> None:
        if self.proc is not None:
            with contextlib.suppress(Exception):
                self.proc.kill()
            self.proc.join(5)
            with contextlib.suppress(Exception):
                self.conn.close()
        self.proc = None

    def call(self, kind: str, payload: bytes, where: str = "<upload>") -> dict[str, Any]:
        """Run one task; its result dict.

        Raises:
            TaskFailed: over the time budget, or the worker died (memory); it is replaced.
        """
        if not self.alive():
            self.stop()
            self.start()
        lim = self.limits
        try:
            self.conn.send((kind, payload, where))
            budget = lim.parse_timeout_s if kind != "trace" else lim.timeout_s
            while True:
                if not self.conn.poll(budget):
                    self.stop()
                    raise TaskFailed(
                        f"the verification took longer than its {budget:.3g} s time budget"
                    )
                out = self.conn.recv()
                if isinstance(out, tuple) and out and out[0] == "steps":
                    budget = lim.run_timeout(out[1], self.cost)
                    continue
                break
        except (EOFError, OSError, BrokenPipeError):
            why = self._death()
            raise TaskFailed(why, "verifier_died") from None
        if out.get("error") == "memory":
            self.stop()  # a fresh process: nothing half-allocated survives
            raise TaskFailed(
                f"the verification ran out of its {self.limits.memory_mb} MiB memory budget"
            )
        return out


class RayWorker:
    """:class:`Worker`'s interface over a Ray cluster: each call is one Ray task
    (:func:`ray_task`), cancelled after the time budget plus :data:`RAY_START_SLACK_S` and
    retried :data:`RAY_TASK_RETRIES` times if its worker dies (``docs/server.md``,
    "Verification on a Ray cluster").
    """

    def __init__(self, limits: TaskLimits):
        import ray

        self.limits = limits
        self._ray = ray
        opts: dict[str, Any] = {"max_retries": RAY_TASK_RETRIES, "retry_exceptions": False}
        if limits.memory_mb:
            opts["memory"] = int(limits.memory_mb) * 1024 * 1024
        self._task = ray.remote(**opts)(ray_task)
        self._limits = limits_json(limits)

    def start(self) -> None:
        pass

    def alive(self) -> bool:
        return True

    def stop(self) -> None:
        pass

    def call(self, kind: str, payload: bytes, where: str = "<upload>") -> dict[str, Any]:
        """Run one task on the cluster; its result dict (a report as a ``VerifyReport``).

        Raises:
            TaskFailed: over the time or memory budget, or its workers died.
        """
        from ray.exceptions import GetTimeoutError, RayError

        from rally_env.replay.verify import VerifyReport

        ray = self._ray
        ref = self._task.remote(kind, payload, self._limits, where)
        try:
            out = ray.get(ref, timeout=self.limits.timeout_s + RAY_START_SLACK_S)
        except GetTimeoutError:
            ray.cancel(ref, force=True)
            raise TaskFailed(
                f"the verification took longer than the {self.limits.timeout_s:g} s time budget"
            ) from None
        except RayError as e:
            raise TaskFailed(f"the verifier died on the cluster ({type(e).__name__})") from None
        if out.get("error") in ("over_budget", "verifier_died"):
            raise TaskFailed(out["message"], out["error"])
        if "report" in out:
            out["report"] = VerifyReport(**out["report"])
        return out


#: Seconds a Ray task may take beyond its time budget to start its verifier process.
RAY_START_SLACK_S = 300.0
#: How often Ray re-runs a verification whose worker died (a killed process, a lost node).
RAY_TASK_RETRIES = 2
