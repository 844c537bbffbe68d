"""Evaluation metrics and their scheduling during training.

``swd``: multi-scale sliced Wasserstein distance on Laplacian-pyramid patches (Karras et al.
2018, sec. 5 and appendix D). It needs no downloaded weights.

``fid``, ``kid``, ``precision-recall``, ``is``: on deep features through torch-fidelity (optional
extra ``gankit[fid]``), in ``gan_kit.builtin.metrics.inception``; their weights must already be on
disk: gankit never downloads them, and says in one line what is missing.
"""

from __future__ import annotations

import math
import sys

import attrs
import numpy as np
import torch
import torch.nn.functional as F

from gan_kit import Metric, StashKey, hookimpl, option
from gan_kit.builtin.reporting import status
from gan_kit.tools.evaluate import evaluate
from gan_kit.base.errors import clip

_BLUR = torch.tensor([1.0, 4.0, 6.0, 4.0, 1.0]) / 16.0


def _blur(x: torch.Tensor) -> torch.Tensor:
    """5x5 binomial filter ``[1 4 6 4 1]^2 / 256`` with mirror borders (``cv2.pyrDown``'s kernel,
    ``scipy.ndimage.convolve(mode="mirror")`` in the official code). ``x``: ``[N,C,H,W]``."""
    c = x.shape[1]
    k = (_BLUR[:, None] * _BLUR[None, :]).to(x)
    k = k.expand(c, 1, 5, 5)
    return F.conv2d(F.pad(x, (2, 2, 2, 2), mode="reflect"), k, groups=c)


def pyr_down(x: torch.Tensor) -> torch.Tensor:
    """Blur and keep every second pixel: ``[N,C,H,W] -> [N,C,H/2,W/2]``."""
    return _blur(x)[..., ::2, ::2]


def pyr_up(x: torch.Tensor) -> torch.Tensor:
    """Zero-insertion upsampling followed by the blur times 4: ``[N,C,H,W] -> [N,C,2H,2W]``."""
    n, c, h, w = x.shape
    up = x.new_zeros(n, c, 2 * h, 2 * w)
    up[..., ::2, ::2] = x * 4.0
    return _blur(up)


def laplacian_pyramid(x: torch.Tensor, min_resolution: int = 16) -> list[torch.Tensor]:
    """Levels from the finest: Laplacian bands ``x - pyr_up(pyr_down(x))`` while the side is
    above ``min_resolution``, then the Gaussian (low-pass) level at ``min_resolution``
    (PGGAN appendix D: a 16x16 low-pass level, doubling up to the full resolution). Images of
    ``min_resolution`` or smaller give that one level. ``x``: ``[N,C,H,W]``, H = W a power of 2."""
    levels = []
    while x.shape[-1] > min_resolution:
        down = pyr_down(x)
        levels.append(x - pyr_up(down))
        x = down
    levels.append(x)
    return levels


def patches(level: torch.Tensor, per_image: int, size: int, g: torch.Generator) -> torch.Tensor:
    """``per_image`` random ``size x size`` neighbourhoods lying wholly inside every image, drawn
    independently: ``[N*per_image, C, size, size]`` (``size`` capped at the image side)."""
    n, c, h, w = level.shape
    size = min(size, h, w)
    ys = torch.randint(0, h - size + 1, (n, per_image), generator=g)
    xs = torch.randint(0, w - size + 1, (n, per_image), generator=g)
    off = torch.arange(size)
    rows = (ys[..., None] + off)[..., :, None].expand(n, per_image, size, size)
    cols = (xs[..., None] + off)[..., None, :].expand(n, per_image, size, size)
    idx_n = torch.arange(n)[:, None, None, None].expand_as(rows)
    out = level.permute(0, 2, 3, 1)[idx_n, rows, cols]  # [N, P, s, s, C]
    return out.permute(0, 1, 4, 2, 3).reshape(n * per_image, c, size, size)


