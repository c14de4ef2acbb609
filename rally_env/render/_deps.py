"""Optional dependencies of the renderer, imported only when rendering (a missing one is
Gymnasium's :class:`~gymnasium.error.DependencyNotInstalled` with the command that fixes it).
"""

from __future__ import annotations

import os
import sys
from types import ModuleType

from gymnasium.error import DependencyNotInstalled

#: What to run when the render extra is missing.
INSTALL_HINT = 'pip install "rally-env[render]"'


def _has_display() -> bool:
    if sys.platform in ("win32", "darwin"):
        return True
    return bool(os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY"))


def ensure_video_driver() -> str | None:
    """Use SDL's ``dummy`` video driver when there is no display (headless, CI).

    Leaves an explicit ``SDL_VIDEODRIVER`` alone. Returns the driver it set, or ``None``.
    """
    if os.environ.get("SDL_VIDEODRIVER") or _has_display():
        return None
    os.environ["SDL_VIDEODRIVER"] = "dummy"
    return "dummy"


def require_pygame() -> ModuleType:
    """Import pygame (the pygame-ce distribution) for rendering.

    Raises:
        gymnasium.error.DependencyNotInstalled: pygame is not installed; the message gives the
            install command.
    """
    ensure_video_driver()
    os.environ.setdefault("PYGAME_HIDE_SUPPORT_PROMPT", "1")
    try:
        import pygame
    except ImportError as e:
        raise _missing("pygame is", "rendering needs the pygame-ce distribution") from e
    if not pygame.font.get_init():
        pygame.font.init()
    return pygame


def require_imageio() -> ModuleType:
    """Import imageio with its ffmpeg plugin (video export).

    Raises:
        gymnasium.error.DependencyNotInstalled: imageio or imageio-ffmpeg is missing.
    """
    try:
        import imageio
        import imageio_ffmpeg  # noqa: F401
    except ImportError as e:
        raise _missing("imageio and imageio-ffmpeg are", "video export needs them") from e
    return imageio


def _missing(what: str, why: str) -> DependencyNotInstalled:
    return DependencyNotInstalled(f"{what} not installed ({why}), run `{INSTALL_HINT}`")
