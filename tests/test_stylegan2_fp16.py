"""StyleGAN2's fp16 blocks (``num_fp16_res``, stylegan2-ada-pytorch's): which blocks compute in
float16 (the resolution boundary), on which devices and when (``fp16_devices``, autocast,
``force_fp32``, exports), that the float32 parts stay float32, that ``conv_clamp`` keeps fp16
activations finite, and that a recipe with fp16 blocks trains on the CPU. The parity with the
official code's fp16 images and logits is in tests/test_stylegan2_official.py."""

from __future__ import annotations

import math
import warnings

import pytest
import torch

import gan_kit.builtin.architectures.stylegan2 as sg2
from gan_kit.builtin.architectures.stylegan2.networks import fp16_resolution
from gan_kit.recipe import load_recipe
from gan_kit.tools.export import ExportedGenerator


def build(resolution=32, num_fp16_res=2, fp16_devices="all", conv_clamp=256.0, g_arch="skip", d_arch="resnet",
          seed=0):
    torch.manual_seed(seed)
    arch = sg2.StyleGAN2(sg2.StyleGAN2.Options(
        latent_dim=8, w_dim=8, mapping_layers=2, channel_base=16 * resolution, channel_max=8, mbstd_group_size=2,
        num_fp16_res=num_fp16_res, fp16_devices=fp16_devices, conv_clamp=conv_clamp, g_architecture=g_arch,
        d_architecture=d_arch))
    G, D = arch.build(resolution, 3)
    return G.eval(), D.eval()


def layer_dtypes(G, D, z, **kwargs):
    """{layer name: (input dtype, output dtype)} of every conv layer of G and D in one forward,
    with G's image and D's logits dtypes under "img" and "logits"."""
    seen = {}
    hooks = [m.register_forward_hook(lambda m, i, o, n=f"{tag}.{n}": seen.__setitem__(n, (i[0].dtype, o.dtype)))
             for tag, net in (("G", G), ("D", D)) for n, m in net.named_modules()
             if isinstance(m, (sg2.ModulatedConv, sg2.EqualizedConv2d))]
    try:
        with torch.no_grad():
            img = G(z, noise_mode="const", **kwargs)
            logits = D(img)
    finally:
        for h in hooks:
            h.remove()
    seen["img"], seen["logits"] = (img.dtype,), (logits.dtype,)
    return seen


@pytest.mark.parametrize("resolution, num_fp16_res, want", [
    (16, 0, 32), (16, 1, 16), (16, 2, 8), (16, 3, 8), (32, 2, 16), (32, 3, 8), (256, 4, 32), (1024, 4, 128),
    (1024, 1, 1024), (4, 1, 8)])
def test_fp16_resolution_is_the_official_boundary(resolution, num_fp16_res, want):
    """max(2 ** (log2(resolution) + 1 - num_fp16_res), 8): the num_fp16_res highest resolutions,
    never below 8 (the 4x4 block and D's epilogue stay float32); 0 = none."""
    assert fp16_resolution(resolution, num_fp16_res) == want


@pytest.mark.parametrize("num_fp16_res, fp16_res", [(1, {32}), (2, {16, 32}), (3, {8, 16, 32}), (4, {8, 16, 32})])
def test_exactly_the_blocks_at_the_top_resolutions_compute_in_fp16(num_fp16_res, fp16_res):
    """G's blocks (convs and toRGB) and D's blocks (with the top fromRGB) at the num_fp16_res
    highest resolutions take and give float16; the others, D's 4x4 epilogue, the image and the
    logits are float32. Resolutions listed here by hand, so an off-by-one boundary fails."""
    G, D = build(32, num_fp16_res)
    seen = layer_dtypes(G, D, torch.randn(2, 8))
    half, full = (torch.float16, torch.float16), (torch.float32, torch.float32)
    for res in G.resolutions:
        want = half if res in fp16_res else full
        for i in range(len(G.convs[str(res)])):
            assert seen[f"G.convs.{res}.{i}"] == want, (res, i)
        assert seen[f"G.to_rgb.{res}"] == want, res
    for i, res in enumerate(D.block_resolutions):
        want = half if res in fp16_res else full
        for layer in ("conv0", "conv1", "skip"):
            assert seen[f"D.blocks.{i}.{layer}"] == want, (res, layer)
    assert seen["D.from_rgb"] == (half if 32 in fp16_res else full)
    assert seen["D.conv"] == full
    assert seen["img"] == seen["logits"] == (torch.float32,)


