"""``gankit bench``: time the update strategies on a recipe's own model, data, resolution and
device, side by side with a hand-written plain-PyTorch loop doing the math of ``d-then-g``.

What is timed, per iteration (``d_steps`` D steps and one G step), identically for every row:

* a strategy row: what ``gan_kit.runs.session.train`` does around the strategy - build the
  ``StepContext``, ``strategy.step(ctx)``, ``scaler.update()`` under fp16, the non-finite flags
  and the stats, kept on the device (the timing synchronises the device around each call);
* the ``hand-written`` row: ``zero_grad`` / forward / loss / penalties / ``backward`` / ``step``
  written out in plain PyTorch on its own copies of G and D and its own optimizers (same
  hyper-parameters), no gankit object involved, returning the two losses as floats.

Data loading, EMA, hooks and reporting are excluded from both sides: every row receives the same
pre-made real batches at the benchmark phase's resolution (alpha = 1). Rows are interleaved one
iteration at a time, in a rotating order with the hand-written row next to ``d-then-g``, so
machine drift and cache effects hit all alike. Each row's figure is its best time over the
timed iterations (after ``warmup`` untimed ones), timeit's convention: on a shared machine the
slower repetitions measure other processes, not the code; the median is shown beside it.
"""

from __future__ import annotations

import contextlib
import copy
import functools
import math
import os
import statistics
import time
from pathlib import Path
from typing import Any, Callable

import attrs
import torch

from gan_kit.plugin_api.components import set_phase
from gan_kit.base.errors import GankitError

__all__ = ["BenchRow", "BenchResult", "prepare", "measure", "run_bench", "result_table", "hand_written_step",
           "operator_table"]

REFERENCE = "hand-written"


@attrs.define
class BenchRow:
    """One contender: ``step(reals)`` runs one iteration; ``times`` are seconds per timed one."""

    name: str
    step: Callable[[list[torch.Tensor]], Any]
    nets: tuple = ()  # (G, D) the row trains, for inspection
    times: list[float] = attrs.field(factory=list)

    @property
    def best_s(self) -> float:
        return min(self.times)

    @property
    def median_s(self) -> float:
        return statistics.median(self.times)


@attrs.define
class BenchResult:
    """Timings of every row and the setting they were measured in."""

    recipe: Path
    device: torch.device
    precision: str
    resolution: int
    batch_size: int
    d_steps: int
    steps: int
    warmup: int
    rows: list[BenchRow]
    reference_note: str = ""

    def row(self, name: str) -> BenchRow | None:
        return next((r for r in self.rows if r.name == name), None)

    def images_per_s(self, row: BenchRow) -> float:
        """Real images consumed per second: ``batch_size * d_steps / best seconds per iteration``."""
        return self.batch_size * self.d_steps / row.best_s

    def relative(self, row: BenchRow) -> float | None:
        """Throughput of ``row`` over the hand-written loop's, from the best times; None without
        the reference row."""
        ref = self.row(REFERENCE)
        return None if ref is None else ref.best_s / row.best_s

    @property
    def ratio(self) -> float | None:
        """Engine (``d-then-g``) throughput over the hand-written loop's; None without both rows."""
        eng = self.row("d-then-g")
        return None if eng is None else self.relative(eng)


# -------------------------------------------------------------------------------- setup ----


def _bench_phase(run, resolution: int | None):
    """The stabilised (alpha = 1) phase at ``resolution`` (default: the last one) of the schedule."""
    from gan_kit.base.phase import Phase

    phases = run.growth.phases(math.inf)
    want = resolution or phases[-1].resolution
    match = [ph for ph in phases if ph.resolution == want]
    if not match:
        raise GankitError(f"--resolution {want}: not in the recipe's schedule "
                          f"({', '.join(str(p.resolution) for p in phases)})")
    ph = match[-1]
    return Phase(index=ph.index, resolution=ph.resolution, alpha=1.0, batch_size=ph.batch_size,
                 lr_scale=ph.lr_scale, start_nimg=ph.start_nimg, end_nimg=ph.end_nimg, fade_nimg=ph.fade_nimg)


