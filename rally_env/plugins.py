"""Extension points that packages above ``rally_env`` fill through entry points (the
``rally_env.commands`` and ``rally_env.policies`` groups; docs/architecture.md, "Layers"):
``rally_env`` never imports ``agents``, and finds its commands and ``--agent`` resolvers here.
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
