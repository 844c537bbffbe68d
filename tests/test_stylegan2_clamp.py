"""StyleGAN2's ``conv_clamp`` (stylegan2-ada-pytorch's clamp of every conv layer's output for
fp16): which layers it bounds, that it bounds them whatever the weights, that no clamp leaves the
computation untouched, its "auto" default, the recipe round trip, and the traced / compiled G."""

from __future__ import annotations

import warnings

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

import gan_kit.builtin.architectures.stylegan2 as sg2
from gan_kit import RecipeError
from gan_kit.plugin_api.components import BuildContext
from gan_kit.recipe import load_recipe, recipe_to_toml
from gan_kit.tools.export import ExportedGenerator

SG2 = ("architecture={name='stylegan2', latent_dim=8, w_dim=8, mapping_layers=2, channel_base=64, channel_max=8%s}",
       "growth={name='static', batch_size=8}", "data.resolution=16", "metric=[]")


def build(conv_clamp, modconv="grouped", seed=0):
    torch.manual_seed(seed)
    arch = sg2.StyleGAN2(sg2.StyleGAN2.Options(latent_dim=8, w_dim=8, mapping_layers=2, channel_base=64,
                                               channel_max=8, modconv=modconv, conv_clamp=conv_clamp))
    return arch.build(16, 3)


def clamped_layers(G, D):
    """The layers stylegan2-ada-pytorch clamps: every synthesis layer and ToRGB of G; fromRGB,
    each block's conv0 / conv1 and the 4x4 conv of D (not the 1x1 skips, not the FC layers)."""
    g = [m for m in G.modules() if isinstance(m, sg2.ModulatedConv)]
    d = [D.from_rgb, *(c for b in D.blocks for c in (b.conv0, b.conv1)), D.conv]
    return g, d


def blow_up(*nets, factor=50.0):
    """Every parameter times ``factor`` (biases set to +-factor**2): activations far past any bound."""
    with torch.no_grad():
        for net in nets:
            for name, p in net.named_parameters():
                if name.endswith("bias"):
                    p.copy_(torch.where(torch.arange(p.numel()).reshape(p.shape) % 2 == 0, 1.0, -1.0) * factor ** 2)
                else:
                    p.mul_(factor)


def layer_peaks(G, D, z):
    """max |output| of each clamped layer in one G and one D forward (G_ema-style, const noise)."""
    g_layers, d_layers = clamped_layers(G, D)
    peaks = {}
    hooks = [m.register_forward_hook(lambda m, i, o, n=n: peaks.__setitem__(n, o.detach().abs().max().item()))
             for n, m in enumerate([*g_layers, *d_layers])]
    try:
        with torch.no_grad():
            img = G(z, noise_mode="const")
            D(img)
    finally:
        for h in hooks:
            h.remove()
    return peaks, len(g_layers) + len(d_layers)


@pytest.mark.parametrize("modconv", ["grouped", "scaled", "naive"])
def test_clamped_layers_never_exceed_the_bound_even_with_huge_weights(modconv):
    bound = 4.0
    z = torch.randn(3, 8, generator=torch.Generator().manual_seed(0))
    for clamp in (None, bound):
        G, D = build(clamp, modconv)
        G.eval()
        blow_up(G, D)
        peaks, n = layer_peaks(G, D, z)
        assert len(peaks) == n == 8 + 6  # 16 px. G: 5 synthesis layers, 3 ToRGB; D: fromRGB, 2 blocks x 2, 4x4 conv
        if clamp is None:  # the same weights without a clamp go far past the bound in every layer
            assert min(peaks.values()) > 10 * bound
        else:
            assert max(peaks.values()) <= bound
    with torch.no_grad():
        img = G(z, noise_mode="const")
    assert img.abs().max() <= bound * len(G.resolutions)  # a sum of clamped ToRGB outputs, upsampled


class Ops(TorchDispatchMode):
    """The aten ops dispatched inside it, by name."""

    def __init__(self):
        super().__init__()
        self.ops: list[str] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.ops.append(func.overloadpacket.__name__)
        return func(*args, **(kwargs or {}))


def dispatched(conv_clamp):
    G, D = build(conv_clamp)
    z = torch.randn(2, 8, generator=torch.Generator().manual_seed(3))
    mode = Ops()
    torch.manual_seed(5)
    with mode:  # the forwards: G in training mode (noise, style mixing, w_avg) and D
        img = G(z)
        loss = img.square().mean() + D(img).sum()
    loss.backward()
    return mode.ops, img.detach(), [p.grad for p in (*G.parameters(), *D.parameters())]


def test_no_clamp_dispatches_no_clamp_op_and_a_clamp_adds_only_one_per_clamped_layer():
    """conv_clamp = none runs exactly the ops of the network before the option existed; a clamp
    inserts one ``clamp`` per clamped layer and nothing else."""
    plain_ops, plain_img, plain_grads = dispatched(None)
    ops, img, grads = dispatched(1e30)  # a bound nothing reaches: the same values
    assert "clamp" not in plain_ops
    assert ops.count("clamp") == 8 + 6
    assert [o for o in ops if o != "clamp"] == plain_ops
    assert torch.equal(img, plain_img)
    assert all(torch.equal(a, b) for a, b in zip(grads, plain_grads))


def test_same_state_dict_keys_with_and_without_a_clamp():
    """A checkpoint of either loads into the other (the clamp is no parameter or buffer)."""
    (G0, D0), (G1, D1) = build(None), build(256.0)
    G1.load_state_dict(G0.state_dict())
    D1.load_state_dict(D0.state_dict())
    assert G0.state_dict().keys() == G1.state_dict().keys()


