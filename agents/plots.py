"""Small PNG plots drawn with pygame-ce (the ``[render]`` extra; no matplotlib needed): a run's
telemetry (:func:`telemetry_plot`), a learning curve (:func:`curve_plot`)."""

from __future__ import annotations

import math
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

_BG = (255, 255, 255)
_AX = (60, 60, 60)
_GRID = (225, 225, 225)
_COLORS = [(31, 119, 180), (214, 39, 40), (44, 160, 44), (255, 127, 14), (148, 103, 189)]


def _pg():
    os.environ.setdefault("SDL_VIDEODRIVER", "dummy")
    os.environ.setdefault("PYGAME_HIDE_SUPPORT_PROMPT", "1")
    import pygame

    if not pygame.font.get_init():
        pygame.font.init()
    return pygame


def _nice(lo: float, hi: float) -> tuple[float, float]:
    if not (math.isfinite(lo) and math.isfinite(hi)) or hi <= lo:
        return (lo - 1.0, lo + 1.0) if math.isfinite(lo) else (0.0, 1.0)
    pad = 0.05 * (hi - lo)
    return lo - pad, hi + pad


def _figure(width: int, height: int) -> tuple[Any, Any, Any]:
    """pygame, a white surface of that size and the plots' font."""
    pg = _pg()
    surf = pg.Surface((width, height))
    surf.fill(_BG)
    return pg, surf, pg.font.Font(None, 20)


def _save(pg: Any, surf: Any, path: str | Path) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    pg.image.save(surf, str(path))
    return path


class _Panel:
    """A plot area of ``surf`` at ``rect`` with its grid and ``labels``: (title, x label,
    y label); ``equal``: the same scale on both axes."""

    def __init__(self, surf, rect, xlim, ylim, labels, font, equal=False):
        title, xlabel, ylabel = labels
        self.s, self.r, self.font = surf, rect, font
        self.x0, self.x1 = xlim
        self.y0, self.y1 = ylim
        x, y, w, h = rect
        if equal:
            sx = w / (self.x1 - self.x0)
            sy = h / (self.y1 - self.y0)
            if sx > sy:
                c, half = 0.5 * (self.x0 + self.x1), 0.5 * w / sy
                self.x0, self.x1 = c - half, c + half
            else:
                c, half = 0.5 * (self.y0 + self.y1), 0.5 * h / sx
                self.y0, self.y1 = c - half, c + half
        pg = _pg()
        for i in range(6):
            gx = x + w * i / 5
            gy = y + h * i / 5
            pg.draw.line(surf, _GRID, (gx, y), (gx, y + h))
            pg.draw.line(surf, _GRID, (x, gy), (x + w, gy))
            vx = self.x0 + (self.x1 - self.x0) * i / 5
            vy = self.y1 - (self.y1 - self.y0) * i / 5
            self._text(f"{vx:.4g}", gx, y + h + 4, center=True)
            self._text(f"{vy:.4g}", x - 6, gy - 7, right=True)
        pg.draw.rect(surf, _AX, rect, 1)
        self._text(title, x + w / 2, y - 22, center=True)
        self._text(xlabel, x + w / 2, y + h + 20, center=True)
        self._text(ylabel, x + 4, y + 4)

    def _text(self, t, x, y, center=False, right=False, color=_AX):
        img = self.font.render(str(t), True, color)
        if center:
            x -= img.get_width() / 2
        elif right:
            x -= img.get_width()
        self.s.blit(img, (x, y))

    def xy(self, x, y):
        rx, ry, w, h = self.r
        px = rx + (np.asarray(x) - self.x0) / (self.x1 - self.x0) * w
        py = ry + h - (np.asarray(y) - self.y0) / (self.y1 - self.y0) * h
        return px, py

    def line(self, x, y, color, width=2, dots=False):
        """A line through the finite points ``(x, y)``, clipped to the panel (``dots``: a dot
        of radius ``width`` at each instead)."""
        x, y = np.asarray(x, float), np.asarray(y, float)
        ok = np.isfinite(x) & np.isfinite(y)
        if ok.sum() < (1 if dots else 2):
            return
        px, py = self.xy(x[ok], y[ok])
        pts = list(zip(px.tolist(), py.tolist(), strict=True))
        pg = _pg()
        clip = self.s.get_clip()
        self.s.set_clip(self.r)
        if dots:
            for p in pts:
                pg.draw.circle(self.s, color, p, width)
        else:
            pg.draw.lines(self.s, color, False, pts, width)
        self.s.set_clip(clip)

    def legend(self, items):
        x, y, w, _ = self.r
        for i, (label, color) in enumerate(items):
            self._text(label, x + w - 8, y + 6 + 16 * i, right=True, color=color)


