"""Ghosts from replays: a replay re-simulated into the renderer's ghost.

A ghost is a re-run of the recorded inputs, not a smoothed recording of poses: the replay's
actions are stepped through a private single env (bit-exact) and the car's pose is sampled
after the reset and after every control step into a :class:`rally_env.render.ghost.Ghost`
(the one ghost type: the renderer draws it, ``rally play`` races it, ``.npz`` files keep it).
:class:`GhostSet` advances several of them in step with a live run.

Nothing here imports pygame.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from rally_env import kernels as K
from rally_env.replay.errors import ReplayError
from rally_env.replay.format import Replay, load_replay
from rally_env.replay.resim import Resim

ReplayLike = Replay | str | os.PathLike[str]


def ghost_from_replay(replay: ReplayLike) -> Any:
    """Re-simulate a replay into a :class:`rally_env.render.ghost.Ghost`: one pose per control
    step (after the reset and after each action, until the episode ends), from the re-run,
    not from anything stored in the file; ready for ``EnvRenderer(ghosts=[...])``.

    ``meta`` carries ``source``, ``run_id``, ``player``, ``control_hz`` and ``stage_digest``
    (what :meth:`GhostSet.check_compatible` checks).
    """
    from rally_env.render.ghost import GhostRecorder

    if not isinstance(replay, Replay):
        replay = load_replay(replay)
    sim = Resim(replay)
    meta = {
        "source": "replay",
        "run_id": replay.run_id(),
        "player": str(replay.meta.get("player") or ""),
        "control_hz": int(replay.control_hz),
        "stage_digest": str(replay.stage.get("digest", "")),
    }
    rec = GhostRecorder(str(replay.stage.get("name", "")), meta=meta)
    rec.sample(sim.core.sim, 0, progress_m=float(sim.info["progress_m"]))
    while sim.t < replay.steps and not sim.done:
        a = replay.actions[sim.t]
        sim.step()
        rec.sample(
            sim.core.sim, 0, None if a.ndim == 0 else a, progress_m=float(sim.info["progress_m"])
        )
    info = sim.info
    ft = float(info["finish_time_s"])
    return rec.ghost(sim.core.checkpoint_times(0), ft)


def load_any_ghost(path: str | os.PathLike[str]) -> Any:
    """A ghost from a replay file (re-simulated) or a ``.npz`` ghost file."""
    p = Path(path)
    if p.suffix == ".npz":
        from rally_env.render.ghost import load_ghost

        return load_ghost(p)
    return ghost_from_replay(p)


def ghost_poses(replay: ReplayLike) -> Iterator[dict[str, Any]]:
    """Yield the re-run's pose (:meth:`Ghost.pose`) after the reset and after every control
    step."""
    g = ghost_from_replay(replay)
    for i in range(len(g)):
        yield g.pose(i)


def _label(g: Any) -> str:
    player = str(g.meta.get("player") or "")
    if player:
        return player
    ft = g.finish_time_s
    return f"{ft:.2f} s" if ft == ft else "ghost"


class GhostSet:
    """Several ghosts advanced together, one control step per live step.

    ``ghosts = GhostSet(["best.rrp.json.gz", "mine.rrp.json.gz"])``; after every live
    ``env.step`` call ``ghosts.step()``, then hand ``ghosts.views()`` (``CarView`` list) or
    ``ghosts.poses()`` to the renderer. A ghost stays at its final pose after its last
    sample. Ghosts must share the live run's control rate and stage
    (:meth:`check_compatible`).

    Args:
        ghosts: replays, replay or ``.npz`` ghost paths, or :class:`Ghost` objects.

    Attributes:
        ghosts: the :class:`Ghost` objects.
        t: control steps advanced since construction.
    """

    def __init__(self, ghosts: Iterable[Any]):
        from rally_env.render.ghost import Ghost

        out = []
        for g in ghosts:
            if isinstance(g, Ghost):
                out.append(g)
            elif isinstance(g, Replay):
                out.append(ghost_from_replay(g))
            else:
                out.append(load_any_ghost(g))
        self.ghosts = out
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
        out = []
        for g in self.ghosts:
            i = min(self.t, len(g) - 1)
            out.append(g.view_at(float(g.t_s[i])))
        return out
