"""The renderer: frames, pixels at the car's pose, HUD, ghosts, headless use, no side effects."""

from __future__ import annotations

import math
import os
import subprocess
import sys
from pathlib import Path

os.environ.setdefault("SDL_VIDEODRIVER", "dummy")

import numpy as np
import pytest
from gymnasium.error import DependencyNotInstalled

import tracks
from physics import ROVER
from rally_env import RallyEnv, RallyVectorEnv
from rally_env.render import (
    CarView,
    EnvRenderer,
    HudInfo,
    Renderer,
    car_views,
    usage_color,
)
from rally_env.render import renderer as R
from rally_env.render.video import lerp_view

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def opener():
    st = tracks.load_stage("opener")
    return st, tracks.bake(st)


def _close(a, b, tol=12):
    return int(np.max(np.abs(np.asarray(a, int) - np.asarray(b, int)))) <= tol


def _pose_car(stage, ds=40.0, lateral=0.0, heading_offset=0.0, **kw) -> CarView:
    p = stage.path
    s = stage.start_s_m + ds
    x, y = (float(v) for v in p.point_at(s))
    tx, ty = (float(v) for v in p.tangent_at(s))
    h = math.atan2(ty, tx) + heading_offset
    return CarView.from_pose(x - ty * lateral, y + tx * lateral, h, **kw)


# ----------------------------------------------------------------------------- frames


def test_import_never_loads_pygame():
    code = (
        "import sys, rally_env, rally_env.render, rally_env.cli, rally_env.render.play; "
        "assert 'pygame' not in sys.modules, 'pygame imported'"
    )
    subprocess.run([sys.executable, "-c", code], check=True, cwd=REPO)


@pytest.mark.parametrize(("w", "h", "camera"), [(600, 400, "car-up"), (201, 151, "north-up")])
def test_frame_shape_and_dtype(opener, w, h, camera):
    st, terr = opener
    r = Renderer(st, terr, width=w, height=h, camera=camera)
    car = _pose_car(st)
    f = r.draw(car, hud=HudInfo(speed_mps=10.0, stage_length_m=st.timed_length_m))
    assert f.shape == (h, w, 3)
    assert f.dtype == np.uint8
    assert f.std() > 5.0  # not a blank frame
    f2 = r.draw(None)  # no car: camera at the start line
    assert f2.shape == (h, w, 3)


def test_car_pixels_where_its_pose_projects(opener):
    """North-up: the body is at the car's position, the cab towards its heading, a second car
    at its own offset, all computed here from the pose with the camera's documented mapping."""
    st, terr = opener
    r = Renderer(st, terr, width=600, height=400, camera="north-up", hud=False)
    heading = 0.7
    car = _pose_car(st, heading_offset=heading - _pose_car(st).heading_rad)
    ppm = 600 / R.VIEW_WIDTH_M
    ax, ay = 300.0, 200.0  # north-up: the focused car at the frame centre

    def px(x, y):  # world -> pixel, north-up: x right, y up
        return int(ax + (x - car.x_m) * ppm), int(ay - (y - car.y_m) * ppm)

    other = CarView.from_pose(car.x_m + 12.0, car.y_m - 7.0, -1.0)
    bare = r.draw(car)
    both = r.draw(car, others=[other])
    # body colour at the CG (between the cab and the rear)
    i, j = px(car.x_m - 1.0 * math.cos(heading), car.y_m - 1.0 * math.sin(heading))
    assert _close(bare[j, i], R._BODY_RGB), bare[j, i]
    # the cab (blue) 1.1 m ahead along the heading
    i, j = px(car.x_m + 1.1 * math.cos(heading), car.y_m + 1.1 * math.sin(heading))
    assert _close(bare[j, i], R._CAB_RGB, 25), bare[j, i]
    # 5 m behind the car: no car there (background)
    i, j = px(car.x_m - 5.0 * math.cos(heading), car.y_m - 5.0 * math.sin(heading))
    assert not _close(bare[j, i], R._BODY_RGB, 40)
    # the other car: translucent blue over the background exactly where it projects
    i, j = px(other.x_m, other.y_m)
    a, b = bare[j, i].astype(int), both[j, i].astype(int)
    assert b[2] - a[2] > 40 and abs(int(b[2]) - int(b[0])) > 30, (a, b)
    # and nowhere far from it
    changed = np.argwhere(np.any(bare != both, axis=2))
    d = np.hypot(changed[:, 1] - (ax + 12.0 * ppm), changed[:, 0] - (ay + 7.0 * ppm))
    assert d.max() < 3.2 * ppm


