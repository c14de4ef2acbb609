"""The HTTP API and web pages of ``rally serve`` (FastAPI on uvicorn).

Errors are JSON ``{"error": {"code": ..., "message": ...}}`` with a matching status (the codes:
``docs/server.md``); the web pages answer an error page instead. Routes that only read are plain
functions: FastAPI runs them in its thread pool, off the event loop.
"""

from __future__ import annotations

import asyncio
import email.parser
import email.policy
import functools
import gzip
import json
import logging
import re
import threading
import time
from collections import OrderedDict
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fastapi import FastAPI, Query, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import HTMLResponse, JSONResponse, Response
from fastapi.staticfiles import StaticFiles
from jinja2 import Environment, FileSystemLoader, select_autoescape
from starlette.concurrency import run_in_threadpool as in_thread
from starlette.exceptions import HTTPException as StarletteHTTPException

import tracks
from rally_env.replay.budgets import DEFAULT_BUDGETS
from rally_env.replay.leaderboard import current_stage_digest, race_time
from rally_env.replay.trace import stage_geometry
from rally_env.replay.workers import TaskFailed, TaskLimits
from rally_env.server.pool import Verifier
from rally_env.server.store import ID_RE, QueueFull, SQLiteStore, Store, StoreBusy, take_token

log = logging.getLogger("rally_env.server")
HERE = Path(__file__).parent
STAGE_RE = re.compile(r"^[a-z0-9][a-z0-9._-]{0,63}$")
RULES_RE = re.compile(r"^(standard|all|[0-9a-f]{16})$")
TOKEN_RE = re.compile(r"^[A-Za-z0-9_-]{8,128}$")
#: Content types of an upload taken as the replay's bytes (``docs/server.md``, "API").
RAW_TYPES = (
    "",
    "application/octet-stream",
    "application/gzip",
    "application/x-gzip",
    "application/json",
    "application/x-www-form-urlencoded",
)
HOW_TO_UPLOAD = (
    "send the replay file as the body (curl --data-binary @run.rrp.json.gz -H "
    "'Content-Type: application/octet-stream' ...) or as the one file of a multipart form "
    "(curl -F file=@run.rrp.json.gz ...)"
)


@dataclass
class ServerConfig:
    """``rally serve``'s settings (see ``docs/server.md``)."""

    workers: int = 2
    max_queue: int = 200
    max_upload_bytes: int = DEFAULT_BUDGETS.max_file_bytes
    body_timeout_s: float = 30.0
    #: (uploads, per seconds) for each token and for each client address
    token_rate: tuple[int, float] = (30, 60.0)
    address_rate: tuple[int, float] = (60, 60.0)
    limits: TaskLimits = field(default_factory=TaskLimits)
    retry_after_s: int = 10
    #: verify on this Ray cluster instead of local worker processes (``--ray-address``)
    ray_address: str | None = None


class ApiError(Exception):
    def __init__(self, status: int, code: str, message: str, headers: dict | None = None):
        super().__init__(message)
        self.status, self.code, self.message, self.headers = status, code, message, headers


class SharedRateLimiter:
    """Token buckets (``rate`` events per ``per`` seconds, bursts up to ``rate``) per key, kept
    in the store (``Store.take_rate``) so that every server sharing a database shares one
    limit. The same buckets kept in this process (the least recently used keys forgotten past
    ``max_keys``) turn a flood away before it reaches the database."""

    def __init__(self, store: Store, bucket: str, rate: int, per: float, max_keys: int = 100_000):
        self.store, self.bucket, self.max_keys = store, bucket, max_keys
        self.rate, self.per = float(rate), float(per)
        self.local: OrderedDict[Any, tuple[float, float]] = OrderedDict()
        self.lock = threading.Lock()

    def take(self, key: Any, who: str) -> None:
        """Take one event of ``key``, else :class:`ApiError` 429 ``rate_limited`` (uploads
        ``who``, with ``Retry-After``)."""
        now = time.monotonic()
        with self.lock:
            tokens, last = self.local.pop(key, (self.rate, now))
            tokens, wait = take_token(tokens, now - last, self.rate, self.per)
            self.local[key] = (tokens, now)
            while len(self.local) > self.max_keys:
                self.local.popitem(last=False)
        if wait == 0.0:
            wait = self.store.take_rate(self.bucket, str(key), self.rate, self.per, time.time())
        if wait:
            raise ApiError(
                429,
                "rate_limited",
                f"too many uploads {who}; retry in {wait:.0f} s",
                {"Retry-After": str(max(1, round(wait)))},
            )


