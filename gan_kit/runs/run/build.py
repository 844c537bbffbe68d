"""``build_run``: a ``Run`` built from its recipe, in order - the data set, G, D and G_ema with
their training views, the objectives (loss, penalties, strategy, metrics, trackers), the
optimizers, the schedules and the precision - each part built whole and handed to the next.
Building knows no specific component: every one comes from the registry by the name the recipe
gives."""

from __future__ import annotations

import contextlib
import os
import random
import sys
from pathlib import Path
from typing import Any, Callable

import numpy as np
import torch

from gan_kit.base.allocator import retain_freed_memory
from gan_kit.base.cpufeatures import auto_precision
from gan_kit.base.errors import GankitError
from gan_kit.base.threads import ThreadFollower, follows_machine, set_threads, usable_cpus
from gan_kit.plugin_api.components import BuildContext, WeightedPenalty
from gan_kit.plugin_api.manager import Plugins
from gan_kit.recipe import ComponentSpec, Recipe
from gan_kit.recipe.datachecks import metric_cap_note, metric_problem
from gan_kit.runs.rundir import batch_problem
from gan_kit.runs.run.core import Networks, Objectives, Precision, Run, SampleGrid
from gan_kit.runs.run.data import RunData, build_data
from gan_kit.runs.run.optimizers import Optimizers
from gan_kit.runs.run.schedules import Schedules
from gan_kit.training.ema import make_ema
from gan_kit.training.networks import apply_spectral_norm, at_precision, initialise, training_views

__all__ = ["build_run", "resolve_device", "seed_everything"]

Build = Callable[[ComponentSpec], Any]


def resolve_device(name: str) -> torch.device:
    """``"auto"`` -> CUDA when present, else CPU; anything else as given. Raises
    ``GankitError`` for CUDA on a machine without it."""
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    dev = torch.device(name)
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise GankitError(f"run.device: {name!r} asked for but CUDA is not available on this machine (use the CPU: "
                          f"--device cpu for gankit eval, --set run.device=cpu for gankit run)")
    return dev


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


def _distributed() -> tuple[int, int]:
    if torch.distributed.is_available() and torch.distributed.is_initialized():
        return torch.distributed.get_rank(), torch.distributed.get_world_size()
    return 0, 1


def _builder(plugins: Plugins, context: BuildContext) -> Build:
    def build(spec: ComponentSpec) -> Any:
        """The component a recipe table names, built with the run's ``BuildContext``."""
        return plugins.registry.get(spec.kind, spec.name).factory(spec.options, context)

    return build


