"""Named indices of the simulator's state and parameter arrays.

This is the only module that knows where a field lives. State is struct-of-arrays per car:

* ``state``: float64 (N, N_STATE) — chassis pose and velocities, commands, per-wheel readings.
* ``istate``: int64 (N, N_ISTATE) — substep counter, misuse counter, terrain index, flags.
* ``params``: float64 (N, N_PARAMS) — one packed parameter row per car (per-car randomisation).

Per-wheel fields occupy ``MAX_WHEELS`` consecutive columns: wheel ``w`` of field ``WL_LOAD`` is
column ``WL_LOAD + w``.

Changing this layout changes every state hash: bump ``LAYOUT_VERSION`` and the env version.
"""

from __future__ import annotations

from numba import njit

LAYOUT_VERSION = 1

#: Fixed physics substep (s). A control step is a whole number of these.
SUBSTEP_HZ = 480
DT = 1.0 / SUBSTEP_HZ

#: Wheel slots per car (the default rover uses 4).
MAX_WHEELS = 8
#: Chassis collision points per car (the corners of the body box).
N_CORNERS = 8

# ---------------------------------------------------------------- float state, per car
POS_X, POS_Y, POS_Z = 0, 1, 2  # CG position, world frame (m)
QUAT_W, QUAT_X, QUAT_Y, QUAT_Z = 3, 4, 5, 6  # body->world orientation, unit quaternion
VEL_X, VEL_Y, VEL_Z = 7, 8, 9  # CG velocity, world frame (m/s)
OMEGA_X, OMEGA_Y, OMEGA_Z = 10, 11, 12  # angular velocity, body frame (rad/s): roll, pitch, yaw
STEER_ANGLE = 13  # current road-wheel steer angle (rad, + left)
CMD_STEER, CMD_THROTTLE, CMD_BRAKE, CMD_HANDBRAKE = 14, 15, 16, 17  # held commands
DRIVE_FORCE = 18  # total drive force demanded at the last substep (N)
BODY_CONTACTS = 19  # chassis box corners touching the terrain at the last substep
GATE_X0, GATE_Y0, GATE_X1, GATE_Y1 = 20, 21, 22, 23  # timing gate segment (world, m)
GATE_TIME = 24  # time since reset at which the CG crossed the gate (s), -1 until crossed
PREV_X, PREV_Y = 25, 26  # CG (x, y) at the start of the last substep (m)
RESERVED0 = 27  # reserved for the drivetrain (engine speed)
_W0 = 28
WL_LOAD = _W0 + 0 * MAX_WHEELS  # normal load (N)
WL_SLIP_ANGLE = _W0 + 1 * MAX_WHEELS  # slip angle (rad)
WL_SLIP_RATIO = _W0 + 2 * MAX_WHEELS  # slip ratio (0 in the direct-force model)
WL_COMPRESSION = _W0 + 3 * MAX_WHEELS  # suspension compression (m), 0 when in the air
WL_GROUNDED = _W0 + 4 * MAX_WHEELS  # 1.0 when the wheel carries load
WL_SPIN = _W0 + 5 * MAX_WHEELS  # accumulated rolling angle (rad)
WL_SURFACE = _W0 + 6 * MAX_WHEELS  # surface id under the wheel
WL_USAGE = _W0 + 7 * MAX_WHEELS  # friction-circle usage |F| / (mu N), 0..1
WL_FX = _W0 + 8 * MAX_WHEELS  # longitudinal tire force, wheel frame (N)
WL_FY = _W0 + 9 * MAX_WHEELS  # lateral tire force, wheel frame (N, + left)
WL_GROUND_Z = _W0 + 10 * MAX_WHEELS  # terrain height under the wheel last substep (m)
WL_OMEGA = _W0 + 11 * MAX_WHEELS  # wheel angular speed (rad/s); rolling speed in this model
WL_MU = _W0 + 12 * MAX_WHEELS  # effective friction coefficient last substep
WL_GROUND_VZ = _W0 + 13 * MAX_WHEELS  # rate of rise of the ground under the wheel (m/s)
N_WHEEL_FIELDS = 14
N_STATE = _W0 + N_WHEEL_FIELDS * MAX_WHEELS

