"""The numba kernels: one call steps a batch of cars through whole substeps.

Per substep and per car (see DESIGN.md, "The vehicle model"):

1. Steering slews toward ``cmd * lock`` at the steering rate.
2. Pass 1, per wheel: a ray from the suspension anchor along the chassis -z axis meets the
   heightfield (two fixed-point refinements of the hit point). Penetration ``pen`` past the
   unloaded wheel gives a spring-damper load ``m (K pen - C v_sep)``, push only, the spring
   limited by travel. Between ``soft_gap_min`` and ``soft_gap_max`` of air gap a weak spring
   pulls the chassis down, unless the wheel is lifting off faster than the gate (a jump).
3. Pass 2, per loaded wheel: slip angle in the steered wheel frame with the denominator floor;
   effective mu = base x surface x load sensitivity x wear x damage; longitudinal force first
   (drive capped at ``drive_cap`` of the circle, service brake at ``abs_fraction``, handbrake
   locks without ABS, rolling resistance), lateral force from 2s/(1+s^2) takes what remains of
   the circle. Tire forces act at the contact patch, below the CG, so pitch and roll - and
   therefore load transfer - come out of the springs.
4. Chassis box corners below the terrain get a penalty contact with Coulomb friction, so a
   rolled car lies on its roof.
5. Semi-implicit Euler for the rigid body (gravity, forces, Euler's equations). The suspension
   damping acts implicitly on the coupled heave / roll / pitch velocities: the 3x3 system
   ``(M + dt D) u' = M u`` is the multi-wheel form of "divide by 1 + lambda dt", stable for
   any lambda dt.
6. The CG's (x, y) segment over the substep is tested against the car's timing gate; the
   crossing time is interpolated inside the substep.

Only ``+ - * /``, ``sqrt``, ``floor`` and ``physics.mathx`` are used: no libm transcendentals,
no reductions across cars, no allocation. Cars are independent, so car k's result does not
depend on the batch it is in, nor on the order cars are stepped.
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit, prange

from physics import layout as L
from physics.mathx import atan2x, sincosx
from physics.terrain import sample_height, sample_height_grad

# Chassis corners are only looked at when they come within this height of the highest ground
# found under the wheels (saves four terrain samples per substep when cruising).
_CORNER_MARGIN_M = 1.0
# Largest rise rate of the ground under a wheel (m/s) the dampers respond to.
_MAX_GROUND_RATE = 10.0


@njit(cache=True)
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


@njit(cache=True)
def lateral_curve(alpha, peak, clamp):
    """Normalised lateral grip 2s/(1+s^2), s = alpha/peak, |s| clamped at ``clamp``.

    Signed like ``alpha`` (the force opposes it): odd, |value| <= 1, exactly 1 at the peak, and
    never below 2c/(1+c^2) past the clamp (0.92 for the seed's c = 1.5).
    """
    s = alpha / peak
    a = abs(s)
    if a > clamp:
        a = clamp
    f = 2.0 * a / (1.0 + a * a)
    if s < 0.0:
        return -f
    if s > 0.0:
        return f
    return 0.0


@njit(cache=True)
def load_sensitivity_factor(load_n, load_ref_n, sensitivity):
    """mu multiplier 1 - k max(0, N/N_ref - 1), floored at 0: heavily loaded tires grip less."""
    over = load_n / load_ref_n - 1.0
    if over < 0.0:
        over = 0.0
    f = 1.0 - sensitivity * over
    return f if f > 0.0 else 0.0


@njit(cache=True)
def _substep(k, s, ist, p, heights, surfaces, meta, grip, dt):
    tid = ist[k, L.I_TERRAIN]
    m = p[k, L.P_MASS]
    g = p[k, L.P_GRAVITY]
    ixx = p[k, L.P_IXX]
    iyy = p[k, L.P_IYY]
    izz = p[k, L.P_IZZ]
    inv_ixx = 1.0 / ixx
    inv_iyy = 1.0 / iyy
    inv_izz = 1.0 / izz
    kc = p[k, L.P_CONTACT_K]
    cc = p[k, L.P_CONTACT_C]
    explicit = p[k, L.P_EXPLICIT_DAMPING] > 0.5
    nsub = ist[k, L.I_SUBSTEPS]
    inv_dt = 1.0 / dt

    # ---- orientation (body -> world rotation matrix) and body-frame velocities
    qw = s[k, L.QUAT_W]
    qx = s[k, L.QUAT_X]
    qy = s[k, L.QUAT_Y]
    qz = s[k, L.QUAT_Z]
    r00, r01, r02, r10, r11, r12, r20, r21, r22 = rotation_of(s, k)
    # the wheel rays meet the ground only while the chassis is less than ~78 deg from upright
    rays = r22 > 0.2
    inv_r22 = 1.0 / r22 if rays else 0.0
    px = s[k, L.POS_X]
    py = s[k, L.POS_Y]
    pz = s[k, L.POS_Z]
    vx = s[k, L.VEL_X]
    vy = s[k, L.VEL_Y]
    vz = s[k, L.VEL_Z]
    vbx = r00 * vx + r10 * vy + r20 * vz
    vby = r01 * vx + r11 * vy + r21 * vz
    vbz = r02 * vx + r12 * vy + r22 * vz
    wx = s[k, L.OMEGA_X]
    wy = s[k, L.OMEGA_Y]
    wz = s[k, L.OMEGA_Z]

    # ---- steering slew
    target = s[k, L.CMD_STEER] * p[k, L.P_STEER_LOCK]
    delta = s[k, L.STEER_ANGLE]
    dmax = p[k, L.P_STEER_RATE] * dt
    d = target - delta
    if d > dmax:
        d = dmax
    elif d < -dmax:
        d = -dmax
    delta = delta + d
    s[k, L.STEER_ANGLE] = delta
    sd, cd = sincosx(delta)

    # ---- drive demand (electric: force-limited, then power-limited, fading at top speed)
    fdrive = p[k, L.P_DRIVE_FORCE]
    sp = abs(vbx)
    if sp > 0.1 and p[k, L.P_POWER] < fdrive * sp:
        fdrive = p[k, L.P_POWER] / sp
    vmax = p[k, L.P_VMAX]
    band = p[k, L.P_VMAX_BAND]
    if vbx > vmax - band:
        fade = (vmax - vbx) / band
        if fade < 0.0:
            fade = 0.0
        fdrive = fdrive * fade
    fdrive = fdrive * s[k, L.CMD_THROTTLE]
    s[k, L.DRIVE_FORCE] = fdrive

    # body-frame force and torque accumulators
    fbx = 0.0
    fby = 0.0
    fbz = 0.0
    tqx = 0.0
    tqy = 0.0
    tqz = 0.0
    # implicit suspension damping over u = (world vz, roll rate, pitch rate): D = sum g B J^T,
    # B = where a wheel's force acts (world z share, roll arm, pitch arm), J = what its damper
    # sees (the anchor's world-z speed); S = sum g J and fsus = sum of explicit spring forces
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
    nw = int(p[k, L.P_N_WHEELS])
    n_driven = 0
    total_load = 0.0
    hmax = -1e300
    soft_on = p[k, L.P_SOFT_ENABLED] > 0.5
    # ---- pass 1: suspension
    for w in range(nw):
        ax = p[k, L.pw(w, L.PW_X)]
        ay = p[k, L.pw(w, L.PW_Y)]
        az = p[k, L.pw(w, L.PW_Z)]
        reach = p[k, L.pw(w, L.PW_REST)] + p[k, L.pw(w, L.PW_RADIUS)]
        if p[k, L.pw(w, L.PW_DRIVEN)] > 0.5:
            n_driven += 1
        awx = px + r00 * ax + r01 * ay + r02 * az
        awy = py + r10 * ax + r11 * ay + r12 * az
        awz = pz + r20 * ax + r21 * ay + r22 * az
        h, hgx, hgy, node = sample_height_grad(heights, meta, tid, awx, awy)
        s[k, L.WL_SURFACE + w] = surfaces[node]  # the surface under the wheel
        pen = -1e300
        if rays:
            # the ray along -(r02, r12, r22) meets the ground's tangent plane at the anchor
            den = r22 - hgx * r02 - hgy * r12
            if den > 0.1:
                lr = (awz - h) / den
                h = h - (hgx * r02 + hgy * r12) * lr
                pen = reach - lr
        if h > hmax:
            hmax = h
        # the ground's rise under the moving wheel, and its rise predicted over this substep
        # (the implicit damper tracks the predicted value, so it does not lag a curving road)
        dhdt = 0.0
        dhdt_pred = 0.0
        if nsub > 0:
            dhdt = (h - s[k, L.WL_GROUND_Z + w]) * inv_dt
            # a cliff face met at speed is a crash, not a suspension event: cap the rate
            if dhdt > _MAX_GROUND_RATE:
                dhdt = _MAX_GROUND_RATE
            elif dhdt < -_MAX_GROUND_RATE:
                dhdt = -_MAX_GROUND_RATE
            dhdt_pred = dhdt
            if nsub > 1:
                dhdt_pred = 2.0 * dhdt - s[k, L.WL_GROUND_VZ + w]
        s[k, L.WL_GROUND_Z + w] = h
        s[k, L.WL_GROUND_VZ + w] = dhdt
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
            f_unit = kc * comp - cc * sep
            if f_unit > 0.0:
                load = m * f_unit
                if explicit:
                    fbz += load
                    tqx += ay * load
                    tqy -= ax * load
                else:
                    # spring and the explicit share of the damper (yaw-rate and ground terms)
                    fz = m * (kc * comp - cc * (wz * jz - dhdt_pred) * inv_r22)
                    fsus += fz
                    tqx += ay * fz
                    tqy -= ax * fz
                    gd = m * cc * inv_r22
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
            gap = -pen
            if (
                gap >= p[k, L.P_SOFT_GAP_MIN]
                and gap <= p[k, L.P_SOFT_GAP_MAX]
                and sep <= p[k, L.P_SOFT_LIFT_GATE]
            ):
                fs = -(p[k, L.P_SOFT_K] * gap + p[k, L.P_SOFT_C] * sep)
                lo = -kc * p[k, L.P_SOFT_CLAMP]
                if fs < lo:
                    fs = lo
                if fs > 0.0:
                    fs = 0.0
                fz = m * fs
                fbz += fz
                tqx += ay * fz
                tqy -= ax * fz
        s[k, L.WL_LOAD + w] = load
        s[k, L.WL_COMPRESSION + w] = comp
        s[k, L.WL_GROUNDED + w] = 1.0 if load > 0.0 else 0.0
        total_load += load

    # ---- pass 2: tires
    # resistive forces stop at zero speed: cap at the wheel's useful mass (load share x mass)
    stop_scale = m * inv_dt / total_load if total_load > 0.0 else 0.0
    throttle_share = 0.0
    if n_driven > 0:
        throttle_share = fdrive / n_driven
    brake = s[k, L.CMD_BRAKE] * p[k, L.P_BRAKE_FORCE]
    hb = s[k, L.CMD_HANDBRAKE] * p[k, L.P_HANDBRAKE_FORCE]
    mu0 = p[k, L.P_MU_BASE] * p[k, L.P_GRIP_WEAR] * p[k, L.P_GRIP_DAMAGE]
    peak = p[k, L.P_PEAK_SLIP]
    clampn = p[k, L.P_POST_PEAK_CLAMP]
    eps = p[k, L.P_SLIP_EPS]
    lref = p[k, L.P_LOAD_REF]
    lsens = p[k, L.P_LOAD_SENS]
    for w in range(nw):
        load = s[k, L.WL_LOAD + w]
        radius = p[k, L.pw(w, L.PW_RADIUS)]
        if load <= 0.0:
            s[k, L.WL_USAGE + w] = 0.0
            s[k, L.WL_FX + w] = 0.0
            s[k, L.WL_FY + w] = 0.0
            s[k, L.WL_SLIP_ANGLE + w] = 0.0
            s[k, L.WL_SPIN + w] += s[k, L.WL_OMEGA + w] * dt
            continue
        ax = p[k, L.pw(w, L.PW_X)]
        ay = p[k, L.pw(w, L.PW_Y)]
        az = p[k, L.pw(w, L.PW_Z)]
        reach = p[k, L.pw(w, L.PW_REST)] + radius
        rx = ax
        ry = ay
        rz = az - (reach - s[k, L.WL_COMPRESSION + w])  # contact patch, body frame
        if p[k, L.pw(w, L.PW_STEER)] > 0.5:
            sw = sd
            cw = cd
        else:
            sw = 0.0
            cw = 1.0
        vpx = vbx + wy * rz - wz * ry
        vpy = vby + wz * rx - wx * rz
        vlong = cw * vpx + sw * vpy
        vlat = -sw * vpx + cw * vpy
        # effective mu: every grip factor multiplies into one value
        sid = int(s[k, L.WL_SURFACE + w])
        mu = mu0 * grip[tid, sid] * load_sensitivity_factor(load, lref, lsens)
        fmax = mu * load
        # longitudinal first
        fx_drive = 0.0
        if p[k, L.pw(w, L.PW_DRIVEN)] > 0.5:
            fx_drive = throttle_share
            cap = p[k, L.P_DRIVE_CAP] * fmax
            if fx_drive > cap:
                fx_drive = cap
        resist = brake * p[k, L.pw(w, L.PW_BRAKE_SHARE)] + p[k, L.P_CRR] * load
        if p[k, L.pw(w, L.PW_HANDBRAKE)] > 0.5 and hb > 0.0:
            resist = resist + hb  # the handbrake locks the wheel: no ABS margin
            cap = fmax
        else:
            cap = p[k, L.P_ABS] * fmax  # ABS keeps sqrt(1 - abs^2) of the circle for steering
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
        if fx > fmax:
            fx = fmax
        elif fx < -fmax:
            fx = -fmax
        # lateral takes what is left of the circle
        alpha = atan2x(vlat, abs(vlong) + eps)
        fy_des = fmax * lateral_curve(alpha, peak, clampn)
        rem = fmax * fmax - fx * fx
        budget = math.sqrt(rem) if rem > 0.0 else 0.0
        if fy_des > budget:
            fy = -budget
        elif fy_des < -budget:
            fy = budget
        else:
            fy = -fy_des
        # to the body frame, applied at the contact patch
        fxb = cw * fx - sw * fy
        fyb = sw * fx + cw * fy
        fbx += fxb
        fby += fyb
        tqx -= rz * fyb
        tqy += rz * fxb
        tqz += rx * fyb - ry * fxb
        s[k, L.WL_SLIP_ANGLE + w] = alpha
        s[k, L.WL_FX + w] = fx
        s[k, L.WL_FY + w] = fy
        s[k, L.WL_MU + w] = mu
        s[k, L.WL_USAGE + w] = math.sqrt(fx * fx + fy * fy) / fmax if fmax > 0.0 else 0.0
        om = vlong / radius
        s[k, L.WL_OMEGA + w] = om
        s[k, L.WL_SPIN + w] += om * dt
        s[k, L.WL_SLIP_RATIO + w] = 0.0

    # ---- chassis box corners against the terrain
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
        hc = sample_height(heights, meta, tid, wcx, wcy)
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

    # ---- gravity (world -z) in the body frame
    mg = m * g
    fbx -= mg * r20
    fby -= mg * r21
    fbz -= mg * r22

    # ---- integrate velocities (semi-implicit Euler)
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
    wx = wx + (tqx - gx) * inv_ixx * dt
    wy = wy + (tqy - gy) * inv_iyy * dt
    wz = wz + (tqz - gz) * inv_izz * dt

    if not explicit and s0 > 0.0:
        # explicit spring share: vertical now, horizontal after the solve with the final force
        vz = vz + r22 * fsus * inv_m * dt
        # implicit damping: (M + dt D) u' = M u, u = (world vz, roll rate, pitch rate)
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
        n0 = (b0 * c00 + b1 * (a02 * a21 - a01 * a22) + b2 * (a01 * a12 - a02 * a11)) * inv_det
        n1 = (b0 * c01 + b1 * (a00 * a22 - a02 * a20) + b2 * (a02 * a10 - a00 * a12)) * inv_det
        n2 = (b0 * c02 + b1 * (a01 * a20 - a00 * a21) + b2 * (a00 * a11 - a01 * a10)) * inv_det
        vz = n0
        wx = n1
        wy = n2
        # the suspension force's horizontal share, with the damping it ended up applying
        ftot = fsus - (s0 * vz + s1 * wx + s2 * wy)
        vx = vx + r02 * ftot * inv_m * dt
        vy = vy + r12 * ftot * inv_m * dt

    # ---- integrate pose
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

    # ---- timing gate: right-to-left crossing of the segment G0 -> G1, interpolated
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


@njit(cache=True)
def step_cars(s, ist, p, heights, surfaces, meta, grip, n_substeps, cars):
    """Advance cars ``cars`` (int64 indices) by ``n_substeps`` substeps of 1/480 s, serially."""
    for ii in range(cars.shape[0]):
        k = cars[ii]
        for _ in range(n_substeps):
            _substep(k, s, ist, p, heights, surfaces, meta, grip, L.DT)


@njit(cache=True)
def step_cars_dt(s, ist, p, heights, surfaces, meta, grip, n_substeps, cars, dt):
    """Validation only: step with a substep other than 1/480 s (e.g. to show why 480 Hz).

    Never used by the environment: its time base is the fixed 480 Hz of :func:`step_cars`.
    """
    for ii in range(cars.shape[0]):
        k = cars[ii]
        for _ in range(n_substeps):
            _substep(k, s, ist, p, heights, surfaces, meta, grip, dt)


@njit(cache=True, parallel=True)
def step_cars_parallel(s, ist, p, heights, surfaces, meta, grip, n_substeps, cars):
    """As :func:`step_cars`, with the cars spread over threads (``prange`` over cars only)."""
    for ii in prange(cars.shape[0]):
        k = cars[ii]
        for _ in range(n_substeps):
            _substep(k, s, ist, p, heights, surfaces, meta, grip, L.DT)


@njit(cache=True)
def set_commands(s, ist, cmds, cars):
    """Write clamped commands (steer, throttle, brake, handbrake) for cars ``cars``.

    A row with a NaN or infinite entry is refused: that car's commands stay as they were and
    its misuse counter goes up by one. Returns the number of refused rows.
    """
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
def place_cars(s, ist, p, heights, meta, cars, poses, terrain_ids):
    """Reset cars to rest at poses (x, y, heading_rad, forward_speed_mps) on their terrain.

    The car starts level in yaw ``heading`` with its CG at the static ride height above the
    terrain under it; everything else (commands, readings, timers, gate) is cleared.
    """
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
        ride = -(p[k, L.pw(0, L.PW_Z)] - p[k, L.pw(0, L.PW_REST)] - p[k, L.pw(0, L.PW_RADIUS)])
        sag = p[k, L.P_GRAVITY] / (nw * p[k, L.P_CONTACT_K])
        s[k, L.POS_X] = x
        s[k, L.POS_Y] = y
        s[k, L.POS_Z] = sample_height(heights, meta, tid, x, y) + ride - sag
        sy, cy = sincosx(poses[ii, 2])
        s[k, L.VEL_X] = cy * poses[ii, 3]
        s[k, L.VEL_Y] = sy * poses[ii, 3]
        s[k, L.PREV_X] = x
        s[k, L.PREV_Y] = y
        s[k, L.GATE_TIME] = -1.0


def all_cars(n: int) -> np.ndarray:
    return np.arange(n, dtype=np.int64)
