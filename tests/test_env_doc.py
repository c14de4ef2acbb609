"""docs/env.md's tables are the ones the code makes (tests/env_doc.py), and its markers hold."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests import env_doc
from tests.env_doc import ENV_MD, TABLES, EnvDocError, render


def test_docs_env_md_is_current():
    assert ENV_MD.read_text(encoding="utf-8") == render(ENV_MD.read_text(encoding="utf-8")), (
        "docs/env.md is stale: regenerate its tables with `python3 -m tests.env_doc`"
    )


def test_a_changed_source_makes_the_file_stale(monkeypatch):
    text = ENV_MD.read_text(encoding="utf-8")
    rows = env_doc.reward_rows()
    monkeypatch.setattr(env_doc, "reward_rows", lambda: [(rows[0][0], 7.25, rows[0][2])])
    new = render(text)
    assert new != text
    assert "| `progress` | 7.25 |" in new and "| `time` |" not in new.split("## Episode end")[0]


def test_a_hand_edited_table_is_put_back():
    text = ENV_MD.read_text(encoding="utf-8")
    edited = text.replace("| `finished` | terminated |", "| `finished` | truncated |", 1)
    assert edited != text
    assert render(edited) == text


def test_every_table_has_one_place_and_the_prose_is_left_as_written():
    text = ENV_MD.read_text(encoding="utf-8")
    for name in TABLES:
        assert text.count(f"<!-- table: {name} -->\n") == 1, name
    edited = text.replace("## Ids\n", "## Ids\n\nA sentence written by hand.\n", 1)
    assert render(edited) == edited


@pytest.mark.parametrize(
    ("change", "match"),
    [
        (lambda t: t.replace("<!-- table: rewards -->", "<!-- table: bonus -->"), "unknown"),
        (lambda t: t.replace("<!-- /table -->\n", "\n", 1), "openers"),
        (lambda t: env_doc._BLOCK.sub("", t, count=1), "no place"),
    ],
    ids=["unknown-name", "unclosed", "missing-table"],
)
def test_bad_markers_raise_a_typed_error(change, match):
    text = ENV_MD.read_text(encoding="utf-8")
    with pytest.raises(EnvDocError, match=match):
        render(change(text))


def test_the_check_command_says_current():
    r = subprocess.run(
        [sys.executable, "-m", "tests.env_doc", "--check"],
        capture_output=True,
        text=True,
        cwd=ENV_MD.parents[1],
    )
    assert r.returncode == 0 and "docs/env.md is current" in r.stdout, r.stdout + r.stderr
