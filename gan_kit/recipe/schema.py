"""The recipe schema: the core tables ``[run]``, ``[optim]``, ``[ema]``, the slot keys every
component table of a kind shares, which table holds which component kind, and the validated
``Recipe`` itself.

Numeric ranges are declared on the fields (``option(min=..., max=...)``) and checked by
``gan_kit.recipe.validate`` when a recipe is loaded.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Literal

import attrs

from gan_kit.base.options import option

__all__ = ["RunOptions", "OptimOptions", "EmaOptions", "DataSlot", "PenaltySlot", "MetricSlot",
           "COMPONENT_TABLES", "CORE_TABLES", "TOP_LEVEL", "ComponentSpec", "Recipe", "SEED_MAX", "KIMG_MAX"]

#: Seeds are < 2**32: numpy's legacy seeding takes 0 <= seed < 2**32, and the data order seeds a
#: torch generator with seed * 1_000_003 + epoch, which must stay below 2**64.
SEED_MAX = 2**32

#: kimg values are turned into image counts (kimg * 1000, an integer): 1e9 kimg (10**12 images)
#: is beyond any run and keeps them far from float overflow.
KIMG_MAX = 1e9


def _device(v):
    if re.fullmatch(r"auto|cpu|cuda(:\d+)?|mps", v):
        return None
    return f'unknown device {v!r} (use "auto", "cpu", "cuda" or "cuda:N")'


def _power_of_two(v):
    if v >= 4 and not v & (v - 1):
        return None
    lower = max(4, 1 << max(2, v.bit_length() - 1))
    return f"must be a power of two >= 4, got {v} (try {lower} or {lower * 2})"


@attrs.frozen
class RunOptions:
    """The ``[run]`` table: length, place and precision of training."""

    seed: int = option(0, help="Seed of every random number generator (torch, numpy, python); below 2**32, "
                               "the range numpy's seeding and the data order's torch generator accept.",
                       min=0, max=SEED_MAX, max_exclusive=True, hint="e.g. seed = 0")
    device: str = option("auto", help='"auto" (CUDA when present, else CPU), "cpu", "cuda" or "cuda:N".',
                         validator=_device)
    precision: Literal["auto", "fp32", "bf16", "fp16"] = option(
        "auto", help='"auto" = bf16 autocast on CUDA, fp32 on the CPU (bf16 there too with cpu_bf16 = true on a CPU '
                    'with native bf16); "fp16" adds a GradScaler.')
    cpu_bf16: bool = option(
        False, help='With precision = "auto": bf16 autocast on a CPU with native bf16 instructions (AVX512-BF16 or '
                    "AMX-BF16; fp32 on other CPUs, where bf16 is emulated and no faster). Set it in a recipe whose "
                    "quality was measured to hold in bf16 (the main recipe: docs/performance.md, 'bf16 on the CPU'); "
                    "bf16 changes the math, so runs compared to the last digit want fp32.")
    out_dir: str = option("runs/gankit", help="Run directory (relative to the working directory).")
    total_kimg: float = option(100.0, help="Length of training in thousands of real images shown.",
                               min=0, min_exclusive=True, max=KIMG_MAX)
    max_minutes: float | None = option(
        None, help="A wall-clock budget: stop after this many minutes in the training loop (its ticks' metrics, "
                   "grids and checkpoints count; summed over resumes and saved in checkpoints), then end as if "
                   "total_kimg were reached: the final tick, metrics, grid and checkpoint. A tick due less than "
                   "half a tick before the limit runs on to it, so the final tick is never a step or two. None = "
                   "no time limit (gankit sweep --budget-minutes sets it).",
        min=0, min_exclusive=True, max=KIMG_MAX, hint="e.g. max_minutes = 3; \"none\" = no limit")
    tick_kimg: float = option(1.0, help="Reporting interval in kimg: metrics.jsonl line, progress, samples.",
                              min=0, min_exclusive=True, max=KIMG_MAX)
    snapshot_ticks: int = option(10, help="Write the latest checkpoint every this many ticks (0 = only at "
                                          "phase ends and the end).", min=0)
    keep_snapshots: int = option(0, help="Besides latest.pt, keep the last this many snapshots as "
                                         "snapshot-<kimg>.pt (0 = none).", min=0)
    keep_every_ticks: int = option(0, help="Besides latest.pt, keep the snapshot of every tick that is a multiple "
                                           "of this forever (0 = none).", min=0)
    sample_ticks: int = option(1, help="Write a sample grid every this many ticks (0 = only at phase ends and "
                                       "the end).", min=0)
    sample_G: bool = option(False, help="Also write grids from the raw G (samples/G-tick-NNNN.png) next to "
                                        "G_ema's.")
    sample_grid: int = option(64, help="Images in each sample grid from G_ema (a fixed latent batch).",
                              min=1, max=4096, hint="e.g. sample_grid = 64 (an 8x8 grid)")
    on_nonfinite: Literal["stop", "skip"] = option(
        "stop", help='A NaN/inf loss: "stop" with a message (last checkpoint untouched) or "skip" the step.')
    max_skipped: int = option(100, help='With on_nonfinite = "skip": stop after this many steps skipped for '
                                        "non-finite values (the fp16 GradScaler's overflow skips do not count).",
                              min=0)
    num_workers: int | Literal["auto"] = option(
        "auto", help='Data-loader worker processes (0 = load in the main process). "auto": 0 on the CPU (training '
                     "takes every core) and for data held in memory, and on CUDA for data decoded per batch (cache = "
                     "\"none\", a large folder or zip) the cores left per process after the main one, 1 to 8.",
        min=0, max=1024, hint='e.g. num_workers = 4; 0 loads in the main process; "auto" chooses by device')
    compile: bool = option(False, help="torch.compile G's and D's training forwards: about two graphs per network per "
                                       "growth phase (trained, and frozen / no-grad), compiled on the phase's first "
                                       "step; dynamo's recompile limit is raised to fit the phase plan. Penalties "
                                       "(double backward) run eager.")
    tf32: bool = option(True, help="Allow TF32 matmul/convolution on CUDA (Ampere and newer).")
    cudnn_benchmark: bool = option(True, help="Let cuDNN pick the fastest convolution algorithms (CUDA).")
    compile_backend: str = option("inductor", help='torch.compile backend ("inductor"; "aot_eager" traces '
                                                   "without generating code, for checks).")
    channels_last: bool = option(False, help="Use the channels_last memory format for images and weights.")
    retain_cpu_memory: bool = option(
        True, help="CPU runs on Linux (glibc): keep freed tensor memory in the process instead of unmapping it "
                   "and page-faulting it back every iteration (mallopt; same numbers, ~6% faster at 32x32; RSS "
                   "stays near its peak).")
    grad_sync: Literal["ddp", "all-reduce"] = option(
        "ddp", help='Several processes: "ddp" = separate DistributedDataParallel wrappers for G and D '
                    '(bucketed all-reduce overlapping the backward); "all-reduce" = one flattened '
                    "all-reduce before each optimizer step, also for strategies that set .grad themselves.")
    dist_timeout_minutes: float = option(
        30.0, help="Several processes: how long the process-group set-up and each collective (all-reduce, barrier) "
                   "wait for the other processes before failing (init_process_group's timeout; the rendezvous "
                   "join_timeout under --nproc; NCCL's own default is 10 minutes). A lost peer then ends the job - "
                   "and torchrun --max-restarts can restart it - instead of hanging it; rank 0 writing a large "
                   "checkpoint, or a process that finishes its share of a metric's images first, keeps the others "
                   "waiting that long at most.", min=0, min_exclusive=True, max=10080)
    progress: bool = option(True, help="Show the rich progress bar.")
    threads: int | None = option(
        None, help="torch intra-op CPU threads (torch.set_num_threads); None = as many as the cores idle when a CPU "
                   "run starts (or OMP_NUM_THREADS when set; see docs/performance.md, CPU threads).", min=1, max=1024)


@attrs.frozen
class OptimOptions:
    """The ``[optim]`` table: one optimizer each for G and D (Adam: Kingma & Ba 2015, algorithm 1)."""

    name: Literal["adam", "sgd"] = option("adam", help='"adam" (PGGAN: betas (0, 0.99)) or plain "sgd".')
    lr: float = option(0.001, help="Base learning rate of G and D (scaled per phase by the growth schedule).",
                       min=0, min_exclusive=True, max=10, schedulable=True)
    betas: tuple[float, float] = option((0.0, 0.99), help="Adam's (beta1, beta2), each a decay rate.",
                                        min=0, max=1, max_exclusive=True,
                                        hint=("Adam's beta1, e.g. 0.0 as in PGGAN", "Adam's beta2, e.g. 0.99"),
                                        schedulable=True)
    eps: float = option(1e-8, help="Adam's epsilon.", min=0, min_exclusive=True, max=1, schedulable=True)
    # Learning rates above 10 diverge at the first step; far above, Adam's step size overflows float32.
    g_lr: float | None = option(None, help="G's learning rate (TTUR); None = lr.", min=0, min_exclusive=True, max=10,
                                schedulable=True)
    d_lr: float | None = option(None, help="D's learning rate (TTUR); None = lr.", min=0, min_exclusive=True, max=10,
                                schedulable=True)


@attrs.frozen
class EmaOptions:
    """The ``[ema]`` table: the exponential moving average G_ema of G's weights."""

    decay: float | None = option(
        None, help="A fixed per-step decay beta: G_ema = beta * G_ema + (1 - beta) * G (PGGAN: 0.999). None = "
                   "the half-life rule below, which suits runs of any length.",
        min=0, max=1, hint='0.999 is PGGAN\'s; 0 copies G every step; "none" = the half-life rule', schedulable=True)
    half_life_kimg: float = option(
        10.0, help="Without decay: beta = 0.5 ** (batch / (half_life_kimg * 1000)) per step (StyleGAN2-ADA).",
        min=0, min_exclusive=True, max=KIMG_MAX, hint="e.g. half_life_kimg = 10", schedulable=True)
    rampup: float | None = option(
        0.05, help="Without decay: half-life = min(half_life, cur_nimg * rampup) early on, so G_ema does not hold "
                   "the random initial weights of a short run (StyleGAN2-ADA's 0.05); None = no ramp-up.",
        min=0, hint='e.g. rampup = 0.05; "none" = no ramp-up', schedulable=True)


