"""Gradient accumulation, as functions of the ``gan_kit.training.step.StepContext``:
``ctx.accumulate(body)`` runs the forwards and backwards of one network step once per round of
``growth.batch_gpu`` images, with each round's rows, random draws, loss scale and DDP sync
(stylegan2-ada-pytorch's ``--batch-gpu`` rounds; StudioGAN's ``acml_steps``)."""

from __future__ import annotations

import contextlib
from typing import Any, Callable, ContextManager, Mapping

import attrs
import torch

from gan_kit.base.errors import GankitError
from gan_kit.base.randomness import sharded

__all__ = ["Round", "accumulate", "not_in_round", "round_count", "rounds_for", "shard"]


@attrs.frozen
class Round:
    """Where ``StepContext.accumulate`` stands: round ``index`` (0-based) of ``count``."""

    index: int
    count: int


def shard(ctx: Any) -> tuple[int, int]:
    """``(rank, world_size)`` of the rows being trained now, for ``gan_kit.base.randomness``: this
    process's outside ``accumulate``; inside, round r of R of process p is the virtual
    process ``p + world_size * r`` of ``world_size * R`` (its rows are every R-th of the
    process's, starting at r, so a global draw sliced this way gives each sample the number
    the whole batch would)."""
    if ctx.round is None or ctx.round.count == 1:
        return ctx.rank, ctx.world_size
    return ctx.rank + ctx.world_size * ctx.round.index, ctx.world_size * ctx.round.count


def rounds_for(per_process_batch: int, batch_gpu: int | None) -> int:
    """Rounds per optimizer step of a per-process batch of ``per_process_batch`` images in
    rounds of ``batch_gpu`` (``growth.batch_gpu``): their quotient, 1 when ``batch_gpu`` is None
    or not smaller than the batch (``gan_kit.runs.rundir.batch_problem`` refuses one that does not
    divide it)."""
    b, n = batch_gpu, int(per_process_batch)
    return n // b if b and b < n else 1


def round_count(ctx: Any) -> int:
    """How many rounds ``accumulate`` runs this iteration: the per-process batch over the
    phase's ``batch_gpu`` (``rounds_for``)."""
    return rounds_for(int(ctx.reals[0].shape[0]) if ctx.reals else 0, getattr(ctx.phase, "batch_gpu", None))


def accumulate(ctx: Any, body: Callable[[], Mapping[str, Any]]) -> dict[str, Any]:
    """Run ``body()`` once per round and return its stats averaged over the rounds
    (gradient accumulation; stylegan2-ada-pytorch's ``--batch-gpu`` rounds, StudioGAN's
    ``acml_steps``).

    ``body`` makes the forwards and ``ctx.backward`` calls that feed one optimizer step (call
    ``ctx.zero_grad`` before and ``ctx.opt_step`` after ``accumulate``, never inside) and
    returns a dict of stats (tensors or numbers). With ``round_count(ctx)`` = R > 1, in round r:

    * ``ctx.reals[j]`` / ``ctx.labels[j]`` are rows ``r::R`` of the batch (strided, so a
      strided minibatch-stddev group of the whole batch stays one group of the round);
    * ``ctx.latent(n)``, ``ctx.batch_rand`` and every ``gan_kit.batch_rand*`` draw give the
      round's rows of what the whole batch would draw: the random state is set back to where
      round 0 began before every round (a plain ``torch.rand`` therefore repeats across
      rounds, as it repeats across processes - draw per-sample numbers with ``batch_rand``);
    * ``ctx.backward`` scales each loss by 1/R, so the gradients add up to the batch mean's;
    * DistributedDataParallel networks skip their gradient all-reduce (``no_sync``) in every
      round but the last, whose backward averages the summed gradients once.

    One round (the default) calls ``body()`` as it is. A per-batch statistic inside D (the
    minibatch-stddev over a group larger than the round, BatchNorm) sees the round, not the
    batch - as in the reference. Raises ``GankitError`` for a nested call.
    """
    if ctx.round is not None:
        raise GankitError("ctx.accumulate: called inside another ctx.accumulate; make one call per optimizer step")
    ctx.accumulated = True
    count = round_count(ctx)
    if count == 1:
        ctx.round = Round(0, 1)
        try:
            return dict(body())
        finally:
            ctx.round = None
    reals, labels = ctx.reals, ctx.labels
    device = reals[0].device
    start = _rng_state(device)
    total: dict[str, Any] = {}
    try:
        for r in range(count):
            if r:
                _set_rng_state(device, start)
            ctx.round = Round(r, count)
            ctx.reals = [x[r::count] for x in reals]
            ctx.labels = [None if y is None else y[r::count] for y in labels]
            with sharded(*shard(ctx)), _no_sync(ctx, last=r == count - 1):
                stats = body()
            for k, v in stats.items():
                total[k] = total.get(k, 0.0) + v / count
    finally:
        ctx.round = None
        ctx.reals, ctx.labels = reals, labels
    return total


def _no_sync(ctx: Any, *, last: bool) -> ContextManager:
    """DDP's ``no_sync`` on every wrapped network, except in the last round."""
    stack = contextlib.ExitStack()
    if last or ctx.world_size == 1:
        return stack
    from gan_kit.training.networks import find_ddp

    seen: set[int] = set()
    for module in (ctx.G, ctx.D, ctx.D_penalty, ctx.G_penalty):
        ddp = find_ddp(module) if module is not None else None
        if ddp is not None and id(ddp) not in seen:
            seen.add(id(ddp))
            stack.enter_context(ddp.no_sync())
    return stack


def not_in_round(ctx: Any, verb: str) -> None:
    if ctx.round is not None:
        raise GankitError(f"ctx.{verb} inside ctx.accumulate: clear gradients before the rounds and step after "
                          f"them (ctx.zero_grad(net); ctx.accumulate(body); ctx.opt_step(net))")


def _rng_state(device: torch.device) -> tuple[torch.Tensor, torch.Tensor | None]:
    """The CPU generator's state and, on CUDA, the device generator's (host copies: no device sync)."""
    cuda = torch.cuda.get_rng_state(device) if device.type == "cuda" else None
    return torch.get_rng_state(), cuda


def _set_rng_state(device: torch.device, state: tuple[torch.Tensor, torch.Tensor | None]) -> None:
    torch.set_rng_state(state[0])
    if state[1] is not None:
        torch.cuda.set_rng_state(state[1], device)
