"""Trained models on disk: loading a model ``rally train`` saved, its metadata, and the map
between the policy's ``[-1, 1]`` action box and the env's actions.

Separate from :mod:`agents.sb3` (training), so evaluating or driving with a saved model never
needs the training code. stable-baselines3 is imported only inside :func:`load_model`.
"""

from __future__ import annotations

import json
import zipfile
from pathlib import Path
from typing import Any

import numpy as np

#: Name of the metadata member ``rally train`` adds to a model zip (normalisation, config).
META_NAME = "rally_meta.json"
#: ``made_by`` of that metadata: the model acts in ``[-1, 1]^4`` and needs
#: :func:`from_policy_action` (``rally eval`` applies it only to such models).
MADE_BY = "rally train"


# ------------------------------------------------------------------------------- actions
def from_policy_action(a: np.ndarray) -> np.ndarray:
    """Policy actions in ``[-1, 1]`` -> env actions.

    Steer as is; throttle ``(a + 1) / 2``; brake and handbrake ``max(a, 0)`` (the lower half
    of their range is "off", so a fresh policy, whose mean action is 0, drives off instead
    of standing on half brake).
    """
    a = np.clip(np.asarray(a, dtype=np.float32), -1.0, 1.0)
    out = a.copy()
    out[..., 1] = (a[..., 1] + np.float32(1.0)) * np.float32(0.5)
    out[..., 2:] = np.maximum(a[..., 2:], np.float32(0.0))
    return out


def to_policy_action(a: np.ndarray) -> np.ndarray:
    """Env actions -> the policy's ``[-1, 1]`` box (a right inverse of
    :func:`from_policy_action`: a zero brake maps to 0)."""
    a = np.asarray(a, dtype=np.float32)
    out = a.copy()
    out[..., 1] = a[..., 1] * np.float32(2.0) - np.float32(1.0)
    return out


# ------------------------------------------------------------------------------ loading
def write_meta(model_path: Path, meta: dict[str, Any]) -> None:
    """Add (or replace) :data:`META_NAME` in a model zip, marked ``made_by`` :data:`MADE_BY`
    with the policy action convention it was trained with."""
    meta = {"made_by": MADE_BY, "actions": "policy [-1, 1]^4 (from_policy_action)", **meta}
    model_path = Path(model_path)
    with zipfile.ZipFile(model_path, "r") as z:
        members = {n: z.read(n) for n in z.namelist() if n != META_NAME}
    with zipfile.ZipFile(model_path, "w", compression=zipfile.ZIP_DEFLATED) as z:
        for n, data in members.items():
            z.writestr(n, data)
        z.writestr(META_NAME, json.dumps(meta, indent=1))


def made_by_rally_train(meta: dict[str, Any]) -> bool:
    """Whether a model's :data:`META_NAME` says ``rally train`` made it (``made_by``; models
    from before that field carry ``algo`` and ``obs_norm``, which only ``rally train``
    writes)."""
    if not isinstance(meta, dict) or not meta:
        return False
    if "made_by" in meta:
        return meta["made_by"] == MADE_BY
    return "algo" in meta and "obs_norm" in meta


def read_meta(model_path: Path) -> dict[str, Any]:
    """The rally metadata stored in a saved model (``{}`` when it has none).

    Raises:
        ValueError: the file is not a zip archive (naming it).
    """
    try:
        with zipfile.ZipFile(model_path, "r") as z:
            if META_NAME not in z.namelist():
                return {}
            return json.loads(z.read(META_NAME))
    except (zipfile.BadZipFile, IsADirectoryError) as e:
        raise ValueError(f"{model_path}: not a saved model (a .zip archive): {e}") from None


def obs_norm_meta(vn: Any) -> dict[str, Any]:
    """The observation normalisation of a ``VecNormalize`` as plain lists."""
    return {
        "mean": vn.obs_rms.mean.astype(float).tolist(),
        "var": vn.obs_rms.var.astype(float).tolist(),
        "clip_obs": float(vn.clip_obs),
        "epsilon": float(vn.epsilon),
    }


def load_model(path: str | Path):
    """``(model, obs_rms, meta)`` of a model saved by :func:`train`.

    ``obs_rms`` is ``(mean, var, clip, eps)`` from the zip's metadata, else from a
    ``vecnormalize.pkl`` beside the model, else ``None``.
    """
    import pickle

    from stable_baselines3 import PPO, SAC

    path = Path(path)
    meta = read_meta(path)
    algo = meta.get("algo")
    classes = {"ppo": PPO, "sac": SAC}
    order = [classes[algo]] if algo in classes else [PPO, SAC]
    model, err = None, None
    for cls in order:
        try:
            model = cls.load(str(path), device="cpu")
            break
        except Exception as e:  # not this algorithm
            err = e
    if model is None:
        raise ValueError(f"{path}: not a PPO/SAC model ({err})")
    rms = None
    norm = meta.get("obs_norm")
    if norm:
        rms = (
            np.asarray(norm["mean"], np.float32),
            np.asarray(norm["var"], np.float32),
            float(norm["clip_obs"]),
            float(norm["epsilon"]),
        )
    else:
        for cand in (_vecnormalize_for(path) or path.with_name("vecnormalize.pkl"),):
            if cand.exists():
                with cand.open("rb") as f:
                    vn = pickle.load(f)
                if getattr(vn, "norm_obs", True):
                    m = obs_norm_meta(vn)
                    rms = (
                        np.asarray(m["mean"], np.float32),
                        np.asarray(m["var"], np.float32),
                        m["clip_obs"],
                        m["epsilon"],
                    )
                break
    return model, rms, meta


def _vecnormalize_for(ckpt: Path) -> Path | None:
    # CheckpointCallback: ppo_100000_steps.zip + ppo_vecnormalize_100000_steps.pkl
    name = ckpt.stem
    parts = name.rsplit("_", 2)
    if len(parts) == 3 and parts[2] == "steps":
        cand = ckpt.with_name(f"{parts[0]}_vecnormalize_{parts[1]}_steps.pkl")
        if cand.exists():
            return cand
    cand = ckpt.with_name("vecnormalize.pkl")
    return cand if cand.exists() else None
