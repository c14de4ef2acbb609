"""Source of the built-in library: the stages laid out with :class:`~tracks.builder.PathBuilder`.

The shipped stage files ``tracks/stages/*.toml`` were written by this module::

    python -m tracks._library_src            # rewrite every library file
    python -m tracks._library_src opener     # just one

The TOML files are the source of truth at run time (edit them directly if you like; rerunning
this module overwrites them). Distances used below for sections, features, start and finish
are the builder's running distance ``b.s_m``, which matches the stage's arc length to
centimetres.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path

import numpy as np

from physics.mathx import PI, sincosx
from tracks.builder import PathBuilder, loop_builder, turn_length
from tracks.io import dumps_stage
from tracks.stage import Feature, Finish, Section, Stage, Start, TerrainSpec

STAGE_DIR = Path(__file__).resolve().parent / "stages"


def _r(v: float) -> float:
    return round(float(v), 1)


def opener() -> Stage:
    """1,164 m of timed line: flowing, gravel, a few medium corners, one gentle crest."""
    b = PathBuilder(0.0, 0.0, heading_deg=20.0, z_m=100.0)
    b.grade(0.0).straight(110)
    b.grade(0.015).turn(75, 45)
    b.straight(120)
    b.grade(0.03).turn(55, -70)
    b.grade(0.02).straight(70)
    crest_s = b.s_m + 65
    b.grade(0.0).straight(130)
    b.grade(-0.02).turn(90, 55)
    b.straight(60)
    b.grade(-0.03).turn(48, -85)
    dirt_s = b.s_m - 10
    b.grade(-0.01).straight(90)
    b.grade(0.01).turn(65, 60)
    b.straight(50)
    dirt_end = b.s_m
    b.grade(0.0).turn(110, -35)
    start, timed = 30.0, 1164.0
    finish = start + timed
    b.straight(finish + 90.0 - b.s_m)
    secs = (
        Section(0.0, 9.0, "gravel"),
        Section(_r(dirt_s), 9.0, "packed-dirt"),
        Section(_r(dirt_end), 9.0, "gravel"),
    )
    return Stage(
        name="opener",
        description="The fair first stage: 1,164 m of flowing gravel with a few medium "
        "corners, a short stretch of packed dirt and one gentle crest.",
        knots=b.knots(),
        sections=secs,
        finish=Finish(finish),
        start=Start(start),
        features=(Feature("crest", _r(crest_s), 70.0, 1.2),),
        checkpoints_m=(420.0, 800.0),
        terrain=TerrainSpec(amplitude_m=2.0),
    )


def switchbacks() -> Stage:
    """Hairpin-heavy mountain climb: eight hairpins stacked up a steep face."""
    b = PathBuilder(0.0, 0.0, heading_deg=0.0, z_m=200.0)
    b.grade(0.02).straight(120)
    b.grade(0.04).turn(45, 40)
    b.straight(60)
    b.turn(40, -40)
    b.grade(0.06).straight(80)
    legs = [110, 95, 120, 90, 115, 100, 85, 105]
    feats = []
    dust_from = None
    for i, leg in enumerate(legs):
        left = i % 2 == 0
        b.grade(0.07).hairpin(14.0 if i % 3 else 15.5, left=left)
        if i == 3:
            dust_from = b.s_m + 10
        b.grade(0.085 if i % 2 else 0.075).straight(leg)
        if i == 5:
            feats.append(Feature("compression", _r(b.s_m - 45), 30.0, 0.6))
    b.grade(0.03).turn(35, 60 if len(legs) % 2 == 0 else -60)
    b.straight(70)
    crest_s = b.s_m - 30
    b.grade(-0.02).turn(50, -50)
    b.straight(140)
    feats.append(Feature("crest", _r(crest_s), 50.0, 1.5))
    start = 30.0
    finish = b.s_m - 80.0
    secs = (
        Section(0.0, 7.0, "gravel"),
        Section(_r(dust_from), 7.0, "dust"),
        Section(_r(b.s_m - 260), 7.5, "gravel"),
    )
    return Stage(
        name="switchbacks",
        description="Mountain climb: eight hairpins stacked up a steep face at 7-8.5 % "
        "grade, 7 m wide, gravel then dust over rock, a crest over the top.",
        knots=b.knots(),
        sections=secs,
        finish=Finish(_r(finish)),
        start=Start(start),
        features=tuple(sorted(feats, key=lambda f: f.s_m)),
        checkpoints_m=(_r(finish * 0.33), _r(finish * 0.66)),
        terrain=TerrainSpec(amplitude_m=4.0, roughness_m=0.2),
    )


def sweepers() -> Stage:
    """Fast: long straights, big sweepers and a big jump."""
    b = PathBuilder(0.0, 0.0, heading_deg=-10.0, z_m=50.0)
    b.grade(0.0).straight(400)
    b.grade(0.01).turn(260, 35)
    b.straight(350)
    b.grade(-0.01).turn(180, -55)
    b.straight(250)
    crest_s = b.s_m - 120
    b.grade(0.0).turn(320, 30)
    jump_ramp_start = b.s_m + 120
    b.straight(520)
    b.grade(0.015).turn(200, -40)
    b.straight(300)
    b.grade(-0.015).turn(150, 60)
    b.straight(220)
    comp_s = b.s_m - 110
    b.grade(0.0).turn(240, -35)
    b.straight(380)
    start = 40.0
    finish = b.s_m - 90.0
    lip = jump_ramp_start + 15.0
    feats = (
        Feature("crest", _r(crest_s), 80.0, 2.0),
        Feature("jump", _r(lip), 15.0, 1.5, 2.5),
        Feature("compression", _r(comp_s), 60.0, 1.2),
    )
    secs = (
        Section(0.0, 11.0, "packed-dirt"),
        Section(1400.0, 10.0, "gravel"),
        Section(2300.0, 11.0, "packed-dirt"),
    )
    return Stage(
        name="sweepers",
        description="Flat-out: long straights joined by 150-320 m sweepers on packed dirt, "
        "a big kicker jump onto a long landing straight, a crest and a compression.",
        knots=b.knots(),
        sections=secs,
        finish=Finish(_r(finish)),
        start=Start(start),
        features=feats,
        checkpoints_m=(1000.0, 2000.0, 3000.0),
        terrain=TerrainSpec(amplitude_m=3.0),
    )


def mixed_surface() -> Stage:
    """Surfaces change in the middle of corners."""
    b = PathBuilder(0.0, 0.0, heading_deg=90.0, z_m=0.0)
    b.straight(90)
    corners = [
        (45, 80),
        (60, -70),
        (35, 95),
        (80, -50),
        (40, -85),
        (55, 75),
        (32, -100),
        (70, 60),
        (45, -70),
        (38, 90),
    ]
    straights = [110, 90, 130, 80, 120, 100, 90, 140, 100, 160]
    mids = []
    for (r, a), ln in zip(corners, straights, strict=True):
        s0 = b.s_m
        b.grade(0.02 if a > 0 else -0.02).turn(r, a)
        mids.append(0.5 * (s0 + b.s_m))
        b.grade(0.0).straight(ln)
    surfs = [
        "gravel",
        "packed-dirt",
        "sand",
        "dust",
        "gravel",
        "sand",
        "packed-dirt",
        "dust",
        "gravel",
        "sand",
        "packed-dirt",
    ]
    secs = [Section(0.0, 8.5, surfs[0])]
    for k, m in enumerate(mids):
        secs.append(Section(_r(m), 8.5, surfs[k + 1]))
    start = 30.0
    finish = b.s_m - 90.0
    feats = (
        Feature("crest", _r(mids[3] + 60), 40.0, 1.0),
        Feature("compression", _r(mids[7] + 70), 40.0, 0.8),
    )
    return Stage(
        name="mixed-surface",
        description="All four surfaces, and every change happens at the apex of a corner: "
        "grip goes from packed dirt to sand (µ 0.81 to 0.53) mid-turn.",
        knots=b.knots(),
        sections=tuple(secs),
        finish=Finish(_r(finish)),
        start=Start(start),
        features=feats,
        checkpoints_m=(_r(finish / 3), _r(2 * finish / 3)),
        terrain=TerrainSpec(amplitude_m=2.5),
    )


def forest() -> Stage:
    """Narrow and technical: tight corners, chicanes, short straights."""
    b = PathBuilder(0.0, 0.0, heading_deg=45.0, z_m=60.0)
    b.straight(60)
    seq = [
        ("t", 22, 70),
        ("s", 25),
        ("t", 18, -85),
        ("s", 40),
        ("t", 28, 45),
        ("t", 24, -60),
        ("s", 30),
        ("t", 20, 90),
        ("s", 55),
        ("t", 35, -40),
        ("t", 30, 40),
        ("s", 20),
        ("t", 19, -95),
        ("s", 35),
        ("t", 26, 60),
        ("s", 60),
        ("t", 21, -70),
        ("t", 21, 70),
        ("s", 45),
        ("t", 18, 100),
        ("s", 30),
        ("t", 32, -50),
        ("s", 40),
        ("t", 24, -75),
        ("s", 25),
        ("t", 27, 80),
        ("t", 27, -80),
        ("s", 50),
        ("t", 20, 65),
        ("s", 35),
        ("t", 23, -90),
        ("s", 40),
        ("t", 30, 55),
        ("s", 70),
        ("t", 19, -80),
        ("s", 30),
        ("t", 25, 45),
        ("t", 25, -45),
        ("s", 40),
        ("t", 18, 95),
        ("s", 25),
        ("t", 28, -60),
        ("s", 50),
        ("t", 22, -70),
        ("t", 22, 70),
        ("s", 35),
        ("t", 20, 85),
        ("s", 60),
        ("t", 26, -55),
        ("s", 30),
        ("t", 19, -90),
        ("s", 45),
    ]
    grade = 0.0
    comp = []
    for i, op in enumerate(seq):
        if i % 4 == 0:
            grade = [0.03, -0.02, 0.04, -0.035, 0.01][(i // 4) % 5]
            b.grade(grade)
        if op[0] == "s":
            if op[1] >= 55:
                comp.append(b.s_m + 0.5 * op[1])
            b.straight(op[1])
        else:
            b.turn(op[1], op[2])
    b.grade(0.0).straight(120)
    start = 25.0
    finish = b.s_m - 90.0
    feats = tuple(Feature("compression", _r(c), 24.0, 0.5) for c in comp[:2])
    secs = (
        Section(0.0, 5.5, "packed-dirt"),
        Section(_r(b.s_m * 0.45), 5.5, "gravel"),
        Section(_r(b.s_m * 0.75), 5.5, "packed-dirt"),
    )
    return Stage(
        name="forest",
        description="Narrow (5.5 m) and technical: a string of 18-35 m corners and "
        "chicanes with short straights between them, packed dirt and gravel.",
        knots=b.knots(),
        sections=secs,
        finish=Finish(_r(finish)),
        start=Start(start),
        features=feats,
        checkpoints_m=(_r(finish / 3), _r(2 * finish / 3)),
        terrain=TerrainSpec(amplitude_m=2.5, roughness_m=0.25, berm_height_m=0.5),
    )


def rallycross() -> Stage:
    """Closed-loop circuit, wide, packed dirt and gravel, one jump, four laps."""
    turns = [(22.0, 100.0), (45.0, 60.0), (30.0, -45.0), (16.0, 150.0), (60.0, 40.0), (26.0, 55.0)]
    assert abs(sum(a for _, a in turns) - 360.0) < 1e-9
    straights = [150.0, 60.0, 50.0, 60.0, 120.0, 90.0]
    res = loop_builder(turns, straights, heading_deg=0.0, length_m=1100.0, min_straight_m=30.0)
    assert res is not None
    b, lens = res
    s = 0.0
    starts = []
    for (r, a), ln in zip(turns, lens, strict=True):
        starts.append(s)
        s += ln + turn_length(r, a)
    knots = b.closed_knots()
    z = 2.0 * np.array([_bump(float(v)) for v in np.linspace(0, 1, len(knots), endpoint=False)])
    knots[:, 2] = np.round(z, 2)
    jump_lip = starts[4] + 0.6 * lens[4]
    secs = (
        Section(0.0, 12.0, "packed-dirt"),
        Section(_r(starts[2] + 10), 12.0, "gravel"),
        Section(_r(starts[4] - 20), 12.0, "packed-dirt"),
    )
    return Stage(
        name="rallycross",
        description="Rallycross circuit: a 1.1 km closed loop, 12 m wide, half packed dirt "
        "half gravel, a 16 m hairpin, a left-right kink and a kicker jump; four laps.",
        knots=knots,
        sections=secs,
        finish=Finish(None, 4),
        closed=True,
        start=Start(_r(0.5 * lens[0])),
        features=(Feature("jump", _r(jump_lip), 10.0, 0.8, 2.0),),
        checkpoints_m=(_r(starts[2] + 20), _r(starts[4] + 10)),
        terrain=TerrainSpec(amplitude_m=1.5, berm_height_m=0.5),
    )


def _bump(u: float) -> float:
    """A gentle periodic elevation profile (polynomial) for the rallycross loop."""
    v = 2.0 * u - 1.0
    return (1.0 - v * v) * (1.0 - v * v) * (0.5 + 0.5 * v)


def proving_ground() -> Stage:
    """Flat, straight, 3.2 km timed, 30 m wide, one surface everywhere."""
    xs = np.arange(0.0, 3401.0, 100.0)
    knots = np.stack([xs, np.zeros_like(xs), np.zeros_like(xs)], axis=1)
    return Stage(
        name="proving-ground",
        description="Measurement stage: dead flat and dead straight, 30 m wide gravel, the "
        "ground around it flat gravel too; 3.2 km from the start to the finish line.",
        knots=knots,
        sections=(Section(0.0, 30.0, "gravel"),),
        finish=Finish(3300.0),
        start=Start(100.0),
        checkpoints_m=(1100.0, 2200.0),
        terrain=TerrainSpec(
            amplitude_m=0.0, roughness_m=0.0, berm_height_m=0.0, offroad_surface="gravel"
        ),
    )


SKIDPAD_RADIUS_M = 40.0


def skidpad() -> Stage:
    """Flat open gravel pad with a marked circle of radius 40 m (anticlockwise)."""
    n = 48
    pts = []
    for k in range(n):
        s, c = sincosx(2.0 * PI * k / n - 0.5 * PI)
        pts.append([round(SKIDPAD_RADIUS_M * c, 4), round(SKIDPAD_RADIUS_M * s, 4), 0.0])
    return Stage(
        name="skidpad",
        description="Measurement stage: a flat open gravel pad with a marked circle of "
        f"radius {SKIDPAD_RADIUS_M:.0f} m (centerline, centred on the origin), driven "
        "anticlockwise; the ground is the same flat gravel everywhere.",
        knots=np.array(pts),
        sections=(Section(0.0, 12.0, "gravel"),),
        finish=Finish(None, 3),
        closed=True,
        start=Start(0.0),
        terrain=TerrainSpec(
            amplitude_m=0.0, roughness_m=0.0, berm_height_m=0.0, offroad_surface="gravel"
        ),
    )


LIBRARY: dict[str, Callable[[], Stage]] = {
    "opener": opener,
    "switchbacks": switchbacks,
    "sweepers": sweepers,
    "mixed-surface": mixed_surface,
    "forest": forest,
    "rallycross": rallycross,
    "proving-ground": proving_ground,
    "skidpad": skidpad,
}


def write(names: list[str] | None = None) -> None:
    STAGE_DIR.mkdir(exist_ok=True)
    for name in names or list(LIBRARY):
        st = LIBRARY[name]()
        path = STAGE_DIR / f"{name}.toml"
        path.write_text(dumps_stage(st), encoding="utf-8")
        print(
            f"{path.name}: {st.length_m:8.1f} m path, {st.timed_length_m:8.1f} m timed, "
            f"{len(st.knots)} knots, min radius "
            f"{1.0 / max(float(np.max(np.abs(st.path.curvature))), 1e-9):.1f} m"
        )


if __name__ == "__main__":
    write(sys.argv[1:] or None)
