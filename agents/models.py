"""Trained models on disk: loading a model ``rally train`` saved, its metadata, and the map
between the policy's ``[-1, 1]`` action box and the env's actions.

Separate from :mod:`agents.sb3` (training), so evaluating or driving with a saved model never
needs the training code. stable-baselines3 is imported only inside :func:`load_model`.
"""

from __future__ import annotations

import io
import json
import pickle
import zipfile
from pathlib import Path
from typing import Any, NamedTuple

import gymnasium as gym
import numpy as np

from agents.heuristic import TUNE_NEUTRAL, HeuristicDriver, HeuristicParams
from rally_env.config import CONTROL_HZ_CHOICES
from rally_env.learn import env_to_policy_action
from rally_env.learn import policy_to_env_action as from_policy_action

#: Name of the metadata member ``rally train`` adds to a model zip; what it holds and the model
#: kinds, versions and files below: docs/agents.md, "Model files".
META_NAME = "rally_meta.json"
#: The env settings a model drives with (its metadata's ``"env"`` table).
OBS_ENV_KEYS = ("road_ahead", "control_hz")
#: Format and version of a policy ``rally train --algo rllib-ppo`` exports (``policy.json``).
EXPORT_FORMAT = "rally-mlp-policy"
EXPORT_VERSION = 2
#: Export versions :class:`ExportedPolicy` reads (1: no observation normalisation).
EXPORT_READS = (1, 2)
#: ``made_by`` of that metadata: the model acts in ``[-1, 1]^4`` (:func:`from_policy_action`).
MADE_BY = "rally train"
#: What a model zip holds, by its metadata's ``"kind"`` (none: ``"sb3"``).
MODEL_KINDS = ("sb3", "linear")
#: The member of a ``"linear"`` model zip holding its weights, and the versions read.
LINEAR_WEIGHTS = "weights.npz"
LINEAR_VERSIONS = (1,)


# ------------------------------------------------------------------------------- actions
# from_policy_action (imported above): policy actions in [-1, 1] -> env actions; a fresh policy
# (mean action 0) drives off at half throttle instead of standing on half brake
def to_policy_action(a: np.ndarray) -> np.ndarray:
    """Env actions -> the policy's ``[-1, 1]^4`` box (a right inverse of
    :func:`from_policy_action`: a zero brake maps to 0)."""
    a = np.asarray(a, dtype=np.float32)
    return np.concatenate((env_to_policy_action(a), a[..., 3:]), axis=-1)


def heuristic_targets(a_env: np.ndarray) -> np.ndarray:
    """Heuristic (env) actions -> regression targets in policy space.

    Like :func:`to_policy_action`, but a released brake / handbrake maps to -0.5 (not 0),
    so the cloned policy's exploration noise rarely touches the pedal it does not use.
    """
    y = to_policy_action(a_env)
    y[..., 2:] = np.where(a_env[..., 2:] > 0.0, a_env[..., 2:], np.float32(-0.5))
    return y


#: Base drivers and kinds of a residual policy (``rally_meta.json`` ``"residual"``; what
#: each does: docs/agents.md, "Training recipes").
RESIDUAL_BASES = ("heuristic", "heuristic-ahead")
RESIDUAL_KINDS = ("action", "tuning")
#: The longest a residual policy may hold its outputs (control steps).
MAX_HOLD = 200
#: Outputs of a ``"tuning"`` residual (``len(agents.heuristic.TUNE_FIELDS)``, tested).
TUNING_OUTPUTS = 4


class ResidualSpec(NamedTuple):
    """A residual policy's settings (``rally_meta.json``'s ``"residual"``).

    Attributes:
        base: the base driver (:data:`RESIDUAL_BASES`).
        scale: how far an output of 1 moves the base (see :data:`RESIDUAL_KINDS`).
        kind: what the outputs move (:data:`RESIDUAL_KINDS`).
        hold: the policy decides every ``hold`` control steps of an episode (from its first)
            and its outputs hold in between; the base driver acts at every step.
    """

    base: str
    scale: float
    kind: str = "action"
    hold: int = 1

    @property
    def n_outputs(self) -> int:
        """Width of the policy's output (its action box, ``[-1, 1]^n``)."""
        return 4 if self.kind == "action" else TUNING_OUTPUTS

    def to_meta(self) -> dict[str, Any]:
        """The metadata entry (``kind`` and ``hold`` only when not the defaults)."""
        d: dict[str, Any] = {"base": self.base, "scale": self.scale}
        if self.kind != "action" or self.hold != 1:
            d.update(kind=self.kind, hold=self.hold)
        return d


