"""The numpy policy of an RLlib export (``agents.models.ExportedPolicy``): its layers, the
observation statistics of version 2, and files it must refuse. (The export from a trained
RLlib module is tested with Ray in tests/ray/test_rllib.py.)"""

from __future__ import annotations

import json

import numpy as np
import pytest

from agents.models import EXPORT_FORMAT, ExportedPolicy, from_policy_action

OBS_DIM = 5


def _write(d, version=2, norm=True, mean_shape=(OBS_DIM,)):
    rng = np.random.default_rng(1)
    w0 = rng.normal(size=(3, OBS_DIM)).astype(np.float32)
    b0 = rng.normal(size=3).astype(np.float32)
    w1 = rng.normal(size=(8, 3)).astype(np.float32)
    b1 = rng.normal(size=8).astype(np.float32)
    arrays = {"w0": w0, "b0": b0, "w1": w1, "b1": b1}
    doc = {
        "format": EXPORT_FORMAT,
        "version": version,
        "layers": 2,
        "activation": "tanh",
        "obs_dim": OBS_DIM,
        "action_dim": 4,
        "obs_norm": None,
    }
    if norm:
        arrays["obs_mean"] = np.linspace(-1.0, 1.0, mean_shape[0])
        arrays["obs_std"] = np.full(mean_shape, 0.5)
        doc["obs_norm"] = {"eps": 1e-8, "clip": 10.0}
    np.savez(d / "policy.npz", **arrays)
    (d / "policy.json").write_text(json.dumps(doc))
    return arrays


def _mlp(arrays, x):
    h = np.tanh(x @ arrays["w0"].T + arrays["b0"])
    return from_policy_action((h @ arrays["w1"].T + arrays["b1"])[:, :4].astype(np.float32))


def test_observations_are_normalised_as_rllibs_filter_does(tmp_path):
    arrays = _write(tmp_path)
    obs = np.array([[0.0, 1.0, 2.0, 50.0, -50.0]], np.float32)
    got = ExportedPolicy(tmp_path / "policy.json")(obs)
    seen = (obs - arrays["obs_mean"]) / (arrays["obs_std"] + 1e-8)
    seen = np.clip(seen, -10.0, 10.0).astype(np.float32)  # 50 and -50 are clipped
    np.testing.assert_array_equal(got, _mlp(arrays, seen))
    assert not np.array_equal(got, _mlp(arrays, obs))
    # one observation in, one action out
    assert ExportedPolicy(tmp_path)(obs[0]).shape == (4,)


def test_version_1_files_still_read_without_normalisation(tmp_path):
    arrays = _write(tmp_path, version=1, norm=False)
    obs = np.ones((2, OBS_DIM), np.float32)
    np.testing.assert_array_equal(ExportedPolicy(tmp_path)(obs), _mlp(arrays, obs))


@pytest.mark.parametrize(
    ("kw", "match"),
    [({"version": 3}, "version 3 unknown"), ({"mean_shape": (4,)}, "do not fit obs_dim")],
)
def test_bad_files_are_refused(tmp_path, kw, match):
    _write(tmp_path, **kw)
    with pytest.raises(ValueError, match=match):
        ExportedPolicy(tmp_path)
