"""How the physics kernels are compiled.

Every jitted helper the substep calls is compiled without numba's reference-counting runtime
(``_nrt=False``): with it, each call that passes an array (the parameter or state rows) pays
atomic reference-count updates and spills every live register, which made the extended tire
model's per-wheel helpers cost more than their arithmetic. Only the entry points called from
Python keep the runtime (their wrappers unbox NumPy arrays). The environment's per-step kernels
(projection, observation) follow the same rule.
"""

from __future__ import annotations

import importlib

import pytest
from numba.core.registry import CPUDispatcher
from numba.core.targetconfig import TargetConfig

HOT_MODULES = (
    "physics.kernel",
    "physics.terrain",
    "physics.drivetrain",
    "physics.curves",
    "physics.mathx",
    "tracks.projection",
    "rally_env.kernels",
)
ENTRY_POINTS = {
    "physics.kernel": {
        "step_cars",
        "step_cars_parallel",
        "missing_tiles",
        "set_commands",
        "set_tank_commands",
        "place_cars",
    },
    "physics.terrain": {"_copy_tiles", "_heights_many", "_missing_tiles"},
    "rally_env.kernels": {
        "post_step",
        "post_step_parallel",
        "reset_cars",
        "lookahead_misses",
        "refresh_obs",
        "lines_within_reach",
        "collect_line_crossings",
    },
}


def _dispatchers(modname: str) -> dict[str, CPUDispatcher]:
    mod = importlib.import_module(modname)
    return {
        name: obj
        for name, obj in vars(mod).items()
        if isinstance(obj, CPUDispatcher) and obj.py_func.__module__ == modname
    }


@pytest.mark.parametrize("modname", HOT_MODULES)
def test_hot_helpers_compile_without_the_refcount_runtime(modname):
    found = _dispatchers(modname)
    if not found:
        pytest.skip("JIT disabled: nothing is compiled")
    entries = ENTRY_POINTS.get(modname, set())
    with_nrt = sorted(
        name
        for name, d in found.items()
        if name not in entries and d.targetoptions.get("_nrt", True)
    )
    assert not with_nrt, f"{modname}: compile {with_nrt} with @njit(cache=True, _nrt=False)"


@pytest.mark.parametrize("modname", sorted(ENTRY_POINTS))
def test_entry_points_keep_the_runtime(modname):
    found = _dispatchers(modname)
    if not found:
        pytest.skip("JIT disabled: nothing is compiled")
    for name in ENTRY_POINTS[modname]:
        assert found[name].targetoptions.get("_nrt", True), f"{modname}.{name}"


# --- numba's compile flags compared quickly (physics.jit.install_fast_flags) ---------------


def _numba_flag_methods():
    """numba's own TargetConfig methods, rebuilt from their source as physics.jit records it
    (the patched class no longer holds them)."""
    from numba.core import targetconfig

    from physics import jit

    ns = {"TargetConfig": targetconfig.TargetConfig}
    for name, src in jit._FLAG_METHODS.items():
        if "." not in name:
            exec(src, ns)  # the recorded source of numba's methods
    return ns["values"], ns["__hash__"], ns["__eq__"]


def _flag_objects():
    from numba.core import compiler, targetconfig

    class Other(targetconfig.TargetConfig):
        opt_a = targetconfig.Option(type=bool, default=False, doc="a")
        opt_b = targetconfig.Option(type=int, default=3, doc="b")

    plain = compiler.Flags()
    nrt_off = compiler.Flags()
    nrt_off.nrt = False
    nrt_on = compiler.Flags()
    nrt_on.nrt = True
    default_set = compiler.Flags()
    default_set.boundscheck = compiler.Flags().boundscheck  # set, to its default value
    copied = compiler.Flags(copy_from=nrt_off)
    other = Other()
    other_set = Other()
    other_set.opt_b = 7
    return [plain, nrt_off, nrt_on, default_set, copied, other, other_set]


def test_fast_flags_are_installed_on_this_numba():
    from numba.core import targetconfig

    from physics import jit

    assert jit.install_fast_flags() is True
    assert targetconfig.TargetConfig.values is jit._flag_values
    assert targetconfig.TargetConfig.__eq__ is jit._flag_eq
    assert targetconfig.TargetConfig.__hash__ is jit._flag_hash


def test_fast_flags_answer_as_numba_does():
    values, hash_, eq = _numba_flag_methods()
    objs = _flag_objects()
    for a in objs:
        assert a.values() == values(a)
        assert hash(a) == hash_(a)
        for b in objs:
            assert (a == b) == eq(a, b), (a, b)
    assert (objs[0] == 1) is False and eq(objs[0], 1) is NotImplemented


class _NumbaLike:
    """numba's TargetConfig methods written out as numba writes them (``__hash__``,
    ``__eq__``), and a ``values`` written otherwise."""

    def __hash__(self):
        return hash(tuple(sorted(self.values())))

    def __eq__(self, other):
        if isinstance(other, TargetConfig):
            return self.values() == other.values()
        else:
            return NotImplemented

    def values(self):
        return {k: getattr(self, k) for k in sorted(self.options)}


def test_fast_flags_leave_another_numba_alone(monkeypatch):
    """Where numba's methods do not all read as the ones recorded, nothing is replaced."""
    from physics import jit

    cls = TargetConfig
    for name in ("__hash__", "__eq__", "values"):
        monkeypatch.setattr(cls, name, _NumbaLike.__dict__[name])
    assert jit.install_fast_flags() is False
    for name in ("__hash__", "__eq__", "values"):
        assert getattr(cls, name) is _NumbaLike.__dict__[name]
    # the same methods with numba's values() are replaced
    monkeypatch.setattr(
        jit,
        "_FLAG_METHODS",
        {
            **jit._FLAG_METHODS,
            "values": (
                "def values(self):\n"
                "    return {k: getattr(self, k) for k in sorted(self.options)}\n"
            ),
        },
    )
    assert jit.install_fast_flags() is True
    assert cls.values is jit._flag_values
