"""Projecting an image into a style generator's W or W+: the latent whose image is closest to it.

The optimisation of stylegan2-ada-pytorch's ``projector.py`` (Karras et al. 2020, "Analyzing and
Improving the Image Quality of StyleGAN", sec. 5 and appendix D; the same procedure in
stylegan2-ada-pytorch), written here for any G with ``mapping(z, labels, truncation_psi) ->
ws[N, num_ws, w_dim]`` and ``synthesis(ws, noise_mode) -> images``:

- W starts at the average of 10,000 mapped latents z, ``w_avg``; their spread ``w_std`` is
  ``sqrt(sum ||w - w_avg||^2 / 10000)``, one number.
- Adam (betas 0.9, 0.999) on the W being fitted (one w broadcast to every layer for ``"w"``, one
  w per layer for ``"w+"``, Abdal et al. 2019, "Image2StyleGAN") and on G's noise maps, for
  ``steps`` steps; the learning rate ramps up linearly over the first 5% of the steps from 0 and
  down over the last 25% along a half cosine to 0, from ``initial_lr`` 0.1 (``learning_rate``).
- Every step adds Gaussian noise to W before synthesis, ``0.05 * w_std * max(0, 1 - t / 0.75)^2``
  at t = step / steps (``w_noise_scale``), which explores early and is gone after 75% of the steps.
- The loss is the distance (a ``gan_kit.Distance``, LPIPS in the paper) between G's image and the
  target, plus ``1e5`` x the noise regularisation (``noise_regularisation``): the squared
  autocorrelation of each noise map with itself shifted by one pixel, down and right, at every
  level of its average-pooled pyramid down to 8 px, so the noise cannot learn the image's
  content. After every step each noise map is renormalised to mean 0 and variance 1.
- Noise maps are the buffers named ``noise_const`` of G (stylegan2's, one ``[r, r]`` map per
  synthesis layer, which ``noise_mode="const"`` adds; the convention of stylegan2-ada-pytorch,
  whose projector optimises its buffers of that name): each is optimised, regularised and
  renormalised as a 2-D map. A G without them has only W optimised.

The generator given is not changed: its copy holds the optimised noise maps.
"""

from __future__ import annotations

import copy
import math
from typing import Any, Callable, Literal

import attrs
import torch
import torch.nn.functional as F
from torch import nn

__all__ = ["ProjectionSettings", "ProjectionStep", "Projection", "project", "learning_rate", "w_noise_scale",
           "noise_regularisation", "noise_buffers", "w_statistics"]

Space = Literal["w", "w+"]


@attrs.frozen
class ProjectionSettings:
    """The projector's numbers (stylegan2-ada-pytorch's ``projector.py`` defaults).

    steps:         optimisation steps (the paper: 1000).
    space:         ``"w"`` (one w for every layer) or ``"w+"`` (one w per layer).
    initial_lr:    peak Adam learning rate.
    lr_rampup:     fraction of the steps the learning rate ramps up over (linearly from 0).
    lr_rampdown:   fraction of the steps at the end it ramps down over (half cosine to 0).
    w_noise:       W noise at step 0, times ``w_std``.
    w_noise_ramp:  fraction of the steps over which the W noise falls to 0 (quadratically).
    noise_weight:  weight of the noise regularisation in the loss.
    w_avg_samples: mapped latents z that ``w_avg`` and ``w_std`` are estimated from.
    """

    steps: int = 1000
    space: Space = "w"
    initial_lr: float = 0.1
    lr_rampup: float = 0.05
    lr_rampdown: float = 0.25
    w_noise: float = 0.05
    w_noise_ramp: float = 0.75
    noise_weight: float = 1e5
    w_avg_samples: int = 10_000


