"""``rally warmup``: compile the simulator into numba's cache ahead of a first env, or clear
the project's entries of that cache; and the recording of the argument types the precompile
worker compiles for (``python -m rally_env.warmup record``). A module of its own because it
builds envs, and the env core imports :mod:`rally_env.precompile`."""

from __future__ import annotations

import importlib
import json
import sys
import time
from pathlib import Path
from typing import Any

from rally_env.precompile import (
    KERNELS,
    SIGNATURES,
    cache_dir,
    describe,
    fingerprint,
    project_entries,
    stamp_folder,
)


def clear_cache() -> int:
    """Delete numba's cache entries of the project's compiled functions and the stamps;
    returns how many files."""
    import rally_env.vector  # noqa: F401  (imports every module the env compiles)

    files = project_entries()
    for p in files:
        p.unlink(missing_ok=True)
    for p in stamp_folder().glob("rally-warm-*"):
        p.unlink(missing_ok=True)
    return len(files)


def _first_steps() -> tuple[Any, Any, float, float]:
    """A default ``Rally-v0`` env's and a 4-car threaded vector env's first reset and step
    (what a first start compiles). Returns both envs, still open, and the seconds each took."""
    import gymnasium as gym
    import numpy as np

    import rally_env  # noqa: F401  (registers the env ids)
    from rally_env.vector import RallyVectorEnv

    t0 = time.perf_counter()
    env = gym.make("Rally-v0")
    env.reset(seed=0)
    env.step(env.action_space.sample())
    t1 = time.perf_counter()
    vec = RallyVectorEnv(num_envs=4, parallel=True)
    vec.reset(seed=0)
    vec.step(np.stack([vec.single_action_space.sample() for _ in range(4)]))
    return env, vec, t1 - t0, time.perf_counter() - t1


def warmup(clear: bool = False) -> dict:
    """Compile what a ``Rally-v0`` env and a threaded vector env run into numba's cache (so a
    first start loads instead of compiling); ``clear=True`` deletes the project's entries
    first. Returns what it did and how long it took."""
    out: dict = {"cache": cache_dir()}
    if clear:
        out["deleted_files"] = clear_cache()
    env, vec, env_s, vec_s = _first_steps()
    env.close()
    vec.close()
    out["env_s"] = round(env_s, 2)
    out["vector_env_s"] = round(vec_s, 2)
    return out


def record(path: Path = SIGNATURES) -> None:
    """Write the argument types of the kernels of a default ``Rally-v0`` env's first reset
    and step, and of a 4-car threaded vector env's: ``python -m rally_env.warmup record``
    (after a change to a reset or step kernel's arguments; a test says when)."""
    env, vec, _, _ = _first_steps()
    sigs: dict[str, list] = {}
    for kind, kernels in KERNELS.items():
        sigs[kind] = []
        for mod, name in kernels:
            disp = getattr(importlib.import_module(mod), name)
            if not disp.signatures:
                raise RuntimeError(f"{mod}.{name} was not compiled by the {kind} env")
            sigs[kind].append([[describe(t) for t in sig] for sig in disp.signatures])
    data = {"fingerprint": list(fingerprint(env.unwrapped.config)), "signatures": sigs}
    env.close()
    vec.close()
    path.write_text(json.dumps(data, separators=(",", ":")) + "\n")


if __name__ == "__main__":
    if sys.argv[1:] == ["record"]:
        record()
    else:
        print(json.dumps(warmup(clear="--clear" in sys.argv[1:])))
