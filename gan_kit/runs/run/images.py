"""Images for hooks and metrics (``RunImages``, a part of ``gan_kit.runs.run.Run``): G_ema's images
for given latents at a phase, and real images (and their labels) drawn with a seed. Neither
moves the training RNG, so a run resumes exactly whatever its hooks sampled."""

from __future__ import annotations

import torch
from torch import nn

from gan_kit.plugin_api.components import set_phase
from gan_kit.base.phase import Phase

__all__ = ["RunImages"]


class RunImages:
    """``generate``, ``real_images`` and ``real_labels``: what hooks may call (docs/hooks.md)."""

    @torch.no_grad()
    def generate(self, z: torch.Tensor, phase: Phase | None = None, batch: int = 64,
                 G: nn.Module | None = None, labels: torch.Tensor | None = None,
                 seed: int | None = None) -> torch.Tensor:
        """Images ``[N,C,r,r]`` (float32, CPU) from G_ema (or ``G``, e.g. ``run.G`` for raw-G
        grids, run in eval mode) for latents ``z`` (at ``phase``, default the current one).
        ``labels[N]``: the classes, in a conditional run (required there). ``seed``: the random
        state G's own draws (StyleGAN2's noise inputs) start from, so the images depend on the
        weights, ``z`` and ``seed`` only (metrics); None = wherever the RNG stands (still never
        moving the training RNG)."""
        phase = phase or self.phase
        net = G if G is not None else self.G_ema
        was_training = net.training
        net.eval()
        set_phase(net, phase.resolution, phase.alpha)
        out = []
        # A generator may draw noise (StyleGAN2's noise inputs): from a forked RNG, so sampling
        # never moves the training RNG (exact resume).
        devices = [self.device] if self.device.type == "cuda" else []
        with torch.random.fork_rng(devices=devices):
            if seed is not None:
                torch.manual_seed(seed)
            for i in range(0, z.shape[0], batch):
                args = [z[i:i + batch].to(self.device)]
                if labels is not None:
                    args.append(labels[i:i + batch].to(self.device))
                with self.autocast():
                    out.append(net(*args).float().cpu())
        net.train(was_training)
        if self.phase is not None:
            set_phase(net, self.phase.resolution, self.phase.alpha)
        return torch.cat(out)

    def real_indices(self, n: int, seed: int) -> torch.Tensor:
        """The indices ``[n]`` into ``metric_dataset`` that ``real_images`` and ``real_labels``
        take for ``seed`` (a seeded permutation's first ``n``)."""
        return torch.randperm(len(self.metric_dataset), generator=torch.Generator().manual_seed(seed))[:n]

    def real_images_at(self, indices: torch.Tensor) -> torch.Tensor:
        """The real images ``[len(indices), C, R, R]`` of ``metric_dataset`` at ``indices`` (final
        resolution R), read from the data set now (a streamed metric reads one batch at a time)."""
        items = [self.metric_dataset[i] for i in indices.tolist()]
        return torch.stack([it[0] if isinstance(it, (tuple, list)) else it for it in items])

    def real_labels(self, n: int, seed: int = 0) -> torch.Tensor | None:
        """The class labels ``[n]`` of ``real_images(n, seed)`` (same draw), or None when the
        data set has no labels."""
        labels = getattr(self.metric_dataset, "labels", None)
        return None if labels is None else labels[self.real_indices(n, seed)]

    def real_images(self, n: int, seed: int = 0) -> torch.Tensor:
        """``n`` real images at the final resolution, drawn without replacement with ``seed``
        from the data set metrics use (``metric_dataset``: the training set unless
        ``data.metric_reals = "full"``)."""
        return self.real_images_at(self.real_indices(n, seed))
