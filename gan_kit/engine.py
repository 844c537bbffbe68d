"""The training loop. It knows no specific loss, strategy, architecture or dataset: it builds the
components a recipe names through the registry and drives them, firing the lifecycle hooks that
reporters, samplers, metrics and checkpointers are built on."""

from __future__ import annotations

import contextlib
import math
import os
import random
import sys
import time
from pathlib import Path
from typing import Any, Iterator

import numpy as np
import torch
from torch import nn

from gan_kit import __version__
from gan_kit import checkpoint as ckpt
from gan_kit.components import BuildContext, StepContext, WeightedPenalty, set_phase
from gan_kit.data import PhaseBatchSampler, make_loader
from gan_kit.ema import ema_beta, make_ema, update_ema
from gan_kit.errors import CheckpointError, GankitError, TrainingError
from gan_kit.phase import Phase, fade_real
from gan_kit.plugins import Plugins
from gan_kit.recipe import ComponentSpec, Recipe, recipe_to_toml

__all__ = ["Run", "train", "resolve_device"]


def resolve_device(name: str) -> torch.device:
    """``"auto"`` -> CUDA when present, else CPU; anything else as given."""
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    dev = torch.device(name)
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise GankitError(f"run.device: {name!r} asked for but CUDA is not available (use \"auto\" or \"cpu\")")
    return dev


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


def _distributed() -> tuple[int, int]:
    if torch.distributed.is_available() and torch.distributed.is_initialized():
        return torch.distributed.get_rank(), torch.distributed.get_world_size()
    return 0, 1