def _copies(run, phase):
    """Fresh G and D: copies of the run's initial weights, set to ``phase``."""
    G, D = copy.deepcopy(run.G), copy.deepcopy(run.D)
    for net in (G, D):
        set_phase(net, phase.resolution, phase.alpha)
    return G, D


def _with_strategy(recipe, registry, name: str, d_steps: int):
    """``recipe`` with ``[update]`` replaced by strategy ``name`` (the recipe's own options when
    it is the recipe's strategy, else its defaults with the recipe's ``d_steps``)."""
    if name == recipe.update.name:
        return recipe
    comp = registry.get("update", name)
    fields = {f.name for f in attrs.fields(comp.Options)}
    options = comp.Options(**({"d_steps": d_steps} if "d_steps" in fields else {}))
    return attrs.evolve(recipe, update=attrs.evolve(recipe.update, name=name, options=options))


def _engine_row(recipe, plugins, name: str, phase, d_steps: int) -> BenchRow:
    """A row that runs ``gan_kit.runs.engine.train_step`` - the training loop's own iteration (the
    strategy, lazy regularisation, GradScaler, non-finite policy, G_ema, one stats sync) - on a
    run of its own built from the recipe with this strategy (same seed, same initial weights)."""
    from gan_kit.runs.engine import train_step
    from gan_kit.runs.run import build_run

    run = build_run(_with_strategy(recipe, plugins.registry, name, d_steps), plugins, out_dir=os.devnull)
    if run.strategy.d_steps != d_steps:
        raise GankitError(f"bench: strategy {name!r} takes {run.strategy.d_steps} D steps, the recipe {d_steps}")
    run.set_phase(phase)
    run.apply_optim_settings()

    # A class-conditional run trains on (images, labels): the bench gives its real batches
    # labels drawn uniformly from a fixed generator (the speed does not depend on which).
    label_gen = torch.Generator().manual_seed(0)

    def step(reals):
        images = torch.cat(reals)
        if not run.num_classes:
            return train_step(run, phase, images)
        labels = torch.randint(run.num_classes, (images.shape[0],), generator=label_gen)
        return train_step(run, phase, (images, labels))

    return BenchRow(name, step, (run.G, run.D))


# ----------------------------------------------------------------- the hand-written loop ----


def _hand_d_loss(name: str) -> Callable | None:
    F = torch.nn.functional
    return {
        "hinge": lambda r, f: F.relu(1 - r).mean() + F.relu(1 + f).mean(),
        "bce": lambda r, f: F.softplus(-r).mean() + F.softplus(f).mean(),
        "bce-minimax": lambda r, f: F.softplus(-r).mean() + F.softplus(f).mean(),
        "wgan": lambda r, f: f.mean() - r.mean(),
        "wgan-gp": lambda r, f: f.mean() - r.mean(),
    }.get(name)


def _hand_g_loss(name: str) -> Callable | None:
    F = torch.nn.functional
    return {
        "hinge": lambda f: -f.mean(),
        "bce": lambda f: F.softplus(-f).mean(),
        "bce-minimax": lambda f: -F.softplus(f).mean(),
        "wgan": lambda f: -f.mean(),
        "wgan-gp": lambda f: -f.mean(),
    }.get(name)


def _hand_penalties(run) -> tuple[list[tuple[str, float, float, int]], str]:
    """``(kind, weight, target, interval)`` for each penalty of the run, or a note why not."""
    out = []
    for wp in run.penalties:
        opts = wp.penalty.options
        if wp.name == "gradient-penalty":
            out.append(("gp", wp.weight, float(opts.target), 1))
        elif wp.name == "r1":
            out.append(("r1", wp.weight, 0.0, int(opts.interval)))
        elif wp.name == "drift":
            out.append(("drift", wp.weight, 0.0, 1))
        else:
            return [], f"no hand-written version of penalty {wp.name!r}"
    return out, ""


