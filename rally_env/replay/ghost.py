"""Ghosts: a previous run's trajectory, drawn translucent beside the live car
(``docs/replays.md``, "Ghosts"). :class:`GhostRecorder` records one while a run goes (``rally
play`` races the session's best run with it). Nothing here imports pygame.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from physics import layout as L
from physics.sim import quat_to_matrix
from rally_env import kernels as K
from rally_env.replay.budgets import Budgets
from rally_env.replay.errors import ReplayError
from rally_env.replay.format import Replay, load_replay
from rally_env.replay.resim import Resim

ReplayLike = Replay | str | os.PathLike[str]

#: The ``.npz`` ghost files of earlier versions (read, no longer written).
NPZ_FORMAT = "rally_env.ghost"
NPZ_VERSION = 1
#: A ghost's per-sample arrays and their widths, in the order of a :class:`GhostRecorder` row.
_SAMPLES = (
    ("t_s", 1),
    ("pos_m", 3),
    ("quat", 4),
    ("steer_rad", 1),
    ("speed_mps", 1),
    ("actions", 4),
    ("progress_m", 1),
)


class GhostFileError(ReplayError):
    """A ghost file is missing, malformed or of another format/version."""


@dataclass(eq=False)
class Ghost:
    """A recorded trajectory, one sample per control step (``docs/replays.md``, "Ghosts").

    Attributes:
        stage: stage name.
        t_s, pos_m, quat: (n,) sample times since the reset (s, increasing), (n, 3) CG
            positions (m), (n, 4) attitudes (w, x, y, z).
        steer_rad, speed_mps, progress_m: (n,) road-wheel steer angles, speeds and race
            progress along the stage (m; ``None`` in files that predate it).
        checkpoint_times_s, finish_time_s: split and finish times (NaN = not reached).
        actions: (n, 4) the actions that produced it (NaN rows where unknown).
        meta: free-form settings (vehicle, ``control_hz``, ``stage_digest``, seed, driver).
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

    def view_at(self, t: float, params: Any = None) -> Any:
        """The ghost at time ``t`` (linear between samples) as the renderer's
        :class:`~rally_env.render.views.CarView`; ``None`` outside the recording."""
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
        from rally_env.render.views import CarView

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


