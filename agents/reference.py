"""Reference stage time: a quasi-steady-state point-mass lap-time solver, a reference rather
than a strict lower bound (the model, what it ignores, how it compares with the simulator:
docs/agents.md, "Reference time").

Usage::

    from agents.reference import reference_time
    ref = reference_time("opener")            # racing line
    ref.time_s, ref.stage_s_m, ref.v_mps
    reference_time("opener", line="centerline").time_s
"""

from __future__ import annotations

import math
from dataclasses import astuple, dataclass, field
from typing import Any

import numba
import numpy as np

from physics import ROVER, VehicleParams

#: Lateral clearance kept between the car's body side and the road edge on the racing line (m).
LINE_MARGIN_M = 0.5
#: Spacing of the racing-line optimisation grid (m).
LINE_SPACING_M = 2.0
#: Blend factors between the centerline (0) and the minimum-curvature line (1) tried for the
#: racing line; the fastest wins (``ReferenceProfile.extra["blend"]``).
RACING_BLENDS = (0.0, 0.2, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0)


# ------------------------------------------------------------------------------ vehicle model
@dataclass(frozen=True, slots=True)
class PointMass:
    """The point-mass quantities the solver uses (SI units), derived from a
    :class:`VehicleParams`; every field: docs/agents.md, "Reference time"."""

    mass_kg: float
    g_mps2: float
    mu_base: float
    load_sensitivity: float
    load_ratio_static: float
    transfer_per_g: float
    drive_force_n: float
    power_w: float
    drive_cap: float
    vmax_mps: float
    vmax_band_mps: float
    crr: float
    brake_force_n: float
    abs_fraction: float

    @classmethod
    def from_vehicle(cls, v: VehicleParams | None = None) -> PointMass:
        v = ROVER if v is None else v
        n = len(v.wheels)
        half_track = max(1e-3, sum(abs(w.y_m) for w in v.wheels) / n)
        h = max(0.0, v.static_ride_height_m - v.static_sag_m)
        drive_force, power, vmax = v.drive_force_n, v.power_w, v.top_speed_mps
        driven = [w for w in v.wheels if w.driven]
        drive_cap = v.drive_cap
        if v.extended and driven:
            # only the driven wheels' share of the static load can push
            loads = v.static_loads_n()
            share = sum(ld for ld, w in zip(loads, v.wheels, strict=True) if w.driven)
            drive_cap = v.drive_cap * share / float(loads.sum())
        dt = v.drivetrain
        if dt is not None and driven:
            # the engine as the point mass sees it: first-gear force at the wheels, peak
            # power on the curve (held to the rev limit), top speed at the limit in top gear
            r = sum(w.radius_m for w in driven) / len(driven)
            rpm_to_w = 2.0 * np.pi / 60.0
            peak_tq = max(t for _, t in dt.torque_curve)
            drive_force = peak_tq * dt.gears[0] * dt.final_drive / r
            pts = [*dt.torque_curve, (dt.rev_limit_rpm, dt.torque_curve[-1][1])]
            power = max(rpm * rpm_to_w * t for rpm, t in pts)
            vmax = min(
                v.top_speed_mps, dt.rev_limit_rpm * rpm_to_w / (dt.gears[-1] * dt.final_drive) * r
            )
        return cls(
            mass_kg=v.mass_kg,
            g_mps2=v.gravity_mps2,
            mu_base=v.mu_base * v.grip_wear * v.grip_damage,
            load_sensitivity=v.load_sensitivity,
            load_ratio_static=v.mass_kg * v.gravity_mps2 / n / v.load_ref_n,
            transfer_per_g=h / half_track,
            drive_force_n=drive_force,
            power_w=power,
            drive_cap=drive_cap,
            vmax_mps=vmax,
            vmax_band_mps=v.top_speed_band_mps,
            crr=v.rolling_resistance,
            brake_force_n=v.brake_force_n,
            abs_fraction=v.abs_fraction,
        )

    def pack(self) -> np.ndarray:
        """The fields in order, as the compiled solver reads them (``pm[0]`` the mass, ...)."""
        return np.array(astuple(self), dtype=np.float64)


