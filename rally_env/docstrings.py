"""The env docstring (Gymnasium's template), generated from the constants the code uses."""

from __future__ import annotations

from rally_env import kernels as K
from rally_env import stages as S
from rally_env.config import (
    CONTROL_HZ_CHOICES,
    ENV_IDS,
    LEGACY_ENV_IDS,
    REWARD_TABLE,
    RandomizeConfig,
    TerminationConfig,
)
from rally_env.spaces import (
    ACTION_HIGH,
    ACTION_LOW,
    ACTION_NAMES,
    DEFAULT_LAYOUT,
    DEFAULT_LAYOUT_V1,
    ROAD_AHEAD_BINS_M,
    ObsLayout,
)

_TC = TerminationConfig()
_RC = RandomizeConfig()


def action_table() -> str:
    rows = ["| index | action | min | max |", "| --- | --- | --- | --- |"]
    desc = {
        "steer": "steer (+1 = full left)",
        "throttle": "throttle",
        "brake": "brake",
        "handbrake": "handbrake",
    }
    for i, n in enumerate(ACTION_NAMES):
        rows.append(f"| {i} | {desc[n]} | {ACTION_LOW[i]:g} | {ACTION_HIGH[i]:g} |")
    return "\n".join(rows)


def reward_table() -> str:
    rows = ["| term | default weight | what it pays |", "| --- | --- | --- |"]
    for t in REWARD_TABLE:
        rows.append(f"| `{t.name}` | {t.default:g} | {t.doc} |")
    return "\n".join(rows)


def termination_table() -> str:
    t = _TC
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
    rows = ["| `end_code` | end reason | kind | when |", "| --- | --- | --- | --- |"]
    for code, name in enumerate(K.END_REASONS):
        kind, text = when[name]
        rows.append(f"| {code} | {f'`{name}`' if name else '(running)'} | {kind} | {text} |")
    return "\n".join(rows)


def randomize_table() -> str:
    rows = ["| setting | default range | what is drawn per car at reset |", "| --- | --- | --- |"]
    what = {
        "surface_mu": "a grip multiplier per road section of the stage",
        "mass": "multiplier on mass (inertias scale with it)",
        "power": "multiplier on power and peak drive force",
        "tire_peak": "multiplier on the tire's peak slip angle",
        "load_sensitivity": "multiplier on tire load sensitivity",
    }
    for name, w in what.items():
        lo, hi = getattr(_RC, name)
        rows.append(f"| `{name}` | [{lo:g}, {hi:g}] | {w} |")
    return "\n".join(rows)


V1_HISTORY = (
    "v1: the wheel-speed tire model (integrated wheel spin, a real slip ratio from the wheel "
    "speed, authored friction curves, friction clamps that stop runaway spin), selectable "
    'library vehicles (``vehicle="rover" | "rally-car" | "truck" | "tank" | "bike"``, 2 to 8 '
    'wheels, with or without an engine and gearbox) and planets (``planet="mars" | "earth" | '
    '"moon"``); the observation keeps every v0 field (slip ratios now real values) and appends '
    "engine rpm / rev limit, gear / 6, per-wheel tire wear, damage, per-wheel wheel rim speed "
    "and the surface grip at every lookahead point (a gravel-to-ice change is visible before "
    "the car reaches it); ``info`` adds ``gear``, ``engine_rpm``, ``tire_wear``, ``damage``, "
    "``max_impact_mps`` and ``slip_ratios``."
)


def _vehicle_rows() -> list[tuple[str, int, bool, bool, float, int]]:
    """(name, wheels, drivetrain, skid steer, gravity, v1 obs size) per library vehicle."""
    from rally_env.config import _library_vehicle, vehicle_names

    out = []
    for n in vehicle_names():
        v = _library_vehicle(n, None)
        size = ObsLayout(len(v.wheels), version=1).size
        out.append((n, len(v.wheels), v.drivetrain is not None, v.skid_steer, v.gravity_mps2, size))
    return out


def vehicles_table() -> str:
    rows = [
        "| vehicle | wheels | drivetrain | steering | g (m/s^2) | v1 obs size |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for n, nw, dt, skid, g, size in _vehicle_rows():
        rows.append(
            f"| `{n}` | {nw} | {'engine + gearbox' if dt else 'electric, direct'} | "
            f"{'skid steer' if skid else 'steered wheels'} | {g:g} | {size} |"
        )
    return "\n".join(rows)


def info_table_v1() -> str:
    from rally_env.info import INFO_KEYS_V1

    rows = ["| key | meaning |", "| --- | --- |"]
    rows += [f"| `{k}` | {INFO_DOC[k]} |" for k in INFO_KEYS_V1]
    return "\n".join(rows)


def env_docstring() -> str:
    lay = DEFAULT_LAYOUT
    hz = ", ".join(map(str, CONTROL_HZ_CHOICES))
    return f"""Rally stage driving: one car, one stage, against the clock.

## Description
A 3000 kg Mars rover (g = 3.72 m/s^2) on a rally stage, simulated per wheel at a fixed 480 Hz
(suspension load, slip angle, friction circle and load-sensitive friction per wheel; the
body pitches and rolls). The agent drives from the start line to the finish line as fast as
it can without leaving the stage. The single env is the N = 1 case of the same batched code
path as :class:`rally_env.RallyVectorEnv`.

## Action Space
``Box(low={ACTION_LOW.tolist()}, high={ACTION_HIGH.tolist()}, shape=(4,), float32)``:

{action_table()}

Finite out-of-range values are clipped. A NaN/inf entry, a wrong shape or a non-numeric
dtype raises ``gymnasium.error.InvalidAction`` and changes nothing. With
``discrete_actions=True`` the space is ``Discrete(15)``: steer in (-1, -0.5, 0, 0.5, 1) x
(full throttle, coast, full brake), action ``i`` = steer ``i // 3``, pedals ``i % 3``.

## Observation Space
``Box(shape=({lay.size},), float32)`` with finite bounds (values are clipped into them), every
value scaled to roughly unit range. For the default 4-wheel rover:

{lay.table_markdown()}

``RallyWheelSpeed-v1`` keeps these fields (slip ratios are real values there) and appends, for the
4-wheel rover (``Box(shape=({DEFAULT_LAYOUT_V1.size},))``; per-wheel blocks follow the wheel count):

{DEFAULT_LAYOUT_V1.table_markdown(start=lay.size)}

## Rewards
The reward is the sum of named terms, each weighted from ``reward_weights`` and reported per
term as ``info["reward_<term>"]``:

{reward_table()}

## Starting State
At rest on the stage's start line (its start pose), all commands zero. The stage is the one
configured, or drawn at reset from the reset seed (``stage="random"`` or a list); with
``randomize`` the vehicle and surface grip are drawn per reset too
(``info["randomization_<name>"]``).

## Episode End
{termination_table()}

``info["end_code"]`` is the code; ``rally_env.end_reason(info)`` its name.

## Arguments
- ``stage`` (default ``"opener"``): a library stage name (``tracks.list_stages()``),
  ``"gen-<seed>"``, a path to a stage file, a ``tracks.Stage``, ``"random"`` (a fresh
  generated stage at every reset, drawn from the reset seed; see ``random_stage``) or a list of
  the non-random forms to sample from at every reset.
- ``vehicle``: ``"rover"`` (default), a ``physics.VehicleParams`` or a dict of overrides (of
  the version's default rover). ``RallyWheelSpeed-v1`` also takes the ``physics.vehicles``
  library names (``"rover"`` there is the rover on the wheel-speed model).
- ``planet``: ``None`` (default: the vehicle's own gravity) or ``"mars"``, ``"earth"``,
  ``"moon"`` (``physics.vehicles.on_planet``).
- ``version``: 0 (``RallyDirect-v0``, default) or 1 (``RallyWheelSpeed-v1``, what
  ``gym.make("RallyWheelSpeed-v1")`` passes).
- ``control_hz`` (default 20): one of {hz}.
- ``reward_weights``: a ``RewardWeights`` or dict (terms above).
- ``termination``: a ``TerminationConfig`` or dict (settings above).
- ``randomize``: ``None`` (default, off), ``True`` (default ranges) or a ``RandomizeConfig`` /
  dict of ``(low, high)`` multiplier ranges:

{randomize_table()}

- ``random_stage``: ``{{"length_m": 2000, "difficulty": (0.2, 0.8)}}`` for ``stage="random"``;
  also ``num_levels``/``start_level`` (a fixed level set) or ``pool``/``pool_steps`` (a fresh
  window of ``pool`` stages every ``pool_steps`` env steps, shared by the cars that reset in
  it), ``loops``/``laps`` (that share of the stages closed loops of ``laps`` laps).
- ``discrete_actions`` (default False): the ``Discrete(15)`` action table.
- ``render_mode``: ``None``, ``"human"`` (a pygame window paced to ``render_fps``) or
  ``"rgb_array"`` ((400, 600, 3) uint8 frames); needs the ``render`` extra.

## Version History
- v0: initial version (physics layout v1, stage format v1).
- {V1_HISTORY}
"""


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
        for t in K.REWARD_TERMS
    },
    "gear": "selected gear (-1 reverse, 0 neutral, 1..6); 0 without a drivetrain",
    "engine_rpm": "engine speed (rpm); 0 without a drivetrain",
    "tire_wear": "(wheels,) tire grip multiplier from wear per wheel (1 = new)",
    "damage": "grip multiplier from damage (1 = undamaged)",
    "max_impact_mps": "hardest touchdown or impact since the reset (m/s)",
    "slip_ratios": "(wheels,) slip ratio per wheel (from the wheel speed)",
}


