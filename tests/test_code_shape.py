"""The shape rule: no function in physics/, tracks/, rally_env/ or agents/ is longer than
MAX_LINES lines or takes more than MAX_PARAMS parameters, but for the exceptions listed in
ALLOWED with their reason.

The list can only shrink: a function that breaks the rule and is not listed fails, and so does
a listed one that no longer breaks it (or is gone), so the list always says what is left.
Lines are a ``def``'s first line to its last, decorators not counted and nested functions
included; parameters are every named, ``*args`` and ``**kwargs`` parameter but a method's
``self`` or ``cls``. Module-level data (generated tables included) is not a function and is not
measured. Names are ``path::qualified.name`` (``Class.method``, ``outer.inner``).
"""

from __future__ import annotations

import ast
import pathlib

ROOT = pathlib.Path(__file__).resolve().parents[1]
PACKAGES = ("physics", "tracks", "rally_env", "agents")
MAX_LINES = 150
MAX_PARAMS = 12

_WIDE_ENTRY = "a numba entry point called from Python: it takes the batch's arrays one by one"
ALLOWED: dict[str, str] = {
    "physics/kernel.py::step_cars": _WIDE_ENTRY,
    "physics/kernel.py::step_cars_parallel": _WIDE_ENTRY,
    "tracks/projection.py::project_batch": "numba kernel (called from Python and from the env "
    "kernels) taking a path's tables and its outputs one by one",
    "rally_env/info.py::_fill_cars": _WIDE_ENTRY + "; it could take the env kernels' records",
    "rally_env/render/background.py::_bake_tiles": _WIDE_ENTRY + " (terrain and view tables)",
    "rally_env/render/background.py::sample_view": _WIDE_ENTRY + " (view and terrain)",
    "rally_env/render/play.py::play": "the play command's public keyword arguments",
    "rally_env/render/raster.py::draw_marks": _WIDE_ENTRY + " (the marks and the view)",
    "rally_env/render/video.py::render_episode": "public keyword arguments of the video API",
    "rally_env/env.py::RallyEnv.__init__": "the env's keyword arguments, one per RallyConfig "
    "setting, as gymnasium.make passes them (it accepts no **kwargs)",
}


def _n_params(fn: ast.FunctionDef | ast.AsyncFunctionDef, in_class: bool) -> int:
    a = fn.args
    names = [*a.posonlyargs, *a.args]
    n = len(names) + len(a.kwonlyargs) + (a.vararg is not None) + (a.kwarg is not None)
    if in_class and names and names[0].arg in ("self", "cls"):
        n -= 1
    return n


def _functions(tree: ast.AST):
    """(qualified name, lines, parameters) of every function, nested ones included."""

    def visit(node: ast.AST, prefix: str, in_class: bool):
        for ch in ast.iter_child_nodes(node):
            if isinstance(ch, (ast.FunctionDef, ast.AsyncFunctionDef)):
                name = prefix + ch.name
                yield name, ch.end_lineno - ch.lineno + 1, _n_params(ch, in_class)
                yield from visit(ch, name + ".", False)
            elif isinstance(ch, ast.ClassDef):
                yield from visit(ch, prefix + ch.name + ".", True)
            else:
                yield from visit(ch, prefix, in_class)

    yield from visit(tree, "", False)


def _breaking_the_rule() -> dict[str, str]:
    out = {}
    for pkg in PACKAGES:
        for path in sorted((ROOT / pkg).rglob("*.py")):
            rel = path.relative_to(ROOT).as_posix()
            tree = ast.parse(path.read_text(encoding="utf-8"))
            for name, lines, params in _functions(tree):
                if lines > MAX_LINES or params > MAX_PARAMS:
                    out[f"{rel}::{name}"] = f"{lines} lines, {params} parameters"
    return out


def test_no_function_is_too_long_or_too_wide():
    found = _breaking_the_rule()
    new = {k: v for k, v in found.items() if k not in ALLOWED}
    assert not new, (
        f"over {MAX_LINES} lines or {MAX_PARAMS} parameters: {new} (split it, or group its "
        "arguments into a record)"
    )


def test_every_exception_is_still_needed():
    found = _breaking_the_rule()
    stale = sorted(k for k in ALLOWED if k not in found)
    assert not stale, f"these keep the rule now: remove them from ALLOWED: {stale}"
    assert all(reason.strip() for reason in ALLOWED.values())


def test_the_measure_sees_what_it_should():
    # the control: a long function, a wide one, a method's self not counted, nested names
    src = "\n".join(
        [
            "def wide(a, b, c, d, e, f, g, h, i, j, k, l, m): pass",
            "class C:",
            "    def m(self, a, b, c, d, e, f, g, h, i, j, k, l): pass",
            "def outer(*args, **kw):",
            *["    x = 1"] * MAX_LINES,
            "    def inner(): pass",
        ]
    )
    got = {name: (lines, params) for name, lines, params in _functions(ast.parse(src))}
    assert got["wide"] == (1, 13)
    assert got["C.m"] == (1, 12)
    assert got["outer"] == (MAX_LINES + 2, 2)
    assert got["outer.inner"] == (1, 0)
