"""Stage files: round trip, validation errors that name file and field, no code execution."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import tracks
from tests.hostile import HOSTILE_PATHS, hostile_path, hostile_stage_texts
from tracks.errors import (
    CurvatureError,
    FieldTypeError,
    FieldValueError,
    MissingFieldError,
    SelfIntersectionError,
    StageError,
    StageFormatError,
    StageNotFoundError,
    UnknownFieldError,
    UnknownSurfaceError,
)

GOOD = """
format = 1
name = "tiny"
description = "a test stage"
closed = false
checkpoints_m = [100.0]
knots = [
  [0.0, 0.0, 0.0],
  [60.0, 0.0, 0.0],
  [120.0, 10.0, 1.0],
  [180.0, 30.0, 2.0],
  [240.0, 40.0, 2.0],
]

[terrain]
seed = 7

[start]
s_m = 10.0

[finish]
s_m = 230.0

[[sections]]
width_m = 8.0
surface = "gravel"

[[sections]]
s_m = 120.0
width_m = 9.0
surface = "sand"

[[features]]
kind = "crest"
s_m = 60.0
length_m = 30.0
height_m = 1.0

[[features]]
kind = "jump"
s_m = 150.0
ramp_m = 10.0
lip_m = 0.8
"""


def _write(tmp_path, text, name="stage.toml"):
    p = tmp_path / name
    p.write_text(text, encoding="utf-8")
    return p


def _assert_paths_equal(a: tracks.Stage, b: tracks.Stage) -> None:
    for f in ("s_m", "x_m", "y_m", "z_m", "tx", "ty", "curvature", "half_width_m", "surface"):
        np.testing.assert_array_equal(getattr(a.path, f), getattr(b.path, f), err_msg=f)


def test_good_file_loads(tmp_path):
    st_ = tracks.load_stage(_write(tmp_path, GOOD))
    assert st_.name == "tiny"
    assert st_.terrain.seed == 7
    assert st_.sections[0].s_m == 0.0 and st_.sections[1].surface == "sand"
    assert st_.features[1].kind == "jump" and st_.features[1].face_m == 2.0
    assert st_.timed_length_m == pytest.approx(220.0)
    assert st_.par_time_s is None
    x, y, h = st_.start_pose
    assert abs(y) < 0.5 and 9.0 < x < 11.0 and abs(h) < 0.1


@pytest.mark.parametrize("name", tracks.list_stages())
def test_library_round_trip(library, tmp_path, name):
    stage = library[name]
    text = tracks.dumps_stage(stage)
    again = tracks.loads_stage(text, "rt.toml")
    assert again == stage and again.digest() == stage.digest()
    assert again.to_dict() == stage.to_dict()
    _assert_paths_equal(stage, again)
    p = tracks.save_stage(stage, tmp_path / f"{name}.toml")
    assert tracks.load_stage(p) == stage
    assert tracks.dumps_stage(tracks.load_stage(p)) == text


def test_generated_round_trip(tmp_path):
    for seed in (3, 99):
        for closed in (False, True):
            g = tracks.generate(seed, closed=closed)
            p = tracks.save_stage(g, tmp_path / "g.toml")
            back = tracks.load_stage(p)
            assert back == g
            _assert_paths_equal(g, back)


@settings(max_examples=40, deadline=None)
@given(
    desc=st.text(max_size=60),
    par=st.one_of(st.none(), st.floats(0.1, 1e5, allow_nan=False)),
    cps=st.lists(st.floats(11.0, 229.0), max_size=4, unique=True),
)
def test_round_trip_property(desc, par, cps):
    """Any description text, par time and checkpoint list survives save/load bit-exactly."""
    base = tracks.loads_stage(GOOD)
    s = base.replace(description=desc, par_time_s=par, checkpoints_m=tuple(sorted(cps)))
    back = tracks.loads_stage(tracks.dumps_stage(s))
    assert back.description == desc
    assert back.par_time_s == par
    assert back.checkpoints_m == tuple(sorted(cps))
    assert back == s


def _mutate(old: str, new: str) -> str:
    assert old in GOOD, old
    return GOOD.replace(old, new, 1)


BAD = [
    # (description, text, exception, field named in the message)
    ("missing name", _mutate('name = "tiny"\n', ""), MissingFieldError, "name"),
    (
        "missing knots",
        GOOD.split("knots = [")[0] + "\n[terrain]" + GOOD.split("[terrain]")[1],
        MissingFieldError,
        "knots",
    ),
    ("missing width", _mutate("width_m = 9.0\n", ""), MissingFieldError, "sections[1].width_m"),
    ("missing finish", _mutate("[finish]\ns_m = 230.0\n", ""), MissingFieldError, "finish"),
    ("missing feature field", _mutate("lip_m = 0.8\n", ""), MissingFieldError, "features[1].lip_m"),
    (
        "width is a string",
        _mutate("width_m = 8.0", 'width_m = "8"'),
        FieldTypeError,
        "sections[0].width_m",
    ),
    ("seed is a float", _mutate("seed = 7", "seed = 7.5"), FieldTypeError, "terrain.seed"),
    ("closed is a number", _mutate("closed = false", "closed = 0"), FieldTypeError, "closed"),
    (
        "knot is a string",
        _mutate("[60.0, 0.0, 0.0]", '[60.0, "0.0", 0.0]'),
        FieldTypeError,
        "knots[1][1]",
    ),
    ("bool as a number", _mutate("s_m = 10.0", "s_m = true"), FieldTypeError, "start.s_m"),
    (
        "unknown surface",
        _mutate('surface = "sand"', 'surface = "tarmac"'),
        UnknownSurfaceError,
        "sections[1].surface",
    ),
    ("unknown field", _mutate("seed = 7", "seed = 7\nsede = 8"), UnknownFieldError, "terrain.sede"),
    (
        "unknown feature kind",
        _mutate('kind = "crest"', 'kind = "loop"'),
        FieldValueError,
        "features[0].kind",
    ),
    ("finish beyond the end", _mutate("s_m = 230.0", "s_m = 900.0"), FieldValueError, "finish.s_m"),
    (
        "laps on a point-to-point stage",
        _mutate("s_m = 230.0", "s_m = 230.0\nlaps = 2"),
        FieldValueError,
        "finish.laps",
    ),
    (
        "checkpoint after finish",
        _mutate("checkpoints_m = [100.0]", "checkpoints_m = [300.0]"),
        FieldValueError,
        "checkpoints_m[0]",
    ),
    (
        "knots too close",
        _mutate("[60.0, 0.0, 0.0]", "[0.5, 0.0, 0.0]"),
        FieldValueError,
        "knots[1]",
    ),
    (
        "hairpin too tight",
        _mutate("[120.0, 10.0, 1.0]", "[50.0, 12.0, 1.0]"),
        CurvatureError,
        "knots[",
    ),
    ("too steep", _mutate("[180.0, 30.0, 2.0]", "[180.0, 30.0, 40.0]"), FieldValueError, "knots["),
    (
        "width out of range",
        _mutate("width_m = 8.0", "width_m = 1.0"),
        FieldValueError,
        "sections[0].width_m",
    ),
    ("jump too big", _mutate("lip_m = 0.8", "lip_m = 4.0"), FieldValueError, "features[1].lip_m"),
    ("wrong format", _mutate("format = 1", "format = 2"), FieldValueError, "format"),
    ("not toml", GOOD + "\nthis is = = not toml\n", StageFormatError, "<toml>"),
]


@pytest.mark.parametrize(("what", "text", "exc", "fld"), BAD, ids=[b[0] for b in BAD])
def test_bad_files(tmp_path, what, text, exc, fld):
    p = _write(tmp_path, text)
    with pytest.raises(exc) as info:
        tracks.load_stage(p)
    err = info.value
    assert isinstance(err, StageError) and isinstance(err, ValueError)
    msg = str(err)
    assert str(p) in msg, msg  # names the file
    assert fld in msg, msg  # names the field
    assert err.field.startswith(fld.split("[")[0]) or fld in err.field
    assert len(err.problem) > 10  # says what is wrong


def _toml_with_knots(name: str, knots: np.ndarray, finish_m: float) -> str:
    rows = ",\n".join(f"  [{x!r}, {y!r}, {z!r}]" for x, y, z in knots.tolist())
    return (
        f'format = 1\nname = "{name}"\nknots = [\n{rows}\n]\n[finish]\ns_m = {finish_m}\n'
        '[[sections]]\nwidth_m = 8.0\nsurface = "gravel"\n'
    )


def _crossing() -> str:
    """East 200 m, a 270° left loop of radius 50 m, then south across the first straight."""
    b = tracks.PathBuilder().straight(200).turn(50, 270).straight(200)
    return _toml_with_knots("cross", b.knots(), 400.0)


def _near_miss() -> str:
    """Comes back parallel to its first straight, ~6 m from it: edges closer than 10 m."""
    b = tracks.PathBuilder().straight(200).turn(40, 180).straight(100).turn(30, 90)
    b.turn(27, 90).straight(150)
    return _toml_with_knots("near", b.knots(), 400.0)


def test_self_intersection(tmp_path):
    for text in (_crossing(), _near_miss()):
        p = _write(tmp_path, text)
        with pytest.raises(SelfIntersectionError) as info:
            tracks.load_stage(p)
        assert str(p) in str(info.value) and "knots" in str(info.value)
        assert "overlaps itself" in str(info.value)


def test_closed_loop_rules(tmp_path):
    loop = tracks.dumps_stage(tracks.load_stage("skidpad"))
    p = _write(tmp_path, loop.replace("laps = 3", "s_m = 10.0"))
    with pytest.raises(FieldValueError, match=r"finish\.s_m.*laps"):
        tracks.load_stage(p)
    p = _write(tmp_path, loop.replace("laps = 3", "laps = 0"))
    with pytest.raises(FieldValueError, match=r"finish\.laps"):
        tracks.load_stage(p)


def test_python_construction_errors_name_memory():
    with pytest.raises(UnknownSurfaceError, match=r"<memory>: sections\[0\]\.surface"):
        tracks.Stage(
            name="x",
            knots=[[0, 0, 0], [100, 0, 0]],
            sections=(tracks.Section(0.0, 8.0, "ice"),),
            finish=tracks.Finish(90.0),
        )
    with pytest.raises(FieldValueError, match="name"):
        tracks.Stage(
            name="Bad Name",
            knots=[[0, 0, 0], [100, 0, 0]],
            sections=(tracks.Section(0.0, 8.0, "gravel"),),
            finish=tracks.Finish(90.0),
        )


def test_nothing_half_loaded_and_no_code_runs(tmp_path):
    marker = tmp_path / "pwned"
    evil = _mutate(
        'description = "a test stage"',
        f"description = \"__import__('os').system('touch {marker}')\"",
    )
    p = _write(tmp_path, evil.replace('surface = "sand"', 'surface = "lava"'))
    with pytest.raises(UnknownSurfaceError):
        tracks.load_stage(p)
    p = _write(tmp_path, evil)
    st_ = tracks.load_stage(p)  # the same path now loads: nothing stale was cached
    assert st_.description.startswith("__import__")
    assert not marker.exists()


def test_names_and_not_found():
    names = tracks.list_stages()
    assert names == sorted(names)
    with pytest.raises(StageNotFoundError, match="opener"):
        tracks.load_stage("no-such-stage")
    with pytest.raises(StageNotFoundError):
        tracks.load_stage("/nonexistent/dir/x.toml")
    assert tracks.load_stage("gen-42") == tracks.generate(42)


def test_stage_is_immutable(library):
    st_ = library["opener"]
    with pytest.raises(AttributeError):
        st_.name = "x"
    with pytest.raises(ValueError):
        st_.knots[0, 0] = 1.0
    with pytest.raises(ValueError):
        st_.path.x_m[0] = 1.0
    assert math.isfinite(st_.replace(par_time_s=95.5).par_time_s)


# ------------------------------------------------------------------------------ hostile files
def test_hostile_stage_toml_is_a_stage_error_naming_the_file():
    from tracks.errors import StageError

    base = tracks.dumps_stage(tracks.load_stage("opener"))
    cases = hostile_stage_texts(base)
    for name, text in cases.items():
        with pytest.raises(StageError) as ei:
            tracks.loads_stage(text, "hostile.toml")
        assert "hostile.toml" in str(ei.value) and len(str(ei.value)) < 400, name


def test_a_stage_has_at_most_max_knots():
    from tracks.errors import StageError
    from tracks.io import stage_from_dict
    from tracks.stage import MAX_KNOTS

    doc = tracks.load_stage("proving-ground").to_dict()
    doc["knots"] = [[float(i), 0.0, 0.0] for i in range(MAX_KNOTS + 1)]
    with pytest.raises(StageError, match="limit"):
        stage_from_dict(doc, "big")


@pytest.mark.parametrize("kind", HOSTILE_PATHS)
def test_only_small_regular_stage_files_are_read(kind, tmp_path):
    from tracks.errors import StageError
    from tracks.io import MAX_FILE_BYTES

    p = hostile_path(kind, tmp_path, MAX_FILE_BYTES, "stage.toml")
    with pytest.raises(StageError, match=r"not a regular file|over the limit"):
        tracks.load_stage(p)