def info_table() -> str:
    from rally_env.info import INFO_KEYS

    rows = ["| key | meaning |", "| --- | --- |"]
    rows += [f"| `{k}` | {INFO_DOC[k]} |" for k in INFO_KEYS]
    return "\n".join(rows)


def _fields_table(obj: object) -> str:
    from dataclasses import fields

    rows = ["| setting | default |", "| --- | --- |"]
    for f in fields(obj):
        rows.append(f"| `{f.name}` | {getattr(obj, f.name)!r} |")
    return "\n".join(rows)


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
            "render_mode",
            "`None`",
            '`"human"` (a window paced to `render_fps`) or `"rgb_array"` (uint8 frames); '
            "needs the `render` extra",
        ),
    ]
    out = ["| argument | default | meaning |", "| --- | --- | --- |"]
    out += [f"| `{a}` | {d} | {m} |" for a, d, m in rows]
    return "\n".join(out)


def ids_table() -> str:
    what = (
        f"the seed game's direct-force tire model, the 3000 kg Mars rover, the "
        f"{DEFAULT_LAYOUT.size}-value observation",
        "the wheel-speed tire model, library vehicles and planets, the wider observation "
        f"({DEFAULT_LAYOUT_V1.size} values for the rover)",
    )
    rows = ["| id | first id | `version` | what |", "| --- | --- | --- | --- |"]
    for v, (new, old, w) in enumerate(zip(ENV_IDS, LEGACY_ENV_IDS, what, strict=True)):
        rows.append(f"| `{new}` | `{old}` | {v}{' (default)' if v == 0 else ''} | {w} |")
    rows.append(
        "| `RallyLearn-v0` | - | 0 | `RallyDirect-v0` with the settings an agent learns from: "
        "decisions at 10 Hz, crash cost 100, three policy actions in [-1, 1] "
        "(no handbrake); see below |"
    )
    return "\n".join(rows)


def env_markdown() -> str:
    """The whole of ``docs/env.md`` (see the comment at its top to regenerate it)."""
    return "".join(
        f()
        for f in (
            _md_head,
            _md_observations,
            _md_episodes,
            _md_vector_state,
            _md_speed,
            _md_speed_earlier,
            _md_speed_history,
            _md_versions,
        )
    )


def _md_head() -> str:
    """``docs/env.md``: the title, the ids and the action space."""
    from rally_env.spaces import discrete_table_markdown

    return f"""\
# The Gymnasium environment: `RallyDirect-v0` and `RallyWheelSpeed-v1`

<!-- Generated from the constants the code uses by
`python3 -c "from rally_env.docstrings import env_markdown as m; print(m(), end='')" > docs/env.md`;
tests/rally_env/test_checkers.py fails if this file drifts from them. -->

```python
import gymnasium as gym
import rally_env  # registers the ids below (never imports pygame, torch or stable-baselines3)

env = gym.make("RallyDirect-v0", stage="opener")       # RallyEnv behind Gymnasium's wrappers
obs, info = env.reset(seed=0)
obs, reward, terminated, truncated, info = env.step(env.action_space.sample())

envs = gym.make_vec("RallyDirect-v0", num_envs=64, vectorization_mode="vector_entry_point")
# -> rally_env.RallyVectorEnv: 64 cars in one batched physics call
```

`RallyEnv` (a `gymnasium.Env`) and `RallyVectorEnv` (a `gymnasium.vector.VectorEnv`) share one
code path: `rally_env.core.RallyCore` steps N cars at once (the physics kernel, then one numba
kernel for projection, timing, reward, termination and observation); the single env is N = 1.

## Ids

{ids_table()}

`gym.make("rally_env:RallyDirect-v0")` imports the package itself, so it works in a process that
never imported `rally_env` (Gymnasium 1.x loads no plugin entry points): use that form for
tools that make the env by name in their own processes (RLlib env runners, rl-zoo3, torchrl,
Minari's `recover_environment`). Code that imports the package can use
`gym.register_envs(rally_env)` and the bare ids. The name says the model and the number the
env version: the two models both stay, so each has its own name and neither is "out of date"
(a later version that replaces one of them takes the next number of its name; one that stays
beside them, a name of its own). The first ids, `Rally-v0` and `Rally-v1`, stay registered for
the same envs (and are what replay files record as `env_id`), and neither gets Gymnasium's
"out of date" notice: `Rally-v1` is a second name of `RallyWheelSpeed-v1`'s registration (its
`env.spec.id` is `RallyWheelSpeed-v1`), so Gymnasium sees no newer `Rally` version.

## Action space

`Box(low={ACTION_LOW.tolist()}, high={ACTION_HIGH.tolist()}, shape=(4,), float32)`:

{action_table()}

Finite out-of-range values are clipped (the clipped action is what the car gets and what the
observation's `prev_*` fields show). A NaN or inf entry, a wrong shape, or a non-numeric dtype
(bool, complex, str, object) raises `gymnasium.error.InvalidAction` with a message naming what
was wrong, and the env's state does not change. Integer and float16/32/64 arrays and plain
lists are accepted.

`discrete_actions=True` replaces the Box by `Discrete(15)` (for DQN):

{discrete_table_markdown()}

## RallyLearn-v0: the settings an agent learns from

`gym.make("RallyLearn-v0")` is `RallyDirect-v0`'s car, stages and physics with the settings
plain PPO learns random stages from (`rally_env.LEARN_ENV_KWARGS`; each measured in
docs/benchmark.md, "What each default buys"):

- **decisions at 10 Hz** (`control_hz=10`: each action held for 48 physics substeps). On this
  low-grip car a steering or braking mistake takes seconds to become a crash; at 20 Hz a
  discount of 0.995 per decision reaches back 10 s and the same PPO learns far less;
- **the default observation** (59 values, the road to 100 m): with the road-ahead block
  (`road_ahead=True`, below: 33 more values up to 600 m) the same PPO learned half as much by
  2M steps (22 against 43 of 50 validation stages); `road_ahead=True` adds it back;
- **a crash cost of 100** (`reward_weights.crash`, 20 elsewhere): about what the rest of an
  average stage is worth, so the objective values a finish the way the benchmark does (a run
  that does not finish scores 0);
- **three actions in [-1, 1]**: steer as is, throttle `(a + 1) / 2`, brake `max(a, 0)`; the
  handbrake stays off (`rally_env.policy_to_env_action`). A fresh policy (mean action 0) drives
  off at half throttle, where one sampling the env's own [0, 1] pedals stands on half brake and
  half handbrake.

Any `RallyEnv` argument given to `gym.make` overrides these (a `reward_weights` dict is merged
over the crash cost). The env underneath (`env.unwrapped`) is a plain `RallyEnv`: replays,
`get_state`, the renderer and `rally verify` work on it, and a replay records the env actions
the wrapper made. `gym.make_vec("RallyLearn-v0", num_envs=N,
vectorization_mode="vector_entry_point")` is the native vector env behind the same action
wrapper. `rally train` trains on these settings by default, and `net-general` drives them.

"""


