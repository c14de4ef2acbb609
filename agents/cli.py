"""``rally train``, ``eval``, ``dataset``, ``par``, ``benchmark`` and the agents' ``demo``,
added to ``rally``'s parser by :func:`add_subcommands` (imports: docs/architecture.md)."""

from __future__ import annotations

import argparse
import functools
import json
import math
import sys
import time
import zipfile
from pathlib import Path
from typing import Any, TextIO

import numpy as np

from agents.benchmark import DEFAULT_CHUNK, SETS, run_benchmark, write_baseline, write_oracle
from agents.distributed import (
    VERIFY_TASK_MEMORY_MB,
    VERIFY_TASK_TIMEOUT_S,
    RayUnavailableError,
    ReplayInput,
    add_ray_address,
    read_replay_inputs,
    verify_many,
)
from agents.evaluate import EvalResult, evaluate, format_table, resolve_stages
from agents.par import write_par_times
from agents.plots import telemetry_plots
from agents.progress import Progress
from agents.rundir import claim_run_dir
from rally_env.cli import add_vehicle_args, vehicle_env_kwargs
from rally_env.config import RallyConfig
from rally_env.errors import ConfigError
from rally_env.paths import OutputPathError, check_output_dir, check_output_file, check_positive
from rally_env.replay.cli import PARSERS, print_verify_reports
from rally_env.replay.errors import ReplayError
from rally_env.replay.format import replay_from_bytes

#: ``--agent``'s help of ``rally eval`` and ``rally benchmark``
AGENT_HELP = (
    "heuristic | random | mpc[:SETTINGS] (the oracle planner: k=v,... or a .toml) | "
    "ppo-opener | PATH.zip | module:function"
)


def add_subcommands(sub: Any) -> None:
    """Add ``train``, ``eval``, ``dataset``, ``par`` and ``benchmark``, the cluster options of
    ``verify``, and point ``demo`` at :func:`cmd_demo`."""
    _add_train_parser(sub)

    ev = sub.add_parser(
        "eval",
        help="stage-time evaluation of an agent",
        description="Evaluate an agent: finish rate, median/best stage time, gap to the "
        "reference time and to par, off-road time, mean speed, per stage.",
    )
    ev.add_argument("--agent", default="heuristic", help=AGENT_HELP)
    ev.add_argument(
        "--stages", default="opener", help="comma list, 'library' or 'random:N' (held out)"
    )
    ev.add_argument("--episodes", type=int, default=1, help="episodes per stage (seeds S..)")
    add_vehicle_args(ev)
    ev.add_argument("--seed", type=int, default=0, help="first reset seed")
    ev.add_argument("--json", metavar="OUT.json", help="write the results as JSON (- for stdout)")
    ev.add_argument(
        "--csv", metavar="OUT.csv", help="write per-stage figures as CSV (- for stdout)"
    )
    ev.add_argument("--video", metavar="DIR", help="video of each stage's best run")
    ev.add_argument("--plots", metavar="DIR", help="telemetry plot per run")
    ev.add_argument(
        "--action-space",
        choices=("auto", "policy", "env"),
        default="auto",
        help="for .zip models: 'policy' maps [-1, 1] actions to the env's box (rally train's "
        "convention), 'env' uses them as they are; 'auto' (default): 'policy' only when the "
        "model's metadata says rally train made it",
    )
    ev.add_argument("--plain", action="store_true", help="plain-text table (no rich)")
    ev.add_argument("--replays", metavar="DIR", help="save every episode as a replay in DIR")
    add_ray_address(ev, "spread the (stage, seed) episodes over a Ray cluster")
    ev.set_defaults(func=cmd_eval)

    ds = sub.add_parser(
        "dataset",
        help="record an agent's episodes as a Minari dataset (offline RL)",
        description="Drive an agent on stages and save every step (observations, actions, "
        "rewards, terminations, infos) with the env spec as a Minari dataset; "
        "minari.load_dataset(NAME).recover_environment() rebuilds the env. Needs the minari "
        'extra: pip install "rally-env[minari]".',
    )
    ds.add_argument("--agent", default="heuristic", help="as for rally eval (default heuristic)")
    ds.add_argument("--stages", default="opener", help="comma list, 'library' or 'random:N'")
    ds.add_argument("--episodes", type=int, default=1, help="episodes per stage (1)")
    ds.add_argument("--seed", type=int, default=0, help="first reset seed")
    ds.add_argument(
        "--out", required=True, metavar="NAME", help="dataset name, e.g. rally/opener-v0"
    )
    ds.add_argument("--dir", help="Minari datasets root (default Minari's)")
    ds.add_argument("--max-steps", type=int, help="cut episodes at N steps")
    add_vehicle_args(ds)
    ds.set_defaults(func=cmd_dataset)

    par = sub.add_parser(
        "par", help="write the heuristic driver's par times (agents/par_times.json)"
    )
    par.add_argument("--stages", default="library")
    par.add_argument("--out", help="output file (default agents/par_times.json)")
    par.set_defaults(func=cmd_par)

    _add_benchmark_parser(sub)

    _add_distributed_verify(sub)

    demo = sub.choices["demo"]  # rally_env's (its --quick), run by cmd_demo here
    demo.description = (
        "Evaluate the heuristic driver and the shipped PPO policy on the default stage, print "
        "the stage-time table against the reference time and write a video of the best run."
    )
    demo.add_argument("--stage", default="opener")
    demo.add_argument("--out", default="out/demo", help="where the video and JSON go")
    demo.add_argument("--no-video", action="store_true")
    demo.set_defaults(func=cmd_demo)


