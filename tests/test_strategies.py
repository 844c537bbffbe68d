"""Update strategies: isolation of the D and G updates for every
strategy and d_steps, shared-fake's gradient against the documented D, single-loss == simultaneous
under SGD, integer TOML values converted, and a short training run of each strategy."""

from __future__ import annotations

import copy
import math

import pytest
import torch
from torch import nn

from gan_kit.builtin.objectives.losses import BCE
from gan_kit.builtin.objectives.penalties import Drift, GradientPenalty
from gan_kit.builtin.objectives.strategies import single_loss_objective
from gan_kit import Loss, StepContext, WeightedPenalty
from gan_kit.runs.run import build_run
from gan_kit.runs.session import train
from gan_kit.base.errors import RecipeError
from gan_kit.base.phase import Phase
from gan_kit.plugin_api.manager import build_plugins
from gan_kit.recipe import load_recipe

STRATEGIES = ["d-then-g", "shared-fake", "g-then-d", "single-loss", "simultaneous"]
N, Z = 8, 4


@pytest.fixture(scope="module")
def registry():
    return build_plugins(load_entry_points=False).registry


def strategy(registry, name, **options):
    comp = registry.get("update", name)
    return comp.factory(comp.Options(**options))


class TinyG(nn.Module):
    """z[N, 4] -> images [N, 2, 4, 4]; ``unused`` mimics a growth block not active at this phase."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(Z, 2 * 16)
        self.conv = nn.Conv2d(2, 2, 3, padding=1)
        self.unused = nn.Linear(1, 1)

    def forward(self, z):
        return torch.tanh(self.conv(torch.tanh(self.fc(z)).reshape(-1, 2, 4, 4)))


class TinyD(nn.Module):
    """images [N, 2, 4, 4] -> logits [N]."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(2, 3, 3, padding=1)
        self.fc = nn.Linear(3 * 16, 1)

    def forward(self, x):
        return self.fc(nn.functional.leaky_relu(self.conv(x), 0.2).flatten(1)).squeeze(1)


class ScaledLoss(Loss):
    """``base`` with its D loss times ``sd`` and its G loss times ``sg`` (a probe for leaks)."""

    def __init__(self, base, sd=1.0, sg=1.0):
        super().__init__()
        self.base, self.sd, self.sg = base, sd, sg

    def d_loss(self, r, f):
        return self.sd * self.base.d_loss(r, f)

    def g_loss(self, f, r=None):
        return self.sg * self.base.g_loss(f, r)


class RecordingSGD(torch.optim.Optimizer):
    """Records the gradients it is asked to step with and changes no parameter; then poisons its
    gradients with NaN, so a later step that does not clear them first records NaN."""

    def __init__(self, params):
        super().__init__(params, {})
        self.records = []

    @torch.no_grad()
    def step(self, closure=None):
        params = [p for g in self.param_groups for p in g["params"]]
        self.records.append([None if p.grad is None else p.grad.clone() for p in params])
        for p in params:
            if p.grad is not None:
                p.grad.fill_(math.nan)


def make_ctx(d_steps=1, seed=0, loss=None, opt="sgd", g_lr=0.02, d_lr=0.05, penalties=None, sd=1.0):
    """Tiny G and D from ``seed``, their optimizers and a StepContext with ``d_steps`` real batches."""
    torch.manual_seed(seed)
    G, D = TinyG(), TinyD()
    if opt == "sgd":
        opt_G, opt_D = torch.optim.SGD(G.parameters(), lr=g_lr), torch.optim.SGD(D.parameters(), lr=d_lr)
    elif opt == "adam":
        opt_G = torch.optim.Adam(G.parameters(), lr=g_lr, betas=(0.0, 0.99))
        opt_D = torch.optim.Adam(D.parameters(), lr=d_lr, betas=(0.0, 0.99))
    else:
        opt_G, opt_D = RecordingSGD(G.parameters()), RecordingSGD(D.parameters())
    if penalties is None:
        penalties = [WeightedPenalty("gradient-penalty", GradientPenalty(), 10.0 * sd),
                     WeightedPenalty("drift", Drift(), 0.1 * sd)]
    reals = [torch.randn(N, 2, 4, 4).tanh() for _ in range(d_steps)]
    return StepContext(G=G, D=D, opt_G=opt_G, opt_D=opt_D, loss=loss or BCE(), penalties=penalties,
                       reals=reals, latent=lambda n: torch.randn(n, Z), phase=Phase(0, 4, 1.0, N))


