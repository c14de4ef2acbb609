"""``rally play``: drive a stage with the keyboard, in real time (keys, the fixed-step loop,
the saved runs and ghosts: ``docs/render.md``, "Playing it yourself").
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from rally_env.info import checkpoint_times, end_reason
from rally_env.render._deps import require_pygame
from rally_env.render.views import format_delta, format_time
from rally_env.replay.ghost import Ghost, GhostRecorder, load_ghost

#: The source game's loop.
PLAY_HZ = 60
#: Longest frame delta the accumulator takes (s).
MAX_FRAME_DT_S = 0.05


@dataclass
class PlayResult:
    """What a ``rally play`` session did.

    Attributes:
        frames: frames drawn.
        steps: physics control steps (1/60 s each) over all attempts.
        attempts: episodes started (R restarts one).
        finish_times_s: the finish time of every finished attempt.
        best_splits_s: checkpoint times of the best finished attempt.
        saved: replays written.
        quit_reason: ``"escape"``, ``"window"`` or ``"frames"`` (the frame limit).
    """

    frames: int = 0
    steps: int = 0
    attempts: int = 1
    finish_times_s: list[float] = field(default_factory=list)
    best_splits_s: tuple[float, ...] = ()
    saved: list[Path] = field(default_factory=list)
    quit_reason: str = ""


class KeyState:
    """Held keys, tracked from KEYDOWN/KEYUP events (so synthetic events drive it too)."""

    def __init__(self, pg: Any):
        self.pg = pg
        self.held: set[int] = set()
        #: the keys of: steer left, steer right, throttle, brake, handbrake
        self.keys = (
            {pg.K_LEFT, pg.K_a},
            {pg.K_RIGHT, pg.K_d},
            {pg.K_UP, pg.K_w},
            {pg.K_DOWN, pg.K_s},
            {pg.K_SPACE},
        )

    def handle(self, e: Any) -> None:
        if e.type == self.pg.KEYDOWN:
            self.held.add(e.key)
        elif e.type == self.pg.KEYUP:
            self.held.discard(e.key)

    def action(self) -> np.ndarray:
        """``[steer, throttle, brake, handbrake]``: steer +1 = left."""
        left, right, up, down, hand = (1.0 if self.held & k else 0.0 for k in self.keys)
        return np.array([left - right, up, down, hand], np.float32)


def _split_text(label: str, t: float, ref: Sequence[float] | None, i: int) -> str:
    """``label  m:ss.cc`` of a split, with its delta to ``ref[i]`` where there is one."""
    s = f"{label}  {format_time(t)}"
    if ref is not None and i < len(ref) and ref[i] == ref[i] and t == t:
        s += f"  {format_delta(t - ref[i])}"
    return s


def play(
    stage: Any = "opener",
    *,
    vehicle: Any = "rover",
    version: int = 0,
    planet: str | None = None,
    ghost: str | Path | Ghost | None = None,
    seed: int | None = 0,
    width: int = 960,
    height: int = 640,
    camera: str = "car-up",
    zoom: float = 1.0,
    save_dir: str | Path | None = "replays",
    max_frames: int | None = None,
    events: Sequence[tuple[int, Any]] = (),
    realtime: bool = True,
) -> PlayResult:
    """Drive ``stage`` with the keyboard in a window.

    Args:
        stage: stage name, path or :class:`tracks.Stage`.
        vehicle: the env's ``vehicle`` argument.
        version, planet: the env version (0 = Rally-v0, 1 = Rally-v1: library vehicles and
            the wheel-speed model) and the planet (Rally-v1).
        ghost: a replay or ghost file (or a :class:`Ghost`) to race; its splits give the HUD
            deltas.
        seed: reset seed.
        width, height, camera, zoom: the window and the camera (see :class:`Renderer`).
        save_dir: where finished runs are saved as replays (``None``: not saved).
        max_frames: stop after this many frames (for tests and demos).
        events: scripted input, ``(frame_index, pygame.event.Event)`` pairs posted to the event
            queue at the start of that frame (tests drive the real key handling this way).
        realtime: pace to the wall clock (``False``: exactly one 1/60 s step per frame, no
            waiting; with ``max_frames``, a deterministic headless run).

    Returns:
        A :class:`PlayResult`.
    """
    pg = require_pygame()
    from rally_env.env import RallyEnv
    from rally_env.render.envview import EnvRenderer, Window
    from rally_env.replay import RecordReplay

    env: Any = RallyEnv(
        stage=stage, vehicle=vehicle, control_hz=PLAY_HZ, version=version, planet=planet
    )
    core = env.core
    if save_dir is not None:
        # finished runs are saved as replays (re-simulated bit-exactly by `rally verify`)
        env = RecordReplay(env, directory=save_dir, meta={"source": "rally play"})
    er = EnvRenderer("rgb_array", PLAY_HZ, width=width, height=height, camera=camera, zoom=zoom)
    ghosts: list[Ghost] = er.ghosts  # the runs raced (a new best replaces them on a restart)
    if ghost is not None:
        ghosts.append(ghost if isinstance(ghost, Ghost) else load_ghost(ghost))
    win = Window(width, height, fps=0, title="rally play - arrows/WASD, space, R, Esc")
    keys = KeyState(pg)
    res = PlayResult()
    script = sorted(((int(f), e) for f, e in events), key=lambda p: p[0])
    si = 0
    dt = 1.0 / PLAY_HZ

    pending: list[Ghost] = []  # a new best run: raced from the next attempt on

    def start() -> GhostRecorder:
        env.reset(seed=seed)
        er.reset()
        er.message = None
        if pending:
            ghosts[:] = pending
            pending.clear()
        meta = {"vehicle": str(vehicle), "control_hz": PLAY_HZ}
        rec = GhostRecorder(core.bank.stage(0).name, meta=meta)
        rec.sample(core.sim, 0)
        return rec

    rec = start()
    ended = False
    acc = 0.0
    last = time.perf_counter()
    try:
        while True:
            if max_frames is not None and res.frames >= max_frames:
                res.quit_reason = "frames"
                break
            while si < len(script) and script[si][0] <= res.frames:
                pg.event.post(script[si][1])
                si += 1
            for e in win.poll():
                keys.handle(e)
                if e.type == pg.KEYDOWN and e.key == pg.K_ESCAPE:
                    res.quit_reason = "escape"
                elif e.type == pg.KEYDOWN and e.key == pg.K_r:
                    rec = start()
                    ended = False
                    acc = 0.0
                    res.attempts += 1
            if win.closed and not res.quit_reason:
                res.quit_reason = "window"
            if res.quit_reason:
                break
            if realtime:
                now = time.perf_counter()
                acc += min(now - last, MAX_FRAME_DT_S)
                last = now
                n_steps = int(acc / dt)
                acc -= n_steps * dt
            else:
                n_steps = 1
            for _ in range(n_steps):
                if ended:
                    break
                a = keys.action()
                _, _, term, trunc, info = env.step(a)
                res.steps += 1
                rec.sample(core.sim, 0, a)
                if term or trunc:
                    ended = True
                    new = [Path(p) for p in getattr(env, "saved", ()) if Path(p) not in res.saved]
                    _on_end(info, rec, ghosts, pending, er, res, new)
            win.show(er.frame(core), pace=False)
            res.frames += 1
            if realtime:
                # wait for the next 60 Hz frame slot (the accumulator absorbs the jitter)
                spare = dt - (time.perf_counter() - last)
                if spare > 0.001:
                    time.sleep(spare)
    finally:
        win.close()
        er.close()
        env.close()
    return res


def _on_end(info, rec, ghosts, pending, er, res, replays=()) -> None:
    end = end_reason(info)
    cps = checkpoint_times(info)
    if end != "finished":
        er.message = f"{str(end).replace('_', ' ').upper() or 'STOPPED'}\nR to restart, Esc to quit"
        return
    t = float(info.get("finish_time_s", math.nan))
    ref = ghosts[0].reference_times_s if ghosts else None
    lines = [_split_text("FINISH", t, ref, len(cps))]
    lines += [_split_text(f"CP{i + 1}", c, ref, i) for i, c in enumerate(cps)]
    best = min(res.finish_times_s) if res.finish_times_s else math.inf
    res.finish_times_s.append(t)
    g = rec.ghost(cps, t)
    if replays:  # the replay recorder saved the run
        res.saved.extend(replays)
        lines.append(f"saved {replays[-1]}")
    if t < best:
        res.best_splits_s = cps
        pending[:] = [g]  # race your best run on the next attempt
    lines.append("R to restart, Esc to quit")
    er.message = "\n".join(lines)