def _add_train_parser(sub: Any) -> None:
    """``rally train``'s options."""
    tr = sub.add_parser(
        "train",
        help="train PPO or SAC (stable-baselines3) on the native vector env",
        description="Train a policy; the model, config.json, checkpoints, eval_log.csv and "
        "TensorBoard logs go to --out. The env has RallyLearn-v0's settings unless the vehicle "
        "options say otherwise: decisions at 10 Hz, crash cost 100, no "
        "handbrake. Hyperparameters: agents.sb3.PPO_DEFAULTS / SAC_DEFAULTS (docs/agents.md).",
    )
    tr.add_argument(
        "--config",
        metavar="RECIPE.toml",
        help="train from a recipe file holding every setting (agents/configs/general.toml); "
        "only --out, --overwrite and --no-progress may go with it",
    )
    tr.add_argument(
        "--algo",
        choices=("ppo", "sac", "rllib-ppo"),
        default="ppo",
        help="ppo, sac (stable-baselines3) or rllib-ppo (RLlib on Ray: docs/ray.md)",
    )
    tr.add_argument("--stage", default="opener", help="stage name, gen-<seed> or 'random'")
    tr.add_argument(
        "--timesteps", type=int, default=10_000_000, help="environment steps (10,000,000)"
    )
    tr.add_argument("--n-envs", type=int, help="cars in the vector env (32)")
    tr.add_argument(
        "--handbrake",
        action="store_true",
        help="the policy also has a handbrake output (default: steer, throttle, brake)",
    )
    tr.add_argument("--seed", type=int, default=0)
    add_vehicle_args(tr)
    tr.add_argument(
        "--out",
        default="runs/ppo-opener",
        help="output directory; refused when it holds files, unless --resume or --overwrite",
    )
    tr.add_argument(
        "--resume",
        metavar="CKPT.zip",
        help="continue a checkpoint for --timesteps more steps (--out may hold the run it "
        "came from: its eval_log.csv goes on)",
    )
    tr.add_argument(
        "--overwrite",
        action="store_true",
        help="remove the run already in --out (its model, logs, checkpoints, tb/) first",
    )
    tr.add_argument("--eval-freq", type=int, help="steps between evaluations")
    tr.add_argument("--eval-seeds", type=int, help="episodes per evaluation")
    tr.add_argument("--checkpoint-freq", type=int, help="steps between checkpoints")
    tr.add_argument("--threads", type=int, help="torch threads (1)")
    tr.add_argument(
        "--warmstart-steps",
        type=int,
        help="PPO: behaviour-clone the heuristic driver on N env steps first (default 0)",
    )
    for flag, what in (
        ("--set", "override a hyperparameter, e.g. --set learning_rate=1e-4"),
        ("--env", "a RallyEnv argument over RallyLearn-v0's settings, e.g. --env control_hz=20"),
    ):
        tr.add_argument(
            flag, action="append", default=[], metavar="KEY=JSON", help=f"{what} (repeatable)"
        )
    tr.add_argument(
        "--no-progress",
        action="store_true",
        help="no progress bar (in a terminal) and no progress line every 30 s (otherwise)",
    )
    add_ray_address(tr, "rllib-ppo: the cluster to train on (default local)")
    tr.add_argument(
        "--num-env-runners",
        type=int,
        help="rllib-ppo: env-runner actors sampling in parallel (default 0: the driver samples)",
    )
    tr.add_argument(
        "--envs-per-runner",
        type=int,
        help="rllib-ppo: cars of the one native RallyVectorEnv each runner steps (default 8)",
    )
    # the settings a recipe file holds, with their defaults: refused beside --config otherwise
    holds = ["algo", "stage", "timesteps", "n_envs", "seed", "handbrake", "resume"]
    holds += ["eval_freq", "eval_seeds", "checkpoint_freq", "threads"]
    tr.set_defaults(func=cmd_train, recipe_holds={k: tr.get_default(k) for k in holds})


