"""Classifier-based class conditioning as penalties any D can take: the auxiliary classifier of
ACGAN (Odena et al. 2017, "Conditional Image Synthesis with Auxiliary Classifier GANs", sec. 3)
and ReACGAN's data-to-data cross-entropy, D2D-CE (Kang et al. 2021, "Rebooting ACGAN: Auxiliary
Classifier GANs with Stable Training", sec. 4), as StudioGAN computes them
(``CrossEntropyLoss``, ``Data2DataCrossEntropyLoss``) and weights them (``cond_lambda``).

What D must have: ``D.features(x[N,C,H,W]) -> h[N, F]``, the vector D's adversarial logit is
computed from (StudioGAN's ``h``: the last block's activations summed over H, W; it does not
depend on the labels), and ``D.feature_dim`` = F (without it, F is found by one forward of two
zero images in eval mode when the run is built). Nothing else: the heads are this module's.

How the terms reach the networks. ``ac`` / ``d2d-ce`` (D side) add their head to D when the run
builds the networks (``Penalty.attach``: ``D.ac_head`` / ``D.d2dce_head``, before the recipe's
initializer, spectral norm, the training wrappers, G_ema and the optimizers), so D's optimizer trains
it, D's checkpoint holds it and ``architecture.spectral_norm`` normalises it, as StudioGAN's
``linear2`` / ``embedding`` are layers of its D. Each D objective adds ``weight * CE(head(h(x)),
y)`` on the reals (``weight`` = StudioGAN's ``cond_lambda``); ``ac-g`` / ``d2d-ce-g`` (G side)
add ``weight * CE(head(h(G(z, y))), y)`` to G's objective through the same head (D frozen), as
StudioGAN's worker adds ``cond_lambda * cond_loss(fake)`` to G's loss. List both sides with the
same weight (StudioGAN: AC 1.0, ReACGAN 0.5 on CIFAR10).

The features come from a D forward of the penalty's own (through the run's augmentation and
autocast, a fresh augmentation draw), not from the forward of D's adversarial logits as in
StudioGAN, where one forward serves both: the same expectation, one more D forward per term.
That forward runs the plain D the run built (docs/regularisers.md says what that means for
several processes); D2D-CE is taken over each process's batch (StudioGAN gathers the global
batch first).
"""

from __future__ import annotations

from typing import Any

import attrs
import torch
import torch.nn.functional as F
from torch import nn

from gan_kit import GankitError, Penalty, hookimpl, option

__all__ = ["ACHead", "D2DCEHead", "AuxiliaryClassifier", "AuxiliaryClassifierG", "Data2DataCE", "Data2DataCEG",
           "d2d_ce", "feature_dim"]


def feature_dim(D: nn.Module, channels: int, resolution: int, who: str) -> int:
    """F of ``D.features``: ``D.feature_dim`` when D declares it, else the width of
    ``D.features`` on two zero images ``[2, channels, resolution, resolution]`` (eval mode, no
    gradient; D's train / eval mode restored). ``GankitError`` naming ``who`` for a D without
    ``features``."""
    if not callable(getattr(D, "features", None)):
        raise GankitError(f"penalty {who!r} needs a D with features(x) -> [N, F] (the vector its logit is computed "
                          f"from); {type(D).__name__} has none: use an architecture whose D exposes it, or drop {who!r}")
    dim = getattr(D, "feature_dim", None)
    if dim is not None:
        return int(dim)
    was_training = D.training
    D.eval()
    try:
        with torch.no_grad():
            p = next(iter(D.parameters()), None)
            x = torch.zeros(2, channels, resolution, resolution, device=p.device if p is not None else None)
            h = D.features(x)
    finally:
        D.train(was_training)
    if h.dim() != 2:
        raise GankitError(f"penalty {who!r}: {type(D).__name__}.features returned shape {tuple(h.shape)}, expected "
                          f"[N, F]")
    return int(h.shape[1])


