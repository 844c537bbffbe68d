"""``gankit project CKPT --target IMAGE --outdir DIR``: a real image into a trained style
generator's W or W+ (``gan_kit.tools.project`` does the work)."""

from __future__ import annotations

import time
from pathlib import Path

import click

from gan_kit.base.errors import GankitError
from gan_kit.cli.errors import user_errors
from gan_kit.cli.paths import OutputPath

__all__ = ["project_command"]


@click.command("project")
@click.argument("checkpoint", type=click.Path(path_type=str))  # str: hf:// names stay whole
@click.option("--target", "target", type=click.Path(path_type=Path), required=True,
              help="Image file to project (any size and mode: converted as the image-folder data set reads a training "
                   "image, and a line says how).")
@click.option("--outdir", type=OutputPath(path_type=Path), required=True,
              help="Folder for projected_w.npz, target.png, proj.png, compare.png (and proj.mp4); made when missing.")
@click.option("--steps", type=click.IntRange(1), default=1000, show_default=True, help="Optimisation steps.")
@click.option("--space", type=click.Choice(["w", "w+"]), default="w", show_default=True,
              help="w: one W for every layer; w+: one W per layer (fits closer, edits less well).")
@click.option("--distance", default="pixel-multiscale", show_default=True, metavar="NAME",
              help="Image distance minimised (gankit list-plugins --kind distance), e.g. lpips-vgg16.")
@click.option("--set-distance", "distance_options", multiple=True, metavar="KEY=VALUE",
              help="An option of the distance (repeatable; TOML value), e.g. --set-distance weights=vgg16.pth.")
@click.option("--seed", type=click.IntRange(0), default=0, show_default=True,
              help="Seed of the latents W's start is averaged from, of the noise maps and of the W noise.")
@click.option("--video", is_flag=True, help="Also write proj.mp4: target | projection side by side, every k-th step.")
@click.option("--video-every", type=click.IntRange(1), default=None, metavar="K",
              help="With --video: a frame every K steps (default: steps // 100, at least 1).")
@click.option("--fps", type=click.FloatRange(0, min_open=True), default=24.0, show_default=True,
              help="With --video: frames per second.")
@click.option("--class", "class_", default=None, metavar="K",
              help="Class-conditional G: project into class K's W (an index or a class name).")
@click.option("--device", default="auto", show_default=True, metavar="DEVICE", help='"auto" (CUDA when present), "cpu", "cuda", "cuda:N".')
@user_errors
def project_command(checkpoint: str, target: Path, outdir: Path, steps: int, space: str, distance: str,
                    distance_options: tuple[str, ...], seed: int, video: bool, video_every: int | None, fps: float,
                    class_: str | None, device: str) -> None:
    """Find the W (or W+) whose image is closest to a real image, as stylegan2-ada-pytorch's projector
    does. CHECKPOINT is a checkpoint file, a run directory or a `gankit export` folder of a G
    with per-layer styles (stylegan2).  Writes DIR/projected_w.npz (key w, float32 [1, num_ws,
    w_dim]), DIR/target.png (the target as G sees it), DIR/proj.png (the projection),
    DIR/compare.png (both side by side, upscaled) and, with --video, DIR/proj.mp4. A model
    trained elsewhere works too: a network-snapshot .pkl of stylegan2-ada-pytorch, StyleGAN3 or
    R3GAN, or a TF-era StyleGAN2 pickle (read without running it), and hf://OWNER/REPO/FILE."""
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

    from gan_kit.tools.project import project_image
    from gan_kit.tools.projection import ProjectionSettings

    if (video_every is not None or fps != 24.0) and not video:
        option = "--video-every" if video_every is not None else "--fps"
        raise GankitError(f"{option}: shapes the video, which is written with --video only (add --video)")
    progress = Progress(TextColumn("[bold cyan]project"), BarColumn(), MofNCompleteColumn(),
                        TextColumn("distance {task.fields[dist]}"), TimeRemainingColumn(),
                        console=Console(stderr=True), transient=False)
    task = progress.add_task("project", total=steps, dist="-", start=False)
    last = [0.0]
    started = []  # the bar starts once everything is read: an error before it prints its one line alone

    def before(gen, goal) -> None:
        if goal.note:
            click.echo(goal.note)
        G = gen.G
        click.echo(f"projecting {target} into {space.upper()} of {gen.source} ({gen.architecture}, {gen.resolution}px, "
                   f"{G.num_ws} x {G.w_dim}) on {gen.device}: {steps} steps, distance {distance}")
        progress.start()
        progress.start_task(task)
        started.append(True)

    def on_step(state) -> None:
        now = time.perf_counter()
        if now - last[0] < 0.5 and state.step < state.steps:
            progress.update(task, completed=state.step)  # the distance is read twice a second: a device sync
            return
        last[0] = now
        progress.update(task, completed=state.step, dist=f"{float(state.distance):.4g}")

    try:
        done = project_image(checkpoint, target, outdir, settings=ProjectionSettings(steps=steps, space=space),
                             distance=distance, distance_options=distance_options, seed=seed, video=video,
                             video_every=video_every, fps=fps, class_=class_, device=device, before=before,
                             on_step=on_step)
    finally:
        if started:
            progress.stop()
    p = done.projection
    names = ", ".join(f.name for f in done.files[1:])
    frames = f" ({done.frames} frames)" if done.frames else ""
    click.echo(f"wrote {done.files[0]} (w {list(p.w.shape)}), {names} in {outdir}{frames}")
    click.echo(f"distance to the target ({distance}): {p.distance:.4g}, from {p.start_distance:.4g} for the average "
               f"W's image")
