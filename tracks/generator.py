"""Procedural stages from a seed: the same seed and arguments give a bit-identical stage
everywhere. docs/stages.md, "The generator", describes the layout, what difficulty sets, the
retry budget and the determinism.
"""

from __future__ import annotations

import math

import numpy as np

from physics.mathx import PI
from tracks import surfaces as _surf
from tracks.builder import PathBuilder, loop_builder, turn_length
from tracks.errors import GenerationError, StageError
from tracks.stage import (
    MIN_RADIUS_M,
    Feature,
    Finish,
    Section,
    Stage,
    Start,
    TerrainSpec,
    fit_centerline,
)

#: Attempts before :func:`generate` gives up with :class:`GenerationError`.
MAX_ATTEMPTS = 50
#: Straight before the start line and after the finish line (m).
RUN_UP_M = 30.0
RUN_OFF_M = 80.0
MIN_LENGTH_M = 200.0
#: A layout is rejected if its spline comes out tighter than this share of the design radius.
ACCEPT_RADIUS = 0.95
#: Corners are drawn no tighter than this multiple of the design radius.
DRAW_MARGIN = 1.05
#: Point-to-point attempts after ``max_attempts`` have failed, corners drawn no tighter than
#: ``RESCUE_MARGIN`` times the design radius (docs/stages.md, "The generator").
RESCUE_ATTEMPTS = 50
RESCUE_MARGIN = 1.25
MAX_LENGTH_M = 20000.0
_DEG = PI / 180.0


def min_radius_for(difficulty: float) -> float:
    """Design minimum corner radius (m) at a difficulty in [0, 1]."""
    r = 15.0 + 45.0 * (1.0 - difficulty) * (1.0 - difficulty)
    return max(r, MIN_RADIUS_M + 1.0)


def _u(rng: np.random.Generator, lo: float, hi: float) -> float:
    return lo + (hi - lo) * float(rng.random())


def _draw_turn(rng: np.random.Generator, d: float, r_min: float) -> tuple[float, float]:
    """(radius_m, |angle_deg|) of an ordinary corner."""
    r_max = 320.0 - 150.0 * d
    u = float(rng.random())
    radius = r_min + (r_max - r_min) * u * u * u
    angle = _u(rng, 25.0, 120.0)
    max_arc = 360.0
    if radius * angle * _DEG > max_arc:
        angle = max_arc / (radius * _DEG)
    return radius, angle


def _open_layout(rng, length_m, d, r_min):
    """Sequence of pieces for a point-to-point stage, heading kept within ±100° of the start."""
    theta0 = _u(rng, -180.0, 180.0)
    b = PathBuilder(0.0, 0.0, theta0, 0.0, knot_spacing_m=10.0)
    limit = 100.0
    heading = 0.0
    straights = []
    target = RUN_UP_M + length_m
    b.straight(RUN_UP_M + _u(rng, 0.0, 40.0))
    straights.append((0.0, b.s_m))
    while b.s_m < target:
        p_hair = max(0.0, d - 0.6) * 0.6
        if abs(heading) >= 80.0 and float(rng.random()) < p_hair:
            radius = _u(rng, r_min, r_min + 4.0)
            angle = -180.0 if heading > 0 else 180.0
            b.turn(radius, angle)
            heading += angle
        else:
            radius, angle = _draw_turn(rng, d, r_min)
            sign = 1.0 if rng.random() < 0.5 else -1.0
            if abs(heading + sign * angle) > limit:
                sign = -sign
            if abs(heading + sign * angle) > limit:
                angle = max(limit - abs(heading), 10.0)
                sign = -1.0 if heading > 0 else 1.0
            b.turn(radius, sign * angle)
            heading += sign * angle
        ln = _u(rng, 15.0, 40.0 + 160.0 * (1.0 - d))
        if float(rng.random()) < 0.15:  # now and then a long straight, whatever the difficulty
            ln += _u(rng, 60.0, 160.0)
        s0 = b.s_m
        b.straight(ln)
        straights.append((s0, ln))
    s0 = b.s_m
    b.straight(RUN_OFF_M)
    straights.append((s0, RUN_OFF_M))
    return b, straights


