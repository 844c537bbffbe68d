"""How a ``Run`` builds itself from its recipe (``RunBuilding``, a part of ``gan_kit.runs.run.Run``):
the data set, G, D and G_ema with their training views, the objectives (loss, penalties,
strategy, metrics), the optimizers and their per-phase settings, and the precision. Every
component comes from the registry by the name the recipe gives."""

from __future__ import annotations

import contextlib
import sys
from typing import Any

import attrs
import torch
from torch import nn

from gan_kit.base.allocator import retain_freed_memory
from gan_kit.plugin_api.components import BuildContext, WeightedPenalty
from gan_kit.base.cpufeatures import auto_precision
from gan_kit.recipe.datachecks import labels_problem, metric_cap_note, metric_problem
from gan_kit.training.ema import make_ema
from gan_kit.base.errors import GankitError
from gan_kit.training.networks import apply_spectral_norm, at_precision, initialise, training_views
from gan_kit.base.phase import Phase
from gan_kit.recipe import ComponentSpec

__all__ = ["RunBuilding"]


class RunBuilding:
    """The building steps ``Run.__init__`` calls, in order: ``_build_data``, ``_build_networks``,
    ``_build_objectives``, ``_build_optimizers``, ``_build_precision``, ``_check_batches``; and
    ``apply_optim_settings`` / ``lazy_ratio`` / ``phases``, which the engine also uses."""

    def build(self, spec: ComponentSpec) -> Any:
        """The component a recipe table names, built with this run's ``BuildContext``."""
        comp = self.registry.get(spec.kind, spec.name)
        return comp.factory(spec.options, self.build_context())

    def build_context(self) -> BuildContext:
        return BuildContext(resolution=self.recipe.resolution, channels=getattr(self, "channels", 0),
                            recipe=self.recipe, num_classes=getattr(self, "num_classes", 0))

    def _build_data(self) -> None:
        r = self.recipe
        self.dataset = self.build(r.data).build(r.resolution)
        if len(self.dataset) == 0:
            raise GankitError(f"{r.path}: data: the {r.data.name!r} dataset is empty")
        first = self.dataset[0]
        first = first[0] if isinstance(first, (tuple, list)) else first
        self.channels = int(first.shape[0])
        if tuple(first.shape[-2:]) != (r.resolution, r.resolution):
            raise GankitError(f"{r.path}: data: dataset {r.data.name!r} gives {tuple(first.shape)} images, "
                              f"expected [C, {r.resolution}, {r.resolution}]")
        #: Classes of a class-conditional run (``architecture.conditional``), else 0.
        problem = labels_problem(r, self.dataset)
        if problem:
            raise GankitError(f"{r.path}: {problem}")
        self.num_classes = int(getattr(self.dataset, "num_classes", 0) or 0) if r.architecture.slot.conditional else 0
        #: Class names in label order where the data set has them (image-folder's sub-folders).
        self.class_names = [str(c) for c in getattr(self.dataset, "classes", None) or []] if self.num_classes else []
        #: The data set metrics (and ``real_images``) draw from: the training set, or with
        #: ``data.metric_reals = "full"`` the same data without its ``max_images`` subset.
        self.metric_dataset = self.dataset
        if r.data.slot is not None and r.data.slot.metric_reals == "full":
            if not hasattr(r.data.options, "max_images"):
                raise GankitError(f'{r.path}: data.metric_reals: "full" needs a data set with a max_images option, and '
                                  f'{r.data.name!r} has none (it always trains on all its images); remove the key')
            if r.data.options.max_images is not None:
                full = attrs.evolve(r.data, options=attrs.evolve(r.data.options, max_images=None))
                self.metric_dataset = self.build(full).build(r.resolution)

    def _build_networks(self) -> None:
        r = self.recipe
        if self.device.type == "cuda":
            torch.backends.cuda.matmul.allow_tf32 = r.run.tf32
            torch.backends.cudnn.allow_tf32 = r.run.tf32
            torch.backends.cudnn.benchmark = r.run.cudnn_benchmark
        elif self.device.type == "cpu" and r.run.retain_cpu_memory:
            retain_freed_memory()  # process-wide; see gan_kit/base/allocator.py
        self.growth = self.build(r.growth)
        self.arch = self.build(r.architecture)
        self.latent_dim = int(self.arch.latent_dim)
        G, D = self.arch.build(r.resolution, self.channels)
        self.initializer = self.build(r.init)
        owns = bool(getattr(self.arch, "owns_init", False))
        if owns and "init" in r.raw and r.init.name != "equalized-lr" and self.is_main:
            print(f"note: {r.path}: init: architecture {r.architecture.name!r} initialises its own weights "
                  f"(owns_init), so init {r.init.name!r} is not applied", file=sys.stderr)
        for net in (G, D):  # where the architecture allows: not frozen, not its own (gan_kit.plugin_api.ownership)
            initialise(net, self.initializer, owns)
        sn = r.architecture.slot.spectral_norm
        for name, net in (("G", G), ("D", D)):
            if sn in (name, "both"):
                apply_spectral_norm(net, name, r)
        self._freeze_d_blocks(D)
        self.G, self.D = G.to(self.device), D.to(self.device)
        if r.run.channels_last:
            self.G.to(memory_format=torch.channels_last)
            self.D.to(memory_format=torch.channels_last)
        if self.world_size > 1:
            from gan_kit.training.distributed import broadcast_parameters

            broadcast_parameters(self.G, self.D)
        self.G_ema = make_ema(self.G)
        self.all_reduce_grads = self.world_size > 1 and r.run.grad_sync == "all-reduce"
        self.augment = self.build(r.augment)
        #: Networks whose buffers change every iteration and differ per process (BatchNorm
        #: without SyncBatchNorm): broadcast from rank 0 after every iteration; all other buffers
        #: at ticks, phase changes and checkpoints (Run.check_in_sync).
        views = training_views(self.G, self.D, recipe=r, device=self.device, world_size=self.world_size,
                               augment=self.augment if r.augment.name != "none" else None)
        self.G_train, self.D_train, self.G_penalty, self.D_penalty = views
        self.buffers_each_step: list = []
        if self.world_size > 1:
            from gan_kit.training.distributed import has_batchnorm

            self.buffers_each_step = [net for net in (self.G, self.D) if has_batchnorm(net)]

    def _freeze_d_blocks(self, D: torch.nn.Module) -> None:
        """FreezeD (Mo et al. 2020, "Freeze the Discriminator"): D's first ``freeze_d_blocks``
        blocks from the input side stop requiring gradients before any wrapper (DDP, compile) or
        optimizer step sees them, so no backward fills their gradients and no step moves them;
        ``--init-from`` loads the pretrained weights into them afterwards."""
        r = self.recipe
        n = r.architecture.slot.freeze_d_blocks
        if not n:
            return
        blocks = self.arch.d_blocks(D)
        if len(blocks) < n:
            what = f"has {len(blocks)} blocks" if blocks else "names no blocks (Architecture.d_blocks)"
            raise GankitError(f"{r.path}: architecture.freeze_d_blocks: {n}, but {r.architecture.name!r}'s D {what}; "
                              f"freeze at most {len(blocks)}" + ("" if blocks else " (set it to 0)"))
        for block in blocks[:n]:
            for p in block.parameters():
                p.requires_grad_(False)

    def _build_objectives(self) -> None:
        r = self.recipe
        self.loss = self.build(r.loss)
        penalties = [WeightedPenalty(s.name, self.build(s), s.slot.weight) for s in r.penalties]
        for name, weight, opts in self.loss.implied_penalties():
            comp = self.registry.get("penalty", name)
            penalties.append(WeightedPenalty(name, comp.factory(comp.Options(**opts), self.build_context()), weight))
        self.penalties = penalties
        self.d_penalties = [p for p in penalties if p.penalty.network == "D" and p.penalty.interval == 1]
        self.g_penalties = [p for p in penalties if p.penalty.network == "G" and p.penalty.interval == 1]
        self.lazy_penalties = [p for p in penalties if p.penalty.interval > 1]
        self.strategy = self.build(r.update)
        self.metrics = [(s, self.build(s)) for s in r.metrics]
        #: ``[[tracker]]`` components (the ``trackers`` plugin drives them, on rank 0).
        self.trackers = [(s, self.build(s)) for s in r.trackers]
        for spec, metric in self.metrics:
            problem = metric_problem(spec, metric, len(self.metric_dataset), r.data.name)
            if problem:
                raise GankitError(f"{r.path}: {problem}")
            note = metric_cap_note(spec, metric, len(self.metric_dataset), r.data.name)
            if note and self.is_main:
                print(note, file=sys.stderr)

    def lazy_ratio(self, network: str) -> float:
        """k / (k + 1) for a network regularised lazily every k iterations, else 1: its optimizer
        takes k + 1 steps per k iterations, so lr and betas are corrected (StyleGAN2 sec. 3.1;
        stylegan2-ada-pytorch's ``mb_ratio``)."""
        intervals = {p.penalty.interval for p in self.lazy_penalties if p.penalty.network == network}
        if not intervals:
            return 1.0
        if len(intervals) > 1:
            raise GankitError(f"{self.recipe.path}: penalty: the lazy {network} penalties have different intervals "
                              f"{sorted(intervals)}; give them one interval")
        k = intervals.pop()
        return k / (k + 1)

    def _build_optimizers(self) -> None:
        o = self.recipe.optim
        self.g_lr = o.g_lr if o.g_lr is not None else o.lr
        self.d_lr = o.d_lr if o.d_lr is not None else o.lr
        self.opt_G = self._optimizer(self.G, self.g_lr, self.lazy_ratio("G"))
        self.opt_D = self._optimizer(self.D, self.d_lr, self.lazy_ratio("D"))

    def _optimizer(self, net: nn.Module, lr: float, ratio: float = 1.0) -> torch.optim.Optimizer:
        o = self.recipe.optim
        params = [p for p in net.parameters() if p.requires_grad]  # a frozen parameter is never stepped
        if not params:
            raise GankitError(f"{self.recipe.path}: architecture {self.recipe.architecture.name!r}: every parameter "
                              f"of {type(net).__name__} is frozen (requires_grad False): nothing to train")
        # Fused optimizers on the CPU as on CUDA: they take the non-finite policy's and the
        # GradScaler's skip flag on the device (found_inf), so a step costs no host sync
        # (gan_kit.training.step.finite), and the CPU runs the code path a GPU run does.
        kwargs = {"fused": True} if self.device.type in ("cuda", "cpu") else {}
        if o.name == "sgd":
            return torch.optim.SGD(params, lr=lr * ratio, **kwargs)
        betas = (o.betas[0] ** ratio, o.betas[1] ** ratio)
        return torch.optim.Adam(params, lr=lr * ratio, betas=betas, eps=o.eps, **kwargs)

    def apply_optim_settings(self) -> None:
        """Set each optimizer's lr (base x phase scale x lazy ratio), betas and eps from the
        recipe's values in force (``optim_options``: scheduled ones at the images shown): after
        every phase change, after a resume (a loaded optimizer state brings the old
        hyper-parameters with it), and before every iteration when ``[optim]`` is scheduled."""
        o = getattr(self, "optim_options", self.recipe.optim)
        self.g_lr = o.g_lr if o.g_lr is not None else o.lr
        self.d_lr = o.d_lr if o.d_lr is not None else o.lr
        scale = self.phase.lr_scale if self.phase is not None else 1.0
        for opt, base, net in ((self.opt_G, self.g_lr, "G"), (self.opt_D, self.d_lr, "D")):
            ratio = self.lazy_ratio(net)
            for group in opt.param_groups:
                group["lr"] = base * scale * ratio
                if "betas" in group:
                    group["betas"] = (o.betas[0] ** ratio, o.betas[1] ** ratio)
                    group["eps"] = o.eps

    def _build_precision(self) -> None:
        precision = self.recipe.run.precision
        if precision == "auto":
            precision = auto_precision(self.device.type, cpu_bf16=self.recipe.run.cpu_bf16)
        self.precision = precision
        self.scaler = torch.amp.GradScaler(self.device.type) if precision == "fp16" else None
        if precision in ("bf16", "fp16"):
            dtype = torch.bfloat16 if precision == "bf16" else torch.float16
            device_type = self.device.type
            self.autocast = lambda: torch.autocast(device_type, dtype=dtype)
            # Plugin code sees float32 networks whose forwards run at the run's precision, so
            # plain-PyTorch strategies and penalties train (gan_kit.training.networks.AtPrecision).
            self.G_train, self.D_train, self.G_penalty, self.D_penalty = at_precision(
                (self.G_train, self.D_train, self.G_penalty, self.D_penalty), self.autocast)
        else:
            self.autocast = contextlib.nullcontext

    def phases(self) -> list[Phase]:
        """Every phase the schedule visits before ``total_nimg`` (first image of each)."""
        return self.growth.phases(self.total_nimg)

    def _check_batches(self) -> None:
        from gan_kit.runs.rundir import batch_problem

        problem = batch_problem(self.recipe, self.phases(), self.arch, self.world_size)
        if problem:
            raise GankitError(problem)
