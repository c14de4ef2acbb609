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

from physics.jit import njit

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
ENGINE_RPM = 27  # engine speed (rpm); only the drivetrain model writes it
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
I_GEAR = 4  # -1 reverse, 0 neutral, 1..6; only the drivetrain model writes it
I_CLUTCH = 5  # substeps until the clutch closes again (drivetrain model)
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
P_TIRE_MODEL = 44  # TIRE_DIRECT (0, the seed game's shipped model), TIRE_WHEEL_SPEED, TIRE_ARCADE
P_EXTENDED = 45  # 1.0: the row carries the extension block below (and the state its columns)
PW_BASE = 48
# per-wheel parameter fields: column = PW_BASE + w * N_WHEEL_PARAMS + field
PW_X, PW_Y, PW_Z = 0, 1, 2  # suspension anchor, body frame (m)
PW_REST = 3  # rest length (m)
PW_TRAVEL = 4  # m
PW_RADIUS = 5  # m
PW_STEER = 6  # 1.0 if steerable
PW_DRIVEN = 7  # 1.0 if driven
PW_BRAKE_SHARE = 8  # share of the service brake force
PW_HANDBRAKE = 9  # 1.0 if the handbrake acts on it
N_WHEEL_PARAMS = 10
N_PARAMS = PW_BASE + MAX_WHEELS * N_WHEEL_PARAMS


@njit(cache=True)
def pw(w: int, field: int) -> int:
    """Column of per-wheel parameter ``field`` of wheel ``w``."""
    return PW_BASE + w * N_WHEEL_PARAMS + field


# ---------------------------------------------------------------- tire models
TIRE_DIRECT = 0  # longitudinal force straight from drive/brake demand; slip ratio 0 (Rally-v0)
TIRE_WHEEL_SPEED = 1  # integrated wheel speed, real slip ratio, authored curves, friction clamps
TIRE_ARCADE = 2  # the lumped steering-multiplier model the seed game started from