def _closed_layout(rng, length_m, d, r_min):
    """Turns summing to +360° with straights whose lengths are solved to close the loop."""
    n_left = int(rng.integers(4, 8))
    n_right = int(rng.integers(0, 3)) if d > 0.3 else 0
    lefts = [_u(rng, 40.0, 140.0) for _ in range(n_left)]
    rights = [_u(rng, 20.0, 70.0) for _ in range(n_right)]
    scale = (360.0 + sum(rights)) / sum(lefts)
    lefts = [a * scale for a in lefts]
    if max(lefts) > 175.0:
        return None
    angles = lefts + [-a for a in rights]
    # shuffle deterministically
    order = rng.permutation(len(angles))
    angles = [angles[int(i)] for i in order]
    turns = []
    for a in angles:
        radius, _ = _draw_turn(rng, d, r_min)
        turns.append((max(min(radius, 0.08 * length_m), r_min), a))
    lens = [_u(rng, 30.0, 40.0 + 120.0 * (1.0 - d)) for _ in turns]
    theta0 = _u(rng, -180.0, 180.0)
    res = loop_builder(turns, lens, theta0, length_m, min_straight_m=25.0)
    if res is None:
        return None
    b, new = res
    spans = []
    s0 = 0.0
    for (radius, a), ln in zip(turns, new, strict=True):
        spans.append((s0, ln))
        s0 += ln + turn_length(radius, a)
    return b, spans


def _sections(rng, s_end, d, closed):
    """Surface/width sections covering [0, s_end)."""
    weights = np.array([1.2 - 0.6 * d, 1.0, 0.3 + 0.7 * d, 0.15 + 0.6 * d])
    cum = np.cumsum(weights) / (((weights[0] + weights[1]) + weights[2]) + weights[3])
    w_lo = 10.0 - 4.0 * d
    w_hi = 12.0 - 4.0 * d
    out = []
    s = 0.0
    prev = -1
    while s < s_end - 150.0 or not out:
        u = float(rng.random())
        k = min(int(np.searchsorted(cum, u, side="right")), 3)
        if k == prev:
            k = (k + 1 + int(rng.integers(0, 3))) % 4
        prev = k
        width = math.floor(_u(rng, w_lo, w_hi) * 2.0) / 2.0
        out.append(Section(round(s, 1), width, _surf.ROAD_SURFACES[k].name))
        s += _u(rng, 200.0, 600.0)
    if closed and len(out) > 1 and out[-1].surface == out[0].surface:
        out.pop()
    return tuple(out)


def _features(rng, straights, d, s_lo, s_hi, length_m):
    """Crests, compressions and jumps placed on straights inside [s_lo, s_hi]."""
    cands = [(s0, ln) for (s0, ln) in straights if ln >= 50.0 and s0 > s_lo and s0 + ln < s_hi]
    order = [cands[int(i)] for i in rng.permutation(len(cands))] if cands else []
    n_crest = max(1, int(length_m / 800.0 + 0.5))
    n_comp = int(length_m / 1200.0 + 0.5)
    n_jump = int(length_m * d / 900.0 + 0.5) if d >= 0.25 else 0
    wanted = ["crest"] * n_crest + ["jump"] * n_jump + ["compression"] * n_comp
    feats = []
    for kind, (s0, ln) in zip(wanted, order, strict=False):
        if kind == "jump":
            ramp = _u(rng, 8.0, 14.0)
            lip = min(_u(rng, 0.5, 0.8 + 1.2 * d), ramp / 4.0)
            if ln < ramp + 45.0:
                continue
            lip_s = s0 + ramp + _u(rng, 0.0, ln - ramp - 45.0)
            feats.append(Feature("jump", round(lip_s, 1), round(ramp, 1), round(lip, 2), 2.0))
        else:
            fl = min(_u(rng, 30.0, 70.0), ln)
            lo, hi = (0.6, 1.2 + 1.8 * d) if kind == "crest" else (0.4, 0.8 + 0.8 * d)
            h = min(_u(rng, lo, hi), fl / 6.0)
            c = s0 + 0.5 * fl + _u(rng, 0.0, ln - fl)
            feats.append(Feature(kind, round(c, 1), round(fl, 1), round(h, 2)))
    feats.sort(key=lambda f: f.s_m)
    return tuple(feats)


