"""The reward terms are declared once (``rally_env.config.REWARD_TABLE``): the weights, the
kernel's offsets, the docs table, the info keys and the replay form all follow from it."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import types

import pytest

from rally_env import ConfigError, RallyEnv, RewardWeights
from rally_env import config as C
from rally_env import kernels as K
from rally_env.config import REWARD_TABLE, RallyConfig, config_to_kwargs
from rally_env.info import INFO_KEYS
from tests.env_doc import reward_table
from tests.rally_env.conftest import FULL_THROTTLE


def test_weights_are_the_table():
    names = [f.name for f in dataclasses.fields(RewardWeights)]
    assert names == [t.name for t in REWARD_TABLE] == list(K.REWARD_TERMS)
    assert dataclasses.asdict(RewardWeights()) == {t.name: t.default for t in REWARD_TABLE}
    for t in REWARD_TABLE:
        assert f"{t.name} ({t.units}): {t.doc}." in RewardWeights.__doc__


def test_weights_are_checked_and_frozen():
    with pytest.raises(ConfigError, match=r"reward_weights\.finish"):
        RewardWeights(finish=float("nan"))
    w = RewardWeights(crash=3)
    assert w.crash == 3.0 and isinstance(w.crash, float)
    with pytest.raises(dataclasses.FrozenInstanceError):
        w.crash = 4.0  # type: ignore[misc]


def test_kernel_offsets_follow_the_table():
    assert K.N_TERMS == len(REWARD_TABLE)
    assert K.N_C == K.C_W0 + K.N_TERMS
    others = [v for n, v in vars(K).items() if n.startswith("C_") and n != "C_W0"]
    assert sorted(others) == list(range(K.C_W0)), "the other settings come before the weights"
    for t in REWARD_TABLE:
        assert getattr(K, f"T_{t.name.upper()}") == K.REWARD_TERMS.index(t.name)


def test_the_config_vector_carries_each_weight():
    weights = {t.name: float(i + 1) for i, t in enumerate(REWARD_TABLE)}
    env = RallyEnv(stage="proving-ground", reward_weights=weights)
    cfg = env.unwrapped.core.cfg
    for i, t in enumerate(REWARD_TABLE):
        assert cfg[K.C_W0 + i] == weights[t.name]
    assert cfg[K.C_LINE_TOL] == K.LINE_TOL_M and cfg[K.C_WINDOW] == K.WINDOW_M
    env.reset(seed=0)
    info = env.step(FULL_THROTTLE)[4]
    assert info["reward_time"] == pytest.approx(-weights["time"] / env.unwrapped.config.control_hz)
    env.close()


def test_docs_and_info_list_every_term():
    table = reward_table()
    for t in REWARD_TABLE:
        assert f"| `{t.name}` | {t.default:g} | {t.doc} |" in table
        assert f"reward_{t.name}" in INFO_KEYS


def test_replay_form_keeps_the_first_terms_always():
    first = {t.name: t.default for t in REWARD_TABLE if t.name in C.ALWAYS_RECORDED_TERMS}
    assert list(first) == list(C.ALWAYS_RECORDED_TERMS)
    assert config_to_kwargs(RallyConfig())["reward_weights"] == first
    zero = {name: 0.0 for name in C.ALWAYS_RECORDED_TERMS}
    assert config_to_kwargs(RallyConfig(reward_weights=zero))["reward_weights"] == zero


def test_a_later_term_is_recorded_only_off_its_default(monkeypatch):
    extra = C.RewardTerm("grip", 0.5, "per s", "a later term")
    monkeypatch.setattr(C, "REWARD_TABLE", (*REWARD_TABLE, extra))
    weights = {t.name: t.default for t in REWARD_TABLE}
    first = {n: weights[n] for n in C.ALWAYS_RECORDED_TERMS}
    later = [t for t in REWARD_TABLE if t.name not in C.ALWAYS_RECORDED_TERMS]
    at_default = types.SimpleNamespace(**weights, grip=0.5)
    assert C.reward_weights_json(at_default) == first
    off = {t.name: t.default + 1.0 for t in later}
    set_ = types.SimpleNamespace(**{**weights, **off}, grip=0.0)
    assert C.reward_weights_json(set_) == {**first, **off, "grip": 0.0}


def test_old_replay_forms_digest_as_before():
    # the form every replay stored before the table: all six weights, the default ones too
    cfg = RallyConfig(reward_weights={"crash": 3.0})
    old = config_to_kwargs(cfg, for_digest=True)
    old["reward_weights"] = {
        "progress": 0.1,
        "time": 0.1,
        "off_road": 0.5,
        "crash": 3.0,
        "finish": 20.0,
        "action_change": 0.0,
    }
    text = json.dumps(old, sort_keys=True, separators=(",", ":"))
    assert cfg.digest() == hashlib.blake2b(text.encode(), digest_size=16).hexdigest()
