"""The tables of docs/env.md, made from the constants the code uses.

docs/env.md is written by hand but for its tables: each one sits between a line
``<!-- table: NAME -->`` and a line ``<!-- /table -->``, and ``TABLES[NAME]`` makes it.
``python3 -m tests.env_doc`` rewrites the tables in place (the prose is left as it is);
tests/test_env_doc.py fails when the file differs from what that would write.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Callable
from dataclasses import fields
from pathlib import Path

from physics.vehicles import vehicle
from rally_env import kernels as K
from rally_env.config import (
    CONTROL_HZ_CHOICES,
    ENV_IDS,
    LEGACY_ENV_IDS,
    REWARD_TABLE,
    RandomizeConfig,
    TerminationConfig,
    vehicle_names,
)
from rally_env.info import INFO_KEYS, INFO_KEYS_V1
from rally_env.spaces import (
    ACTION_HIGH,
    ACTION_LOW,
    ACTION_NAMES,
    DEFAULT_LAYOUT,
    DEFAULT_LAYOUT_V1,
    OBS_SWITCHES,
    ObsLayout,
    discrete_table_markdown,
)

ENV_MD = Path(__file__).resolve().parents[1] / "docs" / "env.md"


def reward_rows() -> list[tuple[str, float, str]]:
    """(term, default weight, what it pays) of every reward term, in the kernel's order: the
    one place the tables below read the reward terms from."""
    return [(t.name, t.default, t.doc) for t in REWARD_TABLE]


INFO_DOC: dict[str, str] = {
    "stage_index": "int: index of the car's stage in the env's `stage` list (0 for one stage; "
    '-1 with `stage="random"`); the name: `env.unwrapped.core.stage_name(car)`',
    "stage_seed": "int: the generator seed of a generated stage (`gen-<seed>`, "
    '`stage="random"`), -1 for a stage from the library or a file',
    "stage_time_s": "simulated time since the reset (s), a whole number of control steps",
    "progress_m": "stage position: arc length driven from the start line (m, laps included; "
    "negative behind the start)",
    "credited_progress_m": "furthest credited position (m): what the progress reward has paid",
    "stage_length_m": "start-to-finish distance (m, x laps on loops)",
    "speed_mps": "speed of the CG (m/s)",
    "lateral_offset_m": "signed offset from the centerline (m, + left)",
    "heading_error_rad": "car heading minus road heading (rad, + left)",
    "off_road": "the car's centre is beyond a road edge",
    "finished": "the episode ended on the finish line",
    "finish_time_s": "exact finish time (s), interpolated inside the physics substep; NaN until "
    "finished",
    "checkpoint_times_s": "(C,) exact crossing time of each checkpoint (s, NaN until crossed); "
    "on loops every lap's checkpoints and lap lines before the finish, in driving order. C is "
    'fixed per env: the most any of its stages has (3 with `stage="random"`); a stage with '
    "fewer is NaN-padded",
    "n_checkpoints": "int: how many entries of `checkpoint_times_s` the car's stage has",
    "lap": "current lap (1 on point-to-point stages)",
    "wheel_loads_n": "(wheels,) normal load per wheel (N)",
    "slip_angles_rad": "(wheels,) slip angle per wheel (rad)",
    "position_m": "(3,) CG position x, y, z (m, world)",
    "end_code": "int: why the episode ended, 0 while running (the table in Episode end; "
    "`rally_env.end_reason(info)` gives the name)",
    **{
        f"reward_{t}": f"the weighted `{t}` reward term this step (the `reward_*` keys sum to "
        "the reward)"
        for t, _, _ in reward_rows()
    },
    "gear": "selected gear (-1 reverse, 0 neutral, 1..6); 0 without a drivetrain",
    "engine_rpm": "engine speed (rpm); 0 without a drivetrain",
    "tire_wear": "(wheels,) tire grip multiplier from wear per wheel (1 = new)",
    "damage": "grip multiplier from damage (1 = undamaged)",
    "max_impact_mps": "hardest touchdown or impact since the reset (m/s)",
    "slip_ratios": "(wheels,) slip ratio per wheel (from the wheel speed)",
}


def _table(head: tuple[str, ...], rows: list[tuple[object, ...]]) -> str:
    out = ["| " + " | ".join(head) + " |", "| " + " | ".join("---" for _ in head) + " |"]
    out += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join(out)


def action_table() -> str:
    desc = {"steer": "steer (+1 = full left)"}
    return _table(
        ("index", "action", "min", "max"),
        [
            (i, desc.get(n, n), f"{ACTION_LOW[i]:g}", f"{ACTION_HIGH[i]:g}")
            for i, n in enumerate(ACTION_NAMES)
        ],
    )


def reward_table() -> str:
    return _table(
        ("term", "default weight", "what it pays"),
        [(f"`{name}`", f"{w:g}", doc) for name, w, doc in reward_rows()],
    )


def termination_table() -> str:
    t = TerminationConfig()
    when = {
        "": ("-", "the episode is running"),
        "finished": (
            "terminated",
            "the car crosses the finish line (after all laps); the crossing time is "
            "interpolated inside the physics substep (`finish_time_s`)",
        ),
        "off_stage": (
            "terminated",
            f"the car's centre is more than `off_road_max_m` = {t.off_road_max_m:g} m beyond a "
            f"road edge, or off the road for more than `off_road_max_s` = {t.off_road_max_s:g} "
            "s, or it cut across the stage (its stage position ran ahead of the credited "
            f"position by more than `cut_ratio` = {t.cut_ratio:g} x the distance driven off "
            f"the road + `cut_slack_m` = {t.cut_slack_m:g} m)",
        ),
        "rolled": (
            "terminated",
            f"the body's up axis has had a world z below `roll_up_z` = {t.roll_up_z:g} for "
            f"`roll_time_s` = {t.roll_time_s:g} s",
        ),
        "stuck": (
            "terminated",
            f"the credited progress has not grown by `stuck_progress_m` = "
            f"{t.stuck_progress_m:g} m for `stuck_time_s` = {t.stuck_time_s:g} s (standing "
            "still ends here)",
        ),
        "wrong_way": (
            "terminated",
            f"the car is more than `wrong_way_m` = {t.wrong_way_m:g} m behind the furthest "
            "credited point it reached",
        ),
        "time_limit": (
            "truncated",
            f"stage time reaches `time_limit_base_s` = {t.time_limit_base_s:g} s + stage "
            f"length / `time_limit_speed_mps` = {t.time_limit_speed_mps:g} m/s (or a fixed "
            "`time_limit_s`)",
        ),
    }
    return _table(
        ("`end_code`", "end reason", "kind", "when"),
        [
            (code, f"`{name}`" if name else "(running)", *when[name])
            for code, name in enumerate(K.END_REASONS)
        ],
    )


def randomize_table() -> str:
    rc = RandomizeConfig()
    what = {
        "surface_mu": "a grip multiplier per road section of the stage",
        "mass": "multiplier on mass (inertias scale with it)",
        "power": "multiplier on power and peak drive force",
        "tire_peak": "multiplier on the tire's peak slip angle",
        "load_sensitivity": "multiplier on tire load sensitivity",
    }
    rows = []
    for name, w in what.items():
        lo, hi = getattr(rc, name)
        rows.append((f"`{name}`", f"[{lo:g}, {hi:g}]", w))
    return _table(("setting", "default range", "what is drawn per car at reset"), rows)


def vehicles_table() -> str:
    rows = []
    for n in vehicle_names():
        v = vehicle(n)
        rows.append(
            (
                f"`{n}`",
                len(v.wheels),
                "engine + gearbox" if v.drivetrain is not None else "electric, direct",
                "skid steer" if v.skid_steer else "steered wheels",
                f"{v.gravity_mps2:g}",
                ObsLayout(len(v.wheels), version=1).size,
            )
        )
    return _table(("vehicle", "wheels", "drivetrain", "steering", "g (m/s^2)", "v1 obs size"), rows)


def info_table(keys: tuple[str, ...] = INFO_KEYS) -> str:
    return _table(("key", "meaning"), [(f"`{k}`", INFO_DOC[k]) for k in keys])


def termination_defaults_table() -> str:
    tc = TerminationConfig()
    return _table(
        ("setting", "default"), [(f"`{f.name}`", repr(getattr(tc, f.name))) for f in fields(tc)]
    )


def args_table() -> str:
    hz = ", ".join(map(str, CONTROL_HZ_CHOICES))
    rows = [
        (
            "stage",
            '`"opener"`',
            "a library stage name (`tracks.list_stages()`), "
            '`"gen-<seed>"`, a path to a stage file, a `tracks.Stage`, `"random"` (a fresh '
            "generated stage at every reset, drawn from the reset seed), or a list of the "
            "non-random forms to sample from at reset",
        ),
        (
            "vehicle",
            '`"rover"`',
            "a `physics.VehicleParams` or a dict of overrides of the rover's fields",
        ),
        ("control_hz", "20", f"one of {hz} (divisors of 480)"),
        ("reward_weights", "see Rewards", "`RewardWeights` or dict"),
        ("termination", "see below", "`TerminationConfig` or dict"),
        (
            "randomize",
            "`None`",
            "`None`/`False` off, `True` default ranges, or a `RandomizeConfig`/dict",
        ),
        (
            "random_stage",
            '`{"length_m": 2000, "difficulty": (0.2, 0.8)}`',
            'generator arguments for `stage="random"`; a difficulty range is drawn per reset; '
            "`num_levels`/`start_level` (a level set) or `pool`/`pool_steps` (a stage pool the "
            "cars share), `loops`/`laps` (a share of closed loops): see Vector env",
        ),
        ("discrete_actions", "`False`", "the `Discrete(15)` table above"),
        (
            "version",
            "`0`",
            "`0`: the direct-force tire model and the rover; `1`: the wheel-speed model, "
            "library vehicles and planets, the wider observation (see Env ids)",
        ),
        (
            "planet",
            "`None`",
            "`None` or a planet name (`physics.vehicles.on_planet`; see Vehicles)",
        ),
        *(
            (name, "`False`", f"append the `{name}` observation block (see Observation)")
            for name in OBS_SWITCHES
        ),
        (
            "render_mode",
            "`None`",
            '`"human"` (a window paced to `render_fps`) or `"rgb_array"` (uint8 frames); '
            "needs the `render` extra",
        ),
    ]
    return _table(("argument", "default", "meaning"), [(f"`{a}`", d, m) for a, d, m in rows])


def ids_table() -> str:
    what = (
        f"the seed game's direct-force tire model, the 3000 kg Mars rover, the "
        f"{DEFAULT_LAYOUT.size}-value observation",
        "the wheel-speed tire model, library vehicles and planets, the wider observation "
        f"({DEFAULT_LAYOUT_V1.size} values for the rover)",
    )
    rows: list[tuple[object, ...]] = [
        (f"`{new}`", f"`{old}`", f"{v}{' (default)' if v == 0 else ''}", w)
        for v, (new, old, w) in enumerate(zip(ENV_IDS, LEGACY_ENV_IDS, what, strict=True))
    ]
    rows.append(
        (
            "`RallyLearn-v0`",
            "-",
            0,
            "`RallyDirect-v0` with the settings an agent learns from: decisions at 10 Hz, crash "
            "cost 100, three policy actions in [-1, 1] (no handbrake); see below",
        )
    )
    return _table(("id", "first id", "`version`", "what"), rows)


_V0_SIZE = DEFAULT_LAYOUT.size

#: Every table of docs/env.md by the name its markers give it.
TABLES: dict[str, Callable[[], str]] = {
    "ids": ids_table,
    "actions": action_table,
    "discrete_actions": discrete_table_markdown,
    "observation": lambda: DEFAULT_LAYOUT.table_markdown(compact=False),
    "observation_road_ahead": lambda: ObsLayout(4, road_ahead=True).table_markdown(
        compact=True, start=_V0_SIZE
    ),
    "observation_ahead_apex": lambda: ObsLayout(4, road_ahead=True, ahead_apex=True).table_markdown(
        compact=True, start=ObsLayout(4, road_ahead=True).size
    ),
    "vehicles": vehicles_table,
    "observation_v1": lambda: DEFAULT_LAYOUT_V1.table_markdown(compact=False, start=_V0_SIZE),
    "info_v1": lambda: info_table(INFO_KEYS_V1),
    "rewards": reward_table,
    "episode_end": termination_table,
    "info": info_table,
    "arguments": args_table,
    "termination_defaults": termination_defaults_table,
    "randomize": randomize_table,
}

_BLOCK = re.compile(
    r"^<!-- table: (?P<name>[a-z0-9_]+) -->\n(?P<body>.*?)^<!-- /table -->$",
    re.MULTILINE | re.DOTALL,
)


class EnvDocError(ValueError):
    """docs/env.md's table markers are malformed or name a table nobody makes."""