def _elevate(knots: np.ndarray, rng, d: float, closed: bool) -> np.ndarray:
    """Replace the knots' z with a smooth random profile (bounded grade, closes for loops)."""
    xy = knots[:, :2]
    dd = np.diff(xy, axis=0)
    seg = np.sqrt(dd[:, 0] * dd[:, 0] + dd[:, 1] * dd[:, 1])
    n = knots.shape[0]
    g_max = 0.03 + 0.07 * d
    grades = np.empty(n - 1)
    g = 0.0
    # grade random walk, changed every ~60 m (smooth enough for the spline)
    acc = 0.0
    for i in range(n - 1):
        acc += seg[i]
        if acc >= 60.0:
            acc = 0.0
            g = min(max(g + _u(rng, -0.025, 0.025), -g_max), g_max)
        grades[i] = g
    if closed:
        total = 0.0
        rise = 0.0
        for i in range(n - 1):
            total += float(seg[i])
            rise += float(grades[i] * seg[i])
        grades = grades - rise / total
    z = np.zeros(n)
    for i in range(1, n):
        z[i] = z[i - 1] + grades[i - 1] * seg[i - 1]
    out = knots.copy()
    out[:, 2] = np.round(z, 3)
    return out


def _attempt(rng, seed, length_m, d, closed, laps, terrain_seed, name, margin=DRAW_MARGIN):
    r_min = min_radius_for(d)
    r_draw = margin * r_min  # the spline overshoots eased corners by a few per cent
    if closed:
        lay = _closed_layout(rng, length_m, d, r_draw)
        if lay is None:
            raise _Retry("could not close the loop")
        b, straights = lay
        k = b.knots(decimals=None)
        # close: add the closing point so the gap is spread, then drop the duplicate
        gap = k[-1, :2] - k[0, :2]
        if math.sqrt(float(gap[0] * gap[0] + gap[1] * gap[1])) > 1.0:
            raise _Retry("loop closure gap too large")
        k = b.closed_knots(decimals=3)
        k = _elevate(np.vstack([k, k[:1]]), rng, d, True)[:-1]
    else:
        b, straights = _open_layout(rng, length_m, d, r_draw)
        k = _elevate(b.knots(decimals=3), rng, d, False)
    s_end = b.s_m
    secs = _sections(rng, s_end, d, closed)
    if closed:
        start_s = round(0.5 * straights[0][1], 1)
        feats = _features(rng, straights[1:], d, 0.0, s_end, length_m)
        cps = tuple(round(start_s + length_m * q / 3.0, 1) % s_end for q in (1, 2))
        cps = tuple(c for c in cps if 0 < c < s_end - 1.0)
        finish = Finish(None, laps)
    else:
        start_s = RUN_UP_M
        fin_s = RUN_UP_M + length_m
        feats = _features(rng, straights, d, start_s + 20.0, fin_s - 20.0, length_m)
        cps = tuple(round(start_s + length_m * q / 4.0, 1) for q in (1, 2, 3))
        finish = Finish(fin_s, None)
    # the design radius, on the fit the Stage reuses (docs/stages.md, "The generator")
    out, _ = fit_centerline(k, closed)
    if out.shape[0]:
        rmin = 1.0 / float(np.max(np.abs(out[:, 5])))
        if rmin < ACCEPT_RADIUS * r_min:
            raise _Retry(f"tightest radius {rmin:.1f} m is below the design {r_min:.1f} m")
    desc = (
        f"Generated stage: seed {seed}, {'closed loop' if closed else 'point to point'}, "
        f"{length_m:.0f} m, difficulty {d:.2f}."
    )
    return Stage(
        name=name,
        knots=k,
        sections=secs,
        finish=finish,
        description=desc,
        closed=closed,
        start=Start(start_s, 0.0),
        features=feats,
        checkpoints_m=cps,
        terrain=TerrainSpec(seed=terrain_seed),
        source=name,
    )


