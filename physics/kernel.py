"""The numba kernels: one call steps a batch of cars through whole substeps. :func:`_substep`
is one substep of one car, phase by phase, each phase a compiled function whose docstring gives
its model; docs/architecture.md ("The substep's phases", "One compiled kernel per model", "The
determinism contract") lists the phases, the switches of :func:`model_switches` and the rules
the arithmetic keeps (``+ - * /``, ``sqrt``, ``floor``, ``physics.mathx``; no allocation).
"""

from __future__ import annotations

import math

import numpy as np
from numba import prange

from physics import layout as L
from physics.curves import family_eval_seg, lateral_curve
from physics.drivetrain import (
    drive_torque_nm,
    engine_rpm_from_wheels,
    update_gearbox,
)
from physics.jit import njit, njit_inner
from physics.mathx import atan2x, sincosx
from physics.terrain import collect_missing, sample_height, sample_height_grad, tile_at

# Chassis corners are sampled only within this height above the highest ground under a wheel.
_CORNER_MARGIN_M = 1.0
# Largest rise rate of the ground under a wheel (m/s) the dampers respond to.
_MAX_GROUND_RATE = 10.0
# Slip ratios beyond this are evaluated here (every curve has saturated long before).
_MAX_SLIP_RATIO = 10.0
# Coupling used for a locked differential (N per m/s): stiff enough to be rigid, applied
# implicitly, so any value is stable.
_LOCKED_COUPLING = 1.0e7
# Pass 1's damping matrix and vector when it stops early for a missing terrain tile.
_ZERO9 = (0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0)
_ZERO3 = (0.0, 0.0, 0.0)


@njit_inner(_nrt=False)
def rotation_of(s, k):
    """Body->world rotation matrix of car ``k`` from its quaternion, row-major (r00 .. r22)."""
    qw = s[k, L.QUAT_W]
    qx = s[k, L.QUAT_X]
    qy = s[k, L.QUAT_Y]
    qz = s[k, L.QUAT_Z]
    return (
        1.0 - 2.0 * (qy * qy + qz * qz),
        2.0 * (qx * qy - qw * qz),
        2.0 * (qx * qz + qw * qy),
        2.0 * (qx * qy + qw * qz),
        1.0 - 2.0 * (qx * qx + qz * qz),
        2.0 * (qy * qz - qw * qx),
        2.0 * (qx * qz - qw * qy),
        2.0 * (qy * qz + qw * qx),
        1.0 - 2.0 * (qx * qx + qy * qy),
    )


@njit(cache=True, _nrt=False)
def load_sensitivity_factor(load_n, load_ref_n, sensitivity):
    """mu multiplier 1 - k max(0, N/N_ref - 1), floored at 0: heavily loaded tires grip less."""
    over = load_n / load_ref_n - 1.0
    if over < 0.0:
        over = 0.0
    f = 1.0 - sensitivity * over
    return f if f > 0.0 else 0.0


@njit_inner(_nrt=False, forceinline=True)
def _clamp(v, lim):
    """``v`` limited to [-lim, lim]."""
    if v > lim:
        return lim
    if v < -lim:
        return -lim
    return v


@njit_inner(_nrt=False, forceinline=True)
def _toward_zero(v, d):
    """``v`` moved ``d`` >= 0 toward zero, stopping at zero."""
    if v > d:
        return v - d
    if v < -d:
        return v + d
    return 0.0


@njit_inner(_nrt=False, forceinline=True)
def _circle_left(fx, fmax):
    """What the longitudinal force ``fx`` leaves of the friction circle of radius ``fmax``."""
    rem = fmax * fmax - fx * fx
    return math.sqrt(rem) if rem > 0.0 else 0.0


@njit_inner(_nrt=False, forceinline=True)
def _lateral_remainder(fx, fy_des, fmax):
    """The lateral force opposing ``fy_des`` (the curve's demand), within what the
    longitudinal force ``fx`` leaves of the friction circle of radius ``fmax``."""
    budget = _circle_left(fx, fmax)
    if fy_des > budget:
        fy = -budget
    elif fy_des < -budget:
        fy = budget
    else:
        fy = -fy_des
    return fy


@njit_inner(_nrt=False)
def _wear(p, k, s, w, energy_j):
    """Tire wear from sliding energy: the seed's tireMul, floored."""
    rate = p[k, L.PX_WEAR_RATE]
    if rate > 0.0 and energy_j > 0.0:
        v = s[k, L.SXW_WEAR + w] - rate * energy_j * 1.0e-6
        lo = p[k, L.PX_WEAR_FLOOR]
        s[k, L.SXW_WEAR + w] = v if v > lo else lo


@njit_inner(_nrt=False)
def _impact(p, k, s, speed):
    """A touchdown or body impact at ``speed`` (m/s, approach): the seed's gripDmgFactor."""
    if speed > s[k, L.SX_MAX_IMPACT]:
        s[k, L.SX_MAX_IMPACT] = speed
    excess = speed - p[k, L.PX_DAMAGE_SPEED]
    rate = p[k, L.PX_DAMAGE_RATE]
    if excess > 0.0 and rate > 0.0:
        # one landing touches down every wheel: each touchdown carries 1/n of the damage
        v = s[k, L.SX_DAMAGE] - rate * excess / p[k, L.P_N_WHEELS]
        lo = p[k, L.PX_DAMAGE_FLOOR]
        s[k, L.SX_DAMAGE] = v if v > lo else lo


@njit_inner(_nrt=False, forceinline=True)
def _write_tire(s, k, w, fx, fy, fmax, mu, alpha, kappa, om, dt):
    """Write one loaded wheel's readings: forces, usage of the circle, slip, spin."""
    s[k, L.WL_SLIP_ANGLE + w] = alpha
    s[k, L.WL_FX + w] = fx
    s[k, L.WL_FY + w] = fy
    s[k, L.WL_MU + w] = mu
    s[k, L.WL_USAGE + w] = math.sqrt(fx * fx + fy * fy) / fmax if fmax > 0.0 else 0.0
    s[k, L.WL_OMEGA + w] = om
    s[k, L.WL_SPIN + w] += om * dt
    s[k, L.WL_SLIP_RATIO + w] = kappa


@njit_inner(_nrt=False)
def _differentials(p, k, s, nw, dt, tq_front, tq_rear):
    """Limited-slip and locked differentials pull driven wheels' rim speeds together, per axle
    (front = axle 0, rear = every other axle) and then between the axles, as the exact implicit
    relaxation of docs/vehicles.md ("Drivetrain"); open differentials add nothing here."""
    coupling = p[k, L.PX_DIFF_COUPLING]
    vmeans0 = 0.0
    vmeans1 = 0.0
    n0 = 0
    n1 = 0
    for group in range(2):
        typ = int(p[k, L.PX_DIFF_FRONT] if group == 0 else p[k, L.PX_DIFF_REAR])
        n = 0
        vm = 0.0
        for w in range(nw):
            if p[k, L.pw(w, L.PW_DRIVEN)] > 0.5 and (p[k, L.pxw(w, L.PXW_AXLE)] < 0.5) == (
                group == 0
            ):
                n += 1
                vm += s[k, L.WL_OMEGA + w] * p[k, L.pw(w, L.PW_RADIUS)]
        if n == 0:
            continue
        vm = vm / n
        if group == 0:
            vmeans0 = vm
            n0 = n
        else:
            vmeans1 = vm
            n1 = n
        s[k, L.SX_AXLE_SPEED_F + group] = vm
        if n < 2 or typ == L.DIFF_OPEN:
            continue
        c = _LOCKED_COUPLING if typ == L.DIFF_LOCKED else coupling
        cap = abs(tq_front if group == 0 else tq_rear)
        _couple(p, k, s, nw, dt, group, vm, c, typ == L.DIFF_LIMITED, cap, 1.0)
    ctyp = int(p[k, L.PX_DIFF_CENTRE])
    if n0 > 0 and n1 > 0 and ctyp != L.DIFF_OPEN:
        c = _LOCKED_COUPLING if ctyp == L.DIFF_LOCKED else coupling
        vmid = (n0 * vmeans0 + n1 * vmeans1) / (n0 + n1)
        _couple(p, k, s, nw, dt, 0, vmid - vmeans0, c, ctyp == L.DIFF_LIMITED, abs(tq_front), -n0)
        _couple(p, k, s, nw, dt, 1, vmid - vmeans1, c, ctyp == L.DIFF_LIMITED, abs(tq_rear), -n1)


@njit_inner(_nrt=False)
def _couple(p, k, s, nw, dt, group, target, c, limited, cap, mode):
    """Relax the group's driven wheels toward ``target`` rim speed (mode 1.0), or shift them all
    by a share of ``target`` (mode = -n: the centre differential moving a whole axle of n)."""
    for w in range(nw):
        if not (
            p[k, L.pw(w, L.PW_DRIVEN)] > 0.5 and (p[k, L.pxw(w, L.PXW_AXLE)] < 0.5) == (group == 0)
        ):
            continue
        r = p[k, L.pw(w, L.PW_RADIUS)]
        inertia = p[k, L.pxw(w, L.PXW_INERTIA)]
        if mode > 0.0:
            d = s[k, L.WL_OMEGA + w] * r - target
            dd = d - d / (1.0 + c * dt * r * r / inertia)
        else:
            # the whole axle (n wheels) is the inertia being moved
            n = -mode
            dd = -(target - target / (1.0 + c * dt * r * r / (inertia * n)))
        if limited:
            dd = _clamp(dd, cap * dt * r / inertia)
        s[k, L.WL_OMEGA + w] -= dd / r


