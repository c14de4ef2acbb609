"""rl-zoo3's scripts with the rally envs registered: ``python -m agents.zoo SCRIPT ARGS``
runs ``rl_zoo3.<SCRIPT>`` unchanged after importing ``rally_env``, and gives ``train`` the
shipped ``--conf-file`` of its ``--algo`` (:data:`CONFIG_DIR`) when none is given. Why (the
zoo's registry lookup) and examples: docs/integrations.md, "rl-zoo3". Needs ``pip install
rl-zoo3``.
"""

from __future__ import annotations

import runpy
import sys
from pathlib import Path

#: The zoo scripts this launcher runs.
SCRIPTS = ("train", "enjoy", "record_video", "record_training")
#: The shipped rl-zoo3 hyperparameter files (one per algorithm, keyed by env id).
CONFIG_DIR = Path(__file__).parent / "configs" / "rl_zoo3"


def config_path(algo: str) -> Path:
    """The shipped hyperparameter file of ``algo`` (``FileNotFoundError`` if none ships)."""
    p = CONFIG_DIR / f"{algo}.yml"
    if not p.exists():
        shipped = ", ".join(sorted(q.stem for q in CONFIG_DIR.glob("*.yml")))
        raise FileNotFoundError(f"no rl-zoo3 hyperparameters ship for {algo!r} (only {shipped})")
    return p


def zoo_argv(script: str, args: list[str]) -> list[str]:
    """The zoo's ``sys.argv`` for ``script``: ``train`` gets the shipped ``--conf-file`` of
    its ``--algo`` when none is given."""
    args = list(args)
    if script == "train" and not ({"--conf-file", "-conf", "--conf"} & set(args)):
        algo = "ppo"
        for i, a in enumerate(args):
            if a == "--algo" and i + 1 < len(args):
                algo = args[i + 1]
            elif a.startswith("--algo="):
                algo = a.split("=", 1)[1]
        args += ["--conf-file", str(config_path(algo))]
    return [f"rl_zoo3.{script}", *args]


def main(argv: list[str] | None = None) -> int:
    """Run ``rl_zoo3.<script>`` with ``rally_env`` imported (its ids registered)."""
    argv = sys.argv[1:] if argv is None else list(argv)
    if not argv or argv[0] not in SCRIPTS:
        print(f"usage: python -m agents.zoo {{{','.join(SCRIPTS)}}} [rl-zoo3 arguments]")
        return 2
    try:
        import rl_zoo3  # noqa: F401
    except ImportError as e:
        print(f"agents.zoo: needs rl-zoo3 ({e}); pip install rl-zoo3", file=sys.stderr)
        return 2
    import rally_env  # noqa: F401  (registers RallyDirect-v0, RallyLearn-v0, ...)

    try:
        sys.argv = zoo_argv(argv[0], argv[1:])
    except FileNotFoundError as e:
        print(f"agents.zoo: {e}", file=sys.stderr)
        return 2
    runpy.run_module(f"rl_zoo3.{argv[0]}", run_name="__main__", alter_sys=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