def telemetry_plot(run: Any, path: str | Path) -> Path:
    """Speed vs distance (with the reference profile), g-g diagram, friction-circle usage."""
    pg, surf, font = _figure(1500, 520)
    from agents.reference import reference_time

    ref = reference_time(run.stage)
    tel = run.telemetry
    big = pg.font.Font(None, 26)
    head = (
        f"{run.stage}, seed {run.seed}: "
        + (f"{run.stage_time_s:.2f} s" if run.finished else run.end_reason)
        + f" (reference {ref.time_s:.2f} s)"
    )
    surf.blit(big.render(head, True, _AX), (20, 10))
    s, v = tel["progress_m"], tel["speed_mps"]
    vmax = max(float(np.nanmax(v)) if len(v) else 1.0, float(np.max(ref.v_mps)))
    p1 = _Panel(
        surf,
        (70, 70, 600, 380),
        _nice(0, float(ref.stage_s_m[-1])),
        (0, vmax * 1.08),
        ("speed vs distance", "stage distance (m)", "m/s"),
        font,
    )
    p1.line(ref.stage_s_m, ref.v_mps, _COLORS[1], 2)
    p1.line(s, v, _COLORS[0], 2)
    p1.legend([("run", _COLORS[0]), ("reference", _COLORS[1])])
    g = 3.72
    mu_g = 0.7 * g
    along, alat = tel["a_long_mps2"], tel["a_lat_mps2"]
    lim = max(1.3 * mu_g, float(np.nanpercentile(np.abs(np.r_[along, alat]), 99)) * 1.1)
    p2 = _Panel(
        surf,
        (760, 70, 340, 380),
        (-lim, lim),
        (-lim, lim),
        ("g-g diagram", "lateral (m/s^2, + left)", "longitudinal"),
        font,
        equal=True,
    )
    th = np.linspace(0, 2 * np.pi, 100)
    p2.line(mu_g * np.cos(th), mu_g * np.sin(th), _COLORS[1], 1)
    p2.line(alat[::2], along[::2], _COLORS[0], 1, dots=True)
    p2.legend([("mu g (gravel)", _COLORS[1])])
    u = tel["usage"]
    p3 = _Panel(
        surf,
        (1160, 70, 320, 380),
        _nice(0, float(ref.stage_s_m[-1])),
        (0, max(1.2, float(np.nanpercentile(u, 99)) * 1.05)),
        ("friction-circle usage", "stage distance (m)", "|a| / mu g"),
        font,
    )
    p3.line([p3.x0, p3.x1], [1, 1], _COLORS[1], 1)
    p3.line(s, u, _COLORS[0], 1)
    return _save(pg, surf, path)


def telemetry_plots(res: Any, out_dir: str | Path) -> list[Path]:
    """One telemetry PNG per run of an :class:`agents.evaluate.EvalResult` (recorded)."""
    name = "".join(c if c.isalnum() or c in "-_." else "_" for c in res.agent)
    return [
        telemetry_plot(r, Path(out_dir) / f"{name}-{r.stage}-seed{r.seed}.png")
        for r in res.runs
        if r.telemetry
    ]


def curve_plot(
    series: Sequence[tuple[str, Sequence[float], Sequence[float]]],
    path: str | Path,
    title: str,
    xlabel: str,
    ylabel: str,
    hlines: Sequence[tuple[str, float]] = (),
) -> Path:
    """Line plot of ``(label, x, y)`` series with optional labelled horizontal lines."""
    pg, surf, font = _figure(900, 520)
    xs = np.concatenate([np.asarray(x, float) for _, x, _ in series]) if series else np.zeros(1)
    ys = [np.asarray(y, float) for _, _, y in series] + [np.array([h for _, h in hlines])]
    yall = np.concatenate(ys)
    yall = yall[np.isfinite(yall)]
    ylim = _nice(float(yall.min()), float(yall.max())) if yall.size else (0.0, 1.0)
    p = _Panel(
        surf,
        (80, 60, 780, 390),
        _nice(float(np.nanmin(xs)), float(np.nanmax(xs))),
        ylim,
        (title, xlabel, ylabel),
        font,
    )
    items = []
    for i, (label, x, y) in enumerate(series):
        c = _COLORS[i % len(_COLORS)]
        p.line(x, y, c, 2)
        p.line(x, y, c, 3, dots=True)
        items.append((label, c))
    for j, (label, h) in enumerate(hlines):
        c = _COLORS[(len(series) + j) % len(_COLORS)]
        p.line([p.x0, p.x1], [h, h], c, 1)
        items.append((label, c))
    p.legend(items)
    return _save(pg, surf, path)


def validation_curve(
    log: str | Path, path: str | Path, n_stages: int, xlabel: str, title: str | None = None
) -> Path | None:
    """A training run's ``eval_log.csv`` as its learning curve: the evaluation finish rate
    and (where the log has it) the median score against env steps (``None`` when the log has
    no row). ``title``: default, the validation stages'."""
    log = Path(log)
    if not log.exists():
        return None
    rows = np.atleast_1d(np.genfromtxt(log, delimiter=",", names=True, dtype=None, encoding=None))
    if rows.size == 0:
        return None
    x = np.asarray(rows["env_steps"], float) / 1e6
    series = [("finish rate", x, np.asarray(rows["finish_rate"], float))]
    score = np.asarray(rows["median_score"], float)
    if np.isfinite(score).any():
        series.append(("median score (ref / time)", x, score))
    return curve_plot(
        series,
        path,
        title=title or f"validation ({n_stages} held-out generated stages)",
        xlabel=xlabel,
        ylabel="finish rate / score" if len(series) > 1 else "finish rate",
        hlines=[("reference", 1.0)] if len(series) > 1 else [],
    )
