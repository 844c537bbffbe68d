"""Many processes through torchrun (torch.distributed): process-group set-up, the launcher behind
``gankit run --nproc N``, and the gradient / buffer synchronisation the engine uses.

Every process runs the same training loop on its slice of each global batch. Gradients are
averaged across processes right before every optimizer step (``StepContext.opt_step``), after
whatever forwards, ``autograd.grad`` calls and backwards the update strategy ran, so gradient
penalties, regulariser-only steps and the ``simultaneous`` / ``single-loss`` strategies (whose
gradients DDP's backward hooks would never see) are synchronised alike. This is the scheme of
StyleGAN3's training loop (one flattened all-reduce per optimizer step); buffers (BatchNorm
running statistics) are broadcast from rank 0 after every iteration.

All processes share one RNG seed and draw every per-sample random number (latents z, gradient-
penalty interpolation weights) at the global batch size, each keeping its strided slice
``[rank::world_size]``; the data sampler splits each global batch the same way. Minibatch-stddev
groups (strided in the official layout) are then the same as in a one-process run, which is what
makes a 2-process run match a 1-process run with the same global batch.
"""

from __future__ import annotations

import os
import subprocess
import sys
from typing import Iterable

import torch
import torch.distributed as dist


def is_distributed() -> bool:
    return dist.is_available() and dist.is_initialized()


def init() -> None:
    """Join the process group torchrun describes in the environment (NCCL on CUDA, else gloo)."""
    if is_distributed():
        return
    backend = "nccl" if torch.cuda.is_available() else "gloo"
    if torch.cuda.is_available():
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", 0)))
    dist.init_process_group(backend=backend)


def shutdown() -> None:
    if is_distributed():
        dist.destroy_process_group()


def launch(nproc: int, argv: list[str]) -> int:
    """Re-run this ``gankit`` command under torchrun with ``nproc`` processes; returns its exit code."""
    args = []
    skip = False
    for i, a in enumerate(argv):
        if skip:
            skip = False
            continue
        if a == "--nproc":
            skip = True
            continue
        if a.startswith("--nproc="):
            continue
        args.append(a)
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={nproc}",
           "-m", "gan_kit", *args]
    return subprocess.call(cmd)


def all_reduce_grads(params: Iterable[torch.Tensor], world_size: int) -> None:
    """Average ``p.grad`` over all processes with one flattened all-reduce.

    Parameters without a gradient (blocks not yet faded in) are skipped; every process has the
    same set, since all are in the same phase.
    """
    grads = [p.grad for p in params if p.grad is not None]
    if not grads:
        return
    flat = torch.cat([g.reshape(-1) for g in grads])
    dist.all_reduce(flat)
    flat /= world_size
    offset = 0
    for g in grads:
        n = g.numel()
        g.copy_(flat[offset:offset + n].view_as(g))
        offset += n


def broadcast_buffers(*modules: torch.nn.Module) -> None:
    """Copy rank 0's buffers (BatchNorm running stats, the fade alpha) to every process."""
    for m in modules:
        for b in m.buffers():
            dist.broadcast(b, src=0)


def broadcast_parameters(*modules: torch.nn.Module) -> None:
    """Start every process from rank 0's weights."""
    with torch.no_grad():
        for m in modules:
            for p in m.parameters():
                dist.broadcast(p, src=0)