def test_car_up_camera_turns_with_the_car(opener):
    st, terr = opener
    r = Renderer(st, terr, width=400, height=300, camera="car-up", hud=False, camera_lag_s=0.0)
    car = _pose_car(st, heading_offset=0.4)
    f = r.draw(car)
    ax, ay = r.camera.ax, r.camera.ay
    ppm = r.ppm
    # the cab is straight up the screen from the anchor, whatever the heading
    assert _close(f[int(ay - 1.1 * ppm), int(ax)], R._CAB_RGB, 25)
    assert _close(f[int(ay + 1.0 * ppm), int(ax)], R._BODY_RGB)
    # a ghost 10 m ahead of the car appears 10 m straight up
    h = car.heading_rad
    g = CarView.from_pose(car.x_m + 10 * math.cos(h), car.y_m + 10 * math.sin(h), h)
    sx, sy = r.world_to_screen(g.x_m, g.y_m)
    assert abs(sx - ax) < 1e-6 and abs(sy - (ay - 10 * ppm)) < 1e-6
    f2 = r.draw(car, ghosts=[g])
    j, i = int(ay - 10 * ppm), int(ax)
    assert f2[j, i].astype(int).sum() > f[j, i].astype(int).sum() + 60  # white, translucent
    # the camera's two mappings invert each other
    wx, wy = r.camera.to_world(*r.camera.to_screen(123.4, -56.7))
    assert abs(wx - 123.4) < 1e-9 and abs(wy + 56.7) < 1e-9


def test_wheels_coloured_by_friction_usage(opener):
    st, terr = opener
    r = Renderer(st, terr, width=600, height=400, camera="north-up", hud=False, zoom=3.0)
    base = _pose_car(st)
    car = CarView(
        **{f: getattr(base, f) for f in base.__dataclass_fields__ if f != "usage"},
        usage=np.array([0.0, 0.0, 1.0, 1.0]),
    )
    f = r.draw(car)
    sx, sy = r.world_to_screen(car.wheel_xy_m[:, 0], car.wheel_xy_m[:, 1])
    for w, want in enumerate([(40, 200, 90), (40, 200, 90), (235, 35, 35), (235, 35, 35)]):
        assert _close(f[int(sy[w]), int(sx[w])], want, 20), (w, f[int(sy[w]), int(sx[w])])
    assert usage_color(0.0) == (40, 200, 90) and usage_color(1.0) == (235, 35, 35)
    assert usage_color(float("nan")) == R._AIR_RGB


def test_skid_marks_where_wheels_slide(opener):
    st, terr = opener
    r = Renderer(st, terr, width=300, height=200, camera="north-up", hud=False)
    cars = []
    for k in range(12):
        c = _pose_car(st, ds=40.0 + 0.5 * k, time_s=0.05 * k, speed_mps=10.0)
        sliding = CarView(
            **{f: getattr(c, f) for f in c.__dataclass_fields__ if f != "usage"},
            usage=np.array([0.2, 0.2, 1.0, 1.0]),
        )
        cars.append(sliding)
    for c in cars:
        r.draw(c)
    m = r._marks["car"]
    assert m.count == 2 * (len(cars) - 1)  # the two sliding wheels, one segment per frame
    r.reset()
    assert m.count == 0


def test_camera_and_argument_errors(opener):
    st, terr = opener
    with pytest.raises(ValueError, match="camera"):
        Renderer(st, terr, camera="sideways")
    with pytest.raises(ValueError, match="zoom"):
        Renderer(st, terr, zoom=0.0)
    with pytest.raises(ValueError, match="width"):
        Renderer(st, terr, width=3)
    assert Renderer(st, terr, width=64, height=48, camera="chase").camera_mode == "car-up"


# ----------------------------------------------------------------------------- the env


def _rgb_env(**kw):
    """A Rally-v0 env with render_mode rgb_array whose render() draws frames.

    Until ``RallyEnv.render`` is wired to :class:`EnvRenderer` (a few lines in env.py, see
    docs/render.md), the same delegation is attached here, so these tests exercise exactly
    what the env will do.
    """
    env = RallyEnv(render_mode="rgb_array", **kw)
    env.reset(seed=0)
    try:
        env.render()
    except NotImplementedError:
        er = EnvRenderer("rgb_array", env.metadata["render_fps"], width=240, height=160)
        env.render = lambda: er.render(env.core)
    return env


