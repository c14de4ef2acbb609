"""The replay package's errors: every one a :class:`ReplayError` (a ``ValueError``)."""

from __future__ import annotations

from rally_env.errors import RallyEnvError


class ReplayError(RallyEnvError):
    """A replay file or object is unusable: the message names the file and the problem."""


class ReplayFormatError(ReplayError):
    """The file is malformed: not JSON, truncated, a field missing or of the wrong type."""


class ReplayVersionError(ReplayError):
    """The file is a replay of another format version (or physics layout)."""


class ReplayTooLargeError(ReplayError):
    """The file (decompressed) exceeds :data:`rally_env.replay.format.MAX_REPLAY_BYTES`."""


class ReplayRecordError(ReplayError):
    """The env cannot be recorded (e.g. an action-changing wrapper below the recorder)."""
