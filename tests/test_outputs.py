"""Outputs that tell the truth and stay whole: every writing command checks its destination
before any drawing (one line naming the path, exit 2), writes under temporary names and renames
when complete, so an interruption or a failure leaves the previous good files; the MP4 writer
checks the encoder's exit status; walks through chosen seeds, drawn a few frames at a time;
GIF frame rates GIF can store; a checkpoint that does not fit, click's own usage errors and
Pillow's pixel limit, each in one whole line."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest
import torch
from click.testing import CliRunner
from PIL import Image

from gan_kit.base.atomic import StagedFiles
from gan_kit.base.errors import GankitError, clip
from gan_kit.cli import cli


@pytest.fixture(autouse=True)
def _builtins_only(monkeypatch):
    monkeypatch.setenv("GANKIT_DISABLE_PLUGIN_AUTOLOAD", "1")
    monkeypatch.delenv("GANKIT_DEBUG", raising=False)


def invoke(*args):
    return CliRunner().invoke(cli, [str(a) for a in args], prog_name="gankit")


def one_error_line(result) -> str:
    """The single stderr line of a refused command (exit 2, no traceback)."""
    assert result.exit_code == 2, (result.exit_code, result.output)
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    assert "Traceback" not in result.output
    return lines[0]


def snapshot(folder: Path) -> dict[str, bytes]:
    """Every file of ``folder`` (hidden temporaries included) and its bytes."""
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir()) if p.is_file()}


# ------------------------------------------------------------------ destinations checked first --


def _no_drawing(monkeypatch):
    """Opening a generator (or a checkpoint, for export) fails the test: a refusal must come first."""
    def fail(*args, **kwargs):
        raise AssertionError("the generator was read before the destination was checked")

    monkeypatch.setattr("gan_kit.tools.trained.open_generator", fail)
    monkeypatch.setattr("gan_kit.tools.export.load_checkpoint", fail)


@pytest.mark.parametrize("command", ["sample", "sample-mp4", "generate", "style-mix", "project", "export"])
def test_an_unwritable_destination_fails_before_any_drawing_naming_the_path(command, trained_sg2, tmp_path,
                                                                            monkeypatch):
    _, checkpoint, _ = trained_sg2
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    bad = blocker / "out"  # under a regular file: unwritable for root too
    target = tmp_path / "t.png"
    Image.new("L", (16, 16), 128).save(target)
    args = {
        "sample": ["sample", checkpoint, "--out", bad / "grid.png"],
        "sample-mp4": ["sample", checkpoint, "--interpolate", "3", "--out", bad / "walk.mp4"],
        "generate": ["generate", checkpoint, "--seeds", "0-3", "--outdir", bad],
        "style-mix": ["style-mix", checkpoint, "--rows", "1", "--cols", "2", "--styles", "0", "--out", bad / "m.png"],
        "project": ["project", checkpoint, "--target", target, "--outdir", bad, "--steps", "3"],
        "export": ["export", checkpoint, "--out", bad, "--format", "safetensors"],
    }[command]
    import gan_kit.tools.project  # noqa: F401  (patched where project_image imports it from)

    _no_drawing(monkeypatch)
    line = one_error_line(invoke(*args))
    assert str(blocker) in line and "cannot" in line, line
    assert not bad.exists()


def test_an_empty_output_path_is_refused_not_the_working_folder(trained_sg2, tmp_path, monkeypatch):
    _, checkpoint, _ = trained_sg2
    monkeypatch.chdir(tmp_path)
    for args in (["generate", checkpoint, "--seeds", "0", "--outdir", ""],
                 ["export", checkpoint, "--out", "", "--format", "safetensors"],
                 ["project", checkpoint, "--target", "t.png", "--outdir", " "]):
        line = one_error_line(invoke(*args))
        assert "names no" in line and "--help" in line, line
    assert list(tmp_path.iterdir()) == []


# ---------------------------------------------------------- interruptions leave the good files --


def test_staged_files_appear_together_or_not_at_all(tmp_path):
    (tmp_path / "a.txt").write_text("old a")
    with pytest.raises(KeyboardInterrupt):
        with StagedFiles() as staged:
            staged.path(tmp_path / "a.txt").write_text("new a")
            staged.path(tmp_path / "b.txt").write_text("new b")
            raise KeyboardInterrupt
    assert snapshot(tmp_path) == {"a.txt": b"old a"}  # no b.txt, no temporary left
    with StagedFiles() as staged:
        staged.path(tmp_path / "a.txt").write_text("new a")
        staged.path(tmp_path / "b.txt").write_text("new b")
        assert (tmp_path / "a.txt").read_text() == "old a"  # nothing renamed before the end
    assert snapshot(tmp_path) == {"a.txt": b"new a", "b.txt": b"new b"}
    assert stat.S_IMODE(os.stat(tmp_path / "b.txt").st_mode) & 0o044  # ordinary permissions, not mkstemp's 0600


def test_an_interrupted_video_leaves_the_previous_good_file(trained_sg2, tmp_path, monkeypatch):
    import gan_kit.tools.sampling as sampling

    _, checkpoint, _ = trained_sg2
    out = tmp_path / "walk.mp4"
    assert invoke("sample", checkpoint, "-n", "2", "--interpolate", "4", "--out", out).exit_code == 0
    before = snapshot(tmp_path)
    real, calls = sampling.draw_walk, []

    def draw_then_stop(*args, **kwargs):  # the frame source: Ctrl-C while the third batch is drawn
        calls.append(1)
        if len(calls) == 3:
            raise KeyboardInterrupt
        return real(*args, **kwargs)

    monkeypatch.setattr(sampling, "draw_walk", draw_then_stop)
    monkeypatch.setattr(sampling, "FRAME_BATCH", 2)  # one frame of 2 walks a batch
    result = invoke("sample", checkpoint, "-n", "2", "--interpolate", "9", "--out", out)
    assert result.exit_code == 130 and len(calls) == 3
    assert snapshot(tmp_path) == before  # the previous video, byte for byte; no temporary file


def test_an_encoder_that_fails_is_an_error_naming_the_file_and_leaves_the_previous_one(tmp_path, monkeypatch):
    import imageio_ffmpeg

    from gan_kit.tools.video import save_mp4

    out = tmp_path / "v.mp4"
    save_mp4(torch.zeros(3, 3, 8, 8), out, fps=5)
    before = snapshot(tmp_path)
    fake = tmp_path.parent / f"{tmp_path.name}-ffmpeg"
    fake.write_text("#!/bin/sh\ncat >/dev/null\necho 'Disk quota exceeded' >&2\nexit 1\n")  # reads all, then fails
    fake.chmod(0o755)
    monkeypatch.setattr(imageio_ffmpeg, "get_ffmpeg_exe", lambda: str(fake))
    with pytest.raises(GankitError) as e:
        save_mp4(torch.zeros(3, 3, 8, 8), out, fps=5)
    assert str(e.value).startswith(f"{out}: the video could not be written (the encoder, ffmpeg, exited with status 1: "
                                   f"Disk quota exceeded)")
    assert snapshot(tmp_path) == before


def test_an_interrupted_projection_leaves_the_previous_projection(trained_sg2, tmp_path):
    from gan_kit.tools.project import project_image
    from gan_kit.tools.projection import ProjectionSettings

    _, checkpoint, _ = trained_sg2
    target = tmp_path / "t.png"
    Image.new("L", (16, 16), 90).save(target)
    outdir = tmp_path / "proj"
    settings = ProjectionSettings(steps=3, w_avg_samples=50)
    project_image(checkpoint, target, outdir, settings=settings, video=True, device="cpu")
    before = snapshot(outdir)
    assert set(before) == {"projected_w.npz", "target.png", "proj.png", "compare.png", "proj.mp4"}

    def stop(state):
        if state.step == 2:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        project_image(checkpoint, target, outdir, settings=settings, video=True, device="cpu", seed=1, on_step=stop)
    assert snapshot(outdir) == before


def test_generate_interrupted_mid_list_leaves_the_folder_as_it_was(trained_sg2, tmp_path, monkeypatch):
    import gan_kit.tools.generate as generate

    _, checkpoint, _ = trained_sg2
    out = tmp_path / "png"
    assert invoke("generate", checkpoint, "--seeds", "0-3", "--outdir", out).exit_code == 0
    before = snapshot(out)
    real, saved = generate.save_image, []

    def save_then_stop(image, path):
        saved.append(path)
        if len(saved) == 3:
            raise KeyboardInterrupt
        return real(image, path)

    monkeypatch.setattr(generate, "save_image", save_then_stop)
    assert invoke("generate", checkpoint, "--seeds", "0-3", "--truncation", "0.5", "--outdir", out).exit_code == 130
    assert snapshot(out) == before  # not two images of psi 0.5 beside two of psi 1


# ------------------------------------------------------------------------------------ export --


def test_export_refuses_a_run_directory_and_a_checkpoint_folder(trained_sg2, tmp_path):
    run_dir, checkpoint, _ = trained_sg2
    for out in (run_dir, checkpoint.parent):
        line = one_error_line(invoke("export", checkpoint, "--out", out, "--format", "safetensors"))
        assert line.startswith(f"error: --out: {out} is the ") and "folder of its own" in line
    assert not (run_dir / "config.json").exists() and not (checkpoint.parent / "config.json").exists()


def test_a_broken_export_config_is_named_as_invalid_json(trained_sg2, tmp_path):
    _, checkpoint, _ = trained_sg2
    out = tmp_path / "exp"
    assert invoke("export", checkpoint, "--out", out, "--format", "safetensors").exit_code == 0
    (out / "config.json").write_text("{")
    line = one_error_line(invoke("generate", out, "--seeds", "0", "--outdir", tmp_path / "o"))
    assert line.startswith(f"error: {out / 'config.json'}: not valid JSON (")


# ----------------------------------------------------------------------------- walks and GIFs --


def test_a_walk_through_seeds_passes_each_seeds_own_image(trained_sg2):
    from gan_kit.tools.sampling import draw_walk, walk_keys
    from gan_kit.tools.seeds import seed_latents
    from gan_kit.tools.trained import open_generator

    _, checkpoint, _ = trained_sg2
    trained = open_generator(checkpoint)
    seeds, steps = [85, 100, 75], 4
    own = trained.draw(seed_latents(seeds, trained.latent_dim), batch_size=1)  # what generate draws
    points = seed_latents(seeds, trained.latent_dim).view(1, 3, -1)
    for space in ("z", "w"):
        keys = walk_keys(trained, points, space=space)
        walk = draw_walk(trained, keys, steps, 0, 7, space=space)[0]  # [T, C, H, W], T = 2 * 3 + 1
        for i in range(3):
            assert (walk[i * (steps - 1)] - own[i]).abs().max() < 1e-4, (space, i)
        assert (walk[1] - own[0]).abs().max() > 1e-3  # between keyframes: other images


@pytest.mark.parametrize("loop", [False, True])
def test_a_walk_segment_is_the_same_latents_as_that_part_of_the_whole_walk(loop):
    from gan_kit.tools.sampling import walk_latents, walk_length, walk_segment

    points = torch.randn(3, 4, 8)
    whole = walk_latents(points, 5, loop=loop)
    total = walk_length(4, 5, loop)
    assert whole.shape[1] == total
    for start, stop in ((0, total), (0, 3), (3, total), (total - 1, total), (5, 9)):
        assert torch.equal(walk_segment(points, 5, start, stop, loop), whole[:, start:stop]), (start, stop)
    w = torch.randn(2, 3, 6, 4)  # W keyframes [R, P, num_ws, w_dim], linear between them
    linear = walk_segment(w, 3, 0, walk_length(3, 3, loop), loop, spherical=False)
    assert torch.equal(linear[:, 2], w[:, 1]) and torch.allclose(linear[:, 1], (w[:, 0] + w[:, 1]) / 2)
    if not loop:  # an open walk ends on its last keyframe exactly, not on a + (b - a) * 1
        w = torch.randn(2, 3, 64, 64)
        assert torch.equal(walk_segment(w, 3, 0, 5, spherical=False)[:, -1], w[:, -1])


def test_walk_frames_are_drawn_a_few_at_a_time_in_order(trained_sg2, monkeypatch):
    from gan_kit.tools import sampling
    from gan_kit.tools.grids import grid_frame
    from gan_kit.tools.trained import TrainedGenerator, open_generator

    _, checkpoint, _ = trained_sg2
    trained = open_generator(checkpoint)
    points = torch.randn(3, 2, trained.latent_dim)
    whole = trained.draw(sampling.walk_latents(points, 20).flatten(0, 1)).unflatten(0, (3, 20))
    sizes = []
    real = TrainedGenerator.draw

    def counted(self, z, *args, **kwargs):
        sizes.append(z.shape[0])
        return real(self, z, *args, **kwargs)

    monkeypatch.setattr(TrainedGenerator, "draw", counted)
    frames = sampling.walk_frames(trained, points, 20, batch=8)
    first = next(frames)
    assert sizes == [6]  # one batch of 8 // 3 = 2 frames of the 3 walks, not the 60 images
    rest = list(frames)
    assert len(rest) == 19 and max(sizes) == 6
    for t, frame in enumerate([first] + rest):
        assert (frame.int() - grid_frame(whole[:, t]).int()).abs().max() <= 1, t


def test_sample_walks_through_seeds_and_takes_a_device(trained_sg2, tmp_path):
    _, checkpoint, _ = trained_sg2
    result = invoke("sample", checkpoint, "--seeds", "85,100,75", "--interpolate", "3", "--device", "cpu",
                    "--out", tmp_path / "walk.gif")
    assert result.exit_code == 0, result.output
    assert "1 interpolation through seeds 85, 100, 75 of 5 images" in result.stdout
    with Image.open(tmp_path / "walk.gif") as im:
        assert im.n_frames == 5 + 3
    line = one_error_line(invoke("sample", checkpoint, "--seeds", "1,2,3", "-n", "2", "--interpolate", "3",
                                 "--out", tmp_path / "w.gif"))
    assert line == ("error: --seeds: 3 seeds do not make 2 walks of 2 or more seeds each (give a multiple of 2, "
                    "at least 4, or another -n)")
    assert "--device: 'tpu' is not a device" in one_error_line(invoke("sample", checkpoint, "--device", "tpu",
                                                                      "--out", tmp_path / "g.png"))


@pytest.mark.parametrize("fps, expected", [
    ("1000", "error: --fps: 1000 frames per second is faster than a GIF plays"),
    ("51", "error: --fps: 51 frames per second is faster than a GIF plays"),
    ("0.001", "error: --fps: 0.001 frames per second is slower than a GIF stores"),
])
def test_gif_frame_rates_gif_cannot_store_are_refused_in_one_line(fps, expected, trained_sg2, tmp_path):
    _, checkpoint, _ = trained_sg2
    line = one_error_line(invoke("sample", checkpoint, "-n", "1", "--interpolate", "3", "--fps", fps,
                                 "--out", tmp_path / "w.gif"))
    assert line.startswith(expected), line
    assert not (tmp_path / "w.gif").exists()


def test_a_gif_frame_rate_is_stored_in_hundredths_of_a_second(trained_sg2, tmp_path):
    from gan_kit.tools.sampling import gif_delay

    assert [gif_delay(f) for f in (50, 24, 1000 / 120, 0.0016)] == [2, 4, 12, 62500]
    _, checkpoint, _ = trained_sg2
    result = invoke("sample", checkpoint, "-n", "1", "--interpolate", "3", "--fps", "24", "--out", tmp_path / "w.gif")
    assert "(25 fps: GIF stores delays in 1/100 s)" in result.stdout
    with Image.open(tmp_path / "w.gif") as im:
        assert im.info["duration"] == 40


# ------------------------------------------------------------------- checkpoints that do not fit --


def test_a_checkpoint_missing_a_key_is_one_line_naming_its_writer(trained_sg2, tmp_path):
    _, checkpoint, _ = trained_sg2
    state = torch.load(checkpoint, weights_only=True)
    del state["G_ema"]
    path = tmp_path / "old.pt"
    torch.save(state, path)
    line = one_error_line(invoke("sample", path, "--out", tmp_path / "g.png"))
    assert line.startswith(f"error: {path}: written by gankit {state['gankit_version']} (checkpoint format 1) has no "
                           f"'G_ema' (another layout")


def test_renamed_or_reshaped_weights_are_one_line_saying_what_differs(trained_sg2, tmp_path):
    _, checkpoint, _ = trained_sg2
    state = torch.load(checkpoint, weights_only=True)
    weights = dict(state["G_ema"])
    name = sorted(weights)[0]
    weights[f"old.{name}"] = weights.pop(name)
    other = sorted(k for k in weights if k.endswith("weight") and weights[k].dim() >= 2)[0]
    weights[other] = torch.zeros(*[s + 1 for s in weights[other].shape])
    path = tmp_path / "renamed.pt"
    torch.save({**state, "G_ema": weights}, path)
    for args in (["generate", path, "--seeds", "0", "--outdir", tmp_path / "o"], ["export", path, "--out", tmp_path / "e"]):
        line = one_error_line(invoke(*args))
        assert "does not fit the G that this gankit" in line and "written by gankit" in line
        assert f"1 weight missing ({name})" in line and f"1 it has no place for (old.{name})" in line
        assert f"1 of another shape ({other}: " in line


# ---------------------------------------------------------------------- click's usage errors --


@pytest.mark.parametrize("args, start", [
    (["project", "CKPT", "--target", "t.png", "--outdir", "o", "--steps", "0"],
     "error: --steps: 0 is not in the range x>=1 (give a whole number of at least 1; see `gankit project --help`)"),
    (["sample", "CKPT", "-n", "0"], "error: --n: 0 is not in the range x>=1 (give a whole number of at least 1;"),
    (["sample", "CKPT", "--seed", "abc"], "error: --seed: 'abc' is not a valid integer"),
    (["project", "CKPT", "--outdir", "o"], "error: --target: missing; `gankit project` needs it (give --target VALUE;"),
    (["sample", "CKPT", "--seeed", "3"], "error: --seeed: `gankit sample` has no such option (did you mean --seed or "
                                         "--seeds? see `gankit sample --help`)"),
    (["sample"], "error: CHECKPOINT: missing; `gankit sample` needs it"),
    (["no-such-command"], "error: gankit: no such command 'no-such-command'"),
])
def test_clicks_usage_errors_are_gankits_one_line_with_the_fix(args, start, tmp_path):
    result = invoke(*[str(tmp_path / "c.pt") if a == "CKPT" else a for a in args])
    line = one_error_line(result)
    assert line.startswith(start), line
    assert "--help" in line and "Usage:" not in result.output


def test_help_still_works_and_debug_keeps_clicks_own_text(tmp_path):
    result = invoke("sample", "--help")
    assert result.exit_code == 0 and "--seeds" in result.stdout and "--device" in result.stdout
    result = invoke("--debug", "sample", tmp_path / "c.pt", "-n", "0")
    assert result.exit_code == 2 and "Invalid value for '-n'" in result.stderr


# ------------------------------------------------------------------------- library messages --


def test_a_quoted_library_message_is_cut_between_words():
    text = "Pillow says " + " ".join(f"word{i}" for i in range(100))
    cut = clip(text, 60)
    assert len(cut) <= 64 and cut.endswith(" ...")
    assert cut[:-4].split(" ")[-1] in text.split(" ")  # the last word kept is whole
    assert clip("short\nsecond line") == "short"


def test_a_jpeg_over_pillows_pixel_limit_is_read_in_draft_mode_and_its_size_reported(tmp_path, monkeypatch):
    from gan_kit.tools.project import read_target

    path = tmp_path / "big.jpg"
    Image.new("RGB", (400, 300), (90, 120, 150)).save(path, quality=80)
    monkeypatch.setattr(Image, "MAX_IMAGE_PIXELS", 20_000)  # 120 000 pixels: over twice the limit
    goal = read_target(path, 16, 3)
    assert goal.note.startswith("big.jpg: 400x300 RGB -> 16x16 RGB (centre crop")  # the file's size, not the draft's
    assert goal.image.shape == (1, 3, 16, 16)
    png = tmp_path / "big.png"
    Image.new("RGB", (400, 300)).save(png)
    with pytest.raises(GankitError) as e:
        read_target(png, 16, 3)
    assert str(e.value).endswith("raise PIL.Image.MAX_IMAGE_PIXELS in a plugin module if the file is trusted)")


def test_no_library_warning_is_shown_for_a_checkpoint_that_is_refused(trained_sg2, tmp_path, monkeypatch):
    import warnings

    from gan_kit.base.errors import CheckpointError
    from gan_kit.runs import checkpoint as ckpt

    _, path, _ = trained_sg2
    state = torch.load(path, weights_only=True)
    real = ckpt.build_generator

    def build_with_a_warning(*args, **kwargs):
        warnings.warn("a library's warning while the file is read", UserWarning, stacklevel=2)
        return real(*args, **kwargs)

    monkeypatch.setattr(ckpt, "build_generator", build_with_a_warning)
    bad = {**state, "G_ema": {f"old.{k}": v for k, v in state["G_ema"].items()}}
    with warnings.catch_warnings(record=True) as shown:
        warnings.simplefilter("always")
        with pytest.raises(CheckpointError):
            ckpt.load_generator(tmp_path / "bad.pt", state=bad)
        assert shown == []
        ckpt.load_generator(path, state=state)  # a checkpoint that opens: its warning is shown
    assert [str(w.message) for w in shown] == ["a library's warning while the file is read"]


@pytest.mark.parametrize("writer", ["save_grid", "save_image"])
def test_a_picture_that_fails_mid_write_leaves_the_previous_file_and_no_temporary(tmp_path, monkeypatch, writer):
    """A run's grids are rewritten every tick (samples/latest.png, final.png) and every command's
    pictures go through the same two writers: a write that dies after some bytes leaves the
    previous PNG whole at the final name and no hidden temporary file; a complete write
    replaces it and leaves nothing else in the folder."""
    import PIL.Image

    from gan_kit.tools import grids

    path = tmp_path / "samples" / "latest.png"
    images = torch.linspace(-1, 1, 4 * 3 * 8 * 8).reshape(4, 3, 8, 8)
    write = (lambda x: grids.save_grid(x, path)) if writer == "save_grid" else (lambda x: grids.save_image(x[0], path))
    write(images)
    before = path.read_bytes()
    real_save = PIL.Image.Image.save

    def dies_half_way(self, fp, *args, **kwargs):
        real_save(self, fp, *args, **kwargs)
        Path(fp).write_bytes(Path(fp).read_bytes()[:20])  # a truncated PNG, then the process dies
        raise KeyboardInterrupt

    monkeypatch.setattr(PIL.Image.Image, "save", dies_half_way)
    with pytest.raises(KeyboardInterrupt):
        write(-images)
    assert path.read_bytes() == before and sorted(p.name for p in path.parent.iterdir()) == ["latest.png"]
    monkeypatch.setattr(PIL.Image.Image, "save", real_save)
    write(-images)
    assert path.read_bytes() != before and Image.open(path).size[0] >= 8
    assert sorted(p.name for p in path.parent.iterdir()) == ["latest.png"]
