"""Extension points that packages above ``rally_env`` fill through entry points.

``rally_env`` never imports ``agents`` (the dependency rule: physics <- tracks <- rally_env <-
agents). Packages that build on it register, in their ``pyproject.toml``::

    [project.entry-points."rally_env.commands"]     # add_subcommands(subparsers)
    [project.entry-points."rally_env.policies"]     # resolve(spec, seed, **options) -> policy

(a resolver returns None for a value it does not know; the server package registers ``rally
serve`` the same way, so nothing outside it imports it), and the ``rally`` command line and
:func:`rally_env.policies.resolve_policy` (every ``--agent``) find them here. The
entry points come from the installed package metadata: run from an install
(``pip install -e .``), as the README does.
"""

from __future__ import annotations

from collections.abc import Callable
from importlib.metadata import entry_points
from typing import Any

COMMANDS_GROUP = "rally_env.commands"
POLICIES_GROUP = "rally_env.policies"


def _load(group: str) -> list[Callable[..., Any]]:
    out = []
    for ep in sorted(entry_points(group=group), key=lambda e: e.name):
        try:
            out.append(ep.load())
        except ImportError:  # the providing package (or one of its extras) is not installed
            continue
    return out


def command_providers() -> list[Callable[..., Any]]:
    """``add_subcommands(subparsers)`` functions registered for the ``rally`` command."""
    return _load(COMMANDS_GROUP)


def policy_resolvers() -> list[Callable[..., Any]]:
    """``resolve(spec, seed, **options) -> policy or None`` functions for ``--agent`` values."""
    return _load(POLICIES_GROUP)
