"""What ``gankit project`` does: a real image into a trained style generator's W or W+.

``project_image`` opens the generator (``gan_kit.tools.trained.open_generator``), reads the
target as image-folder reads a training image (``read_target``), builds the distance from
its name and ``--set-distance`` items (``build_distance``), runs the optimisation
(``gan_kit.tools.projection.project``) and writes, in the output folder:

- ``projected_w.npz``: key ``w``, float32 ``[1, num_ws, w_dim]`` (``save_projected_w`` /
  ``load_projected_w``; stylegan2-ada-pytorch's projector writes the same layout);
- ``target.png``: the target as G sees it (its resolution and channels);
- ``proj.png``: the synthesis of the result, with the optimised noise maps;
- ``compare.png``: target | projection side by side, each upscaled (nearest) to at least
  ``COMPARE_CELL`` pixels, to look at;
- with ``video``: ``proj.mp4``, target | projection side by side, every k-th step.

The folder is checked before the generator is read (one line naming it when it cannot be
written), and every file is written under a temporary name and renamed once all are written
(``gan_kit.tools.outputs``): Ctrl-C or an error mid-projection leaves the previous projection's
files as they were.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Callable, Iterable

import attrs
import numpy as np
import torch

from gan_kit.base.errors import GankitError
from gan_kit.tools.projection import Projection, ProjectionSettings, ProjectionStep, project

__all__ = ["Target", "read_target", "build_distance", "save_projected_w", "load_projected_w", "ProjectedImage",
           "project_image", "DEFAULT_DISTANCE", "COMPARE_CELL", "to_png"]

#: The distance ``gankit project`` minimises unless ``--distance`` names another.
DEFAULT_DISTANCE = "pixel-multiscale"

#: Smallest side of each image in ``compare.png``, in pixels.
COMPARE_CELL = 128

_MODE_NAMES = {1: "L", 3: "RGB", 4: "RGBA"}


@attrs.frozen
class Target:
    """A target image as G sees it: ``image`` float32 ``[1, C, r, r]`` in [-1, 1]; ``note``: the
    line saying how the file was converted (``digit.png: 640x480 RGB -> 16x16 L (...)``), or
    None when it already was an r x r image of G's mode."""

    image: torch.Tensor
    note: str | None


def _framing(recipe: Any):
    """The image-folder framing (``fit``, ``background``, ``pad_color``) of the recipe's data
    when it has one, else the default (centre crop, transparency over white)."""
    from gan_kit.training.imageio import DEFAULT_FRAMING, Framing

    options = getattr(getattr(recipe, "data", None), "options", None)
    if options is None or not hasattr(options, "fit"):
        return DEFAULT_FRAMING
    return Framing(fit=options.fit, background=tuple(options.background),
                   pad_color=None if getattr(options, "pad_color", None) is None else tuple(options.pad_color))


def read_target(path: str | Path, resolution: int, channels: int, recipe: Any = None) -> Target:
    """The image file at ``path`` as the data pipeline (``image-folder``) makes a training image of it
    (``gan_kit.training.imageio.load_image``: EXIF orientation, mode conversion - grey as
    ITU-R 601 luma, transparency composited over the background -, then the centre square
    resized with Pillow's bicubic filter, antialiased when shrinking; or letterboxed when the
    recipe's data says ``fit = "pad"``), scaled to [-1, 1]. ``recipe``: the generator's, whose
    image-folder framing options are used when it has them. Raises ``GankitError`` (one line
    naming ``--target`` and the file) for a missing file or one Pillow cannot read."""
    from gan_kit.training.imageio import DECODE_ERRORS, load_image, reason

    path = Path(path)
    if not path.is_file():
        what = "is a folder, not a file" if path.is_dir() else "does not exist"
        raise GankitError(f"--target: {str(path)!r} {what} (give an image file: .png, .jpg, ...)")
    framing = _framing(recipe)
    facts: dict = {}
    try:
        pixels = load_image(path, resolution, channels, framing=framing, facts=facts)
    except DECODE_ERRORS as e:
        raise GankitError(f"--target: {str(path)!r} is not an image Pillow can read ({reason(e)})") from None
    image = pixels.float().div(127.5).sub(1).unsqueeze(0)
    (w, h), alpha, mode = facts["size"], facts["alpha"], facts["mode"]
    target_mode = _MODE_NAMES[channels]
    steps = []
    pad = framing.fit == "pad"
    side = max(w, h) if pad else min(w, h)  # the side that becomes the resolution
    if w != h:
        steps.append("letterboxed" if pad else "centre crop")
    if side != resolution:
        steps.append(f"resized with Pillow's bicubic filter{', antialiased' if side > resolution else ''}")
    if alpha and channels != 4:
        steps.append(f"transparency over {list(framing.background)}")
    deep = mode in ("I", "F") or mode.startswith("I;16")
    grey = deep or mode in ("1", "L", "LA", "La")
    if deep:
        steps.append("scaled to 8 bits")
    if channels == 1 and not grey:
        steps.append("grey as ITU-R 601 luma")
    elif channels >= 3 and grey:
        steps.append("grey repeated to RGB")
    note = None
    if steps or mode != target_mode:
        note = (f"{path.name}: {w}x{h} {mode} -> {resolution}x{resolution} {target_mode} "
                f"({', '.join(steps) or 'converted'}), as image-folder reads a training image")
    return Target(image, note)


