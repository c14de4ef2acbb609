"""The frame renderer: a top-down camera over the baked stage, the cars and the HUD, drawn
from :class:`~rally_env.render.views.CarView` and :class:`~rally_env.render.views.HudInfo`
records only (docs/render.md, "What a frame shows"). pygame is imported by a
:class:`Renderer`, never before.
"""

from __future__ import annotations

import math
from collections import OrderedDict, defaultdict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from rally_env.render import background as B
from rally_env.render._deps import require_pygame
from rally_env.render.raster import draw_marks, tint_rect
from rally_env.render.views import CarView, HudInfo, box_corners, format_delta, format_time

#: Camera modes: the view turns with the car ("car-up", alias "chase") or stays north-up.
CAMERAS = ("car-up", "north-up")
_CAMERA_ALIASES = {"car-up": "car-up", "chase": "car-up", "north-up": "north-up"}
#: Metres of world across the frame's width at zoom 1.
VIEW_WIDTH_M = 80.0
#: Skid marks: a wheel whose friction usage is at least this is sliding.
SLIDE_USAGE = 0.93
#: Skid marks fade out over this much simulated time (s).
MARK_FADE_S = 6.0
_MARK_CAPACITY = 4096
_MARK_RGB = np.array([38.0, 30.0, 26.0])

_AIR_RGB = (150, 150, 165)
# friction-usage ramp: grip in reserve (green) -> at the limit (yellow/orange) -> sliding (red)
_USAGE_KNOTS = np.array([0.0, 0.55, 0.8, 0.93, 1.0])
_USAGE_RGB = np.array(
    [[40, 200, 90], [150, 220, 60], [250, 210, 40], [255, 130, 30], [235, 35, 35]], np.float64
)

_BODY_RGB = (236, 238, 242)
_CAB_RGB = (40, 96, 190)
_OUTLINE_RGB = (20, 18, 18)
_OTHER_RGBA = (90, 190, 255, 150)
_GHOST_RGBA = (255, 255, 255, 105)

_BG_CACHE: OrderedDict[tuple, B.Background] = OrderedDict()
_BG_CACHE_SIZE = 4


_USAGE_LUT = [
    tuple(round(float(np.interp(i / 255.0, _USAGE_KNOTS, _USAGE_RGB[:, k]))) for k in range(3))
    for i in range(256)
]


def usage_color(u: float) -> tuple[int, int, int]:
    """Colour of a wheel at friction-circle usage ``u`` (0 = all grip in reserve, 1 = sliding)."""
    u = float(u)
    if not u == u:
        return _AIR_RGB
    return _USAGE_LUT[min(max(round(u * 255.0), 0), 255)]


def _wheel_rgb(car: CarView, k: int) -> tuple[int, int, int]:
    """Colour of wheel ``k``: its friction usage, or grey in the air."""
    return usage_color(car.usage[k]) if bool(car.grounded[k]) else _AIR_RGB


def lru_get(cache: OrderedDict, key: Any, make: Callable[[], Any], size: int) -> Any:
    """``cache[key]``, made by ``make()`` when missing; keeps the ``size`` latest used."""
    v = cache.get(key)
    if v is None:
        v = cache[key] = make()
        while len(cache) > size:
            cache.popitem(last=False)
    else:
        cache.move_to_end(key)
    return v


def cached_background(stage: Any, terrain: Any, ppm: float, radius_m: float) -> B.Background:
    """:func:`background.bake_background`, cached for the last few (stage, resolution) pairs."""
    tdig = terrain.digest() if hasattr(terrain, "digest") else id(terrain)
    key = (stage.digest(), tdig, round(ppm, 4), round(radius_m, 2))
    bake = B.bake_background
    return lru_get(_BG_CACHE, key, lambda: bake(stage, terrain, ppm, radius_m), _BG_CACHE_SIZE)


