"""StudioGAN's class-conditional training terms and BigGAN's orthogonal regularisation: the
``orthogonal`` penalty's value and gradient, the ``ac`` cross-entropy and the ``d2d-ce``
criterion against what StudioGAN's own functions computed on the same tensors
(tests/data/studiogan_reference_tricks.pt, written by make_studiogan_tricks_reference.py), and
the heads the class penalties add to D, in a built run and in training."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch
from torch import nn

from gan_kit import GankitError, GInputs, DInputs, BuildContext, StepContext
from gan_kit.base.phase import Phase
from gan_kit.builtin.objectives.class_heads import (ACHead, AuxiliaryClassifier, AuxiliaryClassifierG, Data2DataCE,
                                                    Data2DataCEG, d2d_ce)
from gan_kit.builtin.objectives.losses import Hinge
from gan_kit.builtin.objectives.orthogonal import Orthogonal
from gan_kit.testing import make_run, train_steps

REF = torch.load(Path(__file__).parent / "data" / "studiogan_reference_tricks.pt", weights_only=True)


class TinyG(nn.Module):
    """The maker's G: a shared class embedding, a linear layer, a conv and a BatchNorm."""

    def __init__(self):
        super().__init__()
        self.shared = nn.Embedding(5, 6)
        self.linear = nn.Linear(6, 12)
        self.conv = nn.Conv2d(3, 4, 3)
        self.bn = nn.BatchNorm2d(4)


def test_orthogonal_value_and_gradient_equal_biggans_ortho_as_studiogan_applies_it():
    """weight * grad(value) = the gradient StudioGAN's orthogonalize_model adds after backward,
    for every parameter (0 for biases, BN gains and the blacklisted shared embedding)."""
    case = REF["ortho"]
    G = TinyG()
    G.load_state_dict(case["state"])
    value = Orthogonal()(GInputs(G=G, batch_size=1), None)
    assert value.dtype == torch.float32
    assert value.item() == pytest.approx(case["value"].item(), rel=1e-6)
    (case["strength"] * value).backward()
    for name, p in G.named_parameters():
        got = p.grad if p.grad is not None else torch.zeros_like(p)
        assert torch.allclose(got, case["grads"][name], rtol=1e-5, atol=1e-6), name
    assert G.shared.weight.grad is None and G.linear.bias.grad is None


def test_orthogonal_can_regularise_embeddings_and_is_zero_for_orthogonal_rows():
    G = TinyG()
    with torch.no_grad():
        for m in (G.linear, G.conv):
            nn.init.orthogonal_(m.weight)
    only_embedding = Orthogonal(Orthogonal.Options(skip_embeddings=False))(GInputs(G=G, batch_size=1), None)
    skipped = Orthogonal()(GInputs(G=G, batch_size=1), None)
    # The linear weight [12, 6] cannot have 12 orthogonal rows; the conv's [4, 27] can.
    w = G.linear.weight.detach()
    gram = w @ w.t()
    assert skipped.item() == pytest.approx(0.5 * (gram - torch.diag(torch.diag(gram))).square().sum().item(), rel=1e-5)
    e = G.shared.weight.detach()
    ge = e @ e.t()
    extra = 0.5 * (ge - torch.diag(torch.diag(ge))).square().sum()
    assert only_embedding.item() == pytest.approx(skipped.item() + extra.item(), rel=1e-5)


def test_ac_head_cross_entropy_equals_studiogans():
    case = REF["ac"]
    head = ACHead(5, 5)
    with torch.no_grad():
        head.linear.weight.copy_(torch.eye(5))  # the head's logits are the recorded ones
    assert abs(head(case["logits"], case["labels"]).item() - case["loss"].item()) < 1e-6