def hand_written_step(G, D, opt_G, opt_D, *, latent_dim: int, loss: str, penalties, device,
                      autocast: Callable = None, scaler=None) -> Callable[[list[torch.Tensor]], tuple]:
    """A plain-PyTorch iteration of ``d-then-g`` on the given nets and optimizers.

    Returns ``step(reals) -> (d_loss, g_loss)`` (floats). ``reals``: ``d_steps`` batches
    ``[N,C,r,r]``. ``loss`` is a built-in loss name; ``penalties`` are ``(kind, weight, target,
    interval)`` with kind ``gp`` (WGAN-GP, Gulrajani et al. 2017: per-sample norm over C, H, W,
    eps 1e-12 in the root), ``r1`` (0.5 * E||grad D(x)||^2; with an interval k > 1 a D step of its
    own every k iterations with weight k, the optimizers built with StyleGAN2's k/(k+1) correction)
    or ``drift`` (E[D(x)^2] on the real logits already computed). Same RNG draws, in the same
    order, as the engine's ``d-then-g``: z for the fakes, the GP weights, then z for the G step.
    """
    # Deliberately one flat function: it is the reference loop as a practitioner writes it, with no
    # gankit abstraction between the reader and the math it times.
    d_loss_fn, g_loss_fn = _hand_d_loss(loss), _hand_g_loss(loss)
    if d_loss_fn is None:
        raise GankitError(f"bench: no hand-written version of loss {loss!r}")
    autocast = autocast or contextlib.nullcontext
    scale = (lambda t: scaler.scale(t)) if scaler is not None else (lambda t: t)
    d_params = list(D.parameters())
    count = {"it": 0}

    def input_grad(x):
        x = x.detach().float().requires_grad_(True)
        with autocast():
            out = D(x).float().sum()
        (g,) = torch.autograd.grad(scale(out), x, create_graph=True)
        g = g.float()
        g = g / scaler.get_scale() if scaler is not None else g
        return g + out * 0  # stylegan2-ada-pytorch's real_logits * 0: D's last bias in the graph, grad 0

    def step(reals):
        n = reals[0].shape[0]
        for real in reals:
            with torch.no_grad(), autocast():
                fake = G(torch.randn(n, latent_dim, device=device))
            opt_D.zero_grad(set_to_none=True)
            with autocast():
                real_logits, fake_logits = D(real).float(), D(fake).float()
            d_loss = d_loss_fn(real_logits, fake_logits)
            total = d_loss
            for kind, weight, target, interval in penalties:
                if kind == "gp":
                    eps = torch.rand(n, *([1] * (real.dim() - 1)), device=device)
                    g = input_grad(torch.lerp(fake.float(), real.float(), eps))
                    norm = (g.flatten(1).square().sum(1) + 1e-12).sqrt()
                    total = total + weight * (norm - target).square().mean()
                elif kind == "r1" and interval == 1:
                    g = input_grad(real)
                    total = total + weight * 0.5 * g.flatten(1).square().sum(1).mean()
                elif kind == "drift":
                    total = total + weight * real_logits.square().mean()
            scale(total).backward()
            (scaler.step if scaler is not None else lambda o: o.step())(opt_D)
        opt_G.zero_grad(set_to_none=True)
        for p in d_params:  # D frozen: the G backward computes no D weight gradients
            p.requires_grad_(False)
        with autocast():
            g_loss = g_loss_fn(D(G(torch.randn(n, latent_dim, device=device))).float())
        scale(g_loss).backward()
        for p in d_params:
            p.requires_grad_(True)
        (scaler.step if scaler is not None else lambda o: o.step())(opt_G)
        for kind, weight, _, interval in penalties:
            if kind == "r1" and interval > 1 and count["it"] % interval == 0:  # lazy R1 (StyleGAN2 sec. 3.1)
                opt_D.zero_grad(set_to_none=True)
                g = input_grad(reals[-1])
                scale(weight * interval * 0.5 * g.flatten(1).square().sum(1).mean()).backward()
                (scaler.step if scaler is not None else lambda o: o.step())(opt_D)
        count["it"] += 1
        if scaler is not None:
            scaler.update()
        return d_loss.item(), g_loss.item()

    return step


