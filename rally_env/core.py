"""The one batched code path under both envs: N cars, their stages, timers and rewards.

:class:`RallyCore` owns a :class:`physics.VehicleBatch`, a :class:`~rally_env.stages.StageSource`
(which stage each car gets, in the slots of its :class:`~rally_env.stages.StageBank`) and the
per-car env state, and implements reset and step for any subset of cars.
:class:`rally_env.RallyEnv` is a core with N = 1; :class:`rally_env.RallyVectorEnv` a core with
N = ``num_envs``. Nothing per car depends on N: each car has its own RNG stream (spawned from
the reset seed, ``SeedSequence(seed, spawn_key=(k,))`` = ``SeedSequence(seed).spawn(n)[k]``),
its own rows in every array, and the kernels touch only its rows.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any, Protocol

import numpy as np

from physics import VehicleBatch
from physics import layout as L
from physics.sim import digest
from rally_env import info as I
from rally_env import kernels as K
from rally_env import precompile
from rally_env import stages as S
from rally_env.config import RallyConfig, randomized_vehicle
from rally_env.errors import StateError
from rally_env.spaces import layout_for, obs_switches
from rally_env.statecheck import check_values

STATE_FORMAT = "rally_env.state"
STATE_VERSION = 1
#: A state's entries before its arrays, and its arrays (``sim_*``: the physics'; the rest the
#: core's own), then ``rng``, ``draws``, the stage source's entries and ``digest``.
STATE_HEADER = ("format", "version", "layout_version", "config_digest", "n_cars", "slots")
STATE_ARRAYS = (
    "sim_state",
    "sim_istate",
    "sim_params",
    "estate",
    "eistate",
    "etimes",
    "section_mu",
    "obs",
    "actions",
    "ever_reset",
)


def car_seed_sequence(seed: int, car: int) -> np.random.SeedSequence:
    """The RNG stream of car ``car`` for reset seed ``seed`` (independent of the batch size)."""
    return np.random.SeedSequence(int(seed), spawn_key=(int(car),))


class CoreHooks(Protocol):
    """What :meth:`RallyCore.add_hooks` calls (a replay recorder implements it)."""

    def before_reset(self, cars: np.ndarray, seeds: list[Any]) -> None:
        """Before ``cars`` reset; ``seeds[i]`` (a ``SeedSequence`` or ``None``) may be set."""

    def after_reset(self, cars: np.ndarray) -> None:
        """After ``cars`` started new episodes."""

    def after_set_state(self) -> None:
        """After :meth:`RallyCore.set_state` restored a state."""

    def after_set_cars(self, cars: np.ndarray) -> None:
        """After :meth:`RallyCore.put_car_states` replaced the state of ``cars``."""


class RallyCore:
    """N cars on the stages of one config.

    Args:
        config: the env settings.
        n_cars: number of cars N.
        parallel: step the physics with threads; ``None`` = when N >= 64.
    """

    def __init__(self, config: RallyConfig, n_cars: int, parallel: bool | None = None):
        par = int(n_cars) >= 64 if parallel is None else bool(parallel)
        # an empty numba cache: the step kernels compile on another core (until the first reset)
        self._precompiling = precompile.start(config, par)
        self._first_step = True  # the first step says the cache holds this kind of env
        self._fp = precompile.fingerprint(config)
        self.config = config
        self.n = int(n_cars)
        self.n_sub = config.substeps
        self.dt = config.dt_s
        # the stage's and the terrain's compiled code (an unreadable cache entry compiles again)
        #: where every car's stages come from (:class:`~rally_env.stages.StageSource`)
        self.stages = precompile.cache_safe(S.StageSource, config, self.n)
        self.bank = self.stages.bank
        self.version = config.version
        self.layout = layout_for(config)
        #: the info's layout, worked out by :func:`rally_env.info.build_info` on first use
        self.info_spec: Any = None
        self.n_wheels = self.layout.n_wheels
        self.lookahead = np.array(self.layout.lookahead_m, np.float64)
        self.sim = precompile.cache_safe(
            VehicleBatch, self.n, config.vehicle, self.bank.terrains, parallel=par
        )
        n = self.n
        self.estate = np.zeros((n, K.N_E), np.float64)
        self.eistate = np.zeros((n, K.N_EI), np.int64)
        self.etimes = np.full((n, self.bank.n_lines_max), np.nan)
        self.section_mu = np.ones((n, S.MAX_SECTION_IDS), np.float64)
        self.draws: list[dict[str, Any] | None] = [None] * n
        # the draws as arrays, for the info (rows of cars never randomized are NaN)
        self.rand_draws = np.full((n, len(I.RANDOMIZED_SCALARS)), np.nan)
        self.rand_section_mu = np.full((n, S.MAX_SECTION_IDS), np.nan)
        self.obs = np.zeros((n, self.layout.size), np.float32)
        self.rew = np.zeros(n)
        self.terms = np.zeros((n, K.N_TERMS))
        self.term = np.zeros(n, np.bool_)
        self.trunc = np.zeros(n, np.bool_)
        self.actions = np.zeros((n, 4))
        self.rngs: list[np.random.Generator | None] = [None] * n
        self.ever_reset = np.zeros(n, np.bool_)
        self._all = np.arange(n, dtype=np.int64)
        self.cfg = self._cfg_vector()
        # the env kernels' records that never move (see _kernel_args)
        self.work = K.Work(
            s=np.zeros(n),
            lat=np.zeros(n),
            herr=np.zeros(n),
            left=np.zeros(n),
            right=np.zeros(n),
            look=np.zeros((n, len(self.lookahead), 3)),
            pos=np.zeros((n, 2)),
            fwd=np.zeros((n, 2)),
            sp=np.zeros(n),
            vals=np.zeros((n, self.layout.size)),
        )
        sim = self.sim
        records = (
            K.Physics(state=sim.state, istate=sim.istate, params=sim.params),
            self.work,
            K.Setup(
                cfg=self.cfg,
                lookahead=self.lookahead,
                n_wheels=self.n_wheels,
                obs_low=self.layout.low.astype(np.float64),
                obs_high=self.layout.high.astype(np.float64),
            ),
            K.StepOut(self.obs, self.rew, self.terms, self.term, self.trunc),
        )
        self._fixed_records = tuple(tuple(r) for r in records)
        self._obs_switches = obs_switches(config)
        self.hooks: list[CoreHooks] = []
        self._near = np.zeros(n, np.bool_)  # scratch: cars near two timing lines this step

    @property
    def clock(self) -> int:
        """The env steps since the stage pool was seeded (:meth:`StageSource.tick`)."""
        return self.stages.clock

    # ------------------------------------------------------------------ configuration
    def _cfg_vector(self) -> np.ndarray:
        c = np.zeros(K.N_C)
        w = self.config.reward_weights
        c[K.C_W0 :] = [getattr(w, name) for name in K.REWARD_TERMS]  # N_C = C_W0 + N_TERMS
        t = self.config.termination
        hz = L.SUBSTEP_HZ
        c[K.C_OFF_MAX_M] = t.off_road_max_m
        c[K.C_OFF_MAX_SUB] = round(t.off_road_max_s * hz)
        c[K.C_STUCK_SUB] = round(t.stuck_time_s * hz)
        c[K.C_STUCK_M] = t.stuck_progress_m
        c[K.C_ROLL_UPZ] = t.roll_up_z
        c[K.C_ROLL_SUB] = round(t.roll_time_s * hz)
        c[K.C_WRONG_M] = t.wrong_way_m
        c[K.C_CUT_RATIO] = t.cut_ratio
        c[K.C_CUT_SLACK] = t.cut_slack_m
        c[K.C_LINE_TOL] = K.LINE_TOL_M
        c[K.C_WINDOW] = K.WINDOW_M
        c[K.C_LINE_MISS] = K.LINE_MISS_M
        return c

    def _widen_times(self) -> None:
        """Room in ``etimes`` for as many timing lines as the bank's stages have."""
        b = self.bank
        if b.n_lines_max > self.etimes.shape[1]:
            et = np.full((self.n, b.n_lines_max), np.nan)
            et[:, : self.etimes.shape[1]] = self.etimes
            self.etimes = et

    # ------------------------------------------------------------------ hooks
    def add_hooks(self, hooks: CoreHooks) -> None:
        """Let ``hooks`` see every reset of every car and every restored state (e.g. a
        replay recorder); :meth:`remove_hooks` detaches them."""
        if hooks not in self.hooks:
            self.hooks.append(hooks)

    def remove_hooks(self, hooks: CoreHooks) -> None:
        if hooks in self.hooks:
            self.hooks.remove(hooks)

    # ------------------------------------------------------------------ reset
    def reset(self, cars: np.ndarray, seeds: list[np.random.SeedSequence | None] | None) -> None:
        """Start new episodes for ``cars`` (int64 indices); ``seeds[i]`` reseeds car i's RNG.

        Every reset goes through here (explicit, and autoresets inside a vector step); the
        hooks' ``before_reset`` sees the cars and their seeds first (and may fill a ``None``
        seed), ``after_reset`` the started episodes.
        """
        if self.hooks:
            seeds = list(seeds) if seeds is not None else [None] * len(cars)
            for h in self.hooks:
                h.before_reset(cars, seeds)
        # numba loads the reset's compiled code at the first reset: a snapshot to undo it by
        undo = None if self.ever_reset.any() else self._undo_point()
        precompile.cache_safe(self._reset, cars, seeds, undo=undo)
        for h in self.hooks:
            h.after_reset(cars)

    def _undo_point(self) -> Callable[[], None]:
        """A function putting back the arrays, random generators and draws as they are now:
        a reset or first step that numba stopped at an unreadable cache entry part way
        (:func:`rally_env.precompile.cache_safe`) is undone before it runs again."""
        arrays = [
            (o, name, v, v.copy())
            for o in (self, self.sim)
            for name, v in vars(o).items()
            if isinstance(v, np.ndarray) and v.flags.writeable
        ]
        rngs = [(r, None if r is None else r.bit_generator.state) for r in self.rngs]
        draws = list(self.draws)
        clock = self.stages.clock

        def undo() -> None:
            for o, name, v, saved in arrays:
                setattr(o, name, v)
                v[...] = saved
            for r, st in rngs:
                if r is not None:
                    r.bit_generator.state = st
            self.rngs[:] = [r for r, _ in rngs]
            self.draws[:] = draws
            self.stages.clock = clock

        return undo

    def _reset(self, cars: np.ndarray, seeds: list[np.random.SeedSequence | None] | None) -> None:
        bank = self.bank
        for i, k in enumerate(cars):
            k = int(k)
            ss = seeds[i] if seeds is not None else None
            if ss is not None or self.rngs[k] is None:  # no seed ever: a fresh entropy stream
                self.rngs[k] = np.random.Generator(np.random.PCG64(ss))
        held = np.where(self.ever_reset[cars], self.eistate[cars, K.EI_SLOT], -1)
        slots = self.stages.assign(cars, self.rngs, held, self._draw_randomization)
        self._widen_times()
        rows = np.array(
            [bank.terrain_row(int(k), int(s)) for k, s in zip(cars, slots, strict=True)], np.int64
        )
        self.eistate[cars, K.EI_SLOT] = slots
        self.eistate[cars, K.EI_ROW] = rows
        if bank.sectioned:
            for k, s in zip(cars, slots, strict=True):
                bank.set_car_grip(int(k), int(s), self.section_mu[int(k)])
        poses = np.zeros((len(cars), 4))
        for i, s in enumerate(slots):
            poses[i, :3] = bank.stage(int(s)).start_pose
        self.sim.reset(poses, cars=cars, terrain_ids=rows)
        self.actions[cars] = 0.0
        self.ever_reset[cars] = True
        self._await_precompile(cars)
        if K.reset_cars(cars, self._kernel_args()):
            self._fill_lookahead(cars)
        self.rew[cars] = 0.0
        self.terms[cars] = 0.0
        self.term[cars] = False
        self.trunc[cars] = False

    def _await_precompile(self, cars: np.ndarray) -> None:
        """The first reset of a process whose numba cache lacked the step kernels: take them
        from the worker compiling them (:mod:`rally_env.precompile`) if they are this env's,
        after compiling a threaded env's post-step kernel here meanwhile."""
        if not self._precompiling:
            return
        self._precompiling = False
        threaded = self.sim.parallel
        if not precompile.running(threaded):
            return
        args = self._kernel_args()
        if not precompile.matches((cars, args), threaded):
            precompile.wait(threaded, useful=False)  # it compiles other types: compile here
            return
        if threaded:
            post = (self._all, self.n_sub, self.actions, args)
            precompile.compile_beside(K.post_step_parallel, post)
        precompile.wait(threaded)

    def _fill_lookahead(self, cars: np.ndarray) -> None:
        """Fill the terrain tiles under the cars' lookahead points that were not filled yet
        and write those cars' observations again (a Rally-v1 observation samples them)."""
        t = self.bank.terrains
        look = self.work.look
        out = np.empty((8 * len(cars) * look.shape[1] + 8, 3), np.int64)
        for _ in range(64):
            n = K.lookahead_misses(cars, self.sim.state, look, self.eistate, t.tiles, t.meta, out)
            if n == 0:
                return
            if n > out.shape[0]:
                out = np.empty((n, 3), np.int64)
                continue
            t.fill_requests(out[:n, 1:])
            again = np.unique(out[:n, 0])
            if not K.refresh_obs(again, self._kernel_args()):
                return
        raise RuntimeError("the terrain under the lookahead points could not be filled")

    def _kernel_args(self) -> tuple:
        """The ``args`` every env kernel entry point takes after its cars (and a step's
        substeps and actions): see "records" in :mod:`rally_env.kernels`."""
        t = self.bank.terrains
        phys, work, setup, out = self._fixed_records
        return (
            self._obs_switches,
            phys,
            (t.grip, t.surfaces, t.tiles, t.meta),
            self.bank.tables(),
            (self.estate, self.eistate, self.etimes),
            work,
            setup,
            out,
        )

    def _draw_randomization(self, k: int, slot: int, rng: np.random.Generator) -> None:
        r = self.config.randomize
        if r is None:
            self.draws[k] = None
            return
        base = self.config.vehicle
        ranges = (r.mass, r.power, r.tire_peak, r.load_sensitivity)
        u = rng.random(len(ranges))
        f = [lo + (hi - lo) * x for (lo, hi), x in zip(ranges, u, strict=True)]
        p = randomized_vehicle(base, *f)
        self.sim.set_params(p, cars=np.array([k], np.int64))
        st = self.bank.stage(slot)
        n_sec = min(len(st.path.section_start_m), S.MAX_SECTION_IDS)
        mu = np.ones(S.MAX_SECTION_IDS)
        if self.bank.sectioned:
            lo, hi = r.surface_mu
            mu[:n_sec] = lo + (hi - lo) * rng.random(n_sec)
        self.section_mu[k] = mu
        drawn = {name: float(getattr(p, name)) for name in I.RANDOMIZED_SCALARS}
        self.draws[k] = {**drawn, "section_mu_scale": mu[:n_sec].copy()}
        self._draw_rows(k)

    def _draw_rows(self, k: int) -> None:
        """Copy car ``k``'s draws into the arrays the info reads."""
        d = self.draws[k]
        self.rand_draws[k] = np.nan
        self.rand_section_mu[k] = np.nan
        if not isinstance(d, dict):
            return
        try:
            row = [float(d.get(f, np.nan)) for f in I.RANDOMIZED_SCALARS]
            mu = np.asarray(d.get("section_mu_scale", ()), np.float64).reshape(-1)
        except (TypeError, ValueError):
            return
        self.rand_draws[k] = row
        self.rand_section_mu[k, : min(len(mu), S.MAX_SECTION_IDS)] = mu[: S.MAX_SECTION_IDS]

    # ------------------------------------------------------------------ step
    def step(self, actions: np.ndarray, cars: np.ndarray | None = None) -> None:
        """Step cars (all, or ``cars``) with validated, clipped ``actions`` (N, 4) float64
        (:mod:`rally_env.actions`; the rows of ``cars`` are used).

        The commands reach the physics through :meth:`physics.VehicleBatch.set_commands`;
        ``actions`` is kept as the cars' last actions (:attr:`actions`, the reward's).

        Raises:
            physics.ParameterError: a row of a stepped car is not finite (the env's validation
                raises ``InvalidAction`` first); nothing changes.
        """
        if self._first_step:
            self._first_step = False
            precompile.cache_safe(self.step, actions, cars, undo=self._undo_point())
            precompile.mark_warm("threaded" if self.sim.parallel else "serial", self._fp)
            return
        rows = actions if cars is None else actions[cars]
        self.sim.set_commands(rows, cars, strict=True)
        self.actions[... if cars is None else cars] = rows
        idx = self._all if cars is None else cars
        self._step_physics(idx)
        post = K.post_step_parallel if self.sim.parallel else K.post_step
        if post(idx, self.n_sub, self.actions, self._kernel_args()):
            self._fill_lookahead(idx)

    def _step_physics(self, idx: np.ndarray) -> None:
        """One control step of physics. Cars that may cross two timing lines in it go
        substep by substep, the next gate armed after each crossing, so every line is timed
        inside its substep (bit-identical physics: a step of n substeps is n steps of one)."""
        b, sim = self.bank, self.sim
        near = self._near if len(idx) == self.n else self._near[: len(idx)]
        if not K.lines_within_reach(
            idx, sim.state, self.estate, self.eistate, b.table, b.line_race, self.dt, near
        ):
            sim.advance(self.n_sub, idx, L.DT)
            return
        multi = idx[near]
        rest = idx[~near]
        if rest.size:
            sim.advance(self.n_sub, rest, L.DT)
        for _ in range(self.n_sub):
            sim.advance(1, multi, L.DT)
            K.collect_line_crossings(
                multi, sim.state, sim.istate, self.eistate, self.etimes, b.table, b.line_gate
            )

    # ------------------------------------------------------------------ info
    def lines_of(self, k: int) -> int:
        return int(self.bank.table[self.eistate[k, K.EI_SLOT], S.SL_N_LINES])

    def info(self, cars: np.ndarray | None = None) -> dict[str, np.ndarray]:
        """The info of all cars (or ``cars``) as arrays over cars
        (:func:`rally_env.info.build_info`, the one place an info dict is built)."""
        return I.build_info(self, cars)

    def info_of(self, k: int) -> dict[str, np.ndarray]:
        """Car ``k``'s info as the single env returns it (0-d and 1-d arrays)."""
        return I.build_info(self, int(k))

    def stage_name(self, k: int) -> str:
        """Name of the stage car ``k`` is on."""
        return str(self.bank.slot_names[self.eistate[k, K.EI_SLOT]])

    def end_reason(self, k: int) -> str:
        """Why car ``k``'s episode ended (``""`` while running)."""
        return K.END_REASONS[int(self.eistate[k, K.EI_END])]

    def checkpoint_times(self, k: int) -> tuple[float, ...]:
        """Car ``k``'s crossing time of every timed line before the finish (s, NaN = not yet),
        as many as its stage has."""
        return tuple(float(t) for t in self.etimes[k, : self.lines_of(k) - 1])

    # ------------------------------------------------------------------ state
    def _array(self, key: str) -> np.ndarray:
        """The array a state's ``key`` (one of :data:`STATE_ARRAYS`) holds."""
        return getattr(self.sim, key[4:]) if key.startswith("sim_") else getattr(self, key)

    def _state(self, rows: Any, slots: Any, rngs: list, draws: list, **arrays: Any) -> dict:
        """A state of the cars ``rows`` (``arrays`` replace some of their arrays), digested."""
        st: dict[str, Any] = {
            "format": STATE_FORMAT,
            "version": STATE_VERSION,
            "layout_version": L.LAYOUT_VERSION,
            "config_digest": self.config.digest(),
            "n_cars": len(rngs),
            "slots": slots,
            **{key: self._array(key)[rows].copy() for key in STATE_ARRAYS},
            **arrays,
            "rng": [None if r is None else r.bit_generator.state for r in rngs],
            "draws": [None if d is None else dict(d) for d in draws],
        }
        st.update(self.stages.state())
        st["digest"] = state_digest(st)
        return st

    def get_state(self) -> dict[str, Any]:
        """A plain, picklable snapshot of everything that shapes the cars' futures."""
        return self._state(slice(None), self.stages.records(), self.rngs, self.draws)

    def check_state(self, st: Any) -> list[Any]:
        """Validate a state for this core; returns the resolved slot stages. Changes nothing."""
        if not isinstance(st, dict):
            raise StateError(f"a state must be a dict from get_state(), got {type(st).__name__}")
        need = (*STATE_HEADER, *STATE_ARRAYS, "rng", "draws", "digest", *self.stages.state_keys)
        missing = [k for k in need if k not in st]
        if missing:
            raise StateError(f"state is missing {', '.join(missing)}")
        if st["format"] != STATE_FORMAT or st["version"] != STATE_VERSION:
            raise StateError(
                f"state format {st['format']!r} v{st['version']!r} is not "
                f"{STATE_FORMAT!r} v{STATE_VERSION}"
            )
        if st["layout_version"] != L.LAYOUT_VERSION:
            raise StateError(f"state physics layout v{st['layout_version']} != v{L.LAYOUT_VERSION}")
        if st["config_digest"] != self.config.digest():
            raise StateError(
                "state comes from an env with different settings "
                "(stage, vehicle, rate, rewards, termination or randomization)"
            )
        if st["n_cars"] != self.n:
            raise StateError(f"state has {st['n_cars']} cars, this env has {self.n}")
        try:
            digest = state_digest(st)
        except Exception as e:  # malformed content
            raise StateError(f"state content is malformed: {e}") from None
        if digest != st["digest"]:
            raise StateError("state is corrupt: its contents do not match its digest")
        for key in STATE_ARRAYS:
            if key == "etimes":  # as wide as the state's stages need (checked below)
                continue
            a, want = st[key], self._array(key)
            if not isinstance(a, np.ndarray) or a.shape != want.shape or a.dtype != want.dtype:
                raise StateError(
                    f"state[{key!r}] must be a {want.dtype.type.__name__} array of shape "
                    f"{want.shape}"
                )
        et = st["etimes"]
        if not isinstance(et, np.ndarray) or et.ndim != 2 or et.shape[0] != self.n:
            raise StateError("state['etimes'] has the wrong shape")
        if len(st["slots"]) != len(self.bank.slots) or len(st["rng"]) != self.n:
            raise StateError("state has the wrong number of stage slots or RNG streams")
        stages = self.stages.stages_of(st["slots"])
        slots = st["eistate"][:, K.EI_SLOT]
        if slots.min() < 0 or slots.max() >= len(stages):
            raise StateError("state refers to a stage slot this env does not have")
        for k in np.flatnonzero(st["ever_reset"]):
            if stages[int(slots[k])] is None:
                raise StateError(f"state car {k} is on a stage slot with no stage")
        if et.shape[1] < max(1, max((len(S.timing_lines(s)) for s in stages if s), default=1)):
            raise StateError("state['etimes'] is too narrow for its stages")
        for r in st["rng"]:
            try:
                rng_from_state(r)
            except Exception as e:
                raise StateError(f"state RNG stream is malformed: {e}") from None
        problem = self.stages.state_problem(st)
        if problem:
            raise StateError(problem)
        check_values(self, st, stages)  # every value in range: nothing is copied before
        return stages

    def set_state(self, st: dict[str, Any]) -> None:
        """Restore a state from :meth:`get_state`; a bad state raises and changes nothing.

        Everything is validated first (:meth:`check_state`: structure, digest, stages, and
        every value the layout allows, :func:`rally_env.statecheck.check_values`), then copied.
        """
        stages = self.check_state(st)
        b = self.bank
        self.stages.adopt(stages, st["eistate"][np.flatnonzero(st["ever_reset"]), K.EI_SLOT])
        for key in STATE_ARRAYS:
            if key == "etimes" and st[key].shape != self.etimes.shape:
                self.etimes = st[key].copy()
            else:
                self._array(key)[...] = st[key]
        self._widen_times()
        if b.sectioned:
            for k in np.flatnonzero(self.ever_reset):
                b.set_car_grip(int(k), int(self.eistate[k, K.EI_SLOT]), self.section_mu[k])
        self.rngs[:] = [rng_from_state(r) for r in st["rng"]]
        self.draws = [None if d is None else dict(d) for d in st["draws"]]
        for k in range(self.n):
            self._draw_rows(k)
        self.stages.restore(st)
        for h in self.hooks:
            h.after_set_state()

    # ------------------------------------------------------------------ one car's state
    def car_state(self, k: int, single: RallyCore) -> dict[str, Any]:
        """Car ``k``'s state, as ``single`` (a one-car core of the same settings: a
        :class:`rally_env.RallyEnv`'s) would snapshot it were the car its own.

        The result passes ``single.check_state`` and continues, in a one-car core, exactly as
        car ``k`` continues here."""
        k = int(k)
        if not self.ever_reset[k]:
            raise StateError(f"car {k} has never been reset: it has no state to read")
        slot = int(self.eistate[k, K.EI_SLOT])
        slots, one_slot = self.stages.car_records(slot, single.stages)
        row = single.bank.terrain_row(0, one_slot)
        ist = self.sim.istate[k : k + 1].copy()
        ist[0, L.I_TERRAIN] = row
        ei = self.eistate[k : k + 1].copy()
        ei[0, K.EI_SLOT] = one_slot
        ei[0, K.EI_ROW] = row
        one = slice(k, k + 1)
        return self._state(one, slots, self.rngs[one], self.draws[one], sim_istate=ist, eistate=ei)

    def put_car_states(self, cars: np.ndarray, st: dict[str, Any], stages: list[Any]) -> None:
        """Make every car in ``cars`` a copy of the one car of ``st``, a one-car state that
        :meth:`check_state` of a one-car core with these settings accepted (``stages``: what it
        returned). The cars' RNG streams are copies of the state's; nothing else changes (the
        other cars, the stage pool's seed and count)."""
        if not st["ever_reset"][0]:
            raise StateError("the state's car has never been reset: there is nothing to copy")
        b = self.bank
        stage = stages[int(st["eistate"][0, K.EI_SLOT])]
        held = np.where(self.ever_reset[cars], self.eistate[cars, K.EI_SLOT], -1)
        slot = self.stages.place(held, stage, int(st["eistate"][0, K.EI_SLOT]))
        self._widen_times()
        rows = np.array([b.terrain_row(int(k), slot) for k in cars], np.int64)
        for key in STATE_ARRAYS:
            if key != "etimes":
                self._array(key)[cars] = st[key][0]
        self.sim.istate[cars, L.I_TERRAIN] = rows
        self.eistate[cars, K.EI_SLOT] = slot
        self.eistate[cars, K.EI_ROW] = rows
        n_lines = self.lines_of(int(cars[0]))
        self.etimes[cars] = np.nan
        self.etimes[cars, :n_lines] = st["etimes"][0, :n_lines]
        self.rew[cars] = 0.0
        self.terms[cars] = 0.0
        end = int(st["eistate"][0, K.EI_END])
        self.trunc[cars] = end == K.END_TIME_LIMIT
        self.term[cars] = end != 0 and end != K.END_TIME_LIMIT
        r, d = st["rng"][0], st["draws"][0]
        for k in cars:
            k = int(k)
            if b.sectioned:
                b.set_car_grip(k, slot, self.section_mu[k])
            self.rngs[k] = rng_from_state(r)
            self.draws[k] = None if d is None else dict(d)
            self._draw_rows(k)
        for h in self.hooks:
            h.after_set_cars(cars)


