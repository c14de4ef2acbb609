"""Verification: re-simulate a replay from its own contents and check every claim.

The verdict is ``accepted``, ``rejected`` or ``unusable`` (``rally verify``'s exit codes 0, 1,
2), and an accepted run is filed under what the re-simulation found, never under the claims
(``docs/replays.md``, "Verification").
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import math
import os
import time
from dataclasses import dataclass, field
from typing import Any

import gymnasium as gym
import numpy as np

from rally_env import kernels as K
from rally_env.config import RallyConfig, config_to_kwargs, jsonable
from rally_env.replay.budgets import DEFAULT_BUDGETS, Budgets
from rally_env.replay.codec import stage_kind
from rally_env.replay.errors import ReplayError, ReplayTooLargeError
from rally_env.replay.format import Replay, load_replay, replay_from_bytes, run_id_of, time_json
from rally_env.replay.resim import Resim, settings_of

EXIT_CODES = {"accepted": 0, "rejected": 1, "unusable": 2}
#: The settings that make a rules class (everything that shapes the physics and the episode
#: end; not the stage, not the reward weights).
RULE_KEYS = ("vehicle", "control_hz", "termination", "randomize", "random_stage")


def _rules_digest(kw: dict[str, Any], vehicle_digest: str) -> str:
    rules: dict[str, Any] = {k: kw.get(k) for k in RULE_KEYS}
    rules["discrete_actions"] = bool(kw.get("discrete_actions", False))
    rules["vehicle_digest"] = vehicle_digest
    text = json.dumps(rules, sort_keys=True, separators=(",", ":"))
    return hashlib.blake2b(text.encode(), digest_size=8).hexdigest()


def drive_id(stage_digest: str, rules: str, initial_hash: str, actions: Any) -> str:
    """What a run *drove*: the stage digest, the rules (:func:`rules_of_config`), the state
    after the reset and the actions; not the reward weights, the metadata or any other setting
    a finished run never pays for. Two runs of one drive are one run on a board."""
    a = np.ascontiguousarray(actions)
    h = hashlib.blake2b(digest_size=16)
    for part in (stage_digest, rules, initial_hash, a.dtype.str, str(a.shape)):
        h.update(part.encode())
        h.update(b"\0")
    h.update(a.tobytes())
    return h.hexdigest()


@functools.lru_cache(maxsize=1)
def standard_rules() -> str:
    """The rules digest of the default settings (``RallyConfig()``)."""
    cfg = RallyConfig()
    return _rules_digest(config_to_kwargs(cfg), cfg.vehicle.digest())


def rules_of_config(config: Any) -> tuple[str, bool]:
    """(rules digest, is standard) of a built config (what a verified run is filed under)."""
    kw = config_to_kwargs(config, for_digest=True)
    digest = _rules_digest(kw, config.vehicle.digest())
    return digest, digest == standard_rules()


@dataclass
class VerifyReport:
    """Outcome of :func:`verify` / :func:`verify_bytes`; ``docs/replays.md`` ("Verification",
    "Verdicts and exit codes") lists every reason code and filing field.

    Attributes:
        accepted, status: ``status`` is ``accepted``, ``rejected`` or ``unusable``.
        reason: '' when accepted, else a short code (``hash_mismatch``, ``bad_replay``, ...).
        message: one human sentence.
        step, expected, got: the first control step where it diverged (``None`` if not tied
            to a step), the claimed and the re-simulated value.
        stage, stage_digest, stage_kind, rules, standard, control_hz, env_id, vehicle_digest,
        finish_time_s, checkpoint_times_s, end_reason, run_id, initial_hash: the run's filing,
            all from the re-simulation (``rules``, ``standard``: :func:`rules_of_config`).
        drive_id: what the run drove (:func:`drive_id`), set when accepted.
        steps, elapsed_s: the replay's control steps; wall time of the verification (s).
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
    status: str = "rejected"
    stage_kind: str = ""
    rules: str = ""
    standard: bool = False
    control_hz: int = 0
    env_id: str = ""
    vehicle_digest: str = ""
    checkpoint_times_s: list[float | None] = field(default_factory=list)
    initial_hash: str = ""
    drive_id: str = ""

    @property
    def exit_code(self) -> int:
        """``rally verify``'s exit code for this verdict: 0, 1 or 2."""
        return EXIT_CODES[self.status]

    def to_dict(self) -> dict[str, Any]:
        return jsonable(dataclasses.asdict(self))


