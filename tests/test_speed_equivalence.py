"""Speed changes that keep the math: each is compared with the implementation it
replaced, kept here as the reference.

pggan: leaky ReLU in place after every conv/linear layer, the fade-in blend skipped while
stabilising (alpha = 1), in G and D, and G's nearest upsampling + 3x3 conv as one transposed
convolution. Same outputs, same weight and input gradients (double
backward of the gradient penalty included), same weights and losses after a few training steps.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from gan_kit.builtin.architectures import pggan
from gan_kit.builtin.architectures.initializers import EqualizedLR


# ------------------------------------------------------------ the replaced implementation ----


def _lrelu(x):
    return F.leaky_relu(x, 0.2)


def old_generator_forward(self, z):
    """pggan.Generator.forward before the speed changes: out-of-place leaky ReLU, blend always computed."""
    x = self.norm(z)
    x = self.norm(_lrelu(self.dense(x).reshape(z.shape[0], -1, 4, 4)))
    x = self.norm(_lrelu(self.conv4(x)))
    prev = x
    for res in self.resolutions[1:]:
        if res > self.resolution:
            break
        prev = x
        x = F.interpolate(x, scale_factor=2, mode="nearest")
        conv1, conv2 = self.blocks[str(res)]
        x = self.norm(_lrelu(conv1(x)))
        x = self.norm(_lrelu(conv2(x)))
    rgb = self.to_rgb[str(self.resolution)](x)
    if self.resolution > 4:
        low = F.interpolate(self.to_rgb[str(self.resolution // 2)](prev), scale_factor=2, mode="nearest")
        rgb = torch.lerp(low, rgb, self.alpha.to(rgb.dtype))
    return rgb


def old_discriminator_forward(self, img):
    """pggan.Discriminator.forward before the speed changes."""
    res = self.resolution
    x = _lrelu(self.from_rgb[str(res)](img))
    for r in [r for r in reversed(self.resolutions[1:]) if r <= res]:
        conv1, conv2 = self.blocks[str(r)]
        x = _lrelu(conv2(_lrelu(conv1(x))))
        x = F.avg_pool2d(x, 2)
        if r == res and res > 4:
            low = _lrelu(self.from_rgb[str(res // 2)](F.avg_pool2d(img, 2)))
            x = torch.lerp(low, x, self.alpha.to(x.dtype))
    if self.mbstd is not None:
        x = self.mbstd(x)
    x = _lrelu(self.conv4(x))
    x = _lrelu(self.dense(x.flatten(1)))
    return self.out(x).squeeze(1)


# ------------------------------------------------------------------------------- helpers ----


def _nets(res=16, alpha=1.0):
    torch.manual_seed(0)
    arch = pggan.PGGAN(pggan.PGGAN.Options(latent_dim=8, fmap_base=64, fmap_max=8))
    G, D = arch.build(16, 1)
    init = EqualizedLR()
    init.apply(G)
    init.apply(D)
    with torch.no_grad():  # non-zero biases, so every path matters
        for p in list(G.parameters()) + list(D.parameters()):
            if p.dim() == 1:
                p.normal_(0.0, 0.1)
    for net in (G, D):
        net.set_phase(res, alpha)
    return G, D


def _grads(params):
    return [None if p.grad is None else p.grad.clone() for p in params]


def _same(a, b, what, rtol=1e-6, atol=1e-7):
    assert a.shape == b.shape, what
    assert torch.allclose(a, b, rtol=rtol, atol=atol), f"{what}: max diff {(a - b).abs().max().item():.3g}"


# G's fused upsample + conv (one transposed convolution, pggan.upsample_conv) sums the same
# products in another order: equal to float32 rounding, not bit for bit.
FUSED = {"rtol": 2e-5, "atol": 2e-5}


def _gp_step(G, D, g_fwd, d_fwd, z, real, eps):
    """Forward, WGAN-GP-style double backward and a G loss; returns (logits, grads of D, grads of G)."""
    fake = g_fwd(G, z)
    x_hat = torch.lerp(fake.detach(), real, eps).requires_grad_(True)
    (g,) = torch.autograd.grad(d_fwd(D, x_hat).sum(), x_hat, create_graph=True)
    gp = ((g.flatten(1).square().sum(1) + 1e-12).sqrt() - 1.0).square().mean()
    real_logits, fake_logits = d_fwd(D, real), d_fwd(D, fake)
    d_loss = fake_logits.mean() - real_logits.mean() + 10 * gp
    D.zero_grad(set_to_none=True)
    G.zero_grad(set_to_none=True)
    torch.autograd.backward(d_loss, inputs=list(D.parameters()), retain_graph=True)
    d_grads = _grads(D.parameters())
    torch.autograd.backward(-fake_logits.mean(), inputs=list(G.parameters()))
    return torch.cat([real_logits, fake_logits, g.flatten()]).detach(), d_grads, _grads(G.parameters())


# --------------------------------------------------------------------------------- tests ----


def test_pggan_forward_and_gradients_equal_the_replaced_implementation():
    for res, alpha in ((16, 1.0), (16, 0.3), (8, 1.0), (4, 1.0)):
        G, D = _nets(res, alpha)
        torch.manual_seed(1)
        z, real, eps = torch.randn(8, 8), torch.rand(8, 1, res, res) * 2 - 1, torch.rand(8, 1, 1, 1)
        new = _gp_step(G, D, lambda g, x: g(x), lambda d, x: d(x), z, real, eps)
        old = _gp_step(G, D, old_generator_forward, old_discriminator_forward, z, real, eps)
        _same(new[0], old[0], f"{res}px alpha {alpha}: logits and GP input gradients", **FUSED)
        for which, names, new_g, old_g in (("D", [n for n, _ in D.named_parameters()], new[1], old[1]),
                                           ("G", [n for n, _ in G.named_parameters()], new[2], old[2])):
            for name, a, b in zip(names, new_g, old_g):
                if a is None and b is None:  # a layer of another resolution, unused by both
                    continue
                if a is None or b is None:
                    # Only the skipped fade path may lose its gradient, and that gradient was 0.
                    assert alpha == 1.0 and res > 4 and f"rgb.{res // 2}." in name, (which, name)
                    assert a is None and (b is None or not b.any()), (which, name)
                    continue
                _same(a, b, f"{res}px alpha {alpha}: grad of {which}.{name}", **FUSED)
        if alpha == 1.0 and res > 4:  # the skip really happened (and did skip something)
            assert any(a is None and b is not None for a, b in zip(new[1], old[1]))


def test_pggan_outputs_identical_at_the_fade_end_and_blend_used_before_it():
    G, D = _nets(16, 1.0)
    z, img = torch.randn(4, 8), torch.rand(4, 1, 16, 16)
    with torch.no_grad():
        _same(G(z), old_generator_forward(G, z), "G at the fade end", **FUSED)
        assert torch.equal(D(img), old_discriminator_forward(D, img))
        # a network whose phase was never set (e.g. just loaded) always blends with its alpha buffer
        G2, _ = _nets(16, 1.0)
        G2.stable = False
        G2.alpha.fill_(0.5)
        _same(G2(z), old_generator_forward(G2, z), "G never set", **FUSED)
        assert not torch.allclose(G2(z), G(z))


def test_training_steps_equal_the_replaced_implementation(tiny_recipe, monkeypatch, tmp_path):
    """A few d-then-g steps of the engine (4px stable, 8px fade, 8px stable) end with the same
    losses and weights as with the replaced forwards and separate D forwards on reals and fakes."""
    from gan_kit.runs.run import build_run
    from gan_kit.runs.session import train
    from gan_kit.recipe import load_recipe

    def run_steps(tag):
        recipe, plugins = load_recipe(tiny_recipe, ["run.tick_kimg=100", "run.total_kimg=100"])
        run = build_run(recipe, plugins, out_dir=tmp_path / tag)
        losses = []
        for start in (0, 48, 80):  # 4px stable, 8px mid-fade (alpha 0.2), 8px stable
            run.cur_nimg = start
            stats = train(run, max_steps=3, overwrite=True)  # one tick: the 3 steps' mean losses
            losses += [stats["Loss/D"], stats["Loss/G"], stats["Loss/D/gradient-penalty"]]
        return run, losses

    new_run, new_losses = run_steps("new")
    monkeypatch.setattr(pggan.Generator, "forward", old_generator_forward)
    monkeypatch.setattr(pggan.Discriminator, "forward", old_discriminator_forward)
    monkeypatch.setattr(pggan.PGGAN, "joint_d_forward", False)  # and two D forwards per D objective
    old_run, old_losses = run_steps("old")
    assert all(abs(a - b) <= 1e-5 * max(1.0, abs(b)) for a, b in zip(new_losses, old_losses)), (new_losses, old_losses)
    for net in ("G", "D", "G_ema"):
        for (k, a), b in zip(getattr(new_run, net).state_dict().items(), getattr(old_run, net).state_dict().values()):
            # With Adam beta1 = 0 a zero gradient moves nothing, so even the skipped layers agree.
            _same(a, b, f"{net}.{k}", **FUSED)


class OldMinibatchStddev(torch.nn.Module):
    """pggan.MinibatchStddev before the speed changes (no ``splits``)."""

    def __init__(self, group_size=4):
        super().__init__()
        self.group_size = group_size

    def forward(self, x):
        n, c, h, w = x.shape
        g = min(self.group_size, n)
        y = x.float().reshape(g, n // g, c, h, w)
        y = y - y.mean(dim=0, keepdim=True)
        std = torch.sqrt(y.square().mean(dim=0) + 1e-8)
        s = std.mean(dim=(1, 2, 3))
        s = s.repeat(g).reshape(n, 1, 1, 1).expand(n, 1, h, w).to(x.dtype)
        return torch.cat([x, s], dim=1)


def test_minibatch_stddev_equals_the_replaced_one_and_splits_keep_groups_apart():
    x = torch.randn(16, 3, 4, 4, requires_grad=True)
    for n in (16, 8, 2):
        new, old = pggan.MinibatchStddev(4)(x[:n]), OldMinibatchStddev(4)(x[:n])
        _same(new, old, f"batch {n}")
    # splits=2 on a concatenation = two separate calls (values and gradients)
    a, b = x[:8], x[8:]
    cat = pggan.MinibatchStddev(4)(x, splits=2)
    sep = torch.cat([OldMinibatchStddev(4)(a), OldMinibatchStddev(4)(b)])
    _same(cat, sep, "splits=2")
    w = torch.randn_like(cat)
    (g_cat,) = torch.autograd.grad((cat * w).sum(), x)
    (g_sep,) = torch.autograd.grad((sep * w).sum(), x)
    _same(g_cat, g_sep, "splits=2 gradient")
    # ...while one call without splits mixes the two halves' samples in its groups
    assert not torch.allclose(pggan.MinibatchStddev(4)(x), sep)


def test_discriminator_on_concatenated_batches_equals_separate_forwards():
    _, D = _nets(16, 0.5)
    real, fake = torch.rand(8, 1, 16, 16), torch.rand(8, 1, 16, 16)
    both = D(torch.cat([real, fake]), splits=2)
    _same(both, torch.cat([D(real), D(fake)]), "D(cat(real, fake), splits=2)")


# ------------------------------------------------------ benchmarks/bench_peers.py ----


def _bench_peers():
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parent.parent / "benchmarks" / "bench_peers.py"
    spec = importlib.util.spec_from_file_location("bench_peers", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_hand_written_loop_is_gankits_pggan_math():
    """The reference loop's G and D, given gankit's weights, give gankit's outputs: the benchmark
    compares the same math (stable and mid-fade)."""
    B = _bench_peers()
    cfg = B.config_from_recipe(B.DEFAULT_RECIPE, B.QUICK_SETS)
    assert cfg["batch"] == {"16": 8, "32": 8} and cfg["gp"] == 10.0 and cfg["drift"] == 0.001
    assert cfg["latent_dim"] == 16 and set(cfg["nf"].values()) == {8}
    HG, HD = B._hand_modules()
    hG, hD = HG(cfg), HD(cfg)
    torch.manual_seed(0)
    arch = pggan.PGGAN(pggan.PGGAN.Options(latent_dim=16, fmap_base=256, fmap_max=8))
    G, D = arch.build(32, 1)
    for net, hand in ((G, hG), (D, hD)):
        EqualizedLR().apply(net)
        state = {k.replace("parametrizations.weight.original", "weight"): v for k, v in net.state_dict().items()
                 if k != "alpha"}
        with torch.no_grad():
            for p in state.values():
                p.add_(0.1 * torch.randn_like(p))  # non-zero biases too
        hand.load_state_dict(state)
    z, img = torch.randn(8, 16), torch.rand(8, 1, 16, 16) * 2 - 1
    with torch.no_grad():
        for res, alpha in ((16, 1.0), (16, 0.5), (32, 0.5)):
            for net in (G, D):
                net.set_phase(res, alpha)
            x = img if res == 16 else F.interpolate(img, scale_factor=2)
            _same(hG(z, res, alpha), G(z), f"G at {res}px alpha {alpha}", **FUSED)
            _same(hD(x, res, alpha), D(x), f"D at {res}px alpha {alpha}")


def test_bench_summary_is_the_median_over_rounds_of_round_medians():
    B = _bench_peers()
    rec = [{"round": r, "phase": "s16", "system": s, "times": t} for r, s, t in (
        (0, "gankit", [1.0, 2.0, 3.0]), (0, "hand-freeze", [4.0, 4.0, 5.0]),
        (1, "gankit", [2.0, 2.0, 9.0]), (1, "hand-freeze", [3.0, 3.0, 3.0]),
        (2, "gankit", [1.0, 1.0, 1.0]), (2, "hand-freeze", [2.5, 2.5, 2.5]))]
    s = B.summarise(rec)["s16"]
    assert s["gankit"]["s_iter"] == 2.0 and s["hand-freeze"]["s_iter"] == 3.0
    assert s["hand-freeze"]["ref_speedup"] == 2.0  # round ratios 4/2, 3/2, 2.5/1 -> median 2
    assert s["gankit"]["ref_speedup"] == 1.0


def test_bench_peers_quick_run_times_every_system(tmp_path):
    """The smoke mode runs end to end: one worker process per system, a figure and a peak RSS
    for each, the table printed."""
    import json
    import subprocess
    import sys
    from pathlib import Path

    script = Path(__file__).resolve().parent.parent / "benchmarks" / "bench_peers.py"
    out = tmp_path / "r.json"
    p = subprocess.run([sys.executable, str(script), "--quick", "--quiet", "--phases", "s16", "--json", str(out)],
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr[-2000:]
    result = json.loads(out.read_text())
    assert result["systems"] == ["gankit", "hand-detach", "hand-freeze"]
    for name in result["systems"]:
        entry = result["summary"]["s16"][name]
        assert entry["rounds"] == 1 and 0 < entry["s_iter"] < 30
        assert 100 < result["rss_mib"][name] < 4096
    assert "| 16x16 stable, s/iter |" in p.stdout and "peak RSS, MiB" in p.stdout


def test_bench_peers_refuses_a_recipe_it_cannot_mirror(tmp_path):
    import subprocess
    import sys
    from pathlib import Path

    script = Path(__file__).resolve().parent.parent / "benchmarks" / "bench_peers.py"
    p = subprocess.run([sys.executable, str(script), "--quick", "--set", "loss.name=hinge"],
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 2
    assert p.stderr.strip().splitlines()[-1].startswith("error: ") and "loss.name: 'hinge'" in p.stderr
    assert "Traceback" not in p.stderr


def test_upsample_conv_is_nearest_upsampling_then_the_convolution():
    """pggan.upsample_conv equals interpolate + conv in float64 (values, input and weight
    gradients, second derivatives), through a weight parametrization, and falls back to the plain
    path for a convolution it cannot fuse."""
    from torch.nn.utils.parametrizations import spectral_norm

    torch.manual_seed(0)
    def equalized():
        conv = torch.nn.Conv2d(5, 7, 3, padding=1)
        EqualizedLR().apply(conv)
        return conv

    for make in (lambda: torch.nn.Conv2d(5, 7, 3, padding=1), equalized,
                 lambda: spectral_norm(torch.nn.Conv2d(5, 7, 3, padding=1)).eval(),
                 lambda: torch.nn.Conv2d(5, 7, 1),
                 lambda: torch.nn.Conv2d(5, 7, 3, padding=1, padding_mode="reflect")):
        conv = make()
        conv = conv.double()
        x = torch.randn(3, 5, 6, 6, dtype=torch.float64, requires_grad=True)
        fused = pggan.upsample_conv(conv, x)
        plain = conv(F.interpolate(x, scale_factor=2, mode="nearest"))
        assert fused.shape == (3, 7, 12, 12)
        assert torch.allclose(fused, plain, rtol=1e-12, atol=1e-12), (fused - plain).abs().max()
        w = torch.randn_like(fused)
        params = [p for name, p in sorted(conv.named_parameters()) if "weight" in name] + [conv.bias]
        g_fused = torch.autograd.grad((fused * w).sum(), [x, *params], create_graph=True)
        g_plain = torch.autograd.grad((plain * w).sum(), [x, *params], create_graph=True)
        for a, b in zip(g_fused, g_plain):
            assert torch.allclose(a, b, rtol=1e-12, atol=1e-12)
        # second order (the gradient penalty's double backward passes through G's fakes only
        # as data, but a G penalty such as path length differentiates G's input gradients)
        (h_fused,) = torch.autograd.grad(g_fused[0].square().sum(), params[0])
        (h_plain,) = torch.autograd.grad(g_plain[0].square().sum(), params[0])
        assert torch.allclose(h_fused, h_plain, rtol=1e-10, atol=1e-10)


def test_upsample_conv_keeps_the_plain_path_for_hooks_and_custom_forwards():
    """A forward hook (feature extraction), the hook-based spectral norm and a Conv2d subclass
    with its own forward see ``upsample_conv`` exactly as ``conv(upsampled x)``."""
    torch.manual_seed(0)
    x = torch.randn(2, 3, 4, 4)

    conv = torch.nn.Conv2d(3, 5, 3, padding=1)
    seen = []
    handle = conv.register_forward_hook(lambda m, args, out: seen.append(args[0].shape))
    pggan.upsample_conv(conv, x)
    assert seen == [(2, 3, 8, 8)]  # the hook ran, on the upsampled input
    handle.remove()
    pggan.upsample_conv(conv, x)
    assert len(seen) == 1  # no hook left: the fused path

    old_sn = torch.nn.utils.spectral_norm(torch.nn.Conv2d(3, 5, 3, padding=1))
    out = pggan.upsample_conv(old_sn, x)
    out.square().sum().backward()
    assert old_sn.weight_orig.grad is not None  # the pre-hook recomputed the weight from weight_orig

    class Doubled(torch.nn.Conv2d):
        def forward(self, inp):
            return 2 * super().forward(inp)

    conv2 = Doubled(3, 5, 3, padding=1)
    _same(pggan.upsample_conv(conv2, x), conv2(F.interpolate(x, scale_factor=2, mode="nearest")), "subclass")
