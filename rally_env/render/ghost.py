"""Ghost cars: a previous run's trajectory, drawn translucent beside the live car.

A :class:`Ghost` is the pose of one car over time (position, attitude, steer angle, speed,
progress) plus its split times, so the HUD can show the delta to it. It is the one ghost type:
``rally_env.replay.ghost_from_replay`` re-simulates a replay into one (bit-exact poses, one per
control step), :class:`GhostRecorder` records one from a :class:`physics.VehicleBatch` while a
run goes, and :meth:`Ghost.save` / :func:`load_ghost` keep it in a small ``.npz`` file (what
``rally play`` writes where replays are not recorded, and reads with ``--ghost``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from physics import layout as L
from rally_env.render.views import CarView

GHOST_FORMAT = "rally_env.ghost"
GHOST_VERSION = 1


class GhostFileError(ValueError):
    """A ghost file is missing, malformed or of another format/version."""


@dataclass(eq=False)
class Ghost:
    """A recorded trajectory.

    Attributes:
        stage: stage name.
        t_s: (n,) sample times since the reset (s), increasing.
        pos_m: (n, 3) CG positions.
        quat: (n, 4) attitudes (w, x, y, z).
        steer_rad: (n,) road-wheel steer angles.
        speed_mps: (n,) speeds.
        checkpoint_times_s: split times (NaN = not reached).
        finish_time_s: finish time (NaN = not finished).
        actions: (n, 4) the actions that produced it (NaN rows where unknown).
        meta: free-form settings (vehicle, ``control_hz``, ``stage_digest``, seed, driver).
        progress_m: (n,) race progress along the stage (m); ``None`` in files that predate
            it.
    """

    stage: str
    t_s: np.ndarray
    pos_m: np.ndarray
    quat: np.ndarray
    steer_rad: np.ndarray
    speed_mps: np.ndarray
    checkpoint_times_s: tuple[float, ...] = ()
    finish_time_s: float = math.nan
    actions: np.ndarray | None = None
    meta: dict[str, Any] = field(default_factory=dict)
    progress_m: np.ndarray | None = None

    def __len__(self) -> int:
        return int(self.t_s.shape[0])

    def pose(self, i: int) -> dict[str, Any]:
        """Sample ``i`` (clamped to the recording) as plain data: ``x_m, y_m, z_m``, ``quat``
        (w, x, y, z), ``heading_rad``, ``speed_mps``, ``time_s``, ``progress_m`` (NaN when not
        recorded) and ``done`` (the last sample)."""
        n = len(self)
        if n == 0:
            raise IndexError("an empty ghost has no pose")
        i = min(max(int(i), 0), n - 1)
        w, x, y, z = (float(v) for v in self.quat[i])
        prog = math.nan if self.progress_m is None else float(self.progress_m[i])
        return {
            "x_m": float(self.pos_m[i, 0]),
            "y_m": float(self.pos_m[i, 1]),
            "z_m": float(self.pos_m[i, 2]),
            "quat": (w, x, y, z),
            "heading_rad": math.atan2(2.0 * (w * z + x * y), 1.0 - 2.0 * (y * y + z * z)),
            "speed_mps": float(self.speed_mps[i]),
            "time_s": float(self.t_s[i]),
            "progress_m": prog,
            "done": i == n - 1,
        }

    @property
    def reference_times_s(self) -> tuple[float, ...]:
        """Splits then the finish time: the HUD's reference for deltas."""
        return (*self.checkpoint_times_s, self.finish_time_s)

    def view_at(self, t: float, params: Any = None) -> CarView | None:
        """The ghost at time ``t`` (linear between samples); ``None`` outside the recording."""
        ts = self.t_s
        if len(ts) == 0 or t < ts[0] or t > ts[-1]:
            return None
        i = int(np.searchsorted(ts, t, side="right")) - 1
        i = min(max(i, 0), len(ts) - 1)
        j = min(i + 1, len(ts) - 1)
        a = 0.0 if j == i else (t - ts[i]) / (ts[j] - ts[i])
        p = self.pos_m[i] + a * (self.pos_m[j] - self.pos_m[i])
        q0, q1 = self.quat[i], self.quat[j]
        if float(q0 @ q1) < 0.0:
            q1 = -q1
        q = q0 + a * (q1 - q0)
        q = q / max(float(np.linalg.norm(q)), 1e-12)
        from physics.sim import quat_to_matrix

        rot = quat_to_matrix(q[None, :])[0]
        steer = float(self.steer_rad[i] + a * (self.steer_rad[j] - self.steer_rad[i]))
        return CarView.from_pose(
            float(p[0]),
            float(p[1]),
            math.atan2(rot[1, 0], rot[0, 0]),
            z_m=float(p[2]),
            rotation=rot,
            steer_rad=steer,
            speed_mps=float(self.speed_mps[i]),
            time_s=float(t),
            params=params,
        )

    def save(self, path: str | Path) -> Path:
        """Write the ghost to ``path`` (``.npz``)."""
        import json

        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        with path.open("wb") as f:
            np.savez_compressed(
                f,
                format=np.array(GHOST_FORMAT),
                version=np.array(GHOST_VERSION),
                stage=np.array(self.stage),
                t_s=self.t_s,
                pos_m=self.pos_m,
                quat=self.quat,
                steer_rad=self.steer_rad,
                speed_mps=self.speed_mps,
                checkpoint_times_s=np.array(self.checkpoint_times_s, np.float64),
                finish_time_s=np.array(self.finish_time_s, np.float64),
                actions=(np.full((len(self), 4), np.nan) if self.actions is None else self.actions),
                meta=np.array(json.dumps(self.meta, default=str)),
                **({} if self.progress_m is None else {"progress_m": self.progress_m}),
            )
        return path


