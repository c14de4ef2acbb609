"""What a replay may cost to verify, checked before anything is built from it: every claim is
bounded by a :class:`Budgets` field, and a replay over one is refused with
:class:`ReplayBudgetError` (``docs/replays.md``, "Budgets").
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields
from typing import Any

from rally_env.replay.errors import ReplayTooLargeError

#: Largest integer a replay may hold anywhere: seeds and PCG64 states are 128-bit.
MAX_INT = 2**128
#: Deepest nesting of JSON containers in a replay (an embedded stage list is 7 deep).
MAX_DEPTH = 12


class ReplayBudgetError(ReplayTooLargeError):
    """A replay claims more work than the verifier's :class:`Budgets` allow."""


@dataclass(frozen=True, slots=True)
class Budgets:
    """Limits on what verifying one replay may cost; every field a positive number, each
    described with its default in ``docs/replays.md``, "Budgets" (bytes, counts, seconds of
    simulated time, metres, terrain grid nodes, as the names say).
    """

    max_file_bytes: int = 32 * 1024 * 1024
    max_json_bytes: int = 32 * 1024 * 1024
    max_json_containers: int = 50_000
    max_json_items: int = 500_000
    max_meta_bytes: int = 16 * 1024
    max_sim_s: float = 3600.0
    max_hash_interval_s: float = 10.0
    max_stage_list: int = 8
    max_stage_knots: int = 20_000
    max_timing_lines: int = 2_000
    max_stage_length_m: float = 5_000.0
    max_terrain_nodes: int = 12_000_000

    def __post_init__(self) -> None:
        for f in fields(self):
            v = getattr(self, f.name)
            ok = isinstance(v, (int, float)) and not isinstance(v, bool) and v > 0
            if not ok or not math.isfinite(v):
                raise ValueError(f"Budgets.{f.name} must be a positive number, got {v!r}")


DEFAULT_BUDGETS = Budgets()


def too_large(where: str, limit: int, what: str = "") -> ReplayTooLargeError:
    """The error of a replay over ``limit`` bytes (``what``: ``" (decompressed)"``)."""
    return ReplayTooLargeError(
        f"{where}: larger than the {limit // (1024 * 1024)} MiB replay limit{what}"
    )


def check_json_text(data: bytes, where: str, budgets: Budgets) -> None:
    """Refuse JSON text that could make the parser build more objects than the budget (the
    counts over the raw bytes bound what the parser creates)."""
    if len(data) > budgets.max_json_bytes:
        raise too_large(where, budgets.max_json_bytes)
    containers = data.count(b"{") + data.count(b"[")
    if containers > budgets.max_json_containers:
        raise ReplayBudgetError(
            f"{where}: {containers} JSON objects and arrays exceed the budget of "
            f"{budgets.max_json_containers}"
        )
    items = data.count(b",")
    if items > budgets.max_json_items:
        raise ReplayBudgetError(
            f"{where}: {items} JSON values exceed the budget of {budgets.max_json_items}"
        )


def bad_value(doc: Any) -> str | None:
    """The path of the first value in a parsed JSON document that no replay holds: an integer
    beyond :data:`MAX_INT`, a non-finite number (``1e400`` parses as infinity) or nesting
    deeper than :data:`MAX_DEPTH`; ``None`` if there is none. Iterative: any depth is safe."""
    stack: list[tuple[Any, str, int]] = [(doc, "", 0)]
    while stack:
        v, path, depth = stack.pop()
        if isinstance(v, (dict, list)) and depth >= MAX_DEPTH:
            return f"{path or '<document>'} (nested deeper than {MAX_DEPTH})"
        if isinstance(v, dict):
            stack.extend((x, f"{path}.{k}" if path else str(k), depth + 1) for k, x in v.items())
        elif isinstance(v, list):
            stack.extend((x, f"{path}[{i}]", depth + 1) for i, x in enumerate(v))
        elif isinstance(v, int) and not isinstance(v, bool) and abs(v) >= MAX_INT:
            return f"{path} (an integer of {len(str(abs(v)))} digits)"
        elif isinstance(v, float) and not math.isfinite(v):
            return f"{path} (not a finite number)"
    return None


