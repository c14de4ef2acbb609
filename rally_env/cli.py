"""The ``rally`` command line.

Subcommands import what they need when they run (``rally demo`` never imports pygame).
"""

from __future__ import annotations

import argparse
import os
import sys

#: Where ``rally record`` and ``rally play`` save replays unless told (``out/``, as the demo's
#: ``out/demo``): one place for a session's runs, to verify or race as ghosts.
REPLAY_DIR = "out/replays"


def _cmd_demo(args: argparse.Namespace) -> int:
    from physics.demo import run_demo

    run_demo(quick=args.quick)
    return 0


def _cmd_warmup(args: argparse.Namespace) -> int:
    import json

    from rally_env.warmup import warmup

    print(json.dumps(warmup(clear=args.clear)))
    return 0


def _cmd_record(args: argparse.Namespace) -> int:
    from gymnasium.error import DependencyNotInstalled

    from rally_env.policies import policy_env_kwargs, resolve_policy
    from rally_env.render.video import render_episode
    from rally_env.replay.ghost import load_ghost

    try:
        _check_record_args(args)
        if not args.quiet:
            keep = "no replay" if args.no_replay else f"replay in {args.replay_dir or REPLAY_DIR}/"
            print(
                f"rally record: {args.agent} on {args.stage} -> {args.out} ({keep})",
                file=sys.stderr,
                flush=True,
            )
        from rally_env.env import RallyEnv

        kw = {} if args.control_hz is None else {"control_hz": args.control_hz}

        def build(**obs_kw):
            return RallyEnv(stage=args.stage, **vehicle_env_kwargs(args), **kw, **obs_kw)

        env = build()
        policy, label = resolve_policy(args.agent, env, seed=args.seed)
        # --control-hz: the agent's own rate, or one it adapts to (the heuristic, a residual)
        obs_kw = {k: v for k, v in policy_env_kwargs(policy, kw).items() if k not in kw}
        if obs_kw:  # a model trained with more observation (e.g. road_ahead): its env
            env.close()
            env = build(**obs_kw)
        ghosts = [load_ghost(g) for g in args.ghost]
        if not args.no_replay:
            from rally_env.replay import RecordReplay

            replay_dir = args.replay_dir or REPLAY_DIR
            env = RecordReplay(env, directory=replay_dir, save_partial=True, meta={"agent": label})
        res = render_episode(
            policy,
            args.out,
            env=env,
            seed=args.seed,
            fps=args.fps,
            **_view_kwargs(args),
            max_seconds=args.max_seconds,
            gif=True if args.gif == "" else args.gif,
            gif_seconds=args.gif_seconds,
            ghosts=ghosts,
            progress=not args.quiet,
        )
        env.close()
    except (DependencyNotInstalled, FileNotFoundError, ValueError) as e:
        print(f"rally record: error: {e}", file=sys.stderr)
        return 2
    end = res.end_reason or "cut"
    fin = f", finish {res.finish_time_s:.2f} s" if res.finish_time_s == res.finish_time_s else ""
    print(
        f"wrote {res.path} ({res.frames} frames at {res.fps:g} fps, {res.sim_time_s:.1f} s of "
        f"{args.stage} driven by {label}: {end}{fin}; {res.sim_time_s / res.wall_time_s:.1f}x "
        "real time)"
    )
    if res.gif_path is not None:
        print(f"wrote {res.gif_path}")
    for saved in getattr(env, "saved", ()):
        print(f"wrote replay {saved}")
    return 0


def _check_record_args(args: argparse.Namespace) -> None:
    """The output paths and numbers of ``rally record``, before anything is built.

    Raises:
        OutputPathError, OptionValueError: naming the option.
    """
    from rally_env.paths import check_output_dir, check_output_file, check_positive

    for name in ("fps", "gif_seconds", "max_seconds", "zoom"):
        check_positive(getattr(args, name), "--" + name.replace("_", "-"))
    if args.width < 16 or args.height < 16:
        raise ValueError(f"--width/--height must be >= 16 px, got {args.width}x{args.height}")
    check_output_file(args.out, "--out", (".mp4", ".gif"))
    if args.gif:
        check_output_file(args.gif, "--gif", (".gif",))
    if args.replay_dir is not None and not args.no_replay:
        check_output_dir(args.replay_dir, "--replay-dir")