def unusable(error: ReplayError, elapsed_s: float = 0.0) -> VerifyReport:
    """The report of input that cannot be verified (:attr:`VerifyReport.status`
    ``unusable``)."""
    over = isinstance(error, ReplayTooLargeError)  # ReplayBudgetError is one
    return VerifyReport(
        accepted=False,
        status="unusable",
        reason="over_budget" if over else "bad_replay",
        message=str(error),
        elapsed_s=elapsed_s,
    )


def _sim_time(t: float) -> float | None:
    """A re-simulated time as a claim holds it: ``None`` for NaN (not reached)."""
    return None if math.isnan(t) else float(t)


class _Rejected(Exception):
    def __init__(self, reason: str, message: str, step=None, expected=None, got=None):
        super().__init__(message)
        self.args5 = (reason, message, step, expected, got)


def _expect(want: Any, got: Any, reason: str, message: str, step: int | None = None) -> None:
    """Reject the run (``reason``: ``message``) unless the claim ``want`` is what the
    re-simulation ``got``."""
    if want != got:
        raise _Rejected(reason, message, step, want, got)


def _check_digests(cfg: Any, replay: Replay, rep: VerifyReport) -> None:
    """The settings against the claimed digests, before anything is built from them."""
    rep.rules, rep.standard = rules_of_config(cfg)
    rep.control_hz, rep.env_id = cfg.control_hz, cfg.env_id
    rep.vehicle_digest = cfg.vehicle.digest()
    _expect(
        replay.vehicle_digest,
        rep.vehicle_digest,
        "vehicle_mismatch",
        "the vehicle parameters do not match the replay's vehicle hash",
    )
    _expect(
        replay.config_digest,
        cfg.digest(),
        "config_mismatch",
        "the env settings (or a stage) built from env_kwargs do not match the replay's config hash",
    )


def _check_stage(sim: Resim, replay: Replay, rep: VerifyReport) -> None:
    """The stage the re-simulated car drives against the claimed one; fills the filing."""
    core = sim.core
    slot = int(core.eistate[0, K.EI_SLOT])
    st = core.bank.slots[slot]
    rep.stage, rep.stage_digest = st.name, st.digest()
    rep.stage_kind = stage_kind(replay.env_kwargs.get("stage", "opener"))
    claim = (
        replay.stage.get("name"),
        replay.stage["digest"],
        replay.stage.get("kind", rep.stage_kind),
    )
    _expect(
        list(claim),
        [rep.stage, rep.stage_digest, rep.stage_kind],
        "stage_mismatch",
        f"the replay claims stage {claim[0]!r} ({claim[1]}, {claim[2]}), the re-simulated "
        f"car drove {rep.stage!r} ({rep.stage_digest}, {rep.stage_kind})",
    )
    rep.stage = core.stages.board_name(slot)