def learning_rate(step: int, s: ProjectionSettings) -> float:
    """The learning rate of ``step`` (0-based) of ``s.steps``: ``initial_lr * down(t) * up(t)``
    at t = step / steps, ``up = min(1, t / lr_rampup)``, ``down = 0.5 - 0.5 cos(pi * min(1, (1 - t)
    / lr_rampdown))``: 0 at step 0, the peak from 5% to 75% of the steps, near 0 at the end."""
    t = step / s.steps
    down = 0.5 - 0.5 * math.cos(math.pi * min(1.0, (1.0 - t) / s.lr_rampdown))
    up = min(1.0, t / s.lr_rampup) if s.lr_rampup > 0 else 1.0
    return s.initial_lr * down * up


def w_noise_scale(step: int, w_std: float, s: ProjectionSettings) -> float:
    """Standard deviation of the Gaussian noise added to every W coordinate at ``step``:
    ``w_std * w_noise * max(0, 1 - t / w_noise_ramp)^2``, t = step / steps."""
    t = step / s.steps
    return w_std * s.w_noise * max(0.0, 1.0 - t / s.w_noise_ramp) ** 2


def noise_regularisation(maps: list[torch.Tensor]) -> torch.Tensor:
    """Sum over the noise maps ``[H, W]`` and over the levels of each one's pyramid (the map,
    then average-pooled by 2 while its side is over 8 px) of the squared mean products of the
    level with itself rolled by one pixel along the width and along the height: 0 for white
    noise, large for a map that has learnt structure. A 0-dim tensor (0 without maps)."""
    total = torch.zeros((), device=maps[0].device if maps else None)
    for m in maps:
        x = m.reshape(1, 1, *m.shape[-2:])
        while True:
            total = total + (x * torch.roll(x, 1, dims=3)).mean().square() + (x * torch.roll(x, 1, dims=2)).mean().square()
            if x.shape[2] <= 8:
                break
            x = F.avg_pool2d(x, 2)
    return total


def noise_buffers(G: nn.Module) -> list[tuple[nn.Module, str]]:
    """``(module, buffer name)`` of each noise map of G: the buffers named ``noise_const`` (the
    constant noise ``noise_mode="const"`` adds: stylegan2's, as stylegan2-ada-pytorch names them)."""
    return [(m, name) for m in G.modules() for name, b in m.named_buffers(recurse=False)
            if name == "noise_const" and b is not None]


def w_statistics(G: nn.Module, latent_dim: int, samples: int, labels: torch.Tensor | None,
                 generator: torch.Generator, device: torch.device) -> tuple[torch.Tensor, float]:
    """``(w_avg[1, 1, w_dim], w_std)`` of ``samples`` mapped latents z ~ N(0, I) (drawn on the CPU
    from ``generator``, so they are the same on every device), with the class ``labels[1]`` for
    a class-conditional G; ``w_std = sqrt(sum ||w - w_avg||^2 / samples)``."""
    ws = []
    with torch.no_grad():
        for i in range(0, samples, 1000):
            n = min(1000, samples - i)
            z = torch.randn(n, latent_dim, generator=generator).to(device)
            args = (z, labels.expand(n)) if labels is not None else (z,)
            ws.append(G.mapping(*args)[:, :1].float())
    w = torch.cat(ws)
    w_avg = w.mean(dim=0, keepdim=True)
    return w_avg, float((w - w_avg).square().sum().div(samples).sqrt())


@attrs.define
class ProjectionStep:
    """What ``project``'s ``on_step`` callback gets after each step: ``step`` (1-based, of
    ``steps``), ``distance`` (0-dim tensor on the device: the step's distance, with its W noise;
    reading it is a host-device sync), ``lr``, and ``image()``: the current W's image without W
    noise (``[1, C, r, r]``, on the device), for a video frame."""

    step: int
    steps: int
    distance: torch.Tensor
    lr: float
    render: Callable[[], torch.Tensor]

    def image(self) -> torch.Tensor:
        return self.render()


@attrs.frozen
class Projection:
    """A projection's result, on the CPU: ``w`` float32 ``[1, num_ws, w_dim]`` (for ``"w"`` one w
    repeated), ``image`` its synthesis ``[1, C, r, r]`` with the optimised noise maps,
    ``distance`` from ``image`` to the target, ``start_distance`` that of the average W's image
    (G's own noise), ``noise`` the optimised maps by module path."""

    w: torch.Tensor
    image: torch.Tensor
    distance: float
    start_distance: float
    noise: dict[str, torch.Tensor]