def _md_observations() -> str:
    """``docs/env.md``: the observation space and the wheel-speed model."""
    lay = DEFAULT_LAYOUT
    return f"""\
## Observation space

`Box(shape=({lay.size},), float32)`, finite bounds, values clipped into them and scaled to
roughly unit range. The per-wheel block has one entry per wheel of the vehicle (4 for the
rover: FL, FR, RL, RR); the table below is for the rover. `rally_env.ObsLayout(n_wheels)` gives
`index` (name -> index), `groups` (name -> slice), `low`/`high` and this table.

{lay.table_markdown(compact=False)}

### The road-ahead observation (`road_ahead=True`, `RallyDirectAhead-v0`)

The lookahead above shows the road 5-100 m ahead. Braking from top speed takes several
hundred metres on Mars, so an agent that plans its speed needs to see further: with
`road_ahead=True` (registered as `RallyDirectAhead-v0` and `RallyWheelSpeedAhead-v1`) the
observation appends a block that summarises the road ahead of the car's projected position in
bins ({", ".join(f"{a:g}-{b:g}" for a, b in ROAD_AHEAD_BINS_M)} m): per bin the sharpest
corner (the signed curvature of largest magnitude), the sharpest crest (vertical convexity
`-d2z/ds2` of the road profile, features included: a crest that throws the car into the air or
a jump's lip reads high; dips read 0), the elevation at the bin's far end relative to here, and
the lowest surface grip of the road (the car's own grip row, so surface randomization shows
there too); then the distance to the finish. Loops wrap at the lap line; past the end of an
open stage the road reads straight and level. It is an observation option: physics, rewards,
termination, replays and the leaderboard's rules class are the same with or without it (it is
recorded in a replay only when on). Table for `RallyDirectAhead-v0`
(`Box(shape=({ObsLayout(4, road_ahead=True).size},))`; on `RallyWheelSpeedAhead-v1` the block
follows the v1 fields):

{ObsLayout(4, road_ahead=True).table_markdown(compact=True, start=lay.size)}

## RallyWheelSpeed-v1: the wheel-speed model, vehicles and planets

```python
env = gym.make("RallyWheelSpeed-v1", vehicle="truck", planet="moon")  # or a VehicleParams / dict
```

`RallyWheelSpeed-v1` is the same env class with `version=1` (`RallyEnv(version=1, ...)`, also
through `make_vec`). What changes against `RallyDirect-v0`:

- The vehicle runs the wheel-speed tire model: every wheel's spin is integrated, so the slip
  ratio is a real value (v0's direct-force model reads 0), with authored friction curves and
  friction clamps that keep wheel spin from running away. The default vehicle is
  `physics.vehicles.vehicle("rover")`, the seed rover on that model.
- `vehicle=` takes a library name, a `physics.VehicleParams` or a dict of overrides of the v1
  rover; `planet=` (`"mars"`, `"earth"`, `"moon"`) applies `physics.vehicles.on_planet` (on
  `RallyDirect-v0`, `planet` is accepted too and changes nothing unless given). A bad name raises
  `rally_env.ConfigError` naming `vehicle` or `planet` and the allowed values. The library:

{vehicles_table()}

- The observation keeps every v0 field at the same index and appends the fields below (table
  for the 4-wheel rover, `Box(shape=({DEFAULT_LAYOUT_V1.size},))`; per-wheel blocks follow the
  vehicle's wheel count, `rally_env.ObsLayout(n_wheels, version=1)`). Scales:
  `rally_env.spaces.WHEEL_SPEED_SCALE_MPS`, `GEAR_SCALE`. The grip ahead is sampled from the
  terrain's surface map at each lookahead centerline point (the car's own grip row, so surface
  randomization shows up there too).

{DEFAULT_LAYOUT_V1.table_markdown(compact=False, start=lay.size)}

- `info` adds:

{info_table_v1()}

- The renderer's HUD shows gear and engine rpm for vehicles with a drivetrain, and tire wear /
  damage once they drop below 1. Replays record `env_id` `Rally-v1` (version 1's first id) and a
  library vehicle by
  name (with its planet), other vehicles by their fields.

"""


