"""Learning benchmark: PPO with the documented defaults on ``opener``.

Target (issue): after at most 1,000,000 environment steps and 20 minutes of wall time on the
2-core development machine, the policy finishes ``opener`` on every one of 10 evaluation seeds
with a stage time within 15 % of the heuristic driver's.

    python benchmarks/learning.py                       # 1e6 steps, seed 0, out/learning/
    python benchmarks/learning.py --timesteps 200000 --out out/learning-short

Prints the figures and writes ``OUT/learning.json``, ``OUT/learning_curve.png`` (median stage
time and finish rate of the periodic evaluations vs environment steps) and the run directory
``OUT/run`` (model, config.json, eval_log.csv, TensorBoard logs). It never asserts: it reports.
Note: on a fixed stage without domain randomization the env's reset is deterministic, so a
deterministic policy drives the same run on every seed (``--randomize`` evaluates with the
env's default domain randomization instead, where the seeds differ).
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--timesteps", type=int, default=1_000_000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--stage", default="opener")
    ap.add_argument("--eval-episodes", type=int, default=10)
    ap.add_argument("--randomize", action="store_true", help="evaluate with domain randomization")
    ap.add_argument("--out", default="out/learning")
    args = ap.parse_args(argv)

    from agents.evaluate import evaluate
    from agents.plots import curve_plot
    from agents.sb3 import PPO_DEFAULTS, train

    out = Path(args.out)
    run = out / "run"
    t0 = time.perf_counter()
    summary = train(
        "ppo", args.stage, timesteps=args.timesteps, seed=args.seed, out=run, progress_bar=False
    )
    wall = time.perf_counter() - t0
    seeds = list(range(10_000, 10_000 + args.eval_episodes))
    kw = {"randomize": True} if args.randomize else None
    heur = evaluate("heuristic", args.stage, seeds, env_kwargs=kw).stages[0]
    figures: dict[str, object] = {
        "stage": args.stage,
        "timesteps": summary["timesteps"],
        "train_wall_time_s": round(wall, 1),
        "ppo_defaults": PPO_DEFAULTS,
        "heuristic_median_s": heur.median_time_s,
        "reference_time_s": heur.reference_time_s,
    }
    for name in ("model", "best_model"):
        path = run / f"{name}.zip"
        if not path.exists():
            continue
        s = evaluate(str(path), args.stage, seeds, env_kwargs=kw).stages[0]
        gap = 100.0 * (s.median_time_s / heur.median_time_s - 1.0)
        figures[name] = {
            "finished": s.finished,
            "episodes": s.episodes,
            "median_time_s": s.median_time_s,
            "best_time_s": s.best_time_s,
            "gap_heuristic_pct": gap,
            "gap_reference_pct": s.gap_reference_pct,
            "meets_target": bool(
                s.finished == s.episodes
                and math.isfinite(gap)
                and gap <= 15.0
                and summary["timesteps"] <= 1_000_000
                and wall <= 1200.0
            ),
        }
    rows = list(csv.DictReader((run / "eval_log.csv").open()))
    steps = [float(r["timesteps"]) for r in rows]
    med = [float(r["median_time_s"]) for r in rows]
    fin = [float(r["finish_rate"]) for r in rows]
    ret = [float(r["ep_return"]) for r in rows]
    figures["curve"] = {
        "timesteps": steps,
        "median_time_s": med,
        "finish_rate": fin,
        "ep_return": ret,
    }
    out.mkdir(parents=True, exist_ok=True)
    curve_plot(
        [("PPO median stage time (s)", steps, med)],
        out / "learning_curve.png",
        f"PPO on {args.stage}: periodic evaluation (finish rate in learning_curve_finish.png)",
        "environment steps",
        "stage time (s)",
        hlines=[("heuristic", heur.median_time_s), ("reference", heur.reference_time_s)],
    )
    curve_plot(
        [("finish rate", steps, fin)],
        out / "learning_curve_finish.png",
        f"PPO on {args.stage}: finish rate of the periodic evaluation",
        "environment steps",
        "finish rate",
    )
    curve_plot(
        [("mean training episode return", steps, ret)],
        out / "learning_curve_return.png",
        f"PPO on {args.stage}: mean return of the last 100 training episodes",
        "environment steps",
        "return",
    )
    (out / "learning.json").write_text(json.dumps(figures, indent=2, default=lambda o: None) + "\n")
    print(
        json.dumps(
            {k: v for k, v in figures.items() if k != "curve"}, indent=2, default=lambda o: None
        )
    )
    print(f"wrote {out / 'learning.json'} and {out / 'learning_curve.png'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
