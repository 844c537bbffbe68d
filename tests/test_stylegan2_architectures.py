"""StyleGAN2's configurable networks (the official files' options): G orig/skip/resnet, D
orig/skip/resnet, minibatch stddev with several maps, truncation of the first Ws only, the mapping
widths, per-network channel counts. Each trains in a tiny run; the terms the recorded official
outputs cannot reach (a clamp that bites) are checked against their definitions."""

from __future__ import annotations

import math

import pytest
import torch

import gan_kit.builtin.architectures.stylegan2 as sg2
from gan_kit.builtin.architectures.pggan import MinibatchStddev
from gan_kit.plugin_api.components import BuildContext
from gan_kit.runs.session import train
from gan_kit.testing import make_run

BASE = "name='stylegan2', latent_dim=8, w_dim=8, mapping_layers=2, channel_base=64, channel_max=8"
RUN = ["data.resolution=16", "growth={name='static', batch_size=8}", "loss.name=bce",
       "penalty=[{name='r1', weight=1.0, interval=2}, {name='path-length', weight=2.0, interval=2}]"]


def pair(resolution=16, num_classes=0, **kw):
    torch.manual_seed(0)
    o = dict(latent_dim=8, w_dim=8, mapping_layers=2, channel_base=64, channel_max=8, d_mapping_layers=2)
    o.update(kw)
    arch = sg2.StyleGAN2(sg2.StyleGAN2.Options(**o), BuildContext(resolution=resolution, channels=3,
                                                                   num_classes=num_classes))
    return arch.build(resolution, 3)


@pytest.mark.parametrize("extra", [
    "g_architecture='orig'",
    "g_architecture='resnet', conv_clamp=256.0",
    "d_architecture='orig'",
    "d_architecture='skip', conv_clamp=256.0",
    "mbstd_num_channels=2",
    "truncation_cutoff=2, num_fp16_res=2",
    "d_channel_base=128, d_channel_max=16",
    "conditional=true, mapping_embed_features=4, mapping_layer_features=6, d_cmap_dim=5",
])
def test_a_tiny_run_trains_with_each_option(tmp_path, extra):
    """Three steps with lazy R1 and path length give finite losses and move G's weights."""
    run = make_run(tmp_path, overrides=[f"architecture={{{BASE}, {extra}}}", *RUN])
    G0 = [p.detach().clone() for p in run.G.parameters()]
    stats = train(run, max_steps=3)
    assert math.isfinite(stats["Loss/G"]) and math.isfinite(stats["Loss/D"])
    assert all(torch.isfinite(p).all() for net in (run.G, run.D) for p in net.parameters())
    assert any(not torch.equal(a, b) for a, b in zip(G0, run.G.parameters()))


def test_the_default_networks_keep_their_checkpoint_keys():
    """The options' defaults build today's skip G and resnet D: no resnet skips, a toRGB per
    resolution, no block or epilogue fromRGB, one mbstd map (the conv takes C + 1 channels)."""
    G, D = pair()
    keys = set(G.state_dict()) | {f"D.{k}" for k in D.state_dict()}
    assert not any("skips" in k or "from_rgb" in k and k.startswith("D.blocks") or "epilogue" in k for k in keys)
    assert {k.split(".")[1] for k in G.state_dict() if k.startswith("to_rgb.")} == {"4", "8", "16"}
    assert D.conv.weight.shape[1] == 8 + 1


@pytest.mark.parametrize("arch", ["orig", "resnet"])
def test_orig_and_resnet_g_have_one_torgb_on_the_last_w(arch):
    """Only the last block has a toRGB, fed the last W (num_ws unchanged): changing any other W
    of the last layer's slot changes nothing else."""
    G, _ = pair(g_architecture=arch)
    G.eval()
    assert list(G.to_rgb) == ["16"] and G.num_ws == 6
    ws = torch.randn(2, 6, 8)
    ws2 = ws.clone()
    ws2[:, 5] += 1
    with torch.no_grad():
        a, b = G.synthesis(ws, "const"), G.synthesis(ws2, "const")
        G.to_rgb["16"].affine.weight.zero_()
        G.to_rgb["16"].affine.bias.zero_()
        assert G.synthesis(ws, "const").abs().max() <= G.to_rgb["16"].bias.abs().max() + 1e-6
    assert not torch.equal(a, b)


def test_resnet_g_clamps_conv1_before_its_sqrt_half_gain():
    """A resnet block is ``sqrt(0.5) * skip(x) + clamp(sqrt(0.5) * conv1(conv0(x)), sqrt(0.5) *
    c)``: the official bias_act with gain sqrt(0.5) and its clamp scaled the same way, checked on
    the block output synthesis computes, with a clamp that bites; the skip has no bias or clamp."""
    G, _ = pair(g_architecture="resnet", conv_clamp=0.2)
    G.eval()
    ws = torch.randn(2, 6, 8)
    seen = {}
    G.convs["16"][0].register_forward_pre_hook(lambda m, args: seen.update(x8=args[0]))
    with torch.no_grad():
        G.synthesis(ws, "const")
        x4 = G.convs["4"][0](G.const.unsqueeze(0).expand(2, -1, -1, -1), ws[:, 0], "const")
        c0 = G.convs["8"][0](x4, ws[:, 1], "const")
        conv1, built = G.convs["8"][1], G.convs["8"][1].clamp
        conv1.clamp = None
        raw = conv1(c0, ws[:, 2], "const")  # leaky ReLU times sqrt(2), unclamped
        conv1.clamp = built
    gain = math.sqrt(0.5)
    skip = G.skips["8"]
    assert skip.bias is None and skip.clamp is None and skip.weight.shape[-1] == 1
    assert raw.abs().max() > 0.3  # the clamp bites
    with torch.no_grad():
        expected = skip(x4) * gain + (raw * gain).clamp(-0.2 * gain, 0.2 * gain)
    torch.testing.assert_close(seen["x8"], expected, rtol=0, atol=1e-6)