@attrs.frozen
class DataSlot:
    resolution: int = option(32, help="Final image side in pixels (a power of two, >= 4).",
                             validator=_power_of_two, max=16384, hint="e.g. resolution = 256")
    metric_reals: Literal["train", "full"] = option(
        "train", help='Where metrics draw their real images: "train" = the training set; "full" = the same data set '
                      "without its max_images subset, so a limited-data run (data.max_images) is measured against the "
                      "whole distribution it samples rather than the few images D may have memorised.")
    upscale: Literal["warn", "allow"] = option(
        "warn", help='Images smaller than data.resolution are upscaled (G then learns interpolated pixels): "warn" says '
                     'so once, naming the interpolation; "allow" says it is meant (any data set; silences the warning).')


@attrs.frozen
class ArchitectureSlot:
    spectral_norm: Literal["none", "D", "G", "both"] = option(
        "none", help="Spectral normalisation (Miyato et al. 2018) of every conv / linear weight of D, G or both: "
                     "W / sigma(W), sigma estimated by one power iteration per training forward "
                     "(torch.nn.utils.parametrizations.spectral_norm).")
    conditional: bool = option(
        False, help="Class-conditional G and D on the data set's labels: G takes a learned class embedding with z, "
                    "D is a projection discriminator (Miyato & Koyama 2018). Needs a data set with labels and an "
                    "architecture that supports it (pggan, dcgan, stylegan2, r3gan, sngan-resnet, sagan, "
                    "biggan: these three condition G's batch norms on the class, cBN).")
    freeze_d_blocks: int = option(
        0, help="FreezeD (Mo et al. 2020): freeze D's first N blocks from the input side (requires_grad False: "
                "never stepped), for fine-tuning with --init-from; 0 = train all of D. Architectures that say "
                "which blocks D has: pggan, stylegan2, r3gan, sngan-resnet, sagan, biggan.", min=0, max=64)


