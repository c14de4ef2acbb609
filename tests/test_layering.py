"""The dependency rule: physics <- tracks <- rally_env <- agents; only agents uses SB3 or torch."""

from __future__ import annotations

import ast
import pathlib

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
# what each package may not import (by top-level module name)
FORBIDDEN = {
    "physics": {
        "tracks",
        "rally_env",
        "agents",
        "gymnasium",
        "pygame",
        "torch",
        "stable_baselines3",
    },
    "tracks": {"rally_env", "agents", "gymnasium", "torch", "stable_baselines3"},
    "rally_env": {"agents", "torch", "stable_baselines3"},
}


def _imports(path: pathlib.Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    out: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out.update(a.name.split(".")[0] for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            out.add(node.module.split(".")[0])
    return out


@pytest.mark.parametrize("package", sorted(FORBIDDEN))
def test_no_import_points_the_wrong_way(package):
    bad = []
    for path in sorted((ROOT / package).rglob("*.py")):
        hit = _imports(path) & FORBIDDEN[package]
        if hit:
            bad.append(f"{path.relative_to(ROOT)}: {sorted(hit)}")
    assert not bad, "\n".join(bad)
