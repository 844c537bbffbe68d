"""Base classes and contracts of every component kind, and the per-step context.

Plugins subclass these (or just follow the same duck-typed contract) and register the class
through the matching hook. Each class declares a nested frozen attrs ``Options`` class; the
engine instantiates it as ``Factory(options, context)``.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any, Callable, ClassVar, Iterable, Literal, Mapping, Protocol, runtime_checkable

import attrs
import torch
from torch import nn

from gan_kit.base.phase import Phase

if TYPE_CHECKING:  # pragma: no cover
    from pathlib import Path

    from gan_kit.training.step import StepContext

__all__ = [
    "BuildContext",
    "ComponentBase",
    "Loss",
    "Penalty",
    "WeightedPenalty",
    "UpdateStrategy",
    "GrowthScheduler",
    "Initializer",
    "Architecture",
    "StyleGenerator",
    "NOISE_MODES",
    "DatasetFactory",
    "Metric",
    "Augment",
    "Tracker",
    "Distance",
    "Importer",
    "AugmentedD",
    "Growable",
    "set_phase",
    "DInputs",
    "GInputs",
    "LabelBound",
    "bind_labels",
]


@attrs.frozen
class BuildContext:
    """What a component may know about the run when it is built.

    resolution: final image side in pixels (``data.resolution``).
    channels:   image channels (1 for digits), known once the dataset is built (0 before).
    recipe:     the whole resolved ``Recipe`` (read-only), or None in unit tests.
    num_classes: classes of a class-conditional run, else 0.
    """

    resolution: int = 32
    channels: int = 0
    recipe: Any = None
    num_classes: int = 0


class ComponentBase:
    """Stores ``options`` and ``context``; subclasses declare ``Options``."""

    @attrs.frozen
    class Options:
        pass

    def __init__(self, options: Any = None, context: BuildContext | None = None):
        self.options = options if options is not None else type(self).Options()
        self.context = context if context is not None else BuildContext()

    @classmethod
    def problems(cls, options: Any, recipe: Any) -> Iterable[tuple[str, str]]:
        """Cross-option problems found at recipe load: ``(key, message)`` pairs, ``key`` relative
        to the component's table. Checked together with every other problem of the recipe."""
        return ()

    @classmethod
    def resolved_options(cls, options: Any, recipe: Any) -> Any:
        """``options`` with each value the component works out from the recipe (an ``"auto"``, a
        None that stands for another key's value) replaced by what it builds with: StyleGAN2's
        ``conv_clamp = "auto"`` by 256 under fp16, image-folder's ``pad_color`` by its
        ``background``. Called once when a recipe loads, after ``problems`` found none; the
        recipe then holds these values, so ``gankit recipe show``, a run's ``recipe.toml`` and
        its checkpoints record what was built, and a resume keeps it even when a key it came
        from may change (``run.precision``). Returns an instance of ``Options`` whose values are
        of the declared types (they are written to TOML and loaded again). Values chosen by the
        machine (a device, a worker count) or by the data's files stay as written. The default
        returns ``options``."""
        return options


