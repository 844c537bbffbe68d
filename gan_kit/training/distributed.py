"""Many processes through torchrun (torch.distributed): process-group set-up, the launcher behind
``gankit run --nproc N``, and the gradient / buffer synchronisation the engine uses.

Every process runs the same training loop on its slice of each global batch. With
``run.grad_sync = "ddp"`` (the default) G and D are wrapped in separate
``DistributedDataParallel`` modules, so gradients are averaged by DDP's bucketed all-reduce while
the backward still runs (communication overlaps computation). Three GAN details:

* ``find_unused_parameters=True`` for growing networks only: a progressive network holds every
  resolution's blocks from the start, and a phase uses only some of them (and the old
  toRGB/fromRGB only while fading); a static one uses all of its parameters in every backward;
* the G step's forward through the frozen D runs under ``D.no_sync()`` (``strategies.frozen``),
  since D takes no gradient there and DDP would otherwise wait for it;
* DDP hooks into the gradients a *backward* accumulates. A gradient penalty's ``autograd.grad``
  with respect to D's *inputs* is fine (the penalty's weight gradients come from the ordinary
  backward of the total), and ``backward(inputs=...)`` is fine, but weight gradients taken with
  ``torch.autograd.grad`` and assigned to ``.grad`` are never averaged. Such a strategy needs
  ``run.grad_sync = "all-reduce"``; ``check_in_sync`` stops a run whose processes drifted apart
  instead of letting it train on silently.

``run.grad_sync = "all-reduce"`` instead averages every gradient with one flattened all-reduce
right before each optimizer step (``StepContext.opt_step``), whatever produced it - StyleGAN3's
scheme; no overlap. DDP looks for unused parameters only in growing networks; on CUDA a BatchNorm
network's layers become ``SyncBatchNorm`` (global-batch statistics, as one process); buffers are
broadcast from rank 0 at every tick, phase change and checkpoint (``Run.check_in_sync``), and
after every iteration only for a network whose BatchNorm statistics are per process (BatchNorm on
the CPU, where SyncBatchNorm does not run). DDP's own per-forward buffer broadcast is off.

All processes share one RNG seed and draw every per-sample random number (latents z, gradient-
penalty interpolation weights) at the global batch size, each keeping its strided slice
``[rank::world_size]``; the data sampler splits each global batch the same way. Minibatch-stddev
groups (strided in the official layout) are then the same as in a one-process run, which is what
makes a 2-process run match a 1-process run with the same global batch.
"""

from __future__ import annotations

import datetime
import os
from typing import Iterable

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

from gan_kit.base.errors import clip


def is_distributed() -> bool:
    return dist.is_available() and dist.is_initialized()


#: How long the process-group set-up and every collective wait for the other processes by default
#: (``run.dist_timeout_minutes``): a lost peer then ends the job instead of hanging it.
DEFAULT_TIMEOUT_S = 600.0


def init(timeout_s: float = DEFAULT_TIMEOUT_S) -> None:
    """Join the process group torchrun describes in the environment (NCCL on CUDA, else gloo).

    ``timeout_s``: how long joining (the store connection to ``MASTER_ADDR:MASTER_PORT``) and
    then each collective may wait for the other processes before raising - so a worker whose
    peers never come (a restart that lost a node) or died mid-collective fails within that time
    and torchrun can restart the group, instead of waiting forever. Raises ``GankitError`` when
    the set-up times out or fails.
    """
    from gan_kit.base.errors import GankitError

    if is_distributed():
        return

    backend = "nccl" if torch.cuda.is_available() else "gloo"
    if torch.cuda.is_available():
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", 0)))
    timeout = datetime.timedelta(seconds=timeout_s)
    try:
        store, rank, world_size = round_store(timeout)
        dist.init_process_group(backend=backend, store=store, rank=rank, world_size=world_size, timeout=timeout)
    except (RuntimeError, ValueError) as e:  # DistStoreError (a store timeout) is a RuntimeError
        where = f"{os.environ.get('MASTER_ADDR', '?')}:{os.environ.get('MASTER_PORT', '?')}"
        first = clip(str(e)) or type(e).__name__
        raise GankitError(f"process group set-up (rank {os.environ.get('RANK', '?')} of "
                          f"{os.environ.get('WORLD_SIZE', '?')}, store {where}) failed within {timeout_s:g} s: "
                          f"{first}; check that every node runs the same torchrun command and reaches that address "
                          f"(run.dist_timeout_minutes sets the wait)") from None


