"""Rally-v1: the wheel-speed model, library vehicles and planets, the v1 observation; and a
golden check that Rally-v0 did not change."""

from __future__ import annotations

import bisect
import hashlib
import pickle
import warnings

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env

import rally_env
from physics import ROVER
from physics import layout as L
from physics import vehicles as V
from rally_env import ConfigError, RallyEnv, RallyVectorEnv
from rally_env.info import INFO_KEYS, INFO_KEYS_V1
from rally_env.replay import (
    RecordReplay,
    car_state_hash,
    replay_from_bytes,
    verify,
)
from rally_env.spaces import DEFAULT_LAYOUT, ObsLayout

VEHICLES = tuple(V.VEHICLES)
#: v1 observation size per library vehicle (59 v0 fields for 4 wheels + 2 + 2 n_wheels + 1 + 8,
#: the v0 size itself being 39 + 5 n_wheels).
V1_SIZES = {"rover": 78, "rally-car": 78, "truck": 92, "tank": 106, "bike": 64}
SHORT = {"time_limit_s": 2.0}


def _actions(n: int) -> np.ndarray:
    t = np.arange(n)
    a = np.zeros((n, 4), np.float32)
    a[:, 0] = 0.5 * np.sin(t / 5.0)
    a[:, 1] = np.where(t < 30, 1.0, 0.3)
    a[:, 2] = np.where(t % 17 == 16, 0.6, 0.0)
    return a


def _rollout(env: RallyEnv, seed: int, acts: np.ndarray) -> list:
    out = [env.reset(seed=seed)[0].copy()]
    for a in acts:
        o, r, te, tr, _ = env.step(a)
        out.append((o.copy(), r, te, tr))
        if te or tr:
            break
    return out


# ---------------------------------------------------------------------------- Rally-v0 golden
# The observation hash after 50 fixed steps of gym.make("Rally-v0") with default arguments,
# its physics state hash, config digest, vehicle digest and per-car replay hash, all computed
# at the HEAD before Rally-v1 existed (git archive HEAD, same script). If one changes, Rally-v0
# changed: that needs a new env version, not an update of these values.
# ``config_digest`` is the digest replays store; ``RallyConfig.digest()`` has returned it since
# the config has one digest (it was a second, settings-repr digest "2f611c2f...", used only to
# match ``set_state`` snapshots within one installation).
V0_GOLDEN = {
    "obs_hash": "645ad6979cc6966cd9cd1ad9ea1fe70f",
    "state_hash": "52ec05ff3f492e0e31f18dc0841ca400",
    "config_digest": "3b507ff1dbee434e25425e8557ba3792",
    "vehicle_digest": "58832ec423dfecccfe8fa63f74ba4787",
    "car_state_hash": "6bf4f45430fc5fa4d32c137ec2f2e322",
}


def test_rally_v0_default_is_unchanged():
    env = gym.make("Rally-v0")
    o, _ = env.reset(seed=123)
    h = hashlib.blake2b(digest_size=16)
    h.update(o.tobytes())
    rew = []
    for t in range(50):
        a = np.array(
            [0.4 * np.sin(t / 7.0), 1.0 if t < 35 else 0.2, 0.0 if t < 40 else 0.5, 0.0],
            np.float32,
        )
        o, r, *_ = env.step(a)
        h.update(o.tobytes())
        rew.append(r)
    h.update(np.asarray(rew, np.float64).tobytes())
    u = env.unwrapped
    got = {
        "obs_hash": h.hexdigest(),
        "state_hash": u.core.sim.state_hash(),
        "config_digest": u.config.digest(),
        "vehicle_digest": u.config.vehicle.digest(),
        "car_state_hash": car_state_hash(u.core, 0),
    }
    assert got == V0_GOLDEN
    assert u.core.layout.size == DEFAULT_LAYOUT.size == 59
    assert u.core.sim.state.shape[1] == L.N_STATE and u.core.sim.params.shape[1] == L.N_PARAMS
    assert "gear" not in u.core.info_of(0)
    assert "version" not in repr(u.config) and "planet" not in repr(u.config)