@njit_inner(_nrt=False)
def _vehicle_extras(p, k, s, motion, grounded, drive, acc, dt):
    """Whole-vehicle terms of extended vehicles: the arcade model's lumped forces, drift
    assist, two-wheeler lean stabilisation and the coupling differentials.

    ``motion`` is (vbx, vby, wx, wz, r21, r22, steering angle), ``grounded`` (grounded wheels,
    total load, summed rear slip angle, rear wheels), ``drive`` what :func:`_drive` returned
    and ``acc`` (tqx, tqz, fbx, fby) so far. Returns ``acc`` with these terms added.
    """
    vbx, vby, wx, wz, r21, r22, delta = motion
    n_grounded, total_load, rear_alpha, n_rear = grounded
    fdrive, _, _, _, tq_front, tq_rear = drive
    tqx, tqz, fbx, fby = acc
    model = int(p[k, L.P_TIRE_MODEL])
    has_dt = p[k, L.PX_DRIVETRAIN] > 0.5
    nw = int(p[k, L.P_N_WHEELS])
    brake = s[k, L.CMD_BRAKE] * p[k, L.P_BRAKE_FORCE]
    m = p[k, L.P_MASS]
    izz = p[k, L.P_IZZ]
    wb = p[k, L.PX_WHEELBASE]
    if model == L.TIRE_ARCADE:
        if n_grounded > 0:
            gfrac = n_grounded / nw
            # throttle pushes and the brake holds, at the CG along the forward axis
            resist = brake + p[k, L.P_CRR] * total_load
            stop = abs(vbx) * m / dt
            if resist > stop:
                resist = stop
            fxa = fdrive
            if vbx > 0.0:
                fxa = fdrive - resist
            elif vbx < 0.0:
                fxa = fdrive + resist
            # a grip constant scrubs a share of the lateral velocity per second
            share = p[k, L.PX_ARCADE_GRIP] * dt * gfrac
            if share > 1.0:
                share = 1.0
            fya = -m * vby * share / dt
            # the steering scales a yaw rate: grip keeps rising with input
            target = p[k, L.PX_ARCADE_YAW] * delta * vbx / wb
            rate = 10.0 * dt * gfrac
            if rate > 1.0:
                rate = 1.0
            fbx += fxa
            fby += fya
            tqz += izz * (target - wz) * rate / dt
    elif p[k, L.PX_DRIFT_ASSIST] > 0.0:
        s[k, L.SX_DRIFT] = 0.0
        if n_rear > 0 and n_grounded > 0:
            ra = rear_alpha / n_rear
            if abs(ra) > p[k, L.PX_DRIFT_SLIP]:
                # while the rear slides, pull the yaw rate toward the steering's kinematic
                # rate, capped at what the grip can sustain (mu g / v): the car holds a drift
                # the steering controls instead of spinning out
                s[k, L.SX_DRIFT] = 1.0
                share = p[k, L.PX_DRIFT_ASSIST] * dt
                if share > 1.0:
                    share = 1.0
                target = vbx * delta / wb
                if abs(vbx) > 1.0:
                    cap = p[k, L.P_MU_BASE] * p[k, L.P_GRAVITY] / abs(vbx)
                    target = min(max(target, -cap), cap)
                tqz += izz * (target - wz) * share / dt
    lg = p[k, L.PX_LEAN_GAIN]
    if lg > 0.0 and n_grounded > 0:
        # lean toward the angle the speed and yaw rate call for, critically damped at sqrt(gain)
        g = p[k, L.P_GRAVITY]
        phi = atan2x(r21, r22)  # roll, + = right side down
        lean = -atan2x(vbx * wz, g)
        tqx += p[k, L.P_IXX] * (lg * (lean - phi) - 2.0 * math.sqrt(lg) * wx)
    if model == L.TIRE_WHEEL_SPEED and has_dt:
        _differentials(p, k, s, nw, dt, tq_front, tq_rear)
    return tqx, tqz, fbx, fby


@njit_inner(_nrt=False, forceinline=True)
def _steer(p, s, k, dt):
    """Steering slews toward ``cmd * lock`` at the steering rate. Returns the new angle."""
    target = s[k, L.CMD_STEER] * p[k, L.P_STEER_LOCK]
    delta = s[k, L.STEER_ANGLE]
    dmax = p[k, L.P_STEER_RATE] * dt
    delta = delta + _clamp(target - delta, dmax)
    s[k, L.STEER_ANGLE] = delta
    return delta


@njit_inner(_nrt=False, forceinline=True)
def _motor_force(p, k, speed, v):
    """The electric drive's full-throttle force (N) at ``speed`` = |v| (m/s): force-limited,
    then power-limited, fading to zero over the band below top speed as ``v`` nears it."""
    fd = p[k, L.P_DRIVE_FORCE]
    if speed > 0.1 and p[k, L.P_POWER] < fd * speed:
        fd = p[k, L.P_POWER] / speed
    vmax = p[k, L.P_VMAX]
    band = p[k, L.P_VMAX_BAND]
    if v > vmax - band:
        fade = (vmax - v) / band
        if fade < 0.0:
            fade = 0.0
        fd = fd * fade
    return fd


@njit_inner(_nrt=False, forceinline=True)
def _drivetrain(p, s, ist, k, nw, nd, ndf, om_mean, r_sum, ws):
    """Engine and gearbox of a drivetrain vehicle: the engine speed from the driven wheels'
    mean spin, a gear change, the engine torque at the throttle split per driven wheel (the
    front split; under the wheel-speed model an open differential passes no more per wheel
    than its weakest wheel holds). Returns (torque per driven front wheel, per other wheel)."""
    rpm = engine_rpm_from_wheels(p, k, om_mean, ist[k, L.I_GEAR])
    update_gearbox(p, k, ist, rpm)
    rpm = engine_rpm_from_wheels(p, k, om_mean, ist[k, L.I_GEAR])
    s[k, L.ENGINE_RPM] = rpm
    tq = drive_torque_nm(p, k, ist, rpm, s[k, L.CMD_THROTTLE])
    s[k, L.SX_ENGINE_TORQUE] = tq
    ndr = nd - ndf
    if ndf > 0 and ndr > 0:
        split = p[k, L.PX_FRONT_SPLIT]
        tq_front = tq * split / ndf
        tq_rear = tq * (1.0 - split) / ndr
    else:
        tq_front = tq / nd
        tq_rear = tq_front
    if ws is not None:
        # an open differential gives both sides the same torque, so an axle transmits
        # no more per wheel than its weakest wheel holds (last substep's mu N r)
        cap_f = 1e300
        cap_r = 1e300
        for w in range(nw):
            if p[k, L.pw(w, L.PW_DRIVEN)] > 0.5:
                c = s[k, L.WL_MU + w] * s[k, L.WL_LOAD + w] * p[k, L.pw(w, L.PW_RADIUS)]
                if p[k, L.pxw(w, L.PXW_AXLE)] < 0.5:
                    cap_f = min(cap_f, c)
                else:
                    cap_r = min(cap_r, c)
        if int(p[k, L.PX_DIFF_FRONT]) == L.DIFF_OPEN and ndf >= 2:
            tq_front = min(max(tq_front, -cap_f), cap_f)
        if int(p[k, L.PX_DIFF_REAR]) == L.DIFF_OPEN and nd - ndf >= 2:
            tq_rear = min(max(tq_rear, -cap_r), cap_r)
    s[k, L.DRIVE_FORCE] = tq * nd / r_sum
    return tq_front, tq_rear


@njit(cache=True, _nrt=False, forceinline=True)
def _drive(p, s, ist, k, nw, vbx, ext, ws):
    """Drive demand: the motor's force at the body's speed times the throttle. Extended
    vehicles also get their per-wheel shares: skid steer's per-side throttles, a drivetrain's
    torque per driven wheel, and the wheel-speed model's motor limits at the wheels' rim speed.

    Returns (fdrive, fdrive_full, thr_left, thr_right, tq_front, tq_rear): the drive force at
    the throttle and at full throttle (N), the skid-steer throttles, and the drivetrain's
    torque per driven front / other wheel (N m).
    """
    fdrive_full = _motor_force(p, k, abs(vbx), vbx)
    fdrive = fdrive_full * s[k, L.CMD_THROTTLE]
    s[k, L.DRIVE_FORCE] = fdrive
    thr_left = 0.0
    thr_right = 0.0
    tq_front = 0.0
    tq_rear = 0.0
    if ext is None:
        return fdrive, fdrive_full, thr_left, thr_right, tq_front, tq_rear
    has_dt = p[k, L.PX_DRIVETRAIN] > 0.5
    if not (has_dt or ws is not None):
        return fdrive, fdrive_full, thr_left, thr_right, tq_front, tq_rear
    nd = 0
    ndf = 0
    om_sum = 0.0
    rim_sum = 0.0
    r_sum = 0.0
    for w in range(nw):
        if p[k, L.pw(w, L.PW_DRIVEN)] > 0.5:
            nd += 1
            if p[k, L.pxw(w, L.PXW_AXLE)] < 0.5:
                ndf += 1
            rw = p[k, L.pw(w, L.PW_RADIUS)]
            r_sum += rw
            om_sum += s[k, L.WL_OMEGA + w]
            rim_sum += abs(s[k, L.WL_OMEGA + w]) * rw
    if ws is not None and nd > 0 and not has_dt:
        # the motor limits act on the wheels' rim speed, so a wheel spinning in the air
        # fades its own drive at top speed instead of running away
        rim = rim_sum / nd
        fd = _motor_force(p, k, rim, rim)
        fdrive_full = fd
        fdrive = fd * s[k, L.CMD_THROTTLE]
        s[k, L.DRIVE_FORCE] = fdrive
    if p[k, L.PX_SKID_STEER] > 0.5:
        # per-side throttles from the held (mean, half-difference) pair
        thr_left = min(max(s[k, L.CMD_THROTTLE] - s[k, L.CMD_STEER], -1.0), 1.0)
        thr_right = min(max(s[k, L.CMD_THROTTLE] + s[k, L.CMD_STEER], -1.0), 1.0)
    if has_dt and nd > 0:
        if ws is not None:
            om_mean = om_sum / nd
        else:
            om_mean = abs(vbx) * nd / r_sum
        tq_front, tq_rear = _drivetrain(p, s, ist, k, nw, nd, ndf, om_mean, r_sum, ws)
    return fdrive, fdrive_full, thr_left, thr_right, tq_front, tq_rear


