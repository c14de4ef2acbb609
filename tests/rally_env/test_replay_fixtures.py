"""Replays recorded by an earlier release still verify.

The files in ``fixtures/replays/`` were recorded with the single-module ``rally_env.replay``
(commit effc0f1), before replays became a package: a Rally-v0 opener run, a randomized
Rally-v1 rally-car run, a run on an embedded stage, and two cars of a randomized 3-car vector
env (one first episode, one episode that started from an autoreset, stored as its RNG state).
They must verify bit for bit with the current code; if one stops verifying, the replay format,
the state hash or the physics changed, and that needs a new format or env version.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from rally_env.replay import load_replay, verify

FIXTURES = Path(__file__).parent / "fixtures" / "replays"
FILES = sorted(FIXTURES.glob("*.rrp.json.gz"))

# what each file claims and what it was recorded with (checked against the file itself too)
EXPECTED = {
    "v0-opener.rrp.json.gz": ("Rally-v0", "opener", 1790, "RallyEnv"),
    "v1-rally-car-randomized.rrp.json.gz": ("Rally-v1", "opener", 1708, "RallyEnv"),
    "v0-embedded-stage.rrp.json.gz": ("Rally-v0", "tiny", 235, "RallyEnv"),
    "vector-car1.rrp.json.gz": ("Rally-v0", "tiny", 239, "RallyVectorEnv car 1"),
    "vector-car2-autoreset.rrp.json.gz": ("Rally-v0", "tiny", 244, "RallyVectorEnv car 2"),
}


def test_every_fixture_is_listed():
    assert sorted(p.name for p in FILES) == sorted(EXPECTED)


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.name.split(".")[0])
def test_an_old_replay_still_verifies(path):
    env_id, stage, steps, recorder = EXPECTED[path.name]
    rp = load_replay(path)
    assert (rp.env_id, rp.stage["name"], rp.steps, rp.meta["recorder"]) == (
        env_id,
        stage,
        steps,
        recorder,
    )
    rep = verify(path)
    assert rep.accepted, rep.message
    assert rep.end_reason == "finished" and rep.finish_time_s == rp.finish_time_s
    assert rep.stage == stage and rep.stage_digest == rp.stage["digest"]
