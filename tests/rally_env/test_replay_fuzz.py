"""Hostile replays, field by field: ``rally verify`` never crashes, and no edit moves a run.

Every field of a valid replay (every object, list and value, the embedded stage's knots
included) is replaced by a wrong type, a 400-digit integer, NaN, the value nested in 500 lists
and an empty value, and the file is run through ``rally verify``: each case must end with exit
code 2 and a one-line message (or, for the few edits that leave a well-formed file, a verdict),
never a traceback. The trust anchor: no edit of any field of an honest replay is accepted as a
run on another stage, under other rules or with another time.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest

from rally_env.cli import build_parser
from rally_env.config import RallyConfig
from rally_env.info import end_reason
from rally_env.replay import kwargs_to_env_args, verify
from rally_env.replay.verify import RULE_KEYS
from tests.rally_env.test_replay_support import record_run, tiny_stage

HUGE = 10**400
KINDS = ("wrong_type", "huge_int", "nan", "nesting", "empty")


def _paths(doc: Any, prefix: tuple = (), sample: bool = False) -> list[tuple]:
    """Every path into a JSON document (objects, lists and leaves; not the root); with
    ``sample``, of a list's entries only the first, middle and last (they are alike)."""
    out = []
    if isinstance(doc, dict):
        items = list(doc.items())
    elif isinstance(doc, list):
        items = list(enumerate(doc))
        if sample and len(items) > 3:
            items = [items[0], items[len(items) // 2], items[-1]]
    else:
        items = []
    for k, v in items:
        out.append((*prefix, k))
        out.extend(_paths(v, (*prefix, k), sample))
    return out


def _get(doc: Any, path: tuple) -> Any:
    for k in path:
        doc = doc[k]
    return doc


def _set(doc: Any, path: tuple, value: Any) -> Any:
    doc = json.loads(json.dumps(doc))
    parent = _get(doc, path[:-1])
    parent[path[-1]] = value
    return doc


def _mutant(v: Any, kind: str) -> Any:
    if kind == "wrong_type":
        if isinstance(v, str):
            return 123
        if isinstance(v, dict):
            return ["x"]
        if isinstance(v, list):
            return {"x": 1}
        return "x"  # numbers, booleans, null
    if kind == "huge_int":
        return HUGE
    if kind == "nan":
        return math.nan
    if kind == "nesting":
        for _ in range(500):
            v = [v]
        return v
    if isinstance(v, dict):
        return {}
    if isinstance(v, list):
        return []
    return ""


def _name(path: tuple) -> str:
    return ".".join(str(k) for k in path)


CASES = ("embedded", "v1", "library")


@pytest.fixture(scope="module")
def honest():
    """Three short honest replays with their verdicts: a finished run on an embedded stage
    with a checkpoint (Rally-v0), a finished randomized Rally-v1 rally-car run on it, and a
    partial run on a library stage."""
    stage = tiny_stage().replace(checkpoints_m=(50.0,))
    runs = {
        "embedded": record_run(seed=1, stage=stage),
        "v1": record_run(seed=2, stage=stage, version=1, vehicle="rally-car", randomize=True),
        "library": record_run(seed=0, max_steps=45, stage="skidpad"),
    }
    out = {}
    for name, (replay, info) in runs.items():
        assert (end_reason(info) == "finished") == (name != "library")
        rep = verify(replay)
        assert rep.accepted, rep.message
        out[name] = (replay.to_dict(), rep)
    return out


@pytest.fixture(scope="module")
def cli():
    """``rally verify FILE --json`` as the command line runs it (the parser built once)."""
    parser = build_parser()

    def run(path: Path) -> int:
        args = parser.parse_args(["verify", str(path), "--json"])
        return int(args.func(args))

    return run


def _filing(rep) -> tuple:
    return (
        rep.stage,
        rep.stage_digest,
        rep.rules,
        rep.standard,
        rep.control_hz,
        rep.finish_time_s,
        tuple(rep.checkpoint_times_s),
    )


def _run_verify(doc: Any, path: Path, capsys, cli) -> tuple[int, str, str, dict | None]:
    path.write_text(json.dumps(doc, allow_nan=True))
    rc = cli(path)
    out, err = capsys.readouterr()
    return rc, out, err, json.loads(out)


@pytest.mark.parametrize("which", ["embedded", "v1"])
def test_every_field_mutation_gives_exit_2_or_a_verdict_never_a_traceback(
    which, honest, tmp_path, capsys, cli
):
    doc, good = honest[which]
    paths = _paths(doc)
    assert len(paths) > 60
    allowed_verdicts = []
    for p in paths:
        v = _get(doc, p)
        for kind in KINDS:
            bad = _set(doc, p, _mutant(v, kind))
            rc, out, err, rep = _run_verify(bad, tmp_path / "m.rrp.json", capsys, cli)
            case = f"{_name(p)} <- {kind}"
            assert "Traceback" not in out + err, case
            assert rc in (0, 1, 2), case
            if rc == 2:
                assert rep["status"] == "unusable" and rep["message"], case
                assert "\n" not in rep["message"], case
            elif rc == 0:
                # only an edit that leaves the same run can verify, filed exactly as before
                assert _filing(_report(rep)) == _filing(good), case
                allowed_verdicts.append(f"{case}: accepted")
            else:
                allowed_verdicts.append(f"{case}: {rep['reason']}")
            if kind != "empty":
                assert rc == 2, f"{case}: exit {rc}, {rep['reason']}: {rep['message']}"
    # the well-formed edits: empty meta strings and settings emptied to their defaults (the same
    # run: accepted, filed as before), emptied claims (rejected); a few, not a class of fields
    assert len(allowed_verdicts) < len(paths) // 4, "\n".join(allowed_verdicts)


class _report:
    def __init__(self, d: dict):
        self.__dict__.update(d)


def _edits(v: Any) -> list[Any]:
    """Plausible honest-looking edits of a value (an attacker's, not a fuzzer's)."""
    if isinstance(v, bool):
        return [not v]
    if isinstance(v, int):
        return [v + 1, v - 1, 0, 2 * v + 1]
    if isinstance(v, float):
        return [v * (1 - 1e-12), v - 1.0, v + 1.0, 0.0, math.nextafter(v, -math.inf)]
    if isinstance(v, str):
        return ["opener", "sweepers", "gen-1", "random", "finished", v[::-1], v + "x"]
    if v is None:
        return [0.0, "opener"]
    if isinstance(v, list):
        return [v[:-1], v + v[-1:]] if v else []
    return []


@pytest.mark.parametrize("which", CASES)
def test_no_edit_moves_a_run_to_another_stage_rules_class_or_time(which, honest, tmp_path):
    doc, good = honest[which]
    accepted = []
    for p in _paths(doc, sample=True):
        v = _get(doc, p)
        for e in _edits(v):
            if e == v and type(e) is type(v):
                continue  # not an edit
            bad = _set(doc, p, e)
            path = tmp_path / "e.rrp.json"
            path.write_text(json.dumps(bad))
            try:
                rep = verify(path)
            except ValueError:
                continue  # unusable: refused
            if rep.accepted:
                assert _filing(rep) == _filing(good), f"{_name(p)} <- {e!r}"
                accepted.append(_name(p))
    # what did verify after an edit never touched a claim, a hash or the actions (a reset seed
    # may change: on a run without randomization every seed starts the same run)
    claims = ("result", "stage.", "hashes", "initial_hash", "final_hash", "actions")
    assert not [a for a in accepted if a.startswith(claims)], accepted


def _redigested(doc: dict) -> dict | None:
    """``doc`` with ``config_digest`` and ``vehicle_digest`` recomputed from its (edited)
    settings, as an attacker can (the algorithms are public); ``None`` if they build nothing."""
    try:
        cfg = RallyConfig.build(**kwargs_to_env_args(doc["env_kwargs"]))
    except ValueError:
        return None
    doc["config_digest"], doc["vehicle_digest"] = cfg.digest(), cfg.vehicle.digest()
    return doc


@pytest.mark.parametrize("which", CASES)
def test_recomputed_digests_move_no_run_either(which, honest, tmp_path):
    """The trust anchor against an attacker who also recomputes the settings' digests: an
    edited setting that still verifies is the same run, on the same stage, with the same
    times; it is filed under the rules its settings define (a run valid under other rules
    too) and never promoted into the standard class."""
    doc, good = honest[which]
    tried, moved = 0, []
    for p in _paths(doc["env_kwargs"], ("env_kwargs",), sample=True):
        v = _get(doc, p)
        for e in _edits(v):
            if e == v and type(e) is type(v):
                continue
            bad = _redigested(_set(doc, p, e))
            if bad is None:
                continue
            tried += 1
            path = tmp_path / "e.rrp.json"
            path.write_text(json.dumps(bad))
            try:
                rep = verify(path)
            except ValueError:
                continue
            if not rep.accepted:
                continue
            case = f"{_name(p)} <- {e!r}"
            assert _filing(rep)[:2] == _filing(good)[:2], case  # stage name and content
            assert _filing(rep)[4:] == _filing(good)[4:], case  # control rate and times
            if rep.rules != good.rules:
                assert p[1] in RULE_KEYS and not rep.standard, case
                moved.append(case)
    assert tried > 50
    assert all(not m.startswith("env_kwargs.stage") for m in moved), moved
