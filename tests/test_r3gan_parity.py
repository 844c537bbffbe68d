"""gankit's ``r3gan`` against the official R3GAN code (github.com/brownvc/R3GAN), point by point.

``tests/data/r3gan_reference.pt`` holds what the official code computed for fixed seeds (written
by ``tests/data/make_r3gan_reference.py``, which runs a checkout of it; see that script for what
is recorded). Here gankit's networks take the official networks' weights (renamed by
``gan_kit.builtin.importers.r3gan_official``, the official-snapshot reader; nothing else) and must give the same forwards, the same RpGAN loss, R1 and R2, the same gradients of both
networks over one training iteration of its ``d-then-g`` strategy (and the lazy R1 + R2 step),
the same initialisation statistics, resampling filters, schedules and G_ema decay, unconditional
and class-conditional. Any one term changed - a sign, a gain, an exponent, a filter tap, a
missing R2 - moves some number here beyond rounding.
"""

from __future__ import annotations

import math
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from gan_kit.base.phase import Phase
from gan_kit.builtin.architectures.r3gan import R3GAN, Downsample, Upsample
from gan_kit.builtin.importers.r3gan_official import gankit_key, r3gan_state_dict
from gan_kit.builtin.objectives.losses import RpGAN
from gan_kit.builtin.objectives.penalties import R1, R2, LazyOptions
from gan_kit.builtin.objectives.strategies import DThenG
from gan_kit.builtin.schedules import Cosine
from gan_kit.plugin_api.components import BuildContext, WeightedPenalty
from gan_kit.runs.engine import lazy_regularization
from gan_kit.training.ema import ema_beta
from gan_kit.training.step import StepContext

REF = torch.load(Path(__file__).parent / "data" / "r3gan_reference.pt", weights_only=True)
CASES = ["unconditional", "conditional"]
ATOL = 1e-5


# ------------------------------------------------------------------ official -> gankit names --
# The renaming is the importer's (gan_kit.builtin.importers.r3gan_official), so the one mapping
# that reads official snapshots is the one these forwards and gradients check. The recorded state
# dicts are R3GAN.Networks' own; the snapshot wrappers hold them under ``Model.``.


def g_names(name: str) -> str:
    """An official Generator parameter's name in gankit's Generator."""
    return gankit_key(f"Model.{name}", "G")


def d_names(name: str, blocks: list[int]) -> str:
    """An official Discriminator parameter's name in gankit's. ``blocks``: D's blocks per stage."""
    return gankit_key(f"Model.{name}", "D", blocks)


def options_of(config: dict, classes: dict | None) -> dict:
    """``config`` as the importer's options (what ``r3gan_options`` returns)."""
    o = gankit_options(config, classes)
    arch = {"latent_dim": o.latent_dim, "width_by_resolution": o.width_by_resolution,
            "cardinality_by_resolution": o.cardinality_by_resolution, "blocks_by_resolution": o.blocks_by_resolution,
            "expansion": o.expansion, "kernel_size": o.kernel_size}
    if classes:
        arch |= {"g_class_dim": o.g_class_dim, "d_class_dim": o.d_class_dim}
    return {"resolution": config["resolution"], "channels": config["channels"],
            "num_classes": classes["num_classes"] if classes else 0, "architecture": arch}


def gankit_options(config: dict, classes: dict | None = None) -> R3GAN.Options:
    stages = [4 * 2 ** i for i in range(len(config["widths"]))]
    return R3GAN.Options(latent_dim=config["latent_dim"], width_by_resolution=dict(zip(stages, config["widths"])),
                         cardinality_by_resolution=dict(zip(stages, config["cardinalities"])),
                         blocks_by_resolution=dict(zip(stages, config["blocks"])), expansion=config["expansion"],
                         kernel_size=config["kernel"], g_class_dim=classes and classes["g_class_dim"],
                         d_class_dim=classes and classes["d_class_dim"])


