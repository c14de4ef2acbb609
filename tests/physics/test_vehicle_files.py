"""Hostile vehicle files: every number checked, only regular files read, no crash."""

from __future__ import annotations

import pytest

from physics.vehicles import MAX_FILE_BYTES, VehicleDefError, load_vehicle, loads_vehicle
from physics.vehicles import vehicle_from_dict as from_doc
from tests.hostile import (
    HOSTILE_PATHS,
    NON_FINITE_VEHICLE_EDITS,
    hostile_path,
    numeric_paths,
    with_value,
)
from tests.hostile import vehicle_doc as library_doc

NAMES = ("rover", "rally-car", "truck", "tank", "bike")


@pytest.mark.parametrize("name", NAMES)
def test_a_400_digit_integer_in_any_field_is_a_definition_error(name):
    doc = library_doc(name)
    paths = list(numeric_paths(doc))
    assert len(paths) > 20
    for p in paths:
        with pytest.raises(VehicleDefError) as ei:
            from_doc(with_value(doc, p, 10**400), "v.toml")
        assert len(str(ei.value)) < 300 and "v.toml" in str(ei.value), p


@pytest.mark.parametrize("path, value, word", NON_FINITE_VEHICLE_EDITS)
def test_values_that_made_a_vehicle_non_finite_are_refused(path, value, word):
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


def test_friction_clamps_is_a_bool_in_a_vehicle_file():
    doc = library_doc("rally-car")
    doc["vehicle"]["friction_clamps"] = False
    assert from_doc(doc, "v.toml").friction_clamps is False
    doc["vehicle"]["friction_clamps"] = 1.0
    with pytest.raises(VehicleDefError, match="friction_clamps"):
        from_doc(doc, "v.toml")
