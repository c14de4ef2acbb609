"""``rally record`` (MP4 and GIF), ``render_episode`` and ``rally play`` with scripted keys."""

from __future__ import annotations

import math
import os
import re

os.environ.setdefault("SDL_VIDEODRIVER", "dummy")

import numpy as np
import pytest

from rally_env.cli import main
from rally_env.render import render_episode
from rally_env.render.video import END_HOLD_S, VideoWriter
from tracks import Finish, PathBuilder, Section, Stage, Start, TerrainSpec


def _count_frames(path) -> int:
    import imageio.v2 as iio

    with iio.get_reader(str(path)) as rd:
        meta = rd.get_meta_data()
        assert meta["codec"] == "h264", meta
        return rd.count_frames()


@pytest.fixture(autouse=True)
def _in_a_temporary_directory(tmp_path, monkeypatch):
    """``rally record`` and ``rally play`` save replays to out/replays/ under the current
    directory: each test runs in its own."""
    monkeypatch.chdir(tmp_path)


@pytest.fixture(scope="module")
def sprint() -> Stage:
    """A 120 m straight: start at 20 m, a checkpoint at 35 m, the finish at 50 m."""
    b = PathBuilder(knot_spacing_m=10.0)
    b.straight(120.0)
    return Stage(
        name="sprint",
        knots=b.knots(),
        sections=(Section(0.0, 10.0, "gravel"),),
        finish=Finish(s_m=50.0),
        start=Start(20.0, 0.0),
        checkpoints_m=(35.0,),
        terrain=TerrainSpec(amplitude_m=0.0, roughness_m=0.0, berm_height_m=0.0),
    )


def test_rally_record_writes_a_playable_mp4_and_gif(tmp_path, capsys):
    out = tmp_path / "run.mp4"
    rc = main(
        [
            "record",
            "--stage",
            "opener",
            "--agent",
            "line",
            "--out",
            str(out),
            "--seed",
            "1",
            "--fps",
            "30",
            "--max-seconds",
            "2",
            "--gif",
            "--gif-seconds",
            "1",
            "--width",
            "320",
            "--height",
            "240",
        ]
    )
    assert rc == 0
    text = capsys.readouterr()
    assert f"wrote {out}" in text.out
    assert "[" in text.err and "100.0%" in text.err  # the progress bar
    # 2 s at 30 fps: frames at t = 0, 1/30, ..., 2 s, then the end hold
    assert _count_frames(out) == 61 + round(END_HOLD_S * 30)
    from PIL import Image

    with Image.open(out.with_suffix(".gif")) as im:
        assert im.n_frames == 11  # every 3rd frame: 1 s at 10 fps, t = 0 .. 1 s
        assert im.info["duration"] == 100
        assert im.size == (160, 120)


def test_rally_record_random_agent_and_errors(tmp_path, capsys):
    out = tmp_path / "random.mp4"
    assert (
        main(
            [
                "record",
                "--agent",
                "random",
                "--out",
                str(out),
                "--max-seconds",
                "0.5",
                "--quiet",
                "--width",
                "160",
                "--height",
                "120",
            ]
        )
        == 0
    )
    assert _count_frames(out) == 16 + round(END_HOLD_S * 30)
    assert main(["record", "--agent", "nobody", "--out", str(out), "--quiet"]) == 2
    assert "unknown agent 'nobody'" in capsys.readouterr().err
    assert main(["record", "--agent", "missing.zip", "--out", str(out), "--quiet"]) == 2
    assert re.search("not found|does not exist", capsys.readouterr().err)


def test_render_episode_one_call(tmp_path, sprint):
    res = render_episode(
        lambda obs: np.array([0.0, 1.0, 0.0, 0.0], np.float32),
        tmp_path / "sprint.mp4",
        stage=sprint,
        seed=0,
        fps=24,
        width=160,
        height=120,
    )
    assert res.end_reason == "finished" and res.finish_time_s == res.finish_time_s
    assert res.frames == math.floor(res.sim_time_s * 24 + 1e-9) + 1 + round(END_HOLD_S * 24)
    assert _count_frames(res.path) == res.frames
    assert res.sim_time_s / res.wall_time_s > 1.0  # faster than real time