def test_rendering_never_changes_the_simulation():
    acts = np.tile(np.array([0.3, 1.0, 0.0, 0.0], np.float32), (60, 1))
    acts[30:, 0] = -0.6
    plain = RallyEnv(stage="opener")
    shown = _rgb_env(stage="opener")
    plain.reset(seed=3)
    shown.reset(seed=3)
    for a in acts:
        plain.step(a)
        before = shown.core.sim.state_hash()
        frame = shown.render()
        assert shown.core.sim.state_hash() == before
        assert frame.ndim == 3 and frame.shape[2] == 3 and frame.dtype == np.uint8
        shown.step(a)
    assert plain.core.sim.state_hash() == shown.core.sim.state_hash()
    assert np.array_equal(plain.core.obs, shown.core.obs)
    assert plain.get_state()["digest"] == shown.get_state()["digest"]


def test_vector_env_draws_the_other_cars():
    env = RallyVectorEnv(num_envs=3, stage="opener")
    env.reset(seed=0)
    a = np.tile(np.array([0.0, 1.0, 0.0, 0.0], np.float32), (3, 1))
    a[1, 0] = 0.5
    for _ in range(20):
        env.step(a)
    er = EnvRenderer("rgb_array", 20, width=240, height=160)
    solo = EnvRenderer("rgb_array", 20, width=240, height=160, show_others=False)
    h = env.core.sim.state_hash()
    f, g = er.render(env.core), solo.render(env.core)
    assert env.core.sim.state_hash() == h
    assert f.shape == (160, 240, 3)
    assert np.any(f != g)  # the other two cars are drawn
    f1 = er.render(env.core, focus=1)
    assert f1.shape == (160, 240, 3)


def test_human_mode_shows_a_window_headless():
    env = RallyEnv(stage="opener")
    env.reset(seed=0)
    er = EnvRenderer("human", 1000.0, width=160, height=120)
    assert er.render(env.core) is None
    assert er.window is not None and er.window.screen.get_size() == (160, 120)
    er.close()
    with pytest.raises(ValueError, match="render_mode"):
        EnvRenderer("ansi")


def test_headless_sets_the_dummy_video_driver():
    code = (
        "import os, sys; from rally_env.render import Renderer; import tracks; "
        "st = tracks.load_stage('skidpad'); r = Renderer(st, width=64, height=48); "
        "f = r.draw(None); assert f.shape == (48, 64, 3); "
        "print(os.environ.get('SDL_VIDEODRIVER'))"
    )
    env = {k: v for k, v in os.environ.items() if k not in ("DISPLAY", "WAYLAND_DISPLAY")}
    env.pop("SDL_VIDEODRIVER", None)
    out = subprocess.run(
        [sys.executable, "-c", code], check=True, cwd=REPO, env=env, capture_output=True, text=True
    )
    if sys.platform.startswith("linux"):
        assert out.stdout.strip().splitlines()[-1] == "dummy"


def test_missing_pygame_raises_dependency_not_installed(monkeypatch, opener):
    st, terr = opener
    monkeypatch.setitem(sys.modules, "pygame", None)  # makes `import pygame` fail
    with pytest.raises(DependencyNotInstalled, match=r'pip install "rally-env\[render\]"'):
        Renderer(st, terr)
    with pytest.raises(DependencyNotInstalled, match="pygame"):
        EnvRenderer("rgb_array")


def test_missing_pygame_through_env_render(monkeypatch):
    env = RallyEnv(stage="opener", render_mode="rgb_array")
    env.reset(seed=0)
    monkeypatch.setitem(sys.modules, "pygame", None)
    try:
        env.render()
    except NotImplementedError:
        pytest.skip("RallyEnv.render is not wired to the renderer yet")
    except DependencyNotInstalled as e:
        assert 'pip install "rally-env[render]"' in str(e)
    else:
        raise AssertionError("render() without pygame must raise DependencyNotInstalled")


def test_record_video_wrapper(tmp_path):
    pytest.importorskip("moviepy")
    from gymnasium.wrappers import RecordVideo

    env = _rgb_env(stage="opener")
    out = tmp_path / "videos"
    env = RecordVideo(env, str(out), episode_trigger=lambda ep: True, name_prefix="rally")
    env.reset(seed=0)
    for _ in range(25):
        env.step(np.array([0.0, 1.0, 0.0, 0.0], np.float32))
    env.close()
    vids = sorted(out.glob("rally*.mp4"))
    assert vids, list(out.iterdir())
    import imageio.v2 as iio

    with iio.get_reader(str(vids[0])) as rd:
        n = rd.count_frames()
    assert n == 26  # the reset frame and one per step


# ----------------------------------------------------------------------------- views, ghosts