def test_v0_planet_only_when_given():
    assert RallyEnv().config.vehicle is ROVER
    env = RallyEnv(planet="earth")
    assert env.config.vehicle.gravity_mps2 == V.PLANETS["earth"]
    assert not env.config.vehicle.extended  # still the v0 model, just on Earth
    assert env.config.digest() != RallyEnv().config.digest()


# ------------------------------------------------------------------------------ registration
def test_registration_make_and_make_vec():
    spec = gym.spec("Rally-v1")
    assert spec.entry_point == "rally_env.env:RallyEnv"
    assert spec.vector_entry_point == "rally_env.vector:RallyVectorEnv"
    env = gym.make("Rally-v1", vehicle="truck", planet="moon")
    u = env.unwrapped
    assert u.config.version == 1 and u.config.env_id == "Rally-v1"
    assert u.config.vehicle == V.vehicle("truck", planet="moon")
    assert env.observation_space.shape == (V1_SIZES["truck"],)
    default = gym.make("Rally-v1").unwrapped
    assert default.config.vehicle == V.vehicle("rover")
    assert default.config.vehicle.tire_model == "wheel-speed"
    envs = gym.make_vec(
        "Rally-v1", num_envs=2, vectorization_mode="vector_entry_point", vehicle="bike"
    )
    assert isinstance(envs, RallyVectorEnv)
    assert envs.observation_space.shape == (2, V1_SIZES["bike"])
    o, info = envs.reset(seed=0)
    assert envs.observation_space.contains(o)
    for k in INFO_KEYS_V1:
        assert k in info and f"_{k}" in info
    assert info["tire_wear"].shape == (2, 2)


@pytest.mark.parametrize(
    ("kwargs", "field", "allowed"),
    [
        ({"vehicle": "hovercraft"}, "vehicle", "rally-car"),
        ({"vehicle": 3}, "vehicle", "tank"),
        ({"vehicle": {"wings": 2}}, "vehicle", "unknown"),
        ({"vehicle": {"mass_kg": -1.0}}, "vehicle.mass_kg", ""),
        ({"planet": "venus"}, "planet", "moon"),
        ({"planet": 1}, "planet", "earth"),
        ({"version": 2}, "version", "0, 1"),
    ],
)
def test_bad_vehicle_or_planet_names_the_field(kwargs, field, allowed):
    with pytest.raises(ConfigError, match=field) as e:
        RallyEnv(**{"version": 1, **kwargs})
    assert allowed in str(e.value)
    assert e.value.field == field


def test_v0_refuses_library_names_but_v1_takes_them():
    with pytest.raises(ConfigError, match="Rally-v1"):
        RallyEnv(vehicle="truck")
    assert len(RallyEnv(version=1, vehicle="truck").config.vehicle.wheels) == 6


def test_vehicle_forms_on_v1():
    over = RallyEnv(version=1, vehicle={"mass_kg": 2500.0}).config.vehicle
    assert over == V.vehicle("rover").replace(mass_kg=2500.0)
    basic = RallyEnv(version=1, vehicle=ROVER)  # a basic vehicle on the v1 layout: narrow rows
    assert basic.core.sim.state.shape[1] == L.N_STATE
    o, info = basic.reset(seed=0)
    o, *_, info = basic.step(np.array([0, 1, 0, 0], np.float32))
    ix = basic.core.layout.index
    assert o[ix["engine_rpm"]] == 0.0 and o[ix["gear"]] == 0.0 and o[ix["damage"]] == 1.0
    assert info["damage"] == 1.0 and (info["tire_wear"] == 1.0).all()