class Loss(ComponentBase):
    """An adversarial loss computed from D's raw logits (never from a sigmoid output).

    ``d_loss(real_logits[N], fake_logits[N]) -> scalar`` is minimised by D;
    ``g_loss(fake_logits[N], real_logits=None) -> scalar`` is minimised by G.
    ``implied_penalties()`` lists ``(penalty name, weight, options dict)`` that come with the
    loss (the ``wgan-gp`` preset adds the gradient penalty and drift this way).
    A loss whose G side needs D's logits on real images (relativistic losses) sets
    ``needs_real_logits = True``; every update strategy then passes ``real_logits`` (computed on
    the iteration's last real batch, without gradient) through ``g_objective``.
    """

    needs_real_logits: bool = False

    def d_loss(self, real_logits: torch.Tensor, fake_logits: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    def g_loss(self, fake_logits: torch.Tensor, real_logits: torch.Tensor | None = None) -> torch.Tensor:
        raise NotImplementedError

    def implied_penalties(self) -> list[tuple[str, float, dict]]:
        return []


@attrs.frozen
class DInputs:
    """What a D penalty receives: the inputs and outputs of the D objective's own forwards.

    D:           the discriminator to run extra forwards through (eager, so a double backward
                 works; it applies the run's augmentation, like every D the engine hands out).
    real, fake:  ``[N,C,r,r]`` images of this D step, detached (no graph), float32 under every
                 ``run.precision``. ``fake`` is None in a lazy regularisation step (no fakes
                 are made for it).
    real_logits, fake_logits: ``[N]`` float32 logits of ``D(real)`` and ``D(fake)`` from the D
                 objective, WITH their graph to D's weights: a penalty on them (a drift term)
                 needs no forward of its own. None in a lazy regularisation step, which runs no
                 D objective.
    labels:      ``[N]`` int64 classes of ``real`` (and of ``fake``, made for the same classes) in
                 a class-conditional run, else None. ``D`` already has them bound: ``D(x)`` for
                 any ``x[N, ...]`` of this step (interpolates too) runs ``D(x, labels)``.
    real_grad, fake_grad: ``d sum(D(x)) / dx`` at ``real`` / ``fake``, ``[N,C,r,r]`` float32 with
                 the graph for a double backward, taken from the D objective's own forward (one
                 ``ctx.gradients`` call) when some penalty of the objective lists ``"real"`` /
                 ``"fake"`` in ``Penalty.input_gradients_of``; None otherwise (a lazy
                 regularisation step; ``fake_grad`` also when the strategy passed the fakes' logits
                 or fakes with a graph to G): compute it then with ``ctx.input_gradients``.
    """

    D: nn.Module
    real: torch.Tensor
    fake: torch.Tensor | None
    real_logits: torch.Tensor | None = None
    fake_logits: torch.Tensor | None = None
    labels: torch.Tensor | None = None
    real_grad: torch.Tensor | None = None
    fake_grad: torch.Tensor | None = None


@attrs.frozen
class GInputs:
    """What a G penalty receives.

    G:           the generator (eager) to run its own forwards through.
    batch_size:  this process's batch size N of the G step.
    fake:        the G step's images ``[N,C,r,r]``, float32, with their graph to G, or None (a lazy
                 regularisation step, or a strategy that did not pass them).
    fake_logits: ``[N]`` float32 logits of D on ``fake``, with their graph, or None.
    labels:      ``[N]`` classes of ``fake`` in a class-conditional run (bound to ``G``: ``G(z)``
                 runs ``G(z, labels)``), else None.
    """

    G: nn.Module
    batch_size: int
    fake: torch.Tensor | None = None
    fake_logits: torch.Tensor | None = None
    labels: torch.Tensor | None = None


class Penalty(ComponentBase):
    """A regulariser added to D's objective (``network = "D"``, the default) or G's
    (``network = "G"``): ``penalty(inputs, ctx) -> scalar``.

    ``inputs`` is a ``DInputs`` (D penalties) or ``GInputs`` (G penalties); ``ctx`` is the
    ``StepContext`` (``ctx.input_gradients``, ``ctx.gradients``, ``ctx.latent``,
    ``ctx.batch_rand``, ``ctx.autocast``). The value is unweighted: the engine multiplies it by
    the recipe's ``weight``. Gradient norms should be taken per sample over all non-batch dims,
    in float32.

    Precision: a penalty written in plain float32 PyTorch trains under every ``run.precision``.
    Under bf16 / fp16 the networks it is handed (``inputs.D``, ``inputs.G``) run their forwards
    under the run's autocast and return float32, and the images it is handed are float32, so its
    own arithmetic (and a bare ``torch.autograd.grad``) runs in float32 outside autocast, as in
    PyTorch's AMP gradient-penalty recipe. ``ctx.gradients`` / ``ctx.input_gradients`` add the
    GradScaler's scaling, without which fp16 input gradients can underflow.

    Lazy regularisation (StyleGAN2, Karras et al. 2020, sec. 3.1): a penalty whose ``interval``
    is k > 1 is not part of the objective; every k-th iteration the engine runs it as a step of
    its own (its network's gradients cleared, ``weight * k * value`` backpropagated, one
    optimizer step), and scales that network's Adam learning rate by k/(k+1) and betas to the
    power k/(k+1), as stylegan2-ada-pytorch does. ``interval`` comes from an ``interval`` option
    when the penalty declares one.

    A penalty with state (a running mean) implements ``state_dict() -> dict`` and
    ``load_state_dict(dict)``; the engine keeps it in checkpoints.
    """

    network: ClassVar[Literal["D", "G"]] = "D"

    #: The D objective's images whose input gradient ``d sum(D(x)) / dx`` this D penalty reads:
    #: ``"real"`` (R1), ``"fake"`` (R2). The objective then runs its own D forward with them
    #: requiring grad and hands the gradients in ``inputs.real_grad`` / ``inputs.fake_grad`` (one
    #: ``torch.autograd.grad`` for all its penalties), so the penalty runs no D forward of its
    #: own, as stylegan2-ada-pytorch and R3GAN take R1 from the loss's forward. The penalty must
    #: still compute the gradient itself where they are None (a lazy step).
    input_gradients_of: ClassVar[tuple[str, ...]] = ()

    @property
    def interval(self) -> int:
        """Lazy regularisation interval k (1 = part of every objective); penalties with an
        ``interval`` option return it."""
        return 1

    def attach(self, G: nn.Module, D: nn.Module) -> None:
        """Add the modules this penalty trains to G or D (``D.add_module(name, head)``: an
        auxiliary classifier's head), or keep a reference to the plain networks. Called once
        when a run is built, right after the architecture built G and D and before the recipe's
        initializer, spectral norm, the move to the run's device, the DDP / compile wrappers,
        G_ema and the optimizers: what it adds is then initialised, normalised, trained,
        averaged and checkpointed as a part of that network. Raise ``GankitError`` (one line)
        for networks it cannot work with. The default does nothing."""
        return None

    def __call__(self, inputs: Any, ctx: "StepContext") -> torch.Tensor:
        raise NotImplementedError


@attrs.define
class WeightedPenalty:
    """A penalty instance with its recipe name (the stat ``Loss/D/<name>``) and weight (set
    before every iteration when the recipe schedules it)."""

    name: str
    penalty: Penalty
    weight: float


class Augment(ComponentBase):
    """A differentiable transform of every image D sees (kind ``augment``, recipe ``[augment]``).

    The engine applies it to D's input in every forward - reals and fakes, in every strategy and
    every penalty - so no strategy or penalty has to remember it; input gradients (R1, the
    gradient penalty) are taken through it, with respect to the un-augmented images.

    ``augment(images[N,C,H,W]) -> images`` (same shape and dtype; a fresh random draw per call and
    per sample, from the global torch RNG so checkpoints make resume exact; per-sample draws
    through ``gan_kit.batch_rand`` / ``batch_randn`` / ``batch_randint``, so that N processes
    draw for the global batch and each keeps its slice, as one process would);
    ``feedback(real_logits[N])`` after every D objective, once its D step is applied (detached logits on
    the augmented reals; NaN where the fp16 GradScaler skipped the step: count only the others);
    ``end_step(step, nimg) -> dict`` after every iteration: ``step`` iterations done, ``nimg`` the
    real images that iteration showed D (all processes, every critic step counted: the phase's
    global batch x ``update.d_steps``); returns stats such as ``Augment/p``;
    ``state_dict()`` / ``load_state_dict(state)`` for what must survive a resume.

    ``reals_for_d(real[N,C,H,W], fake[N,C,H,W]) -> real'[N,C,H,W]``: the batch D's objective
    treats as real, given this D step's real batch and its fakes (detached, made for the same
    classes). The default returns ``real``; APA (Jiang et al. 2021) returns some fakes in place
    of reals. The engine calls it in every D objective before D's forwards, so the D loss, the
    penalties (R1 then regularises the pseudo-reals too, as in APA's code) and ``feedback`` see
    the mixed batch; a lazy regularisation step, which makes no fakes, does not call it.
    """

    def __call__(self, images: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    def reals_for_d(self, real: torch.Tensor, fake: torch.Tensor) -> torch.Tensor:
        return real

    def feedback(self, real_logits: torch.Tensor) -> None:
        return None

    def end_step(self, step: int, nimg: int) -> dict[str, Any]:
        return {}

    def state_dict(self) -> dict:
        return {}

    def load_state_dict(self, state: dict) -> None:
        if state:
            raise ValueError(f"{type(self).__name__} keeps no state, got {sorted(state)}")


class AugmentedD(nn.Module):
    """``D(augment(x))``: the discriminator as the engine hands it out when a recipe augments.
    ``net`` is D (possibly wrapped in DDP or compiled); the augmentation runs outside any
    compiled graph."""

    def __init__(self, net: nn.Module, augment: Augment):
        super().__init__()
        self.net = net
        self.augment = augment

    def forward(self, x: torch.Tensor, *args: Any, **kwargs: Any) -> torch.Tensor:
        return self.net(self.augment(x), *args, **kwargs)


class LabelBound:
    """``net`` with class labels bound: ``bound(x, ...)`` runs ``net(x, labels, ...)``, with
    ``labels[N]`` repeated when ``x`` is k batches of N concatenated. What a penalty's
    ``inputs.D`` / ``inputs.G`` is in a class-conditional run, so penalties need not know about
    labels. Other attributes are ``net``'s."""

    def __init__(self, net: Any, labels: torch.Tensor):
        self.net = net
        self.labels = labels

    def __call__(self, x: torch.Tensor, *args: Any, **kwargs: Any) -> torch.Tensor:
        n, k = x.shape[0], self.labels.shape[0]
        if n % k:
            raise ValueError(f"{type(self.net).__name__} has this step's {k} labels bound, so it takes k x {k} "
                             f"images (k = 1, 2, ...), got {n}; for a sub-batch call the network with its labels: "
                             f"inputs.D.net(x, inputs.labels[:{n}])")
        labels = self.labels if n == k else self.labels.repeat(n // k)
        return self.net(x, labels, *args, **kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.net, name)


def bind_labels(net: Any, labels: torch.Tensor | None) -> Any:
    """``net`` itself without labels, else ``LabelBound(net, labels)``."""
    return net if labels is None else LabelBound(net, labels)


class UpdateStrategy(ComponentBase):
    """One training iteration: ``step(ctx) -> dict[str, float | Tensor]``.

    The strategy owns the order of zero_grad / forward / backward / optimizer.step for D and G.
    ``ctx.reals`` holds ``d_steps`` real batches; the strategy must use a fresh real batch and
    zeroed gradients for every D step.

    Precision: ``ctx.G`` and ``ctx.D`` run at the run's precision whoever calls them (their
    forwards under autocast under bf16 / fp16) and return float32, so a strategy written in
    plain float32 PyTorch - direct ``ctx.D(x)`` calls, ``torch.lerp`` of reals and fakes, its
    own losses - trains under fp32, bf16 and fp16 alike; ``ctx.autocast()`` blocks are allowed
    and change nothing. The verbs ``backward``, ``gradients`` and ``opt_step`` run outside
    autocast and own fp16's GradScaler.
    """

    @property
    def d_steps(self) -> int:
        """Real batches (critic steps) one ``step`` consumes; 1 unless a strategy says otherwise."""
        return 1

    def step(self, ctx: "StepContext") -> Mapping[str, Any]:
        raise NotImplementedError


class GrowthScheduler(ComponentBase):
    """``phase_at(cur_nimg) -> Phase``: a pure function of the number of real images shown,
    so resuming needs nothing but ``cur_nimg``."""

    def phase_at(self, cur_nimg: int) -> Phase:
        raise NotImplementedError

    def resolutions(self) -> list[int]:
        """Every resolution the schedule visits, in order."""
        return [self.context.resolution]

    def phases(self, total_nimg: int) -> list[Phase]:
        """Every phase visited before ``total_nimg`` images, as ``phase_at`` gives it at the
        phase's first image: the one walk of the schedule that training, the dry-run plan, bench
        and report use."""
        out, nimg = [], 0
        while nimg < max(total_nimg, 1):
            ph = self.phase_at(nimg)
            out.append(ph)
            if ph.end_nimg == math.inf:
                break
            nimg = int(ph.end_nimg)
        return out


class Initializer(ComponentBase):
    """``apply(module)`` initialises every conv / linear layer of ``module`` in place."""

    def apply(self, module: nn.Module) -> None:
        raise NotImplementedError


class Growable:
    """A network that grows (mix into the ``nn.Module``): it builds every block up front and
    takes the phase at run time through ``set_phase``, so its parameters keep their identity (and
    optimizer state, and G_ema's average) across growth. The engine calls ``set_phase`` on G, D
    and G_ema whenever the phase or alpha changes."""

    def set_phase(self, resolution: int, alpha: float) -> None:
        """Run at ``resolution`` pixels with the newest block faded in by ``alpha`` in [0, 1]."""
        raise NotImplementedError


def set_phase(module: nn.Module, resolution: int, alpha: float) -> None:
    """Tell ``module`` (or the ``Growable`` network inside its DDP / compile wrappers) the phase."""
    while not isinstance(module, Growable):
        inner = getattr(module, "module", None) or getattr(module, "_orig_mod", None)
        if inner is None:
            return
        module = inner
    module.set_phase(resolution, alpha)


class Architecture(ComponentBase):
    """``build(resolution, channels) -> (G, D)`` for the final resolution.

    G maps ``z[N, latent_dim]`` to images ``[N, channels, r, r]`` in about [-1, 1]; D maps
    images to logits ``[N]``. A growable pair mixes in ``Growable``. ``latent_dim`` is the size of
    z (architectures with a ``latent_dim`` option get it from there).

    Class-conditional (``supports_conditional``, built when ``self.context.num_classes`` > 0):
    ``G(z, labels)`` and ``D(x, labels)`` with ``labels[N]`` int64 class indices; the engine
    passes labels only to a conditional pair (``StepContext.generate`` / ``discriminate``).
    """

    #: True when ``build`` makes a class-conditional pair for ``context.num_classes`` > 0.
    supports_conditional: ClassVar[bool] = False

    #: False when ``architecture.spectral_norm`` cannot apply: its layers are not torch conv /
    #: linear layers (stylegan2's scale their weights themselves); the recipe is then refused
    #: with one line that says to set ``spectral_norm = "none"``.
    supports_spectral_norm: ClassVar[bool] = True

    #: Why spectral norm cannot apply, said in the refusal (after "has no spectral-norm form: ").
    spectral_norm_reason: ClassVar[str] = ("its layers are not torch conv / linear layers (they apply the "
                                           "equalized learning rate themselves)")

    #: True when G's forward takes ``truncation_psi`` (the truncation trick: StyleGAN, Karras et
    #: al. 2019, sec. 3.2 - W pulled toward its running average); ``gankit sample --truncation``
    #: refuses other architectures.
    supports_truncation: ClassVar[bool] = False

    #: True when D's forward takes ``splits``: ``D(cat([real, fake]), splits=2)`` equals
    #: ``cat([D(real), D(fake)])`` exactly (every layer is per sample, minibatch statistics are
    #: taken within each part). The D objective then runs one D forward on both batches.
    joint_d_forward: ClassVar[bool] = False

    #: True when ``build`` initialises every weight itself (R3GAN's fix-up initialisation): the
    #: recipe's ``[init]`` is then not applied. Without it the recipe's initializer visits every
    #: layer but frozen ones (``requires_grad`` False) and those marked ``gan_kit.own_init``;
    #: ``architecture.spectral_norm`` skips frozen layers likewise (docs/writing-plugins.md).
    owns_init: ClassVar[bool] = False

    @property
    def latent_dim(self) -> int:
        """Size of the latent z that G takes (architectures with a ``latent_dim`` option return it)."""
        raise NotImplementedError(f"{type(self).__name__} must define latent_dim (the size of z)")

    def build(self, resolution: int, channels: int) -> tuple[nn.Module, nn.Module]:
        raise NotImplementedError

    def export_view(self, G: nn.Module) -> nn.Module:
        """G as ``gankit export`` traces it (TorchScript, ONNX): the same function, with ops that
        trace with a free batch size (StyleGAN2: no conv with ``groups = N``). Default: ``G``."""
        return G
    def d_blocks(self, D: nn.Module) -> list[nn.Module]:
        """D's blocks in order from the input side, the first holding D's input layer (fromRGB):
        what ``architecture.freeze_d_blocks`` (FreezeD) freezes the first N of. The default asks
        D itself (``D.input_blocks()``, when D defines it); [] means D names no blocks, and the
        recipe's FreezeD is refused."""
        blocks = getattr(D, "input_blocks", None)
        return list(blocks()) if callable(blocks) else []

    def batch_problem(self, batch: int, world_size: int = 1) -> str | None:
        """Why D cannot take a per-process batch of ``batch`` images with ``world_size``
        processes (checked for every phase before training, e.g. a minibatch-stddev group that
        does not divide it), or None."""
        return None


#: What ``StyleGenerator.synthesis`` takes as ``noise_mode``: "const" (the noise maps fixed when G
#: was built: the same ws give the same image), "random" (fresh noise from the global torch RNG)
#: or "none" (no noise added). StyleGAN2's names (Karras et al. 2020, sec. 2; stylegan2-ada-pytorch's
#: ``noise_mode``).
NOISE_MODES = ("const", "random", "none")


@runtime_checkable
class StyleGenerator(Protocol):
    """A G with per-layer styles (StyleGAN, Karras et al. 2019, sec. 2: a mapping network to W,
    one W per synthesis layer): what ``gankit style-mix``, ``gankit generate --w`` and projection
    into W need. A structural type: G implements the two methods and three attributes, it need
    not derive from this class (``isinstance(G, StyleGenerator)`` checks that they exist).

    - ``mapping(z[N, latent_dim], labels[N] int64 | None = None, truncation_psi=1.0) ->
      ws[N, num_ws, w_dim]``: z through the mapping network, one W per layer (all equal, as
      StyleGAN2 maps them); with ``truncation_psi`` != 1 each W is pulled toward ``w_avg``:
      ``w_avg + psi * (w - w_avg)`` (the truncation trick, StyleGAN sec. 3.1 / appendix B).
      ``labels`` only for a class-conditional G. No side effects: it never updates ``w_avg``.
    - ``synthesis(ws[N, num_ws, w_dim], noise_mode="random") -> images[N, C, r, r]`` in about
      [-1, 1]; ``noise_mode`` one of ``NOISE_MODES`` (a G without noise inputs ignores it).
    - ``num_ws`` (int): the layers that take a W, numbered 0 (coarsest) to num_ws - 1;
      ``w_dim`` (int): the size of W; ``w_avg`` (tensor ``[w_dim]``): the running average of
      mapped W, the centre of truncation and the start of a projection.

    ``G(z)`` must equal ``G.synthesis(G.mapping(z))`` in eval mode with the same noise. The
    built-in stylegan2 G implements it (its ``mapping`` also takes the keyword ``update_w_avg``,
    which training uses).
    """

    num_ws: int
    w_dim: int
    w_avg: torch.Tensor

    def mapping(self, z: torch.Tensor, labels: torch.Tensor | None = None,
                truncation_psi: float = 1.0) -> torch.Tensor: ...

    def synthesis(self, ws: torch.Tensor, noise_mode: str = "random") -> torch.Tensor: ...


class DatasetFactory(ComponentBase):
    """``build(resolution) -> Dataset`` of float images in [-1, 1], shape [C, H, W]."""

    def build(self, resolution: int) -> torch.utils.data.Dataset:
        raise NotImplementedError


class Tracker(ComponentBase):
    """An experiment tracker (MLflow, W&B, ...), driven on rank 0 by the built-in ``trackers``
    plugin: ``start(params, run_dir, resume_id) -> run id`` once (``params``: the resolved recipe
    as dotted keys, ``penalty.0.weight``; ``resume_id``: what ``start`` returned for this run
    directory before, so a resumed run continues the tracked run), ``log_metrics(metrics, step)``
    every tick (finite numbers of the metrics.jsonl line; step = ``cur_nimg``),
    ``log_artifact(path, folder)`` per sample grid (and checkpoint if asked), ``finish(status)``
    with "FINISHED", "KILLED" (Ctrl-C, SIGTERM, stopped early) or "FAILED". docs/trackers.md."""

    def start(self, params: dict[str, Any], run_dir: "Path", resume_id: str | None) -> str: ...

    def log_metrics(self, metrics: dict[str, float], step: int) -> None: ...

    def log_artifact(self, path: "Path", folder: str) -> None: ...

    def finish(self, status: str) -> None: ...


class Metric(ComponentBase):
    """``compute(generate, reals, device) -> dict[str, float]``.

    ``generate(n) -> Tensor[n,C,H,W]`` draws images from G_ema (in [-1, 1]); ``reals`` is a
    tensor of real images at the same resolution. Keys are slash paths like ``Metrics/swd``.

    Declared: ``num_images`` (images of each set it wants; the run caps it at the data set's
    size), ``min_images`` (fewer cannot give a value: the recipe is refused), ``unit``,
    ``higher_is_better`` (for reports) and ``value_range`` (``(low, high)``, the values the metric
    can take, e.g. ``(0.0, math.inf)`` for a distance: ``gankit compare`` clips its confidence
    intervals to it; default unbounded).
    """

    min_images: ClassVar[int] = 2
    unit: ClassVar[str] = ""
    higher_is_better: ClassVar[bool] = False
    value_range: ClassVar[tuple[float, float]] = (-math.inf, math.inf)

    #: Metrics with a ``num_images`` / ``seed`` option override these with properties.
    num_images: int = 1024
    seed: int = 0

    def compute(self, generate: Callable[[int], torch.Tensor], reals: torch.Tensor, device: torch.device) -> dict[str, float]:
        raise NotImplementedError


class Distance(ComponentBase):
    """How far apart two batches of images are, image by image (kind ``distance``): what
    ``gankit project`` minimises between G's image and the target, and how it reports the fit.

    ``distance(a[N,C,H,W], b[N,C,H,W]) -> Tensor[N]``: images in [-1, 1] of one shape (C = 1
    or 3, any side), float32, on any device (a distance with weights of its own moves them to the
    images' device); the result is float32, >= 0, zero for identical images, and differentiable
    in both arguments (the projector backpropagates it into W). Built as ``factory(options,
    BuildContext(resolution=r, channels=C))`` with the generator's resolution and channels, once
    per projection; an option that cannot work (a missing weights file) raises ``GankitError``
    there, in one line naming the option, the value and the fix.

    A distance whose work on ``b`` can be done once (LPIPS's features of the target) overrides
    ``prepare_target`` and ``distance_to``: the projector calls ``prepare_target`` once per
    projection and ``distance_to`` every step. By default they are ``b`` and ``distance``.
    """

    def distance(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    def prepare_target(self, b: torch.Tensor) -> Any:
        """What ``distance_to`` needs of a fixed batch ``b[N,C,H,W]`` (the projection's target),
        computed once and not differentiated; default: ``b`` itself."""
        return b

    def distance_to(self, a: torch.Tensor, target: Any) -> torch.Tensor:
        """``distance(a, b)`` for ``target = prepare_target(b)``, ``Tensor[N]``, differentiable
        in ``a``; default: ``distance(a, target)``."""
        return self.distance(a, target)

class Importer(ComponentBase):
    """A reader of another codebase's trained-model files (kind ``importer``): NVIDIA's
    network-snapshot pickles, R3GAN's, a third party's.

    ``read(source) -> ImportedModel | None``: ``source`` is a ``gan_kit.ForeignFile`` (its
    ``path``, first bytes ``head``, ``sha256``, and ``pickle()``, the file read by the
    restricted unpickler ``gan_kit.read_pickle``, once for all importers). Return a
    ``gan_kit.ImportedModel`` for a file of this importer's format, None for any other file.
    Raise ``GankitError`` (one line naming the file, the setting and its value) for a file of
    this format that gankit cannot build (an unknown network configuration). Never run code the
    file holds: no ``pickle.load``, no ``torch.load(weights_only=False)``. Built as
    ``factory(options, BuildContext(resolution=0, channels=0))``.
    """

    def read(self, source: Any) -> Any:
        raise NotImplementedError


class Backbone(ComponentBase):
    """A feature network of the feature metrics (kind ``backbone``; a metric's
    ``feature_extractor`` option names one): InceptionV3, VGG16, CLIP ViT-B/32, DINOv2 ViT-L/14,
    a third party's.

    Declared as class attributes:

    - ``weights_file``: the file name it expects (None: it needs no file), looked for where the
      metric's ``weights`` option points, else in ``$GANKIT_WEIGHTS_DIR``, else in the torch hub
      cache (``$TORCH_HOME/hub/checkpoints``); ``weights_source``: where to get it (a URL or a
      sentence). gankit never downloads it.
    - ``input_size``: the side its network takes (images are resized to ``input_size x
      input_size`` by the resize mode); ``resize``: its default resize mode
      (``gan_kit.builtin.metrics.resize.MODES``); ``resizes_inside``: whether its network also
      takes uint8 images of any size and resizes them itself (the only case where the
      ``legacy_tensorflow`` mode applies).
    - ``normalisation``: one line saying what the network does to the [0, 255] pixels (part of
      the feature cache key); ``feature_dim``: the size D of ``pool``; ``logits_dim``: the size
      K of ``logits`` (0: it has none; the ``is`` metric needs them); ``requires``: the modules it
      imports, each with the pip package that installs it (``{"timm": "timm"}``).

    ``build(path, resize) -> nn.Module``: the network from the local weights file ``path`` (None
    when ``weights_file`` is None), in eval mode; ``resize`` is the mode the images will come in
    (a backbone whose reference code normalises differently per mode reads it). Its ``forward(x)`` takes ``float32 [N,3,S,S]`` in
    [0, 255] (``S = input_size``; or, when ``resizes_inside``, ``uint8 [N,3,H,W]``) and returns
    ``pool [N, D]`` or ``(pool [N, D], logits [N, K])``. Raise any exception for a file that is
    not the expected one: the metric turns it into one line naming ``weights_file`` and
    ``weights_source``. ``version()``: the version of the code that computes the features
    (keyed with them). Built as ``factory(options, BuildContext())``.
    """

    weights_file: ClassVar[str | None] = None
    weights_source: ClassVar[str] = ""
    input_size: ClassVar[int] = 224
    resize: ClassVar[str] = "clean"
    resizes_inside: ClassVar[bool] = False
    normalisation: ClassVar[str] = ""
    feature_dim: ClassVar[int] = 0
    logits_dim: ClassVar[int] = 0
    requires: ClassVar[dict[str, str]] = {}

    def build(self, path: Any, resize: str) -> nn.Module:
        raise NotImplementedError

    def version(self) -> str:
        """The version of the code behind the features (a package's, or the plugin's)."""
        return "gankit-1"
