"""Verification: re-simulate a replay from its own contents and check every claim."""

from __future__ import annotations

import dataclasses
import math
import os
import time
from dataclasses import dataclass
from typing import Any

import gymnasium as gym

from rally_env import kernels as K
from rally_env.replay.codec import jsonable
from rally_env.replay.errors import ReplayFormatError
from rally_env.replay.format import Replay, load_replay, time_json
from rally_env.replay.resim import Resim


@dataclass
class VerifyReport:
    """Outcome of :func:`verify`.

    Attributes:
        accepted: every hash, the end reason, the finish time and the checkpoint times match.
        reason: '' when accepted, else a short code (``stage_mismatch``, ``config_mismatch``,
            ``vehicle_mismatch``, ``initial_hash``, ``hash_mismatch``, ``ended_early``,
            ``final_hash``, ``end_reason``, ``finish_time``, ``checkpoint_times``,
            ``invalid_action``, ``bad_replay``).
        message: one human sentence.
        step: first control step where it diverged (``None`` if not tied to a step).
        expected, got: the recorded and the re-simulated value.
    """

    accepted: bool
    reason: str = ""
    message: str = ""
    step: int | None = None
    expected: Any = None
    got: Any = None
    steps: int = 0
    stage: str = ""
    stage_digest: str = ""
    finish_time_s: float | None = None
    end_reason: str = ""
    elapsed_s: float = 0.0
    run_id: str = ""

    def to_dict(self) -> dict[str, Any]:
        return jsonable(dataclasses.asdict(self))


def _same_time(a: float | None, b: float) -> bool:
    b = float(b)
    if a is None:
        return math.isnan(b)
    return not math.isnan(b) and float(a) == b


def verify(replay: Replay | str | os.PathLike[str]) -> VerifyReport:
    """Re-simulate a replay from its own contents and check every claim.

    Accepts only if the stage and vehicle match the digests, the hash after the reset, every
    intermediate hash and the final hash match, the episode ends exactly where the actions end
    (or not at all, for a partial replay) with the recorded end reason, and the finish and
    checkpoint times match bit for bit.

    Args:
        replay: a :class:`Replay` or a path to a replay file.

    Raises:
        ReplayError: the file cannot be read or parsed (a malformed file, not a rejection).
    """
    t0 = time.perf_counter()
    if not isinstance(replay, Replay):
        replay = load_replay(replay)
    rep = VerifyReport(
        accepted=False,
        steps=replay.steps,
        stage=str(replay.stage.get("name", "")),
        stage_digest=str(replay.stage.get("digest", "")),
        run_id=replay.run_id(),
    )

    def reject(reason: str, message: str, step=None, expected=None, got=None) -> VerifyReport:
        rep.reason, rep.message, rep.step = reason, message, step
        rep.expected, rep.got = expected, got
        rep.elapsed_s = time.perf_counter() - t0
        return rep

    try:
        sim = Resim(replay)
    except ReplayFormatError as e:
        return reject("config_mismatch", str(e))
    cfg = sim.env.config
    if cfg.control_hz != replay.control_hz:
        return reject("config_mismatch", "control_hz does not match env_kwargs")
    vd = cfg.vehicle.digest()
    if vd != replay.vehicle_digest:
        return reject(
            "vehicle_mismatch",
            "the vehicle parameters do not match the replay's vehicle hash",
            expected=replay.vehicle_digest,
            got=vd,
        )
    cd = cfg.digest()
    if cd != replay.config_digest:
        return reject(
            "config_mismatch",
            "the env settings (or a stage) built from env_kwargs do not match the replay's "
            "config hash",
            expected=replay.config_digest,
            got=cd,
        )
    core = sim.core
    slot = int(core.eistate[0, K.EI_SLOT])
    st = core.bank.slots[slot]
    if st.digest() != replay.stage["digest"]:
        return reject(
            "stage_mismatch",
            f"stage {st.name!r} here has content hash {st.digest()}, the replay was driven on "
            f"{replay.stage.get('name')!r} with hash {replay.stage['digest']}",
            expected=replay.stage["digest"],
            got=st.digest(),
        )
    h = sim.state_hash()
    if h != replay.initial_hash:
        return reject(
            "initial_hash",
            "the state after the reset differs (another reset seed, stage or settings)",
            0,
            replay.initial_hash,
            h,
        )
    every = replay.hash_every
    n = replay.steps
    for t in range(n):
        if sim.done:
            return reject(
                "ended_early",
                f"the episode ended ({sim.core.end_reason(0)}) at step {t}, but the replay has "
                f"{n} actions",
                t,
                n,
                t,
            )
        try:
            sim.step()
        except gym.error.InvalidAction as e:
            return reject("invalid_action", f"action {t} is invalid: {e}", t)
        if (t + 1) % every == 0:
            h = sim.state_hash()
            want = replay.hashes[(t + 1) // every - 1]
            if h != want:
                lo = t + 1 - every
                return reject(
                    "hash_mismatch",
                    f"state hash after step {t + 1} differs: the run diverged in steps "
                    f"{lo + 1}..{t + 1} (an action, the stage or the physics changed)",
                    t + 1,
                    want,
                    h,
                )
    info = sim.info
    h = sim.state_hash()
    if h != replay.final_hash:
        return reject("final_hash", "the final state hash differs", n, replay.final_hash, h)
    end = sim.core.end_reason(0) if sim.done else ""
    if end != replay.end_reason:
        return reject(
            "end_reason",
            f"the episode ends with {end!r}, the replay claims {replay.end_reason!r}",
            n,
            replay.end_reason,
            end,
        )
    ft = info["finish_time_s"]
    if not _same_time(replay.finish_time_s, ft):
        return reject(
            "finish_time",
            f"claimed finish time {replay.finish_time_s!r} s, re-simulated {time_json(ft)!r} s",
            n,
            replay.finish_time_s,
            time_json(ft),
        )
    cps = list(sim.core.checkpoint_times(0))
    if len(cps) != len(replay.checkpoint_times_s) or not all(
        _same_time(a, b) for a, b in zip(replay.checkpoint_times_s, cps, strict=True)
    ):
        return reject(
            "checkpoint_times",
            "claimed checkpoint times differ from the re-simulated ones",
            n,
            replay.checkpoint_times_s,
            [time_json(c) for c in cps],
        )
    rep.accepted = True
    rep.message = (
        f"verified: {rep.stage} "
        + (f"finished in {ft:.3f} s" if not math.isnan(ft) else f"{end or 'partial run'}")
        + f", {n} steps, every hash matches"
    )
    rep.finish_time_s = time_json(ft)
    rep.end_reason = end
    rep.elapsed_s = time.perf_counter() - t0
    return rep
