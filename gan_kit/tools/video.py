"""MP4 videos of images in [-1, 1]: latent walks (``gankit sample --interpolate --out walk.mp4``)
and the steps of a projection (``gankit project --video``).

Written as H.264 in yuv420p, the form every player and browser plays, through imageio with its
imageio-ffmpeg plugin (which ships an ffmpeg binary; the optional extra ``gankit[video]``). That
codec and pixel format take only even sides and players do badly with tiny videos, so each frame
is upscaled by a whole factor (nearest, pixels stay square and sharp) until its shorter side is at
least ``MIN_SIDE`` pixels, then padded with black on the right / bottom to even sides. H.264 is
lossy: frames read back differ from the written ones by a few levels of 255 (``quality`` trades
size for that error).
"""

from __future__ import annotations

import math
from pathlib import Path
from types import TracebackType
from typing import Any

import torch
import torch.nn.functional as F

from gan_kit.base.errors import GankitError

__all__ = ["MIN_SIDE", "VIDEO_EXTRA", "VideoWriter", "check_video_support", "codec_frame", "save_mp4"]

#: Smallest shorter side of a written frame, in pixels.
MIN_SIDE = 64

#: What installs the libraries MP4 writing needs.
VIDEO_EXTRA = "pip install 'gankit[video]'"


def check_video_support(what: str) -> None:
    """Raise ``GankitError`` (one line naming ``what``, e.g. ``"--out walk.mp4"``, and the
    install command) unless imageio and imageio-ffmpeg can be imported. Checked before any work,
    so a missing library costs no projection or sampling time."""
    missing = []
    for module, dist in (("imageio", "imageio"), ("imageio_ffmpeg", "imageio-ffmpeg")):
        try:
            __import__(module)
        except ImportError:
            missing.append(dist)
    if missing:
        raise GankitError(f"{what}: writing MP4 needs the {' and '.join(missing)} package"
                          f"{'s' if len(missing) > 1 else ''}, not installed here ({VIDEO_EXTRA})")


def codec_frame(frame: torch.Tensor) -> torch.Tensor:
    """``uint8 [H, W, C]`` (C = 1 or 3; grey is repeated to RGB) -> ``uint8 [H', W', 3]`` that
    H.264 / yuv420p takes: upscaled by the smallest whole factor k (nearest) that makes
    ``min(k H, k W) >= MIN_SIDE``, then padded with black to even sides."""
    if frame.dtype != torch.uint8 or frame.dim() != 3 or frame.shape[-1] not in (1, 3):
        raise ValueError(f"codec_frame: expected uint8 [H, W, 1 or 3], got {frame.dtype} {tuple(frame.shape)}")
    h, w = frame.shape[:2]
    k = max(1, math.ceil(MIN_SIDE / min(h, w)))
    if k > 1:
        frame = frame.repeat_interleave(k, dim=0).repeat_interleave(k, dim=1)
    if frame.shape[-1] == 1:
        frame = frame.expand(-1, -1, 3)
    h, w = frame.shape[:2]
    return F.pad(frame.permute(2, 0, 1), (0, w % 2, 0, h % 2)).permute(1, 2, 0).contiguous()


class VideoWriter:
    """An MP4 file written a frame at a time (a projection's steps need not fit in memory)::

        with VideoWriter("walk.mp4", fps=24) as video:
            for frame in frames:          # uint8 [H, W, C], every frame the same size
                video.append(frame)

    The first frame fixes the size; a later frame of another size raises ValueError. ``quality``
    is imageio-ffmpeg's 0-10 scale (10: largest files, least error). The file is complete once the
    writer is closed (leaving the ``with`` block). Raises ``GankitError`` when imageio or
    imageio-ffmpeg is missing (``check_video_support``)."""

    def __init__(self, path: str | Path, fps: float = 24.0, quality: float = 8.0):
        check_video_support(str(path))
        if not fps > 0:
            raise ValueError(f"VideoWriter: fps must be > 0, got {fps}")
        self.path, self.fps, self.quality = Path(path), float(fps), float(quality)
        self.frames = 0
        self._writer: Any = None
        self._shape: tuple[int, ...] | None = None

    def append(self, frame: torch.Tensor) -> None:
        """Add one frame, ``uint8 [H, W, C]`` (``gan_kit.tools.grids.grid_frame`` makes one from
        images in [-1, 1]), made codec-ready by ``codec_frame``."""
        out = codec_frame(frame.detach().cpu())
        if self._writer is None:
            import imageio.v2 as imageio

            self.path.parent.mkdir(parents=True, exist_ok=True)
            # macro_block_size=2: the frames are already even; imageio's default (16) would resize them.
            self._writer = imageio.get_writer(self.path, format="FFMPEG", mode="I", fps=self.fps, codec="libx264",
                                              pixelformat="yuv420p", quality=self.quality, macro_block_size=2,
                                              ffmpeg_log_level="error")
            self._shape = tuple(frame.shape)
        elif tuple(frame.shape) != self._shape:
            raise ValueError(f"VideoWriter: frame {self.frames} is {tuple(frame.shape)}, the first was {self._shape}")
        self._writer.append_data(out.numpy())
        self.frames += 1

    def close(self) -> None:
        if self._writer is not None:
            self._writer.close()
            self._writer = None

    def __enter__(self) -> "VideoWriter":
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None, tb: TracebackType | None) -> None:
        self.close()


def save_mp4(frames: torch.Tensor, path: str | Path, fps: float = 24.0, quality: float = 8.0) -> int:
    """Write ``frames`` in [-1, 1] as an MP4 and return the number of frames written.

    ``frames[T, C, H, W]``: one image a frame; ``frames[R, T, C, H, W]``: R walks side by side,
    frame t the grid of their t-th images (``grid_frame``: ceil(sqrt(R)) a row, cells upscaled to
    at least 32 px), as ``gan_kit.tools.sampling.save_gif`` lays them out. The T frames are played
    once, in order. Raises ``GankitError`` when imageio or imageio-ffmpeg is missing, ValueError
    for another shape."""
    from gan_kit.tools.grids import grid_frame

    if frames.dim() == 4:
        frames = frames.unsqueeze(0)
    if frames.dim() != 5:
        raise ValueError(f"save_mp4: expected frames[T, C, H, W] or [R, T, C, H, W], got {tuple(frames.shape)}")
    with VideoWriter(path, fps, quality) as video:
        for t in range(frames.shape[1]):
            video.append(grid_frame(frames[:, t]))
    return frames.shape[1]
