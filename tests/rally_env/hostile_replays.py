"""Crafted hostile replays (no tests here): what an attacker uploads to a leaderboard.

Each builder takes the JSON document of an honest ``opener`` replay and returns the bytes of
a crafted file. ``benchmarks/hostile.py`` measures verdict, peak memory and time of each;
``test_replay_hostile.py`` checks the verdicts.
"""

from __future__ import annotations

import base64
import copy
import gzip
import json
import math
import zlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from tests.hostile import with_value

FIXTURES = Path(__file__).parent / "fixtures" / "replays"
HONEST = FIXTURES / "v0-opener.rrp.json.gz"


def honest_doc() -> dict[str, Any]:
    """The honest opener run (1,790 steps, finished) as a JSON document."""
    return json.loads(gzip.decompress(HONEST.read_bytes()))


def _bytes(doc: Any) -> bytes:
    return gzip.compress(json.dumps(doc, separators=(",", ":")).encode(), 6, mtime=0)


def redigest(doc: dict[str, Any]) -> dict[str, Any]:
    """Recompute ``config_digest`` for edited settings, as an attacker would (the algorithm
    is public), so the file gets past the digest check to the budgets."""
    from rally_env.config import RallyConfig
    from rally_env.replay import Budgets, kwargs_to_env_args

    lax = Budgets(max_stage_list=10**6, max_stage_knots=10**9, max_timing_lines=10**9)
    args = kwargs_to_env_args(doc["env_kwargs"], lax)
    doc["config_digest"] = RallyConfig.build(**args).digest()
    return doc


def _tiny_stage_doc() -> dict[str, Any]:
    from tests.rally_env.test_replay_support import tiny_stage

    return tiny_stage().to_dict()


def _zero_actions(steps: int) -> dict[str, Any]:
    raw = np.zeros((steps, 4), "<f4").tobytes()
    return {
        "dtype": "<f4",
        "shape": [steps, 4],
        "encoding": "zlib+base64",
        "data": base64.b64encode(zlib.compress(raw, 9)).decode(),
    }


def stage_renamed(doc: dict[str, Any]) -> bytes:
    """An honest opener run claiming to be on sweepers."""
    return _bytes(with_value(doc, ("stage", "name"), "sweepers"))


def render_human(doc: dict[str, Any]) -> bytes:
    """``env_kwargs.render_mode = "human"``: a window, paced in real time."""
    return _bytes(with_value(doc, ("env_kwargs", "render_mode"), "human"))


def gen_path(doc: dict[str, Any]) -> bytes:
    """A ``gen-`` stage that is a path (``gen-x/../stage.toml``)."""
    return _bytes(with_value(doc, ("env_kwargs", "stage"), "gen-x/../stage.toml"))


def gen_dev_zero(doc: dict[str, Any]) -> bytes:
    """A ``gen-`` stage that reads ``/dev/zero``."""
    return _bytes(with_value(doc, ("env_kwargs", "stage"), "gen-x/../../../../dev/zero"))


def _diagonal(doc: dict[str, Any], length_m: float) -> bytes:
    d = copy.deepcopy(doc)
    st = _tiny_stage_doc()
    side = length_m / math.sqrt(2.0)
    st["knots"] = [[i * side / 2, i * side / 2, 0.0] for i in range(3)]
    st["finish"] = {"s_m": length_m - 20.0}
    d["env_kwargs"]["stage"] = {"embedded": st}
    return _bytes(redigest(d))


def diagonal_stage(doc: dict[str, Any]) -> bytes:
    """A 1.6 KB embedded diagonal stage just under the bake's 60 M-node limit (10.9 km)."""
    return _diagonal(doc, 10_900.0)


def diagonal_stage_in_length(doc: dict[str, Any]) -> bytes:
    """A diagonal stage inside the length budget (4.9 km) whose terrain is 12.9 M nodes."""
    return _diagonal(doc, 4_900.0)


def diagonal_stage_in_budget(doc: dict[str, Any]) -> bytes:
    """A diagonal stage just inside every budget (4.7 km, 11.9 M terrain nodes): built, then
    rejected (the car drives it, not the claimed opener)."""
    return _diagonal(doc, 4_700.0)


def most_knots(doc: dict[str, Any]) -> bytes:
    """An embedded stage with as many knots as the length budget allows (4,900, 1 m apart)."""
    d = copy.deepcopy(doc)
    st = _tiny_stage_doc()
    n = 4_900
    st["knots"] = [[float(i), 0.0, 0.0] for i in range(n)]
    st["finish"] = {"s_m": n - 100.0}
    d["env_kwargs"]["stage"] = {"embedded": st}
    return _bytes(redigest(d))


def random_longest(doc: dict[str, Any]) -> bytes:
    """``stage="random"`` at the longest ``random_stage.length_m`` the budget allows (5 km)."""
    d = copy.deepcopy(doc)
    d["env_kwargs"]["stage"] = "random"
    d["env_kwargs"]["random_stage"] = {"length_m": 5_000.0}
    return _bytes(redigest(d))