def params(net):
    return [p.detach().clone() for p in net.parameters()]


def same(a, b):
    return all(torch.equal(x, y) for x, y in zip(a, b))


def run_steps(strat, ctx, iterations, seed=1):
    torch.manual_seed(seed)
    out = []
    for it in range(iterations):
        ctx.step, ctx.d_step = it, it * len(ctx.reals)
        out.append(strat.step(ctx))
    return out


# ------------------------------------------------------------------- 1: isolation ----


@pytest.mark.parametrize("d_steps", [1, 2])
@pytest.mark.parametrize("name", STRATEGIES)
def test_each_optimizer_step_changes_only_its_own_network(registry, name, d_steps):
    """With real Adam steps: across every opt_D.step G is bit-identical and across every
    opt_G.step D is; nothing but these steps changes any parameter."""
    ctx = make_ctx(d_steps, opt="adam")
    events = []

    def instrument(opt, tag):
        orig = opt.step

        def step(*a, **k):
            before = (params(ctx.G), params(ctx.D))
            out = orig(*a, **k)
            events.append((tag, before, (params(ctx.G), params(ctx.D))))
            return out

        opt.step = step

    instrument(ctx.opt_G, "G")
    instrument(ctx.opt_D, "D")
    start = (params(ctx.G), params(ctx.D))
    run_steps(strategy(registry, name, d_steps=d_steps), ctx, iterations=2)
    end = (params(ctx.G), params(ctx.D))

    assert sorted(t for t, _, _ in events) == sorted(["D"] * d_steps * 2 + ["G"] * 2)
    previous = start
    for tag, before, after in events:
        assert same(previous[0], before[0]) and same(previous[1], before[1])  # nothing moved in between
        mine, other = (0, 1) if tag == "G" else (1, 0)
        assert same(before[other], after[other]), f"{tag} step changed the other network"
        assert not same(before[mine], after[mine]), f"{tag} step did not move its own network"
        previous = after
    assert same(previous[0], end[0]) and same(previous[1], end[1])


def recorded(registry, name, d_steps, sd=1.0, sg=1.0):
    """Gradients each (no-op) optimizer step saw over 2 iterations, grads poisoned beforehand."""
    ctx = make_ctx(d_steps, opt="record", loss=ScaledLoss(BCE(), sd, sg), sd=sd)
    strat = strategy(registry, name, d_steps=d_steps)
    torch.manual_seed(1)
    for it in range(2):
        for p in [*ctx.G.parameters(), *ctx.D.parameters()]:  # stale gradients from "before"
            p.grad = torch.full_like(p, math.nan)
        ctx.step, ctx.d_step = it, it * d_steps
        strat.step(ctx)
    return ctx.opt_G.records, ctx.opt_D.records


def flat(records):
    return torch.cat([g.flatten() for rec in records for g in rec if g is not None])