class Run:
    """One training run: the recipe's components, the networks, optimizers and progress.

    Attributes plugins may read: ``recipe``, ``out_dir`` (Path), ``device``, ``G``, ``D``,
    ``G_ema``, ``opt_G``, ``opt_D``, ``phase``, ``previous_phase``, ``cur_nimg`` (real images shown),
    ``step`` (iterations done), ``total_nimg``, ``tick``, ``is_main`` (rank 0), ``state`` (a dict
    where plugins keep per-run state, keyed by plugin name).
    """

    def __init__(self, recipe: Recipe, plugins: Plugins, out_dir: str | Path | None = None):
        self.recipe = recipe
        self.plugins = plugins
        self.hook = plugins.hook
        self.registry = plugins.registry
        self.options = recipe.run
        self.out_dir = Path(out_dir or recipe.run.out_dir)
        self.rank, self.world_size = _distributed()
        self.device = resolve_device(recipe.run.device)
        if self.world_size > 1 and self.device.type == "cuda":
            self.device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", 0)))
        self.is_main = self.rank == 0
        self.state: dict[str, Any] = {}
        self.total_nimg = int(round(recipe.run.total_kimg * 1000))
        self.tick_nimg = max(1, int(round(recipe.run.tick_kimg * 1000)))
        self.cur_nimg = 0
        self.step = 0
        self.d_step = 0
        self.tick = 0
        self.skipped_steps = 0
        self.phase: Phase | None = None
        self.previous_phase: Phase | None = None
        self.last_checkpoint: Path | None = None
        self._build()

    # ------------------------------------------------------------------------------ building --

    def build(self, spec: ComponentSpec, channels: int = 0) -> Any:
        comp = self.registry.get(spec.kind, spec.name)
        ctx = BuildContext(resolution=self.recipe.resolution, channels=channels, recipe=self.recipe)
        return comp.factory(spec.options, ctx)

    def _build(self) -> None:
        r = self.recipe
        seed_everything(r.run.seed)
        precision = r.run.precision
        if precision == "auto":
            precision = "bf16" if self.device.type == "cuda" else "fp32"
        self.precision = precision

        if self.device.type == "cuda":
            torch.backends.cuda.matmul.allow_tf32 = r.run.tf32
            torch.backends.cudnn.allow_tf32 = r.run.tf32
            torch.backends.cudnn.benchmark = r.run.cudnn_benchmark
        self.dataset = self.build(r.data).build(r.resolution)
        if len(self.dataset) == 0:
            raise GankitError(f"{r.path}: data: the {r.data.name!r} dataset is empty")
        first = self.dataset[0]
        first = first[0] if isinstance(first, (tuple, list)) else first
        self.channels = int(first.shape[0])
        if tuple(first.shape[-2:]) != (r.resolution, r.resolution):
            raise GankitError(f"{r.path}: data: dataset {r.data.name!r} gives {tuple(first.shape)} images, "
                              f"expected [C, {r.resolution}, {r.resolution}]")

        self.growth = self.build(r.growth, self.channels)
        self.arch = self.build(r.architecture, self.channels)
        G, D = self.arch.build(r.resolution, self.channels)
        self.initializer = self.build(r.init, self.channels)
        self.initializer.apply(G)
        self.initializer.apply(D)
        self.G, self.D = G.to(self.device), D.to(self.device)
        if r.run.channels_last:
            self.G.to(memory_format=torch.channels_last)
            self.D.to(memory_format=torch.channels_last)
        if self.world_size > 1:
            from gan_kit.distributed import broadcast_parameters

            broadcast_parameters(self.G, self.D)
        self.G_ema = make_ema(self.G)
        self.latent_dim = int(getattr(self.G, "latent_dim"))
        # The networks the strategies call: in DDP wrappers under several processes, then
        # compiled when asked (torch.compile(DDP(net)) lets Dynamo split graphs at DDP's buckets).
        # Penalties keep the eager D - still the DDP one, so a penalty-only backward is averaged
        # too - because compiled graphs have no double backward.
        self.all_reduce_grads = self.world_size > 1 and r.run.grad_sync == "all-reduce"
        G_train, D_train = self.G, self.D
        if self.world_size > 1 and r.run.grad_sync == "ddp":
            from gan_kit.distributed import wrap_ddp

            G_train, D_train = wrap_ddp(self.G, self.device), wrap_ddp(self.D, self.device)
        self.D_penalty = D_train
        if r.run.compile:
            # AOTAutograd's donated buffers forbid retain_graph=True in a backward through a
            # compiled graph, which shared-fake (and any strategy that backpropagates one graph
            # twice) needs; the cost is only some buffer reuse in the backward.
            from torch._functorch import config as functorch_config

            functorch_config.donated_buffer = False
            backend = r.run.compile_backend
            G_train = torch.compile(G_train, backend=backend)
            D_train = torch.compile(D_train, backend=backend)
        self.G_train, self.D_train = G_train, D_train

        o = r.optim
        self.g_lr = o.g_lr if o.g_lr is not None else o.lr
        self.d_lr = o.d_lr if o.d_lr is not None else o.lr
        self.opt_G = self._optimizer(self.G, self.g_lr)
        self.opt_D = self._optimizer(self.D, self.d_lr)

        self.loss = self.build(r.loss, self.channels)
        penalties = [WeightedPenalty(s.name, self.build(s, self.channels), s.slot.weight) for s in r.penalties]
        for name, weight, opts in self.loss.implied_penalties():
            comp = self.registry.get("penalty", name)
            options = comp.Options(**opts)
            penalties.append(WeightedPenalty(name, comp.factory(options, BuildContext(r.resolution, self.channels, r)), weight))
        self.penalties = penalties
        self.strategy = self.build(r.update, self.channels)
        self.metrics = [(s, self.build(s, self.channels)) for s in r.metrics]

        self.scaler = None
        if precision == "fp16":
            self.scaler = torch.amp.GradScaler(self.device.type)
        if precision in ("bf16", "fp16"):
            dtype = torch.bfloat16 if precision == "bf16" else torch.float16
            device_type = self.device.type
            self.autocast = lambda: torch.autocast(device_type, dtype=dtype)
        else:
            self.autocast = contextlib.nullcontext
        self._check_batches()

        # Fixed latents for sample grids come from their own generator so that drawing them never
        # moves the training RNG (exact resume).
        gen = torch.Generator().manual_seed(r.run.seed + 12345)
        self.fixed_z = torch.randn(r.run.sample_grid, self.latent_dim, generator=gen)

    def step_context(self, phase: Phase, reals: list[torch.Tensor]) -> StepContext:
        """The ``StepContext`` of the next iteration: ``reals`` are its ``d_steps`` real batches
        ``[N,C,r,r]`` (this process's slice, already faded to ``phase``)."""
        return StepContext(G=self.G_train, D=self.D_train, opt_G=self.opt_G, opt_D=self.opt_D, loss=self.loss,
                           penalties=self.penalties, reals=reals, latent=self.latent, phase=phase,
                           autocast=self.autocast, scaler=self.scaler, step=self.step, d_step=self.d_step,
                           skip_nonfinite=self.recipe.run.on_nonfinite == "skip", rank=self.rank,
                           world_size=self.world_size, D_penalty=self.D_penalty,
                           all_reduce_grads=self.all_reduce_grads)

    def check_in_sync(self) -> None:
        """Raise ``TrainingError`` when G's or D's weights differ across processes (a collective;
        a no-op with one process). Called at every tick and phase change, before the hooks that
        write checkpoints: a gradient DDP never saw is the silent multi-GPU bug this catches."""
        if self.world_size < 2:
            return
        from gan_kit.distributed import out_of_sync

        bad = out_of_sync({"G": self.G, "D": self.D}, self.world_size)
        if bad:
            fix = ('its strategy must make weight gradients with a backward (ctx.backward(loss, inputs=...)), not '
                   'torch.autograd.grad into .grad, or set run.grad_sync = "all-reduce"'
                   if self.recipe.run.grad_sync == "ddp" else "a plugin changed the weights on some processes only")
            raise TrainingError(
                f"step {self.step}: the weights of {' and '.join(bad)} differ across the {self.world_size} processes, "
                f"so gradients were not averaged (update strategy {self.recipe.update.name!r}): {fix}")

    def phases(self) -> list[Phase]:
        """Every phase the schedule visits before ``total_nimg`` (first image of each)."""
        return schedule(self.growth, self.total_nimg)

    def _check_batches(self) -> None:
        problem = batch_problem(self.recipe, self.phases(), self.arch, self.world_size)
        if problem:
            raise GankitError(problem)

    def _optimizer(self, net: nn.Module, lr: float) -> torch.optim.Optimizer:
        o = self.recipe.optim
        params = list(net.parameters())
        if o.name == "sgd":
            return torch.optim.SGD(params, lr=lr)
        kwargs = {}
        if self.device.type == "cuda":
            kwargs["fused"] = True
        return torch.optim.Adam(params, lr=lr, betas=o.betas, eps=o.eps, **kwargs)

    # --------------------------------------------------------------------------- helpers --

    def latent(self, n: int) -> torch.Tensor:
        """Latents ``z[n, latent_dim]`` for this process: drawn for all processes together and
        sliced ``[rank::world_size]`` (see gan_kit.distributed)."""
        z = torch.randn(n * self.world_size, self.latent_dim, device=self.device)
        return z[self.rank::self.world_size] if self.world_size > 1 else z

    def set_phase(self, phase: Phase) -> None:
        for net in (self.G, self.D, self.G_ema):
            set_phase(net, phase.resolution, phase.alpha)

    def apply_lr(self, phase: Phase) -> None:
        for opt, base in ((self.opt_G, self.g_lr), (self.opt_D, self.d_lr)):
            for group in opt.param_groups:
                group["lr"] = base * phase.lr_scale

    @torch.no_grad()
    def generate(self, z: torch.Tensor, phase: Phase | None = None, batch: int = 64) -> torch.Tensor:
        """Images ``[N,C,r,r]`` from G_ema for latents ``z`` (at ``phase``, default the current one)."""
        phase = phase or self.phase
        set_phase(self.G_ema, phase.resolution, phase.alpha)
        out = []
        for i in range(0, z.shape[0], batch):
            with self.autocast():
                out.append(self.G_ema(z[i:i + batch].to(self.device)).float().cpu())
        if self.phase is not None:
            set_phase(self.G_ema, self.phase.resolution, self.phase.alpha)
        return torch.cat(out)

    def real_images(self, n: int, seed: int = 0) -> torch.Tensor:
        """``n`` real images at the final resolution, drawn without replacement with ``seed``."""
        g = torch.Generator().manual_seed(seed)
        idx = torch.randperm(len(self.dataset), generator=g)[:n].tolist()
        items = [self.dataset[i] for i in idx]
        return torch.stack([it[0] if isinstance(it, (tuple, list)) else it for it in items])

    # -------------------------------------------------------------------------- checkpoints --

    def state_dict(self) -> dict:
        return {
            "gankit_version": __version__,
            "channels": self.channels,
            "recipe": recipe_to_toml(self.recipe),
            "G": self.G.state_dict(),
            "D": self.D.state_dict(),
            "G_ema": self.G_ema.state_dict(),
            "opt_G": self.opt_G.state_dict(),
            "opt_D": self.opt_D.state_dict(),
            "scaler": self.scaler.state_dict() if self.scaler is not None else None,
            "cur_nimg": self.cur_nimg,
            "step": self.step,
            "d_step": self.d_step,
            "tick": self.tick,
            "skipped_steps": self.skipped_steps,
            "data_position": self.cur_nimg,
            "phase": _phase_dict(self.phase),
            "rng": ckpt.rng_state(),
        }

    def load_state_dict(self, state: dict) -> None:
        self.G.load_state_dict(state["G"])
        self.D.load_state_dict(state["D"])
        self.G_ema.load_state_dict(state["G_ema"])
        self.opt_G.load_state_dict(state["opt_G"])
        self.opt_D.load_state_dict(state["opt_D"])
        if self.scaler is not None and state.get("scaler"):
            self.scaler.load_state_dict(state["scaler"])
        self.cur_nimg = int(state["cur_nimg"])
        self.step = int(state["step"])
        self.d_step = int(state["d_step"])
        self.tick = int(state["tick"])
        self.skipped_steps = int(state["skipped_steps"])
        ckpt.set_rng_state(state["rng"])

    def save_checkpoint(self, name: str = "latest") -> Path | None:
        """Write ``checkpoints/<name>.pt`` atomically (rank 0 only) and fire ``checkpoint_saved``."""
        if not self.is_main:
            return None
        path = ckpt.save_atomic(self.state_dict(), self.out_dir / "checkpoints" / f"{name}.pt")
        self.last_checkpoint = path
        self.hook.checkpoint_saved(run=self, path=path)
        return path

    def resume(self, path: str | Path | None = None) -> list[str]:
        """Restore the latest (or the given) checkpoint exactly.

        Tables that shape the networks or the data (``architecture``, ``data``, ``init``) must
        match the checkpoint's recipe: a mismatch raises ``CheckpointError`` naming the key. Other
        changes (a longer ``total_kimg``, another loss) are allowed and returned as
        ``"key: old -> new"`` lines for the caller to report.
        """
        import tomllib

        path = Path(path) if path else self.out_dir / "checkpoints" / "latest.pt"
        if not path.is_file():
            raise GankitError(f"--resume: no checkpoint at {path} (run without --resume to start fresh)")
        state = ckpt.load(path, map_location=self.device)
        old = _flatten(tomllib.loads(state["recipe"]))
        new = _flatten(tomllib.loads(recipe_to_toml(self.recipe)))
        changes = []
        for key in sorted(set(old) | set(new)):
            if old.get(key) == new.get(key):
                continue
            change = f"{key}: {old.get(key, '(unset)')!r} -> {new.get(key, '(unset)')!r}"
            if key.split(".")[0] in ("architecture", "data", "init"):
                raise CheckpointError(
                    f"--resume: {path} was trained with {key} = {old.get(key, '(unset)')!r}, the recipe now says "
                    f"{new.get(key, '(unset)')!r}; resume with the run's own recipe ({self.out_dir / 'recipe.toml'}) "
                    f"or start a new run with --out")
            changes.append(change)
        try:
            self.load_state_dict(state)
        except (RuntimeError, KeyError, ValueError) as e:
            first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
            raise CheckpointError(f"--resume: {path} does not fit this recipe's networks ({first[:160]})") from None
        self.last_checkpoint = path
        return changes