def networks(case: str):
    """gankit's G and D with the official weights of ``case`` (renamed by the importer); and the
    D's block counts."""
    cfg, classes = REF["config"], REF["classes"] if case == "conditional" else None
    options = options_of(cfg, classes)
    arch = R3GAN(gankit_options(cfg, classes), BuildContext(resolution=cfg["resolution"], channels=cfg["channels"],
                                                            num_classes=options["num_classes"]))
    G, D = arch.build(cfg["resolution"], cfg["channels"])
    d_blocks = list(reversed(cfg["blocks"]))
    # strict: every parameter filled (the importer checks it too); the resampling filters are
    # non-persistent buffers, in no state dict.
    G.load_state_dict(r3gan_state_dict({f"Model.{k}": v for k, v in REF[case]["G"].items()}, "G", options))
    D.load_state_dict(r3gan_state_dict({f"Model.{k}": v for k, v in REF[case]["D"].items()}, "D", options))
    return G, D, d_blocks


def labels_of(case: str):
    return REF[case]["labels"]


# ------------------------------------------------------------------------------- forwards --

@pytest.mark.parametrize("case", CASES)
def test_g_and_d_forwards_equal_the_official_networks(case):
    G, D, _ = networks(case)
    ref, y = REF[case], labels_of(case)
    with torch.no_grad():
        fake = G(ref["z_d"]) if y is None else G(ref["z_d"], y)
        assert torch.allclose(fake, ref["forward"]["fake"], atol=ATOL, rtol=1e-4)
        for images, key in ((ref["real"], "real_logits"), (ref["forward"]["fake"], "fake_logits")):
            logits = D(images) if y is None else D(images, y)
            assert logits.shape == (REF["batch"],)
            assert torch.allclose(logits, ref["forward"][key], atol=ATOL, rtol=1e-4), key
        # The joint forward the D objective runs gives the same logits.
        both = torch.cat([ref["real"], ref["forward"]["fake"]])
        joint = D(both, splits=2) if y is None else D(both, torch.cat([y, y]), splits=2)
        expected = torch.cat([ref["forward"]["real_logits"], ref["forward"]["fake_logits"]])
        assert torch.allclose(joint, expected, atol=ATOL, rtol=1e-4)


def test_resampling_equals_the_official_interpolative_resamplers():
    ref = REF["resampling"]
    assert torch.allclose(Upsample(3, 3).kernel[0, 0] / 4, ref["kernel"], atol=0)  # [1,3,3,1] x [1,3,3,1] / 64
    with torch.no_grad():
        assert torch.allclose(Upsample(3, 3)(ref["low"]), ref["up"], atol=1e-6)
        assert torch.allclose(Downsample(3, 3)(ref["high"]), ref["down"], atol=1e-6)


# -------------------------------------------------------------------- loss and penalties --

def context(G, D, reals, latents, *, penalties=(), lr=0.0, labels=None):
    """A StepContext over G and D with plain SGD (each weight moves by ``-lr * grad``) and
    ``latents`` handed out in turn by ``ctx.latent``."""
    queue = list(latents)
    phase = Phase(index=0, resolution=REF["config"]["resolution"], alpha=1.0, batch_size=REF["batch"])
    return StepContext(G=G, D=D, opt_G=torch.optim.SGD(G.parameters(), lr=lr),
                       opt_D=torch.optim.SGD(D.parameters(), lr=lr), loss=RpGAN(), penalties=list(penalties),
                       reals=[reals], labels=[labels], latent=lambda n: queue.pop(0), phase=phase,
                       joint_d_forward=R3GAN.joint_d_forward)