def _hand_row(run, phase) -> tuple[BenchRow | None, str]:
    if run.num_classes:
        return None, "no hand-written version of a class-conditional run"
    loss = run.recipe.loss.name
    if _hand_d_loss(loss) is None:
        return None, f"no hand-written version of loss {loss!r}"
    penalties, note = _hand_penalties(run)
    if note:
        return None, note
    G, D = _copies(run, phase)
    o = run.recipe.optim
    lazy = [interval for kind, _, _, interval in penalties if interval > 1]
    ratio = lazy[0] / (lazy[0] + 1) if lazy else 1.0  # StyleGAN2's lazy-regularisation correction of D's Adam
    lr_G, lr_D = run.optimizers.g_lr * phase.lr_scale, run.optimizers.d_lr * phase.lr_scale * ratio
    if o.name == "sgd":
        opt_G, opt_D = torch.optim.SGD(G.parameters(), lr=lr_G), torch.optim.SGD(D.parameters(), lr=lr_D)
    else:
        kw = {"fused": True} if run.device.type == "cuda" else {}
        opt_G = torch.optim.Adam(G.parameters(), lr=lr_G, betas=o.betas, eps=o.eps, **kw)
        opt_D = torch.optim.Adam(D.parameters(), lr=lr_D, betas=(o.betas[0] ** ratio, o.betas[1] ** ratio),
                                 eps=o.eps, **kw)
    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(run.precision)
    if dtype is not None and (run.device.type == "cuda" or dtype is torch.bfloat16):
        autocast = functools.partial(torch.autocast, run.device.type, dtype=dtype)
    else:
        autocast = None
    scaler = torch.amp.GradScaler(run.device.type) if run.precision == "fp16" else None
    step = hand_written_step(G, D, opt_G, opt_D, latent_dim=run.latent_dim, loss=loss, penalties=penalties,
                             device=run.device, autocast=autocast, scaler=scaler)
    return BenchRow(REFERENCE, step, (G, D)), ""


# ------------------------------------------------------------------------------ measuring ----


def prepare(recipe_path: str | Path, strategies: str = "all", *, overrides=(), resolution: int | None = None,
            reference: bool = True, out_dir: str | Path | None = None):
    """Build the run of ``recipe_path`` and one row per strategy (``"all"`` or comma-separated
    names) plus the hand-written row. Returns ``(run, phase, rows, note)``; raises GankitError."""
    from gan_kit.recipe import load_recipe
    from gan_kit.runs.run import build_run

    recipe, plugins = load_recipe(recipe_path, list(overrides))
    recipe = attrs.evolve(recipe, run=attrs.evolve(recipe.run, progress=False))
    run = build_run(recipe, plugins, out_dir=out_dir or os.devnull)
    names = run.registry.names("update") if strategies == "all" else [s.strip() for s in strategies.split(",") if s.strip()]
    for name in names:
        try:
            run.registry.get("update", name)
        except KeyError as e:
            raise GankitError(f"--strategies: {e.args[0]}") from None
    phase = _bench_phase(run, resolution)
    rows = [_engine_row(recipe, plugins, name, phase, run.strategy.d_steps) for name in names]
    note = ""
    if reference:
        row, note = _hand_row(run, phase)
        if row is not None:
            rows.append(row)
    return run, phase, rows, note


def _round_order(rows: list[BenchRow], i: int) -> list[BenchRow]:
    """Round ``i``'s order: the rows rotated by ``i``, with the hand-written row kept next to
    ``d-then-g`` (alternately before and after it), so the headline ratio compares runs made
    seconds apart."""
    ref, eng = next((r for r in rows if r.name == REFERENCE), None), next((r for r in rows if r.name == "d-then-g"), None)
    units = [[r] for r in rows if r is not ref]
    if ref is not None:
        if eng is None:
            units.append([ref])
        else:
            unit = next(u for u in units if u[0] is eng)
            unit[:] = [eng, ref] if i % 2 == 0 else [ref, eng]
    k = i % len(units)
    return [r for u in units[k:] + units[:k] for r in u]