def test_render_episode_gives_the_policy_the_observation_it_asks_for(tmp_path, sprint):
    from rally_env.spaces import ObsLayout

    class AsksForTheRoadAhead:
        def __init__(self):
            self.env_kwargs = {"road_ahead": True}
            self.widths = set()

        def __call__(self, obs):
            self.widths.add(np.shape(obs)[-1])
            return np.array([0.0, 1.0, 0.0, 0.0], np.float32)

    kw = dict(stage=sprint, seed=0, fps=12, width=96, height=64)
    pol = AsksForTheRoadAhead()
    render_episode(pol, tmp_path / "a.mp4", **kw)
    assert pol.widths == {ObsLayout(4, road_ahead=True).size}
    # settings the caller gives win
    pol = AsksForTheRoadAhead()
    render_episode(pol, tmp_path / "b.mp4", env_kwargs={"road_ahead": False}, **kw)
    assert pol.widths == {ObsLayout(4).size}


def test_video_writer_rejects_bad_frames(tmp_path):
    with VideoWriter(tmp_path / "x.mp4", fps=10) as w:
        w.write(np.zeros((31, 41, 3), np.uint8))  # odd sizes are padded for yuv420p
        with pytest.raises(ValueError, match="size changed"):
            w.write(np.zeros((32, 40, 3), np.uint8))
        with pytest.raises(ValueError, match=r"\(H, W, 3\)"):
            w.write(np.zeros((31, 41), np.uint8))
    assert _count_frames(tmp_path / "x.mp4") == 1
    with pytest.raises(ValueError, match="fps"):
        VideoWriter(tmp_path / "y.mp4", fps=0)


# ----------------------------------------------------------------------------- play


def _key(pg, kind, key):
    return pg.event.Event(kind, key=key)


def test_play_scripted_keys_headless(tmp_path):
    from rally_env.render._deps import require_pygame
    from rally_env.render.play import KeyState, play

    pg = require_pygame()
    ks = KeyState(pg)
    for e in (_key(pg, pg.KEYDOWN, pg.K_w), _key(pg, pg.KEYDOWN, pg.K_LEFT)):
        ks.handle(e)
    assert ks.action().tolist() == [1.0, 1.0, 0.0, 0.0]
    ks.handle(_key(pg, pg.KEYUP, pg.K_LEFT))
    ks.handle(_key(pg, pg.KEYDOWN, pg.K_d))
    ks.handle(_key(pg, pg.KEYDOWN, pg.K_SPACE))
    assert ks.action().tolist() == [-1.0, 1.0, 0.0, 1.0]

    events = [
        (0, _key(pg, pg.KEYDOWN, pg.K_UP)),
        (20, _key(pg, pg.KEYDOWN, pg.K_r)),  # restart
        (30, _key(pg, pg.KEYDOWN, pg.K_ESCAPE)),
    ]
    res = play(
        "opener",
        events=events,
        max_frames=200,
        realtime=False,
        width=160,
        height=120,
        save_dir=tmp_path,
    )
    assert res.quit_reason == "escape"
    assert res.frames == 30 and res.steps == 30 and res.attempts == 2
    res = play("opener", max_frames=5, realtime=False, width=160, height=120, save_dir=None)
    assert res.quit_reason == "frames" and res.frames == 5