@attrs.frozen
class PenaltySlot:
    weight: float = option(1.0, help="Multiplier of this penalty in the D objective.", min=0, schedulable=True)


@attrs.frozen
class MetricSlot:
    every_kimg: float | None = option(None, help="Evaluate every this many kimg (None = at the end only).",
                                      min=0, min_exclusive=True, max=KIMG_MAX)


#: Component tables: recipe key -> (component kind, is an array of tables, default name, slot).
COMPONENT_TABLES: dict[str, tuple[str, bool, str | None, type | None]] = {
    "data": ("dataset", False, "digits", DataSlot),
    "architecture": ("architecture", False, "pggan", ArchitectureSlot),
    "init": ("init", False, "equalized-lr", None),
    "loss": ("loss", False, "hinge", None),
    "penalty": ("penalty", True, None, PenaltySlot),
    "update": ("update", False, "d-then-g", None),
    "growth": ("growth", False, "progressive", None),
    "metric": ("metric", True, None, MetricSlot),
    "augment": ("augment", False, "none", None),
    "tracker": ("tracker", True, None, None),
}
CORE_TABLES = {"run": RunOptions, "optim": OptimOptions, "ema": EmaOptions}
TOP_LEVEL = ["extends", "plugins", "disable_plugins", *CORE_TABLES, *COMPONENT_TABLES]