# ---------------------------------------------------------------- extension block
# Vehicles that use anything beyond the seed model (another tire model, a drivetrain, wear,
# per-wheel springs, ...) carry N_PARAMS_EXT parameters and N_STATE_EXT state columns; the
# first N_PARAMS / N_STATE columns mean exactly what they mean for a basic vehicle, so basic
# vehicles keep their narrow rows and their hashes. A batch is either all basic or all extended.
_X0 = N_PARAMS
PX_SLIP_RATIO_EPS = _X0 + 0  # floor of the slip-ratio denominator (m/s)
PX_LOW_SPEED = _X0 + 1  # below this speed (m/s) with no throttle the low-speed hold applies
PX_LOAD_BLEND = _X0 + 2  # tire load = (1-b) dynamic + b static (0 = fully dynamic)
PX_PITCH_SCALE = _X0 + 3  # scale on the pitch torque of tire forces (1 = physical)
PX_ROLL_SCALE = _X0 + 4  # scale on the roll torque of tire forces (1 = physical)
PX_ARB_FRONT = _X0 + 5  # anti-roll bar stiffness, per kg of vehicle mass (N/m/kg)
PX_ARB_REAR = _X0 + 6
PX_DRIFT_ASSIST = _X0 + 7  # drift-assist yaw gain (1/s); 0 = off
PX_DRIFT_SLIP = _X0 + 8  # rear slip angle (rad) beyond which drift assist engages
PX_WEAR_RATE = _X0 + 9  # tire grip lost per MJ of sliding energy
PX_WEAR_FLOOR = _X0 + 10  # lowest tire grip multiplier
PX_DAMAGE_SPEED = _X0 + 11  # touchdown / impact speed (m/s) above which damage starts
PX_DAMAGE_RATE = _X0 + 12  # grip lost per m/s of touchdown speed above the threshold
PX_DAMAGE_FLOOR = _X0 + 13  # lowest damage multiplier
PX_LEAN_GAIN = _X0 + 14  # two-wheeler lean stabilisation gain ((rad/s)^2); 0 = off
PX_SKID_STEER = _X0 + 15  # 1.0: per-side throttles (steer command = differential)
PX_ARCADE_YAW = _X0 + 16  # arcade: yaw rate per (steer x speed / wheelbase)
PX_ARCADE_GRIP = _X0 + 17  # arcade: lateral velocity scrubbed per second (1/s)
PX_DRIVETRAIN = _X0 + 18  # 1.0: engine + gearbox instead of the flat drive force
PX_AUTO_SHIFT = _X0 + 19
PX_N_TORQUE = _X0 + 20  # points on the torque curve (2..8)
PX_TQ_RPM = _X0 + 21  # 8 engine speeds (rpm), increasing; the first is idle, the last the limit
PX_TQ_NM = _X0 + 29  # 8 torques (N m)
PX_N_GEARS = _X0 + 37  # forward gears (1..6)
PX_GEARS = _X0 + 38  # 6 forward ratios
PX_REVERSE = _X0 + 44  # reverse ratio (0 = no reverse)
PX_FINAL = _X0 + 45  # final drive ratio
PX_SHIFT_UP = _X0 + 46  # rpm
PX_SHIFT_DOWN = _X0 + 47  # rpm
PX_CLUTCH_SUBSTEPS = _X0 + 48  # drive cut per shift (substeps of 1/480 s)
PX_DIFF_FRONT = _X0 + 49  # DIFF_OPEN / DIFF_LIMITED / DIFF_LOCKED
PX_DIFF_REAR = _X0 + 50
PX_DIFF_CENTRE = _X0 + 51
PX_DIFF_COUPLING = _X0 + 52  # N per m/s of wheel-speed difference
PX_FRONT_SPLIT = _X0 + 53  # share of the drive sent to the front axle (by the centre diff)
PX_ENGINE_BRAKE = _X0 + 54  # engine braking torque at zero throttle, fraction of curve torque
PX_REV_LIMIT = _X0 + 55  # rpm above which the engine gives no drive
PX_ABS_SLIP = _X0 + 56  # slip ratio the ABS holds (where curve 0 reaches abs_fraction)
PX_TRACTION_CONTROL = _X0 + 57  # 1.0: wheel-speed drive torque capped at drive_cap x mu N r
PX_NO_CLAMPS = _X0 + 58  # 1.0: friction clamps off (validation only: shows why they exist)
PX_WHEELBASE = _X0 + 59  # distance between the front- and rear-most axles (m), >= 0.5
PX_VEHICLE_TERMS = _X0 + 60  # 1.0: drift assist, lean stabilisation or a differential is on
# _X0 + 61 .. 63 free
CURVE_FAMILY = 4  # curves per family (selected by the other slip)
CURVE_KNOTS = 8  # knots per curve
CURVE_SIZE = 1 + 3 * CURVE_KNOTS  # n_knots, x[8], y[8], slope of each piece[8] (packed once)
# n_curves, shared-x flag (1.0: every curve has the same knot x), selectors, 1 / selector
# spacing, curves
CURVE_SET_SIZE = 2 + 2 * CURVE_FAMILY + CURVE_FAMILY * CURVE_SIZE
PX_CURVE_LONG = _X0 + 64  # longitudinal force vs slip ratio, one curve per |slip angle|
PX_CURVE_LAT = PX_CURVE_LONG + CURVE_SET_SIZE  # lateral force vs slip angle, per |slip ratio|
_XW0 = PX_CURVE_LAT + CURVE_SET_SIZE
PXW_INERTIA = 0  # wheel spin inertia (kg m^2)
PXW_K = 1  # spring stiffness per kg of vehicle mass (N/m/kg)
PXW_C = 2  # damping per kg of vehicle mass (N s/m/kg)
PXW_GRIP = 3  # grip multiplier of this tire
PXW_AXLE = 4  # 0 front, 1 rear, 2 other (for differentials and anti-roll bars)
PXW_SIDE = 5  # +1 left, -1 right (anchor y sign; skid steering, anti-roll bars)
PXW_STATIC_LOAD = 6  # static load on flat ground (N), for load blending
PXW_INV_INERTIA = 7  # 1 / wheel spin inertia (1/(kg m^2))
N_WHEEL_XPARAMS = 8
N_PARAMS_EXT = _XW0 + MAX_WHEELS * N_WHEEL_XPARAMS

DIFF_OPEN, DIFF_LIMITED, DIFF_LOCKED = 0, 1, 2

_S0 = N_STATE
SX_DAMAGE = _S0 + 0  # grip multiplier from damage (1 = undamaged)
SX_DRIFT = _S0 + 1  # 1.0 while drift assist is engaged
SX_AXLE_SPEED_F = _S0 + 2  # mean driven-wheel rim speed per axle (m/s); coupling diffs only
SX_AXLE_SPEED_R = _S0 + 3
SX_SLIDE_ENERGY = _S0 + 4  # sliding energy dissipated by all tires since reset (J)
SX_MAX_IMPACT = _S0 + 5  # hardest touchdown / impact since reset (m/s)
SX_ENGINE_TORQUE = _S0 + 6  # engine torque last substep (N m)
_SW0 = _S0 + 8
SXW_WEAR = _SW0 + 0 * MAX_WHEELS  # tire grip multiplier from wear (1 = new)
SXW_DRIVE_TQ = _SW0 + 1 * MAX_WHEELS  # drive torque at the wheel last substep (N m)
SXW_BRAKE_TQ = _SW0 + 2 * MAX_WHEELS  # brake torque at the wheel last substep (N m)
SXW_SEP = _SW0 + 3 * MAX_WHEELS  # separation speed last substep (m/s, + lifting)
N_WHEEL_XFIELDS = 4
N_STATE_EXT = _SW0 + N_WHEEL_XFIELDS * MAX_WHEELS


@njit(cache=True)
def pxw(w: int, field: int) -> int:
    """Column of extended per-wheel parameter ``field`` of wheel ``w``."""
    return _XW0 + w * N_WHEEL_XPARAMS + field
