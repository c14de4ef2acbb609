"""``rally serve`` and ``rally serve token add|revoke|list``."""

from __future__ import annotations

import argparse
import logging
from typing import Any

from rally_env.replay.cli import _err, _int_arg


def add_subcommands(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "serve",
        help="leaderboard server: verify uploaded replays, serve the boards and web pages",
        description="Runs the leaderboard server (docs/server.md). Needs the server extra: "
        "pip install 'rally-env[server]'.",
    )
    p.add_argument("--host", default="127.0.0.1", help="address to bind (127.0.0.1)")
    p.add_argument("--port", type=_port, default=8000, help="port (8000)")
    p.add_argument("--db", help="SQLite file or postgresql:// URL (default: the leaderboard's)")
    p.add_argument("--workers", type=_count, default=2, help="verification processes (2)")
    p.add_argument("--max-queue", type=_int_arg, default=200, help="queued runs before 503")
    p.add_argument("--max-upload-mb", type=float, default=32.0, help="upload size limit (32)")
    p.add_argument("--body-timeout", type=float, default=30.0, help="seconds per upload (30)")
    p.add_argument("--task-timeout", type=float, default=60.0, help="seconds per verification")
    p.add_argument("--task-memory-mb", type=int, default=2048, help="address space per worker")
    p.add_argument("--token-rate", type=_rate, default=(30, 60.0), help="uploads/seconds per token")
    p.add_argument(
        "--address-rate", type=_rate, default=(60, 60.0), help="uploads/seconds per address"
    )
    p.add_argument(
        "--ray-address",
        default=None,
        metavar="ADDR",
        help="verify on a Ray cluster (local, auto or HOST:PORT), one task per run, --workers "
        "at a time; needs the ray extra on every node (docs/server.md)",
    )
    p.add_argument("--log-level", default="warning", choices=("debug", "info", "warning", "error"))
    p.set_defaults(func=_cmd_serve)
    sub = p.add_subparsers(dest="serve_command")
    t = sub.add_parser("token", help="submitter tokens")
    tsub = t.add_subparsers(dest="token_command", required=True)
    for name, help_, func in (
        ("add", "create a token (printed once; only its digest is stored)", _cmd_token_add),
        ("revoke", "revoke a token", _cmd_token_revoke),
        ("list", "list tokens (names and dates)", _cmd_token_list),
    ):
        c = tsub.add_parser(name, help=help_)
        if name != "list":
            c.add_argument("name")
        c.add_argument("--db")
        c.set_defaults(func=func)


def _port(text: str) -> int:
    v = _int_arg(text, 0, "a port number")
    if v > 65535:
        raise argparse.ArgumentTypeError(f"a port is at most 65535, got {v}")
    return v


def _count(text: str) -> int:
    return _int_arg(text, 0)


def _rate(text: str) -> tuple[int, float]:
    n, _, per = text.partition("/")
    try:
        rate = (int(n), float(per or 60))
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: N/SECONDS, e.g. 30/60") from None
    if rate[0] < 1 or not rate[1] > 0:
        raise argparse.ArgumentTypeError(f"{text!r}: N >= 1 and SECONDS > 0")
    return rate


def _open(db: str | None) -> Any:
    from rally_env.replay.leaderboard import default_db_path
    from rally_env.server.store import open_store

    return open_store(db if db else default_db_path())


def _token_command(fn: Any) -> Any:
    """A ``rally serve token`` command: ``fn(store, args)`` on the store of ``--db`` (closed
    after); a :class:`~rally_env.server.store.StoreError` is the error exit."""

    def run(args: Any) -> int:
        from rally_env.server.store import StoreError

        try:
            store = _open(args.db)
            try:
                return fn(store, args)
            finally:
                store.close()
        except StoreError as e:
            return _err(str(e))

    return run


@_token_command
def _cmd_token_add(store: Any, args: Any) -> int:
    print(store.add_token(args.name))
    return 0


@_token_command
def _cmd_token_revoke(store: Any, args: Any) -> int:
    if not store.revoke_token(args.name):
        return _err(f"no live token named {args.name!r}")
    print(f"revoked {args.name}")
    return 0


@_token_command
def _cmd_token_list(store: Any, args: Any) -> int:
    from rally_env.replay.leaderboard import printable

    for r in store.tokens():
        state = f"revoked {r['revoked_utc']}" if r["revoked_utc"] else "live"
        print(f"{printable(r['name']):<24}  created {r['created_utc']}  {state}")
    return 0


def _cmd_serve(args: Any) -> int:
    try:
        import uvicorn

        from rally_env.server.app import ServerConfig, create_app
    except ImportError as e:
        return _err(f"rally serve needs the server extra ({e}): pip install 'rally-env[server]'")
    from rally_env.replay.workers import TaskLimits
    from rally_env.server.store import StoreError

    for name in ("max_upload_mb", "body_timeout", "task_timeout"):
        v = getattr(args, name)
        if not v > 0:
            return _err(f"--{name.replace('_', '-')} must be > 0, got {v}")
    if args.task_memory_mb < 0:
        return _err(f"--task-memory-mb must be >= 0, got {args.task_memory_mb}")
    try:
        store = _open(args.db)
    except StoreError as e:
        return _err(str(e))
    cfg = ServerConfig(
        workers=args.workers,
        max_queue=args.max_queue,
        max_upload_bytes=int(args.max_upload_mb * 1024 * 1024),
        body_timeout_s=args.body_timeout,
        token_rate=args.token_rate,
        address_rate=args.address_rate,
        limits=TaskLimits(timeout_s=args.task_timeout, memory_mb=args.task_memory_mb),
        ray_address=args.ray_address,
    )
    if args.ray_address is not None:
        from rally_env.cluster import connect

        try:
            connect(args.ray_address)
        except Exception as e:  # no ray, or no cluster at that address
            return _err(f"--ray-address {args.ray_address}: {e}")
    logging.basicConfig(level=args.log_level.upper(), format="%(asctime)s %(name)s: %(message)s")
    app = create_app(store, cfg)
    print(f"rally serve: http://{args.host}:{args.port}/ ({store.url})", flush=True)
    uvicorn.run(
        app,
        host=args.host,
        port=args.port,
        log_level=args.log_level,
        timeout_keep_alive=5,
        limit_concurrency=256,
    )
    store.close()
    return 0
