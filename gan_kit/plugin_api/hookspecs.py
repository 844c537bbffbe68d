"""Every gankit hook specification.

A plugin is any module or object whose functions are decorated with ``gan_kit.hookimpl`` and
named after one of the specs below. Built-in plugins (``gan_kit.builtin.*``) use exactly the same
hooks as third-party ones loaded from the ``gankit`` entry-point group or from a recipe's
``plugins = [...]`` list. A function named like a hook that does not exist here is an error at
load time (``PluginManager.check_pending``).

Registration hooks are called once, when the plugin manager is built. Each receives a
``register(name, factory)`` callback; the registry records which plugin made each call so
``gankit list-plugins`` can show provenance. ``factory`` is a class with a nested frozen attrs
``Options`` class (its fields are the recipe keys of that component) and is called as
``factory(options, context)``; see ``gan_kit.plugin_api.components`` for the contract of each kind.

Lifecycle hooks are plain events: every plugin implementing one is called, in pluggy's order
(``@hookimpl(tryfirst=True)`` / ``trylast=True`` move an implementation to the front or the back).
Within a run they fire in this order::

    run_started
    phase_started                      (the first phase)
    for every iteration:
        [phase_started]                when the growth schedule enters a new phase (before its step)
        step_finished
        [tick_finished]                every run.tick_kimg; checkpoint_saved inside, when it saves
    tick_finished                      (the final tick, Progress/final = True)
    run_finished                       (only when run.total_kimg was reached)
    run_teardown                       ALWAYS, from a ``finally``: success, error or interrupt
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable, Mapping

import pluggy

if TYPE_CHECKING:  # pragma: no cover - typing only
    from pathlib import Path

    import click

    from gan_kit.runs.run import Run
    from gan_kit.base.phase import Phase

hookspec = pluggy.HookspecMarker("gankit")

#: Decorator marking a plugin's hook implementations (re-exported as ``gan_kit.hookimpl``).
hookimpl = pluggy.HookimplMarker("gankit")

#: The type of the callback given to every registration hook.
Register = Callable[[str, type], None]


# --------------------------------------------------------------------------------------------
# Registration hooks: components
# --------------------------------------------------------------------------------------------


@hookspec
def register_losses(register: Register) -> None:
    """Register adversarial losses (kind ``loss``).

    A loss class provides ``d_loss(real_logits[N], fake_logits[N]) -> scalar`` and
    ``g_loss(fake_logits[N], real_logits=None) -> scalar``, computed from raw logits.
    Example: ``register("hinge", HingeLoss)``.
    """


@hookspec
def register_penalties(register: Register) -> None:
    """Register regularisers of D or G (kind ``penalty``).

    A penalty instance is called as ``penalty(inputs, ctx) -> scalar`` (unweighted): ``inputs``
    is a ``gan_kit.DInputs`` (``D``, ``real``, ``fake``, and the D objective's ``real_logits`` /
    ``fake_logits``) for a D penalty, a ``gan_kit.GInputs`` for a G penalty (class attribute
    ``network = "G"``); ``ctx`` is the ``StepContext``. The engine adds ``weight * value`` to
    that network's objective, or runs it lazily every ``interval`` iterations.
    Example: ``register("r1", R1)``.
    """


@hookspec
def register_update_strategies(register: Register) -> None:
    """Register update strategies (kind ``update``).

    A strategy's ``step(ctx: StepContext) -> dict[str, Tensor | float]`` decides the order of the
    forwards, backwards and optimizer steps of one training iteration, through the context's verbs
    (``ctx.zero_grad``, ``ctx.backward``, ``ctx.opt_step``, ``ctx.frozen``, ``ctx.d_objective``,
    ``ctx.g_objective``), which own precision, gradient sync and the non-finite policy.
    Example: ``register("d-then-g", DThenG)``.
    """


@hookspec
def register_growth_schedulers(register: Register) -> None:
    """Register growth schedulers (kind ``growth``).

    A scheduler's ``phase_at(cur_nimg: int) -> Phase`` is a pure function of the number of real
    images shown. Example: ``register("progressive", ProgressiveGrowth)``.
    """


@hookspec
def register_initializers(register: Register) -> None:
    """Register weight initializers (kind ``init``).

    An initializer's ``apply(module: torch.nn.Module) -> None`` initialises every convolution
    and linear layer in place. Example: ``register("equalized-lr", EqualizedLR)``.
    """


@hookspec
def register_architectures(register: Register) -> None:
    """Register architectures (kind ``architecture``).

    An architecture's ``build(resolution: int, channels: int) -> (G, D)`` returns the generator
    and discriminator for the final resolution, and ``latent_dim`` gives the size of z. Growing
    networks mix in ``gan_kit.Growable``. ``d_blocks(D)`` lists D's blocks from the input side
    (FreezeD); ``owns_init`` says the networks initialise themselves. Example:
    ``register("pggan", PGGAN)``.
    """


@hookspec
def register_datasets(register: Register) -> None:
    """Register datasets (kind ``dataset``; the recipe table is ``[data]``).

    A dataset factory's ``build(resolution: int) -> torch.utils.data.Dataset`` returns float
    images in [-1, 1] of shape [C, H, W] at the final resolution (labels, if any, are dropped).
    Example: ``register("digits", Digits)``.
    """


@hookspec
def register_metrics(register: Register) -> None:
    """Register evaluation metrics (kind ``metric``).

    A metric's ``compute(generate, reals, device) -> dict[str, float]`` compares images from
    ``generate(n) -> Tensor[n,C,H,W]`` against real images. Example: ``register("swd", SWD)``.
    """


@hookspec
def register_augmentations(register: Register) -> None:
    """Register differentiable augmentations of D's inputs (kind ``augment``, recipe ``[augment]``).

    An ``gan_kit.Augment`` is called as ``augment(images[N,C,H,W]) -> images`` on every image D
    sees (reals and fakes, every strategy and penalty), gets ``feedback(real_logits)`` after every
    D objective and ``end_step(step, nimg) -> stats`` after every iteration (``nimg``: real images
    shown that iteration, all processes, every critic step counted). ``reals_for_d(real, fake) ->
    real`` (optional) chooses the batch each D objective treats as real (APA's pseudo-reals).
    Example: ``register("diffaugment", DiffAugment)``.
    """


@hookspec
def register_trackers(register: Register) -> None:
    """Register experiment trackers (kind ``tracker``, recipe ``[[tracker]]``).

    A ``gan_kit.Tracker`` receives, on rank 0, ``start(params, run_dir, resume_id) -> run id``,
    ``log_metrics(metrics, step)`` at every tick, ``log_artifact(path, folder)`` for sample grids
    (and checkpoints when asked) and ``finish(status)`` with "FINISHED", "FAILED" or "KILLED".
    Example: ``register("mlflow", MLflowTracker)``.
    """


@hookspec
def register_schedules(register: Register) -> None:
    """Register schedule shapes (kind ``schedule``): how a numeric option changes over training.

    A ``gan_kit.Schedule``'s ``value(nimg: int, total_nimg: int) -> float`` is a pure function of
    the real images shown and the run's planned length. A recipe chooses one in place of a
    constant of any schedulable option: ``lr = { schedule = "cosine", start = 0.002, end = 0.0002 }``.
    Example: ``register("cosine", Cosine)``.
    """


@hookspec
def register_distances(register: Register) -> None:
    """Register image distances (kind ``distance``; ``gankit project --distance NAME``, options
    with ``--set-distance KEY=VALUE``).

    A ``gan_kit.Distance``'s ``distance(a[N,C,H,W], b[N,C,H,W]) -> Tensor[N]`` compares images
    in [-1, 1] one by one: >= 0, zero for identical images, differentiable (the projector
    minimises it over W). Example: ``register("pixel-multiscale", PixelMultiscale)``.
    """


@hookspec
def register_importers(register: Register) -> None:
    """Register readers of other codebases' trained-model files (kind ``importer``; ``gankit
    import FILE``, and every command that takes a checkpoint takes such a file too).

    A ``gan_kit.Importer``'s ``read(source: gan_kit.ForeignFile) -> gan_kit.ImportedModel |
    None`` turns a file it recognises into gankit networks (state dicts in gankit's names and
    the recipe that builds them) and returns None for a file that is not its format; it never
    runs code the file holds (``source.pickle()`` reads a pickle safely). Importers are asked in
    the order registered; the first answer wins. Example: ``register("stylegan2-ada-pytorch",
    StyleGAN2ADAImporter)``.
    """


@hookspec
def register_backbones(register: Register) -> None:
    """Register feature networks of the feature metrics (kind ``backbone``; a metric's
    ``feature_extractor = "NAME"`` picks one, ``gankit list-plugins --kind backbone`` lists them).

    A ``gan_kit.Backbone`` declares its weights file (``weights_file``, ``weights_source``), its
    input side (``input_size``), its default resize mode (``resize``), its normalisation, its
    feature size (``feature_dim``, ``logits_dim``) and ``build(path) -> nn.Module``, which makes
    the network from the local file; gankit never downloads it. Example: ``register("my-dino",
    MyDino)``.
    """


@hookspec
def register_commands(cli: "click.Group") -> None:
    """Add click commands to the ``gankit`` command group.

    Example: ``cli.add_command(my_command)``.
    """


# --------------------------------------------------------------------------------------------
# Lifecycle hooks: events of a training run
# --------------------------------------------------------------------------------------------


@hookspec
def run_started(run: "Run") -> None:
    """Called once after every component is built (and a checkpoint restored on resume),
    before the first training step."""


@hookspec
def phase_started(run: "Run", phase: "Phase") -> None:
    """Called when training enters a new growth phase (also for the first phase of a run and
    of a resumed run). ``run.previous_phase`` is the phase that just ended, or None."""


@hookspec
def step_finished(run: "Run", stats: Mapping[str, float]) -> None:
    """Called after every training iteration with that iteration's stats, a read-only mapping of
    floats (slash-path names such as ``Loss/D``, ``Loss/G``, ``Loss/D/gradient-penalty``; this
    process's values - the tick's are averaged over processes). The values stay on the device
    until first read: reading them costs one host-device sync for the iteration (the engine
    itself reads them at the tick), so a hook on the hot path reads them rarely or not at all
    (the progress bar: twice a second). A non-finite gradient that the device skipped shows as
    ``Grad/G`` / ``Grad/D`` = NaN."""


@hookspec
def tick_finished(run: "Run", stats: Mapping[str, Any]) -> None:
    """Called every ``run.tick_kimg`` thousand images with the tick's averaged stats plus
    ``Progress/kimg``, ``Progress/phase``, ``Progress/resolution``, ``Progress/alpha`` and
    ``Timing/img_per_s``. Plugins may add entries to ``stats`` (metrics do) before reporters
    read it: the metric plugin runs first (``tryfirst``)."""


@hookspec
def checkpoint_saved(run: "Run", path: "Path") -> None:
    """Called after a checkpoint file has been written atomically to ``path``."""


@hookspec
def run_finished(run: "Run", stats: Mapping[str, Any]) -> None:
    """Called once when training reaches ``run.total_kimg``, or ends early because
    ``run.max_minutes`` of training time are spent (``run.cur_nimg < run.total_nimg`` then), with
    the final tick's stats."""


@hookspec
def run_teardown(run: "Run", error: BaseException | None) -> None:
    """Called once when ``train`` returns or raises - from a ``finally``, so also after an error,
    an interrupt or ``max_steps`` - to close what ``run_started`` opened (progress bars, writers,
    files). ``error`` is the exception that ends the run, or None. pytest's
    ``pytest_sessionfinish`` is the model. Must not raise."""
