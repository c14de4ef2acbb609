"""The product code uses its dependencies' public API only: no name starting with ``_`` is
imported from a dependency, nothing is assigned onto a dependency's modules or classes (no
patching), and no private attribute of a dependency's objects is read or written.

"Product code" is every ``.py`` outside ``tests/`` and ``benchmarks/``. A private attribute
is an ``obj._name`` whose ``_name`` the project defines nowhere (as a function, class,
variable, attribute or argument): then it can only be a dependency's, whatever object it is
read from (``runner._env_to_module`` of an object a library handed over). Outside the modules
that import numba, an attribute the project assigns on any object of its own also counts as
defined; in a module that imports numba only what the project binds does (``disp._cache =``
would patch numba's dispatcher), and a subclass of a numba class defines no private name
(that would override numba's). The few
underscore names a library documents as public are listed in :data:`DOCUMENTED`; the module
attributes a library documents as the ones to assign, in :data:`WRITABLE`.
"""

from __future__ import annotations

import ast
import pathlib

ROOT = pathlib.Path(__file__).resolve().parents[1]
PROJECT = {"physics", "tracks", "rally_env", "agents"}
SKIP_DIRS = {"tests", "benchmarks", "out", "build", "dist", ".git"}
#: underscore names their libraries document as public API
DOCUMENTED = {
    "_replace",  # collections.namedtuple
    "_asdict",
    "_fields",
    "_make",
    "_field_defaults",
    "_exit",  # os._exit
}
#: module attributes their libraries document as assignable
WRITABLE = {"sys.argv"}


def _product_files() -> list[pathlib.Path]:
    out = []
    for p in sorted(ROOT.rglob("*.py")):
        rel = p.relative_to(ROOT)
        if rel.parts[0] in SKIP_DIRS or any(part.startswith(".") for part in rel.parts):
            continue
        out.append(p)
    return out


def _private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def _is_dependency(module: str | None, level: int) -> bool:
    return bool(module) and level == 0 and module.split(".")[0] not in PROJECT


def _root(node: ast.AST) -> ast.AST:
    while isinstance(node, ast.Attribute | ast.Subscript):
        node = node.value
    return node


def _attr_chain_root(node: ast.AST) -> str | None:
    """The name a pure attribute chain (``a.b.c``) starts from, else None."""
    while isinstance(node, ast.Attribute):
        node = node.value
    return node.id if isinstance(node, ast.Name) else None


def _numba_names(tree: ast.AST) -> set[str]:
    """The names a file binds to numba's modules, classes and functions."""
    out: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out.update(a.asname or "numba" for a in node.names if a.name.split(".")[0] == "numba")
        elif isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "numba":
            out.update(a.asname or a.name for a in node.names)
    return out


def _numba_subclasses(tree: ast.AST) -> list[ast.ClassDef]:
    numba = _numba_names(tree)
    return [
        node
        for node in ast.walk(tree)
        if isinstance(node, ast.ClassDef) and any(_attr_chain_root(b) in numba for b in node.bases)
    ]


def _assigned_attributes(trees: list[ast.AST]) -> set[str]:
    """Every attribute name the project assigns on some object (``core._plan = ...``)."""
    return {
        node.attr
        for tree in trees
        for node in ast.walk(tree)
        if isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store)
    }


def _defined_names(trees: list[ast.AST]) -> set[str]:
    """Every name the project itself binds anywhere (not counting what a subclass of a numba
    class defines: that is numba's name overridden)."""
    names: set[str] = set()
    for tree in trees:
        skip = {id(n) for c in _numba_subclasses(tree) for n in ast.walk(c) if n is not c}
        for node in ast.walk(tree):
            if id(node) in skip:
                continue
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                names.add(node.name)
            elif isinstance(node, ast.arg):
                names.add(node.arg)
            elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
                names.add(node.id)
            elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
                if isinstance(node.value, ast.Name) and node.value.id in ("self", "cls"):
                    names.add(node.attr)  # (``disp._cache = ...`` defines nothing)
            elif isinstance(node, ast.keyword) and node.arg:
                names.add(node.arg)
            elif isinstance(node, ast.alias):
                names.add(node.asname or node.name.split(".")[0])
    return names


