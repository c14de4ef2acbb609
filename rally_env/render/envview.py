"""Rendering a ``Rally-v0`` env: :class:`EnvRenderer`, what ``RallyEnv.render()`` and
``RallyVectorEnv.render()`` delegate to, reads the env's core (never writes it) and draws it with
one :class:`Renderer` per stage, in a :class:`Window` for ``render_mode="human"``
(docs/render.md, "The renderer directly").
"""

from __future__ import annotations

import math
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from physics import layout as L
from rally_env.render._deps import require_pygame
from rally_env.render.views import CarView, car_views, format_time, hud_from_info

RENDER_MODES = ("human", "rgb_array")
#: Other cars of a batch are drawn when within this distance of the focused car (m) ...
NEAR_M = 150.0
#: ... the nearest this many of them.
MAX_OTHERS = 63


class Window:
    """A pygame window that shows frames at a steady rate.

    Args:
        width, height: window size (px).
        fps: frames per second :meth:`show` paces to (0: as fast as possible).
        title: window caption.
    """

    def __init__(self, width: int, height: int, fps: float = 60.0, title: str = "rally-env"):
        self.pg = pg = require_pygame()
        pg.display.init()
        self.screen = pg.display.set_mode((int(width), int(height)))
        pg.display.set_caption(title)
        self.clock = pg.time.Clock()
        self.fps = float(fps)
        self.size = (int(width), int(height))
        self.closed = False

    def poll(self) -> list[Any]:
        """Handle window events; returns them (a closed window sets :attr:`closed`)."""
        if self.closed:
            return []
        events = self.pg.event.get()
        self.closed = any(e.type == self.pg.QUIT for e in events)
        return events

    def show(self, frame: np.ndarray, pace: bool = True) -> None:
        """Blit an (H, W, 3) uint8 frame, flip, and wait for the next frame slot."""
        if self.closed:
            return
        pg = self.pg
        h, w = frame.shape[:2]
        surf = pg.image.frombuffer(np.ascontiguousarray(frame), (w, h), "RGB")
        if (w, h) != self.size:
            surf = pg.transform.smoothscale(surf, self.size)
        self.screen.blit(surf, (0, 0))
        pg.display.flip()
        if pace and self.fps > 0:
            self.clock.tick(self.fps)

    def close(self) -> None:
        self.closed = True
        if self.pg.display.get_init():
            self.pg.display.quit()


def _stage_of(core: Any, k: int) -> Any:
    from rally_env import kernels as K

    return core.bank.stage(int(core.eistate[k, K.EI_SLOT]))