@pytest.mark.parametrize("d_steps", [1, 3])
@pytest.mark.parametrize("name", STRATEGIES)
def test_no_gradient_from_one_networks_loss_reaches_the_other_networks_step(registry, name, d_steps):
    """Seed 002's zero_grad question, as a numerical probe: scaling G's loss by 3 leaves every
    gradient D steps with unchanged and scaling D's objective by 3 leaves G's unchanged. The
    optimizers record and do not move the weights (so all runs stay at the same point) and poison
    their gradients with NaN after each step, so a missing zero_grad would show as NaN."""
    g1, d1 = recorded(registry, name, d_steps)
    g_sg, d_sg = recorded(registry, name, d_steps, sg=3.0)
    g_sd, d_sd = recorded(registry, name, d_steps, sd=3.0)
    assert len(d1) == 2 * d_steps and len(g1) == 2
    for recs in (g1, d1):
        assert all(torch.isfinite(g).all() for rec in recs for g in rec if g is not None)
    # Every used parameter has a gradient; G's `unused` layer has none (not a stale NaN one).
    assert all(all(g is not None for g in rec) for rec in d1)
    assert all([g is None for g in rec] == [False] * 4 + [True] * 2 for rec in g1)
    # G's step: independent of D's objective, bit for bit.
    assert torch.equal(flat(g_sd), flat(g1))
    # D's step: independent of G's loss. Bit for bit, except single-loss, whose lambda term reaches
    # D as two equal and opposite gradients that cancel only to float rounding.
    if name == "single-loss":
        assert torch.allclose(flat(d_sg), flat(d1), rtol=1e-5, atol=1e-7)
    else:
        assert torch.equal(flat(d_sg), flat(d1))
    # The probe is live: each scale does reach its own network's step.
    assert torch.allclose(flat(g_sg), 3 * flat(g1), rtol=1e-5, atol=1e-7)
    assert torch.allclose(flat(d_sd), 3 * flat(d1), rtol=1e-5, atol=1e-7)


# ------------------------------------------------------------------ 2: shared-fake ----


def test_seed_order_of_shared_fake_raises_the_version_error_on_current_pytorch():
    """Seed 000 strategy 1 verbatim: D backward (retain_graph), opt_D.step(), G backward."""
    ctx = make_ctx(opt="adam")
    fake = ctx.G(torch.randn(N, Z))
    pred_fake, pred_real = ctx.D(fake), ctx.D(ctx.reals[0])
    ctx.loss.d_loss(pred_real, pred_fake).backward(retain_graph=True)
    ctx.opt_D.step()
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        ctx.loss.g_loss(pred_fake).backward()


def test_seed_strategy_2_listing_cannot_train_g():
    """Seed 000 strategy 2 as printed computes the G loss from pred_gen = D(fake.detach()): that
    graph was freed by the D backward (and never reached G). Its prose - a fresh D forward on the
    undetached fake - is what d-then-g does."""
    ctx = make_ctx(opt="adam")
    fake = ctx.G(torch.randn(N, Z))
    pred_fake = ctx.D(fake.detach())
    ctx.loss.d_loss(ctx.D(ctx.reals[0]), pred_fake).backward()
    ctx.opt_D.step()
    with pytest.raises(RuntimeError, match="backward through the graph a second time"):
        ctx.loss.g_loss(pred_fake).backward()


@pytest.mark.parametrize("d_steps", [1, 2])
def test_shared_fake_g_gradient_is_taken_through_the_pre_update_d(registry, d_steps):
    ctx = make_ctx(d_steps, opt="adam")
    zs, d_before_steps, g_grads = [], [], []
    latent = ctx.latent

    def recording_latent(n):
        zs.append(latent(n))
        return zs[-1]

    ctx.latent = recording_latent
    d_step, g_step_ = ctx.opt_D.step, ctx.opt_G.step

    def d_step_spy(*a, **k):
        d_before_steps.append(copy.deepcopy(ctx.D))
        return d_step(*a, **k)

    def g_step_spy(*a, **k):
        g_grads.append([p.grad.clone() for p in ctx.G.parameters() if p.grad is not None])
        g_before.append(copy.deepcopy(ctx.G))
        return g_step_(*a, **k)

    g_before = []
    ctx.opt_D.step, ctx.opt_G.step = d_step_spy, g_step_spy
    run_steps(strategy(registry, "shared-fake", d_steps=d_steps), ctx, iterations=2)  # no version error

    for it in range(2):
        z = zs[(it + 1) * d_steps - 1]  # the shared forward is the iteration's last latent draw
        G = g_before[it]
        documented_D = d_before_steps[(it + 1) * d_steps - 1]  # D before this iteration's last D step
        updated_D = d_before_steps[(it + 1) * d_steps] if it == 0 else ctx.D  # D after that step

        def reference(D):
            loss = ctx.loss.g_loss(D(G(z)))
            return [g for g in torch.autograd.grad(loss, list(G.parameters()), allow_unused=True) if g is not None]

        ref = reference(documented_D)
        assert all(torch.allclose(a, b, rtol=1e-5, atol=1e-7) for a, b in zip(g_grads[it], ref))
        # ...and it is not the gradient through the updated D (the test can tell them apart).
        other = reference(updated_D)
        assert max((a - b).abs().max().item() for a, b in zip(g_grads[it], other)) > 1e-4


