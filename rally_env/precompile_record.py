"""Record the argument types :mod:`rally_env.precompile`'s worker compiles for:
``python -m rally_env.precompile_record`` (after a change to a reset or step kernel's
arguments; ``tests/rally_env/test_precompile.py`` says when). A module of its own because it
builds envs, and the env core imports :mod:`rally_env.precompile`."""

from __future__ import annotations

import importlib
import pickle
from pathlib import Path

from rally_env.precompile import KERNELS, SIGNATURES, fingerprint


def record(path: Path = SIGNATURES) -> None:
    """Write the argument types of the kernels of a default ``Rally-v0`` env's first reset
    and step, and of a 4-car threaded vector env's (what :func:`~rally_env.precompile.compile_all`
    compiles)."""
    import gymnasium as gym
    import numba
    import numpy as np

    import rally_env  # noqa: F401  (registers the env ids)
    from rally_env.vector import RallyVectorEnv

    env = gym.make("Rally-v0")
    env.reset(seed=0)
    env.step(env.action_space.sample())
    vec = RallyVectorEnv(num_envs=4, parallel=True)
    vec.reset(seed=0)
    vec.step(np.stack([vec.single_action_space.sample() for _ in range(4)]))
    sigs: dict[str, list] = {}
    for kind, kernels in KERNELS.items():
        sigs[kind] = []
        for mod, name in kernels:
            disp = getattr(importlib.import_module(mod), name)
            if not disp.signatures:
                raise RuntimeError(f"{mod}.{name} was not compiled by the {kind} env")
            sigs[kind].append(list(disp.signatures))
    data = {
        "numba": numba.__version__,
        "fingerprint": fingerprint(env.unwrapped.config),
        "signatures": sigs,
    }
    env.close()
    vec.close()
    with open(path, "wb") as f:
        pickle.dump(data, f, protocol=4)


if __name__ == "__main__":
    record()