@njit_inner(_nrt=False, forceinline=True)
def _ground_contact(s, k, w, ter, tid, rot, aw, reach, nsub, inv_dt):
    """Contact of wheel ``w``: a ray from its anchor ``aw`` (world) along the chassis -z axis
    meets the heightfield's tangent plane under the anchor.

    Returns (missing tile or -1, ground height h, penetration past the unloaded wheel (-1e300
    when the ray misses: the chassis is more than ~78 deg from upright), the ground's rise
    rate under the wheel and its rise predicted over this substep, which the implicit damper
    tracks). Writes the wheel's surface and ground readings.
    """
    heights, surfaces, tiles, meta, _ = ter
    r02 = rot[2]
    r12 = rot[5]
    r22 = rot[8]
    awx, awy, awz = aw
    h, hgx, hgy, node = sample_height_grad(heights, tiles, meta, tid, awx, awy)
    if node < 0:
        return -1 - node, 0.0, 0.0, 0.0, 0.0
    s[k, L.WL_SURFACE + w] = surfaces[node]  # the surface under the wheel
    pen = -1e300
    if r22 > 0.2:
        # the ray along -(r02, r12, r22) meets the ground's tangent plane at the anchor
        den = r22 - hgx * r02 - hgy * r12
        if den > 0.1:
            lr = (awz - h) / den
            h = h - (hgx * r02 + hgy * r12) * lr
            pen = reach - lr
    dhdt = 0.0
    dhdt_pred = 0.0
    if nsub > 0:
        # a cliff face met at speed is a crash, not a suspension event: cap the rate
        dhdt = _clamp((h - s[k, L.WL_GROUND_Z + w]) * inv_dt, _MAX_GROUND_RATE)
        dhdt_pred = dhdt
        if nsub > 1:
            dhdt_pred = 2.0 * dhdt - s[k, L.WL_GROUND_VZ + w]
    s[k, L.WL_GROUND_Z + w] = h
    s[k, L.WL_GROUND_VZ + w] = dhdt
    return -1, h, pen, dhdt, dhdt_pred


@njit_inner(_nrt=False, forceinline=True)
def _soft_pull(p, k, pen, sep, kcw):
    """The weak spring that pulls a wheel down within ``soft_gap_min..max`` of air gap, unless
    it lifts off faster than the gate (a jump). Returns (acts, force per unit mass <= 0)."""
    gap = -pen
    if (
        gap >= p[k, L.P_SOFT_GAP_MIN]
        and gap <= p[k, L.P_SOFT_GAP_MAX]
        and sep <= p[k, L.P_SOFT_LIFT_GATE]
    ):
        fs = -(p[k, L.P_SOFT_K] * gap + p[k, L.P_SOFT_C] * sep)
        lo = -kcw * p[k, L.P_SOFT_CLAMP]
        if fs < lo:
            fs = lo
        if fs > 0.0:
            fs = 0.0
        return True, fs
    return False, 0.0


@njit_inner(_nrt=False, forceinline=True)
def _suspension(p, s, ist, k, ter, rot, pos, vz, omega, dt, ext):
    """Pass 1, per wheel: ground contact, then the spring-damper load ``m (K pen - C v_sep)``
    (push only, the spring limited by travel) or, in the air gap, the soft pull.

    With implicit damping (the default) the spring and the damper's explicit share go into
    ``fsus`` and the damper's coupling into ``dmat`` (D) / ``svec`` (S) (docs/architecture.md,
    "The substep's phases"); explicit damping applies the whole load to ``fbz`` instead.

    Returns (missing tile or -1, fbz, tqx, tqy, fsus, driven wheels, total load, highest
    ground under a wheel, dmat (9), svec (3)).
    """
    r00, r01, r02, r10, r11, r12, r20, r21, r22 = rot
    px, py, pz = pos
    wx, wy, wz = omega
    tid = ist[k, L.I_TERRAIN]
    nsub = ist[k, L.I_SUBSTEPS]
    m = p[k, L.P_MASS]
    kc = p[k, L.P_CONTACT_K]
    cc = p[k, L.P_CONTACT_C]
    explicit = p[k, L.P_EXPLICIT_DAMPING] > 0.5
    soft_on = p[k, L.P_SOFT_ENABLED] > 0.5
    inv_dt = 1.0 / dt
    inv_r22 = 1.0 / r22 if r22 > 0.2 else 0.0
    fbz = 0.0
    tqx = 0.0
    tqy = 0.0
    d00 = 0.0
    d01 = 0.0
    d02 = 0.0
    d10 = 0.0
    d11 = 0.0
    d12 = 0.0
    d20 = 0.0
    d21 = 0.0
    d22 = 0.0
    s0 = 0.0
    s1 = 0.0
    s2 = 0.0
    fsus = 0.0
    n_driven = 0
    total_load = 0.0
    hmax = -1e300
    for w in range(int(p[k, L.P_N_WHEELS])):
        ax = p[k, L.pw(w, L.PW_X)]
        ay = p[k, L.pw(w, L.PW_Y)]
        az = p[k, L.pw(w, L.PW_Z)]
        reach = p[k, L.pw(w, L.PW_REST)] + p[k, L.pw(w, L.PW_RADIUS)]
        if p[k, L.pw(w, L.PW_DRIVEN)] > 0.5:
            n_driven += 1
        kcw = kc
        ccw = cc
        if ext is not None:
            kcw = p[k, L.pxw(w, L.PXW_K)]
            ccw = p[k, L.pxw(w, L.PXW_C)]
        awx = px + r00 * ax + r01 * ay + r02 * az
        awy = py + r10 * ax + r11 * ay + r12 * az
        awz = pz + r20 * ax + r21 * ay + r22 * az
        miss, h, pen, dhdt, dhdt_pred = _ground_contact(
            s, k, w, ter, tid, rot, (awx, awy, awz), reach, nsub, inv_dt
        )
        if miss >= 0:
            return miss, 0.0, 0.0, 0.0, 0.0, 0, 0.0, 0.0, _ZERO9, _ZERO3
        if h > hmax:
            hmax = h
        # separation speed of wheel and ground along the ray (+ = lifting off): the rate of
        # change of the ray length, from the anchor's world-z velocity and the ground's rise
        vaz = vz + r20 * (wy * az - wz * ay) + r21 * (wz * ax - wx * az) + r22 * (wx * ay - wy * ax)
        sep = (vaz - dhdt) * inv_r22
        # anchor world-z speed = vz + jx wx + jy wy + jz wz (exact for any attitude)
        jx = r22 * ay - r21 * az
        jy = r20 * az - r22 * ax
        jz = r21 * ax - r20 * ay
        load = 0.0
        comp = 0.0
        if pen > 0.0:
            comp = pen
            travel = p[k, L.pw(w, L.PW_TRAVEL)]
            if comp > travel:
                comp = travel
            f_unit = kcw * comp - ccw * sep
            if f_unit > 0.0:
                load = m * f_unit
                if explicit:
                    fbz += load
                    tqx += ay * load
                    tqy -= ax * load
                else:
                    # spring and the explicit share of the damper (yaw-rate and ground terms)
                    fz = m * (kcw * comp - ccw * (wz * jz - dhdt_pred) * inv_r22)
                    fsus += fz
                    tqx += ay * fz
                    tqy -= ax * fz
                    gd = m * ccw * inv_r22
                    d00 += gd * r22
                    d01 += gd * r22 * jx
                    d02 += gd * r22 * jy
                    d10 += gd * ay
                    d11 += gd * ay * jx
                    d12 += gd * ay * jy
                    d20 -= gd * ax
                    d21 -= gd * ax * jx
                    d22 -= gd * ax * jy
                    s0 += gd
                    s1 += gd * jx
                    s2 += gd * jy
        elif soft_on:
            acts, fs = _soft_pull(p, k, pen, sep, kcw)
            if acts:
                fz = m * fs
                fbz += fz
                tqx += ay * fz
                tqy -= ax * fz
        if ext is not None:
            # a hard touchdown damages the car (the seed's gripDmgFactor)
            if load > 0.0 and s[k, L.WL_GROUNDED + w] < 0.5 and nsub > 0:
                _impact(p, k, s, -sep)
            s[k, L.SXW_SEP + w] = sep
        s[k, L.WL_LOAD + w] = load
        s[k, L.WL_COMPRESSION + w] = comp
        s[k, L.WL_GROUNDED + w] = 1.0 if load > 0.0 else 0.0
        total_load += load
    dmat = (d00, d01, d02, d10, d11, d12, d20, d21, d22)
    return -1, fbz, tqx, tqy, fsus, n_driven, total_load, hmax, dmat, (s0, s1, s2)