def _add_distributed_verify(sub: Any) -> None:
    """``--ray-address`` for ``rally verify`` and ``rally leaderboard add`` (their parsers
    are rally_env's; the cluster path is here, with Ray)."""

    def add_cluster_options(p: argparse.ArgumentParser, leaderboard: bool) -> None:
        add_ray_address(p, "verify the files on a Ray cluster, one task per replay")
        p.add_argument(
            "--task-timeout",
            type=float,
            metavar="S",
            help="with --ray-address: wall-time limit per replay (s, default 600)",
        )
        p.add_argument(
            "--task-memory-mb",
            type=float,
            metavar="MIB",
            help="with --ray-address: address space of the process that verifies a replay "
            "(MiB, default 2048; 0 = no bound)",
        )
        p.set_defaults(func=functools.partial(_verify, p.get_default("func"), leaderboard))

    if "verify" in sub.choices:
        add_cluster_options(sub.choices["verify"], leaderboard=False)
    lb = sub.choices.get("leaderboard")
    if lb is not None and PARSERS.get("leaderboard") is lb:
        add_cluster_options(PARSERS["leaderboard add"], leaderboard=True)


def _verify(local: Any, leaderboard: bool, args: argparse.Namespace) -> int:
    """``rally verify`` / ``leaderboard add`` (``local``, rally_env's), on Ray with
    ``--ray-address``."""
    if args.ray_address is not None:
        return _verify_distributed(args, local, leaderboard)
    for opt in ("task_timeout", "task_memory_mb"):
        if getattr(args, opt) is not None:
            return _refuse(f"rally: error: {_flag(opt)} goes with --ray-address")
    what = "verifying and filing" if leaderboard else "verifying"
    _say(
        f"rally: {what} {len(args.files)} replay(s): each is re-simulated from the file alone",
        sys.stderr,
    )
    return local(args)


def _verify_distributed(args: argparse.Namespace, local: Any, leaderboard: bool) -> int:
    timeout = VERIFY_TASK_TIMEOUT_S if args.task_timeout is None else args.task_timeout
    if not (math.isfinite(timeout) and timeout > 0):
        return _refuse(f"rally: error: --task-timeout must be > 0 s, got {timeout}")
    memory = VERIFY_TASK_MEMORY_MB if args.task_memory_mb is None else args.task_memory_mb
    if not (math.isfinite(memory) and memory >= 0):
        return _refuse(f"rally: error: --task-memory-mb must be >= 0, got {memory}")
    inputs = read_replay_inputs(args.files)
    todo = [x for x in inputs if isinstance(x, ReplayInput)]
    try:
        done = iter(
            verify_many(todo, address=args.ray_address, task_timeout_s=timeout, memory_mb=memory)
        )
    except (RayUnavailableError, ValueError) as e:
        return _refuse(f"rally: error: {e}")
    reports = [next(done) if isinstance(x, ReplayInput) else x for x in inputs]
    if not leaderboard:
        return print_verify_reports(args, reports)
    verified = {}
    for f, x, rep in zip(args.files, inputs, reports, strict=True):
        if isinstance(x, ReplayInput):
            try:  # the bytes the worker verified, parsed here as the leaderboard would
                verified[f] = (replay_from_bytes(x.data, x.where), rep)
            except ReplayError:
                continue  # the local add reads the file again and names the error
    return local(args, verified)


# ----------------------------------------------------------------------------- commands
def _refuse(message: str) -> int:
    """Print a command's refusal on stderr; its exit code, 2."""
    print(message, file=sys.stderr)
    return 2


def _flag(name: str) -> str:
    """The option of an ``argparse`` destination: ``eval_freq`` -> ``--eval-freq``."""
    return "--" + name.replace("_", "-")


