"""The server's verifier: a bounded pool of worker processes (:mod:`rally_env.replay.workers`)
fed from the persisted queue (``docs/server.md``, "How a run is verified").
"""

from __future__ import annotations

import logging
import threading
from typing import Any

from rally_env.replay.workers import RayWorker, TaskFailed, TaskLimits, Worker
from rally_env.server.store import CHECK_HERE

log = logging.getLogger("rally_env.server")


class Verifier:
    """N threads draining the store's queue, each with one worker process, or with
    ``ray_address`` each sending its runs to a Ray cluster, one task per run (the server's
    own machine then only queues and serves)."""

    def __init__(
        self, store: Any, workers: int, limits: TaskLimits, ray_address: str | None = None
    ):
        self.store = store
        self.n = int(workers)
        self.limits = limits
        self.ray_address = ray_address
        self.wake = threading.Event()
        self.stopping = threading.Event()
        self.threads: list[threading.Thread] = []
        self.workers: list[Worker] = []
        self.tracer = Worker(limits)  # :meth:`trace`'s, started on first use
        self.trace_lock = threading.Lock()
        self.lease_s = limits.timeout_s + 10.0

    def start(self) -> None:
        if self.ray_address is not None and self.n:
            from rally_env.cluster import connect

            connect(self.ray_address)
        for i in range(self.n):
            w = Worker(self.limits) if self.ray_address is None else RayWorker(self.limits)
            self.workers.append(w)
            t = threading.Thread(target=self._loop, args=(w,), name=f"verifier-{i}", daemon=True)
            self.threads.append(t)
            t.start()

    def notify(self) -> None:
        self.wake.set()

    def stop(self) -> None:
        self.stopping.set()
        self.wake.set()
        for w in [*self.workers, self.tracer]:
            w.stop()
        for t in self.threads:
            t.join(10)

    def _loop(self, w: Worker) -> None:
        while not self.stopping.is_set():
            if not w.alive():  # (re)start before claiming: a run never waits on a dead worker
                try:
                    w.start()
                except Exception:
                    log.exception("a verification worker failed to start")
                    self.stopping.wait(5.0)
                    continue
                cost = getattr(w, "cost", None)
                log.info(
                    "verification worker %s ready (a default run here: %s)",
                    getattr(w, "pid", "-"),
                    "not measured"
                    if cost is None
                    else f"{cost[0]:.2f} s to set up, {cost[1] * 1e3:.3f} ms a step",
                )
            try:
                job = self.store.claim(self.lease_s)
            except Exception:
                log.exception("claiming a queued run failed")
                job = None
                self.stopping.wait(1.0)
            if job is None:
                self.wake.wait(0.5)
                self.wake.clear()
                continue
            sub_id, blob = job
            try:
                out = w.call("verify", blob)
                if "error" in out:
                    self.store.fail(
                        sub_id,
                        "verifier_error",
                        out.get("message", out["error"]),
                        keep_upload=True,
                    )
                else:
                    self.store.finish(
                        sub_id,
                        out["report"],
                        out.get("blob"),
                        out.get("trace"),
                        out.get("stage_name_problem", CHECK_HERE),
                    )
            except TaskFailed as e:
                if self.stopping.is_set():
                    return  # killed by stop(): the run stays verifying, a restart retakes it
                if e.reason == "verifier_died":  # the verifier's failure, not the run's
                    status = self.store.requeue(sub_id, str(e))
                    log.warning("verifying %s: %s; %s", sub_id, e, status or "gone")
                    self.wake.set()
                else:
                    self.store.fail(sub_id, e.reason, str(e))
            except Exception:
                if self.stopping.is_set():
                    return
                log.exception("verifying %s failed", sub_id)
                self.stopping.wait(1.0)

    def trace(self, blob: bytes) -> bytes:
        """The trace of a stored run that has none cached, re-simulated in the verifier's
        own worker (stopped with it)."""
        with self.trace_lock:
            out = self.tracer.call("trace", blob, "<stored run>")
        if "trace" not in out:
            raise TaskFailed(out.get("message", "trace failed"), out.get("error", "internal"))
        return out["trace"]
