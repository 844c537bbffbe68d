"""Evaluation metrics and their scheduling during training.

``swd``: multi-scale sliced Wasserstein distance on Laplacian-pyramid patches (Karras et al.
2018, sec. 5 and appendix D). It needs no downloaded weights.
"""

from __future__ import annotations

import attrs
import torch
import torch.nn.functional as F

from gan_kit import Metric, hookimpl, option
from gan_kit.phase import fade_real

_BLUR = torch.tensor([1.0, 4.0, 6.0, 4.0, 1.0]) / 16.0


def _blur(x: torch.Tensor) -> torch.Tensor:
    c = x.shape[1]
    k = (_BLUR[:, None] * _BLUR[None, :]).to(x)
    k = k.expand(c, 1, 5, 5)
    return F.conv2d(F.pad(x, (2, 2, 2, 2), mode="reflect"), k, groups=c)


def laplacian_pyramid(x: torch.Tensor, min_resolution: int = 16) -> list[torch.Tensor]:
    """Bands from the finest: Laplacian bands down to ``min_resolution``, then the Gaussian
    level at ``min_resolution`` (appendix D). Images smaller than that give one level."""
    levels = []
    while x.shape[-1] > min_resolution:
        down = _blur(x)[..., ::2, ::2]
        up = torch.zeros_like(x)
        up[..., ::2, ::2] = down * 4.0
        levels.append(x - _blur(up))
        x = down
    levels.append(x)
    return levels


def patches(level: torch.Tensor, per_image: int, size: int, g: torch.Generator) -> torch.Tensor:
    """``per_image`` random ``size x size`` neighbourhoods of every image: ``[N*per_image, C*size*size]``."""
    n, c, h, w = level.shape
    size = min(size, h, w)
    ys = torch.randint(0, h - size + 1, (n, per_image), generator=g)
    xs = torch.randint(0, w - size + 1, (n, per_image), generator=g)
    off = torch.arange(size)
    rows = (ys[..., None] + off)[..., :, None].expand(n, per_image, size, size)
    cols = (xs[..., None] + off)[..., None, :].expand(n, per_image, size, size)
    idx_n = torch.arange(n)[:, None, None, None].expand_as(rows)
    out = level.permute(0, 2, 3, 1)[idx_n, rows, cols]  # [N, P, s, s, C]
    return out.permute(0, 1, 4, 2, 3).reshape(n * per_image, c * size * size)


def _normalize(desc: torch.Tensor) -> torch.Tensor:
    return (desc - desc.mean(dim=0, keepdim=True)) / desc.std(dim=0, keepdim=True).clamp_min(1e-8)


def sliced_wasserstein(a: torch.Tensor, b: torch.Tensor, directions: int, repeats: int, g: torch.Generator) -> float:
    """Mean over ``repeats`` of the average 1-D Wasserstein-1 distance between ``a`` and ``b``
    ([n, d] each) projected on ``directions`` random unit vectors."""
    n = min(a.shape[0], b.shape[0])
    a, b = a[:n], b[:n]
    total = 0.0
    for _ in range(repeats):
        dirs = torch.randn(a.shape[1], directions, generator=g)
        dirs = dirs / dirs.norm(dim=0, keepdim=True)
        pa = torch.sort(a @ dirs, dim=0).values
        pb = torch.sort(b @ dirs, dim=0).values
        total += (pa - pb).abs().mean().item()
    return total / repeats


def swd(fake: torch.Tensor, real: torch.Tensor, *, seed: int = 0, patches_per_image: int = 128,
        patch_size: int = 7, directions: int = 512, repeats: int = 4, min_resolution: int = 16) -> dict[str, float]:
    """Multi-scale SWD between image sets ``fake`` and ``real`` ``[N,C,H,W]`` in [-1, 1].

    Returns ``{"<res>": distance * 1e3 per pyramid level, "avg": mean}`` (the paper reports
    values x 1e3). Repeatable: every random choice comes from a generator seeded with ``seed``.
    """
    g = torch.Generator().manual_seed(seed)
    fake, real = fake.float().cpu(), real.float().cpu()
    out: dict[str, float] = {}
    for lf, lr_ in zip(laplacian_pyramid(fake, min_resolution), laplacian_pyramid(real, min_resolution)):
        da = _normalize(patches(lf, patches_per_image, patch_size, g))
        db = _normalize(patches(lr_, patches_per_image, patch_size, g))
        out[str(lf.shape[-1])] = sliced_wasserstein(da, db, directions, repeats, g) * 1e3
    out["avg"] = sum(out.values()) / len(out)
    return out


class SWD(Metric):
    """Multi-scale sliced Wasserstein distance x 1e3 (PGGAN appendix D); lower is better."""

    @attrs.frozen
    class Options:
        num_images: int = option(1024, help="Images from G_ema and from the data (capped at the data's size).")
        seed: int = option(0, help="Seed of the latents, patch positions and projections (repeatable).")
        patches_per_image: int = option(128, help="7x7 descriptors drawn per image and level.")
        directions: int = option(512, help="Random projections per repeat.")
        repeats: int = option(4, help="Independent sets of projections averaged.")

    def compute(self, generate, reals, device):
        o = self.options
        n = min(o.num_images, reals.shape[0])
        fake = generate(n)
        res = swd(fake, reals[:n], seed=o.seed, patches_per_image=o.patches_per_image,
                  directions=o.directions, repeats=o.repeats)
        return {("Metrics/swd" if k == "avg" else f"Metrics/swd/{k}"): v for k, v in res.items()}


def evaluate(run, metric, num_images: int | None = None) -> dict[str, float]:
    """Run ``metric`` on ``run``'s G_ema at the current phase against real images blended the same way."""
    n = num_images or getattr(metric.options, "num_images", 1024)
    seed = getattr(metric.options, "seed", 0)
    reals = run.real_images(min(n, len(run.dataset)), seed=seed)
    reals = fade_real(reals, run.phase.resolution, run.phase.alpha)
    g = torch.Generator().manual_seed(seed + 1)

    def generate(k: int) -> torch.Tensor:
        return run.generate(torch.randn(k, run.latent_dim, generator=g))

    return metric.compute(generate, reals, run.device)


@hookimpl
def register_metrics(register):
    register("swd", SWD)


@hookimpl
def run_started(run):
    run.state[__name__] = {"prev_nimg": run.cur_nimg}


@hookimpl(tryfirst=True)
def tick_finished(run, stats):
    """Evaluate the recipe's ``[[metric]]`` entries when due (every ``every_kimg``) and at the
    end; the values join the tick's stats so every reporter sees them."""
    if not run.metrics:
        return
    state = run.state.setdefault(__name__, {"prev_nimg": 0})
    prev, now = state["prev_nimg"], run.cur_nimg
    state["prev_nimg"] = now
    for spec, metric in run.metrics:
        every = int(spec.slot.every_kimg * 1000) if spec.slot.every_kimg else 0
        due = bool(stats.get("Progress/final")) or (every > 0 and now // every > prev // every)
        if due and run.is_main:
            stats.update(evaluate(run, metric))
