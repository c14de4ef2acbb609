"""The stage data model: a frozen, validated :class:`Stage` and its resampled :class:`StagePath`.

All distances in a stage are arc length ``s`` (m) along the centerline from its first knot.
docs/stages.md describes every field, the rules checked and the derived path.
"""

from __future__ import annotations

import dataclasses
import hashlib
import itertools
import math
import re
import threading
from dataclasses import asdict, dataclass, field
from typing import Any, ClassVar

import numpy as np

from physics.errors import as_finite, short_repr
from physics.jit import njit, njit_inner
from physics.mathx import atan2x
from tracks import surfaces as _surf
from tracks._geometry import first_overlap, fit_and_resample
from tracks.errors import (
    CurvatureError,
    FieldTypeError,
    FieldValueError,
    GeometryError,
    SelfIntersectionError,
    UnknownSurfaceError,
)

#: Stage file format version written by :func:`tracks.save_stage`.
FORMAT_VERSION = 1
#: Resampled centerline spacing (m).
SAMPLE_DS_M = 1.0
#: Tightest centerline radius any stage may have (m). The rover turns in ~5 m; 12 m hairpins.
MIN_RADIUS_M = 12.0
#: The centerline radius must also exceed the half width by this much (m), so the inner edge of
#: a corner never folds and the terrain blend beside it stays continuous.
RADIUS_WIDTH_MARGIN_M = 6.0
#: Required gap between the road edges of two different parts of a stage (m).
CLEARANCE_M = 10.0
#: Steepest grade of the knot elevation profile (rise over run; features excluded).
MAX_GRADE = 0.25
#: Knots closer than this are rejected (m).
MIN_KNOT_SPACING_M = 1.0
#: Shortest allowed path (m).
MIN_LENGTH_M = 50.0
#: Road width range (m).
MIN_WIDTH_M = 3.0
MAX_WIDTH_M = 40.0
#: Most centerline knots a stage may have (the library's longest has 378).
MAX_KNOTS = 100_000
#: Width changes between sections are blended over this length, centred on the boundary (m).
WIDTH_BLEND_M = 10.0
#: Shortest section (m).
MIN_SECTION_M = 20.0
#: Shortest timed distance of a point-to-point stage (m).
MIN_TIMED_M = 10.0

FEATURE_KINDS = ("crest", "jump", "compression")
FEATURE_CREST = 0
FEATURE_JUMP = 1

_NAME_RE = re.compile(r"^[a-z0-9][a-z0-9_.-]{0,63}$")


_LAST_FIT = threading.local()


def fit_centerline(knots: np.ndarray, closed: bool) -> tuple[np.ndarray, float]:
    """The centerline spline through ``knots`` (float64, shape (n, 3)) resampled every
    :data:`SAMPLE_DS_M`: ``fit_and_resample``'s ``(out, length)``, ``out`` read-only. Each
    thread remembers its last fit, so checking a layout before building its :class:`Stage`
    does not pay for the fit twice.
    """
    knots = np.ascontiguousarray(knots, np.float64)
    key = (bool(closed), knots.shape, knots.tobytes())
    last = getattr(_LAST_FIT, "last", None)
    if last is not None and last[0] == key:
        return last[1]
    out, length, _ = fit_and_resample(knots, closed, SAMPLE_DS_M)
    out.setflags(write=False)
    got = (out, float(length))
    _LAST_FIT.last = (key, got)
    return got


# ----------------------------------------------------- value checks that name the source and field


def _num(v: Any, src: str, fld: str) -> float:
    if isinstance(v, bool) or not isinstance(v, (int, float, np.integer, np.floating)):
        raise FieldTypeError(src, fld, f"expected a number, got {type(v).__name__} {short_repr(v)}")
    f = as_finite(v)
    if f is None:
        raise FieldValueError(src, fld, f"must be finite, got {short_repr(v)}")
    return f


#: Per field type: the types a field of it accepts (a bool is no integer) and their name (dict
#: and list: a stage file's tables and arrays).
_KINDS = {
    int: ((int, np.integer), "an integer"),
    str: ((str,), "a string"),
    bool: ((bool, np.bool_), "true or false"),
    dict: ((dict,), "a table"),
    list: ((list,), "an array"),
}


def _of(kind: type, v: Any, src: str, fld: str) -> Any:
    """``v`` as a ``kind`` (a key of ``_KINDS``) if it is one (int and bool converted, others
    returned as they are)."""
    types, what = _KINDS[kind]
    if (isinstance(v, bool) and kind is not bool) or not isinstance(v, types):
        raise FieldTypeError(src, fld, f"expected {what}, got {type(v).__name__} {v!r}")
    return kind(v) if kind in (int, bool) else v