def vehicle_env_kwargs(args: argparse.Namespace) -> dict:
    """The env arguments ``--vehicle/--planet/--version`` ask for ({} for the defaults).
    Without ``--version``: 1 when a library vehicle other than the rover or a planet is asked
    for (those exist only on Rally-v1), else 0."""
    default = args.vehicle == "rover" and args.planet is None
    version = (0 if default else 1) if args.version is None else int(args.version)
    if version == 0 and default:
        return {}
    return {"vehicle": args.vehicle, "planet": args.planet, "version": version}


def add_vehicle_args(p: argparse.ArgumentParser) -> None:
    """``--vehicle``, ``--planet`` and ``--version`` (shared by play, record, eval, train)."""
    p.add_argument(
        "--vehicle",
        default="rover",
        help="rover (default), or on RallyWheelSpeed-v1 rally-car, truck, tank, bike",
    )
    p.add_argument("--planet", help="mars, earth or moon (RallyWheelSpeed-v1)")
    p.add_argument(
        "--version",
        type=int,
        choices=(0, 1),
        help="env version: 0 = RallyDirect-v0, 1 = RallyWheelSpeed-v1 (default: 1 if --vehicle or "
        "--planet asks for it, else 0)",
    )


def no_window_reason() -> str | None:
    """Why ``rally play`` could not show its window (Linux with neither ``DISPLAY`` nor
    ``WAYLAND_DISPLAY`` and no ``SDL_VIDEODRIVER`` set), or ``None``; docs/render.md."""
    from rally_env.render._deps import _has_display

    if os.environ.get("SDL_VIDEODRIVER"):
        return None
    if sys.platform.startswith("linux") and not _has_display():
        return (
            "no display to open the window on (neither DISPLAY nor WAYLAND_DISPLAY is set): "
            "run it in a desktop session, or set SDL_VIDEODRIVER=dummy to drive without a "
            "window (with --frames N)"
        )
    return None


def _cmd_play(args: argparse.Namespace) -> int:
    from gymnasium.error import DependencyNotInstalled

    from rally_env.render.play import play

    why = no_window_reason()
    if why is not None:
        print(f"rally play: error: {why}", file=sys.stderr)
        return 2
    try:
        res = play(
            args.stage,
            **vehicle_env_kwargs(args),
            ghost=args.ghost,
            seed=args.seed,
            **_view_kwargs(args),
            save_dir=None if args.no_save else args.save_dir,
            max_frames=args.frames,
        )
    except (DependencyNotInstalled, ValueError) as e:
        print(f"rally play: error: {e}", file=sys.stderr)
        return 2
    for t in res.finish_times_s:
        print(f"finished in {t:.2f} s")
    for p in res.saved:
        print(f"saved {p}")
    return 0


def _view_kwargs(args: argparse.Namespace) -> dict:
    """The frame and camera options :func:`_add_view_args` adds, by name."""
    return {k: getattr(args, k) for k in ("width", "height", "camera", "zoom")}