# ------------------------------------------------------- 3: single-loss == simultaneous ----


def one_step(registry, name, d_steps=1, g_lr=0.02, d_lr=0.05, **options):
    ctx = make_ctx(d_steps, g_lr=g_lr, d_lr=d_lr)
    start = params(ctx.G) + params(ctx.D)
    run_steps(strategy(registry, name, d_steps=d_steps, **options), ctx, iterations=1)
    return start, params(ctx.G) + params(ctx.D)


@pytest.mark.parametrize("d_steps", [1, 2])
def test_single_loss_step_equals_simultaneous_step_with_sgd_and_ttur(registry, d_steps):
    start, single = one_step(registry, "single-loss", d_steps)
    _, simultaneous = one_step(registry, "simultaneous", d_steps)
    assert max((a - b).abs().max().item() for a, b in zip(single, simultaneous)) <= 1e-6
    assert max((a - b).abs().max().item() for a, b in zip(single, start)) > 1e-3  # it did move


def test_single_loss_lambda_is_the_g_to_d_lr_ratio_under_sgd(registry):
    # Seed 003: with one learning rate for both nets, lambda acts as the G:D learning-rate ratio.
    _, single = one_step(registry, "single-loss", g_lr=0.02, d_lr=0.02, lam=2.5)
    _, simultaneous = one_step(registry, "simultaneous", g_lr=0.05, d_lr=0.02)
    assert max((a - b).abs().max().item() for a, b in zip(single, simultaneous)) <= 1e-6


def test_g_then_d_step_is_the_simultaneous_step(registry):
    # G first on the pre-update D, then D on the pre-update G's fakes: both gradients at one point.
    _, g_then_d = one_step(registry, "g-then-d")
    _, simultaneous = one_step(registry, "simultaneous")
    assert max((a - b).abs().max().item() for a, b in zip(g_then_d, simultaneous)) <= 1e-6


def test_single_loss_lambda_term_gives_d_zero_gradient_and_g_its_loss_gradient():
    ctx = make_ctx()
    D_params, G_params = list(ctx.D.parameters()), [p for n, p in ctx.G.named_parameters() if "unused" not in n]
    torch.manual_seed(5)
    fake = ctx.G(torch.randn(N, Z))
    total, g_term, _ = single_loss_objective(ctx, ctx.reals[0], fake, lam=1.0)
    assert g_term.item() == 0.0  # identically zero in value
    d_from_term = torch.autograd.grad(g_term, D_params, retain_graph=True)
    assert max(g.abs().max().item() for g in d_from_term) <= 1e-7
    # Each half alone does push D: the zero is a cancellation, not an absent path.
    d_from_half = torch.autograd.grad(ctx.loss.g_loss(ctx.D(fake)), D_params, retain_graph=True)
    assert max(g.abs().max().item() for g in d_from_half) > 1e-2
    # For G, the term's gradient is the G loss gradient; the D objective gives G none.
    g_from_term = torch.autograd.grad(g_term, G_params, retain_graph=True)
    g_loss_grad = torch.autograd.grad(ctx.loss.g_loss(ctx.D(fake)), G_params, retain_graph=True)
    assert all(torch.allclose(a, b, atol=1e-7) for a, b in zip(g_from_term, g_loss_grad))
    # D's gradient of the whole objective is that of the D objective alone (the GP drawing the
    # same interpolation weights: it draws them when called).
    torch.manual_seed(6)
    total, _, _ = single_loss_objective(ctx, ctx.reals[0], fake, lam=1.0)
    torch.manual_seed(6)
    only_d, _ = ctx.d_objective(ctx.reals[0], fake.detach())
    d_total = torch.autograd.grad(total, D_params)
    d_only = torch.autograd.grad(only_d, D_params)
    assert all(torch.allclose(a, b, atol=1e-6) for a, b in zip(d_total, d_only))