@numba.njit(cache=True)
def _load_factor(x, r0, k):
    """Load-weighted mean load-sensitivity factor of an outer/inner wheel pair at transfer x."""
    if x > 1.0:
        x = 1.0
    ro = r0 * (1.0 + x)
    ri = r0 * (1.0 - x)
    fo = 1.0 - k * max(0.0, ro - 1.0)
    fi = 1.0 - k * max(0.0, ri - 1.0)
    return max(0.0, 0.5 * (fo * (1.0 + x) + fi * (1.0 - x)))


@numba.njit(cache=True)
def _mu_eff_at(mu, a_lat, pm):
    """Effective mu of the whole car at lateral acceleration a_lat (m/s^2)."""
    g = pm[1]
    x = pm[5] * a_lat / g
    return mu * _load_factor(x, pm[4], pm[3])


@numba.njit(cache=True)
def _corner_limit(mu, kappa, pm):
    """Steady-state speed limit in a corner of curvature kappa: v^2 |kappa| = mu_eff(a) g."""
    g = pm[1]
    ak = abs(kappa)
    if ak < 1e-9:
        return 1e9
    a = mu * g * _load_factor(0.0, pm[4], pm[3])
    for _ in range(60):  # fixed point: a = mu_eff(a) g (contractive: the factor varies slowly)
        a_new = _mu_eff_at(mu, a, pm) * g
        if abs(a_new - a) < 1e-12:
            a = a_new
            break
        a = a_new
    return math.sqrt(a / ak)


@numba.njit(cache=True)
def _drive_accel(v, mu, a_lat, grade, pm):
    """Best forward acceleration at speed v while holding a_lat (m/s^2).

    Rolling resistance acts inside the tire force (as in the physics): the net longitudinal
    tire force ``drive - crr m g`` shares the friction circle with the lateral force.
    """
    m = pm[0]
    g = pm[1]
    mu_e = _mu_eff_at(mu, a_lat, pm)
    fmax = mu_e * m * g
    f = pm[6]
    if v > 0.1 and pm[7] < f * v:
        f = pm[7] / v
    if v > pm[9] - pm[10]:
        fade = (pm[9] - v) / pm[10]
        f = f * max(0.0, fade)
    f = min(f, pm[8] * fmax) - pm[11] * m * g
    rem = fmax * fmax - (m * a_lat) * (m * a_lat)
    f = min(f, math.sqrt(rem) if rem > 0.0 else 0.0)
    return f / m - g * grade


@numba.njit(cache=True)
def _brake_decel(mu, a_lat, grade, pm):
    m = pm[0]
    g = pm[1]
    mu_e = _mu_eff_at(mu, a_lat, pm)
    fmax = mu_e * m * g
    f = min(pm[12] + pm[11] * m * g, pm[13] * fmax)
    rem = fmax * fmax - (m * a_lat) * (m * a_lat)
    f = min(f, math.sqrt(rem) if rem > 0.0 else 0.0)
    return f / m + g * grade


@numba.njit(cache=True)
def _profile(ds, kappa, mu, grade, pm, v_start, v_out):
    """Forward/backward passes over nodes 0..n-1 (ds[i] = distance from node i to i+1)."""
    n = kappa.shape[0]
    vlim = np.empty(n)
    for i in range(n):
        vlim[i] = min(_corner_limit(mu[i], kappa[i], pm), pm[9])
    # forward: the best acceleration from each node, backward: the hardest braking into each
    v_out[0] = min(v_start, vlim[0])
    for i in range(n - 1):
        v = _advance(v_out[i], ds[i], mu[i], kappa[i], grade[i], pm, True)
        v_out[i + 1] = min(v, vlim[i + 1])
    for i in range(n - 2, -1, -1):
        v = _advance(v_out[i + 1], ds[i], mu[i], kappa[i], grade[i], pm, False)
        if v < v_out[i]:
            v_out[i] = v


@numba.njit(cache=True)
def _rate(v, mu, kappa, grade, pm, forward):
    """d(v^2)/ds / 2: the acceleration along the path (backward: the braking deceleration)."""
    if forward:
        return _drive_accel(v, mu, v * v * abs(kappa), grade, pm)
    return _brake_decel(mu, v * v * abs(kappa), grade, pm)