class _Retry(Exception):
    pass


def generate(
    seed: int,
    length_m: float = 2000.0,
    difficulty: float = 0.5,
    closed: bool = False,
    laps: int = 1,
    terrain_seed: int = 42,
    max_attempts: int = MAX_ATTEMPTS,
) -> Stage:
    """Generate a valid stage from a seed (docs/stages.md, "The generator", says what each
    argument sets and how the retry budget works).

    Args:
        seed: non-negative integer; the same seed and arguments always give the same stage.
        length_m: timed length (m): start to finish point to point, else the lap.
        difficulty: 0 (wide, sweeping, flat) .. 1 (narrow, hairpins, steep, loose surfaces).
        laps: laps to the finish of a closed loop.
        max_attempts: retry budget (point to point: plus ``RESCUE_ATTEMPTS``).

    Returns:
        A validated :class:`Stage` named ``gen-<seed>`` (with the arguments appended when they
        are not the defaults).

    Raises:
        GenerationError: when every attempt failed validation (``ValueError``: bad arguments).
    """
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
        raise ValueError(f"seed must be a non-negative integer, got {seed!r}")
    length_m = float(length_m)
    if not MIN_LENGTH_M <= length_m <= MAX_LENGTH_M:
        raise ValueError(f"length_m must be in [{MIN_LENGTH_M}, {MAX_LENGTH_M}], got {length_m}")
    difficulty = float(difficulty)
    if not 0.0 <= difficulty <= 1.0:
        raise ValueError(f"difficulty must be in [0, 1], got {difficulty}")
    if closed and length_m < 400.0:
        raise ValueError("a closed loop needs length_m >= 400")
    if isinstance(laps, bool) or not isinstance(laps, (int, np.integer)) or laps < 1:
        raise ValueError(f"laps must be a positive integer, got {laps!r}")
    if isinstance(max_attempts, bool) or not isinstance(max_attempts, int) or max_attempts < 1:
        raise ValueError(f"max_attempts must be a positive integer, got {max_attempts!r}")
    name = f"gen-{int(seed)}"
    if (length_m, difficulty, closed, laps, terrain_seed) != (2000.0, 0.5, False, 1, 42):
        name += f"-{length_m:.0f}m-d{difficulty:.2f}" + ("-loop" if closed else "")
    rng = np.random.default_rng(int(seed))
    args = (rng, int(seed), length_m, difficulty, closed, int(laps), int(terrain_seed), name)
    last = "no attempt made"
    # loops keep their one budget: a loop that cannot be made becomes the point-to-point
    # stage of its draw (generate_drawn), and that must stay so for every seed
    budgets = [(max_attempts, DRAW_MARGIN)] + ([] if closed else [(RESCUE_ATTEMPTS, RESCUE_MARGIN)])
    for attempts, margin in budgets:
        for _ in range(attempts):
            try:
                return _attempt(*args, margin)
            except (_Retry, StageError) as e:
                last = str(e)
    tried = " + ".join(str(n) for n, _ in budgets)
    raise GenerationError(
        f"generate(seed={seed}, length_m={length_m}, difficulty={difficulty}, closed={closed}): "
        f"no valid stage in {tried} attempts; last problem: {last}"
    )


def generate_drawn(seed: int, length_m: float, difficulty: float, laps: int = 0) -> Stage:
    """The stage of a random draw: :func:`generate` point to point (``laps`` 0) or a closed
    loop of ``laps`` laps (``length_m`` a lap); a loop the generator cannot make becomes the
    point-to-point stage of the same seed and difficulty (docs/stages.md, "The generator")."""
    if laps > 0:
        try:
            return generate(seed, length_m=length_m, difficulty=difficulty, closed=True, laps=laps)
        except GenerationError:
            pass
    return generate(seed, length_m=length_m, difficulty=difficulty)