def load_ghost(path: str | Path) -> Ghost:
    """Read a ghost written by :meth:`Ghost.save`.

    Raises:
        GhostFileError: the file is missing, not a ghost file, or of another version.
    """
    import json

    path = Path(path)
    if not path.is_file():
        raise GhostFileError(f"{path}: no such ghost file")
    try:
        with np.load(path, allow_pickle=False) as z:
            d = {k: z[k] for k in z.files}
    except Exception as e:
        raise GhostFileError(f"{path}: not a ghost file ({type(e).__name__}: {e})") from None
    if str(d.get("format", "")) != GHOST_FORMAT:
        raise GhostFileError(f"{path}: not a ghost file (format {d.get('format')!r})")
    if int(d.get("version", -1)) != GHOST_VERSION:
        raise GhostFileError(
            f"{path}: ghost file version {int(d.get('version', -1))}, expected {GHOST_VERSION}"
        )
    try:
        n = d["t_s"].shape[0]
        g = Ghost(
            stage=str(d["stage"]),
            t_s=np.asarray(d["t_s"], np.float64).reshape(n),
            pos_m=np.asarray(d["pos_m"], np.float64).reshape(n, 3),
            quat=np.asarray(d["quat"], np.float64).reshape(n, 4),
            steer_rad=np.asarray(d["steer_rad"], np.float64).reshape(n),
            speed_mps=np.asarray(d["speed_mps"], np.float64).reshape(n),
            checkpoint_times_s=tuple(float(v) for v in d["checkpoint_times_s"].reshape(-1)),
            finish_time_s=float(d["finish_time_s"]),
            actions=np.asarray(d["actions"], np.float64).reshape(n, 4),
            meta=json.loads(str(d["meta"])),
            progress_m=(
                np.asarray(d["progress_m"], np.float64).reshape(n) if "progress_m" in d else None
            ),
        )
    except (KeyError, ValueError) as e:
        raise GhostFileError(f"{path}: malformed ghost file ({e})") from None
    if n and not np.all(np.diff(g.t_s) > 0):
        raise GhostFileError(f"{path}: ghost times must increase")
    return g


class GhostRecorder:
    """Records car ``car`` of a :class:`physics.VehicleBatch` (call :meth:`sample` each step)."""

    def __init__(self, stage: str, meta: dict[str, Any] | None = None):
        self.stage = stage
        self.meta = dict(meta or {})
        self._rows: list[np.ndarray] = []
        self._actions: list[np.ndarray] = []
        self._progress: list[float] = []

    def clear(self) -> None:
        self._rows.clear()
        self._actions.clear()
        self._progress.clear()

    def sample(
        self,
        batch: Any,
        car: int = 0,
        action: np.ndarray | None = None,
        progress_m: float = math.nan,
    ) -> None:
        """Append car ``car``'s pose now (skipped if its clock has not advanced)."""
        s = batch.state[car]
        t = int(batch.istate[car, L.I_SUBSTEPS]) / L.SUBSTEP_HZ
        v = s[L.VEL_X : L.VEL_Z + 1]
        row = np.concatenate(
            [
                [t],
                s[L.POS_X : L.POS_Z + 1],
                s[L.QUAT_W : L.QUAT_Z + 1],
                [s[L.STEER_ANGLE], math.sqrt(float(v @ v))],
            ]
        )
        if self._rows and row[0] <= self._rows[-1][0]:
            return
        self._rows.append(row)
        self._progress.append(float(progress_m))
        a = np.full(4, np.nan) if action is None else np.asarray(action, np.float64).reshape(4)
        self._actions.append(a)

    def ghost(
        self, checkpoint_times_s: tuple[float, ...] = (), finish_time_s: float = math.nan
    ) -> Ghost:
        r = np.array(self._rows, np.float64).reshape(-1, 10)
        return Ghost(
            stage=self.stage,
            t_s=r[:, 0].copy(),
            pos_m=r[:, 1:4].copy(),
            quat=r[:, 4:8].copy(),
            steer_rad=r[:, 8].copy(),
            speed_mps=r[:, 9].copy(),
            checkpoint_times_s=tuple(float(v) for v in checkpoint_times_s),
            finish_time_s=float(finish_time_s),
            actions=np.array(self._actions, np.float64).reshape(-1, 4),
            meta=dict(self.meta),
            progress_m=np.array(self._progress, np.float64),
        )