def _md_episodes() -> str:
    """``docs/env.md``: rewards, the episode end and the info dict."""
    return f"""\
## Rewards

The reward is the sum of named terms, each weighted from `reward_weights` (a
`rally_env.RewardWeights` or a dict) and reported per term as `info["reward_<term>"]`:

{reward_table()}

Why it cannot be farmed:

- Progress is the change of a *credited* position along the stage: signed arc length from the
  projection onto the centerline, warm-started from the previous step so it moves continuously,
  and wrap-safe on loops (differences are wrapped into half a lap). Never an absolute value,
  never raw speed.
- Backward motion is always charged; forward motion is paid only with the car's centre on the
  road. Distance gained off the road is forfeited when the car rejoins. Every payment is a
  difference of one position, so the sum telescopes: it is at most the distance from the start
  to the furthest point reached, whatever the car does.
- Circles and shuttling pay nothing net (and end `stuck` or `wrong_way`), driving the stage
  backwards costs and ends `wrong_way`, standing still ends `stuck` with the time cost and the
  crash cost, and cutting across the stage beyond the road is never paid and ends `off_stage`
  (tests: `tests/rally_env/test_episodes.py`).

## Episode end

{termination_table()}

Checks run in this order each step: finished, rolled, off_stage, wrong_way, stuck, time_limit.
Timers count physics substeps, so "10 s" is exactly 10 s of simulated time.

### Exact stage time

The finish line, every checkpoint and (on loops) every lap line is a timing gate across the road
(reaching `off_road_max_m` + 1 m beyond each edge). The env arms the physics timing gate
(`VehicleBatch.set_gate`) on the next line; the physics interpolates the crossing inside the
1/480 s substep that crossed it, the env reads it after the control step and arms the next
line. A crossing only counts when the car's stage position is within 30 m of the line (so a
gate reaching into another part of the stage is ignored). `finish_time_s` and
`checkpoint_times_s` are therefore not rounded to control steps.

Lines closer together than a car travels in one control step are all timed too, in order: a
car whose second line ahead is within reach of the coming step (`2 (v + 20 m/s² dt) dt + 10 m`,
`kernels.lines_within_reach`) is stepped substep by substep (bit-identical physics), and the
next gate is armed and tested in the same substep after each crossing. No library or generated
stage has two lines that close (the closest are 50 m apart, on a 200 m generated stage; a test
holds every shipped stage to it), so this path only runs on stages users make.

## Info

`reset` and every `step` return these keys. Every value is a number, a bool or a fixed-shape
numeric array, never a string, a tuple or a nested dict, so Gymnasium's vector envs stack it
into a typed array and torchrl, skrl, RLlib and Minari read it as a tensor:

- `RallyEnv`: each value is a numpy array of the shape in the table (shape `()` for a scalar:
  `float(info["stage_time_s"])`, `bool(info["finished"])`, `int(info["end_code"])`). The
  values that can be NaN (`finish_time_s`, `checkpoint_times_s`,
  `randomization_section_mu_scale`) are `rally_env.info.NanEqualArray`, an ordinary float
  array whose `==` and `np.allclose` treat NaN as equal to NaN, so two identical runs have
  equal info dicts (Gymnasium's determinism checker compares them).
- `RallyVectorEnv`: the same keys as arrays over cars, shape `(N, *shape)`, each with
  Gymnasium's `_key` mask.
- "Not yet" is NaN (`finish_time_s`, `checkpoint_times_s`).

{info_table()}

`end_code` values are the first column of the table in Episode end.
Helpers: `rally_env.end_reason(info)` (the name of `end_code`: a string for a single env's
info, an array for a vector env's), `rally_env.reward_terms(info)` (`{{term: value}}` from the
`reward_*` keys), `rally_env.checkpoint_times(info)` (the first `n_checkpoints` times). With
randomization on, every step also carries the episode's drawn values as
`randomization_mass_kg`, `randomization_power_w`, `randomization_peak_slip_angle_rad`,
`randomization_load_sensitivity` (floats) and `randomization_section_mu_scale`
(({S.MAX_SECTION_IDS},), one grip multiplier per road section, NaN past the stage's sections).
The keys before this contract (`stage`, `end_reason`, `reward_terms`, `randomization`) are gone:
see CHANGELOG.md.

"""


def _md_vector_state() -> str:
    """``docs/env.md``: the arguments, the vector env, the state API and domain randomization."""
    return f"""\
## Arguments

{args_table()}

A bad value raises `rally_env.ConfigError` (a `ValueError`) naming the field, the value and the
rule, e.g. `termination.stuck_time_s = nan: must be finite`.

`TerminationConfig` defaults:

{_fields_table(_TC)}

## Vector env

`RallyVectorEnv(num_envs, autoreset_mode="NextStep", parallel=None, **RallyEnv arguments)`,
also `gym.make_vec("RallyDirect-v0", num_envs=n, vectorization_mode="vector_entry_point",
autoreset_mode=...)`.

- `autoreset_mode`: `"NextStep"` (Gymnasium's default: the step after an episode ends resets that
  car, returns its first observation, reward 0, not terminated), `"SameStep"` (SB3's convention:
  the car is reset inside the ending step; `info["final_obs"]` and `info["final_info"]` hold the
  end, with `_final_obs`/`_final_info` masks) or `"Disabled"` (`reset(options={{"reset_mask":
  mask}})` yourself). `metadata["autoreset_mode"]` says which.
- Seeds: `reset(seed=s)` gives car k the stream `np.random.SeedSequence(s).spawn(n)[k]`, so car
  k's episode does not depend on `num_envs`; `RallyEnv.reset(seed=s, options={{"car_index": k}})`
  reproduces it bit for bit (tested across autoresets). `reset(seed=[s0, s1, ...])` gives car
  k what `RallyEnv.reset(seed=s_k)` gets.
- `parallel`: the physics kernel runs with threads over cars (bit-identical to serial); default
  from 64 cars.
- `render()` (with `render_mode="rgb_array"`) returns a tuple of one (400, 600, 3) frame per
  car, as Gymnasium's `SyncVectorEnv` does (`gymnasium.wrappers.vector.RecordVideo` works);
  `render_view="all_cars"` returns one frame of car 0 with the others translucent instead
  (`render_all_cars(focus)` draws that at any time).
- `call(name, ...)`, `get_attr(name)`, `set_attr(name, values)` as on Gymnasium's vector envs:
  a tuple of one result per car (`call("render")` gives the per-car frames); the cars share
  the env's attributes, so `set_attr` takes one value or `num_envs` equal ones.
- Cars may be on different stages (`stage="random"` or a list): each car has a stage slot and a
  terrain row; projection and timing tables of all slots are packed into flat arrays. With
  `"random"` every car has its own generated stage; a reset rewrites only that car's slot, its
  terrain fills tile by tile (8 x 8 nodes) as the car reaches it, and a worker process (`python -m
  tracks.prefetch`, one per Python process; `RALLY_PREFETCH=0` turns it off) generates the stage
  each car will draw next, with the tiles of its first 40 m of road (edges and 6 m beyond) already
  baked: the terrain pool takes those tiles in one copy when the stage takes its slot, so the env
  bakes only what the car reaches after them. It keeps 64 answers: an env with more cars than that
  asks for nothing ahead (a car's stage would be dropped before the car came back for it); there,
  the cars a step resets together split their stages' generation with the worker instead (it makes
  the second half while the env makes the first; without baking start tiles, as the env waits for
  those answers). Where a stage or a tile is made never changes it. Figures: Speed, below.
- Level sets and stage pools (`random_stage`). `{{"num_levels": L, "start_level": s0}}` draws
  every reset's stage from the fixed levels `s0 .. s0 + L - 1` (each level a generator seed
  with a difficulty of its own; Procgen's `num_levels`). `{{"pool": P, "pool_steps": T}}` (T
  defaults to 200) opens a fresh window of P generated stages every T env steps, drawn from
  the env's reset seed (`SeedSequence(seed, spawn_key=(0x706F6F6C, window))`, seeds and
  difficulties as for `"random"`); a car that resets picks one of the current window's stages
  with its own stream. The cars that reset in a window share its stages, their slots and their
  baked tiles, and the prefetch worker makes the current and the next window's stages ahead,
  with their tiles up to 150 m past the start. Making a stage costs about 4 ms of CPU wherever
  it runs, more than a short episode's physics at many cars: sharing each stage between
  several cars' episodes is what keeps many cars fast on an unbounded stream of stages (Speed,
  Random stages). About `num_envs * T / (P * episode steps)` episodes share a stage. The
  window follows the env's step count since its last reset of every car with an int seed
  (`env.unwrapped.core.clock`; an unseeded first reset draws a fresh pool seed), so a car's
  stage depends on its own stream and the step it resets at, never on the other cars; states
  (`get_state()["pool"]`) and replays (`reset.pool`) carry the pool's seed and step.
  `{{"loops": p, "laps": n}}` (n defaults to 2) makes that share of the random stages (pool
  stages too) closed loops of n laps, `length_m` a lap: one more draw from the car's stream
  (the pool's) after the difficulty, only when `loops` is above 0. A loop the generator cannot
  close (short, gentle ones) is the point-to-point stage of the same seed and difficulty.

## State API

`env.unwrapped.get_state()` returns a plain dict of numpy arrays, numbers and strings (picklable):
the physics state, parameters and terrain rows, the env's per-car timers and counters, the
stage of every slot (its file schema and digest, so a generated stage travels with it), every
car's RNG stream and Gymnasium's `np_random`, plus a blake2b digest over all of it.
`set_state(state)` restores it (in the same env or a new one built with the same arguments) and
returns the current observation; the run then continues bit-identically (tree search,
reset-to-checkpoint curricula, bug reports). A state that is malformed, corrupt (digest
mismatch), from a different version, from an env with other settings or another number of cars
raises `rally_env.StateError` and changes nothing. The digest only detects accidents (anyone can
recompute it with `rally_env.core.state_digest`), so every value is checked too before anything
is copied (`rally_env.statecheck`): every float finite (but the finish and line times, NaN until
reached), the quaternion of unit norm, commands in the action box, positions, speeds and rates
within physical bounds, per-wheel flags and surface ids whole; every index in range (stage slot,
terrain row, next timing line, end code, gear), counters non-negative; parameter rows those of
the env's vehicle (randomized columns inside the configured ranges); randomization draws `None`
or the dict the env draws; observations inside the observation space. The message names the
entry, the car and the rule. `pickle` and `copy.deepcopy` of the env itself
also work, before or after `render()` (the renderer stays behind; a copy makes its own).

### One car's state: cloning into a vector env

A planner or a tree search that uses the batched simulator as its model copies one car into
many:

```python
env = RallyEnv(stage="opener")                      # the car that drives
model = RallyVectorEnv(128, stage="opener")         # the same arguments: its model
model.reset(seed=0)
obs = model.set_car_states(range(128), env.get_state())   # every car is now a copy of env's
st = model.get_car_state(5)                         # car 5, as RallyEnv.get_state() returns it
env.set_state(st)                                   # a single env continues as car 5 would
model.set_car_states([0, 1], st)                    # or cars 0 and 1 of a vector env
```

`set_car_states(cars, state)` takes a car index, a list of them or a bool mask of shape
`(num_envs,)`, and a one-car state (`RallyEnv.get_state()`, or `get_car_state(k)` of a vector env
built with the same arguments). Each car gets the source's physics, stage (in random-stage
modes the stage travels in the state and the cars share one slot for it), timers, randomization
draws and a copy of its RNG stream, so stepping it with the same actions gives the source's
observations, rewards, ends and infos bit for bit, whatever the other cars do and across their
resets; the other cars, the stage pool and the env's step count are untouched. A car whose
source episode had ended resets at its next step (`"NextStep"`). The state is checked exactly
as `RallyEnv.set_state` checks it (a one-car core of the same settings does the checking); a bad
state raises `StateError`, bad car indices `ValueError`, a vector env not reset yet
`ResetNeeded`, and none of them changes anything. A replay recorder on the vector env drops the
open episodes of the cars it replaced.

## Domain randomization

`randomize=True` (or a dict of `(low, high)` multiplier ranges) draws per car at every reset,
from the car's RNG stream in a fixed order (mass, power, tire peak, load sensitivity, then one
grip multiplier per road section):

{randomize_table()}

Surface grip per section is exact inside every substep: with surface randomization on, each
stage's terrain is re-labelled with one surface id per road section (`1 + section index`, up to
15; id 0 is off-road, whose grip is not randomized) and each car gets its own terrain-set row of
grip multipliers sharing the stage's heightfield. The physics' `surface_ids` reading then holds
section ids; the observation's `grip_*` fields hold the car's randomized grip. The drawn values
are reported on every step as `info["randomization_<name>"]` (see Info).

"""