class ACHead(nn.Module):
    """ACGAN's classifier on D's features: ``h[N, F] -> class logits [N, num_classes]``, one
    linear layer without bias (StudioGAN's ``linear2`` for ``d_cond_mtd = "AC"``)."""

    def __init__(self, features: int, num_classes: int):
        super().__init__()
        self.linear = nn.Linear(features, num_classes, bias=False)

    def forward(self, h: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        return F.cross_entropy(self.linear(h), labels)


class D2DCEHead(nn.Module):
    """ReACGAN's projection of D's features and its class proxies: ``h[N, F] -> embed [N, E]``
    (a linear layer with bias, StudioGAN's ``linear2``), ``proxy = embedding(labels) [N, E]``
    (StudioGAN's ``embedding``), then ``d2d_ce``. StudioGAN's ``normalize_d_embed`` would
    L2-normalise both first; the loss takes cosine similarities, which that leaves unchanged."""

    def __init__(self, features: int, num_classes: int, embed_dim: int, temperature: float, margin: float):
        super().__init__()
        self.linear = nn.Linear(features, embed_dim, bias=True)
        self.embedding = nn.Embedding(num_classes, embed_dim)
        self.temperature, self.margin = temperature, margin

    def forward(self, h: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        return d2d_ce(self.linear(h), self.embedding(labels), labels, self.temperature, self.margin)


def _cosine_matrix(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """``[N, E] x [M, E] -> [N, M]`` cosine similarities, norms clamped at 1e-8 as
    ``torch.nn.CosineSimilarity`` clamps them."""
    return F.cosine_similarity(a.unsqueeze(1), b.unsqueeze(0), dim=-1)


def _off_diagonal(m: torch.Tensor) -> torch.Tensor:
    """``[N, N] -> [N, N - 1]``: each row without its diagonal entry."""
    n = m.shape[0]
    keep = ~torch.eye(n, dtype=torch.bool, device=m.device)
    return m[keep].view(n, n - 1)


def d2d_ce(embed: torch.Tensor, proxy: torch.Tensor, labels: torch.Tensor, temperature: float,
           margin: float) -> torch.Tensor:
    """Data-to-data cross-entropy (Kang et al. 2021, sec. 4), as StudioGAN's
    ``Data2DataCrossEntropyLoss`` computes it, averaged over the batch:

    ``pos_i = relu((m_p - cos(e_i, p_i)) / T)``,
    ``neg_i = log(exp(-pos_i) + sum_{j != i, y_j != y_i} exp(relu(s_ij) - max_k s_ik))`` with
    ``s_ij = (cos(e_i, e_j) + m_p - 1) / T`` (the negative margin m_n = 1 - m_p; ``max_k`` over
    the row's off-diagonal entries, detached, for numerical range), loss ``mean(pos + neg)``.

    The paper's form is ``-log(exp([cos(e_i, p_i) - m_p]_- / T) / (that + sum_j exp([cos(e_i,
    e_j) - m_n]_+ / T)))``; the code's detached max subtracted from the negatives' exponents
    alone scales them by ``exp(-max)``, so the value (and gradient) is the code's, not the
    paper's exact expression. ``embed``, ``proxy``: ``[N, E]``; ``labels``: ``[N]`` int64;
    N >= 2. Returns a float32 scalar."""
    embed, proxy = embed.float(), proxy.float()
    sim = _off_diagonal(_cosine_matrix(embed, embed) + margin - 1) / temperature
    sim_max = sim.max(dim=1, keepdim=True).values
    sim = F.relu(sim) - sim_max.detach()
    negatives = _off_diagonal(labels.view(-1, 1) != labels.view(1, -1)).to(sim.dtype)
    pos = F.relu((margin - F.cosine_similarity(embed, proxy, dim=-1)) / temperature)
    neg = torch.log(torch.exp(-pos) + (negatives * torch.exp(sim)).sum(dim=1))
    return (pos + neg).mean()


class _ClassTerm(Penalty):
    """The shared work of the four penalties: find D (``attach``), check the run is
    class-conditional, and run ``head(D.features(augment(x)), labels)``."""

    #: D's attribute that holds the head; the D side adds it, the G side reads it.
    head_attribute: str = ""
    #: The D-side penalty's name (for the G side's messages).
    d_name: str = ""

    def __init__(self, options: Any = None, context: Any = None):
        super().__init__(options, context)
        self.D: nn.Module | None = None

    def attach(self, G: nn.Module, D: nn.Module) -> None:
        if not self.context.num_classes:
            raise GankitError(f"penalty {self._name()!r} conditions on classes, but this run is not class-conditional "
                              f"(set architecture.conditional = true with a labelled data set)")
        self.D = D

    def _name(self) -> str:
        return self.d_name if self.network == "D" else f"{self.d_name}-g"

    def head(self) -> nn.Module:
        """The head on D (``D.<head_attribute>``); ``GankitError`` when it was never attached."""
        head = getattr(self.D, self.head_attribute, None) if self.D is not None else None
        if head is None:
            raise GankitError(f"penalty {self._name()!r}: D has no {self.head_attribute} - list penalty "
                              f"{self.d_name!r} too (it adds the head to D when the run is built)")
        return head

    def term(self, images: torch.Tensor, labels: torch.Tensor | None, ctx: Any) -> torch.Tensor:
        """``head(D.features(augment(images)), labels)`` as a float32 scalar; features under the
        run's autocast, the head in float32."""
        if labels is None:
            raise GankitError(f"penalty {self._name()!r} needs this step's labels (a class-conditional run and a "
                              f"strategy that passes labels= to the objectives)")
        augment = getattr(ctx, "augment", None)
        x = augment(images) if augment is not None else images
        with ctx.autocast():
            h = self.D.features(x)
        return self.head()(h.float(), labels)

    @classmethod
    def problems(cls, options: Any, recipe: Any) -> Any:
        if cls.network == "G" and recipe is not None:
            names = [spec.name for spec in getattr(recipe, "penalties", None) or ()]
            if cls.d_name not in names:
                yield "name", (f"penalty '{cls.d_name}-g' trains G through the head that penalty '{cls.d_name}' adds "
                               f"to D; list '{cls.d_name}' too (StudioGAN weights both with cond_lambda)")


class AuxiliaryClassifier(_ClassTerm):
    """ACGAN's auxiliary classifier, D side (Odena et al. 2017, sec. 3; StudioGAN ``d_cond_mtd =
    "AC"``): ``CE(W h(x), y)`` on the real batch, ``W`` a bias-free linear head it adds to D
    (``D.ac_head``). ``fakes = true`` adds the same term on D's fakes (labelled with the classes
    they were made for), as the paper's L_C; StudioGAN's D classifies reals only. Pair with
    ``ac-g``; ``weight`` is StudioGAN's ``cond_lambda`` (1.0 in its ACGAN configs). Needs
    ``D.features`` (module docstring)."""

    head_attribute = "ac_head"
    d_name = "ac"

    @attrs.frozen
    class Options:
        fakes: bool = option(False, help="Also classify D's fakes (the ACGAN paper's L_C); StudioGAN: false "
                                         "(reals only).")

    def attach(self, G: nn.Module, D: nn.Module) -> None:
        super().attach(G, D)
        dim = feature_dim(D, self.context.channels, self.context.resolution, self.d_name)
        D.add_module(self.head_attribute, ACHead(dim, self.context.num_classes))

    def __call__(self, inputs, ctx):
        value = self.term(inputs.real, inputs.labels, ctx)
        if self.options.fakes and inputs.fake is not None:
            value = value + self.term(inputs.fake, inputs.labels, ctx)
        return value


class AuxiliaryClassifierG(_ClassTerm):
    """ACGAN's classifier term of G (Odena et al. 2017, sec. 3; StudioGAN's G loss adds
    ``cond_lambda * CE(cls(G(z, y)), y)``): G is trained to make images D's head classifies as
    their class. Uses the head ``ac`` adds to D (list both). D is frozen in G's step, so nothing
    reaches D. The G step's fakes ``[N,C,H,W]`` (or, when a strategy passes none, fresh ones from
    ``inputs.G``)."""

    network = "G"
    head_attribute = "ac_head"
    d_name = "ac"

    def __call__(self, inputs, ctx):
        return self.term(_fakes(inputs, ctx), inputs.labels, ctx)


@attrs.frozen
class D2DCEOptions:
    embed_dim: int = option(512, help="Size E of the embedding D's features are projected to and of the class proxies "
                                      "(StudioGAN's d_embed_dim; ReACGAN: 512 on CIFAR10, 1024 on ImageNet).", min=1)
    temperature: float = option(0.5, help="Temperature T of the similarities (ReACGAN: 0.5 on CIFAR10, 0.25 on "
                                          "ImageNet).", min=0, min_exclusive=True)
    margin: float = option(0.98, help="Positive margin m_p; the negative margin is 1 - m_p (ReACGAN: 0.98 on "
                                      "CIFAR10, 0.90 on ImageNet).", min=0, max=1)


class Data2DataCE(_ClassTerm):
    """ReACGAN's D2D-CE, D side (Kang et al. 2021, sec. 4; StudioGAN ``d_cond_mtd = "D2DCE"``):
    ``d2d_ce(linear(h(x)), embedding(y), y)`` on the real batch - each real pulled to its class
    proxy and pushed from the reals of other classes, with margins - through a head it adds to D
    (``D.d2dce_head``: the linear projection and the class embedding). Pair with ``d2d-ce-g``;
    ``weight`` is StudioGAN's ``cond_lambda`` (ReACGAN: 0.5 on CIFAR10). Needs ``D.features``
    and a batch of 2 or more."""

    Options = D2DCEOptions
    head_attribute = "d2dce_head"
    d_name = "d2d-ce"

    def attach(self, G: nn.Module, D: nn.Module) -> None:
        super().attach(G, D)
        o = self.options
        dim = feature_dim(D, self.context.channels, self.context.resolution, self.d_name)
        D.add_module(self.head_attribute, D2DCEHead(dim, self.context.num_classes, o.embed_dim, o.temperature,
                                                    o.margin))

    def __call__(self, inputs, ctx):
        return self.term(inputs.real, inputs.labels, ctx)


class Data2DataCEG(_ClassTerm):
    """ReACGAN's D2D-CE term of G (Kang et al. 2021, sec. 4; StudioGAN's G loss adds
    ``cond_lambda * D2D-CE(fake)``): the same criterion on G's fakes through D's head (D frozen),
    so G makes images near their class proxy and far from other classes' images. Uses the head
    ``d2d-ce`` adds to D, with its options (list both)."""

    network = "G"
    head_attribute = "d2dce_head"
    d_name = "d2d-ce"

    def __call__(self, inputs, ctx):
        return self.term(_fakes(inputs, ctx), inputs.labels, ctx)


def _fakes(inputs: Any, ctx: Any) -> torch.Tensor:
    """The G step's fakes with their graph to G, or fresh ones from ``inputs.G`` (labels bound)."""
    if inputs.fake is not None:
        return inputs.fake
    with ctx.autocast():
        return inputs.G(ctx.latent(inputs.batch_size)).float()


@hookimpl
def register_penalties(register):
    register("ac", AuxiliaryClassifier)
    register("ac-g", AuxiliaryClassifierG)
    register("d2d-ce", Data2DataCE)
    register("d2d-ce-g", Data2DataCEG)