@pytest.mark.parametrize("case", CASES)
def test_rpgan_r1_and_r2_equal_the_official_loss(case):
    ref, it = REF[case], REF[case]["iteration"]
    G, D, _ = networks(case)
    fwd = ref["forward"]
    loss = RpGAN()
    assert torch.allclose(loss.d_loss(fwd["real_logits"], fwd["fake_logits"]), it["d_adversarial"].mean(), atol=1e-6)
    assert torch.allclose(it["d_relativistic"], fwd["real_logits"] - fwd["fake_logits"], atol=ATOL)
    gamma = it["gamma"]
    ctx = context(G, D, ref["real"], [ref["z_d"]], labels=labels_of(case),
                  penalties=[WeightedPenalty("r1", R1(), gamma), WeightedPenalty("r2", R2(), gamma)])
    total, stats = ctx.d_objective(ref["real"], fwd["fake"], labels=labels_of(case))
    # gankit's penalties are 0.5 * E||grad||^2, weighted by gamma: the official gamma/2 * (R1 + R2).
    assert torch.allclose(stats["Loss/D/r1"], 0.5 * it["r1"].mean(), rtol=1e-4)
    assert torch.allclose(stats["Loss/D/r2"], 0.5 * it["r2"].mean(), rtol=1e-4)
    official = (it["d_adversarial"] + gamma / 2 * (it["r1"] + it["r2"])).mean()
    assert torch.allclose(total, official, rtol=1e-5)


def _assert_grads(net, expected: dict, rename, scale: float = 1.0, what: str = ""):
    got = {k: p.grad for k, p in net.named_parameters()}
    for name, g in expected.items():
        ours = got[rename(name)]
        assert ours is not None, f"{what}: no gradient for {rename(name)}"
        assert torch.allclose(ours, scale * g, atol=2e-5, rtol=1e-3), f"{what}: {rename(name)}"


def _assert_moved(before: dict, net, expected: dict, rename, lr: float, what: str):
    """Each weight moved by ``-lr * grad`` (plain SGD), ``grad`` the official gradient."""
    after = dict(net.named_parameters())
    for name, g in expected.items():
        key = rename(name)
        delta = (after[key].detach() - before[key]) / -lr
        assert torch.allclose(delta, g, atol=5e-5, rtol=1e-3), f"{what}: {key}"


@pytest.mark.parametrize("case", CASES)
def test_one_d_then_g_iteration_moves_both_networks_as_the_official_loop(case):
    """The D step (RpGAN + gamma/2 (R1 + R2) on the D step's fakes), D's update, then G's step
    through the updated D (RpGAN against D's logits on the real batch): every weight moves by the
    official gradients."""
    ref, it = REF[case], REF[case]["iteration"]
    G, D, d_blocks = networks(case)
    lr, gamma = it["sgd_lr"], it["gamma"]
    ctx = context(G, D, ref["real"], [ref["z_d"], ref["z_g"]], lr=lr, labels=labels_of(case),
                  penalties=[WeightedPenalty("r1", R1(), gamma), WeightedPenalty("r2", R2(), gamma)])
    g0 = {k: p.detach().clone() for k, p in G.named_parameters()}
    d0 = {k: p.detach().clone() for k, p in D.named_parameters()}
    stats = DThenG().step(ctx)
    _assert_moved(d0, D, it["d_grads"], lambda k: d_names(k, d_blocks), lr, "D")
    _assert_moved(g0, G, it["g_grads"], g_names, lr, "G")
    assert torch.allclose(stats["Loss/G"], it["g_adversarial"].mean(), rtol=1e-5)
    assert torch.allclose(stats["Loss/D"], it["d_adversarial"].mean(), rtol=1e-5)


@pytest.mark.parametrize("case", CASES)
def test_lazy_r1_r2_step_is_the_interval_times_the_official_penalty_gradient(case):
    """gankit's lazy form (StyleGAN2 sec. 3.1): every k-th iteration a D step of its own on
    ``k * gamma * (R1 + R2) / 2``: its gradient is k times the official penalties' (the official
    D gradient with gamma less the one without), on the same reals and fakes."""
    ref, it = REF[case], REF[case]["iteration"]
    G, D, d_blocks = networks(case)
    k, gamma = 4, it["gamma"]
    lazy = [WeightedPenalty("r1", R1(LazyOptions(interval=k)), gamma),
            WeightedPenalty("r2", R2(LazyOptions(interval=k)), gamma)]
    ctx = context(G, D, ref["real"], [ref["z_d"]], labels=labels_of(case))
    # What the lazy step reads of a run: its lazy penalties, no GradScaler (fp32), no step to retry.
    lazy_regularization(SimpleNamespace(lazy_penalties=lazy, scaler=None, lazy_retry=()), ctx)
    penalty_grads = {name: it["d_grads"][name] - it["d_grads_without_penalties"][name] for name in it["d_grads"]}
    _assert_grads(D, penalty_grads, lambda n: d_names(n, d_blocks), scale=k, what="lazy D")