def _md_speed() -> str:
    """``docs/env.md``: the speed section: the benchmark and the random-stage figures."""
    return """\
## Speed

`python3 benchmarks/bench_env.py` prints and writes (`out/bench_env.json`) single-env steps/s
through `gym.make` and vector car-steps/s for 16, 256 and 1024 cars at 20 Hz with random
actions and resets included. The physics (24 substeps of the per-wheel model per control step)
is most of the cost; the env layer adds one small numba kernel per step plus the info dict.

### The first start (an empty numba cache)

numba compiles the simulator on first use and caches it (once per machine and version of the
code). A first start says so in one line on stderr (`rally-env: compiling the simulator once
(about 15 s; cached afterwards)`); a warm start prints nothing. Meanwhile the first env of a
process compiles its reset and step kernels in a second process, on another core
(`rally_env.precompile`), while it builds its stage: the first `Rally-v0` step comes after
about 11.5 s of compiling on 2 idle cores (about 25 s when two other busy processes share
them), a first threaded vector step about 3.6 s after it (about 6 s loaded); a warm start
takes under a second.
`rally warmup` compiles ahead (a `Rally-v0` env and a threaded vector env);
`rally warmup --clear` deletes the project's cache entries first. A cache file numba cannot
read (cut short by a full disk or a killed process) is deleted and its function compiled
again, said in one line on stderr; the env goes on with the same results (only if that fails
again, `rally_env.precompile.CacheFileError` names the cache folder and
`rally warmup --clear`). `RALLY_PRECOMPILE=0` turns off the second process (about 22 s in one).

### Random stages (`stage="random"`)

`python3 benchmarks/bench_env.py --quick --random-only` compares `stage="random"` with
`stage="opener"` under the same actions (random steering, throttle 0.7: cars leave the road and
reset about every 10 s), in interleaved rounds in one process, best of each. It reports
car-steps per wall-clock second and per CPU second (`time.process_time`, of the env's process
alone and with the prefetch worker's CPU time added), the amortized cost of a random reset in
a single env, and the peak RSS of a 1,024-car env on random stages (`--no-rss` skips that row;
it takes a quarter of an hour on a busy machine). Targets (issue 13): random ≥ 70 % of fixed at
16 and 1,024 cars, a random reset ≤ 5 ms amortized, ≤ 4 GB RSS at 1,024 cars.

**5 December 2026, fifth session: stage pools** (commit `4dc9fd4` and after; load average 1.0
and 0.2 before two runs of `python3 benchmarks/bench_env.py --random-only --no-rss --seconds 3`,
one after the other). A plain `"random"` env makes a stage for every episode, about 4 ms of CPU
each wherever it is made, which caps it near 60 % of fixed at 16 cars (the worker's core makes
the stages) and near 35 % at 1,024 (the physics takes both cores: the arithmetic below). A
stage pool (`random_stage={"pool": P, "pool_steps": 200}`, see Vector env) shares each
generated stage between the episodes that start in its window, and its rows reach the 70 %
target:

| cars | fixed (`opener`) | random | P | pool | pool / fixed | CPU, + worker |
|---|---|---|---|---|---|---|
| 16 | 73,572 / 72,432 | 57 % / 50 % | 4 | 58,490 / 53,333 | **79 % / 74 %** | 52 % / 49 % |
| 1,024 | 159,491 / 166,905 | 21 % / 20 % | 32 | 118,943 / 128,763 | **75 % / 77 %** | 75 % / 77 % |

(car-steps/s; "random": plain `"random"` / fixed; the last column per CPU second of the env's
process and the prefetch worker together.)

`num_levels=256` read 84 % / 86 % at 1,024 cars; a single env's random reset 2.21 / 1.81 ms
amortized. Peak RSS of a 1,024-car env after 600 steps of the benchmark's actions (the
benchmark's `random_rss_mb(1024, 600, random_stage)`, now a row of the full run, twice each):
376-378 MB with `pool=32`, 1,877 MB on plain `"random"` (the pool's cars hold far fewer
distinct stages). How the pool size trades
stages for speed (`bench_random_vector(n, 3.0, **variants)`
of the benchmark module, each variant a `random_stage` pool with `pool_steps=200`, interleaved
in one process; load under 1.5):

| cars | P | episodes per stage (random actions) | pool / fixed, wall |
|---|---|---|---|
| 16 | 2 | about 8 | 79-85 % |
| 16 | 4 | about 4 | 70-80 % |
| 16 | 8 | about 2 | 55-57 % (the worker cannot make 8 stages in a 43 ms window) |
| 1,024 | 16 | about 66 | 84 % |
| 1,024 | 32 | about 33 | 73-78 % |
| 1,024 | 64 | about 17 | 55-62 % |
| 1,024 | 128 | about 8 | 45 % |
| 1,024 | 256 | about 4 | 34 % |

At 16 cars the worker bakes a pool stage's tiles up to 150 m past the start instead of 40 m
(`rally_env.stages.POOL_PREBAKE_M`): P = 4 read 70 % with 40 m and 80 % with 150 m in the same
comparison, P = 2 79 % and 85 %; at 1,024 cars it moved the wall-clock figures by under 2 %
(both cores are busy there either way). The pool rows do not change the plain `"random"` rows.

**5 December 2026, fourth session** (commit `b4d857c` and after; load average 1.2 and 1.4
before two runs of the same command, one after the other): 16 cars 38,503 / 41,406 random
against 71,771 / 74,638 fixed car-steps/s (**54 % / 55 %**); 1,024 cars 31,600 / 33,361 against
166,062 / 167,123 (**19 % / 20 %**), `num_levels=256` 82 % / 78 %; single env, a random reset
**2.05 / 2.04 ms** amortized. What changed: the generator rejects a layout below its design
radius (about one in four) on its spline fit, before the stage is built and validated, and the
stage reuses that fit: 3.06-3.13 ms of CPU per generated stage instead of 3.53-3.63 ms (600
stages of mixed settings, the same stages to the bit). The 16-car benchmark cannot see it: in
alternating pairs of fresh processes its wall-clock ratio moved between 38 % and 55 % for the
same commit, and its CPU ratio with the worker counted between 22 % and 28 %, either way for
either commit.

**5 December 2026, later** (commit `a9ea130`; load average 0.2 and 1.2 before two runs of
`python3 benchmarks/bench_env.py --random-only --no-rss --seconds 3`, one after the other):

| cars | fixed (`opener`) | random | random / fixed, wall | per CPU s, env | per CPU s, + worker |
|---|---|---|---|---|---|
| 16 | 71,867 / 74,228 car-steps/s | 37,398 / 41,839 | 52 % / 56 % | 54 % / 57 % | 27 % / 29 % |
| 1,024 | 166,205 / 163,048 | 30,664 / 29,632 | 18 % / 18 % | 28 % / 27 % | 23 % / 23 % |
| 1,024, levels | 166,205 / 163,048 | 136,041 / 125,941 | 82 % / 77 % | 82 % / 77 % | 82 % / 77 % |

Single env: 30,913 / 30,526 steps/s on `opener`, 23,534 / 21,724 on random stages (205 steps
per episode): a random reset costs **2.08 / 2.73 ms** amortized (1.85 / 2.49 ms of the env
process's CPU, 6.57 / 7.54 ms with the worker's). Three changes, each measured against the
commit before it in three alternating pairs of fresh processes (`bench_random_vector(16, 3.0)`
with the fixed and random variants), best of each:

1. A terrain source flags the ground-field cells it has computed in a byte array instead of
   writing NaN over the whole field first (about 1 MB at 4 m cells for a 2 km stage): 0.3 ms
   less per generated stage in the worker and again in the env's process when it loads the
   stage, and only the pages near the road become resident. 16 cars: 33.6 / 35.1 / 37.3
   thousand car-steps/s before, 35.5 / 38.1 / 38.6 after (44-48 % -> 49-52 % of fixed).
   Peak RSS of a 1,024-car env after 600 random-stage steps (`random_rss_mb(1024, 600)`, the
   two commits run side by side): 2,337 MB before, 2,021 MB after.
2. The tiles the worker bakes ahead come into the terrain pool in one copy when the stage
   takes its slot (`TerrainSet` reads `StageTerrain.ready_tiles`), not one fill per step as
   cars reach them: fills per episode at 16 cars fell from 12 to 5. 16 cars: 34.1 / 37.7 /
   34.6 thousand car-steps/s before, 39.6 / 38.1 / 38.1 after (45-49 % -> 52-54 %).
3. The env reads each of the worker's answers straight into a buffer of its size, instead of
   1 MB chunks appended to a buffer that answers were then cut from. 16 cars: 37.6 / 37.1 /
   38.9 thousand car-steps/s before, 39.9 / 39.4 / 40.2 after (50-51 % -> 54-55 %).

The same command at `aa6eab8` (after change 2, load 0.5) had read 54 % at 16 cars, 20 % at 1,024
cars and a 2.01 ms reset: single runs of this command move by a few points, so the changes are
measured in the alternating pairs above (levels: `num_levels=256`).

At 1,024 cars the first change moved the ratio within the run-to-run spread (18.5-18.7 % before,
17.8-19.8 % after); the second does not apply there (that env asks the worker for no start
tiles). The 70 % targets stay missed, and at 16 cars the worker sets the next limit: it spends
about 4.3 ms on each stage (generating it 2.5 ms, baking its start tiles 1.2 ms, pickling it 0.4
ms), so one core makes at most about 230 stages per second, which at about 193 steps per
random-action episode caps 16 cars near 45,000 car-steps/s (60 % of fixed). At 1,024 cars both
cores step the physics, about 2.3 ms of CPU per car over a 193-step episode (83,800 car-steps
per CPU second on `opener`), while making a stage costs about 4.3 ms of CPU wherever it runs
(generating 2.5 ms, its terrain index, about 30 tiles baked at 30-40 us each, its slot's
tables): even with both cores making stages beside the physics, random stages would reach at
most about 2.3 / (2.3 + 4.3) = 35 % of fixed there. 70 % needs a stage made in about 1 ms, a
generator and bake several times cheaper than today's.

"""