def round_store(timeout):
    """``(store, rank, world_size)``: the key-value store this start of the workers builds its
    process group in, fresh for every start.

    torchrun (2.4+, c10d rendezvous) hands its workers a store its agent hosts
    (``TORCHELASTIC_USE_AGENT_STORE``) and keeps it across ``--max-restarts``; the ``env://``
    rendezvous does not separate the restarts' keys, and ``TORCHELASTIC_RESTART_COUNT`` cannot
    (each node counts only the restarts its own workers caused: pytorch/pytorch#108158,
    #135712). A restarted rank would read a dead worker's gloo/NCCL address from the first start
    and fail with "Connection refused", or wait in another prefix until the timeout. So, as
    torchrun's workers did before 2.4, rank 0 hosts a new store on a free port of its node
    (``MASTER_ADDR``) and posts its port and a random token in the agent's store; the other ranks
    take the posted store that answers with that token - a port left by an earlier start is
    closed (its rank 0 is gone) and is read again until the new one is posted. ``gankit run
    --nproc N`` starts torchrun's standalone c10d rendezvous, so it takes this path too. Without
    an agent store (a static rendezvous, a launcher of one's own) ``env://`` is used as it is.
    Raises ``RuntimeError`` when no store answers within ``timeout``.
    """
    import time
    import uuid

    if os.environ.get("TORCHELASTIC_USE_AGENT_STORE") != "True":
        return next(dist.rendezvous("env://", timeout=timeout))
    rank, world_size = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    host, port = os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"])
    agent = dist.TCPStore(host, port, world_size=world_size, is_master=False, timeout=timeout)
    if rank == 0:
        own = dist.TCPStore(host, 0, world_size=world_size, is_master=True, timeout=timeout,
                            wait_for_workers=False)
        token = uuid.uuid4().hex
        own.set("gankit/token", token)
        agent.set(ROUND_KEY, f"{own.port} {token}")
        return own, rank, world_size
    deadline = time.monotonic() + timeout.total_seconds()
    while True:
        posted_port, token = agent.get(ROUND_KEY).decode().split()
        try:
            own = dist.TCPStore(host, int(posted_port), world_size=world_size, is_master=False,
                                timeout=datetime.timedelta(seconds=min(5.0, timeout.total_seconds())))
            if own.get("gankit/token").decode() == token:
                own.set_timeout(timeout)
                return own, rank, world_size
        except (RuntimeError, ValueError):  # the port of an earlier start: closed, or another server
            pass
        if time.monotonic() > deadline:
            raise RuntimeError(f"no store posted by rank 0 answered at {host} within {timeout.total_seconds():g} s")
        time.sleep(0.2)


#: The key of the agent's store where rank 0 posts ``"<port> <token>"`` of its round's store.
ROUND_KEY = "gankit/round_store"


def check_same_decision(decision, out_dir) -> None:
    """Raise ``GankitError`` on every process when this process's ``decision`` (continue the run
    directory or start it; any picklable value) differs from rank 0's: the processes read
    different run directories - several nodes need the run directory on one shared file system.
    A collective; nothing with one process."""
    from gan_kit.base.errors import GankitError

    if not is_distributed():
        return
    every = [None] * dist.get_world_size()
    dist.all_gather_object(every, decision)
    odd = [i for i, d in enumerate(every) if d != every[0]]
    if odd:
        raise GankitError(f"{out_dir}: process {odd[0]} sees another run directory than process 0 (one finds "
                          f"checkpoints/latest.pt there, the other not): every node must see the run directory on one "
                          f"shared file system (NFS, Lustre, a cluster's /scratch), not a local disk")


def shutdown(clean: bool = True) -> None:
    """Leave the process group. ``clean`` (the run ended normally on every process): wait at a
    barrier first, so no process tears its connections down while another still finishes (rank 0
    writes the final checkpoint and grid); after an error the others may not reach it.

    Drop every DistributedDataParallel wrapper (the Run) and collect it first: a DDP reducer
    outliving its process group aborts the interpreter at exit ("terminate called without an
    active exception").
    """
    if not is_distributed():
        return
    import gc

    gc.collect()
    if clean:
        dist.barrier()
    dist.destroy_process_group()


