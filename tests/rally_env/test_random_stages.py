"""stage="random" at training speed: a car's reset touches only its own slot, stages are shared
between cars through slots, levels, the prefetch worker; none of it changes an episode."""

from __future__ import annotations

import itertools
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from physics.terrain import TM_TABLE, TM_TNX, TM_TNY
from rally_env import ConfigError, RallyEnv, RallyVectorEnv
from rally_env import kernels as K
from rally_env import stages as S
from rally_env.config import DEFAULT_POOL_STEPS, DEFAULT_RANDOM_LAPS, MAX_POOL
from tests.rally_env.conftest import random_actions
from tracks.bake import StageTerrain

SHORT = {"length_m": 400.0}


def _hard_actions(steps, n, seed):
    acts = random_actions(steps, seed=seed, n_cars=n)
    acts[:, :, 1] = 1.0
    acts[:, :, 2:] = 0.0
    acts[:, :, 0] = np.clip(acts[:, :, 0] + 0.7, -1.0, 1.0)  # leaves the road: many resets
    return acts


@pytest.mark.parametrize("randomize", [None, True])
def test_car_k_does_not_depend_on_num_envs_on_random_stages(randomize):
    steps = 240
    acts = _hard_actions(steps, 5, seed=4)
    runs = {}
    for n in (1, 2, 5):
        venv = RallyVectorEnv(n, stage="random", random_stage=SHORT, randomize=randomize)
        obs, info = venv.reset(seed=8)
        names = [int(info["stage_seed"][0])]
        seq = [obs[0].copy()]
        ends = 0
        for a in acts[:, :n]:
            obs, _r, te, tr, info = venv.step(a)
            seq.append(obs[0].copy())
            names.append(int(info["stage_seed"][0]))
            ends += int(te[0] or tr[0])
        runs[n] = (np.stack(seq), names, ends)
    assert runs[1][2] >= 2, "car 0 should reset onto new stages several times"
    for n in (2, 5):
        assert np.array_equal(runs[1][0], runs[n][0])
        assert runs[1][1] == runs[n][1]


def test_a_reset_touches_only_that_cars_slot():
    venv = RallyVectorEnv(4, stage="random", random_stage=SHORT)
    venv.reset(seed=1)
    for _ in range(30):
        venv.step(np.tile([0.0, 1.0, 0.0, 0.0], (4, 1)).astype(np.float32))
    core = venv.core
    bank = core.bank
    ts = bank.terrains
    slots = core.eistate[:, K.EI_SLOT].copy()
    before = {
        int(s): (bank.table[s].copy(), bank.slots[s], ts.tiles[_table(ts, s)].copy())
        for s in slots[1:]
    }
    version = bank.version
    core.reset(np.array([0], np.int64), [None])
    assert bank.version - version <= 1  # at most car 0's slot got a new stage
    for s, (row, st, tiles) in before.items():
        assert np.array_equal(bank.table[s], row) and bank.slots[s] is st
        assert np.array_equal(ts.tiles[_table(ts, s)], tiles)  # its terrain tiles are kept


def _table(ts, row):
    off = int(ts.meta[row, TM_TABLE])
    return slice(off, off + int(ts.meta[row, TM_TNX] * ts.meta[row, TM_TNY]))


def test_cars_on_the_same_stage_share_a_slot():
    venv = RallyVectorEnv(6, stage="random", random_stage={**SHORT, "num_levels": 2})
    _, info = venv.reset(seed=5)
    slots = venv.core.eistate[:, K.EI_SLOT]
    names = info["stage_seed"]
    assert set(names.tolist()) <= {0, 1}
    for name in set(names):
        assert len({int(s) for s, nm in zip(slots, names, strict=True) if nm == name}) == 1
    assert venv.core.bank.refs.sum() == 6


