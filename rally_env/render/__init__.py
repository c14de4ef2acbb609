"""Rendering, video export and keyboard play for ``Rally-v0``.

::

    from rally_env.render import Renderer, car_views, HudInfo

    r = Renderer(stage, terrain, width=600, height=400, camera="car-up", zoom=1.0)
    frame = r.draw(car_views(sim)[0], hud=HudInfo(speed_mps=12.0))   # (400, 600, 3) uint8

    from rally_env.render import render_episode
    render_episode("heuristic", "run.mp4", stage="opener", seed=0)

Importing this package does not import pygame: a :class:`Renderer` (or a window) does, and a
missing pygame raises :class:`gymnasium.error.DependencyNotInstalled` with the install command.
See ``docs/render.md``.
"""

from __future__ import annotations

from rally_env.render._deps import INSTALL_HINT, ensure_video_driver, require_pygame
from rally_env.render.envview import EnvRenderer, Window
from rally_env.render.renderer import CAMERAS, VIEW_WIDTH_M, Camera, Renderer, usage_color
from rally_env.render.video import EpisodeVideo, VideoWriter, render_episode, render_strip
from rally_env.render.views import CarView, HudInfo, car_views, format_time, hud_from_info

__all__ = [
    "CAMERAS",
    "INSTALL_HINT",
    "VIEW_WIDTH_M",
    "Camera",
    "CarView",
    "EnvRenderer",
    "EpisodeVideo",
    "HudInfo",
    "Renderer",
    "VideoWriter",
    "Window",
    "car_views",
    "ensure_video_driver",
    "format_time",
    "hud_from_info",
    "render_episode",
    "render_strip",
    "require_pygame",
    "usage_color",
]