def residual_action(base: np.ndarray, a: np.ndarray, scale: float) -> np.ndarray:
    """A residual policy's env action: the base driver's env action ``base`` moved by the
    policy's output ``a`` (in ``[-1, 1]^4``) times ``scale``, in the policy's box.

    The base action goes to the policy box as the warm start's labels do (a released brake
    or handbrake reads -0.5, so a small residual leaves it released), so ``a = 0`` gives the
    base driver's action.
    """
    b = heuristic_targets(np.asarray(base, dtype=np.float32))
    a = np.clip(np.asarray(a, dtype=np.float32), -1.0, 1.0)
    return from_policy_action(b + np.float32(scale) * a)


class ResidualDriver:
    """The base driver of a residual policy, beside the network: ``act(obs, a)`` is the env
    action for observations ``obs`` (N, D) and the network's outputs ``a`` (N, n_outputs);
    the base keeps its per-episode memory, so call ``reset`` at the start of episodes, as
    for any policy.

    With ``hold`` > 1 a car takes the network's outputs at the first step of its episode
    and every ``hold`` steps after, and keeps them in between (``act`` ignores the others).
    A vector env that steps ``hold`` times per policy step instead sets them with
    :meth:`hold_outputs` and steps with :meth:`base_act`.

    ``control_hz``: the rate the base driver is tuned for (the env's decision rate).

    Raises:
        ValueError: an unknown base or kind, a scale outside (0, 2] or a bad hold.
    """

    def __init__(
        self, base: str, scale: float, kind: str = "action", hold: int = 1, control_hz: float = 20
    ):
        meta = {"residual": {"base": base, "scale": scale, "kind": kind, "hold": hold}}
        self.spec = residual_meta(meta)
        assert self.spec is not None
        self.base, self.scale, self.kind, self.hold = self.spec
        self.driver = HeuristicDriver(
            HeuristicParams(control_hz=control_hz), read_ahead=self.base == "heuristic-ahead"
        )
        self.reset(1)

    def reset(self, n: int = 1, mask: np.ndarray | None = None) -> None:
        """New episodes for all ``n`` cars, or for those in the bool array ``mask``: fresh
        driver memory and neutral outputs (0) until the car's next decision."""
        self.driver.reset(n, mask)
        if mask is None or self._held.shape[0] != n:
            self._held = np.zeros((n, self.spec.n_outputs), np.float32)
            self._tune = np.tile(np.array(TUNE_NEUTRAL), (n, 1))  # outputs 0: the base driver
            self._age = np.zeros(n, np.int64)
        else:
            m = np.asarray(mask, bool)
            self._held[m] = 0.0
            self._tune[m] = TUNE_NEUTRAL
            self._age[m] = 0

    def hold_outputs(self, a: np.ndarray, mask: np.ndarray | None = None) -> None:
        """Take the network's outputs ``a`` (N, n_outputs) for every car (or those in
        ``mask``) now."""
        a = np.clip(np.asarray(a, dtype=np.float32), -1.0, 1.0).reshape(-1, self.spec.n_outputs)
        n = a.shape[0]
        if self._held.shape[0] != n:
            self.reset(n)
        m = np.ones(n, bool) if mask is None else np.asarray(mask, bool)
        self._held[m] = a[m]
        if self.kind == "tuning":
            h = self._held[m].astype(np.float64)
            self._tune[m, :3] = np.exp(self.scale * h[:, :3])
            self._tune[m, 3] = h[:, 3]
        self._age[m] = 0

    def base_act(self, obs: np.ndarray) -> np.ndarray:
        """The env actions (N, 4) for ``obs`` with the outputs held now."""
        if self.kind == "tuning":
            return self.driver(obs, tune=self._tune)
        return residual_action(self.driver(obs), self._held, self.scale)

    def act(self, obs: np.ndarray, a: np.ndarray) -> np.ndarray:
        n = np.atleast_2d(obs).shape[0]
        if self._held.shape[0] != n:
            self.reset(n)
        self.hold_outputs(a, self._age % self.hold == 0)
        self._age += 1
        return self.base_act(obs)