def _md_speed_earlier() -> str:
    """``docs/env.md``: the random-stage figures of 4 and 5 December (before the latest)."""
    return """\
**5 December 2026** (commit `c2bba3f` and after; load average 1.3 before the run;
`python3 benchmarks/bench_env.py --random-only --no-rss --seconds 3`):

| cars | fixed (`opener`) | random | random / fixed, wall | per CPU s, env | per CPU s, + worker |
|---|---|---|---|---|---|
| 16 | 74,469 car-steps/s | 35,088 | 47 % | 47 % | 25 % |
| 1,024 | 168,446 | 31,656 | 19 % | 28 % | 23 % |
| 1,024, `num_levels=256` | 168,446 | 128,776 | 76 % | 76 % | 76 % |

Single env: 31,087 steps/s on `opener`, 21,934 on random stages (205 steps per episode): a
random reset costs **2.75 ms** amortized (2.66 ms of the env process's CPU, 7.35 ms with the
worker's). What changed: the prefetch worker spends about 5 ms on each stage it makes, and
at 16 cars the env waits for it. Finding a stage's start tiles (`StageTerrain.start_tiles`)
took 0.83 ms of that in a meshgrid per sample; it is one array pass now (0.063 ms, the same
tiles). The same command at the commit before (`5ebdeef`) and after, alternating: 16 cars
43 % before, 49 % after; 1,024 cars 18 % both (that env asks for no start tiles). Then a
pickled stage got smaller (commit `9ff89ec`): it leaves out the stage's centerline columns
(rebuilt from the stage) and sends its index tables as int32, 632 KB -> 388 KB for a 2 km
stage, which the env's process reads and unpickles. Alternating with the commit before, three
rounds each of `bench_random_vector(16, 3.0)`: 32.4 / 34.6 / 35.3 thousand car-steps/s
before, 36.3 / 37.2 / 37.9 after. The same command as the table, after it: 16 cars 48 %,
1,024 cars 19 %, a random reset 2.97 ms. The 70 % targets stay missed.

**4 December 2026** (a quiet machine: load average 0.5 before the run, nothing else running;
commit `a778f1e`; `python3 benchmarks/bench_env.py --random-only --no-rss --seconds 3`):

| cars | fixed (`opener`) | random | random / fixed, wall | per CPU s, env | per CPU s, + worker |
|---|---|---|---|---|---|
| 16 | 66,962 car-steps/s | 24,841 | 37 % | 37 % | 22 % |
| 1,024 | 126,860 | 18,661 | 15 % | 22 % | 16 % |
| 1,024, `num_levels=256` | 126,860 | 97,330 | 77 % | 76 % | 76 % |

Single env: 24,973 steps/s on `opener`, 13,814 on random stages (208 steps per episode): a
random reset costs **6.72 ms** amortized (6.45 ms of the env process's CPU, 11.75 ms with the
worker's). This machine steps faster than the one of the figures below, so compare ratios,
not rates. What changed since: the terrain fill deduplicates its requests as one int64 key
each (`np.unique` over rows had cost ten times as much). Measured alone, in alternating
subprocesses (two rounds each of `bench_random_vector(16, 3.0)` and `bench_random_single(3.0)`
from this benchmark), 16 cars went from 35 % and 39 % of fixed-stage car-steps/s to 44 % and
42 %; the amortized reset read 5.84 and 4.47 ms before and 3.84 and 5.47 ms after, so that
figure moves more from run to run than with the change. The targets stay missed at 16 and
1,024 cars; the reset cost lies around the 5 ms target, on either side of it from run to run.

**The prefetch worker at 1,024 cars** (4 December 2026). A profile of the 1,024-car random
env found every stage generated in place: each car asked the worker for its next stage at its
reset, the worker kept 64 answers, and by the time a car came back about as many resets as
there are cars had pushed its answer out (one answer was taken in a whole benchmark run). The
env paid for the requests (pipe writes of about 2 ms each in the profile), for unpickling the
unused answers, and for the worker's CPU beside its physics threads. Now an env with more cars than
the worker keeps answers for asks for none ahead (`rally_env.stages.prefetch_useful`), and
the cars one step resets together (about five at 1,024 cars) share their stages'
generation with the worker, on the core the physics threads leave idle during resets.
Alternating subprocesses on a quiet machine, two rounds each of `bench_random_vector(1024,
3.0, rounds=2)` from this benchmark: random stages 26,420 and 25,429 car-steps/s before,
29,365 and 30,215 after (+11 to +19 %); against the fixed stage 15-18 % before, 18-21 %
after; per CPU second with the worker's CPU counted, 17-19 % before, 22-26 % after. Still
far from 70 %. Where the rest goes (cProfile, 60 steps of 1,024 cars after 300 warm-up steps):
filling the tiles cars reach 0.55 s (serial, in the env's thread), the physics and post-step
kernels 0.47 s, generating stages in place about 0.4 s. Tried and not kept: baking the tiles of
different stages on two threads (the bake releasing the interpreter lock, a helper thread
taking half of each fill's stages). Nearly every tile of a 1,024-car step comes in fills
of two or more stages, but the time in the fills fell only from 0.29-0.32 s to 0.21-0.27 s
per 40 steps, within the run-to-run spread of the whole step; the physics threads (numba's
OpenMP layer) do not leave the second core free enough.

After all of these (commit `8e1c0f6`, load average 0.5, the same command as the first table
of this day):

| cars | fixed (`opener`) | random | random / fixed, wall | per CPU s, env | per CPU s, + worker |
|---|---|---|---|---|---|
| 16 | 72,311 car-steps/s | 26,501 | 37 % | 37 % | 21 % |
| 1,024 | 138,184 | 24,461 | 18 % | 27 % | 23 % |
| 1,024, `num_levels=256` | 138,184 | 116,681 | 84 % | 84 % | 84 % |

Single env: 30,085 steps/s on `opener`, 18,906 on random stages (205 steps per episode): a
random reset costs **4.03 ms** amortized (3.97 ms of the env process's CPU, 8.12 ms with the
worker's), under the 5 ms target in this run, over it in the first run of the day (6.72 ms).
With five rounds instead of three (`bench_random_single(3.0, rounds=5)`, three runs in fresh
processes, load average 0.6): 2.89, 4.03 and 3.30 ms amortized (2.87, 4.01 and 3.22 ms of
the env process's CPU; 6.46, 8.34 and 7.48 ms with the worker's). So the single env's reset
target is met here, the worker's CPU aside; the 16- and 1,024-car targets (70 %) are missed.

"""