def test_a_stage_source_alone_gives_the_cars_the_envs_stages():
    # the core asks the source for every car's stage and keeps no scheduling of its own:
    # a source fed the same streams hands out the same stages, reset after reset
    from rally_env.core import car_seed_sequence

    venv = RallyVectorEnv(3, stage="random", random_stage=SHORT)
    source = S.StageSource(venv.core.config, 3)
    rngs = [np.random.Generator(np.random.PCG64(car_seed_sequence(9, k))) for k in range(3)]
    cars = np.arange(3, dtype=np.int64)
    held = np.full(3, -1, np.int64)
    seen = []
    for seed in (9, None, None):
        venv.reset(seed=seed)
        held = source.assign(cars, rngs, held, lambda k, slot, rng: seen.append((k, slot)))
        env_names = [venv.core.stage_name(k) for k in range(3)]
        assert [source.bank.slot_names[s] for s in held] == env_names
    assert [k for k, _ in seen] == [0, 1, 2] * 3
    assert len({source.bank.slot_names[s] for s in held}) == 3
    assert source.bank.refs.sum() == 3  # each car's earlier stage was released


def test_levels_are_fixed_stages():
    lo, hi = 0.3, 0.7
    kw = {
        "stage": "random",
        "random_stage": {**SHORT, "num_levels": 3, "start_level": 1000, "difficulty": (lo, hi)},
    }
    env = RallyEnv(**kw)
    seen = {}
    for s in range(12):
        _, info = env.reset(seed=s)
        st = env.core.bank.stage(int(env.core.eistate[0, K.EI_SLOT]))
        seen.setdefault(int(info["stage_seed"]), set()).add(st.digest())
    assert set(seen) <= {1000, 1001, 1002} and len(seen) >= 2
    assert all(len(v) == 1 for v in seen.values())  # a level is always the same stage
    for seed in (1000, 1001, 1002):
        d = S.level_difficulty(seed, lo, hi)
        assert lo <= d <= hi and d == S.level_difficulty(seed, lo, hi)


def test_a_level_a_slot_holds_is_not_asked_of_the_prefetch_worker(monkeypatch):
    # every level held by a slot after the first resets: the worker would only make it again
    asked = []
    monkeypatch.setattr(S, "prefetch_stage", lambda *a, **k: asked.append(a))
    env = RallyVectorEnv(4, stage="random", random_stage={**SHORT, "num_levels": 1})
    env.reset(seed=0)
    assert asked == []
    fresh = RallyEnv(stage="random", random_stage=SHORT)
    fresh.reset(seed=0)
    assert len(asked) == 1  # a fresh stage per episode is asked for ahead


def test_an_env_with_more_cars_than_the_worker_keeps_answers_for_asks_none_ahead(monkeypatch):
    # a car takes its stage at its next reset: with more cars than answers kept, the answer
    # has been dropped by then (a 1,024-car env took one answer in a whole benchmark run);
    # such an env asks the worker only for half the stages of the cars resetting now
    from tracks.prefetch import PREFETCHER

    asked = []
    monkeypatch.setattr(S, "prefetch_stage", lambda *a, **k: asked.append(a))
    monkeypatch.setattr(PREFETCHER, "max_pending", 2)  # keeps 4 answers
    env = RallyVectorEnv(5, stage="random", random_stage=SHORT)
    env.reset(seed=0)
    # no car asks for its next stage; cars 3 and 4's stages of this reset are asked for (the
    # worker makes them while the env makes those of cars 0-2)
    seeds = env.core.info(np.array([3, 4], np.int64))["stage_seed"]
    assert [a[0] for a in asked] == seeds.tolist()
    env.reset(seed=1)
    assert len(asked) == 4  # the same split at every reset of several cars
    assert not any(a[4] for a in asked)  # the env waits for these: no start tiles baked
    env = RallyVectorEnv(4, stage="random", random_stage=SHORT)
    env.reset(seed=0)
    assert len(asked) == 4 + 4  # each car asks for its next stage
    assert all(a[4] for a in asked[4:])  # well ahead: the worker bakes its start tiles too