@njit_inner(_nrt=False, forceinline=True)
def _anti_roll_bars(p, s, k, tqx, tqy):
    """Anti-roll bars (extended): move load from the more to the less compressed wheel of an
    axle's pair. Returns the roll and pitch torques with their effect added."""
    m = p[k, L.P_MASS]
    nw = int(p[k, L.P_N_WHEELS])
    for w in range(nw):
        if p[k, L.pxw(w, L.PXW_SIDE)] < 0.0 or s[k, L.WL_LOAD + w] <= 0.0:
            continue
        axle = p[k, L.pxw(w, L.PXW_AXLE)]
        if axle > 1.5:
            continue
        karb = p[k, L.PX_ARB_FRONT] if axle < 0.5 else p[k, L.PX_ARB_REAR]
        if karb <= 0.0:
            continue
        for v in range(nw):
            if (
                p[k, L.pxw(v, L.PXW_SIDE)] < 0.0
                and p[k, L.pxw(v, L.PXW_AXLE)] == axle
                and s[k, L.WL_LOAD + v] > 0.0
            ):
                f = m * karb * (s[k, L.WL_COMPRESSION + w] - s[k, L.WL_COMPRESSION + v])
                # never pull a wheel's load below zero
                lw = s[k, L.WL_LOAD + w]
                lv = s[k, L.WL_LOAD + v]
                if f > lv:
                    f = lv
                elif f < -lw:
                    f = -lw
                s[k, L.WL_LOAD + w] = lw + f
                s[k, L.WL_LOAD + v] = lv - f
                tqx += (p[k, L.pw(w, L.PW_Y)] - p[k, L.pw(v, L.PW_Y)]) * f
                tqy -= (p[k, L.pw(w, L.PW_X)] - p[k, L.pw(v, L.PW_X)]) * f
                break
    return tqx, tqy


@njit_inner(_nrt=False, forceinline=True)
def _wheel_in_air(p, s, k, w, drv_t, brake, hb, dt, ws):
    """An unloaded wheel: no tire force. Under the wheel-speed model the drive spins it and
    the brake stops it; otherwise it keeps its spin."""
    s[k, L.WL_USAGE + w] = 0.0
    s[k, L.WL_FX + w] = 0.0
    s[k, L.WL_FY + w] = 0.0
    s[k, L.WL_SLIP_ANGLE + w] = 0.0
    if ws is not None:
        radius = p[k, L.pw(w, L.PW_RADIUS)]
        inv_i = 1.0 / p[k, L.pxw(w, L.PXW_INERTIA)]
        om = s[k, L.WL_OMEGA + w] + drv_t * dt * inv_i
        tbw = (brake * p[k, L.pw(w, L.PW_BRAKE_SHARE)]) * radius
        if p[k, L.pw(w, L.PW_HANDBRAKE)] > 0.5:
            tbw = tbw + hb * radius
        s[k, L.WL_OMEGA + w] = _toward_zero(om, tbw * dt * inv_i)
        s[k, L.WL_SLIP_RATIO + w] = 0.0
        s[k, L.SXW_DRIVE_TQ + w] = drv_t
        s[k, L.SXW_BRAKE_TQ + w] = tbw
    s[k, L.WL_SPIN + w] += s[k, L.WL_OMEGA + w] * dt


@njit_inner(_nrt=False, forceinline=True)
def _direct_tire(p, k, w, load, fmax, vel, drv_f, brake, hb, stop_scale, consts):
    """The direct model's loaded wheel: the longitudinal force straight from the drive
    (capped at ``drive_cap`` of the circle) and the brakes (service brake at ``abs_fraction``,
    the handbrake locking without ABS, rolling resistance; none reverses the rolling), then
    the lateral force from 2s/(1+s^2) takes what remains of the circle.

    ``consts`` is (peak slip, post-peak clamp, slip floor, ABS fraction, rolling resistance,
    drive cap) of the car. Returns (fx, fy, slip angle, drive force) in the wheel frame.
    """
    vlong, vlat = vel
    peak, clampn, eps, abs_frac, crr, drive_cap = consts
    fx_drive = 0.0
    if p[k, L.pw(w, L.PW_DRIVEN)] > 0.5:
        fx_drive = _clamp(drv_f, drive_cap * fmax)
    resist = brake * p[k, L.pw(w, L.PW_BRAKE_SHARE)] + crr * load
    if p[k, L.pw(w, L.PW_HANDBRAKE)] > 0.5 and hb > 0.0:
        resist = resist + hb  # the handbrake locks the wheel: no ABS margin
        cap = fmax
    else:
        cap = abs_frac * fmax  # ABS keeps sqrt(1 - abs^2) of the circle for steering
    if resist > cap:
        resist = cap
    # a brake slows rolling and never reverses it: clamp to the wheel's useful mass
    stop = abs(vlong) * load * stop_scale
    if resist > stop:
        resist = stop
    if vlong > 0.0:
        fx = fx_drive - resist
    elif vlong < 0.0:
        fx = fx_drive + resist
    else:
        fx = fx_drive
    fx = _clamp(fx, fmax)
    # lateral takes what is left of the circle
    alpha = atan2x(vlat, abs(vlong) + eps)
    fy_des = fmax * lateral_curve(alpha, peak, clampn)
    fy = _lateral_remainder(fx, fy_des, fmax)
    return fx, fy, alpha, fx_drive


@njit_inner(_nrt=False, forceinline=True)
def _wheel_speed_wheel(p, s, k, w, load, fm, vel, g_wheel, drv_t, brakes, stop_scale, cfg):
    """The wheel-speed model's loaded wheel over one substep: its brake and drive torques
    (traction control caps the drive at ``drive_cap`` of the circle), then the implicit wheel
    and tire solve, the brake hold, the ABS, the friction clamps and the low-speed hold of
    docs/vehicles.md ("The wheel-speed model"); writes the wheel's readings.

    ``fm`` is (friction-circle radius mu N, mu), ``vel`` the contact-patch (vlong, vlat) in the
    wheel frame (m/s), ``g_wheel`` gravity's acceleration along the wheel's axes (m/s^2),
    ``drv_t`` the drive torque (N m, signed), ``brakes`` (service, handbrake) forces (N),
    ``stop_scale`` vehicle mass / (total load x dt) (so ``load * stop_scale * dt`` is the
    wheel's useful mass, kg), and ``cfg`` ((slip-ratio floor, ABS slip ratio, clamps off, 1 / dt),
    traction control on, low-speed hold speed, drive cap, dt) of the car.
    Returns (fx, fy, slip angle, slip power in W) in the wheel frame.
    """
    fmax, mu = fm
    vlong, vlat = vel
    g_long, g_lat = g_wheel
    brake, hb = brakes
    ws_consts, tc_on, low_speed, drive_cap, dt = cfg
    eps_sr, ks, no_clamps, inv_dt = ws_consts
    radius = p[k, L.pw(w, L.PW_RADIUS)]
    # rolling resistance is a tire force: never more than the circle
    crr = p[k, L.P_CRR] * load
    if crr > fmax:
        crr = fmax
    tbw = brake * p[k, L.pw(w, L.PW_BRAKE_SHARE)] + crr
    hb_on = p[k, L.pw(w, L.PW_HANDBRAKE)] > 0.5 and hb > 0.0
    if hb_on:
        tbw = tbw + hb
    tbw = tbw * radius
    if tc_on:
        drv_t = _clamp(drv_t, drive_cap * fmax * radius)
    m_u = load * stop_scale * dt
    hold = (
        drv_t == 0.0 and (brake > 0.0 or hb_on) and abs(vlong) < low_speed and abs(vlat) < low_speed
    )
    abs_on = brake > 0.0 and not hb_on
    om = s[k, L.WL_OMEGA + w]
    inv_i = p[k, L.pxw(w, L.PXW_INV_INERTIA)]
    alpha = atan2x(vlat, abs(vlong) + p[k, L.P_SLIP_EPS])
    sel = abs(alpha)
    # slip ratio = slip velocity / max(|v|, floor) (docs/vehicles.md)
    den = abs(vlong)
    if den < eps_sr:
        den = eps_sr
    inv_den = 1.0 / den
    # linearise the curve about the slip at the start of the step (its rising slope only)
    k0 = _clamp((om * radius - vlong) * inv_den, _MAX_SLIP_RATIO)
    c0, cslope, seg_lo, seg_hi = family_eval_seg(p, k, L.PX_CURVE_LONG, k0, sel)
    f0 = fmax * c0
    slope = fmax * cslope
    if slope < 0.0:
        slope = 0.0
    dti = dt * inv_i
    inv_a = 1.0 / (1.0 + dti * radius * radius * slope * inv_den)
    om_free = (om + dti * (drv_t - radius * (f0 - slope * k0 - slope * vlong * inv_den))) * inv_a
    # the brake shifts the implicit solution toward zero, never past it (it holds the wheel)
    om_n = _toward_zero(om_free, dti * tbw * inv_a)
    if abs_on:
        # ABS: the brake lets go where the slip would pass the ABS slip ratio
        if vlong > 0.0:
            lo = (vlong - ks * den) / radius
            if om_n < lo and om_free > lo:
                om_n = lo
        elif vlong < 0.0:
            hi = (vlong + ks * den) / radius
            if om_n > hi and om_free < hi:
                om_n = hi
    vs = om_n * radius - vlong
    kappa = _clamp(vs * inv_den, _MAX_SLIP_RATIO)
    if kappa >= seg_lo and kappa <= seg_hi and k0 != 0.0:
        # still on the same linear piece: exact without a second search
        fx = fmax * (c0 + cslope * (kappa - k0))
    else:
        fx = fmax * family_eval_seg(p, k, L.PX_CURVE_LONG, kappa, sel)[0]
    fx = _clamp(fx, fmax)
    fy_des = fmax * family_eval_seg(p, k, L.PX_CURVE_LAT, alpha, abs(kappa))[0]
    fy = _lateral_remainder(fx, fy_des, fmax)
    if not no_clamps:
        # friction clamps with the useful mass: the chassis side of the contact
        mdt = m_u * inv_dt
        fx = _clamp(fx, abs(vs) * mdt)
        fy = _clamp(fy, abs(vlat) * mdt)
    else:
        # validation only: the explicit wheel (no implicit solve, no clamps)
        fx = f0
        tbs = tbw if om > 0.0 else (-tbw if om < 0.0 else 0.0)
        om_n = om + dt * inv_i * (drv_t - tbs - radius * fx)
        kappa = k0
    if hold:
        # static friction: cancel the patch's velocity and gravity's pull within the circle
        fx = _clamp(-m_u * (vlong * inv_dt + g_long), fmax)
        fy = _clamp(-m_u * (vlat * inv_dt + g_lat), _circle_left(fx, fmax))
        kappa = 0.0
        om_n = 0.0
        power = 0.0
    else:
        power = abs(fx * vs) + abs(fy * vlat)
    _write_tire(s, k, w, fx, fy, fmax, mu, alpha, kappa, om_n, dt)
    _wear(p, k, s, w, power * dt)
    s[k, L.SXW_DRIVE_TQ + w] = drv_t
    s[k, L.SXW_BRAKE_TQ + w] = tbw
    return fx, fy, alpha, power


