"""Load test of ``rally serve`` on 127.0.0.1 (bounded: it stops by itself).

N submissions from C concurrent clients (each with its own token; each client uploads a run,
waits for its verdict, uploads the next), honest and tampered runs mixed. Checks that every
honest run is accepted, every tampered one rejected, and that no row is lost or duplicated
(the board holds exactly the honest runs, once each); prints the upload-to-verdict latency
(p50, p99), the throughput and the peak resident memory of the server with its workers.

    python3 benchmarks/server_load.py                       # 200 submissions, 20 clients
    python3 benchmarks/server_load.py --postgres            # on a throwaway PostgreSQL
    python3 benchmarks/server_load.py --submissions 40 --clients 8   # quick

Exit code 0 if every check holds, 1 otherwise. Needs the server extra; runs from the
repository root (it uses the test suite's helpers to record runs and start the server).
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--submissions", type=int, default=200)
    ap.add_argument("--clients", type=int, default=20)
    ap.add_argument("--workers", type=int, default=2, help="server verification processes")
    ap.add_argument("--tampered", type=float, default=0.5, help="fraction tampered (0.5)")
    ap.add_argument("--postgres", action="store_true", help="a throwaway PostgreSQL, not SQLite")
    ap.add_argument("--max-seconds", type=float, default=1500.0, help="give up after this")
    args = ap.parse_args()
    if args.submissions < 1 or args.clients < 1 or not 0 <= args.tampered <= 1:
        ap.error("--submissions and --clients >= 1, --tampered in [0, 1]")

    import httpx

    from tests.rally_env.test_replay_support import record_run
    from tests.server.conftest import faster, tampered_action
    from tests.server.support import Postgres, Server, add_token, submit

    n_t = round(args.submissions * args.tampered)
    n_h = args.submissions - n_t
    t0 = time.perf_counter()
    honest: list[tuple[bytes, str]] = []
    seen: set[str] = set()
    want = max(n_h, 1 if n_t else 0)
    i = 0
    while len(honest) < want and i < 4 * want + 10:  # distinct finished runs
        r, _ = record_run(seed=i, vmax=11.0 + 5.0 * i / max(want, 1))
        i += 1
        if r.finished and r.run_id() not in seen:
            seen.add(r.run_id())
            honest.append((r.to_bytes(compress=True), r.run_id()))
    if len(honest) < want:
        print(f"could record only {len(honest)} distinct finished runs of {want}")
        return 1
    print(f"recorded {len(honest)} honest runs in {time.perf_counter() - t0:.0f} s", flush=True)
    rng = np.random.default_rng(0)
    items: list[tuple[str, bytes]] = [("honest", d) for d, _ in honest[:n_h]]
    for k in range(n_t):
        src = honest[k % len(honest)][0]
        if k % 2:
            items.append(("tampered", faster(src)))
        else:
            items.append(("tampered", tampered_action(src, int(rng.integers(50, 1500)))))
    order = rng.permutation(len(items))
    items = [items[j] for j in order]

    pg = Postgres().start() if args.postgres else None
    tmp = tempfile.mkdtemp(prefix="rally-load-")
    db = pg.url if pg else os.path.join(tmp, "board.sqlite3")
    tokens = [add_token(db, f"client{c}") for c in range(args.clients)]
    server = Server(
        db,
        "--workers",
        str(args.workers),
        "--max-queue",
        str(args.submissions + 10),
        "--token-rate",
        "100000/60",
        "--address-rate",
        "100000/60",
        "--log-level",
        "warning",
    ).start()
    deadline = time.monotonic() + args.max_seconds
    peak = [server.rss_mb()]
    done = threading.Event()

    def sample() -> None:
        while not done.wait(0.2):
            peak[0] = max(peak[0], server.rss_mb())

    results: list[tuple[str, str, str, float]] = []  # kind, status, reason, latency
    errors: list[str] = []
    lock = threading.Lock()

    def client(c: int) -> None:
        mine = items[c :: args.clients]
        with httpx.Client(base_url=server.url, timeout=60) as h:
            for kind, data in mine:
                if time.monotonic() > deadline:
                    return
                t = time.perf_counter()
                r = submit(server.url, tokens[c], data)
                if r.status_code != 202:
                    with lock:
                        errors.append(f"upload: HTTP {r.status_code} {r.text[:200]}")
                    continue
                sub = r.json()["id"]
                while time.monotonic() < deadline:
                    d = h.get(f"/api/v1/runs/{sub}").json()
                    if d["status"] in ("accepted", "rejected"):
                        with lock:
                            results.append(
                                (kind, d["status"], d["reason"], time.perf_counter() - t)
                            )
                        break
                    time.sleep(0.05)

    mon = threading.Thread(target=sample, daemon=True)
    mon.start()
    t_run = time.perf_counter()
    try:
        threads = [threading.Thread(target=client, args=(c,)) for c in range(args.clients)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        wall = time.perf_counter() - t_run
        done.set()
        counts = httpx.get(server.url + "/api/v1/health").json()
        board = httpx.get(server.url + "/api/v1/boards/opener?limit=100&rules=all").json()
        board_ids = [e["run_id"] for e in board["entries"]]
        alive = server.alive()
    finally:
        done.set()
        server.stop()
        integrity = None
        if pg is None:
            import sqlite3

            with sqlite3.connect(db) as conn:
                integrity = conn.execute("PRAGMA integrity_check").fetchone()[0]
                n_sub = conn.execute("SELECT COUNT(*) FROM submissions").fetchone()[0]
                dup = conn.execute("SELECT COUNT(*) - COUNT(DISTINCT run_id) FROM runs").fetchone()[
                    0
                ]
        else:
            from rally_env.server.store import open_store

            st = open_store(db)
            integrity = st.integrity_check()
            n_sub = sum(st.counts()[k] for k in ("queued", "verifying", "accepted", "rejected"))
            dup = 0
            st.close()
            pg.stop()

    import shutil

    shutil.rmtree(tmp, ignore_errors=True)
    lat = np.array([r[3] for r in results])
    h_ok = sum(1 for k, s, _, _ in results if k == "honest" and s == "accepted")
    t_ok = sum(1 for k, s, _, _ in results if k == "tampered" and s == "rejected")
    want_ids = {rid for _, rid in honest[:n_h]}
    checks = {
        "every honest run accepted": h_ok == n_h,
        "every tampered run rejected": t_ok == n_t,
        "a verdict for every submission": len(results) == args.submissions,
        "no row lost or duplicated": n_sub == args.submissions
        and counts["runs"] == n_h
        and dup == 0
        and (n_h > 100 or set(board_ids) == want_ids),
        "no upload refused": not errors,
        "integrity check ok": integrity == "ok",
        "server stayed up": alive,
    }
    load = os.getloadavg()
    print(
        f"\n{args.submissions} submissions ({n_h} honest, {n_t} tampered) from {args.clients} "
        f"clients, {args.workers} workers, {'PostgreSQL' if pg else 'SQLite'}; "
        f"load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f} on {os.cpu_count()} cores"
    )
    if len(lat):
        print(
            f"upload to verdict: p50 {np.percentile(lat, 50):.2f} s, p99 "
            f"{np.percentile(lat, 99):.2f} s, max {lat.max():.2f} s; wall {wall:.1f} s "
            f"({len(results) / wall:.2f} verdicts/s)"
        )
    print(f"peak memory (server + workers, RSS): {peak[0]:.0f} MiB")
    reasons: dict[str, int] = {}
    for _, s, why, _ in results:
        reasons[f"{s}:{why or '-'}"] = reasons.get(f"{s}:{why or '-'}", 0) + 1
    print("verdicts:", ", ".join(f"{k} {v}" for k, v in sorted(reasons.items())))
    for e in errors[:5]:
        print("  ", e)
    for name, ok in checks.items():
        print(f"  [{'ok' if ok else 'FAILED'}] {name}")
    return 0 if all(checks.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