def broadcast_object(obj):
    """Rank 0's ``obj`` (any picklable value) on every process; ``obj`` itself with one process."""
    if not is_distributed():
        return obj
    box = [obj]
    dist.broadcast_object_list(box, src=0)
    return box[0]


def launch(nproc: int, argv: list[str], timeout_s: float = DEFAULT_TIMEOUT_S) -> int:
    """Re-run this ``gankit`` command (``argv`` without the program name) under torchrun with
    ``nproc`` processes on this machine (the rendezvous waits ``timeout_s`` for them: its
    ``join_timeout``); returns the exit code of the first process that failed
    (a user error is 2, as with one process), 128 + the signal number when SIGTERM / SIGINT
    stopped the launcher, else 0.

    torchrun runs in this process (``torch.distributed.run``), so its report of a failed child -
    a traceback of the launcher itself - is replaced by the child's exit code: the child already
    printed its own one-line error.
    """
    from torch.distributed.elastic.multiprocessing.api import SignalException
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
    from torch.distributed.run import parse_args, run

    args, skip = [], False
    for a in argv:
        if skip:
            skip = False
            continue
        if a == "--nproc":
            skip = True
            continue
        if a.startswith("--nproc="):
            continue
        args.append(a)
    os.environ["GANKIT_NPROC"] = str(nproc)  # the processes' resume advice names --nproc N
    try:
        run(parse_args(["--standalone", f"--nproc-per-node={nproc}", f"--rdzv-conf=join_timeout={int(timeout_s)}",
                        "-m", "gan_kit", *args]))
    except ChildFailedError as e:
        codes = [f.exitcode for _, f in sorted(e.failures.items())]
        return next((c for c in codes if c > 0), 1)
    except SignalException as e:
        # SIGTERM / SIGINT reached the launcher (``timeout``, a scheduler, Ctrl-C): torchrun has
        # passed it to the processes, which finished their iteration, wrote the checkpoint and
        # said so; exit with the shell's code for the signal, as one process does (143 / 130).
        return 128 + int(e.sigval)
    return 0


class _MeanOverProcesses(torch.autograd.Function):
    """All-reduce mean whose backward is the all-reduce mean of the incoming gradients (the
    adjoint of averaging): each process's loss reads the shared mean, so the gradient reaching a
    process's own input is the average of every process's d loss / d mean."""

    @staticmethod
    def forward(ctx, t: torch.Tensor, world_size: int) -> torch.Tensor:  # type: ignore[override]
        ctx.world_size = world_size
        out = t.detach().clone()
        dist.all_reduce(out)
        return out / world_size

    @staticmethod
    def backward(ctx, grad: torch.Tensor):  # type: ignore[override]
        g = grad.contiguous().clone()
        dist.all_reduce(g)
        return g / ctx.world_size, None


def mean_over_processes(t: torch.Tensor, world_size: int | None = None) -> torch.Tensor:
    """The mean of ``t`` (any shape, floating point) over all processes, on every process; ``t``
    itself with one process.

    ``world_size`` defaults to the active ``gan_kit.base.randomness.sharded`` block (1 outside one, so
    a forward outside a training iteration, e.g. a sample grid, starts no collective). With
    several processes it is a collective (every process calls it at the same point) and
    differentiable: the gradient of a loss that each process computes from the mean is averaged
    back over the processes, so the processes together compute the gradient of the mean of their
    losses, as one process on the global batch would.
    """
    if world_size is None:
        from gan_kit.base.randomness import current_shard

        world_size = current_shard()[1]
    if world_size < 2 or not is_distributed():
        return t
    return _MeanOverProcesses.apply(t, int(world_size))


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


def wrap_ddp(module: torch.nn.Module, device: torch.device, *, growing: bool = True) -> DDP:
    """``module`` in a ``DistributedDataParallel`` wrapper set up for GAN training (see above).

    ``growing``: the network grows (a progressive schedule), so a phase leaves some of its
    parameters unused and DDP must look for them after every backward
    (``find_unused_parameters=True``, a graph traversal per backward); a network that uses all
    its parameters in every backward skips that. DDP's own buffer broadcast before every forward
    is off (``broadcast_buffers=False``): the engine syncs buffers itself (``buffers_each_step``).
    The wrapper shares ``module``'s parameters: optimizers, EMA and checkpoints keep using
    ``module`` itself.
    """
    device_ids = [device.index] if device.type == "cuda" else None
    return DDP(module, device_ids=device_ids, find_unused_parameters=growing, broadcast_buffers=False)