def create_app(store: Store, config: ServerConfig | None = None) -> FastAPI:
    """The ASGI app over ``store``; verification starts with the app (lifespan)."""
    cfg = config or ServerConfig()
    jinja = Environment(
        loader=FileSystemLoader(HERE / "templates"),
        autoescape=select_autoescape(["html"], default=True),
    )
    jinja.filters["t"] = lambda t: "-" if t is None else race_time(float(t))
    ctx = _Ctx(
        store,
        cfg,
        Verifier(store, cfg.workers, cfg.limits, cfg.ray_address),
        SharedRateLimiter(store, "token", *cfg.token_rate),
        SharedRateLimiter(store, "address", *cfg.address_rate),
        jinja,
    )

    @asynccontextmanager
    async def lifespan(app: FastAPI):
        if isinstance(store, SQLiteStore):  # one server per SQLite file: retake its runs
            n = await in_thread(store.requeue_verifying)
            if n:
                log.warning("requeued %d runs that were verifying when the server stopped", n)
        ctx.verifier.start()
        try:
            yield
        finally:
            await in_thread(ctx.verifier.stop)

    app = FastAPI(
        title="rally-env leaderboard",
        version="1",
        description="Upload replays; the server re-simulates them and ranks the accepted runs.",
        lifespan=lifespan,
        docs_url="/api/docs",
        redoc_url=None,
        openapi_url="/api/v1/openapi.json",
    )
    app.state.store, app.state.verifier, app.state.config = store, ctx.verifier, cfg
    app.mount("/static", StaticFiles(directory=HERE / "static"), name="static")
    app.add_middleware(StrictQuery, error=ctx.error)
    for add in (_error_handlers, _upload_route, _run_routes, _stage_routes, _page_routes):
        add(app, ctx)
    return app


@dataclass
class _Ctx:
    """What the routes of one app share."""

    store: Store
    cfg: ServerConfig
    verifier: Verifier
    token_rl: SharedRateLimiter
    addr_rl: SharedRateLimiter
    jinja: Environment

    def submission(self, run_id: str) -> dict[str, Any]:
        if not ID_RE.match(run_id):
            raise ApiError(400, "bad_run_id", "a run id is 32 lowercase hexadecimal digits")
        d = self.store.submission(run_id)
        if d is None:
            raise ApiError(404, "not_found", f"no run {run_id}")
        return d

    def board(self, stage: str, rules: str, limit: int, versions: str) -> list[Any]:
        """A board as ``rally leaderboard show`` reads it (``docs/server.md``, "Boards and
        names")."""
        rules_arg = None if rules == "all" else rules
        if versions != "current":
            return self.store.best(stage, None, rules_arg, limit)
        # a name without runs is an empty board: never make its stage (see docs/server.md)
        if stage not in _library() and not self.store.best(stage, None, rules_arg, 1):
            return []
        return self.store.best(stage, _board_digest(stage), rules_arg, limit)

    def stages(self) -> list[dict[str, Any]]:
        names = list(_library())
        names += [
            n
            for n in self.store.stage_names()
            if n not in names and self.board(n, "all", 1, "current")
        ]
        out = []
        for n in names:
            lib = n in _library()
            best = self.board(n, "standard", 1, "current")
            out.append(
                {
                    "name": n,
                    "library": lib,
                    "length_m": round(float(_stage(n).timed_length_m), 1) if lib else None,
                    "description": _stage(n).description if lib else "",
                    "record": best[0].to_dict() if best else None,
                    "board": f"/api/v1/boards/{n}",
                    "map": f"/api/v1/stages/{n}/map" if lib else None,
                }
            )
        return out

    def page(self, name: str, status: int = 200, **ctx: Any) -> HTMLResponse:
        return HTMLResponse(self.jinja.get_template(name).render(**ctx), status_code=status)

    def error(
        self, path: str, status: int, code: str, message: str, headers: dict | None = None
    ) -> Response:
        """An error of a request for ``path``: JSON under /api/, the error page elsewhere."""
        if path.startswith("/api/"):
            body = {"error": {"code": code, "message": message}}
            return JSONResponse(body, status_code=status, headers=headers)
        page = self.jinja.get_template("error.html").render(status=status, message=message)
        return HTMLResponse(page, status_code=status, headers=headers)