def test_planet_changes_gravity_and_the_loads():
    loads = {}
    for planet in ("moon", "mars", "earth"):
        env = RallyEnv(version=1, stage="proving-ground", planet=planet)
        assert env.config.vehicle.gravity_mps2 == V.PLANETS[planet]
        assert env.config.planet == planet
        env.reset(seed=0)
        for _ in range(40):
            *_, info = env.step(np.zeros(4, np.float32))
        loads[planet] = float(np.sum(info["wheel_loads_n"]))
        m = env.config.vehicle.mass_kg
        assert loads[planet] == pytest.approx(m * V.PLANETS[planet], rel=0.05)
    assert loads["moon"] < loads["mars"] < loads["earth"]


# ---------------------------------------------------------------------- per library vehicle
@pytest.mark.parametrize("name", VEHICLES)
def test_gymnasium_check_env(name):
    env = RallyEnv(version=1, vehicle=name)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        check_env(env, skip_render_check=True)


@pytest.mark.parametrize("name", VEHICLES)
def test_same_seed_bit_identical_and_in_bounds(name):
    acts = _actions(60)
    a = RallyEnv(version=1, vehicle=name)
    b = RallyEnv(version=1, vehicle=name)
    ra, rb = _rollout(a, 7, acts), _rollout(b, 7, acts)
    assert a.observation_space.shape == (V1_SIZES[name],)
    assert len(ra) == len(rb)
    assert ra[0].tobytes() == rb[0].tobytes()
    for x, y in zip(ra[1:], rb[1:], strict=True):
        assert x[0].tobytes() == y[0].tobytes() and x[1:] == y[1:]
        assert a.observation_space.contains(x[0])
    assert a.core.sim.state_hash() == b.core.sim.state_hash()
    lay = a.core.layout
    # the v0 fields come first, in v0's order
    v0 = ObsLayout(len(a.config.vehicle.wheels))
    assert [f.name for f in lay.fields[: v0.size]] == [f.name for f in v0.fields]
    info = a.core.info_of(0)
    for k in (*INFO_KEYS, *INFO_KEYS_V1):
        assert k in info
    nw = len(a.config.vehicle.wheels)
    assert info["tire_wear"].shape == (nw,) and info["slip_ratios"].shape == (nw,)


@pytest.mark.parametrize("name", VEHICLES)
def test_single_env_matches_vector_column(name):
    n, steps, seed = 3, 40, 11
    acts = _actions(steps)
    venv = RallyVectorEnv(n, version=1, vehicle=name, termination=SHORT)
    vo, _ = venv.reset(seed=seed)
    vobs, vrew, vdone = [vo.copy()], [], []
    for a in acts:
        o, r, te, tr, _ = venv.step(np.tile(a, (n, 1)))
        vobs.append(o.copy())
        vrew.append(r.copy())
        vdone.append(te | tr)
    for k in (0, 2):
        env = RallyEnv(version=1, vehicle=name, termination=SHORT)
        o, _ = env.reset(seed=seed, options={"car_index": k})
        assert o.tobytes() == vobs[0][k].tobytes()
        for t, a in enumerate(acts):
            if t and vdone[t - 1][k]:
                break  # NextStep autoreset: covered by the v0 tests
            o, r, te, tr, _ = env.step(a)
            assert o.tobytes() == vobs[t + 1][k].tobytes(), (name, k, t)
            assert r == vrew[t][k]


@pytest.mark.parametrize("name", VEHICLES)
def test_get_state_set_state_round_trip(name):
    env = RallyEnv(version=1, vehicle=name)
    env.reset(seed=2)
    acts = _actions(30)
    for a in acts[:15]:
        env.step(a)
    st = pickle.loads(pickle.dumps(env.get_state()))
    assert st["sim_state"].shape[1] == L.N_STATE_EXT
    assert st["sim_params"].shape[1] == L.N_PARAMS_EXT
    after = [env.step(a)[0].copy() for a in acts[15:]]
    other = RallyEnv(version=1, vehicle=name)
    o = other.set_state(st)
    assert o.shape == (V1_SIZES[name],)
    again = [other.step(a)[0].copy() for a in acts[15:]]
    assert all(x.tobytes() == y.tobytes() for x, y in zip(after, again, strict=True))
    assert env.core.sim.state_hash() == other.core.sim.state_hash()
    # a v0 env (or another vehicle) refuses the state
    with pytest.raises(rally_env.StateError):
        RallyEnv().set_state(st)