def test_single_loss_lam_with_adam_is_rejected_at_load(tiny_recipe):
    with pytest.raises(RecipeError, match=r"update\.lam: lam = 0.5 has no effect with Adam"):
        load_recipe(tiny_recipe, ["update.name=single-loss", "update.lam=0.5"])
    recipe, _ = load_recipe(tiny_recipe, ["update.name=single-loss", "update.lam=0.5", "optim.name=sgd"])
    assert recipe.update.options.lam == 0.5


@pytest.mark.parametrize("name", ["shared-fake", "simultaneous", "single-loss"])
def test_grad_scaler_path_gives_the_unscaled_step(registry, name):
    # ctx.backward / autograd.grad scale the loss, opt_step unscales: same SGD step as fp32 alone.
    results = []
    for scaler in (None, torch.amp.GradScaler("cpu", init_scale=1024.0)):
        ctx = make_ctx()
        ctx.scaler = scaler
        run_steps(strategy(registry, name), ctx, iterations=1)
        results.append(params(ctx.G) + params(ctx.D))
    assert max((a - b).abs().max().item() for a, b in zip(*results)) <= 1e-6


# ------------------------------------------------------------- 5 and training runs ----


def test_integer_betas_in_toml_become_floats(tiny_recipe_text, write_recipe):
    text = tiny_recipe_text.replace("betas = [0.0, 0.99]", "betas = [0, 0.99]").replace("lr = 0.001", "lr = 1")
    assert "betas = [0, 0.99]" in text
    recipe, plugins = load_recipe(write_recipe(text), ["optim.lr=0.001"])
    assert recipe.optim.betas == (0.0, 0.99) and all(type(b) is float for b in recipe.optim.betas)
    raw_int, _ = load_recipe(write_recipe(text, "int_lr.toml"))
    assert type(raw_int.optim.lr) is float and raw_int.optim.lr == 1.0
    run = build_run(recipe, plugins)
    assert all(type(b) is float for b in run.opt_D.param_groups[0]["betas"])
    stats = train(run, max_steps=2)
    assert math.isfinite(stats["Loss/D"]) and math.isfinite(stats["Loss/G"])


@pytest.mark.parametrize("name", STRATEGIES)
def test_each_strategy_trains_the_tiny_recipe(tiny_recipe, name):
    recipe, plugins = load_recipe(tiny_recipe, [f"update.name={name}", "update.d_steps=2", "loss.name=bce"])
    run = build_run(recipe, plugins)
    g0, d0 = params(run.G), params(run.D)
    stats = train(run, max_steps=3)
    assert run.step == 3 and run.d_step == 6
    for key in ("Loss/D", "Loss/G", "Loss/D/gradient-penalty"):
        assert math.isfinite(stats[key]), key
    assert not same(g0, params(run.G)) and not same(d0, params(run.D))


class _Relativistic:
    """A relativistic-average-style G loss that needs D's logits on real images."""

    needs_real_logits = True
    seen = []

    def d_loss(self, real_logits, fake_logits):
        return torch.nn.functional.softplus(-(real_logits - fake_logits.mean())).mean() + \
            torch.nn.functional.softplus(fake_logits - real_logits.mean()).mean()

    def g_loss(self, fake_logits, real_logits=None):
        _Relativistic.seen.append(real_logits)
        return torch.nn.functional.softplus(-(fake_logits - real_logits.mean())).mean()

    def implied_penalties(self):
        return []


@pytest.mark.parametrize("strategy", ["d-then-g", "shared-fake", "g-then-d", "single-loss", "simultaneous"])
def test_losses_that_need_real_logits_get_them_in_every_strategy(tiny_recipe, strategy):
    from gan_kit.runs.session import train
    from gan_kit.recipe import load_recipe

    recipe, plugins = load_recipe(tiny_recipe, [f"update.name={strategy}", "penalty=[]"])
    run = build_run(recipe, plugins)
    run.loss = _Relativistic()
    _Relativistic.seen.clear()
    train(run, max_steps=2)
    assert _Relativistic.seen and all(r is not None and r.shape == (8,) and not r.requires_grad
                                      for r in _Relativistic.seen)
