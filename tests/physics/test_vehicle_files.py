"""Hostile vehicle files: every number checked, only regular files read, no crash."""

from __future__ import annotations

import tomllib
from importlib import resources

import pytest

from physics.vehicles import MAX_FILE_BYTES, VehicleDefError, load_vehicle, loads_vehicle
from physics.vehicles import vehicle_from_dict as from_doc
from tests.hostile import HOSTILE_PATHS, hostile_path, with_value

NAMES = ("rover", "rally-car", "truck", "tank", "bike")


def library_doc(name: str) -> dict:
    text = (resources.files("physics") / "vehicles" / f"{name}.toml").read_text()
    return tomllib.loads(text)


def numeric_paths(d, pre=()):
    """Paths of every number in a vehicle document (not ``format``)."""
    if isinstance(d, dict):
        for k, v in d.items():
            if k != "format":
                yield from numeric_paths(v, (*pre, k))
    elif isinstance(d, list):
        for i, v in enumerate(d):
            yield from numeric_paths(v, (*pre, i))
    elif isinstance(d, (int, float)) and not isinstance(d, bool):
        yield pre


@pytest.mark.parametrize("name", NAMES)
def test_a_400_digit_integer_in_any_field_is_a_definition_error(name):
    doc = library_doc(name)
    paths = list(numeric_paths(doc))
    assert len(paths) > 20
    for p in paths:
        with pytest.raises(VehicleDefError) as ei:
            from_doc(with_value(doc, p, 10**400), "v.toml")
        assert len(str(ei.value)) < 300 and "v.toml" in str(ei.value), p


@pytest.mark.parametrize(
    "path, value, word",
    [
        (("drivetrain", "final_drive"), 1e308, "final_drive"),
        (("drivetrain", "gears", 0), 1e6, "gears"),
        (("drivetrain", "rev_limit_rpm"), 1e9, "rev_limit_rpm"),
        (("drivetrain", "torque_curve", 1, 1), 1e12, "torque_curve"),
        (("wheels", 0, "spring_hz"), 1e-308, "spring_hz"),
        (("wheels", 0, "damping_ratio"), 1e-308, "damping_ratio"),
        (("vehicle", "inertia_yaw_kgm2"), 0.1, "inertia_yaw_kgm2"),
    ],
)
def test_values_that_made_a_vehicle_non_finite_are_refused(path, value, word):
    # final_drive 1e308 gave a NaN engine rpm from step 0, spring_hz 1e-308 a
    # ZeroDivisionError when the cars were placed, yaw inertia 0.1 a NaN state at step 15
    with pytest.raises(VehicleDefError, match=word):
        from_doc(with_value(library_doc("rally-car"), path, value), "v.toml")


def test_malformed_toml_names_the_file():
    deep = "x = " + "[" * 5000 + "]" * 5000 + "\n"
    with pytest.raises(VehicleDefError, match=r"v\.toml"):
        loads_vehicle(deep, "v.toml")
    with pytest.raises(VehicleDefError, match=r"v\.toml"):
        loads_vehicle("[vehicle]\nmass_kg = " + "9" * 5000 + "\n", "v.toml")


@pytest.mark.parametrize("kind", HOSTILE_PATHS)
def test_only_small_regular_files_are_read(kind, tmp_path):
    p = hostile_path(kind, tmp_path, MAX_FILE_BYTES, "car.toml")
    with pytest.raises(VehicleDefError, match=r"not a regular file|over the limit"):
        load_vehicle(p)
