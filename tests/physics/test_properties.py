"""Property tests: the tire curve, and long random command sequences staying finite."""

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from physics import ROVER, VehicleBatch
from physics.kernel import lateral_curve

finite = st.floats(allow_nan=False, allow_infinity=False)
peaks = st.floats(min_value=0.01, max_value=1.0)
clamps = st.floats(min_value=1.0, max_value=10.0)


@given(finite, peaks, clamps)
@settings(max_examples=500)
def test_lateral_curve_is_odd_bounded_and_finite(alpha, peak, clamp):
    f = lateral_curve(alpha, peak, clamp)
    assert np.isfinite(f)
    assert -1.0 <= f <= 1.0
    assert lateral_curve(-alpha, peak, clamp) == -f
    floor = 2 * clamp / (1 + clamp * clamp)
    if abs(alpha) >= peak:
        assert abs(f) >= floor - 1e-12


@given(st.floats(min_value=0.0, max_value=10.0), peaks)
def test_lateral_curve_rises_to_the_peak(a, peak):
    a1 = min(a, 1.0) * peak
    a2 = min(a1 * 1.1, peak)
    assert lateral_curve(a2, peak, 1.5) >= lateral_curve(a1, peak, 1.5)


def test_10000_random_command_sequences_stay_finite(crest):
    n = 10_000
    rng = np.random.default_rng(2024)
    sim = VehicleBatch(n, ROVER, [crest], parallel=True)
    sim.reset(
        np.column_stack(
            [
                rng.uniform(-80, 1000, n),
                rng.uniform(-90, 90, n),
                rng.uniform(-3.2, 3.2, n),
                rng.uniform(0, 40, n),
            ]
        )
    )
    for _ in range(40):  # 2 s at 20 Hz, new random commands every step, extremes included
        c = rng.uniform(-1.5, 1.5, size=(n, 4))
        c[rng.random(n) < 0.2] = rng.choice([-1.0, 0.0, 1.0], size=4)
        sim.set_commands(c)
        sim.step(24)
    assert np.all(np.isfinite(sim.state))
    assert np.all(sim.friction_usage <= 1.0 + 1e-12)
