"""The replay commands of ``rally``: ``verify``, ``replay`` and ``leaderboard``.

Nothing here imports pygame until a window or a video is asked for.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from typing import Any

from gymnasium.error import DependencyNotInstalled

from rally_env.replay.budgets import DEFAULT_BUDGETS
from rally_env.replay.errors import ReplayError
from rally_env.replay.format import cut_repr, load_replay, read_regular_file
from rally_env.replay.ghost import load_ghost
from rally_env.replay.resim import Resim
from rally_env.replay.verify import unusable, verify_bytes, verify_replay

#: The parsers :func:`add_subcommands` made last, by command (``"leaderboard"``,
#: ``"leaderboard add"``): where another package adds options to them (``rally leaderboard add
#: --ray-address``) without reading argparse's internals.
PARSERS: dict[str, Any] = {}


def add_subcommands(subparsers: Any) -> None:
    """Add ``replay``, ``verify`` and ``leaderboard`` to the ``rally`` command line."""
    p = subparsers.add_parser(
        "verify",
        help="re-simulate a replay and accept or reject its claimed time",
        description="Re-simulates each FILE from its own contents; exit code 0 if every state "
        "hash, the end reason, the finish time and the checkpoint times match, 1 if it is "
        "rejected, 2 if the file is unusable (unreadable, malformed or over a budget: "
        "docs/replays.md); with several files, the highest of their codes.",
    )
    p.add_argument("files", nargs="+", metavar="FILE", help="replay file (.rrp.json.gz or .json)")
    p.add_argument(
        "--json",
        action="store_true",
        help="print the report as JSON (a list of them, each with its file, for several files)",
    )
    p.set_defaults(func=_cmd_verify)

    p = subparsers.add_parser(
        "replay",
        help="re-simulate a replay and show it (window) or render it (--video)",
    )
    p.add_argument("file", help="replay file")
    p.add_argument("--video", help="write the run to this .mp4/.gif instead of a window")
    p.add_argument("--text", action="store_true", help="print a summary per second, no window")
    p.add_argument("--ghost", action="append", default=[], help="also draw this replay (repeat)")
    p.add_argument("--width", type=int, default=600)
    p.add_argument("--height", type=int, default=400)
    p.add_argument("--camera", default="car-up")
    p.set_defaults(func=_cmd_replay)

    p = subparsers.add_parser("leaderboard", help="local leaderboard of verified times")
    sub = p.add_subparsers(dest="leaderboard_command", required=True)
    a = sub.add_parser("add", help="verify replays and store them")
    PARSERS.update({"leaderboard": p, "leaderboard add": a})
    a.add_argument("files", nargs="+", help="replay files")
    a.add_argument("--db", help="database file (default $RALLY_LEADERBOARD or ~/.local/share)")
    a.add_argument("--player", help="player name (default: the replay's meta.player)")
    a.add_argument("--json", action="store_true")
    a.set_defaults(func=_cmd_lb_add)
    s = sub.add_parser("show", help="print the verified best times of a stage")
    s.add_argument("--stage", required=True, help="stage name, e.g. opener")
    s.add_argument("--db", help="database file")
    s.add_argument(
        "--limit", type=_int_arg, default=10, help="entries per class, >= 1 (default 10)"
    )
    s.add_argument("--rules", choices=("all", "standard"), default="all")
    s.add_argument(
        "--all-versions", action="store_true", help="include runs on other stage versions"
    )
    s.add_argument("--json", action="store_true")
    s.set_defaults(func=_cmd_lb_show)


def _int_arg(text: str, lo: int = 1, what: str = "an integer") -> int:
    """``text`` as an integer >= ``lo`` (an argparse type: its errors are argparse's)."""
    try:
        v = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not {what}") from None
    if v < lo:
        raise argparse.ArgumentTypeError(f"must be >= {lo}, got {v}")
    return v


def _err(msg: str) -> int:
    print(f"rally: error: {msg}", file=sys.stderr)
    return 2


def verify_file(path: str) -> Any:
    """``rally verify``'s report of one file (``unusable`` if it cannot be read)."""
    try:
        data = read_regular_file(path, DEFAULT_BUDGETS.max_file_bytes, "replay")
    except ReplayError as e:
        return unusable(e)
    return verify_bytes(data, where=path)


def _cmd_verify(args: Any) -> int:
    return print_verify_reports(args, [verify_file(f) for f in args.files])


def print_verify_reports(args: Any, reports: list[Any]) -> int:
    """Print ``rally verify``'s verdicts (``args.files``, ``args.json``); the exit code."""
    files = args.files
    if args.json:
        doc = [{"file": f, **r.to_dict()} for f, r in zip(files, reports, strict=True)]
        print(json.dumps(reports[0].to_dict() if len(files) == 1 else doc, indent=2))
        return max(r.exit_code for r in reports)
    for f, rep in zip(files, reports, strict=True):
        name = f"{f}: " if len(files) > 1 else ""
        if rep.status == "unusable":
            _err(rep.message)
        elif rep.accepted:
            print(f"ACCEPTED  {name}{rep.message} (re-simulated in {rep.elapsed_s:.3f} s)")
        else:
            where = f" at step {rep.step}" if rep.step is not None else ""
            print(f"REJECTED{where}: {name}{rep.reason}: {rep.message}")
            if rep.expected is not None or rep.got is not None:
                e, g = cut_repr(rep.expected, 200), cut_repr(rep.got, 200)
                print(f"  expected {e}\n  got      {g}")
    return max(r.exit_code for r in reports)


def _cmd_replay(args: Any) -> int:
    from rally_env.paths import check_output_file
    from rally_env.render._deps import _has_display

    try:
        if args.video is not None:
            check_output_file(args.video, "--video", (".mp4", ".gif"))
        if args.width < 16 or args.height < 16:
            raise ValueError(f"--width/--height must be >= 16 px, got {args.width}x{args.height}")
        replay = load_replay(args.file)
        ghosts = [load_ghost(g) for g in args.ghost]
        sim = Resim(replay)
    except ValueError as e:  # ReplayError, GhostFileError, OutputPathError: names the file
        return _err(str(e))
    hz = replay.control_hz
    if args.text or (args.video is None and not _has_display()):
        if not args.text:
            print("(no display: printing the run; use --video out.mp4 to render it)")
        _print_run(sim, hz)
    else:
        try:
            _show_run(sim, hz, args, ghosts)
        except KeyboardInterrupt:
            return 130
        except DependencyNotInstalled as e:
            return _err(str(e))
    try:
        rep = verify_replay(replay)
    except ReplayError as e:
        rep = unusable(e)
    print(("ACCEPTED  " if rep.accepted else f"REJECTED ({rep.reason})  ") + rep.message)
    return rep.exit_code


def _print_run(sim: Resim, hz: int) -> None:
    def line() -> None:
        i = sim.info
        print(
            f"t={i['stage_time_s']:7.2f} s  progress {i['progress_m']:8.1f} / "
            f"{i['stage_length_m']:.0f} m  speed {i['speed_mps'] * 3.6:6.1f} km/h"
            + (f"  {sim.core.end_reason(0)}" if int(i["end_code"]) else "")
        )

    line()
    while sim.step():
        if sim.t % hz == 0 or sim.done:
            line()
    i = sim.info
    if not math.isnan(i["finish_time_s"]):
        print(f"finish {i['finish_time_s']:.3f} s")


def _show_run(sim: Resim, hz: int, args: Any, ghosts: list[Any]) -> None:
    from rally_env.render.envview import EnvRenderer

    mode = "rgb_array" if args.video else "human"
    r = EnvRenderer(
        mode,
        fps=hz,
        width=args.width,
        height=args.height,
        camera=args.camera,
        ghosts=ghosts,
    )
    try:
        if args.video:
            from rally_env.render.video import VideoWriter

            with VideoWriter(args.video, fps=hz) as w:
                w.write(r.frame(sim.core))
                while sim.step():
                    w.write(r.frame(sim.core))
            print(f"wrote {args.video} ({sim.t + 1} frames at {hz} fps)")
        else:
            r.render(sim.core)
            while sim.step():
                r.render(sim.core)
    finally:
        r.close()


def _cmd_lb_add(args: Any, verified: dict[str, Any] | None = None) -> int:
    """``rally leaderboard add``; ``verified``: ``{file: (replay, report)}`` already verified
    elsewhere (a cluster: ``--ray-address``), added without verifying again."""
    from rally_env.replay.leaderboard import Leaderboard, LeaderboardError, printable

    try:
        lb = Leaderboard(args.db)
    except LeaderboardError as e:
        return _err(str(e))
    status = 0
    out = []
    with lb:
        for f in args.files:
            try:
                replay, report = (verified or {}).get(f, (f, None))
                entry, _ = lb.add(replay, player=args.player, report=report)
            except LeaderboardError as e:
                status = max(status, 1)
                out.append({"file": f, "added": False, "reason": e.reason, "message": str(e)})
                if not args.json:
                    print(f"REFUSED  {printable(f)}: {printable(str(e))}")
                continue
            out.append({"file": f, "added": True, **entry.to_dict()})
            if not args.json:
                rules = "standard rules" if entry.standard else "rules " + entry.rules
                print(
                    f"ADDED    {printable(f)}: {printable(entry.stage)} "
                    f"{entry.finish_time_s:.3f} s, rank {entry.rank} ({rules})"
                )
    if args.json:
        print(json.dumps(out, indent=2))
    return status


def _cmd_lb_show(args: Any) -> int:
    from rally_env.replay.leaderboard import Leaderboard, LeaderboardError, format_table

    try:
        with Leaderboard(args.db) as lb:
            entries = lb.best(
                args.stage,
                digest=None if args.all_versions else "current",
                rules=None if args.rules == "all" else "standard",
                limit=args.limit,
            )
    except LeaderboardError as e:
        return _err(str(e))
    if args.json:
        print(json.dumps([e.to_dict() for e in entries], indent=2))
    else:
        print(format_table(entries))
    return 0