@attrs.frozen
class ComponentSpec:
    """A component chosen in a recipe: its kind, name, parsed options and slot keys
    (``weight`` of a penalty, ``every_kimg`` of a metric, ``resolution`` of the data)."""

    kind: str
    name: str
    options: Any
    key: str
    slot: Any = None


@attrs.frozen
class Recipe:
    """A fully validated recipe. ``raw`` is the merged TOML table after ``extends`` and ``--set``.

    ``cli_keys`` holds the dotted keys given with ``--set`` (array items by number, e.g.
    ``"penalty.0.weight"``); ``from_cli(key)`` tells whether a key's value was typed on the
    command line, so relative paths in it resolve against the working directory, not the
    recipe's folder.
    """

    path: Path
    plugins: tuple[str, ...]
    run: RunOptions
    optim: OptimOptions
    ema: EmaOptions
    data: ComponentSpec
    architecture: ComponentSpec
    init: ComponentSpec
    loss: ComponentSpec
    penalties: tuple[ComponentSpec, ...]
    update: ComponentSpec
    growth: ComponentSpec
    metrics: tuple[ComponentSpec, ...]
    augment: ComponentSpec
    raw: dict = attrs.field(eq=False, repr=False)
    disable_plugins: tuple[str, ...] = ()
    #: ``[[tracker]]``: the experiment trackers the run reports to (none by default).
    trackers: tuple[ComponentSpec, ...] = ()
    cli_keys: frozenset[str] = attrs.field(default=frozenset(), eq=False, repr=False)
    #: The options that follow a schedule: one ``ComponentSpec`` (kind ``schedule``) each, whose
    #: ``key`` is the dotted option it drives (``"optim.lr"``, ``"optim.betas[1]"``,
    #: ``"penalty[0].weight"``, ``"augment.p"``). The option itself holds the schedule's value at
    #: 0 images.
    schedules: tuple[ComponentSpec, ...] = ()
    #: Relative path options as written (dotted key -> value) before they were made absolute
    #: (``option(path=True)``), for messages that name both.
    written_paths: dict = attrs.field(factory=dict, eq=False, repr=False)

    @property
    def resolution(self) -> int:
        return self.data.slot.resolution

    def from_cli(self, key: str) -> bool:
        """True if ``key`` (dotted, e.g. ``"data.path"``) or a table above it was set with ``--set``."""
        parts = key.replace("[", ".").replace("]", "").split(".")
        return any(".".join(parts[:n]) in self.cli_keys for n in range(1, len(parts) + 1))
