"""Every documented Gymnasium id makes its env without a Gymnasium warning: the first ids
``Rally-v0`` / ``Rally-v1`` are not "out of date" (v1 is another model, not an upgrade)."""

from __future__ import annotations

import warnings

import gymnasium as gym
import pytest
from gymnasium import logger as gym_logger

import rally_env

DOCUMENTED = (
    *rally_env.ENV_IDS,
    *rally_env.LEGACY_ENV_IDS,
    *rally_env.AHEAD_ENV_IDS,
    rally_env.LEARN_ENV_ID,
)


@pytest.fixture
def every_gym_warning(monkeypatch):
    """Gymnasium's logger emitting its warnings (its notices are ``warnings.warn`` calls),
    every warning recorded, none filtered."""
    monkeypatch.setattr(gym_logger, "min_level", gym_logger.WARN)
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        yield seen


@pytest.mark.parametrize("env_id", [*DOCUMENTED, *(f"rally_env:{i}" for i in DOCUMENTED)])
def test_no_gymnasium_warning_for_a_documented_id(env_id, every_gym_warning):
    env = gym.make(env_id)
    env.close()
    assert [str(w.message) for w in every_gym_warning] == []


@pytest.mark.parametrize("env_id", rally_env.LEGACY_ENV_IDS)
def test_no_gymnasium_warning_for_a_first_id_as_a_vector_env(env_id, every_gym_warning):
    envs = gym.make_vec(env_id, num_envs=2, vectorization_mode="vector_entry_point")
    envs.close()
    assert [str(w.message) for w in every_gym_warning] == []


def test_the_first_ids_make_the_same_envs_as_before():
    old0, new0 = gym.spec("Rally-v0"), gym.spec("RallyDirect-v0")
    assert old0.id == "Rally-v0"  # unchanged: its own spec
    assert (old0.entry_point, old0.kwargs) == (new0.entry_point, new0.kwargs)
    # Rally-v1 is the wheel-speed env's spec under a second key (no spec named Rally-v1,
    # which would make Rally-v0 "out of date")
    assert gym.spec("Rally-v1") is gym.spec("RallyWheelSpeed-v1")
    env = gym.make("Rally-v1")
    assert env.unwrapped.config.version == 1 and env.spec.id == "RallyWheelSpeed-v1"
    env.close()
    assert [s.id for s in gym.registry.values() if s.name == "Rally"] == ["Rally-v0"]
    rally_env.register_envs()  # idempotent
    assert gym.spec("Rally-v1") is gym.spec("RallyWheelSpeed-v1")


def test_one_table_declares_every_registered_id():
    table = {e.id: e for e in rally_env.REGISTERED_ENVS}
    assert len(table) == len(rally_env.REGISTERED_ENVS) == len(DOCUMENTED) == 7
    assert set(table) == set(DOCUMENTED)
    assert {k for k in gym.registry if "Rally" in k} == set(table)
    for e in rally_env.REGISTERED_ENVS:
        spec = gym.spec(e.id)
        if e.entry_point.startswith("="):  # a second key of another id's spec
            assert spec is gym.spec(e.entry_point[1:])
        else:
            assert (spec.id, spec.entry_point, spec.kwargs) == (e.id, e.entry_point, e.kwargs)
        assert e.what
    for version, env_id in enumerate(rally_env.ENV_IDS):
        assert gym.spec(env_id).kwargs.get("version", 0) == version


def test_replays_record_the_first_ids_of_the_one_table():
    import rally_env.replay

    assert not hasattr(rally_env.replay, "ENV_IDS")  # one name, one tuple: rally_env.ENV_IDS
    for version, first in enumerate(rally_env.LEGACY_ENV_IDS):
        assert rally_env.RallyConfig(version=version).env_id == first
        assert first in {e.id for e in rally_env.REGISTERED_ENVS}