def _public(d: dict[str, Any]) -> dict[str, Any]:
    """A submission as the API shows it."""
    rep = d.get("report") or {}
    run = d.get("run")
    keys = "id status player submitted_utc verdict_utc reason message step run_id".split()
    out = {k: d[k] for k in keys}
    out["verdict"] = rep.get("status")
    out["stage"] = (run or {}).get("stage") or rep.get("stage") or None
    out["finish_time_s"] = (run or {}).get("finish_time_s")
    if run is not None:
        out["run"] = run
    return out


@functools.lru_cache(maxsize=1)
def _library() -> tuple[str, ...]:
    return tuple(tracks.list_stages())


_board_digest = functools.lru_cache(maxsize=256)(current_stage_digest)
_stage = functools.lru_cache(maxsize=64)(tracks.load_stage)


@functools.lru_cache(maxsize=64)
def _map(name: str) -> dict[str, Any]:
    return stage_geometry(_stage(name), step_m=8.0)


def _check_board(stage: str, rules: str = "standard") -> None:
    """A board request's stage name and rules (400 ``bad_stage``, ``bad_request``)."""
    if not STAGE_RE.match(stage):
        raise ApiError(400, "bad_stage", "a stage name is lowercase letters, digits, . _ -")
    if not RULES_RE.match(rules):
        raise ApiError(400, "bad_request", "rules: standard, all or a 16-digit rules digest")


def _svg_path(geom: dict[str, Any], w: float = 240, h: float = 160) -> dict[str, Any]:
    xs, ys = geom["x"], geom["y"]
    x0, x1, y0, y1 = min(xs), max(xs), min(ys), max(ys)
    s = min((w - 10) / max(x1 - x0, 1e-6), (h - 10) / max(y1 - y0, 1e-6))
    pts = " ".join(
        f"{5 + (x - x0) * s:.1f},{h - 5 - (y - y0) * s:.1f}" for x, y in zip(xs, ys, strict=True)
    )
    return {"points": pts, "w": w, "h": h}


def _error_handlers(app: FastAPI, ctx: _Ctx) -> None:
    """Errors as JSON under /api/, as the error page elsewhere (:meth:`_Ctx.error`)."""

    @app.exception_handler(ApiError)
    async def _api_error(request: Request, e: ApiError):
        return ctx.error(request.url.path, e.status, e.code, e.message, e.headers)

    @app.exception_handler(StoreBusy)
    @app.exception_handler(QueueFull)
    async def _retry_later(request: Request, e: StoreBusy | QueueFull):
        headers = {"Retry-After": str(ctx.cfg.retry_after_s)}
        if isinstance(e, QueueFull):
            return ctx.error(request.url.path, 503, "queue_full", f"{e}; retry later", headers)
        msg = f"{e}; retry in {ctx.cfg.retry_after_s} s"
        return ctx.error(request.url.path, 503, "busy", msg, headers)

    @app.exception_handler(StarletteHTTPException)
    async def _http_error(request: Request, e: StarletteHTTPException):
        code = {404: "not_found", 405: "method_not_allowed"}.get(e.status_code, "http_error")
        return ctx.error(request.url.path, e.status_code, code, str(e.detail))

    @app.exception_handler(RequestValidationError)
    async def _validation_error(request: Request, e: RequestValidationError):
        parts = []
        for err in e.errors()[:3]:
            loc = ".".join(str(x) for x in err.get("loc", ()) if x != "query")
            parts.append(f"{loc}: {err.get('msg', 'invalid')}")
        msg = "; ".join(parts) or "invalid request"
        return ctx.error(request.url.path, 400, "bad_request", msg)