def has_batchnorm(module: torch.nn.Module) -> bool:
    """Whether ``module`` holds a BatchNorm layer whose statistics are per process (a
    ``SyncBatchNorm`` is not: it normalises with the global batch's)."""
    from torch.nn.modules.batchnorm import _BatchNorm

    return any(isinstance(m, _BatchNorm) and not isinstance(m, torch.nn.SyncBatchNorm) for m in module.modules())


def sync_batchnorm(module: torch.nn.Module, device: torch.device, world_size: int) -> bool:
    """Under several CUDA processes, turn ``module``'s BatchNorm layers into ``SyncBatchNorm``
    in place (same parameters and buffers, same state-dict keys), so every process normalises
    with the statistics of the global batch - what one process computes - and the running
    statistics are the same everywhere without a broadcast. PyTorch's SyncBatchNorm runs on
    GPUs only: on the CPU (gloo) the layers stay per-process. Returns True when converted."""
    if world_size < 2 or device.type != "cuda" or not has_batchnorm(module):
        return False
    for name, child in list(module.named_children()):
        module.add_module(name, torch.nn.SyncBatchNorm.convert_sync_batchnorm(child))
    return True


def out_of_sync(modules: dict[str, torch.nn.Module], world_size: int) -> list[str]:
    """Names of the ``modules`` whose parameters differ across processes (a collective: every
    process must call it at the same point).

    Each process sums ``sum(p)`` and ``sum(p^2)`` over the parameters in float64; synchronised
    processes hold bit-identical weights, so any difference beyond rounding of the sums means
    some gradient was not averaged.
    """
    sums = []
    for module in modules.values():
        flat = torch.cat([p.detach().double().reshape(-1) for p in module.parameters()])
        sums += [flat.sum(), flat.square().sum()]
    local = torch.stack(sums)
    gathered = [torch.empty_like(local) for _ in range(world_size)]
    dist.all_gather(gathered, local)
    every = torch.stack(gathered)
    bad = (every.amax(0) - every.amin(0) > 1e-9 * every.abs().amax(0).clamp_min(1.0)).tolist()
    return [name for i, name in enumerate(modules) if bad[2 * i] or bad[2 * i + 1]]


def any_over_processes(flag: torch.Tensor) -> torch.Tensor:
    """A bool scalar tensor, true on every process where it is true on some process (one
    all-reduce on the device; no host read: NCCL queues it like a kernel)."""
    t = flag.to(torch.float32).reshape(1)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return t.reshape(()) > 0


def flags_over_processes(flags: list[bool], device: torch.device) -> tuple[bool, ...]:
    """Each host flag OR-ed over all processes (one all-reduce and one host read)."""
    t = torch.tensor([float(f) for f in flags], device=device)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return tuple(v > 0 for v in t.tolist())


def sum_tensor_over_processes(t: torch.Tensor) -> torch.Tensor:
    """``t`` summed over all processes (one all-reduce, in place on a copy; no host read)."""
    t = t.clone()
    dist.all_reduce(t)
    return t


def sum_over_processes(values: list[float], device: torch.device) -> list[float]:
    """Each number summed over all processes, in float64 (one all-reduce and one host read)."""
    if not values:
        return []
    t = torch.tensor(values, dtype=torch.float64, device=device)
    dist.all_reduce(t)
    return t.tolist()


def average_stats(stats: dict[str, float], device: torch.device) -> dict[str, float]:
    """The mean of each per-process stat over all processes (one all-reduce; a collective).

    Per-process losses are means over equal per-process batches, so their mean is the loss of the
    global batch - the figure a one-process run reports. A NaN/inf on any process makes the mean
    non-finite on every process, so all of them stop (or skip) on the same step instead of one
    raising while the others wait in the next all-reduce.
    """
    keys = sorted(stats)
    if not keys:
        return stats
    values = torch.tensor([stats[k] for k in keys], dtype=torch.float64, device=device)
    dist.all_reduce(values)
    values /= dist.get_world_size()
    return {**stats, **dict(zip(keys, values.tolist()))}