def _md_speed_history() -> str:
    """``docs/env.md``: the random-stage figures of earlier runs."""
    return """\
**Start tiles baked by the worker** (4 December, later; commit `1ad9e73`). A car on a fresh
stage bakes about 34 tiles in an episode of this benchmark (about 210 steps), and a
worker-made stage now comes with the tiles of its first 40 m of road baked
(`StageTerrain.start_tiles`, `StageTerrain.prebake`: the same kernel on the same nodes, so the
same bits; the ground field travels as its computed cells, a few hundred of 60,000). 16 cars,
3,000 steps after a 300-step warm-up, counted: the env's process baked 3,082 tiles itself
instead of 7,638 (every one of 226 stages came from the worker). Its CPU time, six runs
each, alternating with the commit before: best 1.38 s against 1.52 s (-9 %; 1.38-1.65 s
against 1.52-2.01 s). The worker pays about 1.2 ms more per stage, on its own core. A 1,024-car
env, which waits for the worker's answers, asks for stages without start tiles: with them it
was slower (26.0 and 28.7 thousand car-steps/s against 31.9 and 32.4).

The same command as the first table of this day, after this change (commit `ca22ade`, load
average 0.6 before the run):

| cars | fixed (`opener`) | random | random / fixed, wall | per CPU s, env | per CPU s, + worker |
|---|---|---|---|---|---|
| 16 | 76,958 car-steps/s | 30,799 | 40 % | 43 % | 22 % |
| 1,024 | 167,940 | 31,842 | 19 % | 28 % | 23 % |
| 1,024, `num_levels=256` | 167,940 | 137,161 | 82 % | 81 % | 81 % |

Single env: 31,637 steps/s on `opener`, 21,333 on random stages (206 steps per episode): a
random reset costs **3.14 ms** amortized (2.94 ms of the env process's CPU, 8.41 ms with the
worker's). The 70 % targets at 16 and 1,024 cars stay missed; the reset is under 5 ms.

**Quiet machine** (3 December 2026, later; load average 1.0–1.4, nothing else running;
commit `dbc349a`; `python3 benchmarks/bench_env.py --random-only --no-rss --seconds 3`, with the
300-step warm-up, so the 1,024-car rows time resets too):

| cars | fixed (`opener`) | random | random / fixed, wall | per CPU s, env | per CPU s, + worker |
|---|---|---|---|---|---|
| 16 | 36,424 car-steps/s | 14,951 | 41 % | 41 % | 25 % |
| 1,024 | 85,660 | 12,974 | 15 % | 25 % | 18 % |
| 1,024, `num_levels=256` | 85,660 | 67,202 | 78 % | 79 % | 79 % |

Single env: 11,340 steps/s on `opener`, 7,372 on random stages (203 steps per episode): a
random reset costs **9.63 ms** amortized (CPU of the env's process; 16.65 ms with the worker's).
So on fresh stages every target but the memory one is missed, by a wide margin at 1,024 cars;
the level set of 256 stages (cars share stages, their tiles stay baked) passes 70 %. Why the
fresh-stage rows cannot reach 70 % with these actions: a random-steering car leaves the road
after about 200 steps (4 ms of physics per car at 16 cars), and its next stage costs about 4 ms
to generate (on the worker) plus about 4-5 ms of tile baking for the road it drives, 0.8 ms to
unpickle and about 1 ms to install (in the env): the work per episode is more than twice the
physics, and two cores cannot hide it. Episodes of a driver that stays on the road are about
ten times longer (2,700 steps in training), but its car meets new terrain all the way: 32 cars
driven by the heuristic (the training env of the `ppo-general` of 4 December: road ahead,
residual base, zero residual) step 14,795 car-steps per CPU second on random stages against
25,645 on `opener` (**58 %**, best of 3 interleaved rounds of 600 steps, load 1.2), nearly all
of the difference tile baking. In training the network costs more than the env either way
(docs/agents.md).

The figures below are earlier ones, measured on 3 December 2026 on the 2-core development
machine while two RL training runs and other tests kept the load average at 14–27 (so each
process got a fraction of a core; the wall-clock figures vary widely between runs, the
CPU-time ratios less but still by tens of per cent),
`python3 benchmarks/bench_env.py --quick --random-only --no-rss`:

| cars | fixed (`opener`) | random | random / fixed, wall | per CPU s, env | per CPU s, + worker |
|---|---|---|---|---|---|
| 16 | 18,558 car-steps/s | 7,477 | 40 % | 48 % | 32 % |
| 1,024 (see below) | 28,741 | 17,537 | 61 % | 64 % | 64 % |
| 1,024, `num_levels=256` | 28,741 | 20,460 | 71 % | 72 % | 72 % |

- Single env: a random reset costs 9.5 ms of the env process's CPU time amortized over an
  episode (12.0 ms with the worker's); the wall-clock figure of the same run (221 ms) only
  says how little CPU the process got. Target 5 ms: missed.
- Peak RSS of a 1,024-car env after 600 steps on random stages: **2,709 MB** (target 4 GB:
  met; `random_rss_mb(1024, 600)`, same day, load about 15).
- The 1,024-car rows above (1.5 s rounds, about 40 steps, after a warm-up of 8 steps) ended no
  episode (a car resets about every 200 steps), so they timed tile baking but no random reset
  and overstate the random rows. The benchmark now warms every env up for 300 steps first
  (past the first episode ends); a 1,024-car run of it did not finish in this session.
- At 1,024 cars, sampling the random env with `py-spy dump` during resets found it mostly in
  `TerrainSet.replace` copying the whole tile table (all 1,024 slots' tables, about 200 MB)
  each time a new stage needed a bigger table than its slot had. The table now grows by
  doubling, with spare room at its end: 2,000 random replacements in a 1,024-row set of flat
  1.4–1.8 km terrains cost 52 ms of CPU each before and 1.25 ms after, for a table of 1,015 MB
  instead of 659 MB (up to twice the tables in use). The effect on the 1,024-car env figures
  and its RSS is not measured yet.
- In one interleaved run at 16 cars (load 14, CPU time of the env process, best of 3 rounds of
  3 s): fixed 18,069 car-steps per CPU s, random 11,459 (63 %), random with
  `RALLY_PREFETCH=0` 7,865 (44 %); with the worker's CPU added, random is 49 %. A later run of
  the benchmark with the 300-step warm-up (load 22–25): 16 cars wall 41 %, env-process CPU
  46 %, with the worker's CPU 30 %. The 16-car targets are missed on every measure here.
- A second single-env run (3 s rounds, load 24): 8.5 ms of the env process's CPU per random
  reset amortized.

Where a random stage loses time (cProfile with `time.process_time` as its clock, 16 cars,
one process): the physics step costs the same on both kinds of stage; the extra CPU time is
baking the terrain tiles that cars reach for the first time (about 2.5 tiles per step of 16
cars, nearly half of the extra: the bake itself and as much again in the Python of the fill
path), then the per-reset work in the env's process (receiving and unpickling the stage, about
0.7 MB, from the worker; rewriting the slot's tables, `StageBank.set_slot`, about 0.3 ms;
freeing the old terrain row). With `RALLY_PREFETCH=0` each reset also generates its stage in
place (about 3 ms on an idle core). Under heavy load the worker competes with the env for the
same cores, so prefetching buys less than on a quiet machine: every request that wakes it
can hand it the env's core for a few milliseconds.

"""


def _md_versions() -> str:
    """``docs/env.md``: the version history."""
    return """\
## Version history

- `Rally-v0`, now `RallyDirect-v0`: initial version (physics layout v1, stage format v1).
- `Rally-v1`, now `RallyWheelSpeed-v1`: the wheel-speed tire model (integrated wheel spin, a
  real slip ratio, authored
  friction curves, friction clamps), selectable library vehicles (2 to 8 wheels, with or
  without an engine and gearbox) and planets; the observation appends engine rpm, gear,
  per-wheel tire wear, damage, per-wheel wheel speed and the surface grip at every lookahead
  point (slip ratios are real values); `info` adds `gear`, `engine_rpm`, `tire_wear`,
  `damage`, `max_impact_mps`, `slip_ratios`. `RallyDirect-v0` is unchanged (observations, rewards,
  state and replay hashes).
- The ids got names that say the model (`RallyDirect-v0`, `RallyWheelSpeed-v1`; the envs are
  unchanged, the old ids still work) and the info contract changed (see Info and
  CHANGELOG.md).
- `RallyLearn-v0`: `RallyDirect-v0` with decisions at 10 Hz, crash cost 100 and three
  policy actions (above), with golden hashes of its own; every other id is unchanged.
"""