def _key_values(items: list[str], opt: str) -> dict[str, Any]:
    """``KEY=JSON`` items (a value that is not JSON is the string itself); ``ValueError``
    naming ``opt`` for an item without ``=`` or without a key."""
    out: dict[str, Any] = {}
    for it in items:
        key, sep, val = it.partition("=")
        if not (sep and key):
            raise ValueError(f"{opt} needs KEY=VALUE, got {it!r}")
        try:
            out[key] = json.loads(val)
        except json.JSONDecodeError:
            out[key] = val
    return out


def _parse_sets(items: list[str]) -> dict[str, Any]:
    try:
        return _key_values(items, "--set")
    except ValueError as e:
        raise SystemExit(f"rally train: {e}") from None


def _parse_env(items: list[str]) -> dict[str, Any]:
    """``--env KEY=JSON`` items as ``RallyEnv`` arguments, checked by building the config
    (``ValueError``: not KEY=VALUE, or what ``RallyConfig`` refuses)."""
    env = _key_values(items, "--env")
    if env:
        bad = sorted(set(env) & {"stage", "render_mode"})
        if bad:
            raise ValueError(
                f"--env {bad[0]}: give the stage with --stage; training does not render"
            )
        try:
            RallyConfig.build(**env)
        except (ConfigError, TypeError) as e:
            raise ValueError(f"--env: {e}") from None
    return env


def check_model_file(path: str, what: str) -> Path:
    """``path``, a saved model (a stable-baselines3 ``.zip``, no ``.zip`` appended) that exists
    as a regular zip file; else ``FileNotFoundError`` or ``ValueError`` naming ``what``."""
    p = Path(path)
    if not p.exists():
        raise FileNotFoundError(f"{what} {p}: no such file")
    if not p.is_file():
        raise ValueError(f"{what} {p}: not a regular file")
    if not zipfile.is_zipfile(p):
        raise ValueError(f"{what} {p}: not a saved model (a stable-baselines3 .zip archive)")
    return p


def _check_train_args(args: argparse.Namespace, rllib: bool) -> str:
    """The run directory, once ``rally train``'s numbers and paths (stable-baselines3, or
    ``rllib``) are checked (``ValueError``s and ``FileNotFoundError`` naming the option)."""
    if not rllib:
        _parse_env(args.env)
    sb3 = ("n_envs", "eval_freq", "eval_seeds", "checkpoint_freq", "threads", "warmstart_steps")
    ray = ("envs_per_runner", "num_env_runners", "checkpoint_freq", "eval_seeds", "eval_freq")
    for name in ("timesteps", *(ray if rllib else sb3)):
        # 0 env runners: the driver samples; 0 warm-start steps: none
        lo = -1 if name in ("num_env_runners", "warmstart_steps") else 0
        check_positive(getattr(args, name), _flag(name), lo)
    if rllib:
        sb3_only = [
            n for n in ("threads", "warmstart_steps", "n_envs") if getattr(args, n) is not None
        ]
        sb3_only += [n for n in ("env", "handbrake") if getattr(args, n)]
        if sb3_only:
            raise ValueError(f"{', '.join(map(_flag, sb3_only))}: not for --algo rllib-ppo")
        if args.resume is not None and not (Path(args.resume) / "rllib_checkpoint.json").is_file():
            raise FileNotFoundError(f"--resume {args.resume}: not an RLlib checkpoint directory")
    elif args.resume is not None:
        check_model_file(args.resume, "--resume")
    out = f"runs/rllib-ppo-{args.stage}" if rllib and args.out == "runs/ppo-opener" else args.out
    check_output_dir(out, "--out")
    claim_run_dir(out, resume=args.resume is not None, overwrite=args.overwrite)
    return out


def _check_eval_outputs(args: argparse.Namespace) -> None:
    """``rally eval``'s output paths, checked before the evaluation runs
    (``OutputPathError``)."""
    if args.json == "-" and args.csv == "-":
        raise OutputPathError("--json - and --csv -: only one of them can be standard output")
    for opt, path in (("--json", args.json), ("--csv", args.csv)):
        if path is not None and path != "-":
            check_output_file(path, opt)
    for opt in ("video", "plots", "replays"):
        if getattr(args, opt) is not None:
            check_output_dir(getattr(args, opt), "--" + opt)


def _run_rllib(recipe: Any, out: str | None, resume: str | None, progress: bool) -> int:
    """An ``rllib-ppo`` recipe (command line or file) for ``rally train``: a missing Ray or a
    bad setting is a message and exit code 2; the summary line on success."""
    try:
        import ray  # noqa: F401

        from agents.recipe import train
    except ImportError as e:
        return _refuse(f'rally train: rllib-ppo needs Ray ({e}); pip install "rally-env[ray]"')
    try:
        summary = train(recipe, out, resume=resume, progress=progress)
    except (ValueError, ImportError) as e:
        return _refuse(f"rally train: error: {e}")
    _print_trained(summary)
    return 0


