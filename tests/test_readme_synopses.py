"""The README's ``rally`` command lines against the parsers, as ``rally ... --help`` shows
them: every subcommand it shows exists, every option it shows exists there and takes the
argument form shown (a value where the option needs one, none for a flag, one of its choices
where it has choices)."""

from __future__ import annotations

import contextlib
import io
import re
from pathlib import Path

import pytest

from rally_env.cli import main

README = Path(__file__).resolve().parents[1] / "README.md"


def readme_synopses(text: str) -> list[str]:
    """Every ``rally ...`` command line of the text: inline code spans that start with
    ``rally `` (a span may break across lines) and lines of code blocks that do."""
    spans = [" ".join(s.split()) for s in re.findall(r"(?<!`)`(rally [^`]+)`", text)]
    blocks = re.findall(r"```[a-z]*\n(.*?)```", text, flags=re.S)
    for block in blocks:
        for line in block.splitlines():
            for part in line.split("&&"):
                part = part.split("#", 1)[0].strip()
                if part.startswith("rally "):
                    spans.append(part)
    return spans


def usage(path: list[str]) -> str:
    """The usage line ``rally PATH --help`` prints (joined onto one line)."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.suppress(SystemExit):
        main([*path, "--help"])
    head = out.getvalue().split("\n\n", 1)[0]
    return " ".join(head.split())[len("usage: rally ") + len(" ".join(path)) :]


def usage_terms(text: str) -> list[str]:
    """The top-level terms of a usage line: ``[--json OUT.json]``, ``--out NAME``, ``FILE``,
    ``[FILE ...]``, ``{add,show}``, ``...``."""
    terms, depth, cur = [], 0, ""
    for ch in text:
        if ch == " " and depth == 0:
            if cur:
                terms.append(cur)
            cur = ""
            continue
        if ch in "[{(":
            depth += 1
        elif ch in "]})":
            depth -= 1
        cur += ch
    return [*terms, cur] if cur else terms


def parse_usage(text: str) -> tuple[dict[str, tuple[str, list[str] | None]], int, bool, list[str]]:
    """``({option: (form, choices)}, fixed positionals, more positionals allowed,
    subcommands)`` of a usage line; form is "flag", "value" or "optional"."""
    options: dict[str, tuple[str, list[str] | None]] = {}
    fixed, many, subcommands = 0, False, []
    for term in usage_terms(text):
        inner = term[1:-1] if term.startswith("[") and term.endswith("]") else term
        if inner.startswith("-"):
            name, _, arg = inner.partition(" ")
            choices = arg[1:-1].split(",") if arg.startswith("{") else None
            form = "flag" if not arg else "optional" if arg.startswith("[") else "value"
            options[name] = (form, choices)
        elif term.startswith("{"):
            subcommands = term[1:-1].split(",")
        elif term == "..." or term.endswith("...]"):
            many = True
        else:
            fixed += 1
    return options, fixed, many, subcommands


def check_synopsis(synopsis: str) -> list[str]:
    """What in ``synopsis`` disagrees with what ``rally ... --help`` says (empty: it agrees)."""
    words = synopsis.replace("[", " ").replace("]", " ").split()[1:]
    path: list[str] = []
    options, fixed, many, subcommands = parse_usage(usage(path))
    while words and words[0] in subcommands:
        path.append(words.pop(0))
        options, fixed, many, subcommands = parse_usage(usage(path))
    if not path:
        return [f"{synopsis!r}: no subcommand {words[:1]}"]
    where = " ".join(["rally", *path])
    problems, i, positional = [], 0, 0
    while i < len(words):
        w = words[i]
        i += 1
        if not w.startswith("--"):
            positional += 1
            continue
        name, eq, value = w.partition("=")
        if name not in options:
            problems.append(f"{where}: the README shows {name}, which it does not have")
            continue
        values = [value] if eq else []
        while not eq and i < len(words) and not words[i].startswith("--"):
            values.append(words[i])
            i += 1
        form, choices = options[name]
        if form == "flag" or (form == "value" and len(values) > 1 and fixed + many):
            # what follows a flag (or an option's one value) are positional arguments
            keep = 0 if form == "flag" else 1
            positional += len(values) - keep
            values = values[:keep]
        if (form == "value" and len(values) != 1) or (form == "optional" and len(values) > 1):
            what = "a value" if form == "value" else "at most one value"
            problems.append(f"{where} {name} takes {what}; the README shows {values}")
            continue
        if choices is not None and values:
            for alt in values[0].split("|"):
                if alt not in choices:
                    problems.append(f"{where} {name}: {alt!r} is not one of {choices}")
    if positional > fixed and not many:
        problems.append(f"{where}: the README shows {positional} positional argument(s)")
    return problems


SYNOPSES = readme_synopses(README.read_text())


def test_the_readme_shows_the_commands():
    commands = {" ".join(s.split()[:2]) for s in SYNOPSES}
    assert commands >= {
        "rally demo",
        "rally train",
        "rally eval",
        "rally benchmark",
        "rally dataset",
        "rally record",
        "rally play",
        "rally verify",
        "rally replay",
        "rally leaderboard",
        "rally serve",
    }


@pytest.mark.parametrize("synopsis", SYNOPSES)
def test_a_readme_synopsis_matches_the_parser(synopsis):
    assert check_synopsis(synopsis) == []


@pytest.mark.parametrize(
    ("synopsis", "problem"),
    [
        ("rally eval --agent heuristic [--json] [--csv]", "eval --json takes a value"),
        ("rally benchmark --agent X [--markdown]", "benchmark --markdown takes a value"),
        ("rally record --no-such-option", "does not have"),
        ("rally train --algo ppo|td3", "'td3' is not one of"),
        ("rally nothing --x", "no subcommand"),
        ("rally replay A B C", "positional argument"),
    ],
)
def test_the_check_finds_what_is_wrong(synopsis, problem):
    """The checker is not vacuous: the README's old eval and benchmark synopses fail it."""
    assert any(problem in p for p in check_synopsis(synopsis))
