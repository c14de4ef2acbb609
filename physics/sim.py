"""The simulator's Python face: a batch of N cars on a set of terrains.

    sim = VehicleBatch(n_cars=64, params=ROVER, terrains=[flat_terrain()])
    sim.reset(poses=np.zeros((64, 4)))
    sim.set_commands(np.tile([0.0, 1.0, 0.0, 0.0], (64, 1)))
    sim.step(8)                        # one 60 Hz frame = 8 substeps of 1/480 s
    sim.speed_mps, sim.wheel_loads_n   # readings

All state lives in two arrays (``state`` float64 (N, N_STATE), ``istate`` int64 (N, N_ISTATE));
``snapshot``/``restore`` copy them with shape and version checks, ``state_hash`` digests them.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from physics import kernel
from physics import layout as L
from physics.errors import ParameterError, SnapshotError, StepError
from physics.params import ROVER, VehicleParams
from physics.terrain import Terrain, TerrainSet

#: Extra distance around a car's reach whose terrain tiles are filled before a step (m).
_MARGIN_M = 1.0
#: Kernel switches of the basic (seed) model: no extended code is compiled for it.
_BASIC_SWITCHES = (None, None, None)
#: Rounds of "fill what was missed, step those cars again" before giving up (each fills >= 1).
_MAX_FILL_ROUNDS = 10_000


def substeps_for(control_hz: float) -> int:
    """Whole substeps of 1/480 s per control step at ``control_hz``; non-integer ratios raise."""
    if isinstance(control_hz, bool) or not isinstance(control_hz, (int, float, np.number)):
        raise StepError(f"control_hz must be a number, got {control_hz!r}")
    hz = float(control_hz)
    if not np.isfinite(hz) or hz <= 0.0:
        raise StepError(f"control_hz must be finite and > 0, got {control_hz!r}")
    n = L.SUBSTEP_HZ / hz
    if n != int(n) or n < 1:
        raise StepError(
            f"control_hz {control_hz!r} does not divide the {L.SUBSTEP_HZ} Hz "
            f"physics rate into whole substeps ({n:g} substeps); use a divisor of "
            f"{L.SUBSTEP_HZ}"
        )
    return int(n)


def digest(chunks: Iterable[Any]) -> str:
    """The one hash of the project's states: blake2b (16 bytes, hex) over ``chunks`` in order,
    each ``bytes`` or a C-contiguous array (its raw memory). :func:`state_hash`,
    ``rally_env.core.state_digest`` and ``rally_env.replay.hashing.car_state_hash`` are this
    hash over their parts."""
    h = hashlib.blake2b(digest_size=16)
    for c in chunks:
        h.update(c)
    return h.hexdigest()


def state_hash(state: np.ndarray, istate: np.ndarray) -> str:
    """:func:`digest` of the raw bytes (and shapes) of the state blocks: identifies a state."""
    return digest(
        (
            np.asarray([L.LAYOUT_VERSION, *state.shape, *istate.shape], np.int64),
            np.ascontiguousarray(state, np.float64),
            np.ascontiguousarray(istate, np.int64),
        )
    )


@dataclass(frozen=True)
class Snapshot:
    """A copy of a batch's state blocks, tagged with the layout version and a checksum."""

    version: int
    state: np.ndarray
    istate: np.ndarray
    digest: str

    def is_intact(self) -> bool:
        return state_hash(self.state, self.istate) == self.digest


def _columns(block: str, start: int, stop: int | None = None) -> property:
    """A reading of :class:`VehicleBatch`: a view of columns ``start:stop`` (or of column
    ``start``) of its ``block`` array (``"state"`` or ``"istate"``)."""
    cols = start if stop is None else slice(start, stop)

    def read(self: VehicleBatch) -> np.ndarray:
        return getattr(self, block)[:, cols]

    return property(read)


def _per_wheel(field: int) -> property:
    """A per-wheel reading of :class:`VehicleBatch`: its (N, W) state columns from ``field``."""

    def read(self: VehicleBatch) -> np.ndarray:
        return self._wheels(field)

    return property(read)