def _upload_route(app: FastAPI, ctx: _Ctx) -> None:
    """POST /api/v1/runs: a replay upload, after the rate limits and the token."""

    @app.post(
        "/api/v1/runs",
        status_code=202,
        summary="Submit a replay for verification",
        openapi_extra={
            "requestBody": {
                "required": True,
                "content": {
                    "application/octet-stream": {"schema": {"type": "string", "format": "binary"}},
                    "multipart/form-data": {
                        "schema": {
                            "type": "object",
                            "properties": {"file": {"type": "string", "format": "binary"}},
                        }
                    },
                },
            }
        },
        responses={
            202: {"description": "queued"},
            401: {"description": "missing or bad token"},
            408: {"description": "the body arrived too slowly"},
            413: {"description": "the body is over the size limit"},
            415: {"description": "not a replay's bytes nor a multipart form"},
            429: {"description": "rate limited (Retry-After)"},
            503: {"description": "the queue is full (Retry-After)"},
        },
    )
    async def submit_run(
        request: Request,
        player: str | None = Query(
            None, description="name shown on the board (default: the token's name)"
        ),
    ) -> JSONResponse:
        """The body is the replay file (``.rrp.json.gz`` or JSON) as
        ``application/octet-stream``, or a ``multipart/form-data`` form whose one file part is
        the replay (``curl -F file=@run.rrp.json.gz``); ``Authorization: Bearer <token>``."""
        addr = request.client.host if request.client else "-"
        await in_thread(ctx.addr_rl.take, addr, f"from {addr}")
        auth = request.headers.get("authorization", "")
        if not auth:
            raise ApiError(401, "missing_token", "send Authorization: Bearer <token>")
        scheme, _, token = auth.partition(" ")
        token = token.strip()
        if scheme.lower() != "bearer" or not TOKEN_RE.match(token):
            raise ApiError(401, "bad_token", "the token is malformed")
        found = await in_thread(ctx.store.token_id, token)
        if found is None:
            raise ApiError(401, "bad_token", "unknown or revoked token")
        token_id, token_name = found
        await in_thread(ctx.token_rl.take, token_id, "with this token")
        name = token_name if player is None else player
        if not (1 <= len(name) <= 40) or not name.isprintable() or name.strip() != name:
            raise ApiError(
                400,
                "bad_player",
                "player: 1-40 printable characters, no leading or trailing spaces",
            )
        ctype = request.headers.get("content-type", "")
        media = ctype.split(";", 1)[0].strip().lower()
        if media not in RAW_TYPES and media != "multipart/form-data":
            raise ApiError(
                415,
                "unsupported_media_type",
                f"an upload of type {media[:80]!r} is not taken: {HOW_TO_UPLOAD}",
            )
        limit = ctx.cfg.max_upload_bytes
        length = request.headers.get("content-length")
        if length is not None:
            if not length.isdigit():
                raise ApiError(400, "bad_request", "Content-Length is not a number")
            if int(length) > limit:
                raise ApiError(413, "too_large", f"the upload is over the {limit} byte limit")
        body = await _read_body(request, limit, ctx.cfg.body_timeout_s)
        if media == "multipart/form-data":
            body = multipart_file(body, ctype)
        sub_id = await in_thread(ctx.store.submit, body, token_id, addr, name, ctx.cfg.max_queue)
        ctx.verifier.notify()
        url = f"/api/v1/runs/{sub_id}"
        return JSONResponse(
            {"id": sub_id, "status": "queued", "url": url, "page": f"/runs/{sub_id}"},
            status_code=202,
            headers={"Location": url},
        )


def _run_routes(app: FastAPI, ctx: _Ctx) -> None:
    """A submission's status, its replay and its re-simulated trace."""

    @app.get("/api/v1/runs/{run_id}", summary="A submission's status and verdict")
    def get_run(run_id: str) -> JSONResponse:
        """``status`` is ``queued``, ``verifying``, ``accepted`` or ``rejected`` (then
        ``reason``, ``message`` and ``step`` say why)."""
        return JSONResponse(_public(ctx.submission(run_id)))

    @app.get("/api/v1/runs/{run_id}/replay", summary="An accepted run's replay file")
    def get_replay(run_id: str) -> Response:
        d = ctx.submission(run_id)
        blob = ctx.store.replay_blob(d["run_id"]) if d["status"] == "accepted" else None
        if blob is None:
            raise ApiError(404, "not_found", f"run {run_id} has no accepted replay")
        name = f"{d['run_id']}.rrp.json.gz"
        return Response(
            blob,
            media_type="application/gzip",
            headers={"Content-Disposition": f'attachment; filename="{name}"'},
        )

    @app.get("/api/v1/runs/{run_id}/trace", summary="An accepted run's re-simulated trace")
    def get_trace(run_id: str, request: Request) -> Response:
        """Per control step: ``t``, ``x``, ``y``, ``heading``, ``speed``, ``progress``; the
        split and finish times and the stage geometry; from the server's re-simulation."""
        d = ctx.submission(run_id)
        if d["status"] != "accepted":
            raise ApiError(404, "not_found", f"run {run_id} is not accepted ({d['status']})")
        rid = d["run_id"]
        data = ctx.store.trace(rid)
        if data is None:
            blob = ctx.store.replay_blob(rid)
            try:
                data = ctx.verifier.trace(blob)
            except TaskFailed as e:
                raise ApiError(503, "trace_failed", str(e)) from None
            ctx.store.put_trace(rid, data)
        headers = {"Cache-Control": "public, max-age=86400"}
        if "gzip" in request.headers.get("accept-encoding", ""):
            headers["Content-Encoding"] = "gzip"
            return Response(data, media_type="application/json", headers=headers)
        return Response(gzip.decompress(data), media_type="application/json", headers=headers)