@pytest.mark.parametrize(
    ("rs", "needle"),
    [
        ({"num_levels": 0}, "num_levels"),
        ({"num_levels": 2.5}, "integer"),
        ({"start_level": 3}, "needs num_levels"),
        ({"num_levels": 10, "start_level": 2**31 - 5}, "seed range"),
        ({"length_m": 20000.0}, "length_m"),
        ({"levels": 3}, "unknown setting"),
        # stage pools
        ({"pool": 0}, "random_stage.pool"),
        ({"pool": 2.0}, "integer"),
        ({"pool": MAX_POOL + 1}, "random_stage.pool"),
        ({"pool": 4, "pool_steps": 0}, "pool_steps"),
        ({"pool_steps": 50}, "needs pool"),
        ({"pool": 4, "num_levels": 8}, "exclude each other"),
        # loops
        ({"loops": 1.5}, "random_stage.loops"),
        ({"loops": "half"}, "random_stage.loops"),
        ({"laps": 3}, "needs loops"),
        ({"loops": 0.5, "laps": 0}, "random_stage.laps"),
        ({"loops": 0.5, "laps": 11}, "random_stage.laps"),
        ({"loops": 0.5, "length_m": 300.0}, "at least 400"),
        ({"loops": 0.5, "num_levels": 4}, "level set"),
    ],
)
def test_bad_random_stage_settings(rs, needle):
    with pytest.raises(ConfigError, match=needle):
        RallyEnv(stage="random", random_stage=rs)


@pytest.mark.parametrize(
    ("rs", "key", "default"),
    [
        ({"pool": 3}, "pool_steps", DEFAULT_POOL_STEPS),
        ({"loops": 0.3}, "laps", DEFAULT_RANDOM_LAPS),
    ],
)
def test_a_settings_companion_has_a_default(rs, key, default):
    env = RallyEnv(stage="random", random_stage=rs)
    assert env.config.random_stage[key] == default


_ROLLOUT = textwrap.dedent(
    """
    import hashlib, numpy as np
    from rally_env import RallyVectorEnv
    from tests.rally_env.test_random_stages import _hard_actions
    from tracks.prefetch import PREFETCHER
    venv = RallyVectorEnv(3, stage="random", random_stage={"length_m": 400.0})
    obs, _ = venv.reset(seed=2)
    h = hashlib.blake2b(obs.tobytes(), digest_size=16)
    for a in _hard_actions(200, 3, seed=6):
        obs, r, te, tr, info = venv.step(a)
        h.update(obs.tobytes()); h.update(r.tobytes())
    print(h.hexdigest(), PREFETCHER.hits)
    """
)


def test_the_prefetch_worker_changes_no_episode():
    root = Path(__file__).resolve().parents[2]
    out = {}
    for flag in ("0", "1"):
        env = dict(os.environ, RALLY_PREFETCH=flag)
        env["PYTHONPATH"] = str(root) + os.pathsep + env.get("PYTHONPATH", "")
        res = subprocess.run(
            [sys.executable, "-c", _ROLLOUT],
            capture_output=True,
            text=True,
            timeout=600,
            check=True,
            cwd=root,
            env=env,
        )
        digest, hits = res.stdout.split()
        out[flag] = (digest, int(hits))
    assert out["0"][0] == out["1"][0]
    assert out["0"][1] == 0  # off: every stage was made in place


def test_prefetcher_hands_over_the_stage_generate_makes():
    import tracks
    from tracks.prefetch import Prefetcher

    p = Prefetcher()
    if p.disabled:
        pytest.skip("RALLY_PREFETCH=0")
    try:
        p.request(77, 500.0, 0.4, True)
        made = None
        for _ in range(400):  # the worker starts and loads its code first
            made = p.take(77, 500.0, 0.4, True)
            if made is not None:
                break
            p.request(77, 500.0, 0.4, True)
        assert made is not None, "the worker answered nothing"
        st, src = made
        local = tracks.generate(77, length_m=500.0, difficulty=0.4)
        assert st.digest() == local.digest() and src.stage is st and src.sectioned
        want = StageTerrain(local, sectioned=True).to_terrain().digest()
        assert src.to_terrain().digest() == want
        assert p.take(1, 500.0, 0.4) is None  # never asked for
        assert len(src._baked[0]) == len(src.start_tiles()) > 0  # start tiles came baked
        p.request(78, 500.0, 0.4, False, prebake=False)
        for _ in range(400):
            made = p.take(78, 500.0, 0.4, False)
            if made is not None:
                break
        assert made is not None and len(made[1]._baked[0]) == 0
    finally:
        p.shutdown()


