"""numba keeps a cached function's machine code until its own file changes, even when a
function compiled into it changed in another file; ``physics.jit.drop_stale_cache`` (run at
``import physics``) deletes the project's cache when any of its sources changed."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from numba import config

from physics import jit

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.skipif(config.DISABLE_JIT, reason="JIT disabled: nothing is cached")


def _package(root: Path, name: str = "pkgx") -> Path:
    pkg = root / name
    (pkg / "sub").mkdir(parents=True)
    for f in (pkg / "__init__.py", pkg / "sub" / "__init__.py"):
        f.write_text("")
    return pkg


def test_a_changed_source_deletes_every_cache_file_and_an_unchanged_one_none(tmp_path, monkeypatch):
    monkeypatch.setattr(config, "CACHE_DIR", "")  # numba's own __pycache__ folders, whatever
    pkg = _package(tmp_path)  # NUMBA_CACHE_DIR the suite runs with
    (pkg / "a.py").write_text("x = 1\n")
    caches = [pkg / "__pycache__", pkg / "sub" / "__pycache__"]
    for c in caches:
        c.mkdir()
        for n in ("m.f-1.py311.nbi", "m.f-1.py311.1.nbc", "m.cpython-311.pyc"):
            (c / n).write_text("x")
    assert jit.cache_folders(tmp_path, ("pkgx",)) == caches
    assert jit.drop_stale_cache(tmp_path, ("pkgx",)) == 4  # no stamp yet: the cache is unknown
    assert sorted(p.name for c in caches for p in c.iterdir()) == [
        "m.cpython-311.pyc",
        "m.cpython-311.pyc",
        jit.STAMP,
    ]
    (caches[1] / "m.g-1.py311.nbi").write_text("x")
    assert jit.drop_stale_cache(tmp_path, ("pkgx",)) == 0  # same sources: kept
    assert (caches[1] / "m.g-1.py311.nbi").exists()
    (pkg / "sub" / "b.py").write_text("y = 2\n")  # a new or changed source anywhere
    assert jit.drop_stale_cache(tmp_path, ("pkgx",)) == 1
    assert not (caches[1] / "m.g-1.py311.nbi").exists()


def test_with_numba_cache_dir_the_folders_are_numbas(tmp_path, monkeypatch):
    _package(tmp_path)
    monkeypatch.setattr(config, "CACHE_DIR", str(tmp_path / "cache"))
    folders = jit.cache_folders(tmp_path, ("pkgx",))
    assert [f.parent for f in folders] == [tmp_path / "cache"] * 2
    assert folders[0].name.startswith("pkgx_") and folders[1].name.startswith("sub_")


def test_through_a_symlinked_checkout_the_stamp_is_in_numbas_folder(tmp_path):
    """numba names a NUMBA_CACHE_DIR folder after the source's path as imported (symlinks
    kept): the guard must find the same folder, or it stamps one numba never reads."""
    (tmp_path / "link").symlink_to(ROOT)
    code = (
        "from numba.core.caching import UserProvidedCacheLocator as U; import physics.kernel as k;"
        " from physics import jit; print(jit.cache_folders()[0].name);"
        " print(U.get_suitable_cache_subpath(k.__file__))"
    )
    env = {**os.environ, "PYTHONPATH": str(tmp_path / "link"), "NUMBA_CACHE_DIR": str(tmp_path)}
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, cwd=tmp_path
    )
    assert out.returncode == 0, out.stderr
    ours, numbas = out.stdout.split()
    assert ours == numbas


_A = (
    "from numba import njit\nfrom pkgx.b import f\n\n\n"
    "@njit(cache=True)\ndef g(x):\n    return f(x) * 2.0\n"
)
_B = "from numba import njit\n\n\n@njit(cache=True)\ndef f(x):\n    return x + {}\n"
_RUN = (
    "import sys; from pathlib import Path; from physics.jit import drop_stale_cache; "
    "{guard}from pkgx.a import g; print(g(1.0))"
)


def _g(root: Path, guard: bool) -> str:
    code = _RUN.format(guard=f"drop_stale_cache(Path({str(root)!r}), ('pkgx',)); " if guard else "")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(root), str(ROOT)])}
    env.pop("NUMBA_CACHE_DIR", None)
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    return out.stdout.strip()


@pytest.mark.parametrize("guard", [False, True])
def test_a_kernel_sees_a_changed_helper_in_another_file(tmp_path, guard):
    pkg = _package(tmp_path)
    (pkg / "a.py").write_text(_A)
    (pkg / "b.py").write_text(_B.format("1.0"))
    assert _g(tmp_path, guard) == "4.0"
    (pkg / "b.py").write_text(_B.format("100.0"))
    # numba alone loads g's old code (f inlined as x + 1): if this ever gives 202.0 without
    # the guard, numba tracks such changes itself and the guard can go

    assert _g(tmp_path, guard) == ("202.0" if guard else "4.0")