def test_car_views_read_the_batch():
    env = RallyEnv(stage="opener")
    env.reset(seed=0)
    for _ in range(30):
        env.step(np.array([0.5, 1.0, 0.0, 0.0], np.float32))
    sim = env.core.sim
    (v,) = car_views(sim)
    assert v.x_m == sim.position_m[0, 0] and v.y_m == sim.position_m[0, 1]
    assert np.allclose(v.rotation, sim.rotation[0])
    assert np.allclose(v.wheel_xy_m, sim.wheel_positions_m()[0][:, :2], atol=0.5)
    assert np.array_equal(v.loads_n, sim.wheel_loads_n[0])
    assert np.array_equal(v.usage, np.clip(sim.friction_usage[0], 0, 1))
    assert v.time_s == sim.time_s[0] and v.n_wheels == 4
    # front wheels turned by the steer angle relative to the rear ones
    ang = np.arctan2(v.wheel_dir[:, 1], v.wheel_dir[:, 0])
    turn = math.remainder(ang[0] - ang[2] - float(sim.steer_angle_rad[0]), 2 * math.pi)
    assert abs(turn) < 1e-5  # (not exact: the body pitches and rolls)
    assert v.static_load_n == pytest.approx(ROVER.mass_kg * ROVER.gravity_mps2 / 4)


def test_lerp_view_between_steps(opener):
    st, _ = opener
    a = _pose_car(st, ds=10.0, time_s=1.0)
    b = _pose_car(st, ds=12.0, time_s=1.05)
    m = lerp_view(a, b, 0.5)
    assert m.x_m == pytest.approx(0.5 * (a.x_m + b.x_m))
    assert m.time_s == pytest.approx(1.025)
    assert np.allclose(m.rotation.T @ m.rotation, np.eye(3))
    assert lerp_view(a, b, 1.0) is b


def test_hud_split_and_delta():
    hud = HudInfo(checkpoint_times_s=(30.0, float("nan")), reference_times_s=(31.5, 60.0, 90.0))
    assert hud.last_split() == (0, 30.0, -1.5)
    hud = HudInfo(
        checkpoint_times_s=(30.0, 61.0), finish_time_s=92.0, reference_times_s=(31.5, 60.0, 90.0)
    )
    assert hud.last_split() == (2, 92.0, 2.0)
    assert HudInfo(checkpoint_times_s=(float("nan"),)).last_split() is None


def _write_npz_ghost(g, path):
    """A ``.npz`` ghost file as earlier versions of ``rally play`` wrote them."""
    import json

    np.savez_compressed(
        path,
        format=np.array("rally_env.ghost"),
        version=np.array(1),
        stage=np.array(g.stage),
        t_s=g.t_s,
        pos_m=g.pos_m,
        quat=g.quat,
        steer_rad=g.steer_rad,
        speed_mps=g.speed_mps,
        checkpoint_times_s=np.array(g.checkpoint_times_s, np.float64),
        finish_time_s=np.array(g.finish_time_s, np.float64),
        actions=g.actions,
        meta=np.array(json.dumps(g.meta)),
    )
    return path


def test_ghost_record_load_a_stored_npz_and_draw(tmp_path):
    from rally_env.replay import Ghost, GhostFileError, GhostRecorder, load_ghost

    env = RallyEnv(stage="opener")
    env.reset(seed=0)
    rec = GhostRecorder("opener", meta={"driver": "test"})
    rec.sample(env.core.sim, 0)
    for _ in range(40):
        a = np.array([0.1, 1.0, 0.0, 0.0], np.float32)
        env.step(a)
        rec.sample(env.core.sim, 0, a)
    g = rec.ghost((12.5, float("nan")), float("nan"))
    p = _write_npz_ghost(g, tmp_path / "run.ghost.npz")  # a file a user kept
    h = load_ghost(p)
    assert isinstance(h, Ghost) and len(h) == 41 and h.stage == "opener"
    assert np.array_equal(h.pos_m, g.pos_m) and h.meta == {"driver": "test"}
    assert h.reference_times_s[0] == 12.5
    v = h.view_at(1.0)
    assert v is not None and v.time_s == 1.0
    assert h.view_at(-1.0) is None and h.view_at(1e6) is None
    # drawn into an env frame
    er = EnvRenderer("rgb_array", 20, width=240, height=160, ghosts=[h])
    env.reset(seed=0)
    for _ in range(20):
        env.step(np.zeros(4, np.float32))  # the live car stays, the ghost drives away
    assert er.render(env.core).shape == (160, 240, 3)
    bad = tmp_path / "bad.npz"
    np.savez(bad, format=np.array("something.else"))
    with pytest.raises(GhostFileError, match="not a ghost file"):
        load_ghost(bad)
    with pytest.raises(GhostFileError, match="no such"):
        load_ghost(tmp_path / "missing.npz")
