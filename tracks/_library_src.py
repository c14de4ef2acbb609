"""Source of the built-in library: the stages laid out with :class:`~tracks.builder.PathBuilder`.

``python -m tracks._library_src [name ...]`` rewrites the shipped ``tracks/stages/*.toml``
(docs/stages.md, "The library"). Distances below are the builder's running ``b.s_m``; each
stage's ``description`` says what it is.
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
    b = PathBuilder(0.0, 0.0, heading_deg=90.0, z_m=0.0)
    b.straight(90)
    # (radius_m, angle_deg) of each corner, the straight after it (m) and the surface from
    # the corner's apex on
    corners = (
        (45, 80, 110, "packed-dirt"),
        (60, -70, 90, "sand"),
        (35, 95, 130, "dust"),
        (80, -50, 80, "gravel"),
        (40, -85, 120, "sand"),
        (55, 75, 100, "packed-dirt"),
        (32, -100, 90, "dust"),
        (70, 60, 140, "gravel"),
        (45, -70, 100, "sand"),
        (38, 90, 160, "packed-dirt"),
    )
    mids = []
    secs = [Section(0.0, 8.5, "gravel")]
    for r, a, ln, surface in corners:
        s0 = b.s_m
        b.grade(0.02 if a > 0 else -0.02).turn(r, a)
        mids.append(0.5 * (s0 + b.s_m))
        secs.append(Section(_r(mids[-1]), 8.5, surface))
        b.grade(0.0).straight(ln)
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
    b = PathBuilder(0.0, 0.0, heading_deg=45.0, z_m=60.0)
    b.straight(60)
    # four pieces at a grade: (radius_m, angle_deg) a turn, a number a straight (m)
    stretches = (
        (0.03, (22, 70), 25, (18, -85), 40),
        (-0.02, (28, 45), (24, -60), 30, (20, 90)),
        (0.04, 55, (35, -40), (30, 40), 20),
        (-0.035, (19, -95), 35, (26, 60), 60),
        (0.01, (21, -70), (21, 70), 45, (18, 100)),
        (0.03, 30, (32, -50), 40, (24, -75)),
        (-0.02, 25, (27, 80), (27, -80), 50),
        (0.04, (20, 65), 35, (23, -90), 40),
        (-0.035, (30, 55), 70, (19, -80), 30),
        (0.01, (25, 45), (25, -45), 40, (18, 95)),
        (0.03, 25, (28, -60), 50, (22, -70)),
        (-0.02, (22, 70), 35, (20, 85), 60),
        (0.04, (26, -55), 30, (19, -90), 45),
    )
    comp = []
    for grade, *pieces in stretches:
        b.grade(grade)
        for p in pieces:
            if isinstance(p, tuple):
                b.turn(*p)
                continue
            if p >= 55:
                comp.append(b.s_m + 0.5 * p)
            b.straight(p)
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
    n = 48
    sc = [sincosx(2.0 * PI * k / n - 0.5 * PI) for k in range(n)]
    pts = [[round(SKIDPAD_RADIUS_M * c, 4), round(SKIDPAD_RADIUS_M * s, 4), 0.0] for s, c in sc]
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