def gen_list(doc: dict[str, Any]) -> bytes:
    """A list of 40 generated stages (about 25 MB of terrain each)."""
    d = copy.deepcopy(doc)
    d["env_kwargs"]["stage"] = [f"gen-{i}" for i in range(40)]
    return _bytes(d)  # refused before any digest could matter


def gen_list_in_budget(doc: dict[str, Any]) -> bytes:
    """A list of 8 generated stages: inside the list budget (built, then rejected: the car
    drives one of them, not the claimed opener)."""
    d = copy.deepcopy(doc)
    d["env_kwargs"]["stage"] = [f"gen-{i}" for i in range(8)]
    return _bytes(redigest(d))


def many_laps(doc: dict[str, Any]) -> bytes:
    """A loop of 1,000 laps x 1,500 checkpoints (21 KB)."""
    d = copy.deepcopy(doc)
    st = _tiny_stage_doc()
    r = 60.0
    st["knots"] = [
        [r * math.cos(2 * math.pi * i / 40), r * math.sin(2 * math.pi * i / 40), 0.0]
        for i in range(40)
    ]
    st["closed"] = True
    st["finish"] = {"laps": 1000}
    st["checkpoints_m"] = [0.2 * (i + 1) for i in range(1500)]
    d["env_kwargs"]["stage"] = {"embedded": st}
    return _bytes(d)


def meta_bomb(doc: dict[str, Any]) -> bytes:
    """31 MiB of ``{}`` in ``meta`` (48 KB gzip)."""
    d = copy.deepcopy(doc)
    d["meta"] = {"x": "PLACEHOLDER"}
    text = json.dumps(d, separators=(",", ":"))
    n = (31 * 1024 * 1024) // 3
    bomb = "[" + ",".join(["{}"] * n) + "]"
    return gzip.compress(text.replace('"PLACEHOLDER"', bomb).encode(), 6, mtime=0)


def long_zero_run(doc: dict[str, Any]) -> bytes:
    """5,184,000 zero actions at 60 Hz, relaxed termination, one hash at the end (1.3 KB)."""
    d = copy.deepcopy(doc)
    steps = 5_184_000
    d["env_kwargs"]["control_hz"] = d["control_hz"] = 60
    d["env_kwargs"]["termination"].update(
        {"stuck_time_s": 1e6, "time_limit_s": 1e7, "off_road_max_s": 1e6, "roll_time_s": 1e6}
    )
    redigest(d)
    d["steps"] = steps
    d["actions"] = _zero_actions(steps)
    d["hash_every"] = steps
    d["hashes"] = [d["final_hash"]]
    return _bytes(d)


