"""The RLlib run's observation statistics come from an env runner's public state: the
MeanStdFilter piece of its env-to-module pipeline (no Ray needed to read such a state)."""

from __future__ import annotations

from types import SimpleNamespace

from agents.rllib import filter_state_stats


def _from_state(s):
    return SimpleNamespace(num_pushes=s["n"], mean=s["mean"], std=s["std"])


def test_the_filters_first_agent_gives_mean_and_std():
    state = {
        "AddObservationsFromEpisodesToBatch": {},
        "MeanStdFilter": {
            "default_agent": {"running_stats": [{"n": 5, "mean": [1, 2], "std": [3, 4]}]}
        },
    }
    assert filter_state_stats(state, _from_state) == ([1.0, 2.0], [3.0, 4.0])


def test_no_filter_or_too_little_seen_gives_none():
    assert filter_state_stats({}, _from_state) is None
    assert filter_state_stats({"MeanStdFilter": {}}, _from_state) is None
    one = {"MeanStdFilter": {"a": {"running_stats": [{"n": 1, "mean": [0], "std": [1]}]}}}
    assert filter_state_stats(one, _from_state) is None
