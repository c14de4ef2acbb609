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


# ------------------------------------------------------------------------------ import cycles
PACKAGES = ("physics", "tracks", "rally_env", "agents")


def _module_name(path: pathlib.Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def _project_modules() -> dict[str, pathlib.Path]:
    return {_module_name(p): p for pkg in PACKAGES for p in sorted((ROOT / pkg).rglob("*.py"))}


def _import_graph(mods: dict[str, pathlib.Path]) -> dict[str, set[str]]:
    """Module -> the project modules it imports, anywhere in the file (a function-level import
    counts: it runs whenever the function does). ``from a import b`` points at ``a.b`` when
    that is a module, else at ``a``; a package's ``__init__`` is a module like any other."""

    def resolve(name: str) -> str | None:
        while name and name not in mods:
            name = name.rpartition(".")[0]
        return name or None

    graph: dict[str, set[str]] = {}
    for mod, path in mods.items():
        is_pkg = path.name == "__init__.py"
        edges: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                for a in node.names:
                    if a.name.split(".")[0] in PACKAGES and (r := resolve(a.name)):
                        edges.add(r)
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    base = mod.split(".") if is_pkg else mod.split(".")[:-1]
                    base = base[: len(base) - (node.level - 1)]
                    src = ".".join(base + ([node.module] if node.module else []))
                else:
                    src = node.module or ""
                if src.split(".")[0] not in PACKAGES:
                    continue
                for a in node.names:
                    full = f"{src}.{a.name}"
                    r = full if full in mods else resolve(src)
                    if r:
                        edges.add(r)
        edges.discard(mod)
        graph[mod] = edges
    return graph


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[list[str]] = []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            v, it = work[-1]
            w = next(it, None)
            if w is not None:
                if w not in index:
                    index[w] = low[w] = len(index)
                    stack.append(w)
                    on_stack.add(w)
                    work.append((w, iter(sorted(graph[w]))))
                elif w in on_stack:
                    low[v] = min(low[v], index[w])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                comp = []
                while True:
                    w = stack.pop()
                    on_stack.discard(w)
                    comp.append(w)
                    if w == v:
                        break
                if len(comp) > 1:
                    out.append(sorted(comp))
    return out


# modules that import without the train extra (stable-baselines3, torch): what drives,
# evaluates and tunes without training a network
LIGHT_AGENT_MODULES = (
    "agents",
    "agents.es",
    "agents.evaluate",
    "agents.heuristic",
    "agents.models",
    "agents.policies",
    "agents.benchmark",
    "agents.cli",
)


def test_driving_and_evaluation_import_without_the_train_extra():
    import subprocess
    import sys

    blocker = (
        "import sys\n"
        "class Block:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name.split('.')[0] in ('torch', 'stable_baselines3'):\n"
        "            raise ImportError(f'{name} blocked')\n"
        "sys.meta_path.insert(0, Block())\n"
        "import importlib\n"
        f"for m in {LIGHT_AGENT_MODULES!r}:\n"
        "    importlib.import_module(m)\n"
        "assert 'torch' not in sys.modules and 'stable_baselines3' not in sys.modules\n"
    )
    r = subprocess.run([sys.executable, "-c", blocker], cwd=ROOT, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr[-2000:]


def test_the_cycle_finder_sees_a_cycle():
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert _cycles({"a": {"b"}, "b": set()}) == []


def test_no_module_imports_in_a_cycle():
    mods = _project_modules()
    graph = _import_graph(mods)
    assert "rally_env.replay.verify" in graph["rally_env.replay.leaderboard"]  # sees imports
    cycles = _cycles(graph)
    assert not cycles, "modules that import each other (directly or around a loop):\n" + "\n".join(
        " <-> ".join(c) for c in cycles
    )


def test_nothing_outside_the_server_imports_the_server():
    """``rally serve`` reaches the ``rally`` command line through an entry point (pyproject)."""
    graph = _import_graph(_project_modules())
    assert "rally_env.server.store" in graph["rally_env.server.pool"]  # sees server imports
    bad = sorted(
        f"{mod} imports {dep}"
        for mod, deps in graph.items()
        if not (mod == "rally_env.server" or mod.startswith("rally_env.server."))
        for dep in deps
        if (dep == "rally_env.server" or dep.startswith("rally_env.server."))
    )
    assert not bad, "\n".join(bad)


# ------------------------------------------------------------------------------ function size
#: Code held to the size limits (the rest of the tree joins as it is split up).
SIZE_CHECKED = ("rally_env/replay", "rally_env/policies.py", "agents/models.py")
MAX_FUNCTION_LINES = 150
MAX_PARAMETERS = 12


def _oversized(path: pathlib.Path) -> list[str]:
    bad = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        a = node.args
        names = [x.arg for x in (*a.posonlyargs, *a.args, *a.kwonlyargs)]
        names += [x.arg for x in (a.vararg, a.kwarg) if x is not None]
        n_params = len([n for n in names if n not in ("self", "cls")])
        n_lines = node.end_lineno - node.lineno + 1
        where = f"{path.relative_to(ROOT)}:{node.lineno} {node.name}"
        if n_lines > MAX_FUNCTION_LINES:
            bad.append(f"{where}: {n_lines} lines")
        if n_params > MAX_PARAMETERS:
            bad.append(f"{where}: {n_params} parameters")
    return bad


def test_functions_stay_small():
    paths = []
    for p in SIZE_CHECKED:
        q = ROOT / p
        paths += sorted(q.rglob("*.py")) if q.is_dir() else [q]
    assert len(paths) > 5
    bad = [b for p in paths for b in _oversized(p)]
    assert not bad, "\n".join(bad)
