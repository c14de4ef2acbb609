"""The stage generator: validity over 1,000 seeds, bit-identical repeatability, retry budget."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

import tracks
from tracks import generator
from tracks.stage import MIN_RADIUS_M

PATH_FIELDS = (
    "s_m",
    "x_m",
    "y_m",
    "z_m",
    "z_base_m",
    "tx",
    "ty",
    "curvature",
    "half_width_m",
    "surface",
)

# Golden digests. They pin the generator's output bit for bit on every platform. If you change
# the generator (or the spline) on purpose, print the new values with
#   python -c "import tracks; print(tracks.generate(42).digest())"   (etc., see below)
# and update them here in the same commit, saying why.
GOLDEN_GEN_42 = "51f0fd20cfa25aad17648bb4aed39fea"
GOLDEN_GEN_42_PATH = "d0a29d01ef0f2cd4deff4bd8dff3acb9"
GOLDEN_GEN_7_LOOP = "d45f2b5f2e5a55888b1dec06a29eea1e"  # generate(7, 1200, 0.8, closed=True)


def _path_hash(stage: tracks.Stage) -> str:
    h = hashlib.blake2b(digest_size=16)
    for f in ("x_m", "y_m", "z_m", "curvature", "half_width_m"):
        h.update(getattr(stage.path, f).tobytes())
    return h.hexdigest()


def _min_radius(stage: tracks.Stage) -> float:
    return 1.0 / float(np.max(np.abs(stage.path.curvature)))


def test_thousand_consecutive_seeds_are_valid():
    """Seeds 0..999 at the defaults: valid (the Stage validated itself), drivable, 2 km."""
    radii = []
    for seed in range(1000):
        st = tracks.generate(seed)
        assert st.name == f"gen-{seed}"
        assert not st.closed
        assert st.timed_length_m == pytest.approx(2000.0)
        assert st.finish_s_m < st.length_m - 50.0
        assert len(st.sections) >= 2  # surfaces in sections
        assert any(f.kind == "crest" for f in st.features)
        assert float(np.ptp(st.path.z_m)) > 1.0  # it has elevation
        radii.append(_min_radius(st))
    assert min(radii) >= 24.5  # default difficulty: no corner tighter than ~25 m


@pytest.mark.parametrize(
    ("difficulty", "closed", "n"),
    [(0.0, False, 120), (1.0, False, 120), (0.5, True, 150), (1.0, True, 80)],
)
def test_other_settings_are_valid(difficulty, closed, n):
    design = generator.min_radius_for(difficulty)
    for seed in range(n):
        st = tracks.generate(seed, length_m=1500.0, difficulty=difficulty, closed=closed)
        assert st.closed == closed
        assert _min_radius(st) >= max(MIN_RADIUS_M, generator.ACCEPT_RADIUS * design)
        if closed:
            assert st.path.length_m == pytest.approx(1500.0, rel=0.01)
            assert st.laps == 1
        else:
            assert st.timed_length_m == pytest.approx(1500.0)


def test_difficulty_changes_character():
    easy = [tracks.generate(s, difficulty=0.0) for s in range(20)]
    hard = [tracks.generate(s, difficulty=1.0) for s in range(20)]
    assert np.mean([_min_radius(s) for s in easy]) > 2 * np.mean([_min_radius(s) for s in hard])
    assert np.mean([s.path.half_width_m.mean() for s in easy]) > np.mean(
        [s.path.half_width_m.mean() for s in hard]
    )
    assert sum(f.kind == "jump" for s in hard for f in s.features) > 0
    assert sum(f.kind == "jump" for s in easy for f in s.features) == 0


def test_same_seed_bit_identical():
    for seed in (0, 42, 12345):
        for kw in ({}, {"closed": True, "length_m": 900.0}):
            a = tracks.generate(seed, **kw)
            b = tracks.generate(seed, **kw)
            assert a.digest() == b.digest()
            assert a.knots.tobytes() == b.knots.tobytes()
            for f in PATH_FIELDS:
                assert getattr(a.path, f).tobytes() == getattr(b.path, f).tobytes(), f
    assert tracks.generate(1).digest() != tracks.generate(2).digest()


def test_golden_digests():
    g = tracks.generate(42)
    assert g.digest() == GOLDEN_GEN_42
    assert _path_hash(g) == GOLDEN_GEN_42_PATH
    loop = tracks.generate(7, length_m=1200.0, difficulty=0.8, closed=True)
    assert loop.digest() == GOLDEN_GEN_7_LOOP


def test_same_bits_without_jit():
    """Pure Python (NUMBA_DISABLE_JIT=1) gives the same stage and path bits as compiled code."""
    code = textwrap.dedent("""
        import hashlib, tracks
        g = tracks.generate(42)
        h = hashlib.blake2b(digest_size=16)
        for f in ("x_m", "y_m", "z_m", "curvature", "half_width_m"):
            h.update(getattr(g.path, f).tobytes())
        print(g.digest(), h.hexdigest())
    """)
    env = dict(os.environ, NUMBA_DISABLE_JIT="1")
    root = Path(tracks.__file__).resolve().parent.parent
    env["PYTHONPATH"] = str(root) + os.pathsep + env.get("PYTHONPATH", "")
    out = subprocess.run(
        [sys.executable, "-c", code],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    ).stdout.split()
    assert out == [GOLDEN_GEN_42, GOLDEN_GEN_42_PATH]


def test_a_layout_below_the_design_radius_is_rejected_before_its_stage_is_built(monkeypatch):
    """Seed 5 takes three attempts, two of them rejected by the design radius: each attempt
    fits the centerline once, and only the accepted layout is built into a Stage (which
    reuses that fit)."""
    import threading

    import tracks.stage as stage_mod

    monkeypatch.setattr(stage_mod, "_LAST_FIT", threading.local())
    fits, built, attempts = [], [], []
    real_fit, real_stage, real_attempt = (
        stage_mod.fit_and_resample,
        generator.Stage,
        generator._attempt,
    )
    monkeypatch.setattr(stage_mod, "fit_and_resample", lambda *a: fits.append(1) or real_fit(*a))
    monkeypatch.setattr(generator, "Stage", lambda **kw: built.append(1) or real_stage(**kw))
    monkeypatch.setattr(generator, "_attempt", lambda *a: attempts.append(1) or real_attempt(*a))
    st = tracks.generate(5)
    assert (len(attempts), len(fits), len(built)) == (3, 3, 1)
    assert _min_radius(st) >= generator.ACCEPT_RADIUS * generator.min_radius_for(0.5)


def test_fit_centerline_remembers_the_last_fit_of_its_thread():
    from tracks.stage import fit_centerline

    k = tracks.generate(1).knots
    out, length = fit_centerline(k, False)
    again = fit_centerline(k.copy(), False)
    assert again[0] is out and again[1] == length
    assert not out.flags.writeable
    other = fit_centerline(k[:-1], False)
    assert other[0] is not out and other[1] < length
    assert fit_centerline(k, False)[0] is not out  # one fit remembered, the last
    assert fit_centerline(k, False)[0].tobytes() == out.tobytes()


def test_retry_budget_raises(monkeypatch):
    calls = []

    def always_fails(*args, **kwargs):
        calls.append(1)
        raise generator._Retry("forced failure")

    monkeypatch.setattr(generator, "_attempt", always_fails)
    rescue = generator.RESCUE_ATTEMPTS
    with pytest.raises(
        tracks.GenerationError, match=rf"no valid stage in 7 \+ {rescue} attempts.*forced"
    ):
        tracks.generate(3, max_attempts=7)
    assert len(calls) == 7 + rescue
    calls.clear()
    with pytest.raises(tracks.GenerationError):
        tracks.generate(3)
    assert len(calls) == tracks.MAX_ATTEMPTS + rescue
    calls.clear()
    # a loop has no rescue attempts: one it cannot make is drawn point to point instead
    with pytest.raises(tracks.GenerationError, match=r"no valid stage in 7 attempts.*forced"):
        tracks.generate(3, length_m=800.0, closed=True, max_attempts=7)
    assert len(calls) == 7


def test_long_hard_stages_are_rescued_with_wider_corners(monkeypatch):
    """At 20 km and difficulty 1 most seeds failed every ordinary attempt (some hairpin's
    spline always came out too tight) and raised GenerationError; the rescue attempts draw
    the corners wider and give a valid stage, the same every time."""
    margins = []
    real = generator._attempt

    def spy(*args, **kwargs):
        margins.append(args[-1] if len(args) == 9 else generator.DRAW_MARGIN)
        return real(*args, **kwargs)

    monkeypatch.setattr(generator, "_attempt", spy)
    for seed in (1, 2):
        margins.clear()
        st = tracks.generate(seed, length_m=20000.0, difficulty=1.0)
        assert margins[: tracks.MAX_ATTEMPTS] == [generator.DRAW_MARGIN] * tracks.MAX_ATTEMPTS
        assert margins[tracks.MAX_ATTEMPTS :] and set(margins[tracks.MAX_ATTEMPTS :]) == {
            generator.RESCUE_MARGIN
        }
        assert st.name == f"gen-{seed}-20000m-d1.00"
        assert st.path.length_m > 20000.0
        again = tracks.generate(seed, length_m=20000.0, difficulty=1.0)
        assert np.array_equal(again.knots, st.knots)


def test_bad_arguments():
    for kw in (
        {"seed": -1},
        {"seed": 1.5},
        {"seed": True},
        {"seed": 1, "length_m": 10.0},
        {"seed": 1, "difficulty": 1.5},
        {"seed": 1, "laps": 0},
        {"seed": 1, "max_attempts": 0},
        {"seed": 1, "closed": True, "length_m": 300.0},
    ):
        with pytest.raises(ValueError):
            tracks.generate(**kw)


def test_generated_stage_bakes():
    st = tracks.generate(5)
    t = tracks.bake(st)
    assert t.heights_m.shape[0] > 100 and t.name == "gen-5"