@njit_inner(_nrt=False, forceinline=True)
def _wheel_drive(p, k, w, radius, drive, n_driven, throttle_share):
    """Extended vehicles: wheel ``w``'s drive, as (force N, torque N m): the drivetrain's torque
    for its axle, skid steer's share at its side's throttle, else the flat drive's share."""
    _, fdrive_full, thr_left, thr_right, tq_front, tq_rear = drive
    drv_f = 0.0
    drv_t = 0.0
    if p[k, L.pw(w, L.PW_DRIVEN)] > 0.5:
        if p[k, L.PX_DRIVETRAIN] > 0.5:
            drv_t = tq_front if p[k, L.pxw(w, L.PXW_AXLE)] < 0.5 else tq_rear
            drv_f = drv_t / radius
        elif p[k, L.PX_SKID_STEER] > 0.5:
            side_thr = thr_left if p[k, L.pxw(w, L.PXW_SIDE)] > 0.0 else thr_right
            drv_f = fdrive_full / n_driven * side_thr
            drv_t = drv_f * radius
        else:
            drv_f = throttle_share
            drv_t = drv_f * radius
    return drv_f, drv_t


@njit_inner(_nrt=False, forceinline=True)
def _tires(p, s, k, ground, rot, motion, drive, carry, dt, ext, ws, arc):
    """Pass 2, per wheel: its drive share, then its tire forces under the car's model, applied
    at the contact patch below the CG (so pitch and roll, and with them load transfer, come
    out of the springs). Effective mu = base x surface x load sensitivity (x tire grip, wear
    and damage for extended vehicles).

    ``ground`` is (surface grip table, terrain id), ``motion`` (vbx, vby, wx, wy, wz, sin and
    cos of the steering angle), ``drive`` what :func:`_drive` returned and ``carry`` (driven
    wheels, total load, tqx, tqy) from pass 1. Returns (fbx, fby, tqx, tqy, tqz, grounded
    wheels, summed rear slip angle, rear wheels).
    """
    grip, tid = ground
    r20 = rot[6]
    r21 = rot[7]
    vbx, vby, wx, wy, wz, sd, cd = motion
    n_driven, total_load, tqx, tqy = carry
    fbx = 0.0
    fby = 0.0
    tqz = 0.0
    m = p[k, L.P_MASS]
    g = p[k, L.P_GRAVITY]
    inv_dt = 1.0 / dt
    # resistive forces stop at zero speed: cap at the wheel's useful mass (load share x mass)
    stop_scale = m * inv_dt / total_load if total_load > 0.0 else 0.0
    throttle_share = drive[0] / n_driven if n_driven > 0 else 0.0
    brake = s[k, L.CMD_BRAKE] * p[k, L.P_BRAKE_FORCE]
    hb = s[k, L.CMD_HANDBRAKE] * p[k, L.P_HANDBRAKE_FORCE]
    mu0 = p[k, L.P_MU_BASE] * p[k, L.P_GRIP_WEAR] * p[k, L.P_GRIP_DAMAGE]
    eps = p[k, L.P_SLIP_EPS]
    lref = p[k, L.P_LOAD_REF]
    lsens = p[k, L.P_LOAD_SENS]
    direct_consts = (
        p[k, L.P_PEAK_SLIP],
        p[k, L.P_POST_PEAK_CLAMP],
        eps,
        p[k, L.P_ABS],
        p[k, L.P_CRR],
        p[k, L.P_DRIVE_CAP],
    )
    # gravity's acceleration in the body frame (x, y): the low-speed hold cancels it
    gbx = -g * r20
    gby = -g * r21
    n_grounded = 0
    slide_power = 0.0
    rear_alpha = 0.0
    n_rear = 0
    # per-car constants of the extension, read once (the compiler cannot hoist reads of p
    # past the stores into s)
    roll_scale = 1.0
    pitch_scale = 1.0
    load_blend = 0.0
    damage = 1.0
    ws_cfg = ((0.0, 0.0, False, inv_dt), False, 0.0, 0.0, dt)
    if ext is not None:
        roll_scale = p[k, L.PX_ROLL_SCALE]
        pitch_scale = p[k, L.PX_PITCH_SCALE]
        load_blend = p[k, L.PX_LOAD_BLEND]
        damage = s[k, L.SX_DAMAGE]
        # the wheel-speed model's per-car constants (see _wheel_speed_wheel)
        ws_consts = (
            p[k, L.PX_SLIP_RATIO_EPS],
            p[k, L.PX_ABS_SLIP],
            p[k, L.PX_NO_CLAMPS] > 0.5,
            inv_dt,
        )
        tc_on = p[k, L.PX_TRACTION_CONTROL] > 0.5
        ws_cfg = (ws_consts, tc_on, p[k, L.PX_LOW_SPEED], p[k, L.P_DRIVE_CAP], dt)
    for w in range(int(p[k, L.P_N_WHEELS])):
        load = s[k, L.WL_LOAD + w]
        radius = p[k, L.pw(w, L.PW_RADIUS)]
        # this wheel's drive: force for the flat drive / skid steer, torque with a drivetrain
        drv_f = throttle_share
        drv_t = 0.0
        if ext is not None:
            drv_f, drv_t = _wheel_drive(p, k, w, radius, drive, n_driven, throttle_share)
        if load <= 0.0:
            _wheel_in_air(p, s, k, w, drv_t, brake, hb, dt, ws)
            continue
        n_grounded += 1
        # the contact patch, body frame
        rx = p[k, L.pw(w, L.PW_X)]
        ry = p[k, L.pw(w, L.PW_Y)]
        reach = p[k, L.pw(w, L.PW_REST)] + radius
        rz = p[k, L.pw(w, L.PW_Z)] - (reach - s[k, L.WL_COMPRESSION + w])
        sw, cw = (sd, cd) if p[k, L.pw(w, L.PW_STEER)] > 0.5 else (0.0, 1.0)
        vpx = vbx + wy * rz - wz * ry
        vpy = vby + wz * rx - wx * rz
        vlong = cw * vpx + sw * vpy
        vlat = -sw * vpx + cw * vpy
        # effective mu: every grip factor multiplies into one value
        sid = int(s[k, L.WL_SURFACE + w])
        mu = mu0 * grip[tid, sid] * load_sensitivity_factor(load, lref, lsens)
        fmax = mu * load
        if ext is not None:
            # per-tire grip, wear and damage multiply into the same mu; the tire may see a
            # blend of its dynamic and static load (the talk's steadier load at low rates)
            mu = mu * p[k, L.pxw(w, L.PXW_GRIP)] * s[k, L.SXW_WEAR + w] * damage
            bl = load_blend
            tl = load
            if bl > 0.0:
                tl = (1.0 - bl) * load + bl * p[k, L.pxw(w, L.PXW_STATIC_LOAD)]
            fmax = mu * tl
        if arc is not None:
            # the lumped model applies its forces at the CG; the wheel only rolls
            alpha = atan2x(vlat, abs(vlong) + eps)
            _write_tire(s, k, w, 0.0, 0.0, fmax, mu, alpha, 0.0, vlong / radius, dt)
            continue
        vel = (vlong, vlat)
        if ws is not None:
            g_wheel = (cw * gbx + sw * gby, -sw * gbx + cw * gby)
            brakes = (brake, hb)
            fx, fy, alpha, pw_slide = _wheel_speed_wheel(
                p, s, k, w, load, (fmax, mu), vel, g_wheel, drv_t, brakes, stop_scale, ws_cfg
            )
            slide_power += pw_slide
        else:
            fx, fy, alpha, fx_drive = _direct_tire(
                p, k, w, load, fmax, vel, drv_f, brake, hb, stop_scale, direct_consts
            )
            _write_tire(s, k, w, fx, fy, fmax, mu, alpha, 0.0, vlong / radius, dt)
            if ext is not None:
                slide_power += abs(fy * vlat)
                _wear(p, k, s, w, abs(fy * vlat) * dt)
                s[k, L.SXW_DRIVE_TQ + w] = fx_drive * radius
        # to the body frame, applied at the contact patch
        fxb = cw * fx - sw * fy
        fyb = sw * fx + cw * fy
        fbx += fxb
        fby += fyb
        tqx -= rz * fyb * roll_scale
        tqy += rz * fxb * pitch_scale
        tqz += rx * fyb - ry * fxb
        if ext is not None:
            if p[k, L.pxw(w, L.PXW_AXLE)] > 0.5 and p[k, L.pxw(w, L.PXW_AXLE)] < 1.5:
                rear_alpha += alpha
                n_rear += 1
    if ext is not None:
        s[k, L.SX_SLIDE_ENERGY] += slide_power * dt
    return fbx, fby, tqx, tqy, tqz, n_grounded, rear_alpha, n_rear