def past_time_limit(doc: dict[str, Any]) -> bytes:
    """More zero actions than the opener's time limit allows (within the sim-time budget)."""
    d = copy.deepcopy(doc)
    steps = 20 * 1000
    d["steps"] = steps
    d["actions"] = _zero_actions(steps)
    d["hashes"] = [d["final_hash"]] * (steps // d["hash_every"])
    return _bytes(d)


def sparse_hashes(doc: dict[str, Any]) -> bytes:
    """The honest actions with a single hash at the end (``hash_every = steps``)."""
    d = copy.deepcopy(doc)
    d["hash_every"] = d["steps"]
    d["hashes"] = [d["final_hash"]]
    return _bytes(d)


def faster_claim(doc: dict[str, Any]) -> bytes:
    """The honest run claiming a finish 1 ulp faster."""
    d = copy.deepcopy(doc)
    t = d["result"]["finish_time_s"]
    d["result"]["finish_time_s"] = math.nextafter(t, 0.0)
    return _bytes(d)


def deep_nesting(doc: dict[str, Any]) -> bytes:
    """``env_kwargs.stage`` nested in 500 lists."""
    d = copy.deepcopy(doc)
    v: Any = d["env_kwargs"]["stage"]
    for _ in range(500):
        v = [v]
    d["env_kwargs"]["stage"] = v
    return _bytes(d)


def huge_int(doc: dict[str, Any]) -> bytes:
    """A 401-digit integer as the finish time."""
    return _bytes(with_value(doc, ("result", "finish_time_s"), 10**400))


def honest_twin(data: bytes, max_steps: int | None = None) -> bytes | None:
    """An honest replay of a crafted file's settings and reset, as long as it claims (or until
    the episode ends), driven by a pure-pursuit driver: what an honest run of the same claimed
    work costs to verify. ``None`` if the verifier refuses the file before it builds an env."""
    from rally_env.replay import ReplayError, replay_from_bytes
    from rally_env.replay.resim import build_env, settings_of
    from tests.rally_env.test_replay_support import record_run

    try:
        replay = replay_from_bytes(data, "<crafted>")
        args, _ = settings_of(replay)
        build_env(replay).close()  # every budget, as the verifier checks them
    except ReplayError:
        return None
    if "seed" not in replay.reset:
        return None
    steps = replay.steps if max_steps is None else min(replay.steps, max_steps)
    twin, _ = record_run(seed=int(replay.reset["seed"]), max_steps=steps, **args)
    return twin.to_bytes()


#: name -> (builder, expected status, a word of the expected reason or message)
CRAFTED: dict[str, tuple[Callable[[dict[str, Any]], bytes], str, str]] = {
    "honest": (lambda d: _bytes(d), "accepted", ""),
    "stage_renamed": (stage_renamed, "rejected", "stage_mismatch"),
    "faster_claim": (faster_claim, "rejected", "finish_time"),
    "render_human": (render_human, "unusable", "render_mode"),
    "gen_path": (gen_path, "unusable", "never read from a path"),
    "gen_dev_zero": (gen_dev_zero, "unusable", "never read from a path"),
    "diagonal_stage": (diagonal_stage, "unusable", "over the budget"),
    "diagonal_stage_in_length": (diagonal_stage_in_length, "unusable", "grid nodes"),
    "diagonal_stage_in_budget": (diagonal_stage_in_budget, "rejected", "stage_mismatch"),
    "most_knots": (most_knots, "rejected", "stage_mismatch"),
    "random_longest": (random_longest, "rejected", "stage_mismatch"),
    "gen_list": (gen_list, "unusable", "list of 40 stages"),
    "gen_list_in_budget": (gen_list_in_budget, "rejected", "stage_mismatch"),
    "many_laps": (many_laps, "unusable", "budget"),
    "meta_bomb": (meta_bomb, "unusable", "JSON objects and arrays"),
    "long_zero_run": (long_zero_run, "unusable", "simulated time"),
    "past_time_limit": (past_time_limit, "unusable", "time limit"),
    "sparse_hashes": (sparse_hashes, "unusable", "sparser"),
    "deep_nesting": (deep_nesting, "unusable", "nested"),
    "huge_int": (huge_int, "unusable", "digits"),
}


# ----------------------------------------------------------- attacks on a leaderboard's trust
def stolen(doc: dict[str, Any]) -> bytes:
    """Someone else's accepted run with a setting a finished run never pays changed
    (``reward_weights.crash`` 20 -> 21) and ``config_digest`` recomputed: a valid replay of
    the same drive under another run id. A board must take it as a duplicate."""
    d = copy.deepcopy(doc)
    d["env_kwargs"]["reward_weights"]["crash"] += 1.0
    d["meta"] = {"player": "thief"}
    return _bytes(redigest(d))


def pool_bomb(doc: dict[str, Any]) -> bytes:
    """1.4 KB that redrew two 65,536-stage pool windows every env step (28 s for 300 steps
    where a 4-stage pool took 0.07 s): refused by the settings check."""
    d = copy.deepcopy(doc)
    d["env_kwargs"]["stage"] = "random"
    d["env_kwargs"]["random_stage"] = {
        "pool": 65536,
        "pool_steps": 1,
        "loops": 1.0,
        "laps": 10,
        "length_m": 5000,
    }
    d["reset"]["pool"] = {"seed": 1, "clock": 0}
    return _bytes(d)


def spoofed_gen_stage(name: str = "gen-5", length_m: float = 300.0) -> bytes:
    """An honest, finished run on an embedded straight ``length_m`` long *named* ``name``
    (the name of a generated stage it is not): it verifies, and a board of ``name`` must not
    show it (recorded here: a few seconds)."""
    from tests.rally_env.test_replay_support import record_run
    from tracks import Finish, PathBuilder, Section, Stage, Start

    b = PathBuilder(knot_spacing_m=10.0)
    b.straight(length_m + 60.0)
    st = Stage(
        name=name,
        knots=b.knots(),
        sections=(Section(0.0, 8.0, "gravel"),),
        finish=Finish(s_m=length_m),
        start=Start(10.0, 0.0),
    )
    run, _ = record_run(seed=1, vmax=30.0, stage=st)
    assert run.finished, run.end_reason
    return run.to_bytes(compress=True)


#: The pool bomb's settings at the bound the settings check allows (16 stages a step).
POOL_AT_BOUND = {"pool": 16, "pool_steps": 1, "loops": 1.0, "laps": 10, "length_m": 5000.0}


def pool_at_bound(steps: int = 1790) -> bytes:
    """An honest run of ``steps`` steps with the costliest stage pool the settings allow (a
    fresh window of 16 five-kilometre ten-lap loops every env step): what verifying the
    largest pool work costs (recorded here)."""
    from tests.rally_env.test_replay_support import record_run

    run, _ = record_run(seed=3, max_steps=steps, stage="random", random_stage=POOL_AT_BOUND)
    return run.to_bytes(compress=True)