def _load_npz(path: Path) -> Ghost:
    """Read a ``.npz`` ghost file (format ``rally_env.ghost`` v1, which ``rally play`` wrote
    before it saved replays): the poses as recorded (the file has no inputs to re-run)."""
    try:
        with np.load(path, allow_pickle=False) as z:
            d = {k: z[k] for k in z.files}
    except Exception as e:
        raise GhostFileError(f"{path}: not a ghost file ({type(e).__name__}: {e})") from None
    if str(d.get("format", "")) != NPZ_FORMAT:
        raise GhostFileError(f"{path}: not a ghost file (format {d.get('format')!r})")
    if int(d.get("version", -1)) != NPZ_VERSION:
        raise GhostFileError(
            f"{path}: ghost file version {int(d.get('version', -1))}, expected {NPZ_VERSION}"
        )
    try:
        n = d["t_s"].shape[0]
        stage = str(d["stage"])
        arrays = {
            k: np.asarray(d[k], np.float64).reshape((n,) if w == 1 else (n, w))
            for k, w in _SAMPLES
            if k in d or k != "progress_m"  # progress_m: absent in files that predate it
        }
        g = Ghost(
            stage=stage,
            checkpoint_times_s=tuple(float(v) for v in d["checkpoint_times_s"].reshape(-1)),
            finish_time_s=float(d["finish_time_s"]),
            meta=json.loads(str(d["meta"])),
            **arrays,
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
        #: one row a sample: the :data:`_SAMPLES` one after the other
        self._rows: list[np.ndarray] = []

    def clear(self) -> None:
        self._rows.clear()

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
        if self._rows and t <= self._rows[-1][0]:
            return
        v = s[L.VEL_X : L.VEL_Z + 1]
        a = np.full(4, np.nan) if action is None else np.asarray(action, np.float64).reshape(4)
        row = np.concatenate(
            [
                [t],
                s[L.POS_X : L.POS_Z + 1],
                s[L.QUAT_W : L.QUAT_Z + 1],
                [s[L.STEER_ANGLE], math.sqrt(float(v @ v))],
                a,
                [progress_m],
            ]
        )
        self._rows.append(row)

    def ghost(
        self, checkpoint_times_s: tuple[float, ...] = (), finish_time_s: float = math.nan
    ) -> Ghost:
        r = np.array(self._rows, np.float64).reshape(-1, sum(w for _, w in _SAMPLES))
        arrays, i = {}, 0
        for k, w in _SAMPLES:
            arrays[k] = (r[:, i] if w == 1 else r[:, i : i + w]).copy()
            i += w
        return Ghost(
            stage=self.stage,
            checkpoint_times_s=tuple(float(v) for v in checkpoint_times_s),
            finish_time_s=float(finish_time_s),
            meta=dict(self.meta),
            **arrays,
        )


def ghost_from_replay(replay: ReplayLike, budgets: Budgets | None = None) -> Ghost:
    """Re-simulate a replay into a :class:`Ghost`: one pose per control step (after the reset
    and after each action, until the episode ends), from the re-run, not from the file;
    ``meta`` carries ``source``, ``run_id``, ``player``, ``control_hz`` and ``stage_digest``.
    """
    return resim_ghost(replay, budgets)[0]


def resim_ghost(replay: ReplayLike, budgets: Budgets | None = None) -> tuple[Ghost, Any]:
    """:func:`ghost_from_replay`, and the :class:`tracks.Stage` the run was driven on."""
    if not isinstance(replay, Replay):
        replay = load_replay(replay)
    sim = Resim(replay, budgets)
    meta = {
        "source": "replay",
        "run_id": replay.run_id(),
        "player": str(replay.meta.get("player") or ""),
        "control_hz": int(replay.control_hz),
        "stage_digest": str(replay.stage.get("digest", "")),
    }
    rec = GhostRecorder(str(replay.stage.get("name", "")), meta=meta)
    rec.sample(sim.core.sim, 0, progress_m=float(sim.info["progress_m"]))
    while sim.step():
        a = replay.actions[sim.t - 1]
        rec.sample(
            sim.core.sim, 0, None if a.ndim == 0 else a, progress_m=float(sim.info["progress_m"])
        )
    core = sim.core
    stage = core.bank.slots[int(core.eistate[0, K.EI_SLOT])]
    return rec.ghost(core.checkpoint_times(0), float(sim.info["finish_time_s"])), stage


def load_ghost(path: str | os.PathLike[str]) -> Ghost:
    """A ghost from a replay file (re-simulated), or from a ``.npz`` ghost file of earlier
    versions.

    Raises:
        GhostFileError: the file is missing, or a ``.npz`` that is not a ghost file.
        ReplayError: the replay file is unusable (it names the file and the problem).
    """
    p = Path(path)
    if not p.is_file():
        raise GhostFileError(f"{p}: no such ghost file")
    if p.suffix == ".npz":
        return _load_npz(p)
    return ghost_from_replay(p)


def ghost_poses(replay: ReplayLike) -> Iterator[dict[str, Any]]:
    """Yield the re-run's pose (:meth:`Ghost.pose`) after the reset and after every control
    step."""
    g = ghost_from_replay(replay)
    for i in range(len(g)):
        yield g.pose(i)


def _ghost_of(source: ReplayLike) -> Ghost:
    return ghost_from_replay(source) if isinstance(source, Replay) else load_ghost(source)


def _label(g: Any) -> str:
    player = str(g.meta.get("player") or "")
    if player:
        return player
    ft = g.finish_time_s
    return f"{ft:.2f} s" if ft == ft else "ghost"


class GhostSet:
    """Several ghosts advanced together, one control step per live step: call :meth:`step`
    after every live ``env.step``, then draw :meth:`views` or :meth:`poses`; a ghost stays at
    its final pose (``docs/replays.md``, "Ghosts").

    Args:
        ghosts: replays, replay or ``.npz`` ghost paths, or :class:`Ghost` objects.

    Attributes:
        ghosts: the :class:`Ghost` objects.
        t: control steps advanced since construction.
    """

    def __init__(self, ghosts: Iterable[Any]):
        self.ghosts = [g if isinstance(g, Ghost) else _ghost_of(g) for g in ghosts]
        self.t = 0

    def __len__(self) -> int:
        return len(self.ghosts)

    def __iter__(self) -> Iterator[Any]:
        return iter(self.ghosts)

    @property
    def done(self) -> bool:
        """Every ghost is at its last sample."""
        return all(self.t >= len(g) - 1 for g in self.ghosts)

    def check_compatible(self, env: Any) -> None:
        """Raise :class:`ReplayError` if a ghost was recorded at another control rate or on
        another stage than ``env`` (a ``RallyEnv``, possibly wrapped). Ghosts whose files do
        not say (older ``.npz`` files) are not checked."""
        base = env.unwrapped
        hz = base.config.control_hz
        core = base.core
        st = core.bank.slots[int(core.eistate[0, K.EI_SLOT])]
        for g in self.ghosts:
            ghz = g.meta.get("control_hz")
            if ghz is not None and int(ghz) != hz:
                raise ReplayError(f"ghost {_label(g)!r} runs at {ghz} Hz, the live run at {hz} Hz")
            dig = g.meta.get("stage_digest")
            if st is not None and dig and dig != st.digest():
                raise ReplayError(
                    f"ghost {_label(g)!r} was driven on {g.stage!r} ({dig}), not on this stage "
                    f"{st.name!r}"
                )

    def step(self) -> None:
        """Advance every ghost by one control step."""
        self.t += 1

    def poses(self) -> list[dict[str, Any]]:
        return [g.pose(self.t) for g in self.ghosts]

    def views(self) -> list[Any]:
        """``CarView`` of every ghost at its current sample."""
        return [g.view_at(float(g.t_s[min(self.t, len(g) - 1)])) for g in self.ghosts]