def _print_trained(summary: dict[str, Any]) -> None:
    """The last line of a ``rally train`` run of its flags (or of an RLlib recipe)."""
    fe = summary.get("final_eval") or {}
    med = fe.get("median_time_s")
    ckpt = f" (checkpoint {summary['checkpoint']})" if "checkpoint" in summary else ""
    print(
        f"trained {summary['timesteps']} steps in {summary['wall_time_s']:.0f} s -> "
        f"{summary['model']}{ckpt}; final evaluation: finish rate "
        f"{fe.get('finish_rate', math.nan):.2f}, median stage time "
        f"{math.nan if med is None else med:.2f} s"
    )


def cmd_train(args: argparse.Namespace) -> int:
    if args.config is not None:  # the recipe names its algorithm
        return _train_recipe(args)
    rllib = args.algo == "rllib-ppo"
    ray_flags = args.num_env_runners is not None or args.envs_per_runner is not None
    if not rllib and (args.ray_address or ray_flags):
        return _refuse(
            "rally train: --ray-address, --num-env-runners and --envs-per-runner go with "
            "--algo rllib-ppo"
        )
    if not rllib:
        try:
            import agents.sb3  # noqa: F401
        except ImportError as e:
            return _refuse(
                f"rally train: needs stable-baselines3 and torch ({e}); "
                'pip install "rally-env[train]"'
            )
    try:
        out = _check_train_args(args, rllib)
    except (FileNotFoundError, ValueError) as e:
        return _refuse(f"rally train: error: {e}")
    if rllib:
        _say(f"rally train: RLlib PPO on {args.stage}, {args.timesteps:,} env steps -> {out}")
    from agents.recipe import command_recipe

    recipe = command_recipe(
        args.algo,
        args.stage,
        timesteps=args.timesteps,
        n_envs=args.n_envs,
        seed=args.seed,
        out=out,
        hyperparams=_parse_sets(args.set),
        eval_freq=args.eval_freq,
        eval_seeds=args.eval_seeds,
        checkpoint_freq=args.checkpoint_freq,
        threads=args.threads,
        warmstart_steps=args.warmstart_steps,
        env_kwargs={**vehicle_env_kwargs(args), **_parse_env(args.env)} or None,
        handbrake=args.handbrake,
        address=args.ray_address,
        num_env_runners=args.num_env_runners,
        envs_per_runner=args.envs_per_runner,
    )
    if rllib:
        return _run_rllib(recipe, None, args.resume, progress=not args.no_progress)
    from agents.recipe import train

    _print_trained(train(recipe, resume=args.resume, progress=not args.no_progress, say=_say))
    return 0


def _say(line: str, file: TextIO | None = None) -> None:
    """A line of a long command's own account of what it does, shown at once (on ``file``,
    default standard output)."""
    print(line, file=file, flush=True)


def _train_recipe(args: argparse.Namespace) -> int:
    from agents.recipe import RecipeError, load_recipe, train

    clash = [k for k, v in args.recipe_holds.items() if getattr(args, k) != v]
    if args.set or args.env or args.warmstart_steps is not None or vehicle_env_kwargs(args):
        clash.append("set/env/warmstart-steps/vehicle options")
    if args.ray_address or args.num_env_runners is not None or args.envs_per_runner is not None:
        clash.append("ray-address/num-env-runners/envs-per-runner (the recipe's [ray])")
    if clash:
        return _refuse(
            f"rally train: --config holds every setting; drop {', '.join(sorted(clash))} "
            "(or change the recipe file)"
        )
    try:
        recipe = load_recipe(args.config)
    except RecipeError as e:
        return _refuse(f"rally train: {e}")
    out = args.out if args.out != "runs/ppo-opener" else None
    try:
        claim_run_dir(
            out or recipe.out, overwrite=args.overwrite, what="--out" if out else "run.out"
        )
    except ValueError as e:
        return _refuse(f"rally train: error: {e}")
    _say(f"rally train: recipe {args.config} ({recipe.algo}) -> {out or recipe.out}")
    if recipe.algo == "rllib-ppo":  # claim_run_dir checked the directory
        return _run_rllib(recipe, out, None, progress=not args.no_progress)
    summary = train(recipe, out=out, progress=not args.no_progress)
    fe = summary.get("final_eval") or {}
    print(
        f"trained {summary['env_steps']} env steps ({summary['env_steps_per_s']:.0f} env steps/s)"
        f" -> {summary['model']}; validation: finish rate {fe.get('finish_rate', math.nan):.2f}, "
        f"median score {fe.get('median_score', math.nan):.3f}; curve {summary['learning_curve']}"
    )
    be = summary.get("best_eval")
    if be:
        print(
            f"best validation: finish rate {be['finish_rate']:.2f}, median score "
            f"{be['median_score']:.3f} at {be['env_steps']} env steps -> {summary['best_model']}"
        )
    return 0