def build_distance(name: str, items: Iterable[str], resolution: int, channels: int, registry: Any = None) -> Any:
    """The distance component ``name`` (kind ``distance``) with the options ``items`` (each
    ``KEY=VALUE``, the value TOML as in ``--set``), built for images of ``resolution`` and
    ``channels``. Raises ``GankitError``: an unknown name (with the names available), a bad item
    or option (every problem, one line each, naming ``--set-distance``), or what the distance
    itself raises (a missing weights file)."""
    from gan_kit.base.options import field_default, option_fields, toml_value
    from gan_kit.plugin_api.components import BuildContext
    from gan_kit.plugin_api.manager import build_plugins
    from gan_kit.recipe import parse_options, parse_set

    registry = registry if registry is not None else build_plugins().registry
    try:
        comp = registry.get("distance", name)
    except KeyError as e:
        raise GankitError(f"--distance: {e.args[0]}") from None
    fields = option_fields(comp.Options)
    table: dict[str, Any] = {}
    for item in items:
        key, sep, text = (part.strip() for part in item.partition("="))
        if not sep or not text or not re.fullmatch(r"[A-Za-z_]\w*", key):
            takes = ", ".join(f.name for f in fields) or "none"
            example = (f", e.g. --set-distance {fields[0].name}={toml_value(field_default(fields[0]))}"
                       if fields and field_default(fields[0]) not in (attrs.NOTHING, None) else "")
            raise GankitError(f"--set-distance {item!r}: write KEY=VALUE, KEY one of distance {name}'s options "
                              f"({takes}){example}")
        try:
            table[key] = parse_set(f"{key}={text}")[1]  # the value as TOML, a bare word or path as a string
        except ValueError:
            raise GankitError(f"--set-distance {item!r}: {text!r} is not a TOML value (numbers 2 or 0.5, true/false, "
                              f"arrays [1, 2]; quote other strings: --set-distance {key}='\"{text}\"')") from None
    problems: list[str] = []
    options = parse_options(comp.Options, table, "--set-distance", name, problems, owner=f"distance {name!r}",
                            range_fix="see gankit list-plugins --kind distance -v")
    for key, message in (comp.factory.problems(options, None) if options is not None else ()):
        problems.append(f"--set-distance: {name}.{key}: {message}")
    if problems:
        raise GankitError("\n".join(problems))
    return comp.factory(options, BuildContext(resolution=resolution, channels=channels))


def save_projected_w(path: str | Path, w: torch.Tensor) -> None:
    """Write ``w[1, num_ws, w_dim]`` as ``projected_w.npz`` with key ``w``, float32: the layout
    stylegan2-ada-pytorch's projector writes and its ``generate.py --projected-w`` reads."""
    if w.dim() != 3 or w.shape[0] != 1:
        raise ValueError(f"save_projected_w: expected w[1, num_ws, w_dim], got {tuple(w.shape)}")
    np.savez(Path(path), w=w.detach().float().cpu().numpy())


def load_projected_w(path: str | Path) -> torch.Tensor:
    """``w[1, num_ws, w_dim]`` float32 from a ``projected_w.npz`` (key ``w``). Raises
    ``GankitError`` (one line) for a file without that key or of another shape."""
    with np.load(Path(path)) as f:
        if "w" not in f.files:
            raise GankitError(f"{path}: no array 'w' (keys: {', '.join(f.files) or 'none'}); gankit project writes it")
        w = torch.from_numpy(np.asarray(f["w"], dtype=np.float32))
    if w.dim() != 3:
        raise GankitError(f"{path}: 'w' is {list(w.shape)}, not [N, num_ws, w_dim]")
    return w


def to_png(image: torch.Tensor, path: str | Path) -> None:
    """``image[1, C, r, r]`` in [-1, 1] as an r x r PNG (grey, RGB or RGBA), its pixels
    ``gan_kit.tools.grids.to_uint8``'s (the grids' mapping): the exact pixels, not upscaled."""
    from PIL import Image

    from gan_kit.tools.grids import to_uint8

    arr = to_uint8(image[0]).permute(1, 2, 0).numpy()
    Image.fromarray(arr[..., 0] if arr.shape[-1] == 1 else arr).save(path)