@pytest.mark.parametrize("g_arch, d_arch", [("resnet", "skip"), ("orig", "orig")])
def test_the_other_architectures_cast_at_the_same_boundary(g_arch, d_arch):
    """G resnet's skips and D skip's per-block fromRGB (and the image it downsamples) follow their
    block; D skip's epilogue fromRGB is float32."""
    G, D = build(16, 1, g_arch=g_arch, d_arch=d_arch)
    seen = layer_dtypes(G, D, torch.randn(2, 8))
    half, full = (torch.float16, torch.float16), (torch.float32, torch.float32)
    if g_arch == "resnet":
        assert seen["G.skips.16"] == half and seen["G.skips.8"] == full
    assert seen["G.to_rgb.16"] == half and seen["G.convs.8.1"] == full
    if d_arch == "skip":
        assert seen["D.blocks.1.from_rgb"] == full and seen["D.epilogue_from_rgb"] == full
    assert seen["D.from_rgb"] == seen["D.blocks.0.conv1"] == half and seen["D.blocks.1.conv0"] == full
    assert seen["img"] == seen["logits"] == (torch.float32,)  # also where one fp16 toRGB makes the image


def fp32_twin(G, D):
    """Networks of the same weights without fp16 blocks."""
    G0, D0 = build(G.resolution, 0, conv_clamp=G.conv_clamp)
    G0.load_state_dict(G.state_dict())
    D0.load_state_dict(D.state_dict())
    return G0, D0


def test_fp16_devices_cuda_autocast_and_force_fp32_compute_float32():
    """fp16_devices = "cuda" on the CPU, an active autocast (run.precision bf16 / fp16: it
    decides the precision then) and force_fp32 all compute no float16 tensor: without autocast the
    very function of num_fp16_res = 0; the fp16 function differs from it by fp16 rounding only."""
    z = torch.randn(4, 8, generator=torch.Generator().manual_seed(1))
    G, D = build(32, 2, fp16_devices="all")
    G0, D0 = fp32_twin(G, D)
    with torch.no_grad():
        want_img = G0(z, noise_mode="const")
        want_logits = D0(want_img)
        fp16_img = G(z, noise_mode="const")
    assert 0 < (fp16_img - want_img).abs().max() < 0.05  # really fp16, and close
    Gc, Dc = build(32, 2, fp16_devices="cuda")
    Gc.load_state_dict(G.state_dict())
    Dc.load_state_dict(D.state_dict())
    G.force_fp32 = D.force_fp32 = True
    for g, d in ((Gc, Dc), (G, D)):
        seen = layer_dtypes(g, d, z)
        assert {t for v in seen.values() for t in v} == {torch.float32}
        with torch.no_grad():
            img = g(z, noise_mode="const")
            assert torch.equal(img, want_img) and torch.equal(d(img), want_logits)
    G.force_fp32 = D.force_fp32 = False
    with torch.autocast("cpu", dtype=torch.bfloat16):
        seen = layer_dtypes(G, D, z)
    assert torch.float16 not in {t for v in seen.values() for t in v}


def test_the_export_view_computes_float32_and_traces():
    """Exports trace the float32 function (force_fp32), the one an fp32 twin computes."""
    G, D = build(16, 2)
    G0, _ = fp32_twin(G, D)
    view = sg2.StyleGAN2().export_view(G)
    assert view.force_fp32 and not G.force_fp32
    model = ExportedGenerator(view, conditional=False, kwargs={"noise_mode": "const"}).eval()
    z = torch.randn(2, 8, generator=torch.Generator().manual_seed(2))
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        traced = torch.jit.trace(model, (z,), check_trace=False)
        torch.testing.assert_close(traced(z), G0(z, noise_mode="const"), rtol=1e-5, atol=1e-5)