@numba.njit(cache=True)
def _advance(v, seg, mu, kappa, grade, pm, forward):
    """Speed after ``seg`` metres: RK2 in v^2 with steps small where the speed changes fast."""
    left = seg
    while left > 0.0:
        a = _rate(v, mu, kappa, grade, pm, forward)
        h = min(left, 0.25)
        if a != 0.0:
            h = min(h, max(1e-6, 0.01 * (v * v + 1e-2) / abs(a)))
        w2 = v * v + a * h
        w = math.sqrt(w2) if w2 > 0.0 else 0.0
        a2 = _rate(w, mu, kappa, grade, pm, forward)
        v2 = v * v + 2.0 * a2 * h
        v = math.sqrt(v2) if v2 > 0.0 else 0.0
        left -= h
        if v == 0.0 and a2 <= 0.0:
            break
    return v


def speed_profile(
    ds_m: np.ndarray,
    curvature: np.ndarray,
    mu: np.ndarray | float,
    grade: np.ndarray | float = 0.0,
    vehicle: VehicleParams | PointMass | None = None,
    v_start_mps: float = 0.0,
    periodic: bool = False,
) -> tuple[np.ndarray, float]:
    """The quasi-steady speed profile over a polyline of nodes.

    Args:
        ds_m: (n-1,) distance between consecutive nodes (m).
        curvature: (n,) path curvature at each node (1/m).
        mu: (n,) or scalar surface grip multiplier (times the vehicle's base mu).
        grade: (n,) or scalar dz/ds (uphill positive).
        vehicle: the vehicle (default the rover).
        v_start_mps: speed at node 0 (a standing start by default).
        periodic: the path is one lap of a loop driven at a flying start: node n-1 joins node 0;
            the profile is the steady one (three laps solved, the middle one returned).

    Returns:
        ``(v, time_s)``: (n,) speed at each node (m/s) and the time from node 0 to node n-1.
    """
    pm = (vehicle if isinstance(vehicle, PointMass) else PointMass.from_vehicle(vehicle)).pack()
    kappa = np.ascontiguousarray(curvature, dtype=np.float64)
    n = kappa.shape[0]
    ds = np.ascontiguousarray(ds_m, dtype=np.float64)
    if ds.shape != (n - 1,):
        raise ValueError(f"ds_m must have shape ({n - 1},), got {ds.shape}")
    mu_a = np.broadcast_to(np.asarray(mu, dtype=np.float64), (n,)) * pm[2]
    gr = np.broadcast_to(np.asarray(grade, dtype=np.float64), (n,)).copy()
    if periodic:
        # three laps (node n-1 == node 0 of the next lap), keep the middle
        k3, m3, g3 = (np.concatenate([a[:-1]] * 3 + [a[-1:]]) for a in (kappa, mu_a, gr))
        d3 = np.concatenate([ds] * 3)
        v3 = np.empty(k3.shape[0])
        _profile(d3, k3, m3, g3, pm, 1e9, v3)
        v = v3[n - 1 : 2 * n - 1].copy()
    else:
        v = np.empty(n)
        _profile(ds, kappa, mu_a, gr, pm, float(v_start_mps), v)
    return v, float(np.sum(_segment_times(ds, v)))


def _segment_times(ds: np.ndarray, v: np.ndarray) -> np.ndarray:
    """(n-1,) time (s) over each segment at the mean of its end speeds (inf at a standstill)."""
    vs = v[:-1] + v[1:]
    return np.where(vs > 0.0, 2.0 * ds / np.maximum(vs, 1e-300), np.inf)


# ------------------------------------------------------------------------------ racing line
@numba.njit(cache=True)
def _residual_of(j, k, n, closed):
    """The residual ``t = j + 1 - k`` that node ``j`` enters as its ``k``-th neighbour
    (wrapped on a loop), or -1 past the ends of an open path."""
    t = j + 1 - k
    if closed:
        return t % n
    return t if 0 <= t < n else -1


