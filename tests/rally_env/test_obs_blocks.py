"""The observation blocks are declared once (``rally_env.spaces.OBS_BLOCKS``): the layout, the
kernels' switches, the precompile fingerprint, the config's checks and its replay form all
follow from it."""

from __future__ import annotations

import inspect

import pytest

from rally_env import ConfigError
from rally_env import kernels as K
from rally_env import precompile as P
from rally_env import spaces as SP
from rally_env.config import RallyConfig, config_to_kwargs
from rally_env.spaces import OBS_BLOCKS, OBS_SWITCHES, ObsLayout, layout_for, obs_switches


def _fields_of(blocks, n_wheels=4):
    rows = []

    def add(name, group, desc, lo=-SP.OBS_BOUND, hi=SP.OBS_BOUND):
        rows.append(name)

    for b in blocks:
        b.fields(add, SP.wheel_labels(n_wheels), SP.LOOKAHEAD_M)
    return rows


@pytest.mark.parametrize(("version", "road_ahead"), [(0, False), (0, True), (1, False), (1, True)])
def test_a_layout_is_its_blocks_in_order(version, road_ahead):
    lay = ObsLayout(4, version=version, road_ahead=road_ahead)
    names = [b.name for b in lay.blocks]
    want = ["base", *(["v1"] if version else []), *(["road_ahead"] if road_ahead else [])]
    assert names == want  # the blocks switched by other settings are off by default
    assert [f.name for f in lay.fields] == _fields_of(lay.blocks)


@pytest.mark.parametrize(("version", "road_ahead"), [(0, False), (1, True), (0, True)])
def test_config_switches_follow_the_blocks(version, road_ahead):
    cfg = RallyConfig(version=version, road_ahead=road_ahead)
    switched = [b for b in OBS_BLOCKS if b.switch is not None]
    assert len(obs_switches(cfg)) == len(switched)
    assert obs_switches(cfg)[:2] == (True if version else None, True if road_ahead else None)
    assert [b.name for b in layout_for(cfg).blocks] == [
        b.name for b in OBS_BLOCKS if b.switch is None or getattr(cfg, b.switch)
    ]
    fp = P.fingerprint(cfg)
    assert fp[:2] == (version, road_ahead) and fp[-1] == bool(cfg.vehicle.extended)
    assert len(fp) == 2 + len(OBS_SWITCHES)
    kw = config_to_kwargs(cfg)
    assert ("road_ahead" in kw) is road_ahead


def _source(fn):
    return inspect.getsource(getattr(fn, "py_func", fn))


def test_every_switched_block_has_its_writer_behind_its_switch():
    switched = [b for b in OBS_BLOCKS if b.switch is not None]
    blocks = getattr(K._write_blocks, "py_func", K._write_blocks)
    params = list(inspect.signature(blocks).parameters)
    assert params[1 : 1 + len(switched)] == [f"{b.name}_on" for b in switched]
    assert params[1 + len(switched)] == "phys"
    src = _source(K._write_blocks)
    for b in OBS_BLOCKS:
        assert callable(getattr(K, b.writer)), b.writer
        if b.switch is not None:
            guard = f"if {b.name}_on is not None:\n        "
            assert f"{guard}i = {b.writer}(" in src or f"{guard}i, missed = {b.writer}(" in src
    assert "_write_blocks(k, *obs_on, phys," in _source(K._write_obs)
    assert len(obs_switches(RallyConfig())) == len(switched)


def test_a_switch_must_be_a_bool_and_known():
    with pytest.raises(ConfigError, match="road_ahead"):
        RallyConfig(road_ahead="yes")
    with pytest.raises(ValueError, match="no_such_block"):
        ObsLayout(4, no_such_block=True)


def test_a_new_block_joins_the_layout_by_its_switch(monkeypatch):
    def fields(add, labels, lookahead_m):
        add("demo_block", "demo_block", "a block added later", 0.0, 1.0)

    extra = SP.ObsBlock("demo_block", fields, "demo_block", "_write_demo_block")
    monkeypatch.setattr(SP, "OBS_BLOCKS", (*OBS_BLOCKS, extra))
    monkeypatch.setattr(SP, "OBS_SWITCHES", (*OBS_SWITCHES, "demo_block"))
    base = ObsLayout(4, road_ahead=True)
    on = ObsLayout(4, road_ahead=True, demo_block=True)
    assert on.size == base.size + 1
    assert on.fields[-1].name == "demo_block" and on.index["demo_block"] == base.size
    assert [b.name for b in on.blocks][-1] == "demo_block"


def test_every_switch_is_a_named_env_argument_and_a_replay_setting():
    """Each block's switch is a named ``RallyEnv`` argument (no ``**kwargs``: libraries that
    see one pass their own keywords, as torchrl's ``GymEnv`` passes ``frameskip``), and a
    replay carries every config setting but ``render_mode`` with no list written by hand."""
    from rally_env import RallyEnv
    from rally_env.replay.codec import ENV_KWARGS

    params = inspect.signature(RallyEnv.__init__).parameters
    assert not any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values())
    assert set(OBS_SWITCHES) <= set(params)
    assert set(OBS_SWITCHES) <= set(ENV_KWARGS) and "render_mode" not in ENV_KWARGS
    env = RallyEnv(**{name: True for name in OBS_SWITCHES})
    assert all(getattr(env.config, name) for name in OBS_SWITCHES)
    env.close()