def cmd_eval(args: argparse.Namespace) -> int:
    if args.episodes < 1:
        return _refuse("rally eval: --episodes must be >= 1")
    seeds = list(range(args.seed, args.seed + args.episodes))
    # ``--json -`` / ``--csv -``: standard output holds that alone; the table goes to stderr
    say = sys.stderr if "-" in (args.json, args.csv) else sys.stdout
    try:
        _check_eval_outputs(args)
        from agents.policies import make_policy

        n_stages = len(resolve_stages(args.stages))
        where = "" if args.ray_address is None else f" on the Ray cluster {args.ray_address}"
        _say(
            f"rally eval: {args.agent} on {n_stages} stage(s) x {args.episodes} episode(s) "
            f"(seeds {seeds[0]}..{seeds[-1]}){where}",
            sys.stderr,
        )
        # progress: a planner's bar per episode (it is slow); other agents ignore it
        policy = make_policy(
            args.agent, seed=seeds[0], action_space=args.action_space, progress=True
        )
        note = getattr(policy, "action_note", None)
        if note:
            print(f"{args.agent}: {note}", file=say)
        runs = {
            "agent_name": args.agent,
            "record": bool(args.plots),
            "replay_dir": args.replays,
            "env_kwargs": vehicle_env_kwargs(args) or None,
        }
        if args.ray_address is not None:
            from agents.distributed import evaluate_distributed

            res = evaluate_distributed(
                args.agent,
                args.stages,
                seeds,
                address=args.ray_address,
                action_space=args.action_space,
                **runs,
            )
        else:
            bar = Progress(n_stages * len(seeds), "rally eval", "episode")
            res = evaluate(
                policy, args.stages, seeds, on_run=lambda r: bar.update(_run_note(r)), **runs
            )
            bar.close()
    except (FileNotFoundError, ValueError, ImportError) as e:
        return _refuse(f"rally eval: error: {e}")
    print(res.table(rich=False if args.plain else None), end="", file=say)
    for dest, write in ((args.json, res.write_json), (args.csv, res.write_csv)):
        if dest:
            path = write(dest)
            if dest != "-":
                print(f"wrote {path}", file=say)
    for p in telemetry_plots(res, args.plots) if args.plots else []:
        print(f"wrote {p}")
    for p in best_run_videos(res, args.video) if args.video else []:
        print(f"wrote {p}")
    return 0


def _run_note(run: Any) -> str:
    """An episode in a few words: ``opener 83.37 s`` or ``opener off_stage``."""
    how = f"{run.stage_time_s:.2f} s" if run.finished else run.end_reason
    return f"{run.stage} {how}"


def cmd_dataset(args: argparse.Namespace) -> int:
    from agents.dataset import record_dataset

    if args.episodes < 1 or (args.max_steps is not None and args.max_steps < 1):
        return _refuse("rally dataset: --episodes and --max-steps must be >= 1")
    try:
        n = len(resolve_stages(args.stages)) * args.episodes
        _say(
            f"rally dataset: {args.agent}, {n} episode(s) -> Minari dataset {args.out}", sys.stderr
        )
        bar = Progress(n, "rally dataset", "episode")
        ds = record_dataset(
            args.agent,
            args.stages,
            args.episodes,
            args.out,
            seed=args.seed,
            env_kwargs=vehicle_env_kwargs(args) or None,
            data_dir=args.dir,
            max_steps=args.max_steps,
            on_episode=lambda steps: bar.update(f"{steps} steps"),
        )
        bar.close()
    except (FileNotFoundError, ValueError, ImportError) as e:
        return _refuse(f"rally dataset: error: {e}")
    print(
        f"wrote Minari dataset {args.out}: {ds.total_episodes} episodes, {ds.total_steps} steps"
        f" ({ds.storage.data_path})"
    )
    return 0