def residual_meta(meta: dict[str, Any]) -> ResidualSpec | None:
    """The :class:`ResidualSpec` of a residual model's metadata, ``None`` for a plain model.

    Raises:
        ValueError: a ``"residual"`` entry with an unknown base or kind, a bad scale or hold.
    """
    r = meta.get("residual") if isinstance(meta, dict) else None
    if r is None:
        return None
    if not isinstance(r, dict) or r.get("base") not in RESIDUAL_BASES:
        raise ValueError(f"model metadata 'residual' must name a base in {RESIDUAL_BASES}: {r!r}")
    sc = r.get("scale")
    if isinstance(sc, bool) or not isinstance(sc, (int, float)) or not 0.0 < sc <= 2.0:
        raise ValueError(f"model metadata residual.scale must be in (0, 2], got {sc!r}")
    kind = r.get("kind", "action")
    if kind not in RESIDUAL_KINDS:
        raise ValueError(f"model metadata residual.kind must be one of {RESIDUAL_KINDS}: {kind!r}")
    hold = r.get("hold", 1)
    if isinstance(hold, bool) or not isinstance(hold, int) or not 1 <= hold <= MAX_HOLD:
        raise ValueError(
            f"model metadata residual.hold must be an integer in [1, {MAX_HOLD}]: {hold!r}"
        )
    return ResidualSpec(str(r["base"]), float(sc), str(kind), int(hold))


def normalize_obs(obs: np.ndarray, rms: tuple) -> np.ndarray:
    """Observations normalised as a saved model's ``VecNormalize`` statistics say: ``rms``
    is ``(mean, var, clip, epsilon)`` (:func:`load_model`'s ``obs_rms``, float64), computed in
    float64 and rounded to float32 once, exactly as ``VecNormalize.normalize_obs`` and the
    policy's input cast do in training."""
    mean, var, clip, eps = rms
    return np.clip((obs - mean) / np.sqrt(var + eps), -clip, clip).astype(np.float32)


# ------------------------------------------------------------------------------ loading
def write_meta(model_path: Path, meta: dict[str, Any]) -> None:
    """Add (or replace) :data:`META_NAME` in a model zip, marked ``made_by`` :data:`MADE_BY`
    with the policy action convention it was trained with."""
    meta = {"made_by": MADE_BY, "actions": "policy [-1, 1]^n (from_policy_action)", **meta}
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


def obs_env_kwargs(meta: dict[str, Any]) -> dict[str, Any]:
    """The observation settings (:data:`OBS_ENV_KEYS`) a model's metadata asks of its env.

    Raises:
        ValueError: an ``"env"`` entry that is not a table of known settings of the right type.
    """
    env = meta.get("env", {}) if isinstance(meta, dict) else {}
    if not isinstance(env, dict):
        raise ValueError(f"model metadata 'env' must be a table, got {type(env).__name__}")
    out: dict[str, Any] = {}
    for k, v in env.items():
        if k == "control_hz":
            if isinstance(v, bool) or v not in CONTROL_HZ_CHOICES:
                raise ValueError(
                    f"model metadata env.control_hz must be one of {CONTROL_HZ_CHOICES}, got {v!r}"
                )
            out[k] = int(v)
        elif k in OBS_ENV_KEYS:
            if not isinstance(v, bool):
                raise ValueError(f"model metadata env.{k} must be true or false, got {v!r}")
            out[k] = v
    return out


def obs_norm_meta(vn: Any) -> dict[str, Any]:
    """The observation normalisation of a ``VecNormalize`` as plain lists."""
    return {
        "mean": vn.obs_rms.mean.astype(float).tolist(),
        "var": vn.obs_rms.var.astype(float).tolist(),
        "clip_obs": float(vn.clip_obs),
        "epsilon": float(vn.epsilon),
    }


