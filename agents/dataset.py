"""Offline-RL datasets: record an agent's episodes as a Minari dataset (``rally dataset``;
what a dataset holds and why Minari can store it: docs/agents.md, "Datasets"). Needs the
``minari`` extra (``minari[hdf5,create]``).
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Callable, Sequence
from typing import Any

import gymnasium as gym

from agents.evaluate import resolve_stages
from agents.policies import act_one, make_policy, policy_name, reset_policy
from rally_env.config import ENV_IDS
from rally_env.env import RallyEnv

#: How many seeds to try per wanted episode when several stages share one env (each reset
#: draws its stage from the seed; episodes are kept until every stage has its share).
SEED_TRIES_PER_EPISODE = 200


def _env_id(env_kwargs: dict[str, Any]) -> str:
    return "rally_env:" + ENV_IDS[int(env_kwargs.get("version", 0) or 0)]


def plan_seeds(
    stages: Sequence[Any], episodes: int, seed: int, env_kwargs: dict[str, Any] | None = None
) -> list[int]:
    """Reset seeds that give each of ``stages`` exactly ``episodes`` episodes, from ``seed`` up.

    With one stage these are ``seed, seed + 1, ...``. With several, the dataset's env takes the
    stage list and draws one per reset from the seed, so the seeds are found by resetting a
    plain env with the same arguments (only its reset is run).

    Raises:
        ValueError: a stage is never drawn within the search budget.
    """
    if len(stages) == 1:
        return list(range(seed, seed + episodes))
    probe = RallyEnv(stage=list(stages), **(env_kwargs or {}))
    want = [episodes] * len(stages)
    out: list[int] = []
    budget = SEED_TRIES_PER_EPISODE * episodes * len(stages)
    for s in range(seed, seed + budget):
        i = int(probe.reset(seed=s)[1]["stage_index"])
        if want[i] > 0:
            want[i] -= 1
            out.append(s)
            if not any(want):
                return out
    missing = [str(stages[i]) for i, w in enumerate(want) if w]
    raise ValueError(f"no seed in [{seed}, {seed + budget}) draws stage(s) {', '.join(missing)}")


def record_dataset(
    agent: Any,
    stages: str | Sequence[Any],
    episodes: int,
    dataset_id: str,
    *,
    seed: int = 0,
    env_kwargs: dict[str, Any] | None = None,
    data_dir: str | os.PathLike[str] | None = None,
    max_steps: int | None = None,
    on_episode: Callable[[int], None] | None = None,
) -> Any:
    """Drive ``agent`` for ``episodes`` episodes on each stage and save a Minari dataset.

    Args:
        agent: an ``--agent`` value or a policy callable.
        stages: ``"opener,forest"``, ``"library"``, ``"random:N"`` or a list
            (:func:`agents.evaluate.resolve_stages`).
        episodes: episodes per stage (>= 1).
        dataset_id: the Minari name, ``[namespace/]name-v<N>`` (e.g. ``rally/opener-v0``).
        seed: the first reset seed.
        env_kwargs: more env arguments (``vehicle``, ``version``, ``control_hz``, ...).
        data_dir: the Minari datasets root (default: Minari's, ``MINARI_DATASETS_PATH`` or
            ``~/.minari/datasets``).
        max_steps: cut every episode after this many steps (default: the env's own end).
        on_episode: called with each episode's step count as it ends (a progress bar).

    Returns:
        The :class:`minari.MinariDataset`.

    Raises:
        ValueError: bad arguments, or a dataset of that name exists already (nothing written).
        ImportError: Minari (or its hdf5 / create extras) is not installed.
    """
    try:
        import minari
        from minari import DataCollector
    except ImportError as e:
        raise ImportError(
            f'rally dataset needs Minari ({e}); pip install "rally-env[minari]"'
        ) from None
    if isinstance(episodes, bool) or not isinstance(episodes, int) or episodes < 1:
        raise ValueError(f"episodes must be an integer >= 1, got {episodes!r}")
    _check_dataset_id(dataset_id)
    if data_dir is not None:
        os.environ["MINARI_DATASETS_PATH"] = os.fspath(data_dir)
    if dataset_id in minari.list_local_datasets():
        raise ValueError(
            f"a dataset named {dataset_id!r} exists already (remove it with "
            f"`minari delete {dataset_id}` or pick another name)"
        )
    stage_list = resolve_stages(stages)
    kwargs = dict(env_kwargs or {})
    seeds = plan_seeds(stage_list, episodes, int(seed), kwargs)
    kwargs["stage"] = stage_list[0] if len(stage_list) == 1 else list(stage_list)
    policy = make_policy(agent, seed=int(seed))
    label = policy_name(policy, agent)
    env = DataCollector(gym.make(_env_id(kwargs), **kwargs), record_infos=True)
    try:
        for s in seeds:
            steps = _episode(env, policy, s, max_steps)
            if on_episode is not None:
                on_episode(steps)
        ds = env.create_dataset(
            dataset_id=dataset_id,
            algorithm_name=label,
            author="rally-env",
            description=(
                f"{label} on {', '.join(map(str, stage_list))}: {episodes} episode(s) per stage, "
                f"reset seeds {seeds[0]}..{seeds[-1]}; env {_env_id(kwargs)} {json.dumps(kwargs)}"
            ),
            requirements=["rally-env"],
        )
    finally:
        env.close()
    ds.storage.update_metadata(
        {
            "rally_agent": label,
            "rally_stages": [str(s) for s in stage_list],
            "rally_seeds": seeds,
            "rally_episodes_per_stage": episodes,
        }
    )
    return ds


def _episode(env: Any, policy: Any, seed: int, max_steps: int | None) -> int:
    """Drive one episode; returns its step count."""
    obs, _ = env.reset(seed=seed)
    reset_policy(policy)
    steps = 0
    while True:
        obs, _, term, trunc, _ = env.step(act_one(policy, obs))
        steps += 1
        if term or trunc or (max_steps is not None and steps >= max_steps):
            return steps


def _check_dataset_id(dataset_id: Any) -> None:
    ok = isinstance(dataset_id, str) and re.fullmatch(
        r"(?:[A-Za-z0-9_.-]+/)*[A-Za-z0-9_.-]+-v\d+", dataset_id
    )
    if not ok:
        raise ValueError(
            f"dataset name {dataset_id!r} must look like [namespace/]name-v<N>, "
            "e.g. rally/opener-heuristic-v0"
        )