def _add_view_args(p: argparse.ArgumentParser, width: int, height: int) -> None:
    p.add_argument("--width", type=int, default=width, help=f"frame width in px ({width})")
    p.add_argument("--height", type=int, default=height, help=f"frame height in px ({height})")
    p.add_argument(
        "--camera",
        default="car-up",
        choices=("car-up", "chase", "north-up"),
        help="the view turns with the car (car-up, alias chase) or stays north-up",
    )
    p.add_argument("--zoom", type=float, default=1.0, help="magnification (1 = 80 m across)")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="rally", description="rally-env command line")
    sub = parser.add_subparsers(dest="command", required=True)
    demo = sub.add_parser("demo", help="run the project's demo")
    demo.add_argument("--quick", action="store_true", help="a shorter run (for tests)")
    demo.set_defaults(func=_cmd_demo)
    warm = sub.add_parser(
        "warmup",
        help="compile the simulator into numba's cache now (a first env then loads it)",
        description="Compile what a Rally-v0 env and a threaded vector env run into numba's "
        "cache, so that the first env of a later process loads it instead of compiling.",
    )
    warm.add_argument(
        "--clear",
        action="store_true",
        help="first delete the project's entries of numba's cache (all compile again)",
    )
    warm.set_defaults(func=_cmd_warmup)

    rec = sub.add_parser(
        "record",
        help="record an episode to an H.264 MP4 (and a short GIF)",
        description="Run one episode of an agent and write it as an H.264 MP4 via imageio-ffmpeg.",
    )
    rec.add_argument("--stage", default="opener", help="stage name, gen-<seed> or a .toml path")
    rec.add_argument(
        "--agent",
        default="heuristic",
        help="heuristic | line | random | PATH.zip (a stable-baselines3 model)",
    )
    rec.add_argument("--out", default="run.mp4", help="output video (.mp4, or .gif)")
    rec.add_argument("--seed", type=int, default=0, help="reset seed (0)")
    rec.add_argument("--fps", type=float, default=30.0, help="video frame rate (30)")
    rec.add_argument(
        "--gif",
        nargs="?",
        const="",
        metavar="PATH",
        help="also write a short GIF (default path: the video's with .gif)",
    )
    rec.add_argument("--gif-seconds", type=float, default=12.0, help="GIF length in s (12)")
    rec.add_argument("--max-seconds", type=float, help="cut after this sim time")
    add_vehicle_args(rec)
    rec.add_argument("--control-hz", type=int, help="env control rate (env default)")
    rec.add_argument(
        "--ghost",
        action="append",
        default=[],
        metavar="FILE",
        help="draw a ghost: a replay or ghost file (repeatable)",
    )
    rec.add_argument("--quiet", action="store_true", help="no progress bar")
    rec.add_argument("--replay-dir", metavar="DIR", help=f"where the replay goes ({REPLAY_DIR}/)")
    rec.add_argument("--no-replay", action="store_true", help="do not save a replay")
    _add_view_args(rec, 600, 400)
    rec.set_defaults(func=_cmd_record)

    play = sub.add_parser(
        "play",
        help="drive a stage with the keyboard",
        description=(
            "Drive a stage in a window: arrows or WASD, space = handbrake, R = restart, "
            "Esc = quit. 60 Hz frames with 8 physics substeps each."
        ),
    )
    play.add_argument("--stage", default="opener", help="stage name, gen-<seed> or a .toml path")
    add_vehicle_args(play)
    play.add_argument("--ghost", metavar="FILE", help="race this run (a replay or ghost file)")
    play.add_argument("--seed", type=int, default=0, help="reset seed (0)")
    play.add_argument(
        "--save-dir", default=REPLAY_DIR, help=f"where finished runs are saved ({REPLAY_DIR}/)"
    )
    play.add_argument("--no-save", action="store_true", help="do not save finished runs")
    play.add_argument("--frames", type=int, help="quit after N frames (demo/test)")
    _add_view_args(play, 960, 640)
    play.set_defaults(func=_cmd_play)

    from rally_env.replay.cli import add_subcommands as add_replay_commands  # no pygame

    add_replay_commands(sub)
    from rally_env.plugins import command_providers  # agents: train, eval...; server: serve

    for add_subcommands in command_providers():
        add_subcommands(sub)
    for name, extra in PLUGIN_COMMANDS.items():
        if name not in sub.choices:  # an install from before the command had its entry point
            _add_unregistered(sub, name, extra)
    return parser


#: Commands this project's own packages register through the ``rally_env.commands`` entry
#: point (``pyproject.toml``), with the extra they need: an install made before one of them was
#: registered there lacks it until it is installed again.
PLUGIN_COMMANDS = {"serve": "server"}


def _add_unregistered(sub, name: str, extra: str) -> None:
    """``rally NAME ...`` that says how to reinstall (exit code 2) instead of not existing."""

    def missing(args: argparse.Namespace) -> int:
        print(
            f"rally {name}: error: this install does not register the command (its entry point "
            f'is missing); install the package again: python3 -m pip install -e ".[{extra}]"',
            file=sys.stderr,
        )
        return 2

    # no option prefix: every argument (--help too) is a positional the command takes
    p = sub.add_parser(name, help="(needs a reinstall here)", add_help=False, prefix_chars="\0")
    p.add_argument("rest", nargs="*")
    p.set_defaults(func=missing)


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return int(args.func(args))


if __name__ == "__main__":
    sys.exit(main())