def _run(sim: Resim, replay: Replay) -> None:
    """Step through the actions, checking the hash after the reset and every stored hash."""
    _expect(
        replay.initial_hash,
        sim.state_hash(),
        "initial_hash",
        "the state after the reset differs (another reset seed, stage or settings)",
        0,
    )
    every, n = replay.hash_every, replay.steps
    for t in range(n):
        if sim.done:
            raise _Rejected(
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
            raise _Rejected("invalid_action", f"action {t} is invalid: {e}", t) from None
        if (t + 1) % every == 0:
            h = sim.state_hash()
            want = replay.hashes[(t + 1) // every - 1]
            if h != want:
                lo = t + 1 - every
                raise _Rejected(
                    "hash_mismatch",
                    f"state hash after step {t + 1} differs: the run diverged in steps "
                    f"{lo + 1}..{t + 1} (an action, the stage or the physics changed)",
                    t + 1,
                    want,
                    h,
                )


def _check_result(sim: Resim, replay: Replay, rep: VerifyReport) -> None:
    info, n = sim.info, replay.steps
    _expect(replay.final_hash, sim.state_hash(), "final_hash", "the final state hash differs", n)
    end = sim.core.end_reason(0) if sim.done else ""
    _expect(
        replay.end_reason,
        end,
        "end_reason",
        f"the episode ends with {end!r}, the replay claims {replay.end_reason!r}",
        n,
    )
    ft, cps = info["finish_time_s"], list(sim.core.checkpoint_times(0))
    got = _sim_time(ft)
    msg = f"claimed finish time {replay.finish_time_s!r} s, re-simulated {got!r} s"
    _expect(replay.finish_time_s, got, "finish_time", msg, n)
    msg = "claimed checkpoint times differ from the re-simulated ones"
    _expect(replay.checkpoint_times_s, [_sim_time(c) for c in cps], "checkpoint_times", msg, n)
    stage_time = float(info["stage_time_s"])
    _expect(
        replay.stage_time_s,
        stage_time,
        "stage_time",
        f"claimed stage time {replay.stage_time_s!r} s, re-simulated {stage_time!r} s",
        n,
    )
    rep.finish_time_s = time_json(ft)
    rep.checkpoint_times_s = [time_json(c) for c in cps]
    rep.end_reason = end


def verify_replay(replay: Replay, budgets: Budgets | None = None) -> VerifyReport:
    """Re-simulate a parsed replay and check every claim (see :func:`verify`).

    Raises:
        ReplayError: the settings do not build an env, or exceed ``budgets`` (unusable).
    """
    t0 = time.perf_counter()
    budgets = DEFAULT_BUDGETS if budgets is None else budgets
    rep = VerifyReport(accepted=False, steps=replay.steps)
    settings = settings_of(replay, budgets)
    try:
        _check_digests(settings[1], replay, rep)  # a mismatch costs no terrain
        sim = Resim(replay, budgets, settings)
        _check_stage(sim, replay, rep)
        rep.initial_hash = sim.state_hash()
        # the replay's run id (:meth:`Replay.run_id`) from the re-simulated settings and stage
        rep.run_id = run_id_of(
            sim.env.config.digest(), rep.stage_digest, rep.initial_hash, replay.actions
        )
        _run(sim, replay)
        _check_result(sim, replay, rep)
    except _Rejected as r:
        rep.reason, rep.message, rep.step, rep.expected, rep.got = r.args5
    else:
        ft = rep.finish_time_s
        rep.accepted, rep.status = True, "accepted"
        rep.drive_id = drive_id(rep.stage_digest, rep.rules, rep.initial_hash, replay.actions)
        how = f"finished in {ft:.3f} s" if ft is not None else rep.end_reason or "partial run"
        rep.message = f"verified: {rep.stage} {how}, {replay.steps} steps, every hash matches"
    rep.elapsed_s = time.perf_counter() - t0
    return rep


def verify(replay: Replay | str | os.PathLike[str], budgets: Budgets | None = None) -> VerifyReport:
    """Re-simulate a replay from its own contents and check every claim: the digests and
    stage, every state hash, where the episode ends and how, and every time, bit for bit
    (``docs/replays.md``, "Verification"); the filing comes from the re-simulation.

    Args:
        replay: a :class:`Replay` or a path to a replay file (a regular file).
        budgets: what the verification may cost (default
            :data:`~rally_env.replay.budgets.DEFAULT_BUDGETS`).

    Raises:
        ReplayError: the input is unusable: unreadable, malformed, settings that do not
            build an env, or over ``budgets`` (``ReplayBudgetError``); not a rejection.
    """
    if not isinstance(replay, Replay):
        replay = load_replay(replay, budgets)
    else:  # an in-memory replay gets the same checks as a file
        replay = replay_from_bytes(replay.to_bytes(compress=False), "<replay>", budgets)
    return verify_replay(replay, budgets)


def verify_bytes(
    data: bytes, budgets: Budgets | None = None, where: str = "<upload>"
) -> VerifyReport:
    """Verify a replay given as bytes (gzip or plain JSON), ``where`` naming it in messages:
    the entry point for a worker that verifies untrusted uploads (``docs/replays.md``, "A
    verification worker"). Every budget is checked before anything is built from the file;
    never raises for bad input: the report says ``unusable``
    (:attr:`VerifyReport.exit_code` 2).
    """
    t0 = time.perf_counter()
    try:
        replay = replay_from_bytes(data, where, budgets)
        return verify_replay(replay, budgets)
    except ReplayError as e:
        return unusable(e, time.perf_counter() - t0)
