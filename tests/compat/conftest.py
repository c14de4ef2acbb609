"""The compatibility suite: rally-env through each RL library's own documented entry point.

Tests marked ``compat`` need the libraries of the ``compat`` extra (torchrl, skrl, rl-zoo3,
Minari); the default run deselects them (pyproject's ``-m "not compat"``) and ``.ci/run``
runs them in a step of their own: ``python3 -m pytest -q -m compat``.
"""

from __future__ import annotations

import os

os.environ.setdefault("SDL_VIDEODRIVER", "dummy")