def rng_from_state(state: Any) -> np.random.Generator | None:
    """The generator a PCG64 state (``bit_generator.state``, or None) describes.

    Raises:
        Exception: of numpy's, on a malformed PCG64 state.
    """
    if state is None:
        return None
    g = np.random.PCG64()
    g.state = state
    return np.random.Generator(g)


def with_extra(st: dict[str, Any], **extra: Any) -> dict[str, Any]:
    """``st`` with an env's own entries as ``st["extra"]`` (``kind``: the env class), digested
    again."""
    st["extra"] = extra
    st["digest"] = state_digest(st)
    return st


def extra_of(state: Any, kind: str, refusal: str = "") -> dict[str, Any]:
    """The ``extra`` entries of a state an env of class ``kind`` made.

    Raises:
        StateError: ``refusal`` (or "not a KIND state ...") when it is not such a state.
    """
    extra = state.get("extra") if isinstance(state, dict) else None
    if not isinstance(extra, dict) or extra.get("kind") != kind:
        raise StateError(refusal or f"not a {kind} state (missing or wrong 'extra')")
    return extra


def _chunks(obj: Any) -> Iterator[bytes]:
    """The bytes :func:`state_digest` hashes of a state entry (arrays with dtype and shape,
    dict keys sorted, floats as float64)."""
    if isinstance(obj, np.ndarray):
        yield repr((obj.dtype.str, obj.shape)).encode()
        yield np.ascontiguousarray(obj).tobytes()
    elif isinstance(obj, dict):
        yield b"{"
        for key in sorted(obj, key=str):
            yield repr(key).encode()
            yield from _chunks(obj[key])
        yield b"}"
    elif isinstance(obj, (list, tuple)):
        yield b"["
        for x in obj:
            yield from _chunks(x)
        yield b"]"
    elif isinstance(obj, float):
        yield np.float64(obj).tobytes()
    else:
        yield repr(obj).encode()


def state_digest(st: dict[str, Any]) -> str:
    """:func:`physics.sim.digest` over every entry of a state except ``digest`` itself."""
    return digest(_chunks({k: v for k, v in st.items() if k != "digest"}))