def recipe(tiny_recipe, *extra, clamp=""):
    return load_recipe(tiny_recipe, [SG2[0] % clamp, *SG2[1:], *extra])


@pytest.mark.parametrize("precision, want", [("fp32", None), ("bf16", None), ("auto", None), ("fp16", 256.0)])
def test_auto_is_256_under_fp16_and_none_otherwise(tiny_recipe, precision, want):
    """"auto" is resolved when the recipe loads (the recipe holds the bound), and by the
    architecture from its context's recipe when its options still say "auto"."""
    import attrs

    r, plugins = recipe(tiny_recipe, f"run.precision='{precision}'")
    assert r.architecture.options.conv_clamp == want
    auto = attrs.evolve(r.architecture.options, conv_clamp="auto")
    arch = plugins.registry.get("architecture", "stylegan2").factory(auto, BuildContext(resolution=16, channels=1,
                                                                                        recipe=r))
    assert arch.conv_clamp == want
    G, D = arch.build(16, 1)
    assert {m.clamp for m in clamped_layers(G, D)[0] + clamped_layers(G, D)[1]} == {want}
    assert {D.blocks[0].skip.clamp} == {None}


@pytest.mark.parametrize("written, want", [("", 256.0), (", conv_clamp=256", 256.0), (", conv_clamp='none'", None),
                                           (", conv_clamp=12.5", 12.5), (", conv_clamp='auto'", 256.0)])
def test_conv_clamp_round_trips_through_the_recipe(tiny_recipe, tmp_path, written, want):
    r, _ = recipe(tiny_recipe, "run.precision='fp16'", clamp=written)
    assert r.architecture.options.conv_clamp == want
    again = tmp_path / "again.toml"
    again.write_text(recipe_to_toml(r), encoding="utf-8")
    r2, _ = load_recipe(again)
    assert r2.architecture.options.conv_clamp == want


@pytest.mark.parametrize("bad", ["conv_clamp=-1", "conv_clamp=0", "conv_clamp='big'"])
def test_a_bad_conv_clamp_is_one_line_naming_the_key(tiny_recipe, bad):
    with pytest.raises(RecipeError) as e:
        recipe(tiny_recipe, clamp=f", {bad}")
    assert "architecture.conv_clamp" in str(e.value) and "\n" not in str(e.value).strip()


def test_a_conv_clamp_above_the_fp16_maximum_is_refused_under_fp16_in_one_line(tiny_recipe):
    """Under fp16 an activation overflows to inf before a bound above 65504 is reached: the
    recipe is refused at load, naming the key, the value and the fix; the same bound is allowed
    under fp32, and 65504 itself under fp16."""
    with pytest.raises(RecipeError) as e:
        recipe(tiny_recipe, "run.precision='fp16'", clamp=", conv_clamp=1e5")
    msg = str(e.value).strip()
    assert "\n" not in msg
    assert "architecture.conv_clamp: 100000 is above 65504, the largest fp16 number" in msg
    assert "use at most 65504, e.g. conv_clamp = 256" in msg
    r, _ = recipe(tiny_recipe, "run.precision='fp32'", clamp=", conv_clamp=1e5")
    assert r.architecture.options.conv_clamp == 1e5
    r, _ = recipe(tiny_recipe, "run.precision='fp16'", clamp=", conv_clamp=65504")
    assert r.architecture.options.conv_clamp == 65504.0


def test_the_export_view_and_a_compiled_g_keep_the_clamp():
    bound = 0.5
    G, _ = build(bound)
    blow_up(G, factor=3.0)
    G.eval()
    z = torch.randn(3, 8, generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        want = G(z, noise_mode="const")
        view = sg2.StyleGAN2().export_view(G)
        model = ExportedGenerator(view, conditional=False, kwargs={"noise_mode": "const"}).eval()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", FutureWarning)  # jit.trace is marked deprecated; gankit export uses it
            traced = torch.jit.trace(model, (torch.randn(2, 8),), check_trace=False)
        got_traced = traced(z)
    assert {m.modconv for m in view.modules() if isinstance(m, sg2.ModulatedConv)} == {"scaled"}
    assert {m.clamp for m in view.modules() if isinstance(m, sg2.ModulatedConv)} == {bound}
    torch.testing.assert_close(got_traced, want, rtol=1e-5, atol=1e-5)  # another batch size than the trace's
    unclamped, _ = build(None)
    unclamped.load_state_dict(G.state_dict())
    with torch.no_grad():
        assert (unclamped.eval()(z, noise_mode="const") - want).abs().max() > 1.0  # the clamp is at work
    torch._dynamo.reset()
    compiled = torch.compile(G.synthesis, backend="aot_eager", fullgraph=True)  # no graph break
    ws = G.mapping(z)
    with torch.no_grad():
        torch.testing.assert_close(compiled(ws, noise_mode="const"), want, rtol=1e-5, atol=1e-5)


def test_an_fp16_run_trains_with_its_clamped_networks(tiny_recipe):
    """Through the engine under fp16 autocast (the CPU's): G, D and G_ema are built with the
    clamp "auto" chose, and the steps are finite."""
    import math

    from gan_kit.runs.run import build_run
    from gan_kit.runs.session import train

    r, plugins = recipe(tiny_recipe, "run.precision='fp16'", "run.tick_kimg=10",
                        "penalty=[{name='r1', weight=1.0, interval=2}]", clamp=", modconv='scaled'")
    run = build_run(r, plugins)
    for G, D in ((run.G, run.D), (run.G_ema, run.D)):
        g, d = clamped_layers(G, D)
        assert {m.clamp for m in g + d} == {256.0}
    stats = train(run, max_steps=2)
    assert math.isfinite(stats["Loss/D"]) and math.isfinite(stats["Loss/G"])
