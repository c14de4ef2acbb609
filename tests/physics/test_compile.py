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