def build_run(recipe: Recipe, plugins: Plugins, out_dir: str | Path | None = None) -> Run:
    """The ``Run`` of ``recipe`` (``out_dir``: its run directory, default ``run.out_dir``), on
    this process of the process group when one is initialised. Seeds every RNG with
    ``run.seed`` first, so the same recipe builds the same weights. Raises ``GankitError`` for a
    recipe whose components cannot train together (an empty data set, batches that do not suit
    the processes, a metric the data cannot feed, ...), with one line naming the key."""
    rank, world_size = _distributed()
    device = resolve_device(recipe.run.device)
    if world_size > 1 and device.type == "cuda":
        device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", 0)))
    is_main = rank == 0
    set_threads(recipe.run.threads, device)  # unset: the cores free now (gan_kit/base/threads.py)
    follower = ThreadFollower(usable_cpus()) if follows_machine(recipe.run.threads, device) else None
    seed_everything(recipe.run.seed)
    data = build_data(recipe, _builder(plugins, BuildContext(resolution=recipe.resolution, channels=0,
                                                             recipe=recipe, num_classes=0)))
    context = BuildContext(resolution=recipe.resolution, channels=data.channels, recipe=recipe,
                           num_classes=data.num_classes)
    build = _builder(plugins, context)
    # The loss and penalties first: a penalty may add modules to G or D (Penalty.attach) before
    # they are initialised, wrapped and given optimizers. Building them draws no random numbers,
    # so G's and D's weights are those of a run without them.
    loss, penalties = _loss_and_penalties(recipe, plugins, build, context)
    nets = _networks(recipe, build, data.channels, device, world_size, is_main, penalties)
    objectives = _objectives(recipe, build, data, is_main, loss, penalties)
    optimizers = Optimizers(recipe, nets.G, nets.D, objectives.lazy_penalties, device)
    components = {"loss": objectives.loss, "update": objectives.strategy, "augment": nets.augment,
                  "architecture": nets.arch}
    schedules = Schedules(recipe, build, components, objectives.penalties)
    precision = _precision(recipe, device)
    if precision.name in ("bf16", "fp16"):
        # Plugin code sees float32 networks whose forwards run at the run's precision, so
        # plain-PyTorch strategies and penalties train (gan_kit.training.networks.AtPrecision).
        nets.G_train, nets.D_train, nets.G_penalty, nets.D_penalty = at_precision(
            (nets.G_train, nets.D_train, nets.G_penalty, nets.D_penalty), precision.autocast)
    latent_dim = int(nets.arch.latent_dim)
    run = Run(recipe=recipe, plugins=plugins, out_dir=Path(out_dir or recipe.run.out_dir), device=device, rank=rank,
              world_size=world_size, data=data, nets=nets, objectives=objectives, optimizers=optimizers,
              schedules=schedules, precision=precision, grid=_sample_grid(recipe, data, latent_dim),
              latent_dim=latent_dim, thread_follower=follower)
    phases = run.phases()
    problem = batch_problem(recipe, phases, nets.arch, world_size)
    if problem:
        raise GankitError(problem)
    if recipe.run.compile:
        from gan_kit.training.networks import plan_recompiles

        plan_recompiles(len(phases))  # every phase's graphs fit dynamo's cache
    run.apply_schedules()  # every scheduled option at 0 images, before anything reads it
    return run


def _networks(recipe: Recipe, build: Build, channels: int, device: torch.device, world_size: int,
              is_main: bool, penalties: tuple[WeightedPenalty, ...] | list[WeightedPenalty] = ()) -> Networks:
    r = recipe
    if device.type == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = r.run.tf32
        torch.backends.cudnn.allow_tf32 = r.run.tf32
        torch.backends.cudnn.benchmark = r.run.cudnn_benchmark
    elif device.type == "cpu" and r.run.retain_cpu_memory:
        retain_freed_memory()  # process-wide; see gan_kit/base/allocator.py
    growth = build(r.growth)
    arch = build(r.architecture)
    G, D = arch.build(r.resolution, channels)
    for wp in penalties:  # heads a penalty adds (an auxiliary classifier's) are a part of G or D from here on
        attach = getattr(wp.penalty, "attach", None)
        if attach is not None:
            attach(G, D)
    initializer = build(r.init)
    owns = bool(getattr(arch, "owns_init", False))
    if owns and "init" in r.raw and r.init.name not in ("equalized-lr", "none") and is_main:
        print(f"note: {r.path}: init: architecture {r.architecture.name!r} initialises its own weights "
              f"(owns_init), so init {r.init.name!r} is not applied", file=sys.stderr)
    for net in (G, D):  # where the architecture allows: not frozen, not its own (gan_kit.plugin_api.ownership)
        initialise(net, initializer, owns)
    sn = r.architecture.slot.spectral_norm
    for name, net in (("G", G), ("D", D)):
        if sn in (name, "both"):
            apply_spectral_norm(net, name, r)
    _freeze_d_blocks(recipe, arch, D)
    G, D = G.to(device), D.to(device)
    if r.run.channels_last:
        G.to(memory_format=torch.channels_last)
        D.to(memory_format=torch.channels_last)
    if world_size > 1:
        from gan_kit.training.distributed import broadcast_parameters

        broadcast_parameters(G, D)
    G_ema = make_ema(G)
    augment = build(r.augment)
    views = training_views(G, D, recipe=r, device=device, world_size=world_size,
                           augment=augment if r.augment.name != "none" else None)
    each_step: list = []
    if world_size > 1:
        from gan_kit.training.distributed import has_batchnorm

        each_step = [net for net in (G, D) if has_batchnorm(net)]
    return Networks(arch=arch, growth=growth, initializer=initializer, augment=augment, G=G, D=D, G_ema=G_ema,
                    G_train=views[0], D_train=views[1], G_penalty=views[2], D_penalty=views[3],
                    all_reduce_grads=world_size > 1 and r.run.grad_sync == "all-reduce", buffers_each_step=each_step)