def load_model(path: str | Path):
    """``(model, obs_rms, meta)`` of a saved model, read as its metadata's ``"kind"`` says
    (:data:`MODEL_KINDS`).

    ``model`` acts through ``model.predict(obs, deterministic)`` on normalised observations
    and has an ``action_space``. ``obs_rms`` is ``(mean, var, clip, eps)`` from the zip's
    metadata, else from a ``vecnormalize.pkl`` beside the model, else ``None``.

    Raises:
        ValueError: an unknown kind or version, or a file that is not the model it says.
    """
    path = Path(path)
    meta = read_meta(path)
    kind = meta.get("kind", "sb3")
    if kind not in MODEL_KINDS:
        raise ValueError(f"{path}: model metadata kind must be one of {MODEL_KINDS}: {kind!r}")
    model = LinearModel.load(path, meta) if kind == "linear" else _load_sb3(path, meta)
    norm = meta.get("obs_norm")
    pickled = None if norm or kind != "sb3" else _vecnormalize_for(path)
    if pickled is not None:  # the statistics a model's run left beside it
        with pickled.open("rb") as f:
            vn = pickle.load(f)
        norm = obs_norm_meta(vn) if getattr(vn, "norm_obs", True) else None
    if not norm:
        return model, None, meta
    # in float64 as VecNormalize keeps them (the model acts as it did in training)
    mean, var = np.asarray(norm["mean"], np.float64), np.asarray(norm["var"], np.float64)
    return model, (mean, var, float(norm["clip_obs"]), float(norm["epsilon"])), meta


def _load_sb3(path: Path, meta: dict[str, Any]) -> Any:
    """The stable-baselines3 model of a zip: the class its metadata's ``algo`` names, else
    (a zip from outside ``rally train``) PPO, then SAC."""
    from stable_baselines3 import PPO, SAC

    algo = meta.get("algo")
    classes = {"ppo": PPO, "sac": SAC}
    err = None
    for cls in [classes[algo]] if algo in classes else [PPO, SAC]:
        try:
            return cls.load(str(path), device="cpu")
        except Exception as e:  # not this algorithm
            err = e
    raise ValueError(f"{path}: not a PPO/SAC model ({err})")


class LinearModel:
    """A ``"linear"`` model (:data:`MODEL_KINDS`): ``predict(z) = clip(W z + b, -1, 1)`` on
    normalised observations ``z``, computed by torch's float32 ``linear``."""

    def __init__(self, weight: np.ndarray, bias: np.ndarray):
        self.weight = np.asarray(weight, np.float32)
        self.bias = np.asarray(bias, np.float32)
        if self.weight.ndim != 2 or self.bias.shape != (self.weight.shape[0],):
            raise ValueError(
                f"linear model weights must be (n, D) and (n,), got {self.weight.shape} and "
                f"{self.bias.shape}"
            )
        self.action_space = gym.spaces.Box(-1.0, 1.0, (self.weight.shape[0],), np.float32)

    @classmethod
    def load(cls, path: Path, meta: dict[str, Any]) -> LinearModel:
        version = meta.get("version")
        if version not in LINEAR_VERSIONS:
            raise ValueError(f"{path}: linear model version {version!r} unknown")
        with zipfile.ZipFile(path, "r") as z:
            if LINEAR_WEIGHTS not in z.namelist():
                raise ValueError(f"{path}: a linear model without {LINEAR_WEIGHTS}")
            data = z.read(LINEAR_WEIGHTS)
        with np.load(io.BytesIO(data), allow_pickle=False) as w:
            return cls(w["weight"], w["bias"])

    def save(self, path: Path, meta: dict[str, Any]) -> Path:
        """Write the zip: the weights and :data:`META_NAME` (``meta``, kind and version)."""
        buf = io.BytesIO()
        np.savez(buf, weight=self.weight, bias=self.bias)
        path = Path(path)
        with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED) as z:
            z.writestr(LINEAR_WEIGHTS, buf.getvalue())
        write_meta(path, {**meta, "kind": "linear", "version": LINEAR_VERSIONS[-1]})
        return path

    def predict(self, obs: np.ndarray, deterministic: bool = True) -> tuple[np.ndarray, None]:
        import torch

        x = torch.as_tensor(np.atleast_2d(np.asarray(obs, np.float32)))
        y = torch.nn.functional.linear(x, torch.as_tensor(self.weight), torch.as_tensor(self.bias))
        return np.clip(y.numpy(), -1.0, 1.0), None


