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
    """An MP4 file written a frame at a time (a projection's steps, a walk's frames need not fit
    in memory)::

        with VideoWriter("walk.mp4", fps=24) as video:
            for frame in frames:          # uint8 [H, W, C], every frame the same size
                video.append(frame)

    The first frame fixes the size; a later frame of another size raises ValueError. ``quality``
    is imageio-ffmpeg's 0-10 scale (10: largest files, least error; the same ``-crf`` it gives
    libx264). Frames are piped to the ffmpeg binary imageio-ffmpeg ships, which encodes them
    into a temporary file beside ``path``; leaving the ``with`` block normally waits for the
    encoder, checks its exit status and the file it wrote, and only then renames the file to
    ``path``. An exception in the block (Ctrl-C included) stops the encoder and removes the
    temporary file: the previous ``path`` stays as it was, and no truncated video appears.
    ``staged``: a ``gan_kit.base.atomic.StagedFiles`` that renames the video together with other
    outputs (the caller commits it) instead of at close.

    Raises ``GankitError`` when imageio or imageio-ffmpeg is missing (``check_video_support``),
    and, naming ``path`` and the encoder's own reason, when the encoder fails or writes nothing.
    """

    def __init__(self, path: str | Path, fps: float = 24.0, quality: float = 8.0, *, staged: Any = None):
        check_video_support(str(path))
        if not fps > 0 or not math.isfinite(fps):
            raise ValueError(f"VideoWriter: fps must be a finite number > 0, got {fps}")
        self.path, self.fps, self.quality = Path(path), float(fps), float(quality)
        self.frames = 0
        self._staged = staged
        self._tmp: Path | None = None
        self._process: Any = None
        self._log: Any = None
        self._shape: tuple[int, ...] | None = None

    def _start(self, size: tuple[int, int]) -> None:
        import subprocess
        import tempfile
        from fractions import Fraction

        import imageio_ffmpeg

        from gan_kit.base.atomic import temporary_sibling

        from gan_kit.tools.outputs import write_error

        try:
            self._tmp = self._staged.path(self.path) if self._staged is not None else temporary_sibling(self.path)
        except OSError as e:
            raise GankitError(write_error(str(self.path), self.path, e)) from None
        crf = int((1 - self.quality / 10.0) * 51)
        fps = str(Fraction(self.fps).limit_denominator())
        command = [imageio_ffmpeg.get_ffmpeg_exe(), "-y", "-f", "rawvideo", "-vcodec", "rawvideo",
                   "-s", f"{size[1]}x{size[0]}", "-pix_fmt", "rgb24", "-r", fps, "-i", "-", "-an",
                   "-vcodec", "libx264", "-pix_fmt", "yuv420p", "-crf", str(crf), "-v", "error", str(self._tmp)]
        self._log = tempfile.TemporaryFile()  # the encoder's messages: a file, so a full pipe never blocks it
        self._process = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=self._log)

    def _failure(self, what: str) -> GankitError:
        from gan_kit.base.errors import clip

        said = ""
        if self._log is not None:
            self._log.seek(0)
            lines = [line for line in self._log.read().decode("utf-8", "replace").splitlines() if line.strip()]
            said = f": {clip(lines[-1].replace(str(self._tmp), str(self.path)), 200)}" if lines else ""
        return GankitError(f"{self.path}: the video could not be written ({what}{said}); check the folder's free "
                           f"space and permissions, or name another file")

    def append(self, frame: torch.Tensor) -> None:
        """Add one frame, ``uint8 [H, W, C]`` (``gan_kit.tools.grids.grid_frame`` makes one from
        images in [-1, 1]), made codec-ready by ``codec_frame``."""
        out = codec_frame(frame.detach().cpu())
        if self._process is None:
            self._start(tuple(out.shape[:2]))
            self._shape = tuple(frame.shape)
        elif tuple(frame.shape) != self._shape:
            raise ValueError(f"VideoWriter: frame {self.frames} is {tuple(frame.shape)}, the first was {self._shape}")
        try:
            self._process.stdin.write(out.numpy().tobytes())
        except (BrokenPipeError, OSError):  # the encoder stopped: its exit status and last message say why
            self._abort()
            raise self._failure(f"the encoder stopped at frame {self.frames} with exit status "
                                f"{self._process.returncode}") from None
        self.frames += 1

    def _abort(self) -> None:
        """Stop the encoder and remove the temporary file (the previous video stays)."""
        if self._process is not None and self._process.poll() is None:
            self._process.kill()
        if self._process is not None:
            self._process.wait()
            try:
                self._process.stdin.close()
            except OSError:
                pass  # the pipe is broken: the encoder is gone already
        if self._tmp is not None and self._staged is None:
            self._tmp.unlink(missing_ok=True)

    def close(self) -> None:
        """Finish the video: wait for the encoder, check its exit status and the file, rename it
        to ``path`` (unless ``staged``). Raises ``GankitError`` when the encoder failed; then no
        file is left at ``path`` but the previous one. A writer that got no frame writes no file."""
        if self._process is None:
            return
        try:
            try:
                self._process.stdin.close()
            except OSError:
                pass  # a broken pipe: the exit status below says what happened
            status = self._process.wait()
            if status != 0:
                raise self._failure(f"the encoder, ffmpeg, exited with status {status}")
            if self._tmp is None or not self._tmp.is_file() or self._tmp.stat().st_size == 0:
                raise self._failure("the encoder wrote no data")
            if self._staged is None:
                from gan_kit.base.atomic import replace_with

                replace_with(self._tmp, self.path)
        except BaseException:
            self._abort()
            raise
        finally:
            self._process = None
            if self._log is not None:
                self._log.close()
                self._log = None

    def __enter__(self) -> "VideoWriter":
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None, tb: TracebackType | None) -> None:
        if kind is None:
            self.close()
            return
        self._abort()
        self._process = None
        if self._log is not None:
            self._log.close()
            self._log = None


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