def _array(v: Any, src: str, fld: str, what: str, item: type = str) -> Any:
    """``v`` if it is an array: an iterable that is neither a string nor one ``item``."""
    if isinstance(v, (str, bytes, item)) or not hasattr(v, "__iter__"):
        raise FieldTypeError(src, fld, f"expected an array of {what}")
    return v


def _range(v: float, lo: float, hi: float, src: str, fld: str, unit: str = "") -> float:
    if not lo <= v <= hi:
        raise FieldValueError(src, fld, f"{v!r}{unit} is outside [{lo}, {hi}]{unit}")
    return v


def _metres(v: Any, lo: float, hi: float, src: str, fld: str) -> float:
    """A number (:func:`_num`) in [lo, hi] m."""
    return _range(_num(v, src, fld), lo, hi, src, fld, " m")


def _surface(v: Any, src: str, fld: str) -> str:
    name = _of(str, v, src, fld)
    try:
        _surf.by_name(name)
    except KeyError:
        raise UnknownSurfaceError(
            src, fld, f"unknown surface {name!r}; known: {', '.join(_surf.surface_names())}"
        ) from None
    return name


# ------------------------------------------------------------------------------------------ parts


@dataclass(frozen=True, slots=True)
class Section:
    """A stretch of road from ``s_m`` (m; the first at 0) to the next section: ``width_m``
    (m, edge to edge) and ``surface`` (a :mod:`tracks.surfaces` name); docs/stages.md,
    ``[[sections]]``."""

    s_m: float
    width_m: float
    surface: str

    to_dict = asdict  # the file table: every field


@dataclass(frozen=True, slots=True)
class Feature:
    """An elevation feature added to the road's profile.

    Attributes:
        kind: ``"crest"`` (smooth hump), ``"jump"`` (kicker ramp, lip, steep face back down to
            the landing) or ``"compression"`` (smooth dip).
        s_m: crest/compression centre, or the jump's lip, as arc length (m).
        length_m: crest/compression total length, or the jump's ramp length before the lip (m).
        height_m: crest height, compression depth or jump lip height, all positive (m).
        face_m: jump only: length of the drop from the lip back to the road (m).
    """

    kind: str
    s_m: float
    length_m: float
    height_m: float
    face_m: float = 2.0
    #: The stage file's keys of each kind's ``length_m`` and ``height_m``.
    FILE_KEYS: ClassVar[dict[str, tuple[str, str]]] = {
        "crest": ("length_m", "height_m"),
        "compression": ("length_m", "depth_m"),
        "jump": ("ramp_m", "lip_m"),
    }

    @property
    def extent_m(self) -> tuple[float, float]:
        """(start, end) arc length the feature occupies."""
        if self.kind == "jump":
            return (self.s_m - self.length_m, self.s_m + self.face_m)
        return (self.s_m - 0.5 * self.length_m, self.s_m + 0.5 * self.length_m)

    def to_dict(self) -> dict[str, Any]:
        ln, h = self.FILE_KEYS[self.kind]
        d = {"kind": self.kind, "s_m": self.s_m, ln: self.length_m, h: self.height_m}
        if self.kind == "jump":
            d["face_m"] = self.face_m
        return d


@dataclass(frozen=True, slots=True)
class Start:
    """The start line at ``s_m`` (m) and the car's offset from the centerline there,
    ``lateral_m`` (m, positive left)."""

    s_m: float = 0.0
    lateral_m: float = 0.0

    to_dict = asdict  # the file table: every field


@dataclass(frozen=True, slots=True)
class Finish:
    """The finish: a line at ``s_m`` (point to point) or the start line after ``laps`` laps.

    Exactly one of the two is set: ``s_m`` for point-to-point stages, ``laps`` for closed loops.
    """

    s_m: float | None = None
    laps: int | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"s_m": self.s_m} if self.laps is None else {"laps": self.laps}


@dataclass(frozen=True, slots=True)
class TerrainSpec:
    """How the ground around the road is baked (:func:`tracks.bake`): noise ``seed``, ground
    undulation and roughness amplitudes, berm height and width and the blend beyond it (m), and
    the surface of everything that is not road; docs/stages.md, ``[terrain]``, has each rule.
    """

    seed: int = 42
    amplitude_m: float = 2.0
    roughness_m: float = 0.15
    berm_height_m: float = 0.3
    berm_width_m: float = 2.0
    blend_m: float = 3.0
    offroad_surface: str = "offroad"

    to_dict = asdict  # the file table: every field