def normalize_descriptors(desc: torch.Tensor) -> torch.Tensor:
    """``[M, C, s, s] -> [M, C*s*s]``: each colour channel shifted and scaled to zero mean and
    unit standard deviation over all descriptors and positions of this set (PGGAN appendix D;
    official ``finalize_descriptors``). Each image set is normalised with its own statistics."""
    mean = desc.mean(dim=(0, 2, 3), keepdim=True)
    std = desc.std(dim=(0, 2, 3), keepdim=True, unbiased=False).clamp_min(1e-8)
    return ((desc - mean) / std).reshape(desc.shape[0], -1)


def sliced_wasserstein(a: torch.Tensor, b: torch.Tensor, directions: int, repeats: int, g: torch.Generator) -> float:
    """Sliced Wasserstein-1 distance between descriptor sets ``a`` and ``b`` ``[M, D]`` (same M):
    for each of ``repeats`` sets of ``directions`` random unit vectors, the mean over vectors and
    points of |sorted(a.v) - sorted(b.v)|; averaged over repeats (Rabin et al. 2011; the paper's
    512 projections are 4 repeats x 128 directions)."""
    if a.shape != b.shape:
        raise ValueError(f"descriptor sets differ in shape: {tuple(a.shape)} vs {tuple(b.shape)}")
    total = 0.0
    for _ in range(repeats):
        dirs = torch.randn(a.shape[1], directions, generator=g)
        dirs = (dirs / dirs.norm(dim=0, keepdim=True)).to(a.device)
        pa, pb = (a @ dirs).T.contiguous(), (b @ dirs).T.contiguous()  # [directions, M]
        if a.device.type == "cpu":  # numpy's sort is several times faster than torch's on the CPU
            sa, sb = np.sort(pa.numpy(), axis=1), np.sort(pb.numpy(), axis=1)
            total += float(np.abs(sa - sb).mean(dtype=np.float64))
        else:
            sa, sb = torch.sort(pa, dim=1).values, torch.sort(pb, dim=1).values
            total += (sa - sb).abs().double().mean().item()
    return total / repeats


def swd(fake: torch.Tensor, real: torch.Tensor, *, seed: int = 0, patches_per_image: int = 128,
        patch_size: int = 7, directions: int = 128, repeats: int = 4, min_resolution: int = 16,
        device: torch.device | str | None = None) -> dict[str, float]:
    """Multi-scale sliced Wasserstein distance (Karras et al. 2018, sec. 5 and appendix D).

    ``fake`` and ``real``: ``[N,C,H,W]`` image sets at the same resolution (any value range: each
    set's descriptors are normalised per channel); the first ``min(N_fake, N_real)`` of each are
    used. For every Laplacian-pyramid level, ``patches_per_image`` 7x7 descriptors per image are
    compared with ``repeats x directions`` (4 x 128 = the paper's 512) random projections.

    Returns ``{"<side>": SWD x 1e3 of that level (finest first), "avg": mean over levels}``; lower
    is better. Repeatable: every random choice comes from a CPU generator seeded with ``seed``;
    ``device`` (default CPU) only says where the projections are computed and sorted.
    """
    if fake.shape[1:] != real.shape[1:]:
        raise ValueError(f"swd: image sets differ in shape: {tuple(fake.shape[1:])} vs {tuple(real.shape[1:])}")
    n = min(fake.shape[0], real.shape[0])
    g = torch.Generator().manual_seed(seed)
    fake, real = fake[:n].detach().float().cpu(), real[:n].detach().float().cpu()
    out: dict[str, float] = {}
    for lf, lr_ in zip(laplacian_pyramid(fake, min_resolution), laplacian_pyramid(real, min_resolution)):
        da = normalize_descriptors(patches(lf, patches_per_image, patch_size, g))
        db = normalize_descriptors(patches(lr_, patches_per_image, patch_size, g))
        if device is not None:
            da, db = da.to(device), db.to(device)
        out[str(lf.shape[-1])] = sliced_wasserstein(da, db, directions, repeats, g) * 1e3
    out["avg"] = sum(out.values()) / len(out)
    return out


