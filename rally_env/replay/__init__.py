"""Replays: bit-exact re-runs, ghosts, and verifying a claimed stage time by re-simulation.

A replay file (JSON, optionally gzip; never pickle) holds what determines an episode (the env's
settings, the RNG stream of its reset, the actions), what the run claims and state hashes along
the way; :func:`verify` re-simulates it from the file alone. ``docs/replays.md`` has an example,
the format and the package's modules. Bad files raise a :class:`ReplayError` (a ``ValueError``)
naming the problem.
"""

from __future__ import annotations

from rally_env.config import config_to_kwargs
from rally_env.replay.budgets import DEFAULT_BUDGETS, Budgets, ReplayBudgetError
from rally_env.replay.codec import (
    ENV_KWARGS,
    MAX_STEPS,
    decode_actions,
    encode_actions,
    kwargs_to_env_args,
)
from rally_env.replay.errors import (
    ReplayError,
    ReplayFormatError,
    ReplayRecordError,
    ReplayTooLargeError,
    ReplayVersionError,
)
from rally_env.replay.format import (
    DEFAULT_HASH_EVERY,
    FORMAT,
    FORMAT_VERSION,
    MAX_REPLAY_BYTES,
    SUFFIX,
    Replay,
    load_replay,
    package_version,
    replay_from_bytes,
    replay_from_dict,
    save_replay,
)
from rally_env.replay.ghost import (
    Ghost,
    GhostFileError,
    GhostRecorder,
    GhostSet,
    ghost_from_replay,
    ghost_poses,
    load_ghost,
)
from rally_env.replay.hashing import car_state_hash
from rally_env.replay.record import RecordReplay, RecordVectorReplay
from rally_env.replay.resim import Resim, build_env
from rally_env.replay.verify import VerifyReport, verify, verify_bytes, verify_replay

__all__ = [
    "DEFAULT_BUDGETS",
    "DEFAULT_HASH_EVERY",
    "ENV_KWARGS",
    "FORMAT",
    "FORMAT_VERSION",
    "MAX_REPLAY_BYTES",
    "MAX_STEPS",
    "SUFFIX",
    "Budgets",
    "Ghost",
    "GhostFileError",
    "GhostRecorder",
    "GhostSet",
    "RecordReplay",
    "RecordVectorReplay",
    "Replay",
    "ReplayBudgetError",
    "ReplayError",
    "ReplayFormatError",
    "ReplayRecordError",
    "ReplayTooLargeError",
    "ReplayVersionError",
    "Resim",
    "VerifyReport",
    "build_env",
    "car_state_hash",
    "config_to_kwargs",
    "decode_actions",
    "encode_actions",
    "ghost_from_replay",
    "ghost_poses",
    "kwargs_to_env_args",
    "load_ghost",
    "load_replay",
    "package_version",
    "replay_from_bytes",
    "replay_from_dict",
    "save_replay",
    "verify",
    "verify_bytes",
    "verify_replay",
]