@numba.njit(cache=True)
def _banded_lsq_sor(r, jac, lam, lo, hi, closed, sweeps, omega):
    """Projected SOR for min sum_t (r_t + sum_k jac[t, k] d_(t-1+k))^2 + lam |d|^2, lo <= d <= hi.

    ``jac[t, k]`` is the derivative of residual t with respect to node t - 1 + k (k = 0, 1, 2).
    Open paths: residuals 0 and n-1 are unused (their rows must be zero).
    """
    n = r.shape[0]
    res = r.copy()
    d = np.zeros(n)
    for _ in range(sweeps):
        change = 0.0
        for j in range(n):
            num = lam * d[j]
            den = lam
            for k in range(3):
                t = _residual_of(j, k, n, closed)
                if t < 0:
                    continue
                c = jac[t, k]
                num += c * res[t]
                den += c * c
            if den <= 0.0:
                continue
            new = d[j] - omega * num / den
            if new < lo[j]:
                new = lo[j]
            elif new > hi[j]:
                new = hi[j]
            step = new - d[j]
            if step != 0.0:
                d[j] = new
                change = max(change, abs(step))
                for k in range(3):
                    t = _residual_of(j, k, n, closed)
                    if t >= 0:
                        res[t] += jac[t, k] * step
        if change < 1e-9:
            break
    return d


def _curv3(ax, ay, bx, by, cx, cy, tiny=1e-12):
    """Signed curvature of the circle through A, B, C (1/m); the product of the triangle's
    sides is taken as at least ``tiny`` (a repeated point, where it is 0, gives 0)."""
    ux, uy = bx - ax, by - ay
    vx, vy = cx - bx, cy - by
    wx, wy = cx - ax, cy - ay
    cross = ux * vy - uy * vx
    den = np.sqrt((ux * ux + uy * uy) * (vx * vx + vy * vy) * (wx * wx + wy * wy))
    return 2.0 * cross / np.maximum(den, tiny)


def _curv_and_jac(cx, cy, nx, ny, off, closed):
    """Curvature of the line at every node and its derivative by the three offsets it uses."""
    n = cx.shape[0]
    eps = 1e-3
    im, ip = _neighbours(n, closed)
    px, py = cx + off * nx, cy + off * ny
    pts = [(px[im], py[im]), (px, py), (px[ip], py[ip])]
    nrm = [(nx[im], ny[im]), (nx, ny), (nx[ip], ny[ip])]
    k0 = _curv3(*pts[0], *pts[1], *pts[2])
    jac = np.zeros((n, 3))
    for k in range(3):
        hi = [list(p) for p in pts]
        lo = [list(p) for p in pts]
        hi[k] = [pts[k][0] + eps * nrm[k][0], pts[k][1] + eps * nrm[k][1]]
        lo[k] = [pts[k][0] - eps * nrm[k][0], pts[k][1] - eps * nrm[k][1]]
        jac[:, k] = (_curv3(*hi[0], *hi[1], *hi[2]) - _curv3(*lo[0], *lo[1], *lo[2])) / (2 * eps)
    if not closed:
        k0[0] = k0[-1] = 0.0
        jac[0] = jac[-1] = 0.0
    return k0, jac


def _line_grid(path: Any) -> np.ndarray:
    """Arc lengths of a uniform grid every ~:data:`LINE_SPACING_M` along a stage path (on
    loops the last node is not repeated)."""
    closed = bool(path.closed)
    length = float(path.length_m)
    n = max(3, round(length / LINE_SPACING_M)) + (0 if closed else 1)
    return np.arange(n) * (length / (n if closed else n - 1))