@njit_inner(_nrt=False, forceinline=True)
def _body_contact(p, s, k, ter, tid, rot, pos, motion, hmax, acc, dt, ext):
    """Chassis box corners below the terrain get a penalty contact with Coulomb friction, so a
    rolled car lies on its roof. Corners higher than ``hmax`` (the highest ground under a
    wheel) + a margin are skipped.

    ``motion`` is (vbx, vby, vbz, wx, wy, wz), ``acc`` the body-frame (fbx, fby, fbz, tqx, tqy,
    tqz) so far. Returns (missing tile or -1, acc with the contacts added).
    """
    heights, _, tiles, meta, _ = ter
    r00, r01, r02, r10, r11, r12, r20, r21, r22 = rot
    px, py, pz = pos
    vbx, vby, vbz, wx, wy, wz = motion
    fbx, fby, fbz, tqx, tqy, tqz = acc
    m = p[k, L.P_MASS]
    inv_dt = 1.0 / dt
    contacts = 0
    xf = p[k, L.P_BODY_XF]
    xr = -p[k, L.P_BODY_XR]
    hw = p[k, L.P_BODY_HW]
    zb = p[k, L.P_BODY_ZB]
    zt = p[k, L.P_BODY_ZT]
    kb = p[k, L.P_BODY_K]
    cb = p[k, L.P_BODY_C]
    mub = p[k, L.P_BODY_MU]
    m_corner = 0.25 * m
    for ci in range(L.N_CORNERS):
        cx = xf if (ci & 1) == 0 else xr
        cy = hw if (ci & 2) == 0 else -hw
        cz = zb if (ci & 4) == 0 else zt
        wcz = pz + r20 * cx + r21 * cy + r22 * cz
        if wcz > hmax + _CORNER_MARGIN_M:
            continue
        wcx = px + r00 * cx + r01 * cy + r02 * cz
        wcy = py + r10 * cx + r11 * cy + r12 * cz
        hc = sample_height(heights, tiles, meta, tid, wcx, wcy)
        if hc != hc:
            return tile_at(meta, tid, wcx, wcy), acc
        if wcz >= hc:
            continue
        # corner velocity, body then world
        cvx = vbx + wy * cz - wz * cy
        cvy = vby + wz * cx - wx * cz
        cvz = vbz + wx * cy - wy * cx
        wvx = r00 * cvx + r01 * cvy + r02 * cvz
        wvy = r10 * cvx + r11 * cvy + r12 * cvz
        wvz = r20 * cvx + r21 * cvy + r22 * cvz
        fn = m * (kb * (hc - wcz) - cb * wvz)
        if fn <= 0.0:
            continue
        if ext is not None and s[k, L.BODY_CONTACTS] < 0.5:
            _impact(p, k, s, -wvz)
        contacts += 1
        vt = math.sqrt(wvx * wvx + wvy * wvy)
        fwx = 0.0
        fwy = 0.0
        if vt > 0.0:
            ft = mub * fn
            fstop = vt * m_corner * inv_dt
            if ft > fstop:
                ft = fstop
            fwx = -ft * wvx / vt
            fwy = -ft * wvy / vt
        # world force to body frame, torque about the CG
        bfx = r00 * fwx + r10 * fwy + r20 * fn
        bfy = r01 * fwx + r11 * fwy + r21 * fn
        bfz = r02 * fwx + r12 * fwy + r22 * fn
        fbx += bfx
        fby += bfy
        fbz += bfz
        tqx += cy * bfz - cz * bfy
        tqy += cz * bfx - cx * bfz
        tqz += cx * bfy - cy * bfx
    s[k, L.BODY_CONTACTS] = contacts
    return -1, (fbx, fby, fbz, tqx, tqy, tqz)


@njit_inner(_nrt=False, forceinline=True)
def _integrate_velocities(p, k, rot, vel, omega, acc, dt):
    """Semi-implicit Euler, velocity half: gravity (world -z) joins the body-frame forces,
    then linear velocity (world) and Euler's equations for the body rates.
    Returns (vx, vy, vz, wx, wy, wz)."""
    r00, r01, r02, r10, r11, r12, r20, r21, r22 = rot
    vx, vy, vz = vel
    wx, wy, wz = omega
    fbx, fby, fbz, tqx, tqy, tqz = acc
    m = p[k, L.P_MASS]
    g = p[k, L.P_GRAVITY]
    ixx = p[k, L.P_IXX]
    iyy = p[k, L.P_IYY]
    izz = p[k, L.P_IZZ]
    mg = m * g
    fbx -= mg * r20
    fby -= mg * r21
    fbz -= mg * r22
    inv_m = 1.0 / m
    abx = fbx * inv_m
    aby = fby * inv_m
    abz = fbz * inv_m
    vx = vx + (r00 * abx + r01 * aby + r02 * abz) * dt
    vy = vy + (r10 * abx + r11 * aby + r12 * abz) * dt
    vz = vz + (r20 * abx + r21 * aby + r22 * abz) * dt
    gx = wy * izz * wz - wz * iyy * wy
    gy = wz * ixx * wx - wx * izz * wz
    gz = wx * iyy * wy - wy * ixx * wx
    wx = wx + (tqx - gx) * (1.0 / ixx) * dt
    wy = wy + (tqy - gy) * (1.0 / iyy) * dt
    wz = wz + (tqz - gz) * (1.0 / izz) * dt
    return vx, vy, vz, wx, wy, wz


@njit_inner(_nrt=False, forceinline=True)
def _implicit_damping(p, k, rot, vel, omega, dmat, svec, fsus, dt):
    """The suspension's spring share and implicit damping on the coupled heave / roll / pitch
    velocities: ``(M + dt D) u' = M u`` over u = (world vz, roll rate, pitch rate), stable for
    any damping (docs/architecture.md). Returns (vx, vy, vz, wx, wy)."""
    r02 = rot[2]
    r12 = rot[5]
    r22 = rot[8]
    vx, vy, vz = vel
    wx, wy = omega
    d00, d01, d02, d10, d11, d12, d20, d21, d22 = dmat
    s0, s1, s2 = svec
    m = p[k, L.P_MASS]
    ixx = p[k, L.P_IXX]
    iyy = p[k, L.P_IYY]
    inv_m = 1.0 / m
    vz = vz + r22 * fsus * inv_m * dt
    b0 = m * vz
    b1 = ixx * wx
    b2 = iyy * wy
    a00 = m + dt * d00
    a01 = dt * d01
    a02 = dt * d02
    a10 = dt * d10
    a11 = ixx + dt * d11
    a12 = dt * d12
    a20 = dt * d20
    a21 = dt * d21
    a22 = iyy + dt * d22
    # 3x3 solve by Cramer's rule (diagonally dominant: det > 0)
    c00 = a11 * a22 - a12 * a21
    c01 = a12 * a20 - a10 * a22
    c02 = a10 * a21 - a11 * a20
    det = a00 * c00 + a01 * c01 + a02 * c02
    inv_det = 1.0 / det
    vz = (b0 * c00 + b1 * (a02 * a21 - a01 * a22) + b2 * (a01 * a12 - a02 * a11)) * inv_det
    wx = (b0 * c01 + b1 * (a00 * a22 - a02 * a20) + b2 * (a02 * a10 - a00 * a12)) * inv_det
    wy = (b0 * c02 + b1 * (a01 * a20 - a00 * a21) + b2 * (a00 * a11 - a01 * a10)) * inv_det
    # the suspension force's horizontal share, with the damping it ended up applying
    ftot = fsus - (s0 * vz + s1 * wx + s2 * wy)
    vx = vx + r02 * ftot * inv_m * dt
    vy = vy + r12 * ftot * inv_m * dt
    return vx, vy, vz, wx, wy


