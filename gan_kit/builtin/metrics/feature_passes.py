"""Streamed feature passes for fid, kid, precision-recall and is: image sets go through an extractor
batch by batch into accumulators, so no image set is ever held whole on the host.

What a pass keeps (``keep``, the union of what the metrics sharing the pass need):

- ``"stats"`` (fid): the count, the sum ``[D]`` and the sum of outer products ``[D, D]`` of the
  pool features, in float64 - the mean and covariance of the set without its features, so host
  memory does not grow with the number of images (Heusel et al. 2017's statistics; float64 as
  numpy's ``cov``);
- ``"pool"`` (kid, precision-recall): the pool features ``[N, D]`` (float32), which those
  metrics need whole - a feature is 2048 numbers where a 256-px image is 196,608;
- ``"logits"`` (is): the extractor's logits ``[N, K]``.

Several processes: each process runs its share of the batches (``gan_kit.ImageBatches``: batch ``i`` on
process ``i % world_size``) and the shares are combined on rank 0 - the sums all-reduced, the kept
features gathered and put back in batch order - so the figure does not depend on the number of
processes.
"""

from __future__ import annotations

import hashlib
from typing import Any, Callable, Iterable

import torch

__all__ = ["FeatureAccumulator", "reduce_features", "stream_digest", "mean_and_covariance"]


def stream_digest(batches: Iterable[torch.Tensor], shape: tuple[int, ...]) -> str:
    """SHA-256 (hex) of ``shape`` and the bytes of the uint8 ``batches`` in order: the digest of
    the tensor they would concatenate to (``feature_extractors.digest``), without building it."""
    h = hashlib.sha256(repr(tuple(shape)).encode())
    for u8 in batches:
        h.update(u8.contiguous().numpy().data)
    return h.hexdigest()


class FeatureAccumulator:
    """Collects one process's features of an image set batch by batch (see the module doc)."""

    def __init__(self, keep: frozenset[str]):
        self.keep = keep
        self.count = 0
        self.sum: torch.Tensor | None = None
        self.outer: torch.Tensor | None = None
        self.pool: list[tuple[int, torch.Tensor]] = []
        self.logits: list[tuple[int, torch.Tensor]] = []

    def add(self, index: int, feats: dict[str, torch.Tensor]) -> None:
        """Batch ``index``'s features: ``pool [b, D]`` and, from extractors that have them, ``logits [b, K]``."""
        pool = feats["pool"]
        if "stats" in self.keep:
            x = pool.double()
            if self.sum is None:
                self.sum = torch.zeros(x.shape[1], dtype=torch.float64)
                self.outer = torch.zeros(x.shape[1], x.shape[1], dtype=torch.float64)
            self.sum += x.sum(dim=0)
            self.outer.addmm_(x.T, x)
        if "pool" in self.keep:
            self.pool.append((index, pool.float().cpu()))
        if "logits" in self.keep and "logits" in feats:
            self.logits.append((index, feats["logits"].float().cpu()))
        self.count += int(pool.shape[0])

    def result(self) -> dict[str, Any]:
        """``{"count", "sum", "outer"}`` (with ``stats``), ``"pool"`` / ``"logits"`` (kept ones, in
        batch order) - this process's share."""
        out: dict[str, Any] = {"count": self.count, "keep": self.keep}
        if self.sum is not None:
            out["sum"], out["outer"] = self.sum, self.outer
        for name in ("pool", "logits"):
            parts = getattr(self, name)
            if parts:
                out[name] = torch.cat([t for _, t in sorted(parts, key=lambda p: p[0])])
                out[f"{name}_batches"] = [i for i, _ in sorted(parts, key=lambda p: p[0])]
        return out


def reduce_features(share: dict[str, Any], world_size: int, batch_sizes: Callable[[int], int]) -> dict[str, Any] | None:
    """The whole set's features on rank 0 from every process's ``share`` (a collective: every
    process calls it; the others get None). The sums are all-reduced in float64; kept features
    are gathered and put back in global batch order (``batch_sizes(i)``: images in batch i)."""
    if world_size == 1:
        return share
    import torch.distributed as dist

    device = (torch.device("cuda", torch.cuda.current_device()) if dist.get_backend() == "nccl"
              else torch.device("cpu"))
    out: dict[str, Any] = {"keep": share["keep"]}
    count = torch.tensor([float(share["count"])], dtype=torch.float64, device=device)
    dist.all_reduce(count)
    out["count"] = int(count.item())
    if "sum" in share:
        for name in ("sum", "outer"):
            t = share[name].to(device)
            dist.all_reduce(t)
            out[name] = t.cpu()
    kept = {name: (share[name], share[f"{name}_batches"]) for name in ("pool", "logits") if name in share}
    gathered: list[Any] = [None] * world_size if dist.get_rank() == 0 else None
    dist.gather_object(kept, gathered, dst=0)
    if dist.get_rank() != 0:
        return None
    for name in kept:
        pieces: list[tuple[int, torch.Tensor]] = []
        for part in gathered:
            values, batches = part[name]
            start = 0
            for i in batches:
                pieces.append((i, values[start:start + batch_sizes(i)]))
                start += batch_sizes(i)
        out[name] = torch.cat([t for _, t in sorted(pieces, key=lambda p: p[0])])
    return out


def mean_and_covariance(feats: dict[str, Any]) -> tuple[torch.Tensor, torch.Tensor]:
    """The mean ``[D]`` and unbiased covariance ``[D, D]`` (float64, numpy's ``cov``) of a set from
    its ``stats``."""
    n = feats["count"]
    mu = feats["sum"] / n
    sigma = (feats["outer"] - n * torch.outer(mu, mu)) / (n - 1)
    return mu, sigma
