"""Video export: H.264 MP4 through imageio-ffmpeg, short GIFs, :func:`render_episode` and
:func:`render_strip` (docs/render.md, "Video"). The renderer only reads the simulation.
"""

from __future__ import annotations

import math
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from rally_env.info import end_reason
from rally_env.render._deps import require_imageio
from rally_env.render.views import CarView

#: Seconds the last frame (the finish banner) is held at the end of a video.
END_HOLD_S = 1.5
#: Defaults of the short GIF written beside a video: its length, and its highest frame rate
#: (it takes every n-th video frame: 10 fps from a 30 fps video).
GIF_SECONDS = 12.0
GIF_FPS = 12.5


class VideoWriter:
    """Writes (H, W, 3) uint8 frames to an MP4 (H.264, yuv420p) or a GIF, by the file suffix.

    Args:
        path: ``.mp4`` (or ``.mkv``/``.mov``: also H.264) or ``.gif``.
        fps: frame rate.
        crf: H.264 quality (lower = better; 23 is ffmpeg's default).
        gif_scale: GIF only: scale factor applied to each frame (0.5 = half size). GIFs use one
            96-colour palette for all frames, without dithering.

    Use as a context manager, or call :meth:`close`.
    """

    def __init__(self, path: str | Path, fps: float = 30.0, crf: int = 23, gif_scale: float = 1.0):
        self.path = Path(path)
        if not (math.isfinite(fps) and 1.0 <= fps <= 240.0):
            raise ValueError(f"fps must be in [1, 240], got {fps!r}")
        self.fps = float(fps)
        self.crf = int(crf)
        self.gif_scale = float(gif_scale)
        self.gif = self.path.suffix.lower() == ".gif"
        self.frames = 0
        self._gen = None
        self._gif_frames: list[Any] = []
        self._size: tuple[int, int] | None = None
        require_imageio()
        self.path.parent.mkdir(parents=True, exist_ok=True)

    def write(self, frame: np.ndarray) -> None:
        f = np.ascontiguousarray(frame, dtype=np.uint8)
        if f.ndim != 3 or f.shape[2] != 3:
            raise ValueError(f"frames must be (H, W, 3) uint8, got shape {f.shape}")
        h, w = f.shape[:2]
        if self._size is None:
            self._size = (w, h)
            if not self.gif:
                self._open(w, h)
        elif self._size != (w, h):
            raise ValueError(f"frame size changed from {self._size} to {(w, h)}")
        if self.gif:
            from PIL import Image

            im = Image.fromarray(f)
            if self.gif_scale != 1.0:
                size = (max(2, round(w * self.gif_scale)), max(2, round(h * self.gif_scale)))
                im = im.resize(size, Image.LANCZOS)
            self._gif_frames.append(im)
        else:
            if w % 2 or h % 2:  # yuv420p needs even sizes
                f = np.pad(f, ((0, h % 2), (0, w % 2), (0, 0)), mode="edge")
            self._gen.send(f)
        self.frames += 1

    def _open(self, w: int, h: int) -> None:
        import imageio_ffmpeg

        self._gen = imageio_ffmpeg.write_frames(
            str(self.path),
            (w + w % 2, h + h % 2),
            fps=self.fps,
            codec="libx264",
            pix_fmt_in="rgb24",
            pix_fmt_out="yuv420p",
            quality=None,
            macro_block_size=2,
            output_params=["-crf", str(self.crf), "-preset", "veryfast", "-movflags", "+faststart"],
        )
        self._gen.send(None)

    def close(self) -> None:
        if self._gen is not None:
            self._gen.close()
            self._gen = None
        if not self._gif_frames:
            return
        from PIL import Image

        ims = self._gif_frames
        # one palette for the whole GIF, from a mosaic of sampled frames (docs/render.md, "Video")
        pick = ims[:: max(1, len(ims) // 8)][:8]
        w, h = pick[0].size
        mosaic = Image.new("RGB", (w, h * len(pick)))
        for i, im in enumerate(pick):
            mosaic.paste(im, (0, i * h))
        pal = _quantize(mosaic, 96)
        q = [im.quantize(palette=pal, dither=Image.Dither.NONE) for im in ims]
        duration = round(1000.0 / self.fps)
        q[0].save(self.path, save_all=True, append_images=q[1:], duration=duration, loop=0)
        self._gif_frames = []

    def __enter__(self) -> VideoWriter:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def _quantize(im: Any, colors: int) -> Any:
    """A PIL image with a palette of ``colors`` colours, without dithering."""
    from PIL import Image

    return im.quantize(colors=colors, method=Image.Quantize.MAXCOVERAGE, dither=Image.Dither.NONE)


class Progress:
    """A one-line progress bar on stderr (redrawn in place on a terminal)."""

    def __init__(self, label: str = "", enabled: bool = True):
        self.label = label
        self.stream = sys.stderr
        self.enabled = enabled
        self.tty = bool(getattr(self.stream, "isatty", lambda: False)())
        self._last = -1.0

    def update(self, frac: float, extra: str = "") -> None:
        """Show the fraction ``frac`` done (redrawn at most every 0.1 s, or 2 s off a terminal)."""
        if not self.enabled:
            return
        frac = min(max(frac, 0.0), 1.0)
        now = time.perf_counter()
        if frac < 1.0 and now - self._last < (0.1 if self.tty else 2.0):
            return
        self._last = now
        k = round(frac * 30)
        line = f"{self.label} [{'#' * k}{'.' * (30 - k)}] {100 * frac:5.1f}% {extra}"
        self.stream.write("\r" + line if self.tty else line + "\n")
        self.stream.flush()

    def close(self, extra: str = "") -> None:
        self.update(1.0, extra)
        if self.enabled and self.tty:
            self.stream.write("\n")
            self.stream.flush()


def lerp_view(a: CarView, b: CarView, t: float) -> CarView:
    """A car between two consecutive views (``t`` 0 = ``a``, 1 = ``b``); readings from ``b``."""
    if t >= 1.0 or a.n_wheels != b.n_wheels:
        return b
    if t <= 0.0:
        t = 0.0

    def mix(u: Any, v: Any) -> Any:
        return u + t * (v - u)

    r = mix(a.rotation, b.rotation)
    # re-orthonormalise forward/left/up (Gram-Schmidt)
    f = r[:, 0] / max(np.linalg.norm(r[:, 0]), 1e-12)
    left = r[:, 1] - f * float(f @ r[:, 1])
    left /= max(np.linalg.norm(left), 1e-12)
    rot = np.stack([f, left, np.cross(f, left)], axis=1)
    d = mix(a.wheel_dir, b.wheel_dir)
    d /= np.maximum(np.linalg.norm(d, axis=1, keepdims=True), 1e-12)
    mixed = ("x_m", "y_m", "z_m", "wheel_xy_m", "speed_mps", "time_s", "steer_rad", "height_m")
    return replace(
        b, rotation=rot, wheel_dir=d, **{k: mix(getattr(a, k), getattr(b, k)) for k in mixed}
    )


@dataclass(frozen=True)
class EpisodeVideo:
    """What :func:`render_episode` did.

    Attributes:
        path, frames, fps: the video file, the frames written and their rate.
        steps, sim_time_s: env steps taken and the simulated time of the episode (s).
        wall_time_s: wall-clock time of the whole export (s).
        end_reason: the env's end reason (``rally_env.info.end_reason``) at the end (``""``:
            cut by ``max_seconds``).
        finish_time_s, total_reward: the finish time (NaN if not finished) and the return.
        gif_path: the GIF written too, or ``None``.
    """

    path: Path
    frames: int
    fps: float
    steps: int
    sim_time_s: float
    wall_time_s: float
    end_reason: str
    finish_time_s: float
    total_reward: float
    gif_path: Path | None = None


def render_episode(
    policy: Callable[[np.ndarray], Any] | str,
    path: str | Path,
    *,
    stage: Any = "opener",
    seed: int | None = 0,
    fps: float = 30.0,
    env_kwargs: dict[str, Any] | None = None,
    width: int = 600,
    height: int = 400,
    camera: str = "car-up",
    zoom: float = 1.0,
    max_seconds: float | None = None,
    gif: str | Path | bool | None = None,
    gif_seconds: float = GIF_SECONDS,
    gif_scale: float = 0.5,
    ghosts: Sequence[Any] = (),
    progress: bool = False,
    env: Any = None,
) -> EpisodeVideo:
    """Run one episode of ``policy`` and write it as a video.

    Args:
        policy: ``policy(obs) -> action``, an SB3 model (anything with ``predict``), or an agent
            name / model path for :func:`~rally_env.policies.resolve_policy`
            (``"heuristic"``, ``"line"``, ``"random"``, ``"PATH.zip"``).
        path: output ``.mp4`` (H.264) or ``.gif``.
        stage: stage name, path or :class:`tracks.Stage` (ignored when ``env`` is given).
        seed: reset seed.
        fps: video frame rate; frames are drawn at this rate in simulated time, poses
            interpolated between control steps.
        env_kwargs: more ``Rally-v0`` arguments (``control_hz``, ``vehicle``, ...). The
            observation settings the policy asks for (its ``env_kwargs`` attribute, e.g. the
            heuristic's road ahead) are added where these do not set them.
        width, height, camera, zoom: the renderer's frame and camera.
        max_seconds: stop after this much simulated time.
        gif: also write a short GIF: a path, or ``True`` for ``path`` with ``.gif``.
        gif_seconds: length of that GIF (s of the start of the run).
        gif_scale: size of the GIF's frames relative to the video's.
        ghosts: ghost runs to draw.
        progress: print a progress bar on stderr.
        env: an existing ``Rally-v0`` env (single) to use instead of making one.

    Returns:
        An :class:`EpisodeVideo` summary.
    """
    from rally_env.policies import resolve_policy
    from rally_env.render.envview import EnvRenderer
    from rally_env.render.views import car_views

    t_wall = time.perf_counter()
    own_env = env is None
    if env is None:
        from rally_env.env import RallyEnv

        kw = dict(env_kwargs or {})
        env = RallyEnv(stage=stage, **kw)
    if isinstance(policy, (str, Path)):
        policy, _ = resolve_policy(str(policy), env, seed=seed)
    if own_env:
        asked = {**(getattr(policy, "env_kwargs", None) or {}), **kw}
        if asked != kw:
            # the observation the agent asks for (e.g. the road ahead) where env_kwargs do not
            # say otherwise, as `rally record` does
            env.close()
            env = RallyEnv(stage=stage, **asked)
    if hasattr(policy, "predict"):
        model = policy

        def policy(obs, _m=model):
            return _m.predict(obs, deterministic=True)[0]

    core = env.unwrapped.core
    renderer = EnvRenderer(
        "rgb_array", fps, width=width, height=height, camera=camera, zoom=zoom, ghosts=ghosts
    )
    path = Path(path)
    gif_path = path.with_suffix(".gif") if gif is True else Path(gif) if gif else None
    bar = Progress(f"record {path.name}", enabled=progress)
    obs, info = env.reset(seed=seed)
    if callable(getattr(policy, "reset", None)):
        policy.reset()  # stateful drivers (the heuristic's speed controller) start afresh
    prev = now = car_views(core.sim, [0])[0]
    t_prev = t_now = 0.0
    i_frame = 0
    steps = 0
    total = 0.0
    done = False
    writer = VideoWriter(path, fps)
    gif_every = max(1, math.ceil(fps / GIF_FPS - 1e-9))  # every n-th video frame
    gif_writer = VideoWriter(gif_path, fps / gif_every, gif_scale=gif_scale) if gif_path else None
    try:
        while True:
            while i_frame / fps <= t_now + 1e-9:
                t_f = i_frame / fps
                a = 1.0 if t_now <= t_prev else (t_f - t_prev) / (t_now - t_prev)
                frame = renderer.draw_views(core, {0: lerp_view(prev, now, a)}, 0)
                writer.write(frame)
                if gif_writer is not None and t_f <= gif_seconds and i_frame % gif_every == 0:
                    gif_writer.write(frame)
                i_frame += 1
            if done or (max_seconds is not None and t_now >= max_seconds):
                break
            obs, r, term, trunc, info = env.step(policy(obs))
            steps += 1
            total += float(r)
            prev, now = now, car_views(core.sim, [0])[0]
            t_prev, t_now = t_now, now.time_s
            done = bool(term or trunc)
            length = float(info.get("stage_length_m", 0.0))
            frac = float(info.get("progress_m", 0.0)) / length if length > 0 else 0.0
            bar.update(1.0 if done else frac, f"{t_now:6.1f} s sim")
        # hold the last frame (with the finish / end banner)
        last = renderer.draw_views(core, {0: now}, 0)
        for _ in range(round(END_HOLD_S * fps)):
            writer.write(last)
    finally:
        writer.close()
        if gif_writer is not None:
            gif_writer.close()
        renderer.close()
        if own_env:
            env.close()
    wall = time.perf_counter() - t_wall
    bar.close(f"{t_now:6.1f} s sim, {writer.frames} frames in {wall:.1f} s")
    return EpisodeVideo(
        path=path,
        frames=writer.frames,
        fps=float(fps),
        steps=steps,
        sim_time_s=float(t_now),
        wall_time_s=wall,
        end_reason=end_reason(info) if done else "",
        finish_time_s=float(info.get("finish_time_s", math.nan)),
        total_reward=total,
        gif_path=gif_path,
    )


def render_strip(
    policy: Callable[[np.ndarray], Any] | str,
    path: str | Path | None,
    *,
    times_s: Sequence[float] = (4.0, 20.0, 40.0, 60.0),
    stage: Any = "opener",
    seed: int | None = 0,
    cols: int = 2,
    width: int = 600,
    height: int = 400,
    camera: str = "car-up",
    zoom: float = 1.0,
    env_kwargs: dict[str, Any] | None = None,
    png_colors: int | None = 160,
) -> np.ndarray:
    """A grid of frames of one episode at chosen times (for a README or a report).

    Args:
        policy: as for :func:`render_episode`.
        path: write the grid here as a PNG (``None``: only return it).
        times_s: simulated times of the frames (s); times after the episode ended show its end.
        stage, seed, width, height, camera, zoom, env_kwargs: as for :func:`render_episode`.
        cols: frames per row.
        png_colors: write the PNG with this many palette colours (a much smaller file);
            ``None``: full colour.

    Returns:
        The grid, (rows * height + gaps, cols * width + gaps, 3) uint8.
    """
    from rally_env.env import RallyEnv
    from rally_env.policies import resolve_policy
    from rally_env.render.envview import EnvRenderer

    env = RallyEnv(stage=stage, **dict(env_kwargs or {}))
    if isinstance(policy, (str, Path)):
        policy, _ = resolve_policy(str(policy), env, seed=seed)
    er = EnvRenderer("rgb_array", 20, width=width, height=height, camera=camera, zoom=zoom)
    obs, _ = env.reset(seed=seed)
    if callable(getattr(policy, "reset", None)):
        policy.reset()
    frames = []
    done = False
    for t_want in sorted(times_s):
        while not done and env.core.sim.time_s[0] + 1e-9 < t_want:
            obs, _, te, tr, _ = env.step(policy(obs))
            done = bool(te or tr)
            er.frame(env.core)  # keep skid marks and the camera's turn as in a video
        frames.append(er.frame(env.core))
    er.close()
    env.close()
    gap = 4
    rows = (len(frames) + cols - 1) // cols
    grid = np.full(
        (rows * height + (rows - 1) * gap, cols * width + (cols - 1) * gap, 3), 16, np.uint8
    )
    for k, f in enumerate(frames):
        r, c = divmod(k, cols)
        y, x = r * (height + gap), c * (width + gap)
        grid[y : y + height, x : x + width] = f
    if path is not None:
        from PIL import Image

        Path(path).parent.mkdir(parents=True, exist_ok=True)
        im = Image.fromarray(grid)
        (_quantize(im, int(png_colors)) if png_colors else im).save(path, optimize=True)
    return grid