@pytest.mark.parametrize("name", VEHICLES)
def test_recorded_replay_verifies(name):
    env = RecordReplay(RallyEnv(version=1, vehicle=name, planet="moon", termination=SHORT))
    env.reset(seed=5)
    for a in _actions(100):
        *_, te, tr, _ = env.step(a)
        if te or tr:
            break
    rp = env.replays[-1]
    assert rp.env_id == "Rally-v1"
    assert rp.env_kwargs["vehicle"] == name and rp.env_kwargs["planet"] == "moon"
    rep = verify(replay_from_bytes(rp.to_bytes()))
    assert rep.accepted, rep.message


def test_custom_v1_vehicle_replay_verifies():
    car = V.vehicle("rally-car", planet="mars").replace(mass_kg=1100.0)
    env = RecordReplay(RallyEnv(version=1, vehicle=car, termination=SHORT))
    env.reset(seed=1)
    for a in _actions(100):
        *_, te, tr, _ = env.step(a)
        if te or tr:
            break
    rp = env.replays[-1]
    assert isinstance(rp.env_kwargs["vehicle"], dict) and rp.env_kwargs["planet"] is None
    rep = verify(replay_from_bytes(rp.to_bytes()))
    assert rep.accepted, rep.message


@pytest.mark.parametrize("name", VEHICLES)
def test_render_one_frame(name):
    pytest.importorskip("pygame")
    env = RallyEnv(version=1, vehicle=name, render_mode="rgb_array")
    env.reset(seed=0)
    for a in _actions(5):
        env.step(a)
    h = env.core.sim.state_hash()
    f = env.render()
    assert f.shape == (400, 600, 3) and f.dtype == np.uint8 and f.std() > 5.0
    assert env.core.sim.state_hash() == h
    env.close()


def test_hud_shows_drivetrain_and_wear_only_when_present():
    from rally_env.render.views import hud_from_info

    car = RallyEnv(version=1, vehicle="rally-car")
    car.reset(seed=0)
    *_, info = car.step(np.array([0, 1, 0, 0], np.float32))
    hud = hud_from_info(info, drivetrain=True)
    assert hud.gear == info["gear"] and hud.engine_rpm == info["engine_rpm"]
    assert hud.tire_wear is None and hud.damage is None
    worn = dict(info, tire_wear=np.array([1.0, 0.8, 1.0, 1.0]), damage=0.7)
    hud = hud_from_info(worn, drivetrain=False)
    assert hud.gear is None and hud.tire_wear == 0.8 and hud.damage == 0.7
    v0 = RallyEnv()
    v0.reset(seed=0)
    hud = hud_from_info(v0.core.info_of(0))
    assert (hud.gear, hud.engine_rpm, hud.tire_wear, hud.damage) == (None,) * 4


# ------------------------------------------------------------------------- v1 observation
def test_v1_observation_real_slip_ratio_drivetrain_and_wheel_speed():
    env = RallyEnv(version=1, vehicle="rally-car", stage="proving-ground")
    o, _ = env.reset(seed=0)
    ix = env.core.layout.index
    for _ in range(40):
        o, *_, info = env.step(np.array([0, 1, 0, 0], np.float32))
    labels = ("FL", "FR", "RL", "RR")
    slip = np.array([o[ix[f"slip_ratio_{w}"]] for w in labels])
    assert np.abs(slip).max() > 1e-4  # a real slip ratio (v0 reads exactly 0)
    assert info["gear"] >= 1 and info["engine_rpm"] > 0
    dt = env.config.vehicle.drivetrain
    assert o[ix["engine_rpm"]] == pytest.approx(info["engine_rpm"] / dt.rev_limit_rpm, rel=1e-6)
    assert o[ix["gear"]] == pytest.approx(info["gear"] / 6.0)
    sim = env.core.sim
    rim = sim.wheel_omega_radps[0] * np.array([w.radius_m for w in env.config.vehicle.wheels])
    got = np.array([o[ix[f"wheel_speed_{w}"]] for w in labels])
    np.testing.assert_allclose(got, rim / 50.0, rtol=1e-6)
    assert got.mean() == pytest.approx(info["speed_mps"] / 50.0, rel=0.2)
    v0 = RallyEnv(stage="proving-ground")
    o0, _ = v0.reset(seed=0)
    for _ in range(5):
        o0, *_ = v0.step(np.array([0, 1, 0, 0], np.float32))
    assert not o0[DEFAULT_LAYOUT.groups["slip_ratio"]].any()