def cmd_par(args: argparse.Namespace) -> int:
    try:
        if args.out is not None:
            check_output_file(args.out, "--out")
    except ValueError as e:
        return _refuse(f"rally par: error: {e}")
    path, times = write_par_times(args.stages, args.out)
    for k, v in times.items():
        print(f"{k:16s} {v:8.2f} s")
    print(f"wrote {path}")
    return 0


def best_run_videos(
    res: Any,
    out_dir: str | Path,
    width: int = 480,
    height: int = 320,
    max_seconds: float | None = None,
):
    """Replay each stage's best run (its recorded actions) into ``DIR/<agent>-<stage>.mp4``."""
    paths = []
    best: dict[str, Any] = {}
    for r in res.runs:
        if r.finished and (r.stage not in best or r.stage_time_s < best[r.stage].stage_time_s):
            best[r.stage] = r
    if not best:
        return paths
    try:
        from rally_env.render.video import render_episode
    except ImportError as e:
        print(f"no video (renderer unavailable: {e})", file=sys.stderr)
        return paths
    for stage, run in best.items():
        actions = iter(run.actions)

        def replay(obs, _it=actions, _last=run.actions[-1]):  # then the last one, held
            return np.asarray(next(_it, _last), dtype=np.float32)

        path = Path(out_dir) / f"{_safe(res.agent)}-{stage}.mp4"
        try:
            render_episode(
                replay,
                path,
                stage=stage,
                seed=run.seed,
                width=width,
                height=height,
                max_seconds=max_seconds,
            )
        except Exception as e:  # the renderer is optional: report and go on
            print(f"no video for {stage}: {type(e).__name__}: {e}", file=sys.stderr)
            continue
        paths.append(path)
    return paths


def _safe(name: str) -> str:
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in Path(name).stem or name)


def cmd_demo(args: argparse.Namespace) -> int:
    """Heuristic + shipped PPO on the stage, the table against the reference, a video."""
    from agents.policies import SHIPPED, shipped_policy_path
    from agents.reference import reference_time
    from rally_env import precompile

    t0 = time.perf_counter()
    stage = args.stage
    out = Path(args.out)
    # an empty numba cache: the env's step kernels compile on the other core from now on,
    # beside the reference solver's here (rally_env.precompile)
    precompile.start(RallyConfig.build(stage=stage))
    _say(
        f"rally demo: the heuristic driver and the shipped policies ({', '.join(SHIPPED)}) on "
        f"{stage} against the physics reference time; the figures and a video of the best run "
        f"go to {out}/"
    )
    _say("computing the reference time (the point-mass solver) ...")
    ref = reference_time(stage)
    cen = reference_time(stage, "centerline")
    print(
        f"{stage}: reference time {ref.time_s:.2f} s on the racing line, {cen.time_s:.2f} s on "
        "the centerline (point-mass quasi-steady solver; a reference, not a strict bound)"
    )

    def drive(name: str) -> EvalResult:
        _say(f"driving {name} on {stage} ...")
        res = evaluate(name, stage, [0])
        _say(f"  {name}: {_run_note(res.runs[0])}")
        return res

    results: list[EvalResult] = [drive("heuristic")]
    for name in SHIPPED:
        try:
            shipped_policy_path(name)
        except FileNotFoundError as e:
            print(f"(skipping {name}: {e})")
            continue
        try:
            results.append(drive(name))
        except ImportError as e:
            print(f"(skipping {name}: needs stable-baselines3/torch: {e})")
    rows = [s for r in results for s in r.stages]
    print(format_table(rows, unfinished=[u for r in results for u in r.unfinished()]), end="")
    out.mkdir(parents=True, exist_ok=True)
    doc = {
        "stage": stage,
        "reference_time_s": ref.time_s,
        "centerline_time_s": cen.time_s,
        "results": [r.to_dict() for r in results],
    }
    (out / "demo.json").write_text(json.dumps(doc, indent=2) + "\n")
    print(f"wrote {out / 'demo.json'}")
    if not args.no_video:
        finished = [(r, run) for r in results for run in r.runs if run.finished]
        if finished:
            best_res, best_run = min(finished, key=lambda x: x[1].stage_time_s)
            one = EvalResult(best_res.agent, best_res.stages, [best_run], [best_run.seed], 0.0)
            w, h = (320, 240) if args.quick else (640, 400)
            cut = 4.0 if args.quick else None
            _say(f"rendering the best run ({best_res.agent}) to video ...")
            for p in best_run_videos(one, out, width=w, height=h, max_seconds=cut):
                print(f"wrote {p} (best run: {best_res.agent}, {best_run.stage_time_s:.2f} s)")
        else:
            print("no finished run: no video")
    print(f"demo done in {time.perf_counter() - t0:.0f} s")
    return 0