@dataclass(frozen=True, eq=False)
class StagePath:
    """The centerline resampled at uniform arc length (computed once when a stage is built):
    read-only (m,) sample arrays, sample ``i`` at ``s_m[i] = i * ds_m``; a closed loop's last
    sample repeats its first, so segment ``i`` runs from sample ``i`` to ``i + 1``. Every
    attribute is in docs/stages.md, "The derived path" (``feature_kind``: 0 crest, 1 jump,
    2 compression).
    """

    s_m: np.ndarray
    x_m: np.ndarray
    y_m: np.ndarray
    z_m: np.ndarray
    z_base_m: np.ndarray
    tx: np.ndarray
    ty: np.ndarray
    curvature: np.ndarray
    grade: np.ndarray
    half_width_m: np.ndarray
    surface: np.ndarray
    section_start_m: np.ndarray
    section_surface: np.ndarray
    feature_kind: np.ndarray
    feature_params: np.ndarray
    length_m: float
    ds_m: float
    closed: bool

    @property
    def n_samples(self) -> int:
        return int(self.s_m.shape[0])

    def wrap(self, s: np.ndarray | float) -> np.ndarray:
        """Map arc lengths into [0, length) for loops (unchanged for open paths)."""
        s = np.asarray(s, np.float64)
        if not self.closed:
            return s
        return s - self.length_m * np.floor(s / self.length_m)

    def _interp(self, arr: np.ndarray, s: np.ndarray | float) -> np.ndarray:
        s = np.clip(self.wrap(s), 0.0, self.length_m)
        f = s / self.ds_m
        i = np.minimum(np.floor(f).astype(np.int64), self.n_samples - 2)
        t = f - i
        return arr[i] + (arr[i + 1] - arr[i]) * t

    def point_at(self, s: np.ndarray | float) -> tuple[np.ndarray, np.ndarray]:
        """(x, y) on the centerline polyline at arc length(s) ``s`` (clamped for open paths)."""
        return self._interp(self.x_m, s), self._interp(self.y_m, s)

    def z_at(self, s: np.ndarray | float) -> np.ndarray:
        """Road elevation at ``s`` (linear between samples)."""
        return self._interp(self.z_m, s)

    def half_width_at(self, s: np.ndarray | float) -> np.ndarray:
        """Half width at ``s`` (m)."""
        return self._interp(self.half_width_m, s)

    def curvature_at(self, s: np.ndarray | float) -> np.ndarray:
        """Signed curvature at ``s`` (1/m)."""
        return self._interp(self.curvature, s)

    def tangent_at(self, s: np.ndarray | float) -> tuple[np.ndarray, np.ndarray]:
        """Unit tangent at ``s`` (interpolated between samples and renormalised)."""
        tx = self._interp(self.tx, s)
        ty = self._interp(self.ty, s)
        n = np.sqrt(tx * tx + ty * ty)
        return tx / n, ty / n

    def surface_at(self, s: np.ndarray | float) -> np.ndarray:
        """Surface id of the section containing ``s``."""
        s = np.clip(self.wrap(s), 0.0, self.length_m)
        k = np.searchsorted(self.section_start_m, s, side="right") - 1
        return self.section_surface[np.maximum(k, 0)]


@njit_inner
def feature_z(kind, params, s):
    """Elevation offset (m) the features (``StagePath.feature_kind``, ``feature_params``) add
    at arc length ``s``: the stage's profile and the terrain bake's road height. The shapes
    (polynomials only) are in docs/stages.md, ``[[features]]``.
    """
    out = 0.0
    for k in range(kind.shape[0]):
        sc = params[k, 0]
        ln = params[k, 1]
        h = params[k, 2]
        face = params[k, 3]
        if kind[k] == FEATURE_JUMP:
            u = (s - (sc - ln)) / ln
            ramp = h * u * u if (u >= 0.0 and u <= 1.0) else 0.0
            v = (s - sc) / face
            vc = min(max(v, 0.0), 1.0)
            drop = h * (1.0 - vc * vc * (3.0 - 2.0 * vc)) if (v > 0.0 and v < 1.0) else 0.0
            out = out + ramp + drop
        else:
            u = (s - sc) / (0.5 * ln)
            w = 1.0 - u * u if abs(u) < 1.0 else 0.0
            sign = 1.0 if kind[k] == FEATURE_CREST else -1.0
            out = out + sign * h * w * w
    return out


@njit(cache=True)
def _feature_profile(kind, params, s, out):
    """:func:`feature_z` at every arc length of ``s`` into ``out``."""
    for i in range(s.shape[0]):
        out[i] = feature_z(kind, params, s[i])