@njit_inner(_nrt=False, forceinline=True)
def _integrate_pose(s, ist, k, vel, omega, dt):
    """Semi-implicit Euler, position half: the new velocities move the CG and turn the
    quaternion (renormalised); then the timing gate: a right-to-left crossing of the segment
    G0 -> G1 by the CG's (x, y) path is timed inside the substep."""
    vx, vy, vz = vel
    wx, wy, wz = omega
    px = s[k, L.POS_X]
    py = s[k, L.POS_Y]
    pz = s[k, L.POS_Z]
    qw = s[k, L.QUAT_W]
    qx = s[k, L.QUAT_X]
    qy = s[k, L.QUAT_Y]
    qz = s[k, L.QUAT_Z]
    s[k, L.PREV_X] = px
    s[k, L.PREV_Y] = py
    npx = px + vx * dt
    npy = py + vy * dt
    s[k, L.POS_X] = npx
    s[k, L.POS_Y] = npy
    s[k, L.POS_Z] = pz + vz * dt
    s[k, L.VEL_X] = vx
    s[k, L.VEL_Y] = vy
    s[k, L.VEL_Z] = vz
    s[k, L.OMEGA_X] = wx
    s[k, L.OMEGA_Y] = wy
    s[k, L.OMEGA_Z] = wz
    h2 = 0.5 * dt
    nqw = qw - h2 * (qx * wx + qy * wy + qz * wz)
    nqx = qx + h2 * (qw * wx + qy * wz - qz * wy)
    nqy = qy + h2 * (qw * wy + qz * wx - qx * wz)
    nqz = qz + h2 * (qw * wz + qx * wy - qy * wx)
    qn = 1.0 / math.sqrt(nqw * nqw + nqx * nqx + nqy * nqy + nqz * nqz)
    s[k, L.QUAT_W] = nqw * qn
    s[k, L.QUAT_X] = nqx * qn
    s[k, L.QUAT_Y] = nqy * qn
    s[k, L.QUAT_Z] = nqz * qn
    if s[k, L.GATE_TIME] < 0.0:
        gx0 = s[k, L.GATE_X0]
        gy0 = s[k, L.GATE_Y0]
        gdx = s[k, L.GATE_X1] - gx0
        gdy = s[k, L.GATE_Y1] - gy0
        if gdx != 0.0 or gdy != 0.0:
            side0 = gdx * (py - gy0) - gdy * (px - gx0)
            side1 = gdx * (npy - gy0) - gdy * (npx - gx0)
            if side0 < 0.0 and side1 >= 0.0:
                f = side0 / (side0 - side1)
                cx = px + (npx - px) * f
                cy = py + (npy - py) * f
                along = ((cx - gx0) * gdx + (cy - gy0) * gdy) / (gdx * gdx + gdy * gdy)
                if along >= 0.0 and along <= 1.0:
                    s[k, L.GATE_TIME] = (ist[k, L.I_SUBSTEPS] + f) * dt
    ist[k, L.I_SUBSTEPS] += 1


@njit_inner(_nrt=False)
def _substep(k, s, ist, p, ter, dt, ext, ws, arc):
    """One substep of car ``k``, phase by phase, under the model switches ``ext, ws, arc``
    (:func:`model_switches`). Returns -1, or the tile it needed that its terrain has not filled
    yet (the car's row is then left half-stepped: the caller restores it)."""
    tid = ist[k, L.I_TERRAIN]
    # ---- orientation (body -> world rotation matrix) and body-frame velocities
    rot = rotation_of(s, k)
    r00, r01, r02, r10, r11, r12, r20, r21, r22 = rot
    pos = (s[k, L.POS_X], s[k, L.POS_Y], s[k, L.POS_Z])
    vx = s[k, L.VEL_X]
    vy = s[k, L.VEL_Y]
    vz = s[k, L.VEL_Z]
    vbx = r00 * vx + r10 * vy + r20 * vz
    vby = r01 * vx + r11 * vy + r21 * vz
    vbz = r02 * vx + r12 * vy + r22 * vz
    wx = s[k, L.OMEGA_X]
    wy = s[k, L.OMEGA_Y]
    wz = s[k, L.OMEGA_Z]

    # ---- steering and drive demand (drivetrain: engine, gearbox, torque split)
    delta = _steer(p, s, k, dt)
    sd, cd = sincosx(delta)
    nw = int(p[k, L.P_N_WHEELS])
    drive = _drive(p, s, ist, k, nw, vbx, ext, ws)

    # ---- pass 1: wheel contact, suspension and damping (and the anti-roll bars)
    miss, fbz, tqx, tqy, fsus, n_driven, total_load, hmax, dmat, svec = _suspension(
        p, s, ist, k, ter, rot, pos, vz, (wx, wy, wz), dt, ext
    )
    if miss >= 0:
        return miss
    explicit = p[k, L.P_EXPLICIT_DAMPING] > 0.5
    if (
        ext is not None
        and not explicit
        and (p[k, L.PX_ARB_FRONT] > 0.0 or p[k, L.PX_ARB_REAR] > 0.0)
    ):
        tqx, tqy = _anti_roll_bars(p, s, k, tqx, tqy)

    # ---- pass 2: tires (and the extended vehicles' whole-vehicle terms)
    ground = (ter[4], tid)
    tire_motion = (vbx, vby, wx, wy, wz, sd, cd)
    carry = (n_driven, total_load, tqx, tqy)
    fbx, fby, tqx, tqy, tqz, n_grounded, rear_alpha, n_rear = _tires(
        p, s, k, ground, rot, tire_motion, drive, carry, dt, ext, ws, arc
    )
    if ext is not None and p[k, L.PX_VEHICLE_TERMS] > 0.5:
        motion = (vbx, vby, wx, wz, r21, r22, delta)
        grounded = (n_grounded, total_load, rear_alpha, n_rear)
        sums = (tqx, tqz, fbx, fby)
        tqx, tqz, fbx, fby = _vehicle_extras(p, k, s, motion, grounded, drive, sums, dt)

    # ---- chassis body against the terrain
    body_motion = (vbx, vby, vbz, wx, wy, wz)
    acc = (fbx, fby, fbz, tqx, tqy, tqz)
    miss, acc = _body_contact(p, s, k, ter, tid, rot, pos, body_motion, hmax, acc, dt, ext)
    if miss >= 0:
        return miss

    # ---- chassis integration: velocities, implicit suspension damping, pose, timing gate
    vx, vy, vz, wx, wy, wz = _integrate_velocities(p, k, rot, (vx, vy, vz), (wx, wy, wz), acc, dt)
    if not explicit and svec[0] > 0.0:
        vx, vy, vz, wx, wy = _implicit_damping(
            p, k, rot, (vx, vy, vz), (wx, wy), dmat, svec, fsus, dt
        )
    _integrate_pose(s, ist, k, (vx, vy, vz), (wx, wy, wz), dt)
    return -1


@njit_inner(_nrt=False)
def _step_car(ii, k, s, ist, p, ter, n_substeps, dt, scratch, ext, ws, arc):
    """``n_substeps`` substeps of car ``k``. If a substep needs a tile its terrain has not
    filled, the car is put back as it was before this call and ``miss[ii]`` names the tile
    (else -1), so the caller can fill it and step the car again. ``scratch`` is
    ``(save, isave, miss)``: the rows the car's state is saved in, and the missed tiles."""
    save, isave, miss = scratch
    ns = s.shape[1]
    ni = ist.shape[1]
    for c in range(ns):
        save[ii, c] = s[k, c]
    for c in range(ni):
        isave[ii, c] = ist[k, c]
    miss[ii] = -1
    for _ in range(n_substeps):
        m = _substep(k, s, ist, p, ter, dt, ext, ws, arc)
        if m >= 0:
            for c in range(ns):
                s[k, c] = save[ii, c]
            for c in range(ni):
                ist[k, c] = isave[ii, c]
            miss[ii] = m
            return


def model_switches(extended: bool, tire_model: int) -> tuple[bool | None, bool | None, bool | None]:
    """The compile-time switches ``(ext, ws, arc)`` of the kernels for cars of one model.

    Each is ``None`` (off) or ``True`` (on); numba compiles one specialization per combination
    and prunes the branches of the ``None`` ones (docs/architecture.md), so the direct,
    wheel-speed and arcade tire models of extended vehicles compile only when a car uses them.
    Every car a kernel call steps must be of that model.
    """
    if not extended:
        return None, None, None
    return (
        True,
        True if tire_model == L.TIRE_WHEEL_SPEED else None,
        True if tire_model == L.TIRE_ARCADE else None,
    )