def _stage_routes(app: FastAPI, ctx: _Ctx) -> None:
    """The stages, their maps and boards, and the health check."""

    @app.get("/api/v1/stages", summary="The stages, each with its standard-rules record")
    def get_stages() -> JSONResponse:
        return JSONResponse(ctx.stages())

    @app.get("/api/v1/stages/{stage}/map", summary="A library stage's geometry")
    def get_map(stage: str) -> JSONResponse:
        _check_board(stage)
        if stage not in _library():
            raise ApiError(404, "not_found", f"no library stage {stage}")
        return JSONResponse(_map(stage))

    @app.get("/api/v1/boards/{stage}", summary="A stage's board, fastest first")
    def get_board(
        stage: str,
        rules: str = Query("standard", description="standard, all, or a rules digest"),
        limit: int = Query(10, ge=1, le=100, description="entries per class"),
        versions: str = Query("current", pattern="^(current|all)$"),
    ) -> JSONResponse:
        _check_board(stage, rules)
        entries = ctx.board(stage, rules, limit, versions)
        return JSONResponse(
            {"stage": stage, "rules": rules, "entries": [e.to_dict() for e in entries]}
        )

    @app.get("/api/v1/health", summary="Queue and board counts")
    def health() -> JSONResponse:
        return JSONResponse({"ok": True, **ctx.store.counts()})


def _page_routes(app: FastAPI, ctx: _Ctx) -> None:
    """The HTML pages: the index, a stage's board, a run."""

    @app.get("/", response_class=HTMLResponse, include_in_schema=False)
    def index_page() -> HTMLResponse:
        stages = ctx.stages()
        for s in stages:
            s["svg"] = _svg_path(_map(s["name"])) if s["library"] else None
        return ctx.page("index.html", stages=stages)

    @app.get("/stages/{stage}", response_class=HTMLResponse, include_in_schema=False)
    def stage_page(
        stage: str,
        rules: str = Query("standard"),
        limit: int = Query(50, ge=1, le=100),
    ) -> HTMLResponse:
        _check_board(stage, rules)
        entries = ctx.board(stage, rules, limit, "current")
        lib = stage in _library()
        if not entries and not lib:
            raise StarletteHTTPException(404, f"no stage {stage}")
        svg = _svg_path(_map(stage), 480, 320) if lib else None
        return ctx.page("stage.html", stage=stage, entries=entries, rules=rules, svg=svg)

    @app.get("/runs/{run_id}", response_class=HTMLResponse, include_in_schema=False)
    def run_page(run_id: str, ghosts: str = Query("", max_length=200)) -> HTMLResponse:
        d = ctx.submission(run_id)
        run = d.get("run")
        ghost_ids: list[str] = [g for g in ghosts.split(",") if ID_RE.match(g)][:3]
        record = None
        if run is not None:
            board = ctx.store.best(run["stage"], run["stage_digest"], run["rules"], 4)
            record = board[0].run_id if board else None
            if not ghosts:
                ghost_ids = [e.run_id for e in board if e.run_id != run["run_id"]][:3]
        page = {"run": d["run_id"], "record": record, "ghosts": ghost_ids, "player": d["player"]}
        return ctx.page(
            "run.html",
            sub=_public(d),
            run=run,
            record=record,
            ghosts=ghost_ids,
            config=json.dumps(page),
        )