def check_run(steps: int, control_hz: int, hash_every: int, where: str, budgets: Budgets) -> None:
    """The claimed length and hash spacing, from the document alone."""
    if steps / control_hz > budgets.max_sim_s:
        raise ReplayBudgetError(
            f"{where}: {steps} steps at {control_hz} Hz ({steps / control_hz:.0f} s) exceed the "
            f"budget of {budgets.max_sim_s:g} s of simulated time"
        )
    if hash_every / control_hz > budgets.max_hash_interval_s:
        raise ReplayBudgetError(
            f"{where}: a state hash every {hash_every} steps ({hash_every / control_hz:g} s) is "
            f"sparser than the budget of one every {budgets.max_hash_interval_s:g} s"
        )


def check_stage_doc(doc: dict[str, Any], where: str, budgets: Budgets) -> None:
    """An embedded stage's size, before it is built."""
    for key, limit in (
        ("knots", budgets.max_stage_knots),
        ("checkpoints_m", budgets.max_timing_lines),
    ):
        v = doc.get(key)
        if isinstance(v, list) and len(v) > limit:
            raise ReplayBudgetError(f"{where}.{key}: {len(v)} entries exceed the budget of {limit}")
    fin = doc.get("finish")
    laps = fin.get("laps") if isinstance(fin, dict) else None
    cps = doc.get("checkpoints_m")
    n_cp = len(cps) if isinstance(cps, list) else 0
    is_int = isinstance(laps, int) and not isinstance(laps, bool)
    if is_int and laps * (n_cp + 1) > budgets.max_timing_lines:
        raise ReplayBudgetError(
            f"{where}: {laps} laps x {n_cp + 1} lines exceed the budget of "
            f"{budgets.max_timing_lines} timed lines"
        )


def check_stages(stages: list[Any], where: str, budgets: Budgets) -> None:
    """Built (not yet baked) stages: length, timing lines, and the terrain grid of all."""
    from rally_env.stages import timing_lines
    from tracks.bake import grid_for

    nodes = 0
    for st in stages:
        if st.path.length_m > budgets.max_stage_length_m:
            raise ReplayBudgetError(
                f"{where}: stage {st.name!r} is {st.path.length_m:.0f} m long, over the budget "
                f"of {budgets.max_stage_length_m:g} m"
            )
        n_lines = len(timing_lines(st))
        if n_lines > budgets.max_timing_lines:
            raise ReplayBudgetError(
                f"{where}: stage {st.name!r} has {n_lines} timed lines, over the budget of "
                f"{budgets.max_timing_lines}"
            )
        _, _, nx, ny = grid_for(st, 1.0)
        nodes += nx * ny
    if nodes > budgets.max_terrain_nodes:
        raise ReplayBudgetError(
            f"{where}: the stages' terrain needs {nodes:,} grid nodes (~{nodes * 58 / 2**20:.0f} "
            f"MiB), over the budget of {budgets.max_terrain_nodes:,}"
        )


def time_limit_steps(config: Any, stages: list[Any]) -> int:
    """The most control steps an episode of ``config`` can last on any of ``stages`` (the
    time limit truncates it), for the random stage: at ``random_stage.length_m`` (times the
    laps when it may be a loop)."""
    term = config.termination
    if term.time_limit_s is not None:
        limit = term.time_limit_s
    else:
        timed = max((st.timed_length_m for st in stages), default=0.0)
        if not stages:  # stage="random": generated at reset, about length_m long (a lap)
            rs = config.random_stage
            timed = 1.5 * float(rs["length_m"]) * (int(rs["laps"]) if "loops" in rs else 1)
        limit = term.time_limit_base_s + timed / term.time_limit_speed_mps
    return int(math.ceil(limit * config.control_hz)) + 1