@njit(cache=True)
def step_cars(s, ist, p, ter, n_substeps, cars, dt, save, isave, miss, ahead_m, req, ext, ws, arc):
    """Advance cars ``cars`` (int64 indices) by ``n_substeps`` substeps of ``dt`` (the product
    always uses 1/480 s; other values are for validation only), serially.

    ``ter`` is the terrain record ``(heights, surfaces, tiles, meta, grip)`` of a
    :class:`physics.terrain.TerrainSet`; ``save``/``isave`` (len(cars), row width) are scratch
    rows; ``miss`` (len(cars),) receives -1 or the tile a car still needs (see _step_car).
    ``ext, ws, arc`` are :func:`model_switches` of the cars' model (all cars of one call share
    it).

    With ``ahead_m >= 0`` the call first lists into ``req`` the unfilled tiles the cars may
    reach in this step (:func:`missing_tiles`, margin ``ahead_m``); if there are any it steps
    nothing and returns minus their count (which may pass ``req``'s length): the caller fills
    them and calls again. Otherwise returns how many cars still need a tile (``miss >= 0``).
    """
    if ahead_m >= 0.0:
        n = missing_tiles(s, ist, p, ter[2], ter[3], cars, n_substeps * dt, ahead_m, req)
        if n:
            return -n
    scratch = (save, isave, miss)
    for ii in range(cars.shape[0]):
        _step_car(ii, cars[ii], s, ist, p, ter, n_substeps, dt, scratch, ext, ws, arc)
    return _count_missed(miss)


@njit(cache=True, parallel=True)
def step_cars_parallel(
    s, ist, p, ter, n_substeps, cars, dt, save, isave, miss, ahead_m, req, ext, ws, arc
):
    """As :func:`step_cars`, with the cars spread over threads (``prange`` over cars only)."""
    if ahead_m >= 0.0:
        n = missing_tiles(s, ist, p, ter[2], ter[3], cars, n_substeps * dt, ahead_m, req)
        if n:
            return -n
    scratch = (save, isave, miss)
    for ii in prange(cars.shape[0]):
        _step_car(ii, cars[ii], s, ist, p, ter, n_substeps, dt, scratch, ext, ws, arc)
    return _count_missed(miss)


@njit_inner(_nrt=False)
def _count_missed(miss):
    """How many of ``miss`` are a tile (>= 0) rather than -1."""
    n = 0
    for ii in range(miss.shape[0]):
        if miss[ii] >= 0:
            n += 1
    return n


@njit(cache=True, _nrt=False)
def reach_m(p, k):
    """How far from its CG car ``k`` can sample the terrain (m): its farthest wheel anchor or
    body corner."""
    r2 = 0.0
    for w in range(int(p[k, L.P_N_WHEELS])):
        x = p[k, L.pw(w, L.PW_X)]
        y = p[k, L.pw(w, L.PW_Y)]
        z = p[k, L.pw(w, L.PW_Z)]
        r2 = max(r2, x * x + y * y + z * z)
    for cx in (p[k, L.P_BODY_XF], p[k, L.P_BODY_XR]):
        for cz in (p[k, L.P_BODY_ZB], p[k, L.P_BODY_ZT]):
            hw = p[k, L.P_BODY_HW]
            r2 = max(r2, cx * cx + hw * hw + cz * cz)
    return math.sqrt(r2)


@njit_inner(_nrt=False)
def missing_tiles(s, ist, p, tiles, meta, cars, horizon_s, margin_m, out):
    """The terrain tiles cars may sample within the next ``horizon_s`` seconds that are not
    filled yet: those within reach + 1.2 x speed x horizon + ``margin_m`` of each car. Rows
    ``(terrain, tile)`` into ``out``; returns the count (it may pass ``out``'s length). A tile
    missed anyway only costs the car a second try (see :func:`_step_car`)."""
    n = np.int64(0)  # not a literal 0: collect_missing compiles once (see physics.jit)
    for ii in range(cars.shape[0]):
        k = cars[ii]
        vx = s[k, L.VEL_X]
        vy = s[k, L.VEL_Y]
        vz = s[k, L.VEL_Z]
        v = math.sqrt(vx * vx + vy * vy + vz * vz)
        if not v < 1e4:
            v = 0.0
        r = reach_m(p, k) + 1.2 * v * horizon_s + margin_m
        n = collect_missing(
            tiles, meta, ist[k, L.I_TERRAIN], s[k, L.POS_X], s[k, L.POS_Y], r, out, n
        )
    return n


@njit(cache=True)
def set_commands(s, ist, cmds, cars, strict):
    """Write clamped commands (steer, throttle, brake, handbrake) for cars ``cars``.

    A row with a NaN or infinite entry is refused: that car's commands stay as they were and
    its misuse counter goes up by one. Returns the number of refused rows. ``strict``: a
    refused row refuses the whole call instead, before anything is written; returns
    ``-1 - i`` for the first such row ``i``.
    """
    if strict:
        for ii in range(cars.shape[0]):
            for j in range(4):
                if not math.isfinite(cmds[ii, j]):
                    return -1 - ii
    refused = 0
    for ii in range(cars.shape[0]):
        k = cars[ii]
        st = cmds[ii, 0]
        th = cmds[ii, 1]
        br = cmds[ii, 2]
        hb = cmds[ii, 3]
        if not (
            math.isfinite(st) and math.isfinite(th) and math.isfinite(br) and math.isfinite(hb)
        ):
            ist[k, L.I_MISUSE] += 1
            refused += 1
            continue
        s[k, L.CMD_STEER] = min(max(st, -1.0), 1.0)
        s[k, L.CMD_THROTTLE] = min(max(th, 0.0), 1.0)
        s[k, L.CMD_BRAKE] = min(max(br, 0.0), 1.0)
        s[k, L.CMD_HANDBRAKE] = min(max(hb, 0.0), 1.0)
    return refused


@njit(cache=True)
def set_tank_commands(s, ist, cmds, cars):
    """Skid steering: rows (left, right) throttle in [-1, 1] and brake [0, 1], clamped.

    Stored as the held throttle (their mean) and steer (half the difference, right minus
    left), so the kernel's per-side throttles are exactly the clamped inputs. NaN/inf rows are
    refused as in :func:`set_commands`.
    """
    refused = 0
    for ii in range(cars.shape[0]):
        k = cars[ii]
        lt = cmds[ii, 0]
        rt = cmds[ii, 1]
        br = cmds[ii, 2]
        if not (math.isfinite(lt) and math.isfinite(rt) and math.isfinite(br)):
            ist[k, L.I_MISUSE] += 1
            refused += 1
            continue
        lt = min(max(lt, -1.0), 1.0)
        rt = min(max(rt, -1.0), 1.0)
        s[k, L.CMD_THROTTLE] = 0.5 * (lt + rt)
        s[k, L.CMD_STEER] = 0.5 * (rt - lt)
        s[k, L.CMD_BRAKE] = min(max(br, 0.0), 1.0)
        s[k, L.CMD_HANDBRAKE] = 0.0
    return refused


@njit(cache=True)
def place_cars(s, ist, p, heights, tiles, meta, cars, poses, terrain_ids):
    """Reset cars to rest at poses (x, y, heading_rad, forward_speed_mps) on their terrain.

    The car starts level in yaw ``heading`` with its CG at the static ride height above the
    terrain under it; everything else (commands, readings, timers, gate) is cleared. Returns
    the number of cars whose start tile was not filled (their height is then NaN).
    """
    missing = 0
    for ii in range(cars.shape[0]):
        k = cars[ii]
        misuse = ist[k, L.I_MISUSE]
        for c in range(s.shape[1]):
            s[k, c] = 0.0
        for c in range(ist.shape[1]):
            ist[k, c] = 0
        ist[k, L.I_MISUSE] = misuse
        tid = terrain_ids[ii]
        ist[k, L.I_TERRAIN] = tid
        x = poses[ii, 0]
        y = poses[ii, 1]
        sh, ch = sincosx(0.5 * poses[ii, 2])
        s[k, L.QUAT_W] = ch
        s[k, L.QUAT_Z] = sh
        # ride height from wheel 0's geometry minus the static sag of an even load split
        nw = int(p[k, L.P_N_WHEELS])
        w0 = np.int64(0)  # not a literal: L.pw compiles once (see physics.jit)
        ride = -(p[k, L.pw(w0, L.PW_Z)] - p[k, L.pw(w0, L.PW_REST)] - p[k, L.pw(w0, L.PW_RADIUS)])
        ext = p[k, L.P_EXTENDED] > 0.5
        if ext:
            # per-wheel springs: the static sag of wheel 0 from its static load
            sag = p[k, L.pxw(0, L.PXW_STATIC_LOAD)] / (p[k, L.P_MASS] * p[k, L.pxw(0, L.PXW_K)])
        else:
            sag = p[k, L.P_GRAVITY] / (nw * p[k, L.P_CONTACT_K])
        s[k, L.POS_X] = x
        s[k, L.POS_Y] = y
        z = sample_height(heights, tiles, meta, tid, x, y)
        if z != z:
            missing += 1
        s[k, L.POS_Z] = z + ride - sag
        sy, cy = sincosx(poses[ii, 2])
        s[k, L.VEL_X] = cy * poses[ii, 3]
        s[k, L.VEL_Y] = sy * poses[ii, 3]
        s[k, L.PREV_X] = x
        s[k, L.PREV_Y] = y
        s[k, L.GATE_TIME] = -1.0
        if ext:
            s[k, L.SX_DAMAGE] = 1.0
            for w in range(nw):
                s[k, L.SXW_WEAR + w] = 1.0
                s[k, L.WL_OMEGA + w] = poses[ii, 3] / p[k, L.pw(w, L.PW_RADIUS)]
            if p[k, L.PX_DRIVETRAIN] > 0.5:
                ist[k, L.I_GEAR] = 1  # first gear, clutch closed
                s[k, L.ENGINE_RPM] = p[k, L.PX_TQ_RPM]
    return missing


def all_cars(n: int) -> np.ndarray:
    return np.arange(n, dtype=np.int64)