@pytest.mark.parametrize("index", [0, 1])
def test_d2d_ce_value_and_gradients_equal_studiogans(index):
    case = REF["d2dce"]
    ref = case["cases"][index]
    embed = case["embed"].clone().requires_grad_(True)
    proxy = case["proxy"].clone().requires_grad_(True)
    loss = d2d_ce(embed, proxy, case["labels"], ref["temperature"], ref["m_p"])
    assert abs(loss.item() - ref["loss"].item()) < 1e-6
    ge, gp = torch.autograd.grad(loss, [embed, proxy])
    assert torch.allclose(ge, ref["grad_embed"], atol=1e-6)
    assert torch.allclose(gp, ref["grad_proxy"], atol=1e-6)


def test_d2d_ce_ignores_same_class_pairs_as_negatives():
    """Two samples of one class: no negatives, the loss is the positive term plus log(exp(-pos)) = 0."""
    embed = torch.tensor([[1.0, 0.0], [0.0, 1.0]])
    proxy = torch.tensor([[1.0, 0.0], [1.0, 0.0]])
    loss = d2d_ce(embed, proxy, torch.tensor([0, 0]), 0.5, 0.98)
    assert loss.item() == pytest.approx(0.0, abs=1e-6)


class FeatureD(nn.Module):
    """A D with ``features``: a linear map of the flattened image, and a logit on it."""

    def __init__(self, pixels: int = 4, width: int = 3, declare: bool = True):
        super().__init__()
        self.body = nn.Linear(pixels, width)
        self.out = nn.Linear(width, 1)
        if declare:
            self.feature_dim = width

    def features(self, x):
        return self.body(x.flatten(1))

    def forward(self, x, labels=None):
        return self.out(self.features(x)).flatten()


def ctx():
    return StepContext(G=nn.Identity(), D=nn.Identity(), opt_G=None, opt_D=None, loss=Hinge(), penalties=[],
                       reals=[torch.zeros(1)], latent=lambda n: torch.randn(n, 2), phase=Phase(0, 2, 1.0, 2))


@pytest.mark.parametrize("declare", [True, False])
def test_ac_adds_its_head_to_d_and_classifies_reals_through_d_features(declare):
    context = BuildContext(resolution=2, channels=1, num_classes=3)
    D = FeatureD(declare=declare)
    ac = AuxiliaryClassifier(None, context)
    ac.attach(nn.Identity(), D)
    assert isinstance(D.ac_head, ACHead) and D.ac_head.linear.weight.shape == (3, 3)
    assert any(p is D.ac_head.linear.weight for p in D.parameters())  # D's optimizer trains it
    real, labels = torch.randn(4, 1, 2, 2), torch.tensor([0, 1, 2, 1])
    value = ac(DInputs(D=D, real=real, fake=None, labels=labels), ctx())
    expected = torch.nn.functional.cross_entropy(D.ac_head.linear(D.features(real)), labels)
    assert value.item() == pytest.approx(expected.item(), rel=1e-6)
    g = AuxiliaryClassifierG(None, context)
    g.attach(nn.Identity(), D)
    fake = torch.randn(4, 1, 2, 2, requires_grad=True)
    g_value = g(GInputs(G=nn.Identity(), batch_size=4, fake=fake, labels=labels), ctx())
    assert g_value.item() == pytest.approx(
        torch.nn.functional.cross_entropy(D.ac_head.linear(D.features(fake)), labels).item(), rel=1e-6)
    assert torch.autograd.grad(g_value, fake)[0].abs().sum() > 0  # G's images get a gradient


def test_d2d_ce_adds_projection_and_proxies_to_d():
    context = BuildContext(resolution=2, channels=1, num_classes=3)
    D = FeatureD()
    pen = Data2DataCE(Data2DataCE.Options(embed_dim=5, temperature=0.25, margin=0.9), context)
    pen.attach(nn.Identity(), D)
    head = D.d2dce_head
    assert head.linear.weight.shape == (5, 3) and head.embedding.weight.shape == (3, 5)
    real, labels = torch.randn(6, 1, 2, 2), torch.tensor([0, 1, 2, 1, 0, 2])
    value = pen(DInputs(D=D, real=real, fake=None, labels=labels), ctx())
    expected = d2d_ce(head.linear(D.features(real)), head.embedding(labels), labels, 0.25, 0.9)
    assert value.item() == pytest.approx(expected.item(), rel=1e-6)
    g = Data2DataCEG(None, context)
    g.attach(nn.Identity(), D)
    assert g(GInputs(G=nn.Identity(), batch_size=6, fake=real, labels=labels), ctx()).item() == pytest.approx(
        expected.item(), rel=1e-6)