def test_prefetcher_reads_answers_that_arrive_in_pieces():
    """The answer stream is read without blocking, so an answer may arrive over several
    reads, and several answers in one: each is loaded once it is whole."""
    import pickle
    import struct

    from tracks.prefetch import Prefetcher

    p = Prefetcher()
    r, w = os.pipe()
    os.set_blocking(r, False)
    p._proc, p._fd_out = object(), r  # stands in for a worker whose answers go to the pipe
    try:
        answers = [((k, 500.0, 0.5, False), ("stage", np.arange(k + 3.0))) for k in (1, 2, 3)]
        stream = b"".join(
            struct.pack("<I", len(b)) + b
            for b in (pickle.dumps(a, protocol=pickle.HIGHEST_PROTOCOL) for a in answers)
        )
        p._pending.update(key for key, _ in answers)
        cut = [0, 2, 3, 40, len(stream) - 5, len(stream)]  # inside a prefix, a body, across
        for a, b in itertools.pairwise(cut):
            os.write(w, stream[a:b])
            p._drain()
        assert not p._pending and list(p._ready) == [key for key, _ in answers]
        for key, (tag, arr) in answers:
            got_tag, got = p._ready[key]
            assert got_tag == tag
            np.testing.assert_array_equal(got, arr)
    finally:
        p._proc = None
        os.close(r)
        os.close(w)


def test_every_slots_table_row_finds_its_own_stage_after_the_bank_repacks():
    # A slot whose new stage outgrows its region moves to the end of the arrays; when they
    # are full, every region is repacked. Each slot's row of the table must then point at
    # its own rows again: it once kept the old offsets, so cars on the other slots read
    # another stage's (or zeroed) rows, and a vector env's step raised ZeroDivisionError.
    import tracks

    venv = RallyVectorEnv(3, stage="random", random_stage=SHORT, road_ahead=True)
    bank = venv.core.bank
    tables = S.StageTables(*bank.tables())
    moved = False
    for j, length in enumerate([300.0, 300.0, 300.0, 900.0, 300.0, 1500.0, 2000.0, 600.0, 2400.0]):
        slot = j % 3
        before = bank._pts.off.copy()
        bank.set_slot(slot, tracks.generate(50 + j, length_m=length))
        others = np.arange(3) != slot
        moved |= bool((bank._pts.off[others] != before[others]).any())
        tables = S.StageTables(*bank.tables())
        for s, st in enumerate(bank.slots):
            if st is None:
                continue
            row = bank.table[s]
            p = st.path
            po, n = int(row[S.SL_PT_OFF]), p.n_samples
            assert int(row[S.SL_SEG_OFF]) == po and int(row[S.SL_N_SEG]) == n - 1
            assert np.array_equal(tables.tx[po : po + n], p.tx), (j, s)
            assert np.array_equal(tables.z[po : po + n], S.ahead_tables(p)[0]), (j, s)
            so, ns = int(row[S.SL_SEC_OFF]), int(row[S.SL_N_SEC])
            assert np.array_equal(tables.sec_start[so : so + ns], p.section_start_m), (j, s)
            lo, nl = int(row[S.SL_LINE_OFF]), int(row[S.SL_N_LINES])
            race = [r for r, _ in S.timing_lines(st)]
            assert np.array_equal(tables.line_race[lo : lo + nl], race), (j, s)
    assert moved, "the sequence should make the bank repack and move another slot's region"
