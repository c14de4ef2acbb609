"""Settings for the whole suite.

``RALLY_INTERPRET=0``: an env in a process whose numba cache is cold does not run as Python
while the precompile workers compile (``rally_env.precompile``); the suite's checks of what is
compiled expect compiled code. ``tests/rally_env/test_python_first.py`` turns it on where it
tests it.
"""

from __future__ import annotations

import os

os.environ.setdefault("RALLY_INTERPRET", "0")
