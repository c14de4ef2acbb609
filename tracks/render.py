"""Stage maps: ``python -m tracks.render STAGE --out map.png`` and the library grid.

Uses Pillow, imported only here (``import tracks`` never imports it); presentation only, so
unlike the stage data it may use libm. docs/stages.md shows the commands and the map key.
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

import numpy as np

from tracks import surfaces as _surf
from tracks.bake import bake
from tracks.io import list_stages, load_stage
from tracks.stage import Stage

#: Order of the library grid (stages not listed here follow alphabetically).
GRID_ORDER = (
    "opener",
    "switchbacks",
    "sweepers",
    "mixed-surface",
    "forest",
    "rallycross",
    "proving-ground",
    "skidpad",
)

_LOW = np.array([92, 40, 28], np.float64)
_HIGH = np.array([226, 178, 132], np.float64)


def _font(size: int):
    from PIL import ImageFont

    try:
        return ImageFont.load_default(size=size)
    except TypeError:  # Pillow < 10.1
        return ImageFont.load_default()


class _MapView:
    """Where a stage map's metres land in its (supersampled) image."""

    def __init__(self, stage: Stage, size: int, title: bool):
        self.ss = 2  # supersampling
        self.W = self.H = size * self.ss
        self.top = int(0.11 * self.H) if title else 0
        p = stage.path
        pad = float(np.max(p.half_width_m)) + 25.0
        xmin, xmax = float(p.x_m.min()) - pad, float(p.x_m.max()) + pad
        ymin, ymax = float(p.y_m.min()) - pad, float(p.y_m.max()) + pad
        self.map_h = self.H - self.top
        self.mpp = max((xmax - xmin) / self.W, (ymax - ymin) / self.map_h)  # metres per pixel
        cx, cy = 0.5 * (xmin + xmax), 0.5 * (ymin + ymax)
        self.vx0 = cx - 0.5 * self.W * self.mpp
        self.vy1 = cy + 0.5 * self.map_h * self.mpp

    def px(self, x, y):
        return ((x - self.vx0) / self.mpp, self.top + (self.vy1 - y) / self.mpp)


def render_stage(stage: Stage, size: int = 720, title: bool = True):
    """A stage's map, ``size`` x ``size`` pixels, with the title bar and legend if ``title``:
    a ``PIL.Image.Image`` (RGB)."""
    from PIL import Image, ImageDraw

    v = _MapView(stage, size, title)
    img_arr = np.full((v.H, v.W, 3), 24, np.uint8)
    img_arr[v.top :] = np.asarray(_terrain_view(stage, v))
    img = Image.fromarray(img_arr)
    draw = ImageDraw.Draw(img)
    fnt = _font(13 * v.ss)
    _draw_road(draw, stage, v)
    _draw_marks(draw, stage, v, fnt)
    _draw_scale(draw, v, fnt)
    if title:
        _draw_title(draw, stage, v, fnt)
    return img.resize((size, size), Image.LANCZOS)


def _terrain_view(stage: Stage, v: _MapView):
    """The baked terrain, elevation-coloured and hill-shaded, resampled into the map (dimmed
    outside the baked grid)."""
    from PIL import Image

    cell = float(min(4.0, max(1.0, math.floor(v.mpp * v.ss))))
    terr = bake(stage, cell_m=cell)
    h = terr.heights_m
    gy, gx = np.gradient(h, terr.cell_m)
    az, alt = math.radians(315.0), math.radians(40.0)
    lx, ly, lz = math.cos(alt) * math.cos(az), math.cos(alt) * math.sin(az), math.sin(alt)
    nrm = np.sqrt(gx * gx + gy * gy + 1.0)
    shade = np.clip((-gx * lx - gy * ly + lz) / nrm, 0.0, 1.0)
    lo, hi = float(np.percentile(h, 1)), float(np.percentile(h, 99))
    if hi - lo < 1.0:  # flat: mid colour
        lo, hi = lo - 1.0, hi + 1.0
    e = np.clip((h - lo) / (hi - lo), 0.0, 1.0)[..., None]
    rgb = _LOW + (_HIGH - _LOW) * e
    rgb = rgb * (0.45 + 0.75 * shade[..., None])
    off = terr.surface_ids == _surf.OFFROAD_ID
    rgb[~off] = rgb[~off] * 0.9
    rgb = np.clip(rgb, 0, 255).astype(np.uint8)
    # resample the terrain image into the view (bilinear)
    ny_t = h.shape[0]
    timg = Image.fromarray(np.ascontiguousarray(rgb[::-1]))
    y_top = terr.y0_m + (ny_t - 1) * terr.cell_m
    k = v.mpp / terr.cell_m
    affine = (k, 0.0, (v.vx0 - terr.x0_m) / terr.cell_m, 0.0, k, (y_top - v.vy1) / terr.cell_m)
    fill = tuple(int(c) for c in rgb.reshape(-1, 3).mean(axis=0) * 0.55)
    return timg.transform(
        (v.W, v.map_h), Image.AFFINE, affine, resample=Image.BILINEAR, fillcolor=fill
    )