def render(text: str) -> str:
    """``text`` (docs/env.md) with every marked table made anew from the code.

    Raises:
        EnvDocError: a marker names no table of ``TABLES``, a marker is left unclosed, or a
            table of ``TABLES`` has no marker.
    """
    names = [m["name"] for m in _BLOCK.finditer(text)]
    unknown = sorted(set(names) - set(TABLES))
    if unknown:
        raise EnvDocError(f"docs/env.md names unknown tables {unknown}; known: {sorted(TABLES)}")
    opened = len(re.findall(r"^<!-- table: ", text, re.MULTILINE))
    closed = len(re.findall(r"^<!-- /table -->$", text, re.MULTILINE))
    if opened != len(names) or closed != len(names):
        raise EnvDocError(
            f"docs/env.md has {opened} table openers and {closed} closers, {len(names)} of "
            "them paired: every `<!-- table: NAME -->` line needs its `<!-- /table -->` line"
        )
    missing = sorted(set(TABLES) - set(names))
    if missing:
        raise EnvDocError(f"docs/env.md has no place for the tables {missing}")
    return _BLOCK.sub(
        lambda m: f"<!-- table: {m['name']} -->\n{TABLES[m['name']]()}\n<!-- /table -->", text
    )


def main(argv: list[str]) -> int:
    """``python3 -m tests.env_doc [--check]``: rewrite docs/env.md's tables (or, with
    ``--check``, exit 1 when they are stale)."""
    text = ENV_MD.read_text(encoding="utf-8")
    new = render(text)
    if "--check" in argv:
        print("docs/env.md is current" if new == text else "docs/env.md is stale")
        return 0 if new == text else 1
    if new != text:
        ENV_MD.write_text(new, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