class EnvRenderer:
    """Frames of a ``Rally-v0`` env (single or vector).

    Args:
        render_mode: ``"rgb_array"`` (:meth:`render` returns frames) or ``"human"`` (a window).
        fps: the env's ``metadata["render_fps"]`` (human mode paces to it).
        width, height, camera, zoom: see :class:`Renderer`.
        show_others: draw the batch's other cars (vector env), translucent.
        ghosts: :class:`~rally_env.replay.ghost.Ghost` runs to draw; the first one on the
            focused car's stage gives the HUD's split deltas.
        title: HUD corner text (default: the stage name).
        renderer_kwargs: more :class:`Renderer` arguments.

    Raises:
        gymnasium.error.DependencyNotInstalled: pygame is missing.
    """

    def __init__(
        self,
        render_mode: str = "rgb_array",
        fps: float = 20.0,
        *,
        width: int = 600,
        height: int = 400,
        camera: str = "car-up",
        zoom: float = 1.0,
        show_others: bool = True,
        ghosts: Sequence[Any] = (),
        title: str | None = None,
        **renderer_kwargs: Any,
    ):
        if render_mode not in RENDER_MODES:
            raise ValueError(f"render_mode must be one of {RENDER_MODES}, got {render_mode!r}")
        require_pygame()
        self.render_mode = render_mode
        self.fps = float(fps)
        self.width, self.height = int(width), int(height)
        self.show_others = bool(show_others)
        self.ghosts = list(ghosts)
        self.title = title
        self.renderer_kwargs = {
            "width": self.width,
            "height": self.height,
            "camera": camera,
            "zoom": zoom,
            **renderer_kwargs,
        }
        self._renderers: OrderedDict[str, Any] = OrderedDict()
        self.window: Window | None = None
        self.message: str | None = None

    def renderer_for(self, stage: Any, terrain: Any = None) -> Any:
        """The :class:`Renderer` of ``stage`` (made on first use; the last 4 are kept)."""
        from rally_env.render.renderer import Renderer, lru_get

        def make() -> Renderer:
            return Renderer(stage, terrain, **self.renderer_kwargs)

        return lru_get(self._renderers, stage.digest(), make, 4)

    def frame(self, core: Any, focus: int = 0) -> np.ndarray:
        """Draw car ``focus`` of a :class:`RallyCore` (others on its stage translucent)."""
        near = np.array([focus])
        if self.show_others and core.sim.state.shape[0] > 1:
            # only the cars near the focused one (a big batch would cost a view per car per frame)
            pos = core.sim.state[:, L.POS_X : L.POS_Y + 1]
            d2 = ((pos - pos[focus]) ** 2).sum(axis=1)
            near = np.flatnonzero(d2 <= NEAR_M * NEAR_M)
            if near.size > MAX_OTHERS + 1:
                near = near[np.argsort(d2[near], kind="stable")[: MAX_OTHERS + 1]]
            near = np.unique(np.append(near, focus))
        views = dict(zip(near.tolist(), car_views(core.sim, near), strict=True))
        return self.draw_views(core, views, focus)

    def draw_views(
        self, core: Any, views: Mapping[int, CarView] | Sequence[CarView], focus: int = 0
    ) -> np.ndarray:
        """Like :meth:`frame` with the cars given as ``views``: car index -> view (or a list,
        index = car), at least the focused car's; e.g. interpolated between two steps."""
        if not isinstance(views, Mapping):
            views = dict(enumerate(views))
        stage = _stage_of(core, focus)
        r = self.renderer_for(stage)
        car = views[focus]
        others: dict[int, CarView] = {}
        if self.show_others and len(views) > 1:
            key = stage.digest()
            others = {
                i: v for i, v in views.items() if i != focus and _stage_of(core, i).digest() == key
            }
        info = core.info_of(focus)
        info["stage_time_s"] = np.array(car.time_s)
        mine = [g for g in self.ghosts if g.stage == stage.name]
        ref = mine[0].reference_times_s if mine else None
        ghosts = [v for v in (g.view_at(car.time_s) for g in mine) if v is not None]
        msg = self.message
        if msg is None:
            end = core.end_reason(focus)
            if end == "finished":
                msg = f"FINISH  {format_time(float(info.get('finish_time_s', math.nan)))}"
            elif end:
                msg = str(end).replace("_", " ").upper()  # OFF STAGE, TIME LIMIT, ...
        hud = hud_from_info(
            info,
            stage=stage,
            reference_times_s=ref,
            message=msg,
            title=stage.name if self.title is None else self.title,
            # an engine and gearbox (only extended vehicles can have one)
            drivetrain=bool(core.sim.extended and core.sim.params[focus, L.PX_DRIVETRAIN] > 0.5),
        )
        return r.draw(car, others=others, ghosts=ghosts, hud=hud)

    def render(self, core: Any, focus: int = 0) -> np.ndarray | None:
        """``rgb_array``: the frame; ``human``: show it in the window (paced), return ``None``."""
        f = self.frame(core, focus)
        if self.render_mode == "rgb_array":
            return f
        if self.window is None:
            self.window = Window(self.width, self.height, self.fps, title="rally-env")
        self.window.poll()
        self.window.show(f)
        return None

    def reset(self) -> None:
        """Forget skid marks and camera smoothing (an episode reset)."""
        for r in self._renderers.values():
            r.reset()

    def close(self) -> None:
        if self.window is not None:
            self.window.close()
            self.window = None
        self._renderers.clear()