def _draw_road(draw, stage: Stage, v: _MapView) -> None:
    """The road: a dark outline, then each sample's surface colour."""
    p, px, ss = stage.path, v.px, v.ss
    nx_, ny_ = -p.ty, p.tx
    hw = p.half_width_m
    w_px = 2.0 * float(np.median(hw)) / v.mpp
    if w_px >= 4.0:
        for grow, col in ((1.5 * ss * v.mpp, (30, 22, 18)), (0.0, None)):
            lt = list(zip(*px(p.x_m + nx_ * (hw + grow), p.y_m + ny_ * (hw + grow)), strict=True))
            rt = list(zip(*px(p.x_m - nx_ * (hw + grow), p.y_m - ny_ * (hw + grow)), strict=True))
            for i in range(p.n_samples - 1):
                c = col or _surf.SURFACES[int(p.surface[i])].color
                draw.polygon([lt[i], lt[i + 1], rt[i + 1], rt[i]], fill=c)
    else:
        pts = [px(x, y) for x, y in zip(p.x_m, p.y_m, strict=True)]
        draw.line(pts, fill=(30, 22, 18), width=int(4 * ss + 2), joint="curve")
        for i in range(p.n_samples - 1):
            draw.line(
                [pts[i], pts[i + 1]],
                fill=_surf.SURFACES[int(p.surface[i])].color,
                width=int(3 * ss),
            )


def _label(draw, at, text: str, fill, fnt) -> None:
    draw.text(at, text, fill=fill, font=fnt, stroke_width=2, stroke_fill=(0, 0, 0))


def _draw_marks(draw, stage: Stage, v: _MapView, fnt) -> None:
    """Checkpoints, features, the start and finish lines and the direction arrow."""
    p, px, ss = stage.path, v.px, v.ss

    def across(s, col, width, ext=1.8):
        x, y = p.point_at(s)
        tx, ty = p.tangent_at(s)
        r = max(float(p.half_width_at(s)) * ext, 7.0 * ss * v.mpp)
        a = px(float(x - ty * r), float(y + tx * r))
        b = px(float(x + ty * r), float(y - tx * r))
        draw.line([a, b], fill=col, width=width)
        return a, b

    for k, c in enumerate(stage.checkpoints_m):
        a, _ = across(c, (250, 220, 40), 3 * ss)
        _label(draw, (a[0] + 3 * ss, a[1] - 8 * ss), str(k + 1), (250, 230, 80), fnt)
    for f in stage.features:
        _draw_feature(draw, stage, v, f)
    if not stage.closed:
        a, b = across(stage.finish_s_m, (255, 255, 255), 5 * ss)

        def on_line(t):
            return (a[0] + (b[0] - a[0]) * t, a[1] + (b[1] - a[1]) * t)

        n_chk = 6
        for k in range(1, n_chk, 2):  # the chequers
            draw.line([on_line(k / n_chk), on_line((k + 1) / n_chk)], fill=(0, 0, 0), width=5 * ss)
        _label(draw, (b[0] + 3 * ss, b[1] - 8 * ss), "F", (255, 255, 255), fnt)
    a, b = across(stage.start_s_m, (40, 220, 60), 5 * ss)
    start = "S" if not stage.closed else "S/F"
    _label(draw, (b[0] + 3 * ss, b[1] - 8 * ss), start, (120, 255, 120), fnt)
    # direction arrow just after the start
    s_arrow = stage.start_s_m + min(40.0, 0.05 * p.length_m)
    x0, y0 = p.point_at(stage.start_s_m + 8 * ss * v.mpp)
    x1, y1 = p.point_at(s_arrow)
    a0, a1 = px(float(x0), float(y0)), px(float(x1), float(y1))
    draw.line([a0, a1], fill=(40, 220, 60), width=2 * ss)
    ang = math.atan2(a1[1] - a0[1], a1[0] - a0[0])
    r = 6 * ss
    draw.polygon(
        [
            a1,
            (a1[0] - r * math.cos(ang - 0.5), a1[1] - r * math.sin(ang - 0.5)),
            (a1[0] - r * math.cos(ang + 0.5), a1[1] - r * math.sin(ang + 0.5)),
        ],
        fill=(40, 220, 60),
    )


def _draw_feature(draw, stage: Stage, v: _MapView, f) -> None:
    """A jump (orange triangle), crest (white chevron) or dip (blue chevron) beside the road."""
    p, ss = stage.path, v.ss
    x, y = p.point_at(f.s_m)
    tx, ty = p.tangent_at(f.s_m)
    off = float(p.half_width_at(f.s_m)) + 9.0 * ss * v.mpp
    qx, qy = v.px(float(x - ty * off), float(y + tx * off))
    r = 6 * ss
    if f.kind == "jump":
        draw.polygon(
            [(qx, qy - r), (qx - r, qy + r * 0.8), (qx + r, qy + r * 0.8)],
            fill=(255, 130, 20),
            outline=(0, 0, 0),
        )
        return
    sgn = -1 if f.kind == "crest" else 1
    col = (255, 255, 255) if f.kind == "crest" else (120, 200, 255)
    draw.line(
        [(qx - r, qy - sgn * r * 0.5), (qx, qy + sgn * r * 0.6), (qx + r, qy - sgn * r * 0.5)],
        fill=col,
        width=2 * ss,
    )


