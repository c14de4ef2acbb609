"""Policies that need nothing but the env's action conventions.

:class:`RandomPolicy` is the one random driver: ``rally record --agent random``, ``rally eval
--agent random`` and ``agents.make_policy("random")`` all resolve to it.
"""

from __future__ import annotations

import numpy as np


class RandomPolicy:
    """Uniform random actions from a seeded generator (the same seed gives the same actions).

    Continuous: steer uniform in [-1, 1], throttle and brake uniform in [0, 1], handbrake 0 (a
    random handbrake only spins the car). Discrete: an action index uniform in ``[0, n)``.

    Args:
        seed: seeds the generator (``None``: fresh entropy).
        n_discrete: the number of discrete actions, or ``None`` for the continuous ``(4,)``
            action.

    Calling it with one observation ``(obs_dim,)`` gives one action (``(4,)`` float32 or an
    int); with a batch ``(N, obs_dim)``, ``N`` of them.
    """

    name = "random"

    def __init__(self, seed: int | None = 0, n_discrete: int | None = None):
        self.seed = seed
        self.n_discrete = None if n_discrete is None else int(n_discrete)
        self._rng = np.random.default_rng(seed)

    def reset(self, n: int = 1) -> None:
        """Start of an episode (nothing to reset)."""

    def __call__(self, obs: np.ndarray) -> np.ndarray | int:
        o = np.atleast_2d(obs)
        if self.n_discrete is not None:
            idx = self._rng.integers(0, self.n_discrete, size=o.shape[0])
            return idx if np.ndim(obs) > 1 else int(idx[0])
        a = self._rng.random((o.shape[0], 4)).astype(np.float32)
        a[:, 0] = 2.0 * a[:, 0] - 1.0
        a[:, 3] = 0.0
        return a if np.ndim(obs) > 1 else a[0]
