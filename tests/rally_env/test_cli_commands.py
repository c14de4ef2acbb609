"""The ``rally`` sub-commands other packages register (``rally_env.commands`` entry points):
``rally serve`` comes from the server package that way, and an install without that entry point
says how to reinstall instead of failing obscurely."""

from __future__ import annotations

from importlib.metadata import EntryPoint

import pytest

from rally_env import plugins
from rally_env.cli import build_parser, main

AGENTS = EntryPoint("agents", "agents.cli:add_subcommands", plugins.COMMANDS_GROUP)
SERVER = EntryPoint("server", "rally_env.server.cli:add_subcommands", plugins.COMMANDS_GROUP)


def _installed(monkeypatch, *eps: EntryPoint) -> None:
    monkeypatch.setattr(plugins, "entry_points", lambda group: [e for e in eps if e.group == group])


def test_serve_comes_from_its_entry_point(monkeypatch):
    from rally_env.server import cli as server_cli

    _installed(monkeypatch, AGENTS, SERVER)
    args = build_parser().parse_args(["serve", "--port", "8080", "--db", "b.sqlite3"])
    assert args.func is server_cli._cmd_serve and args.port == 8080 and args.db == "b.sqlite3"
    args = build_parser().parse_args(["serve", "token", "list", "--db", "b.sqlite3"])
    assert args.func is server_cli._cmd_token_list
    with pytest.raises(SystemExit) as e:  # the real --help, not the reinstall message
        build_parser().parse_args(["serve", "--help"])
    assert e.value.code == 0


@pytest.mark.parametrize(
    "argv", [["serve", "--help"], ["serve", "token"], ["serve", "--port", "x"]]
)
def test_serve_without_its_entry_point_says_how_to_reinstall(monkeypatch, capsys, argv):
    _installed(monkeypatch, AGENTS)
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert 'python3 -m pip install -e ".[server]"' in err and "Traceback" not in err
