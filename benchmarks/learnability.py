"""What a standard algorithm learns on random stages, and what each default buys.

    python3 benchmarks/learnability.py ablate --timesteps 2000000 --out out/ablations
    python3 benchmarks/learnability.py ablate --variants hz20,crash20 ...   # some of them
    python3 benchmarks/learnability.py study --timesteps 2000000 --out out/study \
        [--unlimited-from RUN/checkpoints/ppo_2000000_steps.zip]
    python3 benchmarks/learnability.py curve RUN_DIR [--set default]       # checkpoints
    python3 benchmarks/learnability.py report out/ablations out/study
    python3 benchmarks/learnability.py plot RUN_DIR curve.png --test 2000000:22:0.0

``ablate`` trains ``rally train --algo ppo --stage random`` (``agents.sb3.train``) once per
variant, each with the same budget and seed (``--seed``): ``defaults`` (rally train's
defaults), each default reverted alone (leave-one-out: :data:`VARIANTS`), and ``old``
(every one reverted: the defaults before ``RallyLearn-v0``). Each run selects on the 50
validation stages and reports its final validation figures (finish rate, median score). A
variant whose ``summary.json`` exists is skipped, so a stopped chain resumes.

``study`` is the generalization study (Procgen's ``num_levels``): the same recipe (rally
train's defaults) trained on 10, 100 and 1,000 training stages (``random_stage =
{"num_levels": N}``) and on unlimited stages, the same budget each; each run's model at the
end of the budget is scored on the benchmark's 100 held-out default stages (``--unlimited-from
CKPT`` takes the unlimited point from a checkpoint of a defaults run at that step count).

``curve`` drives every checkpoint of a run on a benchmark set: the learning curve on the
held-out stages (finish rate and median score against env steps).

``report`` prints the Markdown tables (docs/benchmark.md) and writes ``study.png``.

It prints figures and never asserts them.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

#: The defaults before RallyLearn-v0 (what each leave-one-out variant puts back).
from agents.recipe import RECIPE_PPO_BASE  # noqa: E402  (rally train's PPO before RallyLearn-v0)

#: PPO's old rollout, epochs and network (the old noise is its own variant)
OLD_PPO = {
    **{k: RECIPE_PPO_BASE[k] for k in ("n_steps", "batch_size", "n_epochs")},
    "target_kl": None,
    "policy_kwargs": {"net_arch": RECIPE_PPO_BASE["policy_kwargs"]["net_arch"]},
}
#: variant -> (what it reverts, env_kwargs, hyperparams, n_envs, handbrake)
VARIANTS: dict[str, tuple[str, dict[str, Any], dict[str, Any], int | None, bool | None]] = {
    "defaults": ("nothing: rally train's defaults", {}, {}, None, None),
    "hz20": ("decisions at 20 Hz (control_hz 20)", {"control_hz": 20}, {}, None, None),
    "gamma099": ("discount 0.99 per decision", {}, {"gamma": 0.99}, None, None),
    # the first draft of the defaults had the block; its run is docs/benchmark.md's no_ahead
    "ahead": ("the road-ahead block added (600 m)", {"road_ahead": True}, {}, None, None),
    "ahead_apex": (
        "the road-ahead block and where each bin's corner lies (ahead_apex)",
        {"road_ahead": True, "ahead_apex": True},
        {},
        None,
        None,
    ),
    "crash20": ("crash cost 20", {"reward_weights": {"crash": 20.0}}, {}, None, None),
    "handbrake": ("a handbrake output", {}, {}, None, True),
    # the defaults' noise until 7 December (docs/benchmark.md's noise037 rows reverted to 0.37)
    "noise0135": (
        "exploration noise std 0.135 (log_std_init -2)",
        {},
        {"policy_kwargs": {"log_std_init": -2.0}},
        None,
        None,
    ),
    "old_ppo": (
        "PPO's old settings (8 cars x 512, 10 epochs, [64, 64], no KL stop)",
        {},
        OLD_PPO,
        8,
        None,
    ),
    "old": (
        "all of them: the defaults before RallyLearn-v0",
        {"control_hz": 20, "road_ahead": False, "reward_weights": {"crash": 20.0}},
        {**RECIPE_PPO_BASE, "target_kl": None},
        8,
        True,
    ),
}
STUDY_LEVELS = (10, 100, 1000, 0)  # 0: unlimited (a fresh stage every episode)


def _train(
    out: Path,
    timesteps: int,
    env: dict,
    hp: dict,
    n_envs: int | None,
    hb: bool | None,
    seed: int = 0,
):
    from agents.recipe import command_recipe
    from agents.sb3 import train

    t0 = time.perf_counter()
    recipe = command_recipe(
        "ppo",
        "random",
        timesteps=timesteps,
        n_envs=n_envs,
        seed=seed,
        out=out,
        hyperparams=hp,
        env_kwargs=env or None,
        handbrake=hb,
        eval_freq=max(timesteps // 4, 1),
        checkpoint_freq=0,
    )
    s = train(recipe, progress_bar=False, say=print)
    s["wall_s_total"] = time.perf_counter() - t0
    return s


def cmd_ablate(args: argparse.Namespace) -> int:
    names = list(VARIANTS) if args.variants == "all" else args.variants.split(",")
    for n in names:
        if n not in VARIANTS:
            print(f"unknown variant {n!r}; known: {', '.join(VARIANTS)}", file=sys.stderr)
            return 2
    for n in names:
        out = Path(args.out) / n
        if (out / "summary.json").exists():
            print(f"{n}: done already ({out}/summary.json)")
            continue
        what, env, hp, n_envs, hb = VARIANTS[n]
        print(f"== {n}: reverts {what}", flush=True)
        s = _train(out, args.timesteps, env, hp, n_envs, hb, args.seed)
        fe = s.get("final_eval") or {}
        print(
            f"{n}: {s['timesteps']:,} steps in {s['wall_time_s']:.0f} s; validation: finish "
            f"rate {fe.get('finish_rate', math.nan):.2f}, "
            f"median score {fe.get('median_score', math.nan):.3f}",
            flush=True,
        )
    return 0


def _driveable(model: Path, run: Path) -> Path:
    """``model``, or (a checkpoint saved before checkpoints carried the run's metadata) a copy
    with the metadata of ``run``'s config.json and the checkpoint's own normalisation."""
    import pickle
    import shutil
    import tempfile

    from agents.models import (
        _vecnormalize_for,
        obs_env_kwargs,
        obs_norm_meta,
        read_meta,
        write_meta,
    )

    if read_meta(model):
        return model
    cfg = json.loads((run / "config.json").read_text())
    with _vecnormalize_for(model).open("rb") as f:
        vn = pickle.load(f)
    dst = Path(tempfile.mkdtemp()) / model.name
    shutil.copy(model, dst)
    env = obs_env_kwargs({"env": cfg.get("env_kwargs", {})})
    write_meta(dst, {"algo": cfg.get("algo", "ppo"), "obs_norm": obs_norm_meta(vn), "env": env})
    return dst


def _score_on(model: Path, sets: str, limit: int | None = None) -> dict[str, Any]:
    from agents.benchmark import run_benchmark

    res = run_benchmark(str(model), sets, limit=limit)
    return {
        name: {"finished": m["finished"], "stages": m["stages"], "median_score": m["score_median"]}
        for name, m in res.sets.items()
    }


def cmd_study(args: argparse.Namespace) -> int:
    """Each point: the model at the end of the budget (not selected), on the 100 held-out
    default stages. ``--unlimited-from CKPT``: the unlimited point is that checkpoint (of a
    run of rally train's defaults with this budget's step count: the same training)."""
    for n in STUDY_LEVELS:
        tag = f"levels-{n}" if n else "levels-unlimited"
        out = Path(args.out) / tag
        if (out / "study.json").exists():
            print(f"{tag}: done already")
            continue
        if n == 0 and args.unlimited_from:
            ck = Path(args.unlimited_from)
            model = _driveable(ck, ck.parent.parent)
            source = str(ck)
        else:
            if not (out / "summary.json").exists():
                env = {"random_stage": {"num_levels": n}} if n else {}
                print(f"== {tag}", flush=True)
                _train(out, args.timesteps, env, {}, None, None)
            model = out / "model.zip"
            source = str(model)
        out.mkdir(parents=True, exist_ok=True)
        scores = _score_on(model, "default")
        doc = {"num_levels": n, "timesteps": args.timesteps, "model": source, "test": scores}
        (out / "study.json").write_text(json.dumps(doc, indent=2) + "\n")
        print(f"{tag}: {scores}", flush=True)
    return 0


def cmd_curve(args: argparse.Namespace) -> int:
    run = Path(args.run)
    ckpts = sorted(
        (run / "checkpoints").glob("*_steps.zip"), key=lambda p: int(p.stem.split("_")[-2])
    )
    rows = []
    path = run / f"curve_{args.set}.json"
    done = json.loads(path.read_text()) if path.exists() else []
    have = {r["env_steps"] for r in done}
    for c in ckpts:
        steps = int(c.stem.split("_")[-2])
        if steps in have:
            continue
        t0 = time.perf_counter()
        s = _score_on(_driveable(c, run), args.set)[args.set]
        row = {"env_steps": steps, **s, "eval_s": round(time.perf_counter() - t0, 1)}
        done.append(row)
        rows.append(row)
        print(json.dumps(row), flush=True)
        path.write_text(json.dumps(sorted(done, key=lambda r: r["env_steps"]), indent=2) + "\n")
    return 0


def cmd_report(args: argparse.Namespace) -> int:
    for d in args.dirs:
        d = Path(d)
        rows = sorted([*d.glob("*/summary.json"), *d.glob("*/study.json")])
        if not rows:
            continue
        study = any(p.parent.name.startswith("levels-") for p in rows)
        if study:
            print("| training stages | test finished | test median score | best validation |")
            print("|---|---|---|---|")
            pts = []
            for n in STUDY_LEVELS:
                tag = f"levels-{n}" if n else "levels-unlimited"
                p = d / tag / "study.json"
                if not p.exists():
                    continue
                doc = json.loads(p.read_text())
                t = doc["test"]["default"]
                pts.append((n, t["median_score"], t["finished"]))
                print(
                    f"| {n if n else 'unlimited'} | {t['finished']}/{t['stages']} | "
                    f"{t['median_score']:.3f} | {_best(d / tag)} |"
                )
            _plot_study(pts, d / "study.png")
            continue
        print("| variant | reverts | validation finish rate | median score | best (steps) |")
        print("|---|---|---|---|---|")
        for n in VARIANTS:
            p = d / n / "summary.json"
            if not p.exists():
                continue
            s = json.loads(p.read_text())
            fe = s.get("final_eval") or {}
            print(
                f"| `{n}` | {VARIANTS[n][0]} | {fe.get('finish_rate', math.nan):.2f} | "
                f"{fe.get('median_score', math.nan):.3f} | {_best(d / n)} |"
            )
    return 0


def _best(run: Path) -> str:
    import csv

    p = run / "eval_log.csv"
    if not p.exists():
        return "-"
    rows = list(csv.DictReader(p.open()))
    if not rows:
        return "-"
    b = max(rows, key=lambda r: (float(r["finish_rate"]), float(r.get("median_score") or "nan")))
    return (
        f"{float(b['finish_rate']):.2f} / {float(b['median_score']):.3f} ({int(b['timesteps']):,})"
    )


def _plot_study(pts: list[tuple[int, float, int]], path: Path) -> None:
    """Test median score and finish rate against the number of training stages (log x;
    "unlimited" drawn at 10^5)."""
    if not pts:
        return
    from agents.plots import curve_plot

    xs = [math.log10(n if n else 10**5) for n, _, _ in pts]
    curve_plot(
        [
            ("median score, 100 test stages", xs, [s for _, s, _ in pts]),
            ("finish rate", xs, [f / 100 for _, _, f in pts]),
        ],
        path,
        "PPO (rally train defaults), the same budget each",
        "log10(training stages); 5 = unlimited",
        "score / rate",
    )
    print(f"wrote {path}")


def cmd_plot(args: argparse.Namespace) -> int:
    """A run's learning curve: validation finish rate (``eval_log.csv``) and, where given,
    held-out test points (``--test STEPS:FINISHED:MEDIAN``) against env steps."""
    import csv

    from agents.plots import curve_plot

    run = Path(args.run)
    rows = list(csv.DictReader((run / "eval_log.csv").open()))
    xs = [int(r["timesteps"]) / 1e6 for r in rows]
    series = [("validation finish rate (50 stages)", xs, [float(r["finish_rate"]) for r in rows])]
    if args.test:
        pts = [t.split(":") for t in args.test]
        tx = [int(p[0]) / 1e6 for p in pts]
        series.append(("test finish rate (100 default stages)", tx, [int(p[1]) / 100 for p in pts]))
        series.append(("test median score", tx, [float(p[2]) for p in pts]))
    curve_plot(series, args.png, args.title, "env steps (millions)", "rate / score")
    print(f"wrote {args.png}")
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    a = sub.add_parser("ablate")
    a.add_argument("--variants", default="all")
    a.add_argument("--timesteps", type=int, default=2_000_000)
    a.add_argument("--out", default="out/ablations")
    a.add_argument("--seed", type=int, default=0, help="the training seed of every variant")
    a.set_defaults(func=cmd_ablate)
    s = sub.add_parser("study")
    s.add_argument("--timesteps", type=int, default=2_000_000)
    s.add_argument("--out", default="out/study")
    s.add_argument("--unlimited-from", default=None, metavar="CKPT.zip")
    s.set_defaults(func=cmd_study)
    c = sub.add_parser("curve")
    c.add_argument("run")
    c.add_argument("--set", default="default")
    c.set_defaults(func=cmd_curve)
    pl = sub.add_parser("plot")
    pl.add_argument("run")
    pl.add_argument("png")
    pl.add_argument("--test", action="append", default=[], metavar="STEPS:FINISHED:MEDIAN")
    pl.add_argument("--title", default="rally train --algo ppo --stage random (defaults)")
    pl.set_defaults(func=cmd_plot)
    r = sub.add_parser("report")
    r.add_argument("dirs", nargs="+")
    r.set_defaults(func=cmd_report)
    args = ap.parse_args(argv)
    print(f"load {os.getloadavg()[0]:.2f} on {os.cpu_count()} cores", flush=True)
    return args.func(args)


if __name__ == "__main__":
    raise SystemExit(main())