# --------------------------------------------------------------------------- rally benchmark
def _add_benchmark_parser(sub: Any) -> None:
    p = sub.add_parser(
        "benchmark",
        help="the generalization benchmark: held-out test sets, score vs the reference",
        description="Run an agent on the benchmark's fixed held-out test sets (library, "
        "default, hard, long) and report per set the finish rate, the median and mean score "
        "(reference time / stage time, 0 for a DNF), the median gap to the reference and to "
        "the heuristic driver, and the off-road time (docs/benchmark.md).",
    )
    p.add_argument("--agent", default="heuristic", help=AGENT_HELP)
    p.add_argument(
        "--sets", default=",".join(SETS), help=f"comma list of sets (default {','.join(SETS)})"
    )
    p.add_argument("--json", metavar="OUT.json", help="write the results as JSON")
    p.add_argument("--markdown", metavar="OUT.md", help="write the per-set table as Markdown")
    p.add_argument("--chunk", type=int, default=DEFAULT_CHUNK, help="stages driven together")
    p.add_argument(
        "--limit",
        type=int,
        help="only the first N stages of each set (a quick look; marked partial)",
    )
    p.add_argument(
        "--start",
        type=int,
        default=0,
        metavar="N",
        help="skip the first N stages of each set (with --limit M: stages N to N+M-1; "
        "marked partial), to split a long run between processes",
    )
    p.add_argument("--seed", type=int, default=0, help="the agent's seed (random agent)")
    p.add_argument("--baseline", metavar="FILE", help="baseline file (default: the shipped one)")
    p.add_argument(
        "--write-baseline",
        action="store_true",
        help="with --agent heuristic over all sets: rewrite the shipped baseline file",
    )
    p.add_argument(
        "--write-oracle",
        action="store_true",
        help="with --agent mpc[:SETTINGS]: add its times to the oracle file (the ceiling the "
        "benchmark reports every agent's gap to)",
    )
    p.add_argument("--oracle", metavar="FILE", help="oracle file (default: the shipped one)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    add_ray_address(p, "drive the chunks of stages on a Ray cluster, one task per chunk")
    p.set_defaults(func=cmd_benchmark)


def cmd_benchmark(args: argparse.Namespace) -> int:
    if args.write_baseline and (
        args.agent != "heuristic"
        or args.limit is not None
        or args.start
        or set(args.sets.split(",")) != set(SETS)
    ):
        return _refuse(
            "rally benchmark: error: --write-baseline needs --agent heuristic over all sets "
            "without --limit or --start"
        )
    if args.write_oracle and not (args.agent == "mpc" or args.agent.startswith("mpc:")):
        return _refuse("rally benchmark: error: --write-oracle needs --agent mpc[:SETTINGS]")
    try:
        for path, what in ((args.json, "--json"), (args.markdown, "--markdown")):
            if path is not None:
                check_output_file(path, what)
        res = run_benchmark(
            args.agent,
            args.sets,
            chunk=args.chunk,
            limit=args.limit,
            start=args.start,
            seed=args.seed,
            baseline=args.baseline,
            progress=not args.no_progress,
            address=args.ray_address,
            oracle_path=args.oracle,
        )
    except (FileNotFoundError, ValueError, ImportError) as e:
        return _refuse(f"rally benchmark: error: {e}")
    print(res.markdown(), end="")
    t = res.timing
    print(
        f"{len(res.rows)} stages in {t['wall_s']:.0f} s (building stages {t['build_s']:.0f} s, "
        f"reference times {t['reference_s']:.0f} s, heuristic times {t['heuristic_s']:.0f} s)"
        + (" - partial (--limit/--start): not the protocol" if res.partial else "")
    )
    if args.json:
        print(f"wrote {res.write_json(args.json)}")
    if args.markdown:
        print(f"wrote {res.write_markdown(args.markdown)}")
    if args.write_baseline:
        print(f"wrote {write_baseline(res, args.baseline)}")
    if args.write_oracle:
        command = "rally benchmark " + " ".join(
            a for a in sys.argv[2:] if a not in ("--write-oracle", "--no-progress")
        )
        try:
            print(f"wrote {write_oracle(res, command, args.oracle)}")
        except ValueError as e:
            print(f"rally benchmark: error: {e}", file=sys.stderr)
            return 1
    return 0