def _flatten(table: dict, prefix: str = "") -> dict:
    out = {}
    for k, v in table.items():
        key = f"{prefix}{k}"
        if isinstance(v, dict):
            out.update(_flatten(v, key + "."))
        elif isinstance(v, list) and v and all(isinstance(x, dict) for x in v):
            for i, item in enumerate(v):
                out.update(_flatten(item, f"{key}[{i}]."))
        else:
            out[key] = v
    return out


def load_generator(path: str | Path, device: str | torch.device = "cpu") -> tuple[nn.Module, Phase, Recipe]:
    """G_ema of a checkpoint, rebuilt from the recipe saved in it and set to the saved phase.

    Returns ``(G_ema, phase, recipe)``. Raises ``CheckpointError`` / ``RecipeError``.
    """
    from gan_kit.recipe import load_recipe

    state = ckpt.load(path, map_location=device)
    recipe, plugins = load_recipe(Path(f"{path}[recipe]"), text=state["recipe"])
    G_state = state["G_ema"]
    channels = int(state["channels"])
    ctx = BuildContext(resolution=recipe.resolution, channels=channels, recipe=recipe)
    arch = plugins.registry.get("architecture", recipe.architecture.name).factory(recipe.architecture.options, ctx)
    G, _ = arch.build(recipe.resolution, channels)
    plugins.registry.get("init", recipe.init.name).factory(recipe.init.options, ctx).apply(G)
    G.load_state_dict(G_state)
    G = G.to(device).eval().requires_grad_(False)
    phase = Phase(**state["phase"])
    set_phase(G, phase.resolution, phase.alpha)
    return G, phase, recipe


