"""Hostile-input benchmark: what each crafted input of issue 14 costs, each in a fresh process.

    python3 benchmarks/hostile.py [--rounds 2] [--only NAME,...] [--timeout 600]

The crafted replays are ``tests/rally_env/hostile_replays.py`` (``CRAFTED``), the other files
and states ``tests/hostile.py``: the same builders the tests use. For each input a child
process (``python3 benchmarks/hostile.py --child ...``) imports the package, then runs the
verifier (``load_replay`` + ``verify_replay``, what ``rally verify`` runs), the stage or vehicle
loader, ``set_state``, the env constructor or an episode on it, and reports its verdict. Printed
per input:

- the verdict (status and reason, or the typed error);
- ``peak MB``: the child's peak RSS (``VmHWM``), imports and compiled physics included
  (``base MB``: the peak before the verification started);
- ``work s``: wall and CPU time of the verification (or load, or episode) inside the child;
  ``proc s``: the child's whole CPU time (imports and numba cache loading included);
- for replays, ``ref s``: the CPU time of verifying an *honest twin*, an honest run recorded
  with the same settings, reset and claimed length (``hostile_replays.honest_twin``); a file
  refused before its settings are built has no twin, and is compared with the honest opener
  run (1,790 steps), less work than any of them claims. ``x ref`` is work CPU / ref CPU.

The target: no replay under 32 MiB costs more than 1 GB of memory or more than 2x the
re-simulation time of an honest run of its claimed length; a row that misses it is marked
``MISS``. The rows of item ``t`` are attacks on a leaderboard's trust and faults around it
(``tests/rally_env/hostile_replays.py``'s ``stolen``, ``spoofed_gen_stage``, ``pool_bomb``,
``pool_at_bound``, and the server's and the compiler's faults, each run for real in the
child); their replays are compared with a *default-settings* run of the same step count, and
a verdict that lets a forgery through, loses a run or shows a traceback is marked ``FAIL``.
With ``--rounds N`` the inputs run in N interleaved rounds, best time of each (and the
largest peak RSS). It never asserts; it also writes ``out/bench_hostile.json``.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import resource
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
# as the server's verifiers run: no prefetch process generating stages ahead (its CPU would
# not count)
os.environ.setdefault("RALLY_PREFETCH", "0")

MB = 1024 * 1024
TARGET_RSS_MB = 1000.0
TARGET_RATIO = 2.0


# ------------------------------------------------------------------------ the child side
def _vm_hwm_kb() -> int:
    """This process's peak RSS since its exec (``VmHWM``; ``ru_maxrss`` would include the
    parent's memory at the fork)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1])
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss


def _child(action: str, path: str, arg: str) -> dict[str, Any]:
    """Run one hostile input in this (fresh) process; the verdict as a short string."""
    import numpy as np

    import rally_env
    import tracks
    from physics.vehicles import VehicleDefError, load_vehicle, vehicle_from_dict
    from rally_env.replay import ReplayError, load_replay, verify_replay
    from tracks.errors import StageError

    env = state = None
    if action == "state":
        from physics import layout as L
        from rally_env import kernels as K
        from tests.hostile import edited_state, set_cell

        env = rally_env.RallyEnv(stage="opener", randomize=arg == "draws")
        env.reset(seed=0)
        for _ in range(40):
            env.step(np.array([0.2, 1.0, 0.0, 0.0], np.float32))
        good = env.get_state()
        edits = {
            "nan_position": ("sim_state", set_cell(L.POS_X, np.nan)),
            "nan_param": ("sim_params", set_cell(L.P_MASS, np.nan)),
            "next_line": ("eistate", set_cell(K.EI_NEXT_LINE, 99)),
            "draws": ("draws", lambda d: d.__setitem__(slice(None), [42])),
        }
        state = edited_state(good, *edits[arg])
    vehicle_doc = json.loads(Path(path).read_text()) if action == "vehicle" else None
    if action == "board":  # the honest run is on the board before the clock starts
        from rally_env.replay import replay_from_bytes
        from rally_env.replay.leaderboard import Leaderboard
        from tests.rally_env.hostile_replays import HONEST

        lb = Leaderboard(Path(tempfile.mkdtemp(prefix="rally-board-")) / "b.sqlite3")
        lb.add(replay_from_bytes(HONEST.read_bytes()), player="ada")
    r0 = _vm_hwm_kb()
    t0, c0 = time.perf_counter(), time.process_time()
    try:
        if action == "verify":
            rep = verify_replay(load_replay(path))
            verdict = f"{rep.status} {rep.reason}".strip()
            if rep.accepted:
                verdict += f" ({rep.stage}, {rep.end_reason or 'partial'}, {rep.steps} steps)"
        elif action == "board":  # item t1/t2: a forgery through a board
            from rally_env.replay import load_replay
            from rally_env.replay.leaderboard import LeaderboardError

            try:
                entry, _ = lb.add(load_replay(path), player="mallory")
                on_board = [e.player for e in lb.best(entry.stage)]
                verdict = (
                    f"filed {entry.stage}; its board holds {on_board}"
                    if "mallory" not in on_board
                    else f"FORGERY ACCEPTED on {entry.stage}: {on_board}"
                )
            except LeaderboardError as e:
                verdict = f"refused {e.reason}: {str(e)[:60]}"
        elif action == "fault":
            verdict = _fault(arg, Path(path))
        elif action == "stage":
            st = tracks.load_stage(path)
            verdict = f"loaded ({len(st.knots)} knots)"
        elif action == "vehicle":
            vehicle_from_dict(vehicle_doc, "v.toml")
            verdict = "loaded"
        elif action == "bake":  # every node of the replay's stage, as if the car went everywhere
            from rally_env.replay import replay_from_bytes
            from rally_env.replay.resim import settings_of
            from rally_env.stages import stage_terrain

            args, _ = settings_of(replay_from_bytes(Path(path).read_bytes(), path))
            t = stage_terrain(args["stage"]).to_terrain()
            verdict = f"baked {t.heights_m.size:,} nodes"
        elif action == "vehicle_file":
            load_vehicle(path)
            verdict = "loaded"
        elif action == "state":
            try:
                env.set_state(state)
                verdict = "accepted"
            finally:
                obs, *_ = env.step(np.array([0.0, 1.0, 0.0, 0.0], np.float32))
                verdict_step = "finite" if np.isfinite(obs).all() else "NON-FINITE"
        elif action == "random_stage":
            rally_env.RallyEnv(stage="random", random_stage={"length_m": float(arg)}).reset(seed=0)
            verdict = "built"
        elif action == "episode":
            from rally_env.info import checkpoint_times, end_reason

            env = rally_env.RallyEnv(stage=path, control_hz=int(arg))
            env.reset(seed=0)
            for _ in range(100_000):
                _, _, term, trunc, info = env.step(np.array([0.0, 1.0, 0.0, 0.0], np.float32))
                if term or trunc:
                    break
            n_cp = len(checkpoint_times(info))
            verdict = f"{end_reason(info)} {float(info['finish_time_s']):.3f} s, {n_cp} splits"
        else:
            raise SystemExit(f"unknown action {action!r}")
    except (ReplayError, StageError, VehicleDefError, rally_env.RallyEnvError, ValueError) as e:
        msg = str(e).split("\n")[0]
        verdict = f"{type(e).__name__}: {msg[:70]}"
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    if action == "state":
        verdict += f"; next step {verdict_step}"
    return {
        "verdict": verdict,
        "work_wall": wall,
        "work_cpu": cpu,
        "rss_before_mb": r0 / 1024,
        "peak_mb": _vm_hwm_kb() / 1024,
    }