class VehicleBatch:
    """N cars, their packed parameters and the terrains they drive on.

    Args:
        n_cars: batch size N >= 1.
        params: one VehicleParams for all cars, or a sequence of N (per-car rows).
        terrains: the terrains cars may drive on (a TerrainSet or a list of Terrain).
        parallel: step with ``prange`` over cars (threads) instead of serially. Results are
            bit-identical either way.
    """

    def __init__(
        self,
        n_cars: int,
        params: VehicleParams | Sequence[VehicleParams] = ROVER,
        terrains: TerrainSet | Sequence[Terrain] | Terrain | None = None,
        parallel: bool = False,
    ):
        if isinstance(n_cars, bool) or not isinstance(n_cars, (int, np.integer)) or n_cars < 1:
            raise _refused("n_cars", n_cars, "must be an integer >= 1")
        self.n = int(n_cars)
        if terrains is None:
            from physics.terrain import flat_terrain

            terrains = [flat_terrain()]
        if isinstance(terrains, Terrain):
            terrains = [terrains]
        self.terrains = terrains if isinstance(terrains, TerrainSet) else TerrainSet(terrains)
        first = params if isinstance(params, VehicleParams) else next(iter(params), None)
        #: True when the cars use the extension block (wheel speed, drivetrain, ...): wider rows
        self.extended = bool(isinstance(first, VehicleParams) and first.extended)
        n_params = L.N_PARAMS_EXT if self.extended else L.N_PARAMS
        self.params = np.empty((self.n, n_params), np.float64)
        self.set_params(params)
        self.state = np.zeros((self.n, L.N_STATE_EXT if self.extended else L.N_STATE), np.float64)
        self.istate = np.zeros((self.n, L.N_ISTATE), np.int64)
        self.parallel = bool(parallel)
        self._all = kernel.all_cars(self.n)
        self._scratch(self.n)
        self._req = np.empty((256, 2), np.int64)
        self.reset()

    # ------------------------------------------------------------------ configuration
    def set_params(
        self, params: VehicleParams | Sequence[VehicleParams], cars: np.ndarray | None = None
    ) -> None:
        """Pack parameters for all cars (or for ``cars``): one VehicleParams or one per car."""
        idx = self._cars(cars)
        if isinstance(params, VehicleParams):
            rows = np.tile(params.pack(), (len(idx), 1))
        else:
            plist = list(params)
            if len(plist) != len(idx):
                need = f"need one VehicleParams per car ({len(idx)})"
                raise _refused("params", f"{len(plist)} entries", need)
            for q in plist:
                if not isinstance(q, VehicleParams):
                    raise _refused("params", q, "entries must be VehicleParams")
            packed = [q.pack() for q in plist]
            widths = {r.shape[0] for r in packed}
            rows = np.stack(packed) if len(widths) == 1 else np.empty((len(idx), 0))
        if len(idx) and rows.shape[1] != self.params.shape[1]:
            rule = "all cars of a batch must be basic (the seed model) or all extended"
            raise _refused("params", "basic and extended vehicles", rule)
        self.params[idx] = rows

    def _cars(self, cars: np.ndarray | Sequence[int] | None) -> np.ndarray:
        if cars is None:
            return kernel.all_cars(self.n)
        idx = np.asarray(cars)
        if idx.ndim != 1 or not np.issubdtype(idx.dtype, np.integer):
            raise _refused("cars", cars, "must be a 1-D integer array")
        if idx.size and (idx.min() < 0 or idx.max() >= self.n):
            raise _refused("cars", cars, f"indices must be in [0, {self.n})")
        return idx.astype(np.int64)

    # ------------------------------------------------------------------ simulation
    def reset(
        self,
        poses: np.ndarray | None = None,
        cars: np.ndarray | None = None,
        terrain_ids: np.ndarray | int = 0,
    ) -> None:
        """Place cars at rest at ``poses`` (rows x, y, heading_rad, forward_speed_mps).

        Clears commands, readings, timers and the gate; keeps the misuse counter.
        """
        idx = self._cars(cars)
        if poses is None:
            poses = np.zeros((len(idx), 4))
        poses = np.asarray(poses, np.float64)
        if poses.ndim == 1:
            poses = np.tile(poses, (len(idx), 1))
        if poses.shape != (len(idx), 4):
            shape = f"must have shape ({len(idx)}, 4): x, y, heading, speed"
            raise _refused("poses", poses.shape, shape)
        if not np.all(np.isfinite(poses)):
            raise _refused("poses", "non-finite", "must be finite")
        tids = np.broadcast_to(np.asarray(terrain_ids, np.int64), (len(idx),)).copy()
        if tids.size and (tids.min() < 0 or tids.max() >= len(self.terrains)):
            raise _refused("terrain_ids", terrain_ids, f"must be in [0, {len(self.terrains)})")
        t = self.terrains
        for _ in range(_MAX_FILL_ROUNDS):
            reach = np.array([kernel.reach_m(self.params, int(k)) for k in idx]) + _MARGIN_M
            t.fill_around(tids, poses[:, 0], poses[:, 1], reach)
            missing = kernel.place_cars(
                self.state, self.istate, self.params, t.heights, t.tiles, t.meta, idx, poses, tids
            )
            if not missing:
                return
        raise StepError("the terrain under the start poses could not be filled")

    def set_commands(
        self, commands: np.ndarray, cars: np.ndarray | None = None, *, strict: bool = False
    ) -> int:
        """Set held commands (steer [-1,1], throttle, brake, handbrake [0,1]) per car.

        Finite values are clamped. A row with NaN/inf is refused (that car keeps its previous
        commands, its misuse counter goes up). Returns the number of refused rows.

        Args:
            commands: (n, 4) rows, one per car of ``cars`` (all cars if None).
            cars: int car indices, or None for all.
            strict: a row with NaN/inf raises instead, and nothing changes (no command, no
                misuse count): for callers that validated their commands already.

        Raises:
            ParameterError: wrong shape or car indices; with ``strict``, a non-finite row.
        """
        idx = self._all if cars is None else self._cars(cars)
        cmd = _command_rows(commands, len(idx), 4)
        refused = int(kernel.set_commands(self.state, self.istate, cmd, idx, bool(strict)))
        if refused < 0:
            row = -1 - refused
            why = f"car {int(idx[row])}'s commands must be finite; nothing was set"
            raise _refused(f"commands[{row}]", cmd[row].tolist(), why)
        return refused

    def set_tank_commands(self, commands: np.ndarray, cars: np.ndarray | None = None) -> int:
        """Skid steering: rows (left throttle, right throttle) in [-1, 1] and brake [0, 1].

        Only for vehicles built with ``skid_steer=True``; stored as the held steer (half the
        difference, right minus left) and throttle (the mean), so snapshots carry them.
        Same refusal rules as :meth:`set_commands`. Returns the number of refused rows.
        """
        idx = self._cars(cars)
        if not self.extended or not np.all(self.params[idx, L.PX_SKID_STEER] > 0.5):
            raise _refused("set_tank_commands", "not skid-steer", "needs skid_steer=True")
        cmd = _command_rows(commands, len(idx), 3)
        return int(kernel.set_tank_commands(self.state, self.istate, cmd, idx))

    def set_gear(self, gear: int, cars: np.ndarray | None = None) -> np.ndarray:
        """Select a gear (-1 reverse, 0 neutral, 1..n) on cars with a drivetrain.

        Returns a bool per car: False where the request was refused (no drivetrain, no reverse
        ratio, out of range); those cars keep their gear.
        """
        from physics.drivetrain import select_gear

        if isinstance(gear, bool) or not isinstance(gear, (int, np.integer)):
            raise _refused("gear", gear, "must be an integer")
        idx = self._cars(cars)
        ok = np.zeros(len(idx), bool)
        if not self.extended:
            return ok
        for i, k in enumerate(idx):
            if self.params[k, L.PX_DRIVETRAIN] > 0.5:
                ok[i] = bool(select_gear(self.params, int(k), self.istate, int(gear)))
        return ok

    def set_gate(self, gates: np.ndarray, cars: np.ndarray | None = None) -> None:
        """Arm each car's timing gate: rows (x0, y0, x1, y1). The crossing from the right of
        G0->G1 to its left is timed inside the substep into ``gate_time_s`` (-1 until then)."""
        idx = self._cars(cars)
        g = np.asarray(gates, np.float64).reshape(len(idx), 4)
        self.state[idx, L.GATE_X0 : L.GATE_Y1 + 1] = g
        self.state[idx, L.GATE_TIME] = -1.0

    def step(self, n_substeps: int = 8, cars: np.ndarray | None = None) -> None:
        """Advance by ``n_substeps`` fixed substeps of 1/480 s."""
        whole = isinstance(n_substeps, (int, np.integer)) and not isinstance(n_substeps, bool)
        if not whole or n_substeps < 0:
            raise StepError(f"n_substeps must be a whole number >= 0, got {n_substeps!r}")
        idx = self._all if cars is None else self._cars(cars)
        self.advance(int(n_substeps), idx, L.DT)

    def advance(self, n_substeps: int, idx: np.ndarray, dt: float) -> None:
        """Step cars ``idx`` (int64) by ``n_substeps`` substeps of ``dt`` seconds.

        The terrain fills as cars reach it: first the tiles each car can reach in this step
        (the kernel lists them and steps nothing until they are filled), then any tile a car
        still met that was not filled (that car is put back and stepped again), until every
        car has stepped. Only :meth:`step` (``dt`` = 1/480 s) is the product's time base;
        other ``dt`` values are for validation.
        """
        margin = _MARGIN_M
        for _ in range(_MAX_FILL_ROUNDS):
            bad = []
            groups = self._model_groups(idx) if self.extended else ((idx, _BASIC_SWITCHES),)
            for group, switches in groups:
                missed = self._step_group(n_substeps, group, dt, margin, switches)
                if missed is not None:
                    bad.append(missed)
            if not bad:
                return
            req = np.concatenate(bad)
            idx = req[:, 0].copy()
            rows = self.istate[idx, L.I_TERRAIN]
            self.terrains.fill_requests(np.stack([rows, req[:, 1]], axis=1))
            margin = 3.0 * _MARGIN_M
        raise StepError("the terrain the cars reach could not be filled")

    def _step_group(
        self, n_substeps: int, group: np.ndarray, dt: float, margin: float, switches: tuple
    ) -> np.ndarray | None:
        """One kernel step of cars ``group`` (one model), after filling the tiles they can
        reach (within ``margin`` m more); ``(car, tile)`` rows of the cars that still met a
        tile not filled (they were put back), or None."""
        m = len(group)
        if len(self._miss) < m:
            self._scratch(m)
        scratch = (self._save, self._isave, self._miss)  # the usual call: all of it, no slicing
        if m < len(self._miss):
            scratch = tuple(a[:m] for a in scratch)
        fn = kernel.step_cars_parallel if self.parallel else kernel.step_cars
        ahead = margin
        while True:  # the terrain record after a fill: the grown arrays
            n = fn(self.state, self.istate, self.params, self.terrains.record(), n_substeps,
                   group, dt, *scratch, ahead, self._req, *switches)  # fmt: skip
            if n >= 0:
                break
            # nothing moved: the tiles to fill first are listed in _req
            if -n > self._req.shape[0]:  # they did not all fit: grow it, list them again
                self._req = np.empty((-2 * n, 2), np.int64)
                continue
            self.terrains.fill_requests(self._req[:-n])
            ahead = -1.0  # filled: step without listing again
        if not n:
            return None
        miss = scratch[2]
        hit = np.flatnonzero(miss >= 0)
        return np.stack([group[hit], miss[hit]], axis=1)

    def _model_groups(self, idx: np.ndarray) -> list[tuple[np.ndarray, tuple]]:
        """``idx`` (of an extended batch) split by tire model, each part with its kernel's
        compile-time switches (:func:`physics.kernel.model_switches`): one part unless the
        batch mixes tire models. Cars are independent, so the split does not change any car's
        result. A basic batch's one part is ``(idx, _BASIC_SWITCHES)`` (:meth:`advance`)."""
        models = self.params[idx, L.P_TIRE_MODEL]
        if not len(models) or np.all(models == models[0]):
            m0 = int(models[0]) if len(models) else L.TIRE_DIRECT
            return [(idx, kernel.model_switches(True, m0))]
        return [(idx[models == m], kernel.model_switches(True, int(m))) for m in np.unique(models)]

    def _scratch(self, m: int) -> None:
        self._save = np.empty((m, self.state.shape[1]), np.float64)
        self._isave = np.empty((m, self.istate.shape[1]), np.int64)
        self._miss = np.empty(m, np.int64)

    def step_seconds(self, seconds: float, cars: np.ndarray | None = None) -> None:
        """Advance by ``seconds``, which must be a whole number of substeps."""
        n = seconds * L.SUBSTEP_HZ
        if abs(n - round(n)) > 1e-9:
            raise StepError(f"{seconds!r} s is not a whole number of 1/{L.SUBSTEP_HZ} s substeps")
        self.step(round(n), cars)

    # ------------------------------------------------------------------ state
    def state_hash(self) -> str:
        return state_hash(self.state, self.istate)

    def snapshot(self) -> Snapshot:
        st = self.state.copy()
        ist = self.istate.copy()
        return Snapshot(L.LAYOUT_VERSION, st, ist, state_hash(st, ist))

    def restore(self, snap: Snapshot) -> None:
        """Copy a snapshot back. A mismatched or corrupt snapshot raises and changes nothing."""
        if not isinstance(snap, Snapshot):
            raise SnapshotError(f"expected a Snapshot, got {type(snap).__name__}")
        if snap.version != L.LAYOUT_VERSION:
            raise SnapshotError(f"snapshot layout version {snap.version} != {L.LAYOUT_VERSION}")
        if snap.state.shape != self.state.shape or snap.istate.shape != self.istate.shape:
            raise SnapshotError(
                f"snapshot shapes {snap.state.shape}/{snap.istate.shape} do not "
                f"match this batch {self.state.shape}/{self.istate.shape}"
            )
        if snap.state.dtype != np.float64 or snap.istate.dtype != np.int64:
            raise SnapshotError("snapshot arrays have the wrong dtype")
        if not snap.is_intact():
            raise SnapshotError("snapshot is corrupt: its contents do not match its digest")
        tid = snap.istate[:, L.I_TERRAIN]
        if tid.min() < 0 or tid.max() >= len(self.terrains):
            raise SnapshotError("snapshot refers to a terrain this batch does not have")
        self.state[...] = snap.state
        self.istate[...] = snap.istate

    # ------------------------------------------------------------------ readings
    # views of the state blocks, which follow the simulation (per wheel: (N, W), W the most
    # wheels of any car)
    position_m = _columns("state", L.POS_X, L.POS_Z + 1)
    velocity_mps = _columns("state", L.VEL_X, L.VEL_Z + 1)
    quaternion = _columns("state", L.QUAT_W, L.QUAT_Z + 1)
    omega_radps = _columns("state", L.OMEGA_X, L.OMEGA_Z + 1)
    steer_angle_rad = _columns("state", L.STEER_ANGLE)
    commands = _columns("state", L.CMD_STEER, L.CMD_HANDBRAKE + 1)
    misuse_count = _columns("istate", L.I_MISUSE)
    gate_time_s = _columns("state", L.GATE_TIME)
    wheel_loads_n = _per_wheel(L.WL_LOAD)
    slip_angles_rad = _per_wheel(L.WL_SLIP_ANGLE)
    slip_ratios = _per_wheel(L.WL_SLIP_RATIO)
    compression_m = _per_wheel(L.WL_COMPRESSION)
    wheel_spin_rad = _per_wheel(L.WL_SPIN)
    friction_usage = _per_wheel(L.WL_USAGE)
    wheel_mu = _per_wheel(L.WL_MU)
    #: wheel angular speed (rad/s): integrated in the wheel-speed model, rolling otherwise
    wheel_omega_radps = _per_wheel(L.WL_OMEGA)

    @property
    def time_s(self) -> np.ndarray:
        """Simulated time since each car's reset (s), exact multiples of 1/480."""
        return self.istate[:, L.I_SUBSTEPS] / L.SUBSTEP_HZ

    @property
    def rotation(self) -> np.ndarray:
        """(N, 3, 3) body->world rotation matrices (columns: forward, left, up)."""
        return quat_to_matrix(self.quaternion)

    @property
    def body_velocity_mps(self) -> np.ndarray:
        """(N, 3) CG velocity in the body frame (forward, left, up)."""
        return np.einsum("nji,nj->ni", self.rotation, self.velocity_mps)

    @property
    def speed_mps(self) -> np.ndarray:
        v = self.velocity_mps
        return np.sqrt((v * v).sum(axis=1))

    @property
    def up_z(self) -> np.ndarray:
        """World z of the body's up axis: 1 upright, < 0 upside down."""
        q = self.quaternion
        return 1.0 - 2.0 * (q[:, 1] ** 2 + q[:, 2] ** 2)

    def _wheels(self, field: int) -> np.ndarray:
        return self.state[:, field : field + int(self.params[:, L.P_N_WHEELS].max())]

    @property
    def grounded(self) -> np.ndarray:
        return self._wheels(L.WL_GROUNDED) > 0.5

    @property
    def surface_ids(self) -> np.ndarray:
        return self._wheels(L.WL_SURFACE).astype(np.int64)

    @property
    def tire_forces_n(self) -> np.ndarray:
        """(N, W, 2) longitudinal and lateral tire force per wheel (wheel frame)."""
        return np.stack([self._wheels(L.WL_FX), self._wheels(L.WL_FY)], axis=-1)

    @property
    def engine_rpm(self) -> np.ndarray:
        """Engine speed (rpm); 0 without a drivetrain."""
        return self.state[:, L.ENGINE_RPM].copy()

    @property
    def gear(self) -> np.ndarray:
        """Selected gear (-1 reverse, 0 neutral, 1..6); 0 without a drivetrain."""
        return self.istate[:, L.I_GEAR].copy()

    @property
    def tire_wear(self) -> np.ndarray:
        """(N, W) tire grip multiplier from wear (1 = new); ones for basic vehicles."""
        if not self.extended:
            return np.ones_like(self.wheel_loads_n)
        return self._wheels(L.SXW_WEAR).copy()

    @property
    def damage(self) -> np.ndarray:
        """Grip multiplier from damage (1 = undamaged); ones for basic vehicles."""
        if not self.extended:
            return np.ones(self.n)
        return self.state[:, L.SX_DAMAGE].copy()

    @property
    def max_impact_mps(self) -> np.ndarray:
        """Hardest touchdown or impact since reset (m/s); zeros for basic vehicles."""
        return self.state[:, L.SX_MAX_IMPACT].copy() if self.extended else np.zeros(self.n)

    @property
    def body_contacts(self) -> np.ndarray:
        return self.state[:, L.BODY_CONTACTS].astype(np.int64)

    def wheel_positions_m(self) -> np.ndarray:
        """(N, W, 3) world positions of the wheel anchors."""
        nw = int(self.params[:, L.P_N_WHEELS].max())
        cols = [[L.pw(w, L.PW_X), L.pw(w, L.PW_Y), L.pw(w, L.PW_Z)] for w in range(nw)]
        anchors = self.params[:, cols]  # (N, W, 3)
        return self.position_m[:, None, :] + np.einsum("nij,nwj->nwi", self.rotation, anchors)