# ----------------------------------------------------------------- init, schedules, EMA --

@pytest.mark.parametrize("key", ["init", "init_conditional"])
def test_initialisation_statistics_equal_the_official_fixup_init(key):
    """Per parameter: the same share of exact zeros (the residual ends, the biases), mean 0 and
    the same standard deviation (He init with the leaky-ReLU gain times L^-1/4 in the branches,
    gain 1 elsewhere, N(0, 1) for G's 4x4 basis, 1/sqrt(dim) for D's class embedding), within
    sampling error."""
    ref = REF[key]
    cfg, classes = ref["config"], ref["classes"]
    k = classes["num_classes"] if classes else 0
    arch = R3GAN(gankit_options(cfg, classes), BuildContext(resolution=16, channels=3, num_classes=k))
    torch.manual_seed(0)
    G, D = arch.build(16, 3)
    d_blocks = list(reversed(cfg["blocks"]))
    ours = {f"G.{k}": p for k, p in G.named_parameters()} | {f"D.{k}": p for k, p in D.named_parameters()}
    assert len(ours) == len(ref["stats"])
    for name, (mean, std, zeros) in ref["stats"].items():
        net, rest = name.split(".", 1)
        p = ours[f"{net}.{g_names(rest) if net == 'G' else d_names(rest, d_blocks)}"].detach().double()
        assert (p == 0).double().mean().item() == pytest.approx(zeros.item()), name
        if std > 0:
            n = p.numel()
            assert p.std().item() == pytest.approx(std.item(), rel=4 / math.sqrt(n) + 0.005), name
            assert abs(p.mean().item()) < 6 * std.item() / math.sqrt(n), name


SCHEDULE_KEYS = {"lr": "lr", "beta2": "beta2", "gamma": "gamma", "ema_nimg": "ema_nimg", "aug_p": "aug_p"}


@pytest.mark.parametrize("key", sorted(SCHEDULE_KEYS))
def test_cosine_schedules_equal_the_official_cosine_decay(key):
    """gankit's ``cosine`` schedule with the preset's end points over ``kimg = decay_nimg / 1000``
    equals the official ``cosine_decay_with_warmup`` at every recorded images-shown count."""
    s = REF["schedules"]
    first, last = s["preset"][key]
    schedule = Cosine(Cosine.Options(start=first, end=last, kimg=s["decay_nimg"] / 1000))
    ours = torch.tensor([schedule.value(nimg, total_nimg=10 ** 9) for nimg in s["nimg"]], dtype=torch.float64)
    assert torch.allclose(ours, s["values"][key], rtol=1e-12, atol=1e-18)


def test_ema_decay_equals_the_official_loop():
    """G_ema's per-iteration beta from the scheduled half-life (``ema.half_life_kimg`` =
    the official ema_nimg / 1000, no ramp-up): ``0.5 ** (batch / half-life images)``, 0 (G_ema a
    copy of G) while the half-life is 0."""
    s = REF["schedules"]
    first, last = s["preset"]["ema_nimg"]
    half_life = Cosine(Cosine.Options(start=first / 1000, end=last / 1000, kimg=s["decay_nimg"] / 1000))
    ours = torch.tensor([ema_beta(None, half_life.value(nimg, 10 ** 9), None, s["batch"], nimg) for nimg in s["nimg"]],
                        dtype=torch.float64)
    assert torch.allclose(ours, s["values"]["ema_beta"], rtol=1e-9, atol=0)
    assert ours[0] == 0.0