def _fault(kind: str, tmp: Path) -> str:
    """Item t4-t10: a fault of the server or the compiler, made for real; the verdict."""
    import signal
    import sqlite3

    from tests.rally_env.hostile_replays import HONEST

    if kind == "verifier_killed":  # t4: SIGKILL of the busy verification worker
        from rally_env.replay.workers import TaskLimits
        from rally_env.server.pool import Verifier
        from rally_env.server.store import SQLiteStore

        st = SQLiteStore(tmp / "k.sqlite3")
        v = Verifier(st, 1, TaskLimits())
        v.start()
        w = v.workers[0]
        while not w.pid:  # started and calibrated
            time.sleep(0.05)
        os.kill(w.pid, signal.SIGSTOP)
        sub = st.submit(HONEST.read_bytes(), 1, "-", "ada", 10)
        v.notify()
        while st.submission(sub)["status"] != "verifying":
            time.sleep(0.02)
        os.kill(w.pid, signal.SIGKILL)
        while st.submission(sub)["status"] in ("queued", "verifying"):
            time.sleep(0.05)
        d = st.submission(sub)
        v.stop()
        return f"{d['status']} {d['reason']} after a SIGKILL (requeued)".replace("  ", " ")
    if kind == "db_locked":  # t5: another writer holds the SQLite file
        from rally_env.server.store import SQLiteStore, StoreBusy

        st = SQLiteStore(tmp / "l.sqlite3")
        tok = st.add_token("ada")
        other = sqlite3.connect(tmp / "l.sqlite3", isolation_level=None)
        other.execute("BEGIN IMMEDIATE")
        other.execute("UPDATE tokens SET name = name")
        t0 = time.perf_counter()
        st.counts(), st.best("opener", None, None, 5), st.token_id(tok)
        t_read = time.perf_counter() - t0
        t0 = time.perf_counter()
        try:
            st.submit(b"{}", 1, "-", "ada", 10)
            write = "WRITE WENT THROUGH"
        except StoreBusy:
            write = f"write StoreBusy (503) after {time.perf_counter() - t0:.1f} s"
        other.execute("ROLLBACK")
        return f"reads {t_read * 1e3:.0f} ms; {write}"
    if kind == "http":  # t6/t10: multipart, other types, query strings, page errors
        try:
            from fastapi.testclient import TestClient
        except ImportError:
            return "skipped (no server extra)"
        from rally_env.server.app import ServerConfig, create_app
        from rally_env.server.store import SQLiteStore

        st = SQLiteStore(tmp / "h.sqlite3")
        auth = {"Authorization": f"Bearer {st.add_token('ada')}"}
        c = TestClient(create_app(st, ServerConfig(workers=0)))
        data = HONEST.read_bytes()
        got = [
            c.post("/api/v1/runs", headers=auth, files={"file": ("r.rrp.json.gz", data)}),
            c.post("/api/v1/runs", headers={**auth, "Content-Type": "text/plain"}, content=data),
            c.post("/api/v1/runs?player=%FF%FE", headers=auth, content=data),
            c.post("/api/v1/runs?player=%ED%A0%80", headers=auth, content=data),
            c.post("/api/v1/runs?player=x&player=y", headers=auth, content=data),
            c.get("/stages/opener?rules=bad"),
        ]
        codes = [r.status_code for r in got]
        html = got[-1].headers["content-type"].startswith("text/html")
        queued = st.counts()["queued"]
        want = [202, 415, 400, 400, 400, 400]
        ok = codes == want and html and queued == 1
        return ("ok " if ok else "FAIL ") + f"{codes}, page html={html}, queued {queued}"
    if kind == "held_lock":  # t7: another process's claim on a kernel held for ever
        from rally_env import precompile as P

        fd = P._claim("serial", 0)
        P._others.add("serial")  # what start() records when it finds the worker's lock held
        t0 = time.perf_counter()
        P.wait()
        P._unlock(fd)
        return (
            f"env start went on after {time.perf_counter() - t0:.2f} s "
            f"(at most {P.KERNEL_COMPILE_S:.0f} s for the held claim)"
        )
    if kind == "cache_truncated":  # t8: a truncated numba cache entry
        mod = "from physics.jit import njit\n@njit(cache=True)\ndef f(x):\n    return x + 1\n"
        (tmp / "cachemod.py").write_text(mod)
        env = dict(os.environ, NUMBA_CACHE_DIR=str(tmp / "cache"))
        env["PYTHONPATH"] = f"{tmp}{os.pathsep}{ROOT}"
        run = "from rally_env import precompile as P\nimport cachemod\n"
        code = [sys.executable, "-c", run + "print(P.cache_safe(cachemod.f, 1))"]
        first = subprocess.run(code, capture_output=True, text=True, env=env)
        for p in (tmp / "cache").rglob("*.nb*"):
            p.write_bytes(p.read_bytes()[: p.stat().st_size // 3])
        broken = subprocess.run(code, capture_output=True, text=True, env=env)
        after = subprocess.run(code, capture_output=True, text=True, env=env)
        said = (broken.stderr.strip().splitlines() or [""])[-1]
        ok = (
            [first.stdout.strip(), broken.stdout.strip(), after.stdout.strip()] == ["2"] * 3
            and "compiling it again" in said
            and not after.stderr.strip()
        )
        return "compiled again, same result, entry rewritten" if ok else "FAIL: " + said[:120]
    if kind == "orphans":  # t9: the env process killed while its workers compile
        from rally_env import precompile as P

        fd = P._try_lock(P._lock_path("serial"))  # the worker waits for it: busy
        parent = subprocess.Popen(
            [
                sys.executable,
                "-c",
                "import os, time; from rally_env import precompile as P; "
                "print(P._spawn('serial').pid, flush=True); time.sleep(600)",
            ],
            stdout=subprocess.PIPE,
            text=True,
            env=dict(os.environ, PYTHONPATH=str(ROOT)),
        )
        worker = int(parent.stdout.readline())
        time.sleep(1.0)
        parent.kill()
        parent.wait()
        t0 = time.perf_counter()
        while Path(f"/proc/{worker}").exists() and time.perf_counter() - t0 < 30:
            state = Path(f"/proc/{worker}/stat").read_text().rsplit(")", 1)[1].split()[0]
            if state in ("Z", "X"):
                break
            time.sleep(0.05)
        P._unlock(fd)
        dt = time.perf_counter() - t0
        return f"worker gone {dt:.2f} s after its parent" if dt < 30 else "ORPHAN left running"
    raise SystemExit(f"unknown fault {kind!r}")


# ----------------------------------------------------------------------- the parent side
def _run_child(action: str, path: str, arg: str, timeout: float) -> dict[str, Any]:
    """One child process: its report (verdict, work time, peak RSS) plus its wall and CPU time
    (``os.wait4``)."""
    cmd = [sys.executable, str(Path(__file__).resolve()), "--child", action, path, arg]
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    t0 = time.perf_counter()
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
    killed = []
    timer = threading.Timer(timeout, lambda: (killed.append(1), p.kill()))
    timer.start()
    out, err = p.stdout.read(), p.stderr.read()
    _, status, ru = os.wait4(p.pid, 0)
    timer.cancel()
    p.returncode = os.waitstatus_to_exitcode(status)
    res: dict[str, Any] = {
        "peak_mb": float("nan"),
        "rss_before_mb": float("nan"),
        "proc_wall": time.perf_counter() - t0,
        "proc_cpu": ru.ru_utime + ru.ru_stime,
        "exit": p.returncode,
    }
    lines = out.decode(errors="replace").strip().splitlines()
    if killed:
        res.update(
            verdict=f"TIMEOUT after {timeout:g} s", work_wall=timeout, work_cpu=res["proc_cpu"]
        )
    elif p.returncode != 0 or not lines:
        tail = err.decode(errors="replace").strip().splitlines()[-1:] or ["no output"]
        res.update(verdict=f"CRASH exit {p.returncode}: {tail[0][:80]}", work_wall=0, work_cpu=0)
    else:
        res.update(json.loads(lines[-1]))
    return res


def _inputs(tmp: Path) -> list[dict[str, Any]]:
    """Every hostile input as (name, item, action, path, arg, size, twin path)."""
    import tracks
    from tests.hostile import (
        NON_FINITE_VEHICLE_EDITS,
        hostile_stage_texts,
        knots_toml,
        straight_stage,
        vehicle_doc,
        with_value,
    )
    from tests.rally_env.hostile_replays import CRAFTED, honest_doc, honest_twin
    from tracks.io import MAX_FILE_BYTES as STAGE_MAX

    items = {
        "honest": "ref",
        "stage_renamed": "1",
        "faster_claim": "1",
        "render_human": "2",
        "gen_path": "3",
        "gen_dev_zero": "3",
        "deep_nesting": "6",
        "huge_int": "6",
    }
    doc = honest_doc()
    out: list[dict[str, Any]] = []
    twins: dict[bytes, str] = {}

    def add(name, item, action, path, arg="", twin=None):
        p = Path(path)
        size = p.stat().st_size if p.is_file() else 0
        out.append(
            {
                "name": name,
                "item": item,
                "action": action,
                "path": str(path),
                "arg": arg,
                "size": size,
                "twin": twin,
            }
        )

    for name, (make, _, _) in CRAFTED.items():
        data = make(doc)
        p = tmp / f"{name}.rrp.json.gz"
        p.write_bytes(data)
        twin = honest_twin(data)
        twin_path = None
        if twin is not None:
            if twin not in twins:
                twins[twin] = str(tmp / f"twin-{len(twins)}-{name}.rrp.json.gz")
                Path(twins[twin]).write_bytes(twin)
            twin_path = twins[twin]
        add(name, items.get(name, "4"), "verify", p, twin=twin_path)
    # item 4: the terrain a replay inside the budgets can make the verifier bake, all of it
    add("whole_terrain_in_budget", "4", "bake", tmp / "diagonal_stage_in_budget.rrp.json.gz")
    # item 4/5: files the reader must refuse before parsing them
    p = tmp / "whitespace.rrp.json"
    p.write_bytes(b" " * (32 * MB + 1))
    add("replay_over_32MiB", "4", "verify", p)
    p = tmp / "gzip_bomb.rrp.json.gz"
    p.write_bytes(gzip.compress(b" " * (256 * MB), 9))
    add("replay_gzip_bomb", "4", "verify", p)
    fifo = tmp / "fifo.rrp.json.gz"
    os.mkfifo(fifo)
    add("replay_fifo", "5", "verify", fifo)
    add("replay_dev_zero", "5", "verify", "/dev/zero")
    sfifo = tmp / "fifo-stage.toml"
    os.mkfifo(sfifo)
    add("stage_fifo", "5", "stage", sfifo)
    add("stage_dev_zero", "5", "stage", "/dev/zero")
    base = tracks.dumps_stage(tracks.load_stage("opener"))
    p = tmp / "knots-at-size-cap.toml"
    p.write_text(knots_toml(base, STAGE_MAX))
    add("stage_knots_at_size_cap", "5", "stage", p)
    p = tmp / "over-size-cap.toml"
    p.write_text(knots_toml(base, 4 * STAGE_MAX))
    add("stage_over_size_cap", "5", "stage", p)
    # items 7-8: set_state
    for edit in ("nan_position", "nan_param", "next_line", "draws"):
        add(f"state_{edit}", "8" if edit == "draws" else "7", "state", "-", edit)
    # item 9: vehicle files
    car = vehicle_doc("rally-car")
    p = tmp / "vehicle-400-digits.json"
    p.write_text(json.dumps(with_value(car, ("vehicle", "mass_kg"), 10**400)))
    add("vehicle_400_digits", "9", "vehicle", p)
    for path, value, word in NON_FINITE_VEHICLE_EDITS[:1] + NON_FINITE_VEHICLE_EDITS[4:5]:
        p = tmp / f"vehicle-{word}.json"
        p.write_text(json.dumps(with_value(car, path, value)))
        add(f"vehicle_{word}_{value:g}", "9", "vehicle", p)
    vfifo = tmp / "fifo-car.toml"
    os.mkfifo(vfifo)
    add("vehicle_fifo", "5", "vehicle_file", vfifo)
    add("vehicle_dev_zero", "5", "vehicle_file", "/dev/zero")
    # item 10: stage files
    for name, text in hostile_stage_texts(base).items():
        p = tmp / f"stage-{name}.toml"
        p.write_text(text)
        add(f"stage_{name}", "10", "stage", p)
    # item 11: a random stage that cannot be generated
    add("random_stage_20km", "11", "random_stage", "-", "20000")
    # item t: the leaderboard's trust under attack and faults
    from tests.rally_env.hostile_replays import (
        pool_at_bound,
        pool_bomb,
        spoofed_gen_stage,
        stolen,
    )
    from tests.rally_env.test_replay_support import record_run

    def default_twin(data: bytes) -> str:
        """An honest default-settings opener run as long as ``data`` claims."""
        from rally_env.replay import replay_from_bytes

        steps = replay_from_bytes(data).steps
        p = tmp / f"default-{steps}.rrp.json.gz"
        if not p.exists():
            run, _ = record_run(seed=0, max_steps=steps)
            p.write_bytes(run.to_bytes())
        return str(p)

    for name, make, action in (
        ("t1_stolen_run", lambda: stolen(doc), "board"),
        ("t2_spoofed_gen_5", lambda: spoofed_gen_stage("gen-5"), "board"),
        ("t3_pool_bomb", lambda: pool_bomb(doc), "verify"),
        ("t3_pool_at_bound", pool_at_bound, "verify"),
    ):
        data = make()
        p = tmp / f"{name}.rrp.json.gz"
        p.write_bytes(data)
        add(name, "t", action, p, twin=default_twin(data) if action == "verify" else None)
    for fault in (
        "verifier_killed",
        "db_locked",
        "http",
        "held_lock",
        "cache_truncated",
        "orphans",
    ):
        d = tmp / f"fault-{fault}"
        d.mkdir()
        add(f"t_{fault}", "t", "fault", d, fault)
    # item 12: timing lines inside one control step (episode, full throttle)
    for name, hz, cps in (
        ("lines_cp_0.5m_before_finish_10Hz", 10, (1149.5,)),
        ("lines_1000_cps_1m_apart_20Hz", 20, tuple(150.0 + i for i in range(1000))),
    ):
        p = tmp / f"{name}.toml"
        p.write_text(tracks.dumps_stage(straight_stage(1150.0, cps)))
        ref = tmp / f"{name}-ref.toml"
        ref.write_text(tracks.dumps_stage(straight_stage(1150.0)))
        add(name, "12", "episode", p, str(hz), twin=f"{ref}|{hz}")
    return out


def _fmt(x: float, nd: int = 2) -> str:
    return f"{x:.{nd}f}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--only", default="", help="comma-separated input names")
    ap.add_argument("--timeout", type=float, default=600.0)
    ap.add_argument("--child", nargs=3, metavar=("ACTION", "PATH", "ARG"), help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.child:
        print(json.dumps(_child(*a.child)))
        return
    if a.rounds < 1 or a.timeout <= 0:
        ap.error("--rounds must be >= 1 and --timeout > 0")
    with tempfile.TemporaryDirectory(prefix="rally-hostile-") as d:
        tmp = Path(d)
        cases = _inputs(tmp)
        if a.only:
            keep = set(a.only.split(","))
            cases = [c for c in cases if c["name"] in keep or c["name"] == "honest"]
        jobs: dict[str, tuple[str, str, str]] = {}
        for c in cases:
            jobs[c["name"]] = (c["action"], c["path"], c["arg"])
            if c["twin"]:
                if c["action"] == "episode":
                    ref, hz = c["twin"].split("|")
                    jobs["twin:" + c["twin"]] = ("episode", ref, hz)
                else:
                    jobs["twin:" + c["twin"]] = ("verify", c["twin"], "")
        best: dict[str, dict[str, Any]] = {}
        for _ in range(a.rounds):
            for key, job in jobs.items():  # interleaved: every input once per round
                r = _run_child(*job, a.timeout)
                b = best.setdefault(key, r)
                for k in ("work_wall", "work_cpu", "proc_wall", "proc_cpu"):
                    b[k] = min(b[k], r[k])
                b["peak_mb"] = max(b["peak_mb"], r["peak_mb"])
    honest = best["honest"]
    rows, misses = [], []
    head = (
        f"{'input':34} {'item':>4} {'size':>9} {'verdict':58} {'base/peak MB':>12} "
        f"{'work wall/cpu s':>15} {'proc cpu':>8} {'ref cpu':>7} {'x ref':>6}"
    )
    print(head)
    print("-" * len(head))
    for c in cases:
        r = best[c["name"]]
        ref = best.get("twin:" + c["twin"]) if c["twin"] else None
        replay = c["action"] == "verify"
        ref_cpu = ref["work_cpu"] if ref else (honest["work_cpu"] if replay else None)
        ratio = r["work_cpu"] / ref_cpu if ref_cpu else None
        miss = replay and c["size"] < 32 * MB and c["name"] != "honest"
        miss = miss and not (r["peak_mb"] <= TARGET_RSS_MB and (ratio or 0) <= TARGET_RATIO)
        bad = r["verdict"].startswith(("CRASH", "TIMEOUT", "FAIL")) or any(
            w in r["verdict"] for w in ("NON-FINITE", "FORGERY", "ORPHAN", "WENT THROUGH")
        )
        bad = bad or (c["name"] == "t_verifier_killed" and "accepted" not in r["verdict"])
        if miss or bad:
            misses.append(c["name"])
        size = f"{c['size'] / 1024:.1f}K" if c["size"] else "-"
        print(
            f"{c['name'][:34]:34} {c['item']:>4} {size:>9} {r['verdict'][:58]:58} "
            f"{r['rss_before_mb']:5.0f}/{r['peak_mb']:<6.0f} "
            f"{_fmt(r['work_wall']):>7}/{_fmt(r['work_cpu']):<7} "
            f"{_fmt(r['proc_cpu']):>8} {_fmt(ref_cpu) if ref_cpu else '-':>7} "
            f"{_fmt(ratio, 1) if ratio is not None else '-':>6}"
            + ("  MISS" if miss else "")
            + ("  FAIL" if bad else "")
        )
        rows.append({**c, **r, "ref_cpu": ref_cpu, "ratio": ratio, "miss": miss})
    for key, r in best.items():
        if key.startswith("twin:"):
            name = Path(key[5:].split("|")[0]).name
            print(
                f"  honest twin {name[:50]:50} {r['verdict'][:50]:50} {r['peak_mb']:6.0f} MB "
                f"{_fmt(r['work_wall'])}/{_fmt(r['work_cpu'])} s"
            )
    load = os.getloadavg()
    print(f"\nload average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}, {os.cpu_count()} cores")
    worst = max((x for x in rows if x["action"] == "verify"), key=lambda x: x["peak_mb"])
    print(f"largest peak RSS of a replay: {worst['name']} {worst['peak_mb']:.0f} MB")
    print("target missed or failure: " + (", ".join(misses) if misses else "none"))
    (ROOT / "out").mkdir(exist_ok=True)
    (ROOT / "out" / "bench_hostile.json").write_text(
        json.dumps({"rows": rows, "load": load}, indent=2, default=str)
    )


if __name__ == "__main__":
    main()
