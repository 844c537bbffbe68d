"""StyleGAN2 architecture and path-length penalty."""

from __future__ import annotations

import contextlib
import math
from types import SimpleNamespace

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import gan_kit.builtin.architectures.stylegan2 as sg2
from gan_kit import GankitError, RecipeError
from gan_kit.runs.run import build_run
from gan_kit.runs.session import train
from gan_kit.plugin_api.manager import build_plugins
from gan_kit.recipe import load_recipe


def small(**kw):
    o = dict(latent_dim=8, w_dim=8, mapping_layers=2, channel_base=64, channel_max=8)
    o.update(kw)
    return sg2.StyleGAN2(sg2.StyleGAN2.Options(**o))


# ------------------------------------------------------------------------ modulated convolution --


def defining_formula(x, weight, styles, demodulate, eps=1e-8):
    """Eq. 1-3 written out: per sample, per output channel, kernel offsets as shifted slices."""
    n, cin, h, w = x.shape
    cout, _, k, _ = weight.shape
    p = k // 2
    xp = F.pad(x, (p, p, p, p))
    out = torch.zeros(n, cout, h, w, dtype=x.dtype)
    for s in range(n):
        for o in range(cout):
            wm = weight[o] * styles[s].reshape(cin, 1, 1)  # eq. 1: scale input channel i by s_i
            if demodulate:
                wm = wm / torch.sqrt((wm ** 2).sum() + eps)  # eq. 3: demodulate output channel o
            for dy in range(k):
                for dx in range(k):
                    out[s, o] += (wm[:, dy, dx].reshape(cin, 1, 1) * xp[s, :, dy:dy + h, dx:dx + w]).sum(0)
    return out


@pytest.mark.parametrize("demodulate", [True, False])
def test_modulated_conv_fast_and_naive_paths_equal_the_defining_formula(demodulate):
    g = torch.Generator().manual_seed(1)
    x = torch.randn(3, 4, 6, 6, generator=g, dtype=torch.float64)
    weight = torch.randn(5, 4, 3, 3, generator=g, dtype=torch.float64)
    styles = torch.rand(3, 4, generator=g, dtype=torch.float64) * 2 + 0.2
    want = defining_formula(x, weight, styles, demodulate)
    fast = sg2.modulated_conv2d(x, weight, styles, demodulate=demodulate, padding=1)
    naive = sg2.modulated_conv2d_naive(x, weight, styles, demodulate=demodulate, padding=1)
    scaled = sg2.modulated_conv2d_scaled(x, weight, styles, demodulate=demodulate, padding=1)
    torch.testing.assert_close(fast, want, rtol=1e-10, atol=1e-10)
    torch.testing.assert_close(scaled, want, rtol=1e-10, atol=1e-10)
    torch.testing.assert_close(naive, want, rtol=1e-10, atol=1e-10)


def test_demodulated_output_has_unit_variance_for_unit_variance_input():
    g = torch.Generator().manual_seed(2)
    x = torch.randn(4, 32, 40, 40, generator=g)
    weight = torch.randn(8, 32, 3, 3, generator=g) * 3.0
    styles = torch.rand(4, 32, generator=g) * 4 + 0.1  # far from unit styles
    inner = (slice(None), slice(None), slice(1, -1), slice(1, -1))  # padding lowers the border variance
    y = sg2.modulated_conv2d(x, weight, styles, demodulate=True, padding=1)[inner]
    var = y.var(dim=(2, 3))  # [N, Cout], 38*38 pixels each
    assert torch.allclose(var, torch.ones_like(var), atol=0.15), var
    assert abs(var.mean().item() - 1.0) < 0.03
    plain = sg2.modulated_conv2d(x, weight, styles, demodulate=False, padding=1)[inner].var(dim=(2, 3))
    assert plain.mean().item() > 10  # without demodulation the scale of w and s passes through