def project(G: nn.Module, target: torch.Tensor, distance: Any, settings: ProjectionSettings | None = None,
            *, latent_dim: int | None = None, seed: int = 0, labels: torch.Tensor | None = None,
            on_step: Callable[[ProjectionStep], None] | None = None) -> Projection:
    """Fit W (or W+) so that ``G.synthesis(ws, "const")`` matches ``target[1, C, r, r]`` (in
    [-1, 1], on G's device, at G's resolution and channels) under ``distance`` (a
    ``gan_kit.Distance``), as the module docstring says. ``labels[1]`` (int64): the class, for a
    class-conditional G; ``latent_dim``: the size of z (default ``G.latent_dim``). ``seed`` seeds
    the latents of ``w_avg``, the noise maps' start and the W noise (CPU draws: the same on every
    device). ``on_step`` is called after every step with a ``ProjectionStep``.
    ``settings`` default: ``ProjectionSettings()``. Raises ValueError for a target of the wrong
    shape."""
    s = settings or ProjectionSettings()
    G = copy.deepcopy(G).eval().requires_grad_(False)
    device = target.device
    if target.dim() != 4 or target.shape[0] != 1:
        raise ValueError(f"project: expected one target image [1, C, r, r], got {tuple(target.shape)}")
    gen = torch.Generator().manual_seed(seed)
    w_avg, w_std = w_statistics(G, latent_dim or G.latent_dim, s.w_avg_samples, labels, gen, device)
    num_ws = G.num_ws
    target = target.float()
    # The target's part of the distance once (LPIPS: its VGG16 features), not at every step; a
    # distance without the pair of methods (duck-typed) measures against the target itself.
    prepare = getattr(distance, "prepare_target", None)
    goal = prepare(target) if prepare is not None else target
    measure = getattr(distance, "distance_to", distance.distance)

    def synth(w: torch.Tensor) -> torch.Tensor:
        ws = w.expand(-1, num_ws, -1) if w.shape[1] == 1 else w
        return G.synthesis(ws, noise_mode="const").float()

    with torch.no_grad():
        start_distance = float(measure(synth(w_avg), goal).sum())
    buffers = noise_buffers(G)
    maps = []
    for module, name in buffers:
        m = torch.randn(getattr(module, name).shape, generator=gen).to(device).requires_grad_(True)
        setattr(module, name, m)  # the copy's buffer is now the optimised leaf tensor
        maps.append(m)
    w_opt = (w_avg if s.space == "w" else w_avg.repeat(1, num_ws, 1)).clone().requires_grad_(True)
    opt = torch.optim.Adam([w_opt, *maps], betas=(0.9, 0.999), lr=s.initial_lr)
    for step in range(s.steps):
        lr = learning_rate(step, s)
        for group in opt.param_groups:
            group["lr"] = lr
        noise = torch.randn(w_opt.shape, generator=gen).to(device) * w_noise_scale(step, w_std, s)
        dist = measure(synth(w_opt + noise), goal).sum()
        loss = (dist + s.noise_weight * noise_regularisation(maps)) if maps else dist
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        with torch.no_grad():
            for m in maps:
                m -= m.mean()
                m *= m.square().mean().rsqrt()
        if on_step is not None:
            def render(w=w_opt) -> torch.Tensor:
                with torch.no_grad():
                    return synth(w.detach())

            on_step(ProjectionStep(step + 1, s.steps, dist.detach(), lr, render))
    with torch.no_grad():
        w = w_opt.detach()
        image = synth(w)
        final = float(measure(image, goal).sum())
    names = {id(m): path for path, m in G.named_modules()}
    return Projection(w=w.expand(-1, num_ws, -1).float().cpu().contiguous(), image=image.cpu(), distance=final,
                      start_distance=start_distance,
                      noise={f"{names[id(mod)]}.{name}": getattr(mod, name).detach().cpu() for mod, name in buffers})