def test_minibatch_stddev_splits_channels_into_num_channels_maps():
    """F maps: map f holds the mean over channels f*C/F..(f+1)*C/F and pixels of the std over
    the group of min(G, N) samples n, n + M, ... (strided groups, as the official layer)."""
    x = torch.randn(6, 8, 3, 3)
    out = MinibatchStddev(group_size=3, num_channels=2)(x)
    assert out.shape == (6, 10, 3, 3)
    m = 6 // 3
    for n in range(6):
        group = x[n % m::m]
        std = torch.sqrt(group.var(dim=0, unbiased=False) + 1e-8)
        for f in range(2):
            torch.testing.assert_close(out[n, 8 + f], std[4 * f:4 * f + 4].mean().expand(3, 3))
    small = MinibatchStddev(group_size=8, num_channels=2)(x)  # group min(8, 6) = 6
    std = torch.sqrt(x.var(dim=0, unbiased=False) + 1e-8)
    torch.testing.assert_close(small[0, 9], std[4:].mean().expand(3, 3))


def test_truncation_cutoff_truncates_the_first_ws_only():
    """With truncation_cutoff = k only ws[:, :k] move towards w_avg; None truncates all."""
    G, _ = pair(truncation_cutoff=2)
    G.eval()
    with torch.no_grad():
        G.w_avg.normal_()
    z = torch.randn(3, 8)
    full, cut = G.mapping(z), G.mapping(z, truncation_psi=0.5)
    expected = G.w_avg.lerp(full[:, 0], 0.5)
    torch.testing.assert_close(cut[:, :2], expected.unsqueeze(1).expand(-1, 2, -1))
    torch.testing.assert_close(cut[:, 2:], full[:, 2:])
    G.truncation_cutoff = None
    torch.testing.assert_close(G.mapping(z, truncation_psi=0.5), expected.unsqueeze(1).expand(-1, 6, -1))


def test_skip_d_adds_a_fromrgb_of_the_downsampled_image_at_every_block():
    """Zeroing the image seen by the lower blocks and the epilogue changes a skip D's logits
    and not a resnet or orig D's (their only fromRGB is at the input)."""
    for arch, lower in (("skip", True), ("resnet", False), ("orig", False)):
        _, D = pair(d_architecture=arch)
        with torch.no_grad():
            img = torch.randn(4, 3, 16, 16)
            base = D(img)
            n_rgb = sum(1 for k in D.state_dict() if k.endswith("from_rgb.weight"))
            for m in [b.from_rgb for b in D.blocks if b.from_rgb is not None] + [D.epilogue_from_rgb]:
                if m is not None:
                    m.weight.zero_()
                    m.bias.zero_()
            changed = not torch.allclose(D(img), base)
        assert changed == lower and n_rgb == (3 if lower else 1), arch  # 16 px: input, 8 px block, 4x4


def test_separate_d_widths_and_cmap_dim():
    """d_channel_base / d_channel_max size D alone; d_cmap_dim sizes D's label projection."""
    G, D = pair(d_channel_base=256, d_channel_max=16, num_classes=3, d_cmap_dim=5)
    assert G.const.shape[0] == 8 and D.conv.weight.shape[0] == 16
    assert D.out.weight.shape == (5, 16) and D.mapping.layers[-1].weight.shape[0] == 5
    assert D(torch.randn(4, 3, 16, 16), torch.tensor([0, 1, 2, 0])).shape == (4,)


def test_mapping_widths_follow_embed_and_layer_features():
    """mapping_embed_features sizes the label embedding joined to z, mapping_layer_features the
    hidden FC layers; the last layer gives w_dim (the official MappingNetwork's features_list)."""
    G, _ = pair(num_classes=3, mapping_layers=3, mapping_embed_features=4, mapping_layer_features=6)
    m = G.mapping_network
    assert m.embed.weight.shape == (4, 3)
    assert [tuple(layer.weight.shape) for layer in m.layers] == [(6, 8 + 4), (6, 6), (8, 6)]
    assert G.mapping(torch.randn(2, 8), torch.tensor([0, 2])).shape == (2, 6, 8)


def test_skip_d_clamps_block_fromrgbs_but_not_the_epilogue_one():
    """As the official D: a block's fromRGB is clamped at conv_clamp, the epilogue's is not; with
    a clamp of 1e-3 the epilogue fromRGB's output still exceeds it."""
    _, D = pair(d_architecture="skip", conv_clamp=1e-3)
    assert D.blocks[1].from_rgb.clamp == 1e-3 and D.from_rgb.clamp == 1e-3
    with torch.no_grad():
        out = D.epilogue_from_rgb(torch.randn(4, 3, 4, 4))
    assert out.abs().max() > 1e-2


def test_recipe_refuses_mbstd_maps_that_do_not_divide_ds_channels(tmp_path):
    """mbstd_num_channels must divide D's 4x4 feature maps (8 here): 3 is refused at load,
    naming the key and a fix."""
    from gan_kit import RecipeError

    with pytest.raises(RecipeError) as err:
        make_run(tmp_path, overrides=[f"architecture={{{BASE}, mbstd_num_channels=3}}", *RUN])
    assert "architecture.mbstd_num_channels" in str(err.value) and "choose a divisor of 8" in str(err.value)