def test_play_finish_shows_splits_and_saves_the_run(tmp_path, sprint):
    from rally_env.render._deps import require_pygame
    from rally_env.render.play import PLAY_HZ, play
    from rally_env.replay import load_ghost, verify

    pg = require_pygame()
    events = [(0, _key(pg, pg.KEYDOWN, pg.K_UP))]
    res = play(
        sprint,
        events=events,
        max_frames=900,
        realtime=False,
        width=160,
        height=120,
        save_dir=tmp_path,
    )
    assert len(res.finish_times_s) == 1, res
    t = res.finish_times_s[0]
    assert 1.0 < t < 900 / PLAY_HZ
    assert len(res.best_splits_s) == 1 and 0 < res.best_splits_s[0] < t
    (p,) = res.saved
    assert p.name.endswith(".rrp.json.gz")  # the one ghost format: a replay
    g = load_ghost(p)
    assert g.stage == "sprint" and g.finish_time_s == t
    assert g.checkpoint_times_s == res.best_splits_s
    assert g.meta["control_hz"] == PLAY_HZ and np.all(g.actions[1:, 1] == 1.0)
    rep = verify(p)
    assert rep.accepted, rep.message
    # R after the finish: a second attempt (racing the first as a ghost)
    events.append((700, _key(pg, pg.KEYDOWN, pg.K_r)))
    res = play(
        sprint, events=events, max_frames=720, realtime=False, width=160, height=120, save_dir=None
    )
    assert res.attempts == 2 and len(res.finish_times_s) == 1 and not res.saved
    # the saved run is a ghost for the next session
    res2 = play(
        sprint, ghost=p, max_frames=10, realtime=False, width=160, height=120, save_dir=None
    )
    assert res2.frames == 10


def test_rally_play_cli_headless(tmp_path, capsys):
    assert main(["play", "--frames", "3", "--no-save", "--width", "160", "--height", "120"]) == 0
    assert main(["play", "--frames", "3", "--ghost", str(tmp_path / "nope.npz")]) == 2
    assert "no such ghost file" in capsys.readouterr().err


def test_rally_record_saves_a_verifiable_replay(tmp_path, capsys):
    """The replay goes to out/replays/ (before: beside the video, by default the current
    directory), and the command says where."""
    from rally_env.replay import verify

    out = tmp_path / "video" / "rec.mp4"
    args = ["record", "--agent", "line", "--out", str(out), "--max-seconds", "0.5"]
    assert main([*args, "--width", "160", "--height", "120"]) == 0
    (replay,) = (tmp_path / "out" / "replays").glob("*.rrp.json.gz")
    assert not list(tmp_path.rglob("video/*.rrp.json.gz"))
    got = capsys.readouterr()
    assert f"wrote replay {replay.relative_to(tmp_path)}" in got.out
    assert f"rally record: line on opener -> {out} (replay in out/replays/)" in got.err
    args.append("--quiet")
    assert verify(replay).accepted
    assert main([*args, "--no-replay", "--replay-dir", str(tmp_path / "none")]) == 0
    assert not (tmp_path / "none").exists()


def test_rally_play_and_record_take_library_vehicles_and_planets(tmp_path, capsys):
    small = ["--width", "160", "--height", "120"]
    assert main(["play", "--frames", "3", "--no-save", "--vehicle", "bike", *small]) == 0
    assert main(["play", "--frames", "3", "--no-save", "--planet", "moon", *small]) == 0
    # library vehicles exist only on Rally-v1: asking for v0 is a clear error
    assert main(["play", "--frames", "3", "--vehicle", "tank", "--version", "0", *small]) == 2
    assert "Rally-v1" in capsys.readouterr().err
    out = tmp_path / "car.mp4"
    args = ["record", "--agent", "line", "--out", str(out), "--max-seconds", "0.5", "--quiet"]
    assert main([*args, "--vehicle", "rally-car", *small]) == 0
    from rally_env.replay import verify

    (replay,) = (tmp_path / "out" / "replays").glob("*.rrp.json.gz")
    assert verify(replay).accepted
    assert main([*args, "--vehicle", "hovercraft", *small]) == 2
    assert "hovercraft" in capsys.readouterr().err


def test_rally_play_without_a_display_says_so(monkeypatch, capsys):
    """Before, on a machine without a display it ran with no window and no message."""
    import sys

    monkeypatch.setattr(sys, "platform", "linux")
    for var in ("SDL_VIDEODRIVER", "DISPLAY", "WAYLAND_DISPLAY"):
        monkeypatch.delenv(var, raising=False)
    assert main(["play", "--frames", "3", "--no-save"]) == 2
    err = capsys.readouterr().err
    assert "rally play: error: no display to open the window on" in err
    assert "SDL_VIDEODRIVER=dummy" in err and "Traceback" not in err
    # asked for explicitly: no window, as asked
    monkeypatch.setenv("SDL_VIDEODRIVER", "dummy")
    assert main(["play", "--frames", "3", "--no-save", "--width", "160", "--height", "120"]) == 0