# ---------------------------------------------------------------- int state, per car
I_SUBSTEPS = 0  # substeps since reset
I_MISUSE = 1  # refused (non-finite) commands
I_TERRAIN = 2  # index into the TerrainSet
I_FLAGS = 3  # bit 0: a wheel touched since reset
I_RESERVED0 = 4  # reserved for the drivetrain (gear)
I_RESERVED1 = 5  # reserved for the drivetrain (clutch timer)
N_ISTATE = 6

# ---------------------------------------------------------------- packed parameters, per car
P_MASS = 0  # kg
P_IXX, P_IYY, P_IZZ = 1, 2, 3  # principal inertias, body frame (kg m^2)
P_GRAVITY = 4  # m/s^2
P_MU_BASE = 5
P_PEAK_SLIP = 6  # rad
P_POST_PEAK_CLAMP = 7  # normalised slip at which the lateral curve is clamped
P_PEAK_SLIP_RATIO = 8
P_LOAD_SENS = 9
P_LOAD_REF = 10  # N
P_ABS = 11  # service-brake fraction of the friction circle
P_DRIVE_CAP = 12  # drive fraction of the friction circle
P_SLIP_EPS = 13  # slip-angle denominator floor (m/s)
P_CONTACT_K = 14  # suspension stiffness per kg of vehicle mass (N/m/kg)
P_CONTACT_C = 15  # suspension damping per kg of vehicle mass (N s/m/kg)
P_SOFT_K = 16
P_SOFT_C = 17
P_SOFT_GAP_MIN = 18  # m
P_SOFT_GAP_MAX = 19  # m
P_SOFT_LIFT_GATE = 20  # m/s
P_SOFT_CLAMP = 21  # fraction of P_CONTACT_K
P_DRIVE_FORCE = 22  # peak total drive force (N)
P_POWER = 23  # W
P_VMAX = 24  # m/s, drive fades to zero here
P_VMAX_BAND = 25  # m/s, width of the fade
P_CRR = 26  # rolling-resistance coefficient
P_BRAKE_FORCE = 27  # total service brake force at full pedal (N)
P_HANDBRAKE_FORCE = 28  # per handbrake wheel at full lever (N)
P_STEER_LOCK = 29  # rad
P_STEER_RATE = 30  # rad/s
P_BODY_XF, P_BODY_XR, P_BODY_HW, P_BODY_ZB, P_BODY_ZT = 31, 32, 33, 34, 35  # body box (m)
P_BODY_K = 36  # per corner, per kg of vehicle mass
P_BODY_C = 37
P_BODY_MU = 38
P_EXPLICIT_DAMPING = 39  # 1.0: explicit Euler damping (validation only)
P_N_WHEELS = 40
P_GRIP_WEAR = 41  # grip factor hooks, multiply into mu (1.0 = new, undamaged)
P_GRIP_DAMAGE = 42
P_SOFT_ENABLED = 43
_PW0 = 48
# per-wheel parameter fields: column = _PW0 + w * N_WHEEL_PARAMS + field
PW_X, PW_Y, PW_Z = 0, 1, 2  # suspension anchor, body frame (m)
PW_REST = 3  # rest length (m)
PW_TRAVEL = 4  # m
PW_RADIUS = 5  # m
PW_STEER = 6  # 1.0 if steerable
PW_DRIVEN = 7  # 1.0 if driven
PW_BRAKE_SHARE = 8  # share of the service brake force
PW_HANDBRAKE = 9  # 1.0 if the handbrake acts on it
N_WHEEL_PARAMS = 10
N_PARAMS = _PW0 + MAX_WHEELS * N_WHEEL_PARAMS


@njit(cache=True)
def pw(w: int, field: int) -> int:
    """Column of per-wheel parameter ``field`` of wheel ``w``."""
    return _PW0 + w * N_WHEEL_PARAMS + field


PW_BASE = _PW0