@dataclass(slots=True)
class Camera:
    """Where the last frame looked: world ``(cx, cy)`` at pixel ``(ax, ay)``, world unit vector
    ``(ux, uy)`` up the screen, ``ppm`` pixels per metre."""

    cx: float
    cy: float
    ux: float
    uy: float
    ppm: float
    ax: float
    ay: float

    def to_screen(self, x: Any, y: Any) -> tuple[np.ndarray, np.ndarray]:
        """World x, y (m) -> pixel x, y (floats; pixel ``(i, j)`` spans ``[i, i+1) x [j, j+1)``)."""
        dx = np.asarray(x, np.float64) - self.cx
        dy = np.asarray(y, np.float64) - self.cy
        return (
            self.ax + (dx * self.uy - dy * self.ux) * self.ppm,
            self.ay - (dx * self.ux + dy * self.uy) * self.ppm,
        )

    def args(self) -> tuple[float, float, float, float, float, float, float]:
        """``(cx, cy, ux, uy, ppm, ax, ay)``: the view as the drawing kernels take it."""
        return (self.cx, self.cy, self.ux, self.uy, self.ppm, self.ax, self.ay)

    def to_world(self, px: Any, py: Any) -> tuple[np.ndarray, np.ndarray]:
        """Pixel x, y -> world x, y (m)."""
        a = (np.asarray(px, np.float64) - self.ax) / self.ppm
        b = (self.ay - np.asarray(py, np.float64)) / self.ppm
        return self.cx + a * self.uy + b * self.ux, self.cy - a * self.ux + b * self.uy


class _Marks:
    """A ring buffer of skid-mark segments for one car."""

    __slots__ = ("count", "last_t", "last_xy", "segs", "written")

    def __init__(self) -> None:
        self.segs = np.zeros((_MARK_CAPACITY, 6))
        self.clear()

    def clear(self) -> None:
        self.written = 0
        self.count = 0
        self.last_xy = None
        self.last_t = -math.inf

    def update(self, car: CarView) -> None:
        t, xy, prev = car.time_s, car.wheel_xy_m, self.last_xy
        if t < self.last_t:  # a reset
            self.clear()
            prev = None
        fresh = prev is None or prev.shape != xy.shape  # nothing to draw from
        if t == self.last_t and not fresh:
            return
        self.last_xy = xy.copy()
        self.last_t = t
        if fresh or car.speed_mps < 1.0:
            return
        for w in range(xy.shape[0]):
            u = float(car.usage[w])
            if u < SLIDE_USAGE or not bool(car.grounded[w]):
                continue
            d = xy[w] - prev[w]
            if float(d @ d) > 100.0:  # teleported (a reset): no mark
                continue
            a = min(1.0, 0.35 + 0.65 * (u - SLIDE_USAGE) / (1.0 - SLIDE_USAGE))
            row = self.written % _MARK_CAPACITY
            self.segs[row] = (prev[w, 0], prev[w, 1], xy[w, 0], xy[w, 1], 0.6 * a, t)
            self.written += 1
        self.count = min(self.written, _MARK_CAPACITY)