def test_class_penalties_refuse_what_they_cannot_work_with():
    with pytest.raises(GankitError, match="not class-conditional"):
        AuxiliaryClassifier(None, BuildContext(num_classes=0)).attach(nn.Identity(), FeatureD())
    with pytest.raises(GankitError, match=r"features\(x\)"):
        AuxiliaryClassifier(None, BuildContext(num_classes=3)).attach(nn.Identity(), nn.Linear(2, 1))
    g = AuxiliaryClassifierG(None, BuildContext(num_classes=3))
    g.attach(nn.Identity(), FeatureD())
    with pytest.raises(GankitError, match="list penalty 'ac' too"):
        g(GInputs(G=nn.Identity(), batch_size=2, fake=torch.zeros(2, 1, 2, 2), labels=torch.tensor([0, 1])), ctx())


RECIPE = """\
[run]
seed = 0
device = "cpu"
precision = "fp32"
out_dir = "{out}"
total_kimg = 0.05
tick_kimg = 0.05
snapshot_ticks = 0
sample_grid = 10
progress = false

[data]
name = "digits"
resolution = 8

[architecture]
name = "dcgan"
latent_dim = 8
ngf = 4
ndf = 4
conditional = true
spectral_norm = "D"

[loss]
name = "hinge"

[init]
name = "orthogonal"

{penalties}

[update]
name = "d-then-g"

[growth]
name = "static"
batch_size = 8

[optim]
lr = 0.001
betas = [0.0, 0.99]
"""


@pytest.mark.parametrize("d_name", ["ac", "d2d-ce"])
def test_a_run_with_a_class_penalty_trains_its_head_with_d(tmp_path, d_name):
    penalties = (f'[[penalty]]\nname = "{d_name}"\nweight = 0.5\n\n[[penalty]]\nname = "{d_name}-g"\nweight = 0.5\n\n'
                 f'[[penalty]]\nname = "orthogonal"\nweight = 1e-4\n')
    path = tmp_path / "r.toml"
    path.write_text(RECIPE.format(out=(tmp_path / "run").as_posix(), penalties=penalties), encoding="utf-8")
    run = make_run(tmp_path, recipe=path)
    attr = "ac_head" if d_name == "ac" else "d2dce_head"
    head = getattr(run.D, attr)
    # A part of D: in D's optimizer, under D's spectral norm, in D's checkpoint.
    opt_params = {id(p) for group in run.opt_D.param_groups for p in group["params"]}
    assert all(id(p) in opt_params for p in head.parameters())
    assert hasattr(head.linear, "parametrizations")
    assert any(k.startswith(attr + ".") for k in run.D.state_dict())
    before = [p.detach().clone() for p in head.parameters()]
    stats = train_steps(run, 2)
    assert math.isfinite(stats[f"Loss/D/{d_name}"]) and math.isfinite(stats[f"Loss/G/{d_name}-g"])
    assert math.isfinite(stats["Loss/G/orthogonal"])
    assert any(not torch.equal(a, b.detach()) for a, b in zip(before, head.parameters()))


def test_the_g_side_alone_is_refused_at_recipe_load(tmp_path):
    path = tmp_path / "r.toml"
    path.write_text(RECIPE.format(out=(tmp_path / "run").as_posix(),
                                  penalties='[[penalty]]\nname = "ac-g"\nweight = 1.0\n'), encoding="utf-8")
    with pytest.raises(Exception, match="list 'ac' too"):
        make_run(tmp_path, recipe=path)
