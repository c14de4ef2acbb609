"""Vehicle-model validation: prints a table (scenario, expected, measured, error) and JSON.

python3 benchmarks/physics_validation.py [--json out/physics_validation.json]
"""

from __future__ import annotations

import argparse
import json
import pathlib
import sys
import time

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))

from physics.validation import run_all


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--json", default="out/physics_validation.json")
    args = ap.parse_args()
    t0 = time.perf_counter()
    checks = run_all()
    w = max(len(c.name) for c in checks)
    print(f"{'scenario':<{w}}  {'expected':>12} {'measured':>12} {'error':>11}  unit   ok")
    for c in checks:
        rule = {"within": "±", "at_most": "<=", "at_least": ">="}[c.kind]
        print(
            f"{c.name:<{w}}  {c.expected:12.5g} {c.measured:12.5g} {c.error:+11.3g}  "
            f"{c.unit:<6} {'yes' if c.ok else 'NO '}  ({rule} {c.tol:g}) {c.note}"
        )
    out = pathlib.Path(args.json)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps([c.as_dict() for c in checks], indent=2))
    n_ok = sum(c.ok for c in checks)
    print(
        f"\n{n_ok}/{len(checks)} within tolerance; {time.perf_counter() - t0:.1f} s; JSON in {out}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