class Renderer:
    """Renders frames of one stage.

    Args:
        stage: the :class:`tracks.Stage`.
        terrain: its heightfield (default ``tracks.bake(stage)``, cached by tracks).
        width, height: frame size in pixels (even numbers suit H.264).
        camera: ``"car-up"`` (the view turns with the car; alias ``"chase"``) or ``"north-up"``.
        zoom: magnification; 1 shows :data:`VIEW_WIDTH_M` metres across the width.
        hud: draw the HUD (speed, times, split, progress, load bars, mini map).
        minimap: draw the mini map (with ``hud``).
        skid_marks: draw skid marks where wheels slide.
        smooth: bilinear background resampling (``False``: nearest, faster, jaggier).
        camera_lag_s: car-up only: time constant of the camera's turn towards the car's heading
            (0 = rigidly locked to the car).
    """

    def __init__(
        self,
        stage: Any,
        terrain: Any = None,
        width: int = 600,
        height: int = 400,
        camera: str = "car-up",
        zoom: float = 1.0,
        hud: bool = True,
        minimap: bool = True,
        skid_marks: bool = True,
        smooth: bool = True,
        camera_lag_s: float = 0.15,
    ):
        for name, v in (("width", width), ("height", height)):
            if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or not 16 <= v <= 8192:
                raise ValueError(f"{name} must be an integer in [16, 8192] px, got {v!r}")
        if not (isinstance(zoom, (int, float)) and math.isfinite(zoom) and 0.05 <= zoom <= 20.0):
            raise ValueError(f"zoom must be a number in [0.05, 20], got {zoom!r}")
        if not (math.isfinite(camera_lag_s) and 0.0 <= camera_lag_s <= 5.0):
            raise ValueError(f"camera_lag_s must be in [0, 5] s, got {camera_lag_s!r}")
        self.pg = require_pygame()
        import pygame.gfxdraw  # noqa: F401  (translucent polygons)

        if terrain is None:
            import tracks

            terrain = tracks.bake(stage)
        self.stage = stage
        self.terrain = terrain
        self.width = int(width)
        self.height = int(height)
        if not isinstance(camera, str) or camera not in _CAMERA_ALIASES:
            raise ValueError(f"camera must be one of {', '.join(_CAMERA_ALIASES)}, got {camera!r}")
        self.camera_mode = _CAMERA_ALIASES[camera]  # "car-up" or "north-up"
        self.zoom = float(zoom)
        self.show_hud = bool(hud)
        self.show_minimap = bool(minimap)
        self.skid_marks = bool(skid_marks)
        self.smooth = bool(smooth)
        self.camera_lag_s = float(camera_lag_s)
        self.ppm = self.width / VIEW_WIDTH_M * self.zoom
        ay = (0.66 if self.camera_mode == "car-up" else 0.5) * self.height
        ax, ay = self.anchor = (0.5 * self.width, ay)
        reach_px = math.hypot(max(ax, self.width - ax), max(ay, self.height - ay))
        self.bg = cached_background(
            stage, terrain, ppm=min(max(self.ppm, 1.0), 16.0), radius_m=reach_px / self.ppm + 6.0
        )
        self._void = np.array(B.VOID_RGB, np.uint8)
        self.frame = np.zeros((self.height, self.width, 3), np.uint8)
        self.surface = self.pg.image.frombuffer(self.frame, (self.width, self.height), "RGB")
        self.camera = Camera(0.0, 0.0, 0.0, 1.0, self.ppm, ax, ay)
        self._heading: float | None = None
        self._cam_t = -math.inf
        self._marks: defaultdict[Any, _Marks] = defaultdict(_Marks)
        self._text_cache: OrderedDict[tuple, Any] = OrderedDict()
        self._fonts: OrderedDict[int, Any] = OrderedDict()
        self._hud_scale = self.height / 400.0
        self._minimap = None

    # ------------------------------------------------------------------ state
    def reset(self) -> None:
        """Forget the skid marks and the camera's smoothing (call on an episode reset; a car's
        time going backwards does the same per car)."""
        for m in self._marks.values():
            m.clear()
        self._heading = None
        self._cam_t = -math.inf

    # ------------------------------------------------------------------ camera
    def _update_camera(self, car: CarView | None) -> None:
        cam = self.camera
        if car is None:
            x, y, _ = self.stage.start_pose
            cam.cx, cam.cy = float(x), float(y)
            h = float(self.stage.start_pose[2]) if self.camera_mode == "car-up" else math.pi / 2
            cam.ux, cam.uy = math.cos(h), math.sin(h)
            return
        cam.cx, cam.cy = car.x_m, car.y_m
        if self.camera_mode == "north-up":
            cam.ux, cam.uy = 0.0, 1.0
            return
        target = car.heading_rad
        t = car.time_s
        dt = t - self._cam_t
        if self._heading is None or dt < 0.0 or dt > 1.0 or self.camera_lag_s == 0.0:
            h = target
        else:
            err = math.remainder(target - self._heading, 2.0 * math.pi)
            h = self._heading + err * (1.0 - math.exp(-dt / self.camera_lag_s))
        self._heading = h
        self._cam_t = t
        cam.ux, cam.uy = math.cos(h), math.sin(h)

    def world_to_screen(self, x: Any, y: Any) -> tuple[np.ndarray, np.ndarray]:
        """Where world x, y (m) appeared in the last frame (pixel x, y)."""
        return self.camera.to_screen(x, y)

    # ------------------------------------------------------------------ frame
    def draw(
        self,
        car: CarView | None,
        others: Sequence[CarView] | Mapping[Any, CarView] = (),
        ghosts: Sequence[CarView] = (),
        hud: HudInfo | None = None,
    ) -> np.ndarray:
        """Draw a frame.

        Args:
            car: the focused car (the camera follows it), or ``None`` (camera at the start).
            others: other cars of the batch, drawn translucent: a sequence, or a mapping from a
                stable id (the car index) to the view, which keeps each car's skid marks its
                own when the set of drawn cars changes.
            ghosts: ghost cars (recorded runs), drawn translucent white.
            hud: what the HUD shows (``None``: no HUD).

        Returns:
            A new (height, width, 3) uint8 array.
        """
        items = others.items() if isinstance(others, Mapping) else enumerate(others)
        keyed = [(("other", k), v) for k, v in items]
        others = [v for _, v in keyed]
        self._update_camera(car)
        cam = self.camera
        B.sample_view(self.frame, cam.args(), *self.bg.view_args(), self._void, self.smooth)
        if self.skid_marks:
            cars: list[tuple[Any, CarView]] = keyed if car is None else [*keyed, ("car", car)]
            look = (MARK_FADE_S, *cam.args(), max(0.8, 0.5 * 0.32 * cam.ppm), _MARK_RGB)
            for key, c in cars:
                m = self._marks[key]
                m.update(c)
                if m.count:
                    draw_marks(self.frame, m.segs, m.count, c.time_s, *look)
        for g in ghosts:
            self._draw_car(g, role="ghost")
        for o in others:
            self._draw_car(o, role="other")
        if car is not None:
            self._draw_car(car, role="car")
        if hud is not None and self.show_hud:
            self._draw_hud(hud, car, others, ghosts)
        return self.frame.copy()

    # ------------------------------------------------------------------ cars
    def _draw_car(self, car: CarView, role: str) -> None:
        sx, sy = self.camera.to_screen(car.x_m, car.y_m)
        m = 6.0 * self.ppm
        if not (-m <= sx <= self.width + m and -m <= sy <= self.height + m):
            return
        pg = self.pg
        gfx = pg.gfxdraw
        surf = self.surface
        nw = car.n_wheels
        body = car.body_corners_xy()
        d = car.wheel_dir
        n = np.stack([-d[:, 1], d[:, 0]], axis=1)
        r = car.wheel_radius_m[:, None]
        wheels = box_corners(car.wheel_xy_m, d, n, r, r, 0.5 * car.wheel_width_m)  # (W, 4, 2)
        # shadow (offset away from the north-west light, further when airborne) and the cab
        # (glass, towards the front: shows the heading)
        off = (0.35 + 0.6 * max(car.height_m - 0.9, 0.0)) * 0.7071
        f, lft = car.rotation[:2, 0], car.rotation[:2, 1]
        o = np.array([car.x_m, car.y_m])
        a0, a1 = 0.15 * car.body_front_m, 0.8 * car.body_front_m
        cab = box_corners(o, f, lft, a1, -a0, 0.72 * car.body_half_width_m)
        # every polygon's corners to the screen at once: body, shadow, cab, wheels
        allxy = np.concatenate([body, body + np.array([off, -off]), cab, wheels.reshape(-1, 2)])
        sx, sy = self.camera.to_screen(allxy[:, 0], allxy[:, 1])
        pts = np.rint(np.stack([sx, sy], axis=1)).astype(np.int64).tolist()
        pb, psh, pcab = pts[0:4], pts[4:8], pts[8:12]
        pw = [pts[12 + 4 * k : 16 + 4 * k] for k in range(nw)]
        if role == "car":
            gfx.filled_polygon(surf, psh, (0, 0, 0, 80))
            pg.draw.polygon(surf, _BODY_RGB, pb)
            pg.draw.polygon(surf, _CAB_RGB, pcab)
            pg.draw.aalines(surf, _OUTLINE_RGB, True, pb)
            for k in range(nw):
                pg.draw.polygon(surf, _wheel_rgb(car, k), pw[k])
                pg.draw.polygon(surf, _OUTLINE_RGB, pw[k], 1)
        else:
            rgba = _GHOST_RGBA if role == "ghost" else _OTHER_RGBA
            gfx.filled_polygon(surf, pb, rgba)
            gfx.aapolygon(surf, pb, (*rgba[:3], min(255, rgba[3] + 60)))
            for k in range(nw):
                rgb = _wheel_rgb(car, k) if role == "other" else (20, 20, 20)
                gfx.filled_polygon(surf, pw[k], (*rgb, rgba[3]))

    # ------------------------------------------------------------------ HUD
    def _text(self, s: str, px: int, rgb=(255, 255, 255)):
        font = lru_get(self._fonts, px, lambda: self.pg.font.Font(None, px), 64)
        return lru_get(self._text_cache, (s, px, rgb), lambda: font.render(s, True, rgb), 512)

    def _put(self, s: str, px: float, rgb: tuple, xy: tuple) -> Any:
        """Draw ``s`` at ``px`` (times the HUD scale) in ``rgb``, its top left at ``xy``;
        returns the text's surface."""
        t = self._text(s, round(px * self._hud_scale), rgb)
        self.surface.blit(t, xy)
        return t

    def _panel(self, x: int, y: int, w: int, h: int, alpha: float = 0.6) -> None:
        tint_rect(self.frame, int(x), int(y), int(x + w), int(y + h), alpha, 12.0, 10.0, 10.0)

    def _draw_hud(
        self,
        hud: HudInfo,
        car: CarView | None,
        others: Sequence[CarView],
        ghosts: Sequence[CarView],
    ) -> None:
        pg = self.pg
        surf = self.surface
        k = self._hud_scale
        W, H = self.width, self.height
        m = max(4, round(8 * k))
        # --- top-left: speed, time, split
        pw, ph = round(150 * k), round(84 * k)
        self._panel(m, m, pw, ph)
        kmh = f"{hud.speed_mps * 3.6:.0f}"
        t_speed = self._put(kmh, 40, (255, 255, 255), (m + round(8 * k), m + round(5 * k)))
        x = m + round(12 * k) + t_speed.get_width()
        self._put("km/h", 18, (200, 200, 200), (x, m + round(18 * k)))
        finished = hud.finish_time_s == hud.finish_time_s
        t_main = hud.finish_time_s if finished else hud.stage_time_s
        rgb = (255, 236, 160) if finished else (255, 255, 255)
        self._put(format_time(t_main), 26, rgb, (m + round(8 * k), m + round(36 * k)))
        split = hud.last_split()
        if split is not None:
            i, t, delta = split
            label = "FIN" if i >= len(hud.checkpoint_times_s) else f"CP{i + 1}"
            x = m + round(8 * k)
            y = m + round(60 * k)
            ts = self._put(f"{label} {format_time(t)}", 19, (220, 220, 220), (x, y))
            if delta is not None:
                col = (110, 235, 110) if delta <= 0 else (255, 110, 90)
                self._put(format_delta(delta), 19, col, (x + ts.get_width() + round(6 * k), y))
        if hud.laps > 1:
            lap = f"Lap {hud.lap}/{hud.laps}"
            self._put(lap, 18, (220, 220, 220), (m + pw + m, m + round(4 * k)))
        self._draw_vehicle_status(hud, m, m + ph + round(4 * k), pw)
        # --- top-right: mini map
        if self.show_minimap:
            self._draw_minimap(car, others, ghosts, m)
        # --- bottom-left: per-wheel load bars (2 x 2, as the wheels sit on the car)
        if car is not None:
            self._draw_load_bars(car, m)
        # --- bottom: progress
        if hud.stage_length_m > 0:
            x0 = round(W * 0.3)
            x1 = W - m
            bh = max(3, round(6 * k))
            y = H - m - bh
            total = hud.stage_length_m * max(hud.laps, 1)
            frac = min(max(hud.progress_m / total, 0.0), 1.0)
            pg.draw.rect(surf, (20, 18, 18), (x0 - 1, y - 1, x1 - x0 + 2, bh + 2))
            pg.draw.rect(surf, (70, 64, 60), (x0, y, x1 - x0, bh))
            pg.draw.rect(surf, (250, 200, 60), (x0, y, round((x1 - x0) * frac), bh))
            for c in hud.checkpoints_m:
                tx = x0 + round((x1 - x0) * min(max(c / total, 0.0), 1.0))
                tick = ((tx, y - round(2 * k)), (tx, y + bh + round(k)))
                pg.draw.line(surf, (255, 255, 255), *tick, 1)
            lbl = self._text(f"{100.0 * frac:.0f}%", round(17 * k), (230, 230, 230))
            surf.blit(
                lbl, (x0 - lbl.get_width() - round(6 * k), y + bh // 2 - lbl.get_height() // 2)
            )
        if hud.title:
            y = m + (round(24 * k) if hud.laps > 1 else round(4 * k))
            self._put(hud.title, 16, (235, 225, 215), (m + pw + m, y))
        if hud.message:
            lines = hud.message.split("\n")
            ts = [self._text(lines[0], round(34 * k), (255, 240, 200))]
            ts += [self._text(ln, round(20 * k), (235, 230, 220)) for ln in lines[1:]]
            bw = max(t.get_width() for t in ts) + round(30 * k)
            bh = sum(t.get_height() for t in ts) + round(14 * k) + round(3 * k) * (len(ts) - 1)
            bx, by = (W - bw) // 2, round(H * 0.38) - ts[0].get_height() // 2 - round(7 * k)
            self._panel(bx, by, bw, bh, 0.7)
            y = by + round(7 * k)
            for t in ts:
                surf.blit(t, (bx + (bw - t.get_width()) // 2, y))
                y += t.get_height() + round(3 * k)

    def _draw_vehicle_status(self, hud: HudInfo, x: int, y: int, w: int) -> None:
        """Gear and rpm (vehicles with a drivetrain), tire wear and damage once below 1:
        a small panel under the speed panel. Nothing at all for a Rally-v0 HUD."""
        k = self._hud_scale
        lines: list[tuple[str, tuple[int, int, int]]] = []
        if hud.gear is not None and hud.engine_rpm is not None:
            g = "R" if hud.gear < 0 else ("N" if hud.gear == 0 else str(hud.gear))
            lines.append((f"{g}   {hud.engine_rpm:5.0f} rpm", (255, 255, 255)))
        shares = (("tires", hud.tire_wear), ("dmg", hud.damage))
        worn = [f"{name} {100.0 * v:.0f}%" for name, v in shares if v is not None]
        if worn:
            lines.append(("  ".join(worn), (255, 190, 120)))
        if not lines:
            return
        lh = round(20 * k)
        self._panel(x, y, w, lh * len(lines) + round(6 * k))
        for i, (text, col) in enumerate(lines):
            self._put(text, 17, col, (x + round(8 * k), y + round(3 * k) + i * lh))

    def _draw_load_bars(self, car: CarView, m: int) -> None:
        pg = self.pg
        surf = self.surface
        k = self._hud_scale
        nw = car.n_wheels
        cols = 2
        rows = (nw + 1) // 2
        bw, bhmax = max(4, round(12 * k)), max(10, round(34 * k))
        gap = round(8 * k)
        pw = round(2 * m + cols * bw + (cols - 1) * round(24 * k))
        ph = round(rows * (bhmax + gap) + m + round(12 * k))
        px0, py0 = m, self.height - m - ph
        self._panel(px0, py0, pw, ph)
        self._put("load", 15, (200, 200, 200), (px0 + round(6 * k), py0 + round(3 * k)))
        ref = 2.0 * max(car.static_load_n, 1.0)
        # order: front wheels first (largest body x), left before right
        wx = car.wheel_xy_m - np.array([car.x_m, car.y_m])
        fwd = wx @ car.rotation[:2, 0]
        lft = wx @ car.rotation[:2, 1]
        order = sorted(range(nw), key=lambda w: (-round(fwd[w], 2), -lft[w]))
        for slot, w in enumerate(order):
            r, c = divmod(slot, cols)
            x = px0 + m + c * (bw + round(24 * k))
            ytop = py0 + round(18 * k) + r * (bhmax + gap)
            frac = min(max(float(car.loads_n[w]) / ref, 0.0), 1.0)
            hh = round(bhmax * frac)
            pg.draw.rect(surf, (55, 52, 50), (x, ytop, bw, bhmax))
            if hh > 0:
                pg.draw.rect(surf, _wheel_rgb(car, w), (x, ytop + bhmax - hh, bw, hh))
            ym = ytop + bhmax // 2  # static load mark
            pg.draw.line(surf, (240, 240, 240), (x - 1, ym), (x + bw, ym), 1)

    def _draw_minimap(self, car, others, ghosts, m: int) -> None:
        pg = self.pg
        k = self._hud_scale
        if self._minimap is None:
            # the box takes the stage's aspect ratio, within 25 % x 30 % of the frame
            p = self.stage.path
            ex = float(p.x_m.max() - p.x_m.min()) + 40.0
            ey = float(p.y_m.max() - p.y_m.min()) + 40.0
            wmax, hmax = max(24, self.width * 0.25), max(24, self.height * 0.3)
            sc = min(wmax / ex, hmax / ey)
            mw, mh = max(16, round(ex * sc)), max(16, round(ey * sc))
            rgb, to_px = B.stage_overview(self.stage, self.terrain, mw, mh)
            rgb = (rgb.astype(np.float32) * 0.8).astype(np.uint8)
            s = pg.image.frombuffer(np.ascontiguousarray(rgb).tobytes(), (mw, mh), "RGB").copy()
            xs, ys = to_px(p.x_m, p.y_m)
            pts = list(zip(xs.tolist(), ys.tolist(), strict=True))
            from tracks import surfaces

            pg.draw.lines(s, (20, 16, 14), self.stage.closed, pts, max(3, round(4 * k)))
            for i in range(len(pts) - 1):
                colr = surfaces.SURFACES[int(p.surface[i])].color
                pg.draw.line(s, colr, pts[i], pts[i + 1], max(1, round(2 * k)))

            def mark(sv, colr):
                a, b = to_px(*p.point_at(sv))
                c = (round(float(a)), round(float(b)))
                pg.draw.circle(s, (0, 0, 0), c, max(2, round(4 * k)))
                pg.draw.circle(s, colr, c, max(1, round(3 * k)))

            for c in self.stage.checkpoints_m:
                mark(c, (250, 212, 40))
            mark(self.stage.start_s_m, (60, 230, 80))
            if not self.stage.closed:
                mark(self.stage.finish_s_m, (255, 255, 255))
            pg.draw.rect(s, (20, 18, 18), s.get_rect(), 1)
            self._minimap = (s, to_px)
        s, to_px = self._minimap
        x0 = self.width - m - s.get_width()
        y0 = m
        self.surface.blit(s, (x0, y0))
        for cars, rgb in ((ghosts, (230, 230, 230)), (others, (90, 190, 255))):
            for o in cars:
                a, b = to_px(o.x_m, o.y_m)
                c = (x0 + round(float(a)), y0 + round(float(b)))
                pg.draw.circle(self.surface, rgb, c, max(1, round(2 * k)))
        if car is not None:
            a, b = to_px(car.x_m, car.y_m)
            c = (x0 + round(float(a)), y0 + round(float(b)))
            pg.draw.circle(self.surface, (0, 0, 0), c, max(3, round(5 * k)))
            pg.draw.circle(self.surface, (255, 60, 50), c, max(2, round(4 * k)))
