"""A small TOML emitter (the standard library only reads TOML).

It writes exactly the subset the stage format uses: strings, integers, floats, booleans, arrays of
those (nested one level for knots), tables and arrays of tables. Floats are written with
``repr`` so that reading the file back gives the same bits.
"""

from __future__ import annotations

import math
from typing import Any

#: str.translate table of a basic string: the short escapes, else \uXXXX for control characters
_ESCAPES = {
    **{c: f"\\u{c:04x}" for c in (*range(0x20), 0x7F)},
    ord('"'): '\\"',
    ord("\\"): "\\\\",
    ord("\b"): "\\b",
    ord("\t"): "\\t",
    ord("\n"): "\\n",
    ord("\f"): "\\f",
    ord("\r"): "\\r",
}


def _string(s: str) -> str:
    return '"' + s.translate(_ESCAPES) + '"'


def _scalar(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        if not math.isfinite(v):
            raise ValueError(f"cannot write non-finite float {v!r} to a stage file")
        r = repr(v)
        return r if ("." in r or "e" in r or "n" in r) else r + ".0"
    if isinstance(v, str):
        return _string(v)
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(_scalar(x) for x in v) + "]"
    raise TypeError(f"cannot write {type(v).__name__} to TOML")


def _key(k: str) -> str:
    if k and all(c.isalnum() or c in "-_" for c in k):
        return k
    return _string(k)


def _is_table_array(v: Any) -> bool:
    return isinstance(v, list) and len(v) > 0 and all(isinstance(x, dict) for x in v)


def _body(d: dict[str, Any], lines: list[str]) -> None:
    for k, v in d.items():
        if isinstance(v, dict) or _is_table_array(v) or v is None:
            continue
        if isinstance(v, (list, tuple)) and v and isinstance(v[0], (list, tuple)):
            lines.append(f"{_key(k)} = [")
            lines.extend(f"  {_scalar(row)}," for row in v)
            lines.append("]")
        else:
            lines.append(f"{_key(k)} = {_scalar(v)}")


def dumps(doc: dict[str, Any], header: str = "") -> str:
    """Serialise a dict (the stage file schema) to TOML text.

    Plain values come first, then sub-tables, then arrays of tables, each in insertion order.
    ``None`` values are omitted (TOML has no null).
    """
    lines: list[str] = [f"# {h}" if h else "#" for h in header.splitlines()] if header else []
    _body(doc, lines)
    for k, v in doc.items():
        if isinstance(v, dict):
            lines += ["", f"[{_key(k)}]"]
            _body(v, lines)
    for k, v in doc.items():
        if _is_table_array(v):
            for item in v:
                lines += ["", f"[[{_key(k)}]]"]
                _body(item, lines)
    return "\n".join(lines) + "\n"