def measure(run, phase, rows: list[BenchRow], *, steps: int, warmup: int, seed: int = 0,
            progress: Callable[[int, int], None] | None = None) -> None:
    """Run ``warmup + steps`` rounds; each round runs every row once on the same real batches, in
    an order rotated by one per round (``_round_order``), timing each call of the timed rounds
    (device-synchronised)."""
    d_steps = run.strategy.d_steps
    from gan_kit.base.phase import fade_real

    n = phase.batch_size
    per_round = n * d_steps
    pool = run.real_images(min(per_round * min(warmup + steps, 8), len(run.dataset)), seed=seed)
    pool = fade_real(pool, phase.resolution, 1.0).to(run.device)
    sync = torch.cuda.synchronize if run.device.type == "cuda" else (lambda: None)
    for i in range(warmup + steps):
        idx = torch.arange(i * per_round, (i + 1) * per_round) % pool.shape[0]
        batch = pool[idx.to(pool.device)]
        if run.recipe.run.channels_last:
            batch = batch.contiguous(memory_format=torch.channels_last)
        reals = [batch[j * n:(j + 1) * n] for j in range(d_steps)]
        for row in _round_order(rows, i):
            sync()
            t0 = time.perf_counter()
            row.step(reals)
            sync()
            if i >= warmup:
                row.times.append(time.perf_counter() - t0)
        if progress is not None:
            progress(i + 1, warmup + steps)


def run_bench(recipe_path, strategies: str = "all", *, steps: int = 20, warmup: int = 3, overrides=(),
              resolution: int | None = None, reference: bool = True, progress=None) -> BenchResult:
    """``prepare`` + ``measure``: the timings of every row on ``recipe_path``."""
    run, phase, rows, note = prepare(recipe_path, strategies, overrides=overrides, resolution=resolution,
                                     reference=reference)
    measure(run, phase, rows, steps=steps, warmup=warmup, progress=progress)
    return BenchResult(recipe=Path(recipe_path), device=run.device, precision=run.precision,
                       resolution=phase.resolution, batch_size=phase.batch_size, d_steps=run.strategy.d_steps,
                       steps=steps, warmup=warmup, rows=rows, reference_note=note)


def result_table(result: BenchResult):
    """A rich Table: best and median ms/step, images/s at the best time, throughput vs hand-written."""
    from rich.table import Table

    ref = result.row(REFERENCE)
    table = Table(title=f"{result.recipe}: {result.resolution}px, batch {result.batch_size} x d_steps "
                        f"{result.d_steps}, {result.device} {result.precision}, {result.steps} timed steps")
    for col in ("strategy", "best ms/step", "median ms/step", "images/s", "throughput vs hand-written"):
        table.add_column(col, justify="left" if col == "strategy" else "right")
    for row in result.rows:
        rel = f"{result.relative(row):.2f}" if ref is not None else "-"
        table.add_row(row.name, f"{row.best_s * 1e3:.1f}", f"{row.median_s * 1e3:.1f}",
                      f"{result.images_per_s(row):.0f}", rel)
    return table


def operator_table(prof, iterations: int, top: int, per: str) -> tuple[float, list[str]]:
    """What a finished ``torch.profiler.profile`` ``prof`` of ``iterations`` repeats (a batch, an
    iteration: ``per``) spent: the total self CPU milliseconds per repeat, and a markdown table of
    its ``top`` operators by self CPU time (calls, ms per repeat, share), as benchmarks/ print them."""
    events = [e for e in prof.key_averages() if e.self_cpu_time_total > 0]
    total = sum(e.self_cpu_time_total for e in events)
    events.sort(key=lambda e: e.self_cpu_time_total, reverse=True)
    lines = [f"| operator | calls / {per} | self CPU ms / {per} | share |", "|---|---|---|---|"]
    lines += [f"| {e.key} | {e.count / iterations:.0f} | {e.self_cpu_time_total / 1e3 / iterations:.2f} | "
              f"{e.self_cpu_time_total / total:.0%} |" for e in events[:top]]
    return total / 1e3 / iterations, lines