def _draw_scale(draw, v: _MapView, fnt) -> None:
    target = v.W * v.mpp * 0.22
    nice = max(x for x in (10, 20, 50, 100, 200, 250, 500, 1000, 2000) if x <= max(target, 10))
    bl = nice / v.mpp
    ss = v.ss
    yb = v.H - 14 * ss
    draw.rectangle(
        [10 * ss, yb - 4 * ss, 10 * ss + bl, yb], fill=(255, 255, 255), outline=(0, 0, 0)
    )
    _label(draw, (14 * ss + bl, yb - 12 * ss), f"{nice} m", (255, 255, 255), fnt)


def _draw_title(draw, stage: Stage, v: _MapView, fnt) -> None:
    """The title bar: name, length, rise, width, and the surfaces' legend."""
    p, ss, hw = stage.path, v.ss, stage.path.half_width_m
    draw.rectangle([0, 0, v.W, v.top], fill=(24, 20, 18))
    big = _font(20 * ss)
    if stage.closed:
        info = f"{p.length_m:,.0f} m lap x {stage.laps}"
    else:
        info = f"{stage.timed_length_m:,.0f} m"
    zr = float(p.z_m.max() - p.z_m.min())
    draw.text((10 * ss, 6 * ss), stage.name, fill=(255, 236, 210), font=big)
    draw.text(
        (10 * ss, 32 * ss),
        f"{info}   rise {zr:.0f} m   width {_w(2 * float(hw.min()), 2 * float(hw.max()))}",
        fill=(210, 200, 190),
        font=fnt,
    )
    xl = 10 * ss
    yl = 52 * ss
    for name in stage.surfaces_used:
        sf = _surf.by_name(name)
        draw.rectangle([xl, yl, xl + 12 * ss, yl + 12 * ss], fill=sf.color, outline=(0, 0, 0))
        label = f"{sf.label} {sf.mu:.2f}"
        draw.text((xl + 16 * ss, yl - 1 * ss), label, fill=(230, 220, 210), font=fnt)
        xl += int(draw.textlength(label, font=fnt)) + 30 * ss


def _w(lo: float, hi: float) -> str:
    f = (lambda v: f"{v:.0f}") if lo == round(lo) and hi == round(hi) else (lambda v: f"{v:.1f}")
    return f"{f(lo)} m" if abs(hi - lo) < 0.05 else f"{f(lo)}-{f(hi)} m"


def render_grid(names: list[str] | None = None, tile: int = 480, cols: int = 3):
    """A grid of stage maps (default: the whole library plus ``gen-42``)."""
    from PIL import Image

    if names is None:
        lib = list_stages()
        names = [n for n in GRID_ORDER if n in lib] + [n for n in lib if n not in GRID_ORDER]
        names.append("gen-42")
    rows = (len(names) + cols - 1) // cols
    gap = 6
    out = Image.new(
        "RGB", (cols * tile + (cols + 1) * gap, rows * tile + (rows + 1) * gap), (12, 10, 9)
    )
    for k, n in enumerate(names):
        im = render_stage(load_stage(n), size=tile)
        r, c = divmod(k, cols)
        out.paste(im, (gap + c * (tile + gap), gap + r * (tile + gap)))
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m tracks.render", description=__doc__.split("\n")[0])
    ap.add_argument("stage", nargs="?", help="library name, gen-<seed> or a .toml path")
    ap.add_argument("--out", "-o", help="output PNG (default <stage>.png)")
    ap.add_argument("--size", type=int, default=720, help="image size in pixels")
    ap.add_argument("--grid", metavar="PNG", help="write the library grid to this PNG")
    ap.add_argument("--tile", type=int, default=480, help="grid tile size in pixels")
    args = ap.parse_args(argv)
    if args.grid:
        img = render_grid(tile=args.tile)
        from PIL import Image

        img = img.quantize(colors=256, method=Image.Quantize.FASTOCTREE)
        Path(args.grid).parent.mkdir(parents=True, exist_ok=True)
        img.save(args.grid, optimize=True)
        print(f"wrote {args.grid}")
        return 0
    if not args.stage:
        ap.error("give a STAGE or --grid")
    from tracks.errors import TracksError

    try:
        st = load_stage(args.stage)
    except TracksError as e:  # a bad file or a name that is no stage
        print(f"error: {e}", file=sys.stderr)
        return 2
    out = args.out or f"{st.name}.png"
    render_stage(st, size=args.size).save(out)
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