def multipart_file(body: bytes, content_type: str) -> bytes:
    """The content of the one file part of a ``multipart/form-data`` body (RFC 7578; the
    part with a ``filename``, or the only part).

    Raises:
        ApiError: (400 ``bad_upload``) not a well-formed form, or not exactly one file in it.
    """
    head = email.parser.BytesHeaderParser(policy=email.policy.HTTP).parsebytes(
        b"Content-Type: " + content_type.encode("latin-1", "replace") + b"\r\n\r\n"
    )
    boundary = head.get_param("boundary")
    if not isinstance(boundary, str) or not 1 <= len(boundary) <= 70:
        raise ApiError(400, "bad_upload", f"the multipart form has no boundary: {HOW_TO_UPLOAD}")
    delim = b"\r\n--" + boundary.encode("latin-1", "replace")
    start = body.find(delim[2:])
    if start < 0 or (start and body[start - 2 : start] != b"\r\n"):
        raise ApiError(400, "bad_upload", f"the multipart form is malformed: {HOW_TO_UPLOAD}")
    pieces = (b"\r\n" + body[start:]).split(delim)[1:]
    if not pieces or not pieces[-1].startswith(b"--"):
        raise ApiError(400, "bad_upload", "the multipart form is truncated (no final boundary)")
    parts: list[tuple[bool, bytes]] = []
    for piece in pieces[:-1]:
        headers, sep, content = piece.partition(b"\r\n\r\n")
        if not sep:
            raise ApiError(400, "bad_upload", "a part of the multipart form has no headers")
        msg = email.parser.BytesHeaderParser(policy=email.policy.HTTP).parsebytes(
            headers.lstrip(b" \t").removeprefix(b"\r\n") + b"\r\n\r\n"
        )
        parts.append((msg.get_filename() is not None, content))
    files = [c for is_file, c in parts if is_file] or [c for _, c in parts if len(parts) == 1]
    if len(files) != 1:
        raise ApiError(
            400,
            "bad_upload",
            f"a multipart upload holds one file part, this one has {len(files)}: {HOW_TO_UPLOAD}",
        )
    if not files[0]:
        raise ApiError(400, "empty_body", "the uploaded file is empty")
    return files[0]


class StrictQuery:
    """ASGI middleware: a query string with a :func:`query_problem` is refused (400) before
    any route reads it (Starlette would read it as U+FFFD, or the last of a repeated name)."""

    def __init__(self, app: Any, error: Any):
        self.app, self.error = app, error

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            problem = query_problem(scope.get("query_string", b""))
            if problem is not None:
                resp = self.error(scope.get("path", ""), 400, *problem)
                await resp(scope, receive, send)
                return
        await self.app(scope, receive, send)


def query_problem(raw: bytes) -> tuple[str, str] | None:
    """(error code, message) of what is wrong with a raw query string (a name or value not
    UTF-8 once percent-decoded, a repeated name), or None."""
    from urllib.parse import unquote_to_bytes

    seen: set[str] = set()
    for field_ in raw.split(b"&"):
        if not field_:
            continue
        key, _, value = field_.partition(b"=")
        try:
            name = unquote_to_bytes(key.replace(b"+", b" ")).decode("utf-8")
        except UnicodeDecodeError:
            return "bad_request", "a query parameter's name is not UTF-8"
        code = "bad_player" if name == "player" else "bad_request"
        try:
            unquote_to_bytes(value.replace(b"+", b" ")).decode("utf-8")
        except UnicodeDecodeError:
            return code, f"{name[:40]}: not UTF-8 text once percent-decoded"
        if name in seen:
            return code, f"{name[:40]}: given more than once"
        seen.add(name)
    return None


async def _read_body(request: Request, limit: int, timeout_s: float) -> bytes:
    """The request body, read while counting: over ``limit`` bytes is a 413 as soon as it
    is seen, a body not complete within ``timeout_s`` a 408."""
    chunks: list[bytes] = []
    size = 0
    try:
        async with asyncio.timeout(timeout_s):
            async for chunk in request.stream():
                size += len(chunk)
                if size > limit:
                    raise ApiError(413, "too_large", f"the upload is over the {limit} byte limit")
                chunks.append(chunk)
    except TimeoutError:
        raise ApiError(
            408, "slow_body", f"the upload did not arrive within {timeout_s:g} s"
        ) from None
    if size == 0:
        raise ApiError(400, "empty_body", "the body must be a replay file")
    return b"".join(chunks)