def test_lookahead_grip_sees_surface_changes_coming():
    """On mixed-surface the grip at the lookahead points follows the stage's surface ahead."""
    from tracks import surfaces as S

    env = RallyEnv(version=1, stage="mixed-surface", vehicle="rally-car")
    o, _ = env.reset(seed=0)
    ix = env.core.layout.index
    st = env.core.bank.stage(0)
    starts = list(st.path.section_start_m)

    def section_grip(s):
        return float(S.GRIP[int(st.path.section_surface[bisect.bisect_right(starts, s) - 1])])

    agree = total = 0
    seen = set()
    first_under = o[ix["grip_FL"]]
    for _ in range(150):
        a = np.array([np.clip(3 * o[ix["look_y_20m"]], -1, 1), 0.6, 0, 0], np.float32)
        o, _, te, tr, info = env.step(a)
        s = info["progress_m"] + st.start_s_m
        for d in (20.0, 60.0, 100.0):
            g = float(o[ix[f"look_grip_{d:g}m"]])
            seen.add(round(g, 3))
            total += 1
            agree += abs(section_grip(s + d) - g) < 1e-6
        if te or tr:
            break
    assert agree >= 0.95 * total
    assert len(seen) >= 2  # a surface change ahead showed up
    assert first_under is not None


def test_randomization_keeps_extended_rows():
    kw = dict(version=1, vehicle="rally-car", randomize=True, termination=SHORT)
    env = RallyEnv(**kw)
    _, info = env.reset(seed=3)
    p = env.core.sim.params
    assert p.shape[1] == L.N_PARAMS_EXT and p[0, L.PX_DRIVETRAIN] == 1.0
    assert p[0, L.P_MASS] == info["randomization_mass_kg"]
    assert p[0, L.P_TIRE_MODEL] == L.TIRE_WHEEL_SPEED
    venv = RallyVectorEnv(2, **kw)
    vo, _ = venv.reset(seed=3)
    o, _ = env.reset(seed=3, options={"car_index": 1})
    assert o.tobytes() == vo[1].tobytes()
    for a in _actions(20):
        vo, *_ = venv.step(np.tile(a, (2, 1)))
        o, *_ = env.step(a)
        assert o.tobytes() == vo[1].tobytes()


def test_tire_wear_in_obs_info_and_hud():
    from rally_env.render.views import hud_from_info

    worn = {"wear_rate_per_mj": 50.0}
    env = RallyEnv(version=1, vehicle=worn, stage="proving-ground")
    env.reset(seed=0)
    ix = env.core.layout.index
    for t in range(80):  # spin on the spot: the tires slide and wear
        turn = 1.0 if t > 20 else 0.0
        o, *_, info = env.step(np.array([turn, 1.0, 0.0, turn], np.float32))
    wear = info["tire_wear"]
    assert wear.min() < 0.9 and (wear >= env.config.vehicle.wear_floor).all()
    got = o[ix["tire_wear_FL"] : ix["tire_wear_FL"] + 4]
    np.testing.assert_array_equal(got, wear.astype(np.float32))
    np.testing.assert_array_equal(wear, env.core.sim.tire_wear[0])
    assert hud_from_info(info).tire_wear == pytest.approx(wear.min())