def _violations(
    path: pathlib.Path, tree: ast.AST, defined: set[str], assigned: frozenset[str] = frozenset()
) -> list[str]:
    rel = path.relative_to(ROOT)
    out: list[str] = []
    deps: set[str] = set()  # names bound to a dependency's modules, classes or functions
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                if a.name.split(".")[0] not in PROJECT:
                    deps.add(a.asname or a.name.split(".")[0])
                    if any(_private(part) for part in a.name.split(".")):
                        out.append(f"{rel}:{node.lineno}: imports private module {a.name}")
        elif isinstance(node, ast.ImportFrom) and _is_dependency(node.module, node.level):
            if any(_private(part) for part in node.module.split(".")):
                out.append(f"{rel}:{node.lineno}: imports from private module {node.module}")
            for a in node.names:
                deps.add(a.asname or a.name)
                if _private(a.name):
                    out.append(f"{rel}:{node.lineno}: imports {a.name} from {node.module}")
    uses_numba = bool(_numba_names(tree))
    for cls in _numba_subclasses(tree):  # overriding numba's private methods or attributes
        for node in ast.walk(cls):
            name = None
            if isinstance(node, ast.FunctionDef):
                name = node.name
            elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
                name = node.attr
            if name and _private(name):
                out.append(f"{rel}:{node.lineno}: {cls.name} overrides numba's private {name}")
    # a name bound to an attribute chain of a dependency (cls = module.Class) is one too
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign) and _attr_chain_root(node.value) in deps:
            deps.update(t.id for t in node.targets if isinstance(t, ast.Name))
    for node in ast.walk(tree):
        targets = []
        if isinstance(node, ast.Assign):
            targets = node.targets
        elif isinstance(node, ast.AugAssign | ast.AnnAssign):
            targets = [node.target]
        for t in targets:
            if not isinstance(t, ast.Attribute):
                continue
            if t.attr == "__class__":
                out.append(f"{rel}:{t.lineno}: swaps an object's __class__")
            elif _attr_chain_root(t) in deps and ast.unparse(t) not in WRITABLE:
                out.append(f"{rel}:{t.lineno}: assigns {ast.unparse(t)} (patches a dependency)")
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id in ("setattr", "delattr")
            and node.args
            and _attr_chain_root(node.args[0]) in deps
        ):
            out.append(f"{rel}:{node.lineno}: {node.func.id} on a dependency")
        if (
            isinstance(node, ast.Attribute)
            and _private(node.attr)
            and node.attr not in DOCUMENTED
            and (
                (node.attr not in defined and (uses_numba or node.attr not in assigned))
                or _attr_chain_root(node.value) in deps  # argparse._SubParsersAction
            )
        ):
            out.append(f"{rel}:{node.lineno}: uses a dependency's private {ast.unparse(node)}")
    return out


def test_product_code_uses_only_public_api_of_its_dependencies():
    files = _product_files()
    assert len(files) > 50, files
    trees = [ast.parse(p.read_text(encoding="utf-8"), str(p)) for p in files]
    defined = _defined_names(trees)
    assigned = frozenset(_assigned_attributes(trees))
    bad = [
        v for p, t in zip(files, trees, strict=True) for v in _violations(p, t, defined, assigned)
    ]
    assert not bad, "\n".join(bad)


def test_the_check_finds_each_kind_of_use():
    code = (
        "import numba\n"
        "from numba.core import targetconfig\n"
        "from numba.core.caching import _CacheLocator\n"
        "import numba._helperlib\n"
        "cls = targetconfig.TargetConfig\n"
        "cls.values = None\n"
        "numba.config.X = 1\n"
        "setattr(targetconfig.TargetConfig, 'x', 1)\n"
        "class D(numba.core.registry.CPUDispatcher):\n"
        "    def _compile_for_args(self):\n"
        "        self._cache = None\n"
        "def f(d):\n"
        "    d.__class__ = object\n"
        "    return d._cache._index_key\n"
    )
    code += "import argparse\ndef g(sub: argparse._SubParsersAction): pass\n"
    tree = ast.parse(code)
    found = _violations(ROOT / "x.py", tree, _defined_names([tree]))
    assert len(found) == 12, found


def test_the_check_finds_private_attributes_of_objects_a_library_hands_over():
    code = (
        "from ray.rllib.connectors.env_to_module import MeanStdFilter\n"
        "def stats(runner, core):\n"
        "    core._plan = 1\n"
        "    for c in runner._env_to_module.connectors:\n"
        "        if isinstance(c, MeanStdFilter) and c._filters:\n"
        "            return core._plan\n"
    )
    tree = ast.parse(code)
    found = _violations(
        ROOT / "x.py", tree, _defined_names([tree]), frozenset(_assigned_attributes([tree]))
    )
    assert [f.rsplit(" ", 1)[-1] for f in found] == ["runner._env_to_module", "c._filters"], found