def _phase_dict(phase: Phase | None) -> dict | None:
    if phase is None:
        return None
    import attrs

    return {k: (float(v) if isinstance(v, float) else v) for k, v in attrs.asdict(phase).items()}


def _finite(stats: dict[str, float]) -> str | None:
    for k, v in stats.items():
        if isinstance(v, float) and not math.isfinite(v):
            return k
    return None


def _to_floats(stats: dict[str, Any]) -> dict[str, float]:
    """Convert tensor stats with one device sync."""
    keys = [k for k, v in stats.items() if isinstance(v, torch.Tensor)]
    out = {k: float(v) for k, v in stats.items() if not isinstance(v, torch.Tensor)}
    if keys:
        values = torch.stack([stats[k].detach().float().reshape(()) for k in keys]).cpu().tolist()
        out.update(zip(keys, values))
    return out


def write_recipe(run: Run) -> None:

    versions = [f"torch {torch.__version__}", f"gankit {__version__}"]
    for source in sorted(set(run.plugins.sources.values())):
        if " " in source and not source.startswith("recipe plugin"):
            versions.append(source)
    header = "# resolved by gankit; versions: " + ", ".join(versions)
    run.out_dir.mkdir(parents=True, exist_ok=True)
    (run.out_dir / "recipe.toml").write_text(recipe_to_toml(run.recipe, header), encoding="utf-8")


