"""Load test of ``rally serve`` on 127.0.0.1 (bounded: it stops by itself).

N submissions from C concurrent clients (each with its own token; each client uploads a run,
waits for its verdict, uploads the next), honest and tampered runs mixed. Checks that every
honest run is accepted, every tampered one rejected, and that no row is lost or duplicated
(the board holds exactly the honest runs, once each); prints the upload-to-verdict latency
(p50, p99), the throughput and the peak resident memory of the server with its workers.

    python3 benchmarks/server_load.py                       # 200 submissions, 20 clients
    python3 benchmarks/server_load.py --postgres            # on a throwaway PostgreSQL
    python3 benchmarks/server_load.py --submissions 40 --clients 8   # quick
    python3 benchmarks/server_load.py --hostile 0.1 --kill-worker    # under attack and a fault

``--hostile F``: that share of the submissions are attacks (the theft of an honest run with a
free setting changed, a run on a straight named like a generated stage, the pool bomb), each
must be rejected; ``--kill-worker``: one verification worker is killed (SIGKILL) while it
verifies, once half the verdicts are in: its run must still be accepted once. The upload to
verdict latency is printed for the honest runs alone, to compare with a run without them.

Exit code 0 if every check holds, 1 otherwise. Needs the server extra; runs from the
repository root. The runs and the load itself come from tests/server/support.py
(``load_mix``, ``run_load``), shared with the bounded test tests/server/test_load.py.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
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
    ap.add_argument("--hostile", type=float, default=0.0, help="fraction of attacks (0)")
    ap.add_argument("--kill-worker", action="store_true", help="SIGKILL a busy worker midway")
    ap.add_argument("--postgres", action="store_true", help="a throwaway PostgreSQL, not SQLite")
    ap.add_argument("--max-seconds", type=float, default=1500.0, help="give up after this")
    args = ap.parse_args()
    if args.submissions < 1 or args.clients < 1 or not 0 <= args.tampered <= 1:
        ap.error("--submissions and --clients >= 1, --tampered in [0, 1]")
    if not 0 <= args.hostile <= 1 - args.tampered:
        ap.error("--hostile in [0, 1 - tampered]")

    from tests.server.support import Postgres, load_mix, run_load

    n_t = round(args.submissions * args.tampered)
    n_x = round(args.submissions * args.hostile)
    n_h = args.submissions - n_t - n_x
    t0 = time.perf_counter()
    try:
        items, honest_ids = load_mix(n_h, n_t, n_hostile=n_x)
    except RuntimeError as e:
        print(e)
        return 1
    print(f"recorded {len(honest_ids)} honest runs in {time.perf_counter() - t0:.0f} s", flush=True)

    pg = Postgres().start() if args.postgres else None
    tmp = tempfile.mkdtemp(prefix="rally-load-")
    db = pg.url if pg else os.path.join(tmp, "board.sqlite3")
    try:
        res = run_load(
            db,
            items,
            honest_ids,
            args.clients,
            workers=args.workers,
            max_seconds=args.max_seconds,
            kill_worker_after=args.submissions // 2 if args.kill_worker else None,
        )
    finally:
        if pg is not None:
            pg.stop()
        shutil.rmtree(tmp, ignore_errors=True)

    lat = np.array([r[3] for r in res.results])
    honest_lat = np.array([r[3] for r in res.results if r[0] == "honest"])
    load = os.getloadavg()
    print(
        f"\n{args.submissions} submissions ({n_h} honest, {n_t} tampered, {n_x} attacks) from "
        f"{args.clients} "
        f"clients, {args.workers} workers, {'PostgreSQL' if pg else 'SQLite'}; "
        f"load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f} on {os.cpu_count()} cores"
    )
    if len(lat):
        print(
            f"upload to verdict: p50 {np.percentile(lat, 50):.2f} s, p99 "
            f"{np.percentile(lat, 99):.2f} s, max {lat.max():.2f} s; wall {res.wall_s:.1f} s "
            f"({len(res.results) / res.wall_s:.2f} verdicts/s)"
        )
    if len(honest_lat):
        print(
            f"honest runs, upload to verdict: p50 {np.percentile(honest_lat, 50):.2f} s, p99 "
            f"{np.percentile(honest_lat, 99):.2f} s"
        )
    if res.killed:
        print(f"killed worker {res.killed[0]} (SIGKILL) after {args.submissions // 2} verdicts")
    print(f"peak memory (server + workers, RSS): {res.peak_mb:.0f} MiB")
    reasons: dict[str, int] = {}
    for kind, s, why, _ in res.results:
        key = f"{kind} {s}:{why or '-'}"
        reasons[key] = reasons.get(key, 0) + 1
    print("verdicts:", ", ".join(f"{k} {v}" for k, v in sorted(reasons.items())))
    for e in res.errors[:5]:
        print("  ", e)
    for name, ok in res.checks.items():
        print(f"  [{'ok' if ok else 'FAILED'}] {name}")
    return 0 if not res.failed() else 1


if __name__ == "__main__":
    sys.exit(main())
