"""Latent walks: spherical interpolation between Gaussian latents (or linear between W vectors),
open or closed walks through several of them, their frames drawn a few at a time
(``walk_frames``), and animated GIFs of them (MP4s: ``gan_kit.tools.video``).

A walk of T frames is never held whole: ``walk_segment`` gives the latents of frames
``[start, stop)`` alone, ``walk_frames`` draws and lays out ``FRAME_BATCH`` images at a time and
yields each frame as it is ready, so an MP4 of any length takes the memory of a few frames
(stylegan2-ada-pytorch's gen_video.py writes frame by frame the same way).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Iterable, Iterator

import torch

from gan_kit.base.errors import GankitError

__all__ = ["slerp", "interpolate_latents", "walk_latents", "walk_length", "walk_segment", "walk_keys", "draw_walk", "walk_frames",
           "gif_delay", "save_gif", "write_gif", "FRAME_BATCH", "GIF_MAX_FPS"]

#: Images drawn per forward while a walk is drawn (frames per batch: FRAME_BATCH // walks, at
#: least one): the memory of a walk does not grow with its length.
FRAME_BATCH = 64

#: GIF stores each frame's delay in hundredths of a second (an unsigned 16-bit number), and
#: browsers play delays below 2/100 s at 1/10 s: 50 fps is the fastest a GIF plays as written.
GIF_MAX_FPS = 50.0
_GIF_MAX_DELAY = 65535  # centiseconds, 10.9 minutes a frame: 100 / 65535 fps is the slowest


def slerp(a: torch.Tensor, b: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
    """Spherical interpolation between latents ``a`` and ``b`` ``[..., D]`` at ``t`` in [0, 1]
    (broadcast against the leading dims). Gaussian latents lie near a sphere, which linear
    interpolation leaves (White 2016, "Sampling Generative Networks", sec. 2.2)."""
    a_n, b_n = a / a.norm(dim=-1, keepdim=True), b / b.norm(dim=-1, keepdim=True)
    omega = torch.acos((a_n * b_n).sum(-1, keepdim=True).clamp(-1 + 1e-7, 1 - 1e-7))
    so = torch.sin(omega)
    return (torch.sin((1 - t) * omega) / so) * a + (torch.sin(t * omega) / so) * b


def interpolate_latents(pairs: torch.Tensor, steps: int) -> torch.Tensor:
    """``pairs[R, 2, D]`` -> ``[R, steps, D]``: each row walks from ``pairs[r, 0]`` to
    ``pairs[r, 1]`` (both included): ``walk_latents`` of two points."""
    return walk_latents(pairs, steps)


def walk_latents(points: torch.Tensor, steps: int, loop: bool = False) -> torch.Tensor:
    """``points[R, P, D]`` (P >= 2 latents a row) -> ``[R, T, D]``: each row walks through its
    points in order, ``steps`` latents a segment (both ends counted, so consecutive segments
    share their end point), slerp between consecutive points (``slerp``).

    Open (``loop`` False): P - 1 segments, T = (P - 1) * (steps - 1) + 1, from the first point to
    the last (P = 2 is ``interpolate_latents``). Closed (``loop`` True): a last segment runs from
    the last point back to the first, which is not repeated at the end, so T = P * (steps - 1)
    and the latent after the last one is the first: played in a loop the walk has no seam and no
    frame twice (a closed walk through P = 2 points goes there and back along one arc).
    Raises ValueError for P < 2 or ``steps`` < 2.
    """
    r, p, _ = points.shape
    if p < 2 or steps < 2:
        raise ValueError(f"walk_latents: needs at least 2 points and 2 steps, got {p} points and {steps} steps")
    ends = torch.cat([points, points[:, :1]], dim=1) if loop else points
    t = torch.linspace(0, 1, steps)[:-1].view(1, 1, steps - 1, 1)  # each segment without its end point
    segments = slerp(ends[:, :-1].unsqueeze(2), ends[:, 1:].unsqueeze(2), t)  # [R, segments, steps - 1, D]
    walk = segments.flatten(1, 2)
    return walk if loop else torch.cat([walk, points[:, -1:]], dim=1)


def walk_length(points: int, steps: int, loop: bool = False) -> int:
    """Frames of a walk through ``points`` latents, ``steps`` a segment: ``(points - 1) *
    (steps - 1) + 1`` open, ``points * (steps - 1)`` closed (``walk_latents``)."""
    return points * (steps - 1) if loop else (points - 1) * (steps - 1) + 1


def walk_segment(points: torch.Tensor, steps: int, start: int, stop: int, loop: bool = False, *,
                 spherical: bool = True) -> torch.Tensor:
    """Frames ``start`` to ``stop - 1`` of the walks through ``points[R, P, ...]``:
    ``[R, stop - start, ...]``, the same latents as ``walk_latents(points, steps, loop)[:, start:stop]``
    without making the whole walk. ``spherical`` False interpolates linearly (W vectors, which are
    not Gaussian: gen_video.py interpolates W, not z, between keyframes), over every trailing
    dimension (``points[R, P, num_ws, w_dim]``). Raises ValueError as ``walk_latents`` does, or
    for a range outside the walk."""
    r, p = points.shape[:2]
    if p < 2 or steps < 2:
        raise ValueError(f"walk_segment: needs at least 2 points and 2 steps, got {p} points and {steps} steps")
    total = walk_length(p, steps, loop)
    if not 0 <= start <= stop <= total:
        raise ValueError(f"walk_segment: frames {start}:{stop} are outside the walk's {total}")
    ends = torch.cat([points, points[:, :1]], dim=1) if loop else points
    k = torch.arange(start, stop)
    seg = torch.div(k, steps - 1, rounding_mode="floor").clamp(max=ends.shape[1] - 2)
    t = (k - seg * (steps - 1)).float() / (steps - 1)  # t = 1 only at an open walk's last frame
    a, b = ends[:, seg], ends[:, seg + 1]  # [R, K, ...]
    t = t.view(1, -1, *([1] * (points.dim() - 2)))
    out = slerp(a, b, t) if spherical else a + (b - a) * t
    if not loop and stop == total:
        out[:, -1] = points[:, -1]  # the last point itself, as walk_latents ends
    return out


def walk_keys(trained, points: torch.Tensor, *, labels: torch.Tensor | None = None, truncation_psi: float = 1.0,
              space: str = "z") -> torch.Tensor:
    """The keyframes a walk interpolates between: ``points[R, P, latent_dim]`` (z) themselves for
    ``space`` "z"; for "w" each point's W, ``trained.styles(z, labels, truncation_psi)``,
    ``[R, P, num_ws, w_dim]``. ``labels[R]``: one class a walk. Raises ``GankitError`` for "w" and
    a G without a mapping network."""
    if space == "z":
        return points
    if space != "w":
        raise ValueError(f"walk_keys: space is 'z' or 'w', got {space!r}")
    trained.style_generator("a walk in W (--space w)")
    r, p = points.shape[:2]
    point_labels = labels.repeat_interleave(p) if labels is not None else None
    return trained.styles(points.flatten(0, 1), point_labels, truncation_psi).unflatten(0, (r, p))


def draw_walk(trained, keys: torch.Tensor, steps: int, start: int, stop: int, loop: bool = False, *,
              labels: torch.Tensor | None = None, truncation_psi: float = 1.0, space: str = "z") -> torch.Tensor:
    """Images ``[R, stop - start, C, H, W]`` of frames ``start`` to ``stop - 1`` of the walks
    through ``keys`` (``walk_keys``): z walked spherically and drawn with ``G(z, psi)``, or W
    walked linearly and drawn with ``G.synthesis(w)`` (psi already in the keys), constant noise."""
    r = keys.shape[0]
    walk = walk_segment(keys, steps, start, stop, loop, spherical=space == "z")  # [R, K, ...]
    if space == "w":
        images = trained.synthesize(walk.flatten(0, 1), noise_mode="const")
    else:
        frame_labels = labels.repeat_interleave(stop - start) if labels is not None else None
        images = trained.draw(walk.flatten(0, 1), frame_labels, truncation_psi=truncation_psi, noise_mode="const")
    return images.unflatten(0, (r, stop - start))


def walk_frames(trained, points: torch.Tensor, steps: int, loop: bool = False, *, labels: torch.Tensor | None = None,
                truncation_psi: float = 1.0, space: str = "z", batch: int | None = None) -> Iterator[torch.Tensor]:
    """Draw the walks through ``points[R, P, latent_dim]`` (z) with ``trained`` (a
    ``gan_kit.tools.trained.TrainedGenerator``) and yield their frames in order, each
    ``uint8 [H, W, C]``: the R walks' images at that frame laid out by
    ``gan_kit.tools.grids.grid_frame``. ``space`` "z" walks between the points spherically
    (``slerp``); "w" between their W linearly (``walk_keys``) - the keyframes are the points' own
    images either way. ``labels[R]``: one class a walk. About ``batch`` (default ``FRAME_BATCH``)
    images are drawn at a time, so memory does not grow with the walk's length."""
    from gan_kit.tools.grids import grid_frame

    r, p = points.shape[:2]
    keys = walk_keys(trained, points, labels=labels, truncation_psi=truncation_psi, space=space)
    total = walk_length(p, steps, loop)
    per = max(1, (FRAME_BATCH if batch is None else batch) // r)
    for start in range(0, total, per):
        stop = min(total, start + per)
        images = draw_walk(trained, keys, steps, start, stop, loop, labels=labels, truncation_psi=truncation_psi,
                           space=space)
        for k in range(stop - start):
            yield grid_frame(images[:, k])


def gif_delay(fps: float, option: str = "--fps") -> int:
    """The GIF frame delay, in hundredths of a second (what GIF stores), nearest to 1 / ``fps``.
    Raises ``GankitError`` (one line naming ``option``) for a rate GIF cannot store: above
    ``GIF_MAX_FPS`` (delays below 2/100 s, which browsers play at 1/10 s) or below 100 / 65535
    fps (a delay past GIF's 16 bits)."""
    if not fps > 0:
        raise GankitError(f"{option}: {fps} is not a frame rate; give a number above 0")
    delay = round(100 / fps)
    if fps > GIF_MAX_FPS:
        raise GankitError(f"{option}: {fps:g} frames per second is faster than a GIF plays (it stores delays in "
                          f"1/100 s, and browsers play delays under 2/100 s at 10 fps): give --fps {GIF_MAX_FPS:g} or "
                          f"less, or write an .mp4")
    if 100 / fps > _GIF_MAX_DELAY:
        raise GankitError(f"{option}: {fps:g} frames per second is slower than a GIF stores (at most "
                          f"{_GIF_MAX_DELAY / 100:g} s a frame): give --fps {math.ceil(1e4 * 100 / _GIF_MAX_DELAY) / 1e4:g} or more")
    return delay


def write_gif(frames: Iterable[torch.Tensor], path: str | Path, delay: int = 12, bounce: bool = True) -> int:
    """An animated GIF at ``path`` from ``frames`` (``uint8 [H, W, C]`` each, as ``walk_frames``
    yields them), ``delay`` hundredths of a second each (``gif_delay``), looping forever.
    ``bounce``: played forth and back (2T - 2 frames), so an open walk loops without a jump.
    Pillow holds a GIF's (8-bit) frames until it writes the file; the tensors that made them are
    not kept. Written under a temporary name and renamed when whole (``gan_kit.base.atomic``).
    Returns the number of frames of the file."""
    from PIL import Image

    from gan_kit.base.atomic import write_atomic

    images = []
    for frame in frames:
        arr = frame.numpy()
        images.append(Image.fromarray(arr[..., 0] if arr.shape[-1] == 1 else arr))
    if bounce:
        images += images[-2:0:-1]
    write_atomic(path, lambda f: images[0].save(f, format="GIF", save_all=True, append_images=images[1:],
                                                duration=delay * 10, loop=0))
    return len(images)


def save_gif(frames: torch.Tensor, path: str | Path, ms_per_frame: int = 120, bounce: bool = True) -> None:
    """An animated GIF of ``frames[R, T, C, H, W]`` in [-1, 1]: frame t shows the R walks' t-th
    images as a grid of ceil(sqrt(R)) a row (``gan_kit.tools.grids.grid_frame``: cells upscaled
    to at least 32 px; 64 walks make an 8 x 8 grid, not a 64-image strip). ``bounce``: the walk
    is played forth and back (2T - 2 frames), so an open walk loops without a jump; False plays
    the T frames once a loop, for a closed walk (``walk_latents(..., loop=True)``)."""
    from gan_kit.tools.grids import grid_frame

    write_gif((grid_frame(frames[:, k]) for k in range(frames.shape[1])), path, max(1, round(ms_per_frame / 10)),
              bounce)