def test_conv_clamp_keeps_fp16_blocks_finite_where_they_would_overflow():
    """With weights large enough to overflow float16 (65504), the clamped fp16 layers stay within
    conv_clamp and the outputs finite; the same weights without a clamp give inf / nan."""
    z = torch.randn(2, 8, generator=torch.Generator().manual_seed(3))
    outs = {}
    for clamp in (256.0, None):
        G, D = build(16, 2, conv_clamp=clamp)
        with torch.no_grad():
            for net in (G, D):
                for name, p in net.named_parameters():
                    if "bias" in name and "affine" not in name and "mapping" not in name:
                        p.fill_(5e4)  # times the activation's sqrt(2): past fp16's 65504
            peaks = []
            hooks = [m.register_forward_hook(lambda m, i, o: peaks.append(o.float().abs().max().item()))
                     for m in G.modules() if isinstance(m, sg2.ModulatedConv)]
            img = G(z, noise_mode="const")
            for h in hooks:
                h.remove()
            outs[clamp] = (img, D(img), peaks)
    img, logits, peaks = outs[256.0]
    assert torch.isfinite(img).all() and torch.isfinite(logits).all() and max(peaks) <= 256.0
    img, logits, _ = outs[None]
    assert not torch.isfinite(img).all()


def test_auto_clamp_is_256_with_fp16_blocks(tiny_recipe):
    """conv_clamp = "auto" resolves to 256 when num_fp16_res > 0 even under fp32 (the official
    train.py sets both together), and stays none without fp16 blocks."""
    for fp16, want in ((2, 256.0), (0, None)):
        r, _ = load_recipe(tiny_recipe, [
            f"architecture={{name='stylegan2', latent_dim=8, w_dim=8, mapping_layers=2, channel_base=64, "
            f"channel_max=8, num_fp16_res={fp16}}}", "growth={name='static', batch_size=8}", "data.resolution=16",
            "metric=[]", "run.precision='fp32'"])
        assert r.architecture.options.conv_clamp == want


def test_a_recipe_with_fp16_blocks_trains_on_the_cpu_with_finite_losses(tiny_recipe):
    """run.precision = "fp32" with num_fp16_res = 2 on every device: G's and D's top blocks train
    in float16 without loss scaling (the official rule) through the engine, R1 and path length
    included; losses and every gradient-updated parameter stay finite and float32."""
    from gan_kit.runs.run import build_run
    from gan_kit.runs.session import train

    r, plugins = load_recipe(tiny_recipe, [
        "architecture={name='stylegan2', latent_dim=8, w_dim=8, mapping_layers=2, channel_base=64, channel_max=8, "
        "num_fp16_res=2, fp16_devices='all', modconv='scaled'}", "growth={name='static', batch_size=8}",
        "data.resolution=16", "metric=[]", "run.precision='fp32'", "run.tick_kimg=10",
        "penalty=[{name='r1', weight=1.0, interval=2}, {name='path-length', weight=2.0, interval=2}]"])
    run = build_run(r, plugins)
    before = {k: v.clone() for k, v in run.G.state_dict().items()}
    seen = layer_dtypes(run.G_ema, run.D, torch.randn(2, 8))
    assert seen["G.to_rgb.16"] == (torch.float16, torch.float16)
    stats = train(run, max_steps=3)
    assert math.isfinite(stats["Loss/D"]) and math.isfinite(stats["Loss/G"])
    for net in (run.G, run.D, run.G_ema):
        for name, p in net.named_parameters():
            assert p.dtype == torch.float32 and torch.isfinite(p).all(), name
    assert not torch.equal(run.G.state_dict()["to_rgb.16.weight"], before["to_rgb.16.weight"])


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_a_layer_gain_scales_its_clamp(dtype):
    """A layer called with a gain (a resnet block's sqrt(0.5) on conv1 and the skip) clamps at
    conv_clamp * gain after the gain, as the official bias_act(gain=, clamp=conv_clamp * gain),
    in float32 and in an fp16 block alike."""
    torch.manual_seed(0)
    conv = sg2.EqualizedConv2d(4, 4, 3, activation=True, clamp=2.0)
    mod = sg2.ModulatedConv(4, 4, 8, 8, clamp=2.0)
    x = (torch.randn(2, 4, 8, 8) * 1e3).to(dtype)
    g = math.sqrt(0.5)
    with torch.no_grad():
        for layer, args in ((conv, (x,)), (mod, (x, torch.randn(2, 8), "const"))):
            assert layer(*args).abs().max().item() == pytest.approx(2.0, rel=1e-3)
            out = layer(*args, gain=g) if layer is conv else layer(*args, g)
            assert out.dtype == dtype and out.abs().max().item() == pytest.approx(2.0 * g, rel=1e-3)