RUN_FILES = ("metrics.jsonl", "recipe.toml", "samples", "checkpoints", "events", "report", "report.html")


def run_dir_problem(out_dir: Path) -> str | None:
    """Why a fresh run may not start in ``out_dir`` (it already holds a run), else None."""
    existing = [name for name in RUN_FILES[:4] if (Path(out_dir) / name).exists()]
    if existing:
        return (f"{out_dir}: already holds a run ({', '.join(existing)}); continue it with --resume, "
                f"pick another folder with --out, or replace it with --overwrite")
    return None


def schedule(growth, total_nimg: int) -> list[Phase]:
    """Every phase ``growth`` visits before ``total_nimg`` images (first image of each)."""
    out, nimg = [], 0
    while nimg < max(total_nimg, 1):
        ph = growth.phase_at(nimg)
        out.append(ph)
        if ph.end_nimg == math.inf:
            break
        nimg = int(ph.end_nimg)
    return out


def batch_problem(recipe: Recipe, phases: list[Phase], arch: Any, world_size: int) -> str | None:
    """Why the schedule's global batches do not suit ``world_size`` processes, else None: each
    must split evenly, and each process's share must suit the architecture
    (``Architecture.batch_problem``, e.g. PGGAN's minibatch-stddev group)."""
    check = getattr(arch, "batch_problem", None)
    for ph in phases:
        if ph.batch_size % world_size:
            return (f"{recipe.path}: growth.batch_size: {ph.batch_size} at {ph.resolution}px does not divide "
                    f"across {world_size} processes (use a multiple of {world_size})")
        msg = check(ph.batch_size // world_size) if check is not None else None
        if msg:
            return (f"{recipe.path}: architecture: {msg} (the per-process batch at {ph.resolution}px: "
                    f"{ph.batch_size} over {world_size} processes)")
    return None


def preflight(recipe: Recipe, plugins: Plugins, world_size: int, *, check_run_dir: bool,
              resume: bool = False) -> None:
    """The checks ``gankit run --nproc N`` makes once, before starting N processes that would
    each report the same problem: the batches for N processes and (``check_run_dir``, a fresh
    run) whether the run directory is free, or (``resume``) whether it has a checkpoint. Builds the
    growth scheduler and the architecture component only (no networks, no data). Raises
    ``GankitError``."""
    def build(spec):
        comp = plugins.registry.get(spec.kind, spec.name)
        return comp.factory(spec.options, BuildContext(resolution=recipe.resolution, channels=0, recipe=recipe))

    total = int(round(recipe.run.total_kimg * 1000))
    problem = batch_problem(recipe, schedule(build(recipe.growth), total), build(recipe.architecture), world_size)
    if problem is None and check_run_dir:
        problem = run_dir_problem(Path(recipe.run.out_dir))
    latest = Path(recipe.run.out_dir) / "checkpoints" / "latest.pt"
    if problem is None and resume and not latest.exists():
        problem = f"--resume: no checkpoint at {latest} (run without --resume to start fresh)"
    if problem:
        raise GankitError(problem)


def train(run: Run, *, resume: bool | str = False, max_steps: int | None = None,
          overwrite: bool = False) -> dict[str, float]:
    """Train until ``run.total_nimg`` images have been shown (or ``max_steps`` iterations).

    A fresh run refuses a run directory that already holds a run (``GankitError``) unless
    ``overwrite`` removes that run's files first. Returns the final tick's stats. Raises
    ``TrainingError`` on a non-finite loss with ``run.on_nonfinite = "stop"`` (the last checkpoint
    is left untouched).
    """
    import shutil

    r = run.recipe
    if resume:
        for change in run.resume(resume if isinstance(resume, (str, Path)) else None):
            if run.is_main:
                print(f"note: resuming with a changed recipe: {change}", file=sys.stderr)
        if run.cur_nimg >= run.total_nimg:
            raise GankitError(
                f"--resume: the run is already at {run.cur_nimg / 1000:g} kimg >= run.total_kimg = "
                f"{run.total_nimg / 1000:g}; raise it to train further (--set run.total_kimg=...)")
    else:
        # Rank 0 decides and tells the others, so every process stops with the same line
        # (instead of the others failing later on a closed connection).
        problem = run_dir_problem(run.out_dir) if run.is_main and not overwrite else None
        if run.world_size > 1:
            from gan_kit.distributed import broadcast_object

            problem = broadcast_object(problem)
        if problem:
            raise GankitError(problem)
    if overwrite and not resume and run.is_main:
        for name in RUN_FILES:
            target = run.out_dir / name
            if target.is_dir():
                shutil.rmtree(target)
            elif target.exists():
                target.unlink()
    if run.is_main:
        write_recipe(run)
    d_steps = run.strategy.d_steps
    strategy = run.strategy

    def batch_for(position: int) -> tuple[int, int]:
        return run.growth.phase_at(position).batch_size, d_steps

    sampler = PhaseBatchSampler(len(run.dataset), r.run.seed, run.cur_nimg, batch_for, run.rank, run.world_size)
    loader = make_loader(run.dataset, sampler, r.run.num_workers, pin_memory=run.device.type == "cuda")
    batches: Iterator[torch.Tensor] = iter(loader)

    run.phase = run.growth.phase_at(run.cur_nimg)
    run.previous_phase = None
    run.set_phase(run.phase)
    run.apply_lr(run.phase)
    run.hook.run_started(run=run)
    run.hook.phase_started(run=run, phase=run.phase)

    tick_sums: dict[str, float] = {}
    tick_count = 0
    tick_start_time = time.perf_counter()
    tick_start_nimg = run.cur_nimg
    next_tick = (run.cur_nimg // run.tick_nimg + 1) * run.tick_nimg
    stats_out: dict[str, Any] = {}
    steps_done = 0

    def finish_tick(final: bool) -> dict[str, Any]:
        nonlocal tick_sums, tick_count, tick_start_time, tick_start_nimg
        run.check_in_sync()  # before the tick's hooks write a checkpoint
        elapsed = max(time.perf_counter() - tick_start_time, 1e-9)
        stats: dict[str, Any] = {k: v / max(tick_count, 1) for k, v in tick_sums.items()}
        stats.update({
            "Progress/tick": run.tick,
            "Progress/kimg": run.cur_nimg / 1000.0,
            "Progress/step": run.step,
            "Progress/phase": run.phase.index,
            "Progress/resolution": run.phase.resolution,
            "Progress/alpha": run.phase.alpha,
            "Progress/skipped_steps": run.skipped_steps,
            "Progress/final": final,
            "Timing/sec_per_tick": elapsed,
            "Timing/img_per_s": (run.cur_nimg - tick_start_nimg) / elapsed,
        })
        run.hook.tick_finished(run=run, stats=stats)
        run.tick += 1
        tick_sums, tick_count = {}, 0
        tick_start_time, tick_start_nimg = time.perf_counter(), run.cur_nimg
        return stats

    while run.cur_nimg < run.total_nimg and (max_steps is None or steps_done < max_steps):
        phase = run.growth.phase_at(run.cur_nimg)
        if phase.index != run.phase.index:
            run.check_in_sync()  # before phase_started writes the finished phase's checkpoint
            run.previous_phase = run.phase
            run.hook.phase_started(run=run, phase=phase)
            run.apply_lr(phase)
        run.phase = phase
        run.set_phase(phase)

        batch = next(batches).to(run.device, non_blocking=True)
        if r.run.channels_last:
            batch = batch.contiguous(memory_format=torch.channels_last)
        per = batch.shape[0] // d_steps
        reals = [fade_real(batch[j * per:(j + 1) * per], phase.resolution, phase.alpha) for j in range(d_steps)]

        ctx = run.step_context(phase, reals)
        scale = run.scaler.get_scale() if run.scaler is not None else None
        raw = strategy.step(ctx)
        scaler_skipped = False
        if run.scaler is not None:
            run.scaler.update()  # after both networks' steps (opt_step adds one per extra critic step)
            # A lower scale means the scaler found inf/NaN gradients and skipped the step: the
            # normal fp16 overflow handling, not divergence, unless the scale collapses.
            scaler_skipped = run.scaler.get_scale() < scale
            if run.scaler.get_scale() < 1e-6:
                raise TrainingError(f"step {run.step + 1}: the fp16 loss scale collapsed to "
                                    f"{run.scaler.get_scale():.3g}; training diverged (try precision = \"bf16\")")
        if run.world_size > 1:
            from gan_kit.distributed import broadcast_buffers

            broadcast_buffers(run.G, run.D)
        stats = _to_floats(dict(raw))
        if run.world_size > 1:
            from gan_kit.distributed import average_stats

            stats = average_stats(stats, run.device)
        bad = _finite(stats) or ("gradients" if ctx.skipped else None)
        if scaler_skipped:
            run.scaler_skips = getattr(run, "scaler_skips", 0) + 1
            bad = None
        run.cur_nimg += phase.batch_size * d_steps
        run.step += 1
        run.d_step += d_steps
        steps_done += 1
        if bad is not None:
            if r.run.on_nonfinite == "stop":
                where = f" (last good checkpoint: {run.last_checkpoint})" if run.last_checkpoint else ""
                raise TrainingError(
                    f"step {run.step} (kimg {run.cur_nimg / 1000:.3f}, {phase.resolution}px): {bad} is "
                    f"{stats[bad]}; stopped{where}. Lower optim.lr, add a penalty, or set "
                    f"run.on_nonfinite = \"skip\"")
            run.skipped_steps += 1
            if run.skipped_steps > r.run.max_skipped:
                raise TrainingError(
                    f"step {run.step}: {run.skipped_steps} steps skipped for non-finite losses (last: {bad}), "
                    f"more than run.max_skipped = {r.run.max_skipped}; training diverged")
        elif not scaler_skipped:
            e = r.ema
            beta = ema_beta(e.decay, e.half_life_kimg, e.rampup, phase.batch_size, run.cur_nimg)
            update_ema(run.G_ema, run.G, beta)
            for k, v in stats.items():
                tick_sums[k] = tick_sums.get(k, 0.0) + v
            tick_count += 1
        run.hook.step_finished(run=run, stats=stats)
        if run.cur_nimg >= next_tick and run.cur_nimg < run.total_nimg:
            stats_out = finish_tick(final=False)
            next_tick = (run.cur_nimg // run.tick_nimg + 1) * run.tick_nimg

    final = run.cur_nimg >= run.total_nimg
    stats_out = finish_tick(final=final)
    if final:
        run.hook.run_finished(run=run, stats=stats_out)
    return stats_out