def test_modulated_conv_layer_paths_agree():
    layer = sg2.ModulatedConv(4, 6, 5, 8, up=True)
    assert layer.modconv == "grouped"  # the default forward path
    with torch.no_grad():
        layer.noise_strength.fill_(0.3)
    x, w = torch.randn(3, 4, 4, 4), torch.randn(3, 5)
    out = {}
    for mode in ("grouped", "scaled", "naive"):
        layer.modconv = mode
        out[mode] = layer(x, w, "const")
    assert out["grouped"].shape == (3, 6, 8, 8)
    torch.testing.assert_close(out["grouped"], out["naive"], rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(out["scaled"], out["naive"], rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("path", ["grouped", "scaled", "naive"])
def test_fp16_modulated_conv_stays_in_range_where_the_unnormalised_one_overflows(path):
    """fp16 activations: weight and styles are pre-normalised (stylegan2-ada-pytorch) before the
    convolution, which demodulation makes the same result; unnormalised, x * s and the scaled
    path's convolution pass fp16's 65504 for activations ~100 and styles ~150."""
    g = torch.Generator().manual_seed(4)
    x = torch.randn(2, 64, 8, 8, generator=g) * 100
    weight = torch.randn(32, 64, 3, 3, generator=g) / 24.0
    styles = torch.rand(2, 64, generator=g) * 200 + 50
    fn = {"grouped": sg2.modulated_conv2d, "scaled": sg2.modulated_conv2d_scaled,
          "naive": sg2.modulated_conv2d_naive}[path]
    want = defining_formula(x.double(), weight.double(), styles.double(), demodulate=True)
    got = fn(x.half(), weight, styles.half(), padding=1)
    assert got.dtype == torch.float16 and torch.isfinite(got).all()
    assert (got.double() - want).abs().max() <= 2e-3 * want.abs().max()
    assert torch.isinf(F.conv2d(x.half() * styles.half().reshape(2, 64, 1, 1), weight.half(), padding=1)).any()
    # Not fp16: the weights and styles are used as they are, bit for bit.
    d = torch.rsqrt((styles.square().unsqueeze(1) * weight.square().sum(dim=(2, 3))).sum(2) + 1e-8)
    assert torch.equal(sg2.modulated_conv2d_scaled(x, weight, styles, padding=1),
                       F.conv2d(x * styles.reshape(2, 64, 1, 1), weight, padding=1) * d.reshape(2, 32, 1, 1))


# --------------------------------------------------------------------------------- path length --


class TinyG(nn.Module):
    """A stand-in G with a known structure and no RNG of its own."""

    latent_dim, num_ws, w_dim = 4, 3, 5

    def __init__(self):
        super().__init__()
        self.M = nn.Parameter(torch.randn(4, 5))
        self.A = nn.Parameter(torch.randn(3, 5, 2 * 4 * 4) * 0.3)

    def mapping(self, z, truncation_psi=1.0):
        return (z @ self.M).unsqueeze(1).expand(-1, self.num_ws, -1)

    def synthesis(self, ws, noise_mode="random"):
        return torch.tanh(torch.einsum("nlw,lwp->np", ws, self.A)).reshape(-1, 2, 4, 4)


def make_ctx(latents, asked):
    it = iter(latents)

    def latent(n):
        asked.append(n)
        return next(it)

    return SimpleNamespace(latent=latent, autocast=contextlib.nullcontext, mean_over_processes=lambda t: t,
                           gradients=lambda out, x: torch.autograd.grad(out, x, create_graph=True)[0],
                           stage=lambda net, owner, name, value: setattr(owner, name, value))  # every step applied


def expected_lengths(G, z, seed):
    """|J_w^T y| from the explicit Jacobian of the synthesis, y drawn as the penalty draws it."""
    ws = G.mapping(z).detach()
    torch.manual_seed(seed)
    y = torch.randn(z.shape[0], 2, 4, 4) / math.sqrt(16)
    out = []
    for i in range(z.shape[0]):
        J = torch.autograd.functional.jacobian(lambda w: G.synthesis(w.unsqueeze(0)).flatten(), ws[i])  # [32, L, W]
        jy = torch.einsum("p,plw->lw", y[i].flatten(), J)
        out.append(torch.sqrt(jy.square().sum() / G.num_ws))
    return torch.stack(out)


def test_path_length_running_mean_follows_the_exponential_average():
    G = TinyG()
    pen = sg2.PathLength(sg2.PathLength.Options(decay=0.3, batch_shrink=2))
    latents = [torch.randn(4, 4) for _ in range(4)]
    asked = []
    ctx = make_ctx(latents, asked)
    a = torch.zeros((), dtype=torch.float64)
    for k, z in enumerate(latents):
        torch.manual_seed(100 + k)
        value = pen(SimpleNamespace(G=G, batch_size=8), ctx)
        lengths = expected_lengths(G, z, 100 + k).double()
        a = a + 0.3 * (lengths.mean() - a)
        assert pen.pl_mean.item() == pytest.approx(a.item(), rel=1e-5)
        assert value.item() == pytest.approx(((lengths - a) ** 2).mean().item(), rel=1e-4, abs=1e-7)
    assert asked == [4, 4, 4, 4]  # per-process batch 8 // batch_shrink 2
    assert pen.pl_mean.item() > 0.05


def test_path_length_state_dict_round_trip():
    G = TinyG()
    pen = sg2.PathLength()
    z1, z2 = torch.randn(2, 4), torch.randn(2, 4)
    pen(SimpleNamespace(G=G, batch_size=4), make_ctx([z1], []))
    state = pen.state_dict()
    other = sg2.PathLength()
    other.load_state_dict(state)
    assert other.pl_mean.item() == pen.pl_mean.item() != 0
    torch.manual_seed(5)
    v1 = pen(SimpleNamespace(G=G, batch_size=4), make_ctx([z2], []))
    torch.manual_seed(5)
    v2 = other(SimpleNamespace(G=G, batch_size=4), make_ctx([z2], []))
    assert torch.equal(v1, v2) and torch.equal(pen.pl_mean, other.pl_mean)
    with pytest.raises(GankitError, match="pl_mean"):
        other.load_state_dict({})


def test_path_length_on_stylegan2_g_is_not_scaled_by_the_interval_and_trains_g():
    G, _ = small().build(8, 1)
    latents = [torch.randn(2, 8)] * 2
    values = []
    for interval in (1, 8):
        pen = sg2.PathLength(sg2.PathLength.Options(interval=interval))
        torch.manual_seed(3)
        values.append(pen(SimpleNamespace(G=G, batch_size=4), make_ctx(latents, [])))
    assert pen.interval == 8
    assert values[0].item() == pytest.approx(values[1].item()) and values[0].item() > 0
    values[1].backward()
    assert G.mapping_network.layers[0].weight.grad.abs().sum() > 0
    assert G.convs["8"][0].weight.grad.abs().sum() > 0


# ---------------------------------------------------------------------------------- truncation --


def test_w_avg_follows_its_running_average_in_training_forward_only():
    G, _ = small(w_avg_beta=0.9).build(8, 1)
    z = torch.randn(4, 8)
    G.train()
    G(z)
    want = G.mapping_network(z).mean(0).detach() * 0.1
    torch.testing.assert_close(G.w_avg, want)
    G.eval()
    G(torch.randn(4, 8))
    torch.testing.assert_close(G.w_avg, want)


def test_truncation_psi_0_gives_the_average_w_image_and_psi_1_the_untruncated_one():
    G, _ = small().build(16, 1)
    G.train()
    for _ in range(5):
        G(torch.randn(8, 8))  # move w_avg away from zero
    G.eval()
    z = torch.randn(4, 8)
    with torch.no_grad():
        avg_img = G.synthesis(G.w_avg.reshape(1, 1, -1).expand(1, G.num_ws, -1), noise_mode="const")
        img0 = G(z, truncation_psi=0.0, noise_mode="const")
        img1 = G(z, truncation_psi=1.0, noise_mode="const")
        plain = G.synthesis(G.mapping(z), noise_mode="const")
        ws_half = G.mapping(z, truncation_psi=0.5)
    for i in range(4):
        torch.testing.assert_close(img0[i], avg_img[0])
    assert torch.equal(img1, plain)
    assert (img1 - img0).abs().max() > 1e-2
    w = G.mapping_network(z)
    torch.testing.assert_close(ws_half[:, 3], G.w_avg + 0.5 * (w - G.w_avg))


# ------------------------------------------------------------------------- networks and options --


@pytest.mark.parametrize("res", [16, 32])
def test_shapes_and_d_depends_on_the_image(res):
    G, D = small().build(res, 1)
    z = torch.randn(4, 8)
    img = G(z)
    assert img.shape == (4, 1, res, res) and G.num_ws == 2 * int(math.log2(res)) - 2
    logits = D(img)
    assert logits.shape == (4,)
    other = D(img + torch.randn_like(img))
    assert (logits - other).abs().max() > 1e-4


def test_gradients_reach_every_g_and_d_parameter():
    G, D = small().build(16, 1)
    G.train()
    torch.manual_seed(7)  # style mixing happens with probability 0.9; this seed mixes
    D(G(torch.randn(4, 8))).sum().backward()
    for net, name in ((G, "G"), (D, "D")):
        missing = [n for n, p in net.named_parameters() if p.grad is None or p.grad.abs().sum() == 0]
        assert missing == [], f"{name}: {missing}"


def test_style_mixing_replaces_ws_from_a_cutoff_on():
    G, _ = small(style_mixing_prob=1.0).build(16, 1)
    ws = G.mapping(torch.randn(3, 8))
    for seed in range(5):
        torch.manual_seed(seed)
        mixed = G.mix_styles(ws)
        same = [torch.equal(mixed[:, i], ws[:, i]) for i in range(G.num_ws)]
        cut = same.index(False)
        assert 1 <= cut < G.num_ws and all(same[:cut]) and not any(same[cut:])
        assert all(torch.equal(mixed[:, i], mixed[:, cut]) for i in range(cut, G.num_ws))
    G.style_mixing_prob = 0.0
    assert torch.equal(G.mix_styles(ws), ws)


def test_mapping_lr_multiplier_scales_the_effective_weight():
    G, _ = small(mapping_lr_mult=0.01, latent_dim=64, w_dim=64).build(8, 1)
    layer = G.mapping_network.layers[0]
    torch.testing.assert_close(layer.effective_weight(), layer.weight * 0.01 / math.sqrt(64))
    assert 80 < layer.weight.std().item() < 120  # stored N(0, 1) / lr_mult
    x = torch.randn(3, 64)
    want = F.leaky_relu(F.linear(x, layer.weight * 0.01 / 8, layer.bias * 0.01), 0.2) * math.sqrt(2)
    torch.testing.assert_close(layer(x), want)


# ----------------------------------------------------------------------------- recipe & engine --


def sg2_recipe(tmp_path, text, extra=""):
    """conftest's tiny recipe as 16x16 stylegan2, static growth, lazy r1 on D."""
    arch = text[text.index("[architecture]"):text.index("[init]")]
    text = text.replace(arch, "[architecture]\nname = \"stylegan2\"\nlatent_dim = 8\nw_dim = 8\n"
                              "mapping_layers = 2\nchannel_base = 64\nchannel_max = 8\n\n")
    growth = text[text.index("[growth]"):text.index("[optim]")]
    text = text.replace(growth, "[growth]\nname = \"static\"\nbatch_size = 8\n\n")
    text = text.replace("resolution = 8", "resolution = 16")
    text = text.replace('name = "gradient-penalty"\nweight = 10.0', 'name = "r1"\nweight = 1.0\ninterval = 2')
    path = tmp_path / "sg2.toml"
    path.write_text(text + extra, encoding="utf-8")
    return path


def test_trains_through_the_engine_with_r1(tmp_path, tiny_recipe_text):
    recipe, plugins = load_recipe(sg2_recipe(tmp_path, tiny_recipe_text), extra_plugins=[sg2])
    run = build_run(recipe, plugins)
    before = {n: p.detach().clone() for n, p in run.G.named_parameters()}
    stats = train(run, max_steps=2)
    assert math.isfinite(stats["Loss/D"]) and math.isfinite(stats["Loss/G"])
    changed = [n for n, p in run.G.named_parameters() if not torch.equal(p, before[n])]
    assert "const" in changed and any(n.startswith("mapping_network") for n in changed)
    assert run.G.w_avg.abs().sum() > 0
    assert torch.equal(run.G_ema.w_avg, run.G.w_avg)


def test_recipe_problems_name_growth_and_init(tmp_path, tiny_recipe_text):
    path = sg2_recipe(tmp_path, tiny_recipe_text)
    with pytest.raises(RecipeError) as e:
        load_recipe(path, ["growth.name=progressive", "init.name=normal"], extra_plugins=[sg2])
    msg = str(e.value)
    assert "growth.name" in msg and "static" in msg
    assert "init.name" in msg and "'normal'" in msg


PL = '\n[[penalty]]\nname = "path-length"\nweight = 2.0\ninterval = 4\n'


def test_lazy_path_length_runs_every_kth_iteration_with_gain_k_and_one_optimizer_correction(tmp_path, tiny_recipe_text):
    path = sg2_recipe(tmp_path, tiny_recipe_text, PL)
    recipe, plugins = load_recipe(path, ["penalty.0.interval=16"])
    run = build_run(recipe, plugins)
    assert [p.name for p in run.lazy_penalties] == ["r1", "path-length"]
    g_ratio, d_ratio = 4 / 5, 16 / 17
    for opt, base, ratio in ((run.opt_G, recipe.optim.lr, g_ratio), (run.opt_D, recipe.optim.lr, d_ratio)):
        (group,) = opt.param_groups
        assert group["lr"] == pytest.approx(base * ratio)
        assert group["betas"] == pytest.approx((0.0 ** ratio, 0.99 ** ratio))
    steps = {"G": 0, "D": 0}
    for name, opt in (("G", run.opt_G), ("D", run.opt_D)):
        original = opt.step

        def counted(*a, _name=name, _orig=original, **k):
            steps[_name] += 1
            return _orig(*a, **k)

        opt.step = counted
    seen = []
    pl = run.lazy_penalties[1].penalty
    call = type(pl).__call__

    def spy(self, inputs, ctx):
        value = call(self, inputs, ctx)
        seen.append((ctx.step, value.detach()))
        return value

    type(pl).__call__ = spy
    try:
        train(run, max_steps=8)
    finally:
        type(pl).__call__ = call
    assert [s for s, _ in seen] == [0, 4]  # every 4th iteration
    assert steps == {"G": 8 + 2, "D": 8 + 1}  # one extra optimizer step per lazy regularisation
    # the correction stays applied once (not compounded) after the run's phase and lr updates
    assert run.opt_G.param_groups[0]["lr"] == pytest.approx(recipe.optim.lr * g_ratio)
    assert float(pl.state_dict()["pl_mean"]) > 0


def test_registered_by_the_module():
    registry = build_plugins([sg2], load_entry_points=False).registry
    assert registry.get("architecture", "stylegan2").factory is sg2.StyleGAN2
    assert registry.get("penalty", "path-length").factory is sg2.PathLength


def test_resume_is_bit_identical_with_style_mixing_noise_and_w_avg(tmp_path, tiny_recipe_text, monkeypatch):
    # G_ema draws its noise from the global RNG; the engine samples grids under a forked RNG, so
    # the grids made before a checkpoint do not move the training RNG. Path length (lazy, with its
    # running mean) is part of the run.
    path = sg2_recipe(tmp_path, tiny_recipe_text, PL.replace("interval = 4", "interval = 2"))

    def run_for(out, kimg, resume=False):
        recipe, plugins = load_recipe(path, [f"run.out_dir='{out}'", f"run.total_kimg={kimg}"], extra_plugins=[sg2])
        run = build_run(recipe, plugins)
        train(run, resume=resume)
        return run

    straight = run_for(tmp_path / "straight", 0.032)
    first = run_for(tmp_path / "split", 0.016)
    resumed = run_for(tmp_path / "split", 0.032, resume=True)
    assert first.step < resumed.step == straight.step
    for name in ("G", "D", "G_ema"):
        a, b = getattr(straight, name).state_dict(), getattr(resumed, name).state_dict()
        assert a.keys() == b.keys()
        assert [k for k in a if not torch.equal(a[k], b[k])] == [], name
    assert straight.G.w_avg.abs().sum() > 0
    pl_a, pl_b = straight.lazy_penalties[-1].penalty.pl_mean, resumed.lazy_penalties[-1].penalty.pl_mean
    assert torch.equal(pl_a, pl_b) and pl_a > 0


def test_the_stylegan2_recipe_loads_with_the_paper_settings():
    from pathlib import Path

    recipe, plugins = load_recipe(Path(__file__).resolve().parents[1] / "recipes" / "stylegan2.toml")
    assert plugins.registry.get("architecture", "stylegan2").factory is sg2.StyleGAN2
    assert (recipe.architecture.name, recipe.loss.name, recipe.growth.name) == ("stylegan2", "bce", "static")
    assert [(p.name, p.options.interval) for p in recipe.penalties] == [("r1", 16), ("path-length", 4)]
    assert recipe.optim.lr == 0.0025 and tuple(recipe.optim.betas) == (0.0, 0.99)