def ship_model(src: str | Path, dst: str | Path) -> Path:
    """Copy a model zip for shipping in ``agents/policies/``: the optimizer's running moments
    are zeroed (they only matter to resume training, and zeros compress to nothing), every
    other member is kept as it is (a ``"linear"`` model, plain weights, is copied as it is).
    Loading and acting are unchanged.

    Raises:
        ValueError: ``src`` is not a model zip with an optimizer state.
    """
    import torch

    src, dst = Path(src), Path(dst)
    with zipfile.ZipFile(src, "r") as z:
        members = {n: z.read(n) for n in z.namelist()}
    if read_meta(src).get("kind") == "linear":  # plain weights: nothing to drop
        dst.parent.mkdir(parents=True, exist_ok=True)
        dst.write_bytes(src.read_bytes())
        return dst
    if "policy.optimizer.pth" not in members:
        raise ValueError(f"{src}: no policy.optimizer.pth (not a stable-baselines3 model?)")
    state = torch.load(io.BytesIO(members["policy.optimizer.pth"]), weights_only=True)
    for per_param in state.get("state", {}).values():
        for k, v in per_param.items():
            if torch.is_tensor(v) and k != "step":
                v.zero_()
    buf = io.BytesIO()
    torch.save(state, buf)
    members["policy.optimizer.pth"] = buf.getvalue()
    dst.parent.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(dst, "w", compression=zipfile.ZIP_DEFLATED, compresslevel=9) as z:
        for n, data in members.items():
            z.writestr(n, data)
    return dst


def _vecnormalize_for(ckpt: Path) -> Path | None:
    # CheckpointCallback: ppo_100000_steps.zip + ppo_vecnormalize_100000_steps.pkl
    parts = ckpt.stem.rsplit("_", 2)
    if len(parts) == 3 and parts[2] == "steps":
        cand = ckpt.with_name(f"{parts[0]}_vecnormalize_{parts[1]}_steps.pkl")
        if cand.exists():
            return cand
    cand = ckpt.with_name("vecnormalize.pkl")
    return cand if cand.exists() else None


# ------------------------------------------------------------------- exported MLP policies
class ExportedPolicy:
    """A policy :func:`export_policy` wrote: ``policy(obs (N, D)) -> actions (N, 4)``, numpy
    only (``rally eval --agent DIR/policy.json``).

    Raises:
        ValueError: not such a file, or arrays that do not fit its description.
    """

    def __init__(self, path: str | Path):
        p = Path(path)
        if p.is_dir():
            p = p / "policy.json"
        try:
            doc = json.loads(p.read_text())
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
            raise ValueError(f"{p}: not an exported policy ({e})") from None
        if not isinstance(doc, dict) or doc.get("format") != EXPORT_FORMAT:
            raise ValueError(f"{p}: not an exported policy (format {EXPORT_FORMAT!r})")
        if doc.get("version") not in EXPORT_READS:
            raise ValueError(f"{p}: exported policy version {doc.get('version')!r} unknown")
        norm = doc.get("obs_norm")
        with np.load(p.with_name("policy.npz"), allow_pickle=False) as z:
            n = int(doc["layers"])
            self.layers = [
                (z[f"w{i}"].astype(np.float32), z[f"b{i}"].astype(np.float32)) for i in range(n)
            ]
            self.obs_norm = None
            if norm is not None:
                mean = z["obs_mean"].astype(np.float64)
                std = z["obs_std"].astype(np.float64)
                if mean.shape != (int(doc["obs_dim"]),) or std.shape != mean.shape:
                    raise ValueError(f"{p}: observation statistics do not fit obs_dim")
                self.obs_norm = (mean, std + float(norm["eps"]), float(norm["clip"]))
        prev = int(doc["obs_dim"])
        for w, b in self.layers:
            if w.ndim != 2 or w.shape[1] != prev or b.shape != (w.shape[0],):
                raise ValueError(f"{p}: layer shapes do not chain")
            prev = w.shape[0]
        if prev != 2 * int(doc["action_dim"]):
            raise ValueError(f"{p}: the head gives {prev} values, not mean and log-std")
        self.act = np.tanh if doc["activation"] == "tanh" else (lambda x: np.maximum(x, 0.0))
        self.meta = doc
        self.name = str(doc.get("name") or p.parent.name)

    def reset(self, n: int = 1) -> None:
        pass

    def __call__(self, obs: np.ndarray) -> np.ndarray:
        x = np.atleast_2d(np.asarray(obs, dtype=np.float32))
        if self.obs_norm is not None:  # as RLlib's MeanStdFilter: float64, clipped, float32
            mean, std, clip = self.obs_norm
            x = np.clip((x - mean) / std, -clip, clip).astype(np.float32)
        last = len(self.layers) - 1
        for i, (w, b) in enumerate(self.layers):
            x = x @ w.T + b
            if i < last:
                x = self.act(x)
        a = from_policy_action(x[:, :4].astype(np.float32))
        return a if np.ndim(obs) > 1 else a[0]