class FromOptions(Metric):
    """A metric whose ``num_images`` and ``seed`` are options of its own."""

    @property
    def num_images(self) -> int:
        return self.options.num_images

    @property
    def seed(self) -> int:
        return self.options.seed


class SWD(FromOptions):
    """Multi-scale sliced Wasserstein distance x 1e3 on Laplacian-pyramid patches (PGGAN appendix D); lower is better."""

    value_range = (0.0, math.inf)  # a distance

    @attrs.frozen
    class Options:
        num_images: int = option(1024, min=2, max=2**20, help="Images from G_ema and from the data (capped at the data's size); "
                                            "the paper uses 16384.",)
        seed: int = option(0, help="Seed of the latents, real-image choice, patch positions and projections.",
                           min=0, max=2**32 - 1, max_exclusive=True)
        patches_per_image: int = option(128, help="7x7 descriptors drawn per image and pyramid level.",
                                        min=1, max=2**16)
        directions: int = option(128, help="Random projections per repeat (4 x 128 = the paper's 512).",
                                 min=1, max=2**16)
        repeats: int = option(4, help="Independent sets of projections averaged.", min=1, max=1024)
        per_class: bool = option(False, help="Class-conditional runs: also the SWD of every class (its real images "
                                             "against G_ema's images of that class) as Metrics/swd/class-<c>, and "
                                             "their mean as Metrics/swd/class-mean.")

    def compute(self, generate, reals, device):
        o = self.options
        n = min(o.num_images, reals.shape[0])
        fake = generate(n)
        res = swd(fake, reals[:n], seed=o.seed, patches_per_image=o.patches_per_image,
                  directions=o.directions, repeats=o.repeats, device=device)
        return {("Metrics/swd" if k == "avg" else f"Metrics/swd/{k}"): v for k, v in res.items()}


# --------------------------------------------------------- fid / kid / precision-recall / is --

@hookimpl
def register_metrics(register):
    register("swd", SWD)


#: Images shown at the previous tick, to find the ticks where ``every_kimg`` falls due.
prev_nimg_key = StashKey[int]()


@hookimpl
def run_started(run):
    run.stash[prev_nimg_key] = run.cur_nimg


@hookimpl(tryfirst=True)
def tick_finished(run, stats):
    """Evaluate the recipe's ``[[metric]]`` entries when due (every ``every_kimg``) and at the
    end; the values join the tick's stats so every reporter sees them. A metric that fails is
    reported in one line and the run goes on: it never costs the run its checkpoints or grids."""
    if not run.metrics:
        return
    prev, now = run.stash.get(prev_nimg_key, 0), run.cur_nimg
    run.stash[prev_nimg_key] = now
    for spec, metric in run.metrics:
        every = int(spec.slot.every_kimg * 1000) if spec.slot.every_kimg else 0
        due = bool(stats.get("Progress/final")) or (every > 0 and now // every > prev // every)
        # A streamed metric (fid, kid, precision-recall, is) splits its images across the
        # processes, so every process takes part; any other runs on rank 0 while the rest wait.
        if not (due and (run.is_main or getattr(metric, "streamed", False))):
            continue
        if run.is_main:
            # A published protocol (fid50k_full) generates its own count, whatever the data's size.
            n = metric.num_images if getattr(metric, "real_rule", None) is not None else \
                min(metric.num_images, len(run.metric_dataset))
            status(run, f"computing {spec.name} on {n} images")
        try:
            values = evaluate(run, metric)
            if run.is_main:
                stats.update(values)
        except Exception as e:  # noqa: BLE001 - any failure of a metric must not end the run
            first = clip(str(e))
            where = f" on process {run.rank}" if run.world_size > 1 else ""
            print(f"warning: {spec.key} ({spec.name}) failed at kimg {now / 1000:g}{where}: {type(e).__name__}: "
                  f"{first} (the run goes on without it; `gankit eval CHECKPOINT --metric {spec.name}` retries it)",
                  file=sys.stderr)
