"""Rendering, video export and keyboard play for ``Rally-v0`` (examples: ``docs/render.md``).

Importing this package does not import pygame: a :class:`Renderer` (or a window) does, and a
missing pygame raises :class:`gymnasium.error.DependencyNotInstalled` with the install command.
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
