"""Latent walks: spherical interpolation between Gaussian latents, open or closed walks through
several of them, and animated GIFs of them (MP4s: ``gan_kit.tools.video``)."""

from __future__ import annotations

from pathlib import Path

import torch

__all__ = ["slerp", "interpolate_latents", "walk_latents", "save_gif"]


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


def save_gif(frames: torch.Tensor, path: str | Path, ms_per_frame: int = 120, bounce: bool = True) -> None:
    """An animated GIF of ``frames[R, T, C, H, W]`` in [-1, 1]: frame t shows the R walks' t-th
    images as a grid of ceil(sqrt(R)) a row (``gan_kit.tools.grids.grid_frame``: cells upscaled
    to at least 32 px; 64 walks make an 8 x 8 grid, not a 64-image strip). ``bounce``: the walk
    is played forth and back (2T - 2 frames), so an open walk loops without a jump; False plays
    the T frames once a loop, for a closed walk (``walk_latents(..., loop=True)``)."""
    from PIL import Image

    from gan_kit.tools.grids import grid_frame

    t = frames.shape[1]
    order = list(range(t)) + (list(range(t - 2, 0, -1)) if bounce else [])
    images = []
    for k in order:
        arr = grid_frame(frames[:, k]).numpy()
        images.append(Image.fromarray(arr[..., 0] if arr.shape[-1] == 1 else arr))
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    images[0].save(path, save_all=True, append_images=images[1:], duration=ms_per_frame, loop=0)