@attrs.frozen
class ProjectedImage:
    """What ``project_image`` did: the ``projection`` (w, image, distances), the ``files``
    written, the ``target`` read, the video's ``frames`` (0 without one), and the generator's
    ``num_ws`` / ``w_dim`` / ``resolution`` / ``channels``, ``device`` and ``distance`` name."""

    projection: Projection
    target: Target
    files: tuple[Path, ...]
    frames: int
    num_ws: int
    w_dim: int
    resolution: int
    channels: int
    device: torch.device
    distance: str


def project_image(checkpoint: str | Path, target: str | Path, outdir: str | Path, *,
                  settings: ProjectionSettings | None = None, distance: str = DEFAULT_DISTANCE,
                  distance_options: Iterable[str] = (), seed: int = 0, video: bool = False,
                  video_every: int | None = None, fps: float = 24.0, class_: str | None = None,
                  device: str = "auto", before: Callable[[Any, Target], None] | None = None,
                  on_step: Callable[[ProjectionStep], None] | None = None) -> ProjectedImage:
    """Project the image file ``target`` into the W (or W+: ``settings.space``) of the
    generator ``checkpoint`` names (a checkpoint file, a run directory or a ``gankit export``
    folder) and write ``outdir``'s files (module docstring). ``settings``: the projector's
    numbers (default ``ProjectionSettings()``: 1000 steps in W). ``class_``: the class K of a
    class-conditional G (an index or a class name). ``video_every``: a video frame every k-th
    step (default: steps // 100, at least 1; the last step always). ``before(generator,
    target)`` is called once everything is read and built, before the first step (the command
    prints there); ``on_step`` after every step.

    Raises ``GankitError`` (one line) for what the user named wrong: a G without per-layer styles,
    the target file, the distance or its options, the class, the device, ``outdir`` being a
    file, or a missing video library (checked before any work)."""
    from gan_kit.tools.grids import grid_frame, save_grid
    from gan_kit.tools.outputs import check_folder, staged_outputs
    from gan_kit.tools.trained import open_generator
    from gan_kit.tools.video import VideoWriter, check_video_support

    settings = settings or ProjectionSettings()
    outdir = Path(outdir)
    if outdir.exists() and not outdir.is_dir():
        raise GankitError(f"--outdir: {str(outdir)!r} is a file; name a folder (it is made when missing)")
    if video:
        check_video_support("--video")
    check_folder(outdir, "--outdir")  # before the generator is read and any step taken
    gen = open_generator(checkpoint, device)
    G = gen.style_generator("projecting an image into W")
    label = gen.class_label(class_) if class_ is not None else None
    labels = gen.labels(label, 1)
    labels = labels.to(gen.device) if labels is not None else None
    goal = read_target(target, gen.resolution, gen.channels, gen.recipe)
    dist = build_distance(distance, distance_options, gen.resolution, gen.channels)
    if before is not None:
        before(gen, goal)
    every = video_every or max(1, settings.steps // 100)
    image = goal.image.to(gen.device)
    files = [outdir / "projected_w.npz", outdir / "target.png", outdir / "proj.png", outdir / "compare.png"]
    frames = 0
    # Every file under a temporary name, all renamed once the last is written: an interrupted or
    # failed projection leaves the previous projection's files (or none), never a mix.
    with staged_outputs("--outdir") as staged:
        writer = VideoWriter(outdir / "proj.mp4", fps=fps, staged=staged) if video else None

        def step(state: ProjectionStep) -> None:
            if writer is not None and (state.step % every == 0 or state.step == state.steps):
                writer.append(grid_frame(torch.cat([image, state.image()]).cpu()))
            if on_step is not None:
                on_step(state)

        if writer is not None:
            with writer:
                result = project(G, image, dist, settings, latent_dim=gen.latent_dim, seed=seed, labels=labels,
                                 on_step=step)
            files.append(writer.path)
            frames = writer.frames
        else:
            result = project(G, image, dist, settings, latent_dim=gen.latent_dim, seed=seed, labels=labels, on_step=step)
        save_projected_w(staged.path(files[0]), result.w)
        to_png(goal.image, staged.path(files[1]))
        to_png(result.image, staged.path(files[2]))
        save_grid(torch.cat([goal.image, result.image]), staged.path(files[3]), size=max(gen.resolution, COMPARE_CELL),
                  nrow=2)
    return ProjectedImage(projection=result, target=goal, files=tuple(files), frames=frames,
                          num_ws=int(G.num_ws), w_dim=int(G.w_dim), resolution=gen.resolution, channels=gen.channels,
                          device=gen.device, distance=distance)