def racing_line(stage: Any):
    """Minimum-curvature line inside the road: offsets from the centerline on the grid of
    :func:`_line_grid`, kept the rover's body half width plus :data:`LINE_MARGIN_M` from the
    edges.

    Args:
        stage: a :class:`tracks.Stage`.

    Returns:
        ``(s, offset)``: (n,) centerline arc length of the grid nodes and (n,) lateral offset
        of the line (m, + left). On loops the last node is not repeated.
    """
    path = stage.path
    closed = bool(path.closed)
    length = float(path.length_m)
    s = _line_grid(path)
    n = len(s)
    cx, cy, tx, ty, hw = _sample(path, s)
    nx, ny = -ty, tx
    room = np.maximum(hw - (ROVER.body_half_width_m + LINE_MARGIN_M), 0.0)
    lo, hi = -room, room.copy()
    off = np.zeros(n)
    # coarse to fine: the SOR removes short wavelengths fast, a coarse grid the long ones
    for stride in (16, 8, 4, 2, 1):
        if stride > 1 and n // stride < 8:
            continue
        sel = np.arange(0, n, stride)
        if not closed and sel[-1] != n - 1:
            sel = np.append(sel, n - 1)
        o = off[sel].copy()
        xs_, ys_, nxs, nys = cx[sel], cy[sel], nx[sel], ny[sel]
        for _ in range(8):  # Gauss-Newton on sum kappa^2 (damped), boxes kept exactly
            kap, jac = _curv_and_jac(xs_, ys_, nxs, nys, o, closed)
            d = _banded_lsq_sor(kap, jac, 1e-6, lo[sel] - o, hi[sel] - o, closed, 3000, 1.5)
            o = np.clip(o + d, lo[sel], hi[sel])
            if np.max(np.abs(d)) < 1e-3:
                break
        # interpolate back onto the full grid
        if closed:
            xs = np.append(s[sel], length)
            off = np.interp(s, xs, np.append(o, o[0]))
        else:
            off = np.interp(s, s[sel], o)
        off = np.clip(off, lo, hi)
    return s, off


def _sample(path: Any, s: np.ndarray):
    ps = np.asarray(path.s_m)
    cx = np.interp(s, ps, path.x_m)
    cy = np.interp(s, ps, path.y_m)
    tx = np.interp(s, ps, path.tx)
    ty = np.interp(s, ps, path.ty)
    nrm = np.sqrt(tx * tx + ty * ty)
    hw = np.interp(s, ps, path.half_width_m)
    return cx, cy, tx / nrm, ty / nrm, hw


def _neighbours(n: int, closed: bool) -> tuple[np.ndarray, np.ndarray]:
    """Indices of each node's previous and next node (an open path's ends their own)."""
    if closed:
        return np.roll(np.arange(n), 1), np.roll(np.arange(n), -1)
    return np.r_[0, np.arange(n - 1)], np.r_[np.arange(1, n), n - 1]


def _menger(px: np.ndarray, py: np.ndarray, closed: bool) -> np.ndarray:
    """Signed curvature of the circle through each node and its neighbours (1/m); an open
    path's ends take their neighbour's."""
    im, ip = _neighbours(px.shape[0], closed)
    k = _curv3(px[im], py[im], px, py, px[ip], py[ip], tiny=1e-300)
    if not closed:
        k[[0, -1]] = (k[1], k[-2]) if len(k) >= 3 else 0.0
    return k


# ------------------------------------------------------------------------------ the result
@dataclass(frozen=True, slots=True, eq=False)
class ReferenceProfile:
    """A reference run over the timed part of a stage: its time (s) and, per node, the
    stage position (m), speed (m/s), line, grip, time and accelerations. Every field:
    docs/agents.md, "Reference time"."""

    stage: str
    line: str
    time_s: float
    stage_s_m: np.ndarray
    v_mps: np.ndarray
    curvature: np.ndarray
    x_m: np.ndarray
    y_m: np.ndarray
    offset_m: np.ndarray
    mu: np.ndarray
    time_at_s: np.ndarray
    a_lat_mps2: np.ndarray
    a_long_mps2: np.ndarray
    line_length_m: float
    extra: dict[str, Any] = field(default_factory=dict)


_CACHE: dict[tuple[str, str, str], ReferenceProfile] = {}


def clear_reference_cache() -> None:
    """Forget the reference runs :func:`reference_time` has cached (for timing it afresh)."""
    _CACHE.clear()


