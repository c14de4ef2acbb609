import numpy as np
import pytest

from physics import ParameterError, StepError, VehicleBatch, substeps_for


def test_commands_are_clamped(rover_on):
    sim = rover_on(1)
    sim.set_commands(np.array([3.0, -1.0, 2.0, 0.5]))
    np.testing.assert_array_equal(sim.commands[0], [1.0, 0.0, 1.0, 0.5])


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_non_finite_command_is_refused_counted_and_changes_nothing(rover_on, bad):
    ref = rover_on(1)
    sim = rover_on(1)
    for s in (ref, sim):
        s.set_commands(np.array([0.3, 0.8, 0.0, 0.0]))
        s.step(48)
    refused = sim.set_commands(np.array([0.1, bad, 0.0, 0.0]))
    assert refused == 1 and sim.misuse_count[0] == 1
    np.testing.assert_array_equal(sim.commands[0], [0.3, 0.8, 0.0, 0.0])
    ref.step(48)
    sim.step(48)
    assert sim.state_hash() != ref.state_hash()  # the misuse counter is part of the state
    np.testing.assert_array_equal(sim.state, ref.state)


def test_refusal_is_per_car(rover_on):
    sim = rover_on(2)
    sim.set_commands(np.array([[0.0, 1.0, 0.0, 0.0], [np.nan, 1.0, 0.0, 0.0]]))
    assert sim.commands[0, 1] == 1.0 and sim.commands[1, 1] == 0.0
    np.testing.assert_array_equal(sim.misuse_count, [0, 1])


@pytest.mark.parametrize("bad", [np.nan, np.inf])
def test_strict_commands_refuse_the_whole_call_and_change_nothing(rover_on, bad):
    sim = rover_on(3)
    sim.set_commands(np.tile([0.3, 0.8, 0.0, 0.0], (3, 1)))
    h = sim.state_hash()
    cmd = np.tile([0.5, 1.0, 0.0, 0.0], (3, 1))
    cmd[2, 3] = bad
    with pytest.raises(ParameterError, match=r"commands\[2\].*car 2.*must be finite"):
        sim.set_commands(cmd, strict=True)
    with pytest.raises(ParameterError, match=r"commands\[1\].*car 2.*must be finite"):
        sim.set_commands(cmd[1:], cars=np.array([0, 2]), strict=True)
    assert sim.state_hash() == h  # no command written, no misuse counted
    assert sim.set_commands(np.tile([3.0, 0.5, 0.0, 0.0], (3, 1)), strict=True) == 0
    np.testing.assert_array_equal(sim.commands[:, 0], [1.0, 1.0, 1.0])


def test_command_shape_errors(rover_on):
    sim = rover_on(2)
    with pytest.raises(ParameterError, match="shape"):
        sim.set_commands(np.zeros(3))


@pytest.mark.parametrize(("hz", "n"), [(60, 8), (20, 24), (10, 48), (480, 1), (30, 16)])
def test_substeps_for_divisors(hz, n):
    assert substeps_for(hz) == n


@pytest.mark.parametrize("hz", [7, 25, 0, -10, 1000, float("nan"), True, "20"])
def test_substeps_for_rejects_non_integer_ratios(hz):
    with pytest.raises(StepError):
        substeps_for(hz)


def test_step_argument_errors(rover_on):
    sim = rover_on(1)
    h = sim.state_hash()
    for bad in (-1, 2.5, True):
        with pytest.raises(StepError):
            sim.step(bad)
    with pytest.raises(StepError):
        sim.step_seconds(1.0 / 1000.0)
    assert sim.state_hash() == h


def test_reset_argument_errors(rover_on):
    sim = rover_on(2)
    h = sim.state_hash()
    with pytest.raises(ParameterError, match="poses"):
        sim.reset(np.zeros((3, 4)))
    with pytest.raises(ParameterError, match="finite"):
        sim.reset(np.full((2, 4), np.nan))
    with pytest.raises(ParameterError, match="terrain_ids"):
        sim.reset(np.zeros((2, 4)), terrain_ids=5)
    with pytest.raises(ParameterError, match="cars"):
        sim.reset(np.zeros((1, 4)), cars=np.array([7]))
    assert sim.state_hash() == h


def test_batch_size_validation():
    with pytest.raises(ParameterError, match="n_cars"):
        VehicleBatch(0)