def _freeze_d_blocks(recipe: Recipe, arch: Any, D: torch.nn.Module) -> None:
    """FreezeD (Mo et al. 2020, "Freeze the Discriminator"): D's first ``freeze_d_blocks``
    blocks from the input side stop requiring gradients before any wrapper (DDP, compile) or
    optimizer step sees them, so no backward fills their gradients and no step moves them;
    ``--init-from`` loads the pretrained weights into them afterwards."""
    r = recipe
    n = r.architecture.slot.freeze_d_blocks
    if not n:
        return
    blocks = arch.d_blocks(D)
    if len(blocks) < n:
        what = f"has {len(blocks)} blocks" if blocks else "names no blocks (Architecture.d_blocks)"
        raise GankitError(f"{r.path}: architecture.freeze_d_blocks: {n}, but {r.architecture.name!r}'s D {what}; "
                          f"freeze at most {len(blocks)}" + ("" if blocks else " (set it to 0)"))
    for block in blocks[:n]:
        for p in block.parameters():
            p.requires_grad_(False)


def _loss_and_penalties(recipe: Recipe, plugins: Plugins, build: Build,
                        context: BuildContext) -> tuple[Any, list[WeightedPenalty]]:
    """The loss and every penalty: the recipe's ``[[penalty]]`` in order, then those the loss implies."""
    loss = build(recipe.loss)
    penalties = [WeightedPenalty(s.name, build(s), s.slot.weight) for s in recipe.penalties]
    for name, weight, opts in loss.implied_penalties():
        comp = plugins.registry.get("penalty", name)
        penalties.append(WeightedPenalty(name, comp.factory(comp.Options(**opts), context), weight))
    return loss, penalties


def _objectives(recipe: Recipe, build: Build, data: RunData, is_main: bool, loss: Any,
                penalties: list[WeightedPenalty]) -> Objectives:
    r = recipe
    strategy = build(r.update)
    metrics = [(s, build(s)) for s in r.metrics]
    trackers = [(s, build(s)) for s in r.trackers]  # the ``trackers`` plugin drives them, on rank 0
    for spec, metric in metrics:
        problem = metric_problem(spec, metric, len(data.metric_dataset), r.data.name)
        if problem:
            raise GankitError(f"{r.path}: {problem}")
        note = metric_cap_note(spec, metric, len(data.metric_dataset), r.data.name)
        if note and is_main:
            print(note, file=sys.stderr)
    return Objectives(loss=loss, penalties=penalties, strategy=strategy, metrics=metrics, trackers=trackers)


def _precision(recipe: Recipe, device: torch.device) -> Precision:
    name = recipe.run.precision
    if name == "auto":
        name = auto_precision(device.type, cpu_bf16=recipe.run.cpu_bf16)
    scaler = torch.amp.GradScaler(device.type) if name == "fp16" else None
    if name not in ("bf16", "fp16"):
        return Precision(name=name, scaler=scaler, autocast=contextlib.nullcontext)
    dtype = torch.bfloat16 if name == "bf16" else torch.float16
    device_type = device.type
    return Precision(name=name, scaler=scaler, autocast=lambda: torch.autocast(device_type, dtype=dtype))


def _sample_grid(recipe: Recipe, data: RunData, latent_dim: int) -> SampleGrid:
    # Fixed latents for sample grids come from their own generator so that drawing them never
    # moves the training RNG (exact resume).
    gen = torch.Generator().manual_seed(recipe.run.seed + 12345)
    n, labels, nrow = recipe.run.sample_grid, None, None
    if data.num_classes:
        nrow = max(1, n // data.num_classes)
        n = nrow * data.num_classes
        labels = torch.arange(data.num_classes).repeat_interleave(nrow)
    return SampleGrid(z=torch.randn(n, latent_dim, generator=gen), labels=labels, nrow=nrow)