def reference_time(
    stage: Any, line: str = "racing", vehicle: VehicleParams | None = None
) -> ReferenceProfile:
    """The reference run of a stage (cached per stage digest, line and vehicle).

    Args:
        stage: a :class:`tracks.Stage` or anything ``tracks.load_stage`` accepts.
        line: ``"racing"`` (minimum-curvature line inside the road) or ``"centerline"``.
        vehicle: the vehicle (default the rover).

    Returns:
        A :class:`ReferenceProfile`; ``.time_s`` is the reference stage time.
    """
    import tracks

    if line not in ("racing", "centerline"):
        raise ValueError(f"line must be 'racing' or 'centerline', got {line!r}")
    if not isinstance(stage, tracks.Stage):
        stage = tracks.load_stage(stage)
    veh = ROVER if vehicle is None else vehicle
    key = (stage.digest(), line, veh.digest())
    if key in _CACHE:
        return _CACHE[key]
    if line == "racing":
        s, off_mc = racing_line(stage)
        # the fastest blend of the minimum-curvature line with the centerline (docs/agents.md)
        runs = {alpha: _run_line(stage, s, alpha * off_mc, veh, line) for alpha in RACING_BLENDS}
        blend = min(runs, key=lambda alpha: runs[alpha].time_s)  # the first of equals
        prof = runs[blend]
        prof.extra.update(blend=blend, blend_times_s={a: p.time_s for a, p in runs.items()})
    else:
        s = _line_grid(stage.path)
        prof = _run_line(stage, s, np.zeros(len(s)), veh, line)
    _CACHE[key] = prof
    return prof


def _run_line(stage: Any, s: np.ndarray, off: np.ndarray, veh: VehicleParams, line: str):
    path = stage.path
    closed = bool(path.closed)
    length = float(path.length_m)
    cx, cy, tx, ty, _ = _sample(path, s)
    px, py = cx - off * ty, cy + off * tx
    kappa = _menger(px, py, closed)
    surf = _surface_grip(path, s)
    grade = np.interp(s, np.asarray(path.s_m), path.grade)
    if closed:
        # rotate the lap to begin at the start line, then repeat it laps times
        s0 = float(stage.start_s_m)
        k0 = int(np.searchsorted(s, s0))
        order = np.r_[np.arange(k0, len(s)), np.arange(0, k0)]
        laps = int(stage.laps)

        def repeat(arr: np.ndarray, step: float) -> np.ndarray:
            # lap j shifted by j * step, closed on the start line
            return np.r_[
                np.concatenate([arr + j * step for j in range(laps)]), arr[0] + laps * step
            ]

        st_s = repeat((s[order] - s0) % length, length)
        lap = [px, py, kappa, surf, grade, off]
        lx, ly, lk, lmu, lg, loff = (repeat(arr[order], 0.0) for arr in lap)
        # the first node is the start line only if s0 is on the grid; shift the coordinate
        st_s = st_s - st_s[0]
    else:
        a, b = float(stage.start_s_m), float(stage.finish_s_m)
        inner = (s > a) & (s < b)
        ends = np.array([a, b])

        def take(arr: np.ndarray) -> np.ndarray:
            e = np.interp(ends, s, arr)
            return np.r_[e[0], arr[inner], e[1]]

        st_s = take(s) - a
        lx, ly, lk, lg, loff = take(px), take(py), take(kappa), take(grade), take(off)
        lmu = np.r_[_surface_grip(path, ends[:1]), surf[inner], _surface_grip(path, ends[1:])]
    seg = np.maximum(np.hypot(np.diff(lx), np.diff(ly)), 1e-6)
    v, t = speed_profile(seg, lk, lmu, lg, veh, v_start_mps=0.0)
    t_at = np.r_[0.0, np.cumsum(_segment_times(seg, v))]
    a_long = np.r_[(v[1:] ** 2 - v[:-1] ** 2) / (2.0 * seg), 0.0]
    return ReferenceProfile(
        stage=stage.name,
        line=line,
        time_s=float(t),
        stage_s_m=np.asarray(st_s, dtype=np.float64),
        v_mps=v,
        curvature=lk,
        x_m=lx,
        y_m=ly,
        offset_m=loff,
        mu=lmu,
        time_at_s=t_at,
        a_lat_mps2=v * v * lk,
        a_long_mps2=a_long,
        line_length_m=float(np.sum(seg)),
    )


def _surface_grip(path: Any, s: np.ndarray) -> np.ndarray:
    from tracks import surfaces

    grip = np.asarray(surfaces.GRIP, dtype=np.float64)
    starts = np.asarray(path.section_start_m, dtype=np.float64)
    ids = np.asarray(path.section_surface)
    k = np.clip(np.searchsorted(starts, np.asarray(s, dtype=np.float64), side="right") - 1, 0, None)
    return grip[ids[k]]