def _refused(field: str, value: object, rule: str) -> ParameterError:
    """The error of a :class:`VehicleBatch` argument ``field`` = ``value`` breaking ``rule``."""
    return ParameterError("VehicleBatch", field, value, rule)


def _command_rows(commands: np.ndarray, n: int, width: int) -> np.ndarray:
    """Commands as a contiguous float64 (n, width) array (one row may be given flat)."""
    cmd = np.asarray(commands, np.float64)
    if cmd.ndim == 1:
        cmd = cmd.reshape(1, -1)
    if cmd.shape != (n, width):
        raise _refused("commands", cmd.shape, f"must have shape ({n}, {width})")
    return np.ascontiguousarray(cmd)


def quat_to_matrix(q: np.ndarray) -> np.ndarray:
    """(N, 4) unit quaternions (w, x, y, z) -> (N, 3, 3) rotation matrices."""
    q = np.atleast_2d(q)
    w, x, y, z = q[:, 0], q[:, 1], q[:, 2], q[:, 3]
    r = np.empty((q.shape[0], 3, 3))
    r[:, 0, 0] = 1 - 2 * (y * y + z * z)
    r[:, 0, 1] = 2 * (x * y - w * z)
    r[:, 0, 2] = 2 * (x * z + w * y)
    r[:, 1, 0] = 2 * (x * y + w * z)
    r[:, 1, 1] = 1 - 2 * (x * x + z * z)
    r[:, 1, 2] = 2 * (y * z - w * x)
    r[:, 2, 0] = 2 * (x * z - w * y)
    r[:, 2, 1] = 2 * (y * z + w * x)
    r[:, 2, 2] = 1 - 2 * (x * x + y * y)
    return r