# -------------------------------------------------------------------------------------- the stage


@dataclass(frozen=True, eq=False)
class Stage:
    """A rally stage. Immutable; validated on construction.

    The fields are the stage file's (docs/stages.md, "The stage file"): ``knots`` (n, 3) x, y, z
    in m (a loop does not repeat its first), ``par_time_s`` ``None`` when not set yet, and
    ``source`` the file it came from (used in messages only, not part of the content).
    Derived once: ``path`` (:class:`StagePath`) and ``start_pose`` ``(x, y, heading_rad)``.

    Raises:
        StageError: (a subclass of) if anything is invalid; the message names source and field.
    """

    name: str
    knots: np.ndarray
    sections: tuple[Section, ...]
    finish: Finish
    description: str = ""
    closed: bool = False
    start: Start = field(default_factory=Start)
    features: tuple[Feature, ...] = ()
    checkpoints_m: tuple[float, ...] = ()
    terrain: TerrainSpec = field(default_factory=TerrainSpec)
    par_time_s: float | None = None
    source: str = "<memory>"

    path: StagePath = field(init=False, repr=False)
    start_pose: tuple[float, float, float] = field(init=False, repr=False)
    _digest: str = field(init=False, default="", repr=False)

    # -- validation ------------------------------------------------------------------------

    def __post_init__(self) -> None:
        src = _of(str, self.source, "<memory>", "source")
        s = object.__setattr__
        name = _of(str, self.name, src, "name")
        if not _NAME_RE.match(name):
            raise FieldValueError(
                src,
                "name",
                f"{name!r} must be 1-64 chars of lowercase "
                "letters, digits, '-', '_' or '.', starting with a letter/digit",
            )
        _of(str, self.description, src, "description")
        closed = _of(bool, self.closed, src, "closed")
        s(self, "closed", closed)
        s(self, "knots", self._check_knots(src, closed))
        s(self, "sections", self._check_sections(src))
        s(self, "terrain", self._check_terrain(src))
        s(self, "features", self._check_features_types(src))
        if not isinstance(self.start, Start):
            raise FieldTypeError(src, "start", f"expected a Start, got {type(self.start)!r}")
        if not isinstance(self.finish, Finish):
            raise FieldTypeError(src, "finish", f"expected a Finish, got {type(self.finish)!r}")
        cps = enumerate(_array(self.checkpoints_m, src, "checkpoints_m", "numbers"))
        s(self, "checkpoints_m", tuple(_num(c, src, f"checkpoints_m[{i}]") for i, c in cps))
        if self.par_time_s is not None:
            p = _num(self.par_time_s, src, "par_time_s")
            if p <= 0.0:
                raise FieldValueError(src, "par_time_s", f"must be > 0 s, got {p!r}")
            s(self, "par_time_s", p)

        path = self._build_path(src)
        s(self, "path", path)
        self._check_features_on_path(src, path)
        self._check_timing(src, path)
        x, y = path.point_at(self.start.s_m)
        tx, ty = path.tangent_at(self.start.s_m)
        x = float(x) - float(ty) * self.start.lateral_m
        y = float(y) + float(tx) * self.start.lateral_m
        s(self, "start_pose", (x, y, float(atan2x(float(ty), float(tx)))))

    def _check_knots(self, src: str, closed: bool) -> np.ndarray:
        k = self.knots
        if isinstance(k, np.ndarray):
            if k.dtype == np.bool_ or not (
                np.issubdtype(k.dtype, np.floating) or np.issubdtype(k.dtype, np.integer)
            ):
                raise FieldTypeError(src, "knots", f"expected numbers, got dtype {k.dtype}")
            arr = np.array(k, dtype=np.float64)
            if arr.ndim != 2 or arr.shape[1] != 3:
                raise FieldValueError(src, "knots", f"expected shape (n, 3), got {arr.shape}")
        else:
            rows = []
            for i, row in enumerate(_array(k, src, "knots", "[x, y, z] arrays")):
                if isinstance(row, (str, bytes)) or not hasattr(row, "__len__"):
                    raise FieldTypeError(
                        src, f"knots[{i}]", f"expected [x, y, z], got {type(row).__name__} {row!r}"
                    )
                if len(row) != 3:
                    raise FieldValueError(
                        src, f"knots[{i}]", f"expected 3 numbers [x, y, z], got {len(row)}"
                    )
                rows.append([_num(v, src, f"knots[{i}][{j}]") for j, v in enumerate(row)])
            arr = np.array(rows, dtype=np.float64).reshape(-1, 3)
        if not np.all(np.isfinite(arr)):
            i = int(np.argwhere(~np.isfinite(arr))[0, 0])
            raise FieldValueError(src, f"knots[{i}]", "contains a non-finite value")
        need = 3 if closed else 2
        if arr.shape[0] > MAX_KNOTS:
            raise FieldValueError(
                src, "knots", f"{arr.shape[0]} knots, more than the limit of {MAX_KNOTS}"
            )
        if arr.shape[0] < need:
            raise FieldValueError(
                src,
                "knots",
                f"a {'closed' if closed else 'point-to-point'} "
                f"stage needs at least {need} knots, got {arr.shape[0]}",
            )
        if np.any(np.abs(arr) > 1.0e6):
            raise FieldValueError(src, "knots", "coordinates must be within ±1e6 m")
        d = np.diff(arr[:, :2], axis=0)
        chord = np.sqrt(d[:, 0] * d[:, 0] + d[:, 1] * d[:, 1])
        bad = np.flatnonzero(chord < MIN_KNOT_SPACING_M)
        if bad.size:
            i = int(bad[0]) + 1
            raise FieldValueError(
                src,
                f"knots[{i}]",
                f"is {chord[i - 1]:.3f} m from knots[{i - 1}]"
                f"; knots must be at least {MIN_KNOT_SPACING_M} m apart",
            )
        if closed:
            dx, dy = arr[0, :2] - arr[-1, :2]
            if math.sqrt(dx * dx + dy * dy) < MIN_KNOT_SPACING_M:
                raise FieldValueError(
                    src,
                    f"knots[{arr.shape[0] - 1}]",
                    "a closed loop must not repeat its first knot at the end "
                    f"(or put knots closer than {MIN_KNOT_SPACING_M} m)",
                )
        arr.setflags(write=False)
        return arr

    def _check_sections(self, src: str) -> tuple[Section, ...]:
        secs = tuple(_array(self.sections, src, "sections", "sections", Section))
        if not secs:
            raise FieldValueError(src, "sections", "at least one section is required")
        out = []
        prev = -math.inf
        for i, sec in enumerate(secs):
            f = f"sections[{i}]"
            if not isinstance(sec, Section):
                raise FieldTypeError(src, f, f"expected a Section, got {type(sec).__name__}")
            s0 = _num(sec.s_m, src, f + ".s_m")
            w = _metres(sec.width_m, MIN_WIDTH_M, MAX_WIDTH_M, src, f + ".width_m")
            surf = _surface(sec.surface, src, f + ".surface")
            if i == 0 and s0 != 0.0:
                raise FieldValueError(
                    src, f + ".s_m", f"the first section must start at 0, got {s0!r}"
                )
            if i > 0 and s0 < prev + MIN_SECTION_M:
                raise FieldValueError(
                    src,
                    f + ".s_m",
                    f"{s0!r} must be at least "
                    f"{MIN_SECTION_M} m after the previous section ({prev!r})",
                )
            prev = s0
            out.append(Section(s0, w, surf))
        return tuple(out)

    def _check_terrain(self, src: str) -> TerrainSpec:
        t = self.terrain
        if not isinstance(t, TerrainSpec):
            raise FieldTypeError(src, "terrain", f"expected a TerrainSpec, got {type(t)!r}")
        seed = _of(int, t.seed, src, "terrain.seed")
        if not 0 <= seed < 2**32:
            raise FieldValueError(src, "terrain.seed", f"{seed} must be in [0, 2**32)")
        vals = {}
        for name, hi in (
            ("amplitude_m", 50.0),
            ("roughness_m", 2.0),
            ("berm_height_m", 2.0),
            ("berm_width_m", 5.0),
            ("blend_m", 5.0),
        ):
            vals[name] = _metres(getattr(t, name), 0.0, hi, src, f"terrain.{name}")
        if vals["berm_width_m"] + vals["blend_m"] > 0.5 * CLEARANCE_M:
            raise FieldValueError(
                src,
                "terrain.blend_m",
                f"berm_width_m + blend_m = "
                f"{vals['berm_width_m'] + vals['blend_m']} m must not exceed "
                f"{0.5 * CLEARANCE_M} m (half the road clearance)",
            )
        if vals["berm_width_m"] <= 0.0 or vals["blend_m"] <= 0.0:
            raise FieldValueError(
                src, "terrain.berm_width_m", "berm_width_m and blend_m must be > 0"
            )
        off = _surface(t.offroad_surface, src, "terrain.offroad_surface")
        return TerrainSpec(seed, offroad_surface=off, **vals)

    def _check_features_types(self, src: str) -> tuple[Feature, ...]:
        out = []
        for i, ft in enumerate(_array(self.features, src, "features", "features", Feature)):
            f = f"features[{i}]"
            if not isinstance(ft, Feature):
                raise FieldTypeError(src, f, f"expected a Feature, got {type(ft).__name__}")
            kind = _of(str, ft.kind, src, f + ".kind")
            if kind not in FEATURE_KINDS:
                raise FieldValueError(
                    src,
                    f + ".kind",
                    f"unknown feature kind {kind!r}; known: {', '.join(FEATURE_KINDS)}",
                )
            sc = _num(ft.s_m, src, f + ".s_m")
            if kind == "jump":
                lip = _metres(ft.height_m, 0.05, 3.0, src, f + ".lip_m")
                ramp = _metres(ft.length_m, max(4.0, 4.0 * lip), 60.0, src, f + ".ramp_m")
                face = _metres(ft.face_m, 0.5, 10.0, src, f + ".face_m")
                out.append(Feature(kind, sc, ramp, lip, face))
            else:
                hname = Feature.FILE_KEYS[kind][1]
                ln = _metres(ft.length_m, 10.0, 400.0, src, f + ".length_m")
                h = _metres(ft.height_m, 0.05, ln / 6.0, src, f + "." + hname)
                if ft.face_m != 2.0:
                    raise FieldValueError(src, f + ".face_m", "only jumps have a face")
                out.append(Feature(kind, sc, ln, h))
        return tuple(out)

    # -- derived path ----------------------------------------------------------------------

    def _knot_near(self, x: float, y: float) -> str:
        """The field of the knot closest to (x, y), ``"knots[i]"``."""
        d = (self.knots[:, 0] - x) ** 2 + (self.knots[:, 1] - y) ** 2
        return f"knots[{int(np.argmin(d))}]"

    def _build_path(self, src: str) -> StagePath:
        out, length = fit_centerline(self.knots, self.closed)
        if length < MIN_LENGTH_M:
            raise GeometryError(
                src,
                "knots",
                f"the centerline is {length:.1f} m long; the minimum is {MIN_LENGTH_M} m",
            )
        n = out.shape[0]
        ds = length / (n - 1)
        s_arr = np.arange(n, dtype=np.float64) * ds
        s_arr[-1] = length
        # sections: width (blended) and surface per sample
        starts = np.array([sec.s_m for sec in self.sections], np.float64)
        widths = np.array([sec.width_m for sec in self.sections], np.float64)
        sids = np.array([_surf.surface_id(sec.surface) for sec in self.sections], np.int8)
        last = float(starts[-1])
        if last > length - MIN_SECTION_M:
            i = len(self.sections) - 1
            raise FieldValueError(
                src,
                f"sections[{i}].s_m",
                f"{last!r} leaves less than "
                f"{MIN_SECTION_M} m before the end of the {length:.1f} m path",
            )
        k = np.searchsorted(starts, s_arr, side="right") - 1
        width = widths[k]
        half = 0.5 * WIDTH_BLEND_M

        def blend(m: np.ndarray, lo: float, w0: float, w1: float) -> None:
            # a smoothstep from w0 to w1 across the samples m, which start at arc length lo
            u = np.clip((s_arr[m] - lo) / WIDTH_BLEND_M, 0.0, 1.0)
            width[m] = w0 + (w1 - w0) * (u * u * (3.0 - 2.0 * u))

        for b in range(1, len(starts)):
            blend(np.abs(s_arr - starts[b]) < half, starts[b] - half, widths[b - 1], widths[b])
        if self.closed and widths[-1] != widths[0]:  # the change across the closure
            blend(s_arr < half, -half, widths[-1], widths[0])
            blend(s_arr > length - half, length - half, widths[-1], widths[0])
        hw = 0.5 * width
        surface = sids[k]
        if self.closed:
            hw[-1] = hw[0]
            surface[-1] = surface[0]

        x, y, zb = out[:, 0].copy(), out[:, 1].copy(), out[:, 2].copy()
        kappa = out[:, 5].copy()
        grade = out[:, 7].copy()
        # curvature rules
        ak = np.abs(kappa)
        i = int(np.argmax(ak))
        if not math.isfinite(ak[i]) or ak[i] > 1.0 / MIN_RADIUS_M:
            r = 1.0 / ak[i] if ak[i] > 0 else math.inf
            raise CurvatureError(
                src,
                self._knot_near(x[i], y[i]),
                f"the centerline radius is {r:.1f} m at "
                f"s = {s_arr[i]:.0f} m, below the {MIN_RADIUS_M} m minimum "
                "(spread the knots or soften the corner)",
            )
        need = hw + RADIUS_WIDTH_MARGIN_M
        bad = np.flatnonzero(ak * need > 1.0)
        if bad.size:
            i = int(bad[0])
            raise CurvatureError(
                src,
                self._knot_near(x[i], y[i]),
                f"the centerline radius {1 / ak[i]:.1f} m "
                f"at s = {s_arr[i]:.0f} m is too tight for a {2 * hw[i]:.1f} m "
                f"wide road (needs >= half width + {RADIUS_WIDTH_MARGIN_M} m "
                f"= {need[i]:.1f} m)",
            )
        ag = np.abs(grade)
        i = int(np.argmax(ag))
        if ag[i] > MAX_GRADE:
            raise GeometryError(
                src,
                self._knot_near(x[i], y[i]),
                f"the grade is {100 * grade[i]:.1f}% at "
                f"s = {s_arr[i]:.0f} m; the limit is {100 * MAX_GRADE:.0f}%",
            )
        i, j, dist = first_overlap(x, y, hw, self.closed, CLEARANCE_M)
        if i >= 0:
            lim = hw[i] + hw[j] + CLEARANCE_M
            a, b = sorted((i, j))
            ka, kb = self._knot_near(x[a], y[a]), self._knot_near(x[b], y[b])
            raise SelfIntersectionError(
                src,
                "knots",
                f"the road overlaps itself: s = {s_arr[a]:.0f} m (near "
                f"{ka}) and s = {s_arr[b]:.0f} m (near {kb}) are {dist:.1f} m "
                f"apart, need >= {lim:.1f} m (both half widths + {CLEARANCE_M} m clearance)",
            )

        fk = np.array([FEATURE_KINDS.index(f.kind) for f in self.features], np.int64)
        fp = np.array(
            [[f.s_m, f.length_m, f.height_m, f.face_m] for f in self.features], np.float64
        ).reshape(-1, 4)
        fk.setflags(write=False)  # read-only first: the bake calls feature_z with these types
        fp.setflags(write=False)
        z = np.empty_like(s_arr)
        _feature_profile(fk, fp, s_arr, z)
        z += zb
        if self.closed:
            z[-1] = z[0]
        arrays = dict(
            s_m=s_arr,
            x_m=x,
            y_m=y,
            z_m=z,
            z_base_m=zb,
            tx=out[:, 3].copy(),
            ty=out[:, 4].copy(),
            curvature=kappa,
            grade=grade,
            half_width_m=hw,
            surface=surface,
            section_start_m=starts,
            section_surface=sids,
            feature_kind=fk,
            feature_params=fp,
        )
        for a in arrays.values():
            a.setflags(write=False)
        return StagePath(**arrays, length_m=float(length), ds_m=float(ds), closed=self.closed)

    def _check_features_on_path(self, src: str, path: StagePath) -> None:
        spans = []
        for i, ft in enumerate(self.features):
            a, b = ft.extent_m
            hi = path.length_m
            if a < 0.0 or b > hi:
                raise FieldValueError(
                    src,
                    f"features[{i}].s_m",
                    f"the {ft.kind} spans s = "
                    f"{a:.1f}..{b:.1f} m, outside the path [0, {hi:.1f}] m"
                    + (" (features may not span a loop's closure)" if self.closed else ""),
                )
            spans.append((a, b, i))
        spans.sort()
        for (_, b0, i0), (a1, _, i1) in itertools.pairwise(spans):
            if a1 < b0:
                raise FieldValueError(
                    src,
                    f"features[{i1}].s_m",
                    f"overlaps features[{i0}] (features may not overlap)",
                )

    def _check_timing(self, src: str, path: StagePath) -> None:
        L = path.length_m
        st = self.start
        s0 = _num(st.s_m, src, "start.s_m")
        lat = _num(st.lateral_m, src, "start.lateral_m")
        hi = L if not self.closed else math.nextafter(L, 0.0)
        _range(s0, 0.0, hi, src, "start.s_m", " m")
        hw0 = float(path.half_width_at(s0))
        if abs(lat) > hw0 - 1.0:
            raise FieldValueError(
                src,
                "start.lateral_m",
                f"{lat!r} m puts the car within 1 m of the road edge (half width {hw0:.2f} m)",
            )
        object.__setattr__(self, "start", Start(s0, lat))
        fin = self.finish
        if self.closed:
            if fin.s_m is not None:
                raise FieldValueError(
                    src,
                    "finish.s_m",
                    "a closed loop finishes on its start "
                    "line: give finish.laps instead of finish.s_m",
                )
            if fin.laps is None:
                raise FieldValueError(src, "finish.laps", "a closed loop needs finish.laps")
            laps = _of(int, fin.laps, src, "finish.laps")
            _range(laps, 1, 1000, src, "finish.laps")
            object.__setattr__(self, "finish", Finish(None, laps))
            rel = [(c - s0) % L for c in self.checkpoints_m]
            for i, c in enumerate(self.checkpoints_m):
                _range(c, 0.0, hi, src, f"checkpoints_m[{i}]", " m")
                if rel[i] <= 0.0 or (i > 0 and rel[i] <= rel[i - 1]):
                    raise FieldValueError(
                        src,
                        f"checkpoints_m[{i}]",
                        "checkpoints must be in driving order after the start line, within one lap",
                    )
        else:
            if fin.laps is not None:
                raise FieldValueError(
                    src,
                    "finish.laps",
                    "only closed loops have laps; give finish.s_m for a point-to-point stage",
                )
            if fin.s_m is None:
                raise FieldValueError(src, "finish.s_m", "a point-to-point stage needs finish.s_m")
            f = _num(fin.s_m, src, "finish.s_m")
            if f > L:
                raise FieldValueError(
                    src, "finish.s_m", f"{f!r} m is beyond the end of the {L:.1f} m path"
                )
            if f < s0 + MIN_TIMED_M:
                raise FieldValueError(
                    src,
                    "finish.s_m",
                    f"{f!r} m must be at least {MIN_TIMED_M} m after the start ({s0!r} m)",
                )
            object.__setattr__(self, "finish", Finish(f, None))
            prev = s0
            for i, c in enumerate(self.checkpoints_m):
                if not prev < c < f:
                    raise FieldValueError(
                        src,
                        f"checkpoints_m[{i}]",
                        f"{c!r} m must lie after "
                        f"{'the start' if i == 0 else 'the previous checkpoint'}"
                        f" ({prev!r} m) and before the finish ({f!r} m)",
                    )
                prev = c

    # -- derived values --------------------------------------------------------------------

    @property
    def length_m(self) -> float:
        """Arc length of the whole centerline (m), including any run-up and run-off."""
        return self.path.length_m

    @property
    def laps(self) -> int:
        """Number of laps (1 for point-to-point stages)."""
        return 1 if self.finish.laps is None else self.finish.laps

    @property
    def start_s_m(self) -> float:
        """Arc length of the start line (m)."""
        return self.start.s_m

    @property
    def finish_s_m(self) -> float:
        """Arc length of the finish line (m); for loops the start line (after ``laps`` laps)."""
        return self.start.s_m if self.finish.s_m is None else self.finish.s_m

    @property
    def timed_length_m(self) -> float:
        """Distance from start to finish along the path (m); laps x length for loops."""
        if self.closed:
            return self.laps * self.path.length_m
        return self.finish_s_m - self.start.s_m

    @property
    def surfaces_used(self) -> tuple[str, ...]:
        """Distinct road surface names, in order of first appearance."""
        return tuple(dict.fromkeys(sec.surface for sec in self.sections))

    def to_dict(self) -> dict[str, Any]:
        """The stage as the file schema (what :func:`tracks.save_stage` writes)."""
        return {
            "format": FORMAT_VERSION,
            "name": self.name,
            "description": self.description,
            "closed": self.closed,
            **({} if self.par_time_s is None else {"par_time_s": self.par_time_s}),
            "checkpoints_m": list(self.checkpoints_m),
            "knots": [[float(v) for v in row] for row in self.knots],
            "terrain": self.terrain.to_dict(),
            "start": self.start.to_dict(),
            "finish": self.finish.to_dict(),
            "sections": [sec.to_dict() for sec in self.sections],
            "features": [f.to_dict() for f in self.features],
        }

    def digest(self) -> str:
        """blake2b digest of the stage content (not its source path); identifies the stage.

        The par time is metadata about the stage, not the stage: setting or updating it leaves
        the digest (and so replays and leaderboard entries) unchanged.
        """
        if not self._digest:
            from tracks._toml import dumps

            doc = self.to_dict()
            doc.pop("par_time_s", None)
            h = hashlib.blake2b(dumps(doc).encode("utf-8"), digest_size=16)
            object.__setattr__(self, "_digest", h.hexdigest())
        return self._digest

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Stage):
            return NotImplemented
        return self.digest() == other.digest()

    def __hash__(self) -> int:
        return hash(self.digest())

    def replace(self, **changes: Any) -> Stage:
        """A copy with some fields changed (validated again), e.g. ``replace(par_time_s=95.2)``."""
        return dataclasses.replace(self, **changes)
