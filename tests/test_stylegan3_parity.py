"""gankit's ``stylegan3`` against the official StyleGAN3 code (github.com/NVlabs/stylegan3).

``tests/data/stylegan3_reference.pt`` holds what the official ``networks_stylegan3`` computed on
the CPU (its reference paths: ``filtered_lrelu`` / ``upfirdn2d`` / ``bias_act`` ref) for tiny
StyleGAN3-T and -R generators (written by ``tests/data/make_stylegan3_reference.py``). gankit's
G is built by the ``stylegan3`` component from its options (``config = "t"`` / ``"r"``), takes
the official weights renamed by ``gan_kit.builtin.importers.stylegan3_official``, and must give
the same layer schedule, filter taps, synthesis input (with and without a user transform),
filtered leaky ReLU, truncated Ws, images and magnitude-EMA update.
"""

from __future__ import annotations

from functools import cache
from pathlib import Path

import numpy as np
import pytest
import scipy.signal
import torch

from gan_kit.base.errors import GankitError
from gan_kit.builtin.architectures.stylegan3 import StyleGAN3, filtered_lrelu, lowpass_filter, upfirdn2d, user_transform
from gan_kit.builtin.importers.stylegan3_official import stylegan3_options, stylegan3_state_dict
from gan_kit.plugin_api.components import BuildContext

FIXTURE = Path(__file__).parent / "data" / "stylegan3_reference.pt"
CONFIGS = ("t", "r")


@cache
def reference() -> dict:
    return torch.load(FIXTURE, weights_only=True)


def build(cfg: str, *, load: bool = True):
    """gankit's G for the recorded official ``cfg``, its options read from the official kwargs by
    the importer (``config`` "r" with channel_base / channel_max halved), with the official weights."""
    o = stylegan3_options(reference()[cfg]["kwargs"])
    assert o["architecture"]["config"] == cfg
    arch = StyleGAN3(StyleGAN3.Options(**o["architecture"]),
                     BuildContext(resolution=o["resolution"], channels=o["channels"], num_classes=o["num_classes"]))
    G, _ = arch.build(o["resolution"], o["channels"])
    if load:
        state, _ = stylegan3_state_dict(reference()[cfg]["state_dict"])
        G.load_state_dict(state, strict=True)
    return G.eval()


def labels_of(ref: dict, part: dict | None = None):
    """The int64 labels of ``part`` (default: ``ref``) for the conditional config, else None."""
    return (part or ref)["labels"] if ref["kwargs"]["c_dim"] else None


SCALARS = ("in_sampling_rate", "out_sampling_rate", "tmp_sampling_rate", "in_cutoff", "out_cutoff",
           "in_half_width", "out_half_width")
INTS = ("in_channels", "out_channels", "up_factor", "down_factor", "up_taps", "down_taps", "conv_kernel",
        "is_torgb", "is_critically_sampled", "use_fp16", "down_radial")


@pytest.mark.parametrize("cfg", CONFIGS)
def test_layer_schedule_equals_official(cfg):
    """Every layer's sampling rates, cutoffs, half widths (to 1e-12), sizes, channels, up/down
    factors, filter taps, padding and flags are the official SynthesisNetwork's."""
    ref = reference()[cfg]
    layers = build(cfg, load=False).synthesis_network.layers
    assert len(layers) == len(ref["layers"])
    for i, (layer, rec) in enumerate(zip(layers, ref["layers"])):
        s = layer.spec
        for name in SCALARS:
            assert getattr(s, name) == pytest.approx(float(rec[name]), abs=1e-12), (cfg, i, name)
        for name in INTS:
            assert int(getattr(s, name)) == int(rec[name]), (cfg, i, name)
        assert [s.in_size] * 2 == rec["in_size"].tolist() and [s.out_size] * 2 == rec["out_size"].tolist()
        assert list(s.padding) == rec["padding"].tolist(), (cfg, i)


@pytest.mark.parametrize("cfg", CONFIGS)
def test_filter_taps_equal_official(cfg):
    """Each layer's up- and downsampling filter (separable Kaiser sinc; "r": radial jinc down)
    equals the official one to 1e-7, and the layer filters exactly when the official one does."""
    ref = reference()[cfg]
    _, official = stylegan3_state_dict(ref["state_dict"])
    layers = build(cfg, load=False).synthesis_network.layers
    radial = 0
    for i, layer in enumerate(layers):
        for name in ("up_filter", "down_filter"):
            ours, theirs = getattr(layer, name), official.get((i, name))
            assert (ours is None) == (theirs is None), (cfg, i, name)
            if ours is not None:
                assert ours.shape == theirs.shape, (cfg, i, name)
                torch.testing.assert_close(ours, theirs, atol=1e-7, rtol=0)
                radial += ours.ndim == 2
    assert radial == (4 if cfg == "r" else 0)  # the non-critical layers' down filters in "r"


@pytest.mark.parametrize("numtaps,cutoff,width,fs", [(12, 2.0, 4.6, 32.0), (24, 5.3, 2.1, 64.0), (6, 3.0, 3.3, 16.0)])
def test_separable_filter_equals_firwin(numtaps, cutoff, width, fs):
    """Our Kaiser-windowed sinc is scipy.signal.firwin's (the paper's code's) to 1e-7."""
    ours = lowpass_filter(numtaps, cutoff, width, fs)
    theirs = torch.as_tensor(scipy.signal.firwin(numtaps=numtaps, cutoff=cutoff, width=width, fs=fs),
                             dtype=torch.float32)
    torch.testing.assert_close(ours, theirs, atol=1e-7, rtol=0)


def test_user_transform_equals_gen_images():
    """``user_transform(translate, rotate)`` is the inverse matrix gen_images.py sets, to 1e-7."""
    d = reference()
    m = user_transform(tuple(d["translate"].tolist()), float(d["rotate"]))
    torch.testing.assert_close(m, d["t"]["input"]["transform"], atol=1e-7, rtol=0)


@pytest.mark.parametrize("cfg", CONFIGS)
def test_synthesis_input_equals_official(cfg):
    """The Fourier-feature input for the recorded ws[:1, 0] equals the official one, without a
    transform, with a translate + rotate one, and with that one scaled by 3 (frequencies out of
    band, damped), to 1e-5 (sin of a rounded phase); each transform changes it."""
    ref = reference()[cfg]
    inp = build(cfg).synthesis_network.input
    rec = ref["input"]
    w = ref["ws"][:1, 0]
    with torch.no_grad():
        torch.testing.assert_close(inp(w), rec["out"], atol=1e-5, rtol=0)
        inp.transform.copy_(user_transform(tuple(reference()["translate"].tolist()), float(reference()["rotate"])))
        out = inp(w)
        inp.transform.copy_(rec["transform_scaled"])
        out_scaled = inp(w)
    torch.testing.assert_close(out, rec["out_transform"], atol=1e-5, rtol=0)
    torch.testing.assert_close(out_scaled, rec["out_transform_scaled"], atol=1e-5, rtol=0)
    assert (rec["out_transform"] - rec["out"]).abs().max() > 0.1
    assert (rec["out_transform_scaled"] - rec["out_transform"]).abs().max() > 0.1


@pytest.mark.parametrize("cfg", CONFIGS)
def test_filtered_lrelu_equals_official(cfg):
    """The recorded filtered-lrelu calls (a resampling layer, a critically sampled one, ToRGB):
    our op on the official inputs gives the official outputs (to 1e-5), and our layers call it
    with the same up/down factors, padding, gain, slope and clamp."""
    ref = reference()[cfg]
    layers = build(cfg).synthesis_network.layers
    for i, call in ref["flrelu"].items():
        layer = layers[int(i)]
        s = layer.spec
        assert (s.up_factor, s.down_factor) == (int(call["up"]), int(call["down"]))
        assert list(s.padding) == call["padding"].tolist()
        assert layer.gain == pytest.approx(float(call["gain"]), abs=1e-12)
        assert layer.slope == pytest.approx(float(call["slope"]), abs=1e-12)
        assert layer.conv_clamp == pytest.approx(float(call["clamp"]), abs=1e-12)
        y = filtered_lrelu(call["x"], layer.up_filter, layer.down_filter, call["b"], up=s.up_factor,
                           down=s.down_factor, padding=s.padding, gain=layer.gain, slope=layer.slope,
                           clamp=layer.conv_clamp)
        torch.testing.assert_close(y, call["y"], atol=1e-5, rtol=0)


def upfirdn2d_direct(x, f, up, down, padding, gain):
    """The definition (the official reference path's order): insert zeros, pad or crop, correlate
    with the flipped filter times gain (1-D: along x then y, gain ** 0.5 each), keep every
    ``down``-th."""
    n, c, h, w = x.shape
    x0, x1, y0, y1 = padding
    x = torch.nn.functional.pad(x.reshape(n, c, h, 1, w, 1), [0, up - 1, 0, 0, 0, up - 1]).reshape(n, c, h * up, w * up)
    x = torch.nn.functional.pad(x, [max(x0, 0), max(x1, 0), max(y0, 0), max(y1, 0)])
    x = x[:, :, max(-y0, 0):x.shape[2] - max(-y1, 0), max(-x0, 0):x.shape[3] - max(-x1, 0)]
    f = (f * gain ** (f.ndim / 2)).flip(list(range(f.ndim)))
    if f.ndim == 2:
        x = torch.nn.functional.conv2d(x, f.expand(c, 1, *f.shape), groups=c)
    else:
        x = torch.nn.functional.conv2d(x, f.reshape(1, 1, 1, -1).expand(c, 1, 1, -1), groups=c)
        x = torch.nn.functional.conv2d(x, f.reshape(1, 1, -1, 1).expand(c, 1, -1, 1), groups=c)
    return x[:, :, ::down, ::down]


@pytest.mark.parametrize("ndim", [1, 2])
@pytest.mark.parametrize("up,down,padding", [(2, 1, (9, 8, 9, 8)), (4, 1, (-3, 5, 2, -1)), (2, 2, (0, 0, 0, 0)),
                                             (1, 2, (3, 2, 1, 4)), (4, 2, (-7, -6, 1, 0))])
def test_upfirdn2d_equals_its_definition_for_asymmetric_filters(ndim, up, down, padding):
    """Our upfirdn2d (a transposed convolution for up > 1, strided convolution down) equals
    zero insertion + padding/cropping + convolution + decimation (to 1e-5, abs. and rel.: the
    outputs reach ~50), for random asymmetric
    filters (so a flip or an off-by-one shift fails) and negative paddings."""
    g = torch.Generator().manual_seed(up * 10 + down + ndim)
    x = torch.randn(2, 3, 7, 9, generator=g)
    f = torch.randn(*([8] * ndim), generator=g)
    ours = upfirdn2d(x, f, up=up, down=down, padding=padding, gain=up ** 2)
    torch.testing.assert_close(ours, upfirdn2d_direct(x, f, up, down, padding, up ** 2), atol=1e-5, rtol=1e-5)


def filtered_lrelu_direct(x, fu, fd, b, up, down, padding, gain, slope, clamp):
    """The definition's order (the paper's code's reference path): bias, ``upfirdn2d_direct`` up,
    leaky ReLU, times gain, clamp, ``upfirdn2d_direct`` down."""
    y = upfirdn2d_direct(x + b.reshape(1, -1, 1, 1), fu, up, 1, padding, up ** 2)
    y = torch.nn.functional.leaky_relu(y, slope) * gain
    return upfirdn2d_direct(y.clamp(-clamp, clamp), fd, 1, down, (0, 0, 0, 0), 1)


@pytest.mark.parametrize("radial", [False, True])
@pytest.mark.parametrize("binds", [False, True])
def test_filtered_lrelu_and_its_gradients_equal_the_definition(radial, binds):
    """filtered_lrelu (matrices, gain moved after the filter, the clamp skipped when a bound
    shows it cannot bind) gives the definition's output and gradients for x and b (to 1e-5), with
    a clamp far above every value and one just below the largest, which must change the output."""
    g = torch.Generator().manual_seed(5 + radial)
    x = torch.randn(2, 3, 12, 12, generator=g) * 4
    b = torch.randn(3, generator=g)
    fu = lowpass_filter(12, 3.0, 4.0, 32.0)
    fd = lowpass_filter(12, 3.0, 4.0, 32.0, radial=radial)
    kw = dict(up=2, down=2, padding=(9, 8, 9, 8), gain=2 ** 0.5, slope=0.2)
    free = filtered_lrelu_direct(x, fu, fd, b, clamp=1e9, **kw)
    top = (torch.nn.functional.leaky_relu(upfirdn2d_direct(x + b.reshape(1, -1, 1, 1), fu, 2, 1, kw["padding"], 4),
                                          0.2) * kw["gain"]).abs().max()
    clamp = float(top) * 0.99 if binds else 1e9
    outs, grads = [], []
    for fn in (filtered_lrelu_direct, filtered_lrelu):
        xg, bg = x.clone().requires_grad_(), b.clone().requires_grad_()
        y = fn(xg, fu, fd, bg, clamp=clamp, **kw)
        (y * torch.linspace(-1, 1, y.numel()).reshape(y.shape)).sum().backward()
        outs.append(y.detach())
        grads.append((xg.grad, bg.grad))
    torch.testing.assert_close(outs[1], outs[0], atol=1e-5, rtol=1e-5)
    for ours, theirs in zip(grads[1], grads[0]):
        torch.testing.assert_close(ours, theirs, atol=1e-5, rtol=1e-5)
    assert ((outs[0] - free).abs().max() > 1e-4) == binds


@pytest.mark.parametrize("cfg", CONFIGS)
def test_filtered_lrelu_clamp_equals_official(cfg):
    """With a clamp the activations reach (the recorded layer's call again, clamp 0.3), our op
    gives the official output to 1e-5, and the clamp changed it."""
    ref = reference()[cfg]
    rec = ref["flrelu_clamped"]
    i = int(rec["layer"])
    call, layer = ref["flrelu"][i], build(cfg).synthesis_network.layers[i]
    s = layer.spec
    y = filtered_lrelu(call["x"], layer.up_filter, layer.down_filter, call["b"], up=s.up_factor,
                       down=s.down_factor, padding=s.padding, gain=layer.gain, slope=layer.slope,
                       clamp=float(rec["clamp"]))
    torch.testing.assert_close(y, rec["y"], atol=1e-5, rtol=0)
    assert (rec["y"] - call["y"]).abs().max() > 0.1


@pytest.mark.parametrize("cfg", CONFIGS)
def test_ws_with_truncation_equal_official(cfg):
    """Mapping (z, and the labels for the conditional "r") with psi 0.7 and 1 gives the official ws."""
    ref = reference()[cfg]
    G = build(cfg)
    with torch.no_grad():
        torch.testing.assert_close(G.mapping(ref["z"], labels_of(ref), 0.7), ref["ws"], atol=1e-6, rtol=0)
        torch.testing.assert_close(G.mapping(ref["z"], labels_of(ref)), ref["ws_psi1"], atol=1e-6, rtol=0)


@pytest.mark.parametrize("cfg", CONFIGS)
def test_images_equal_official(cfg):
    """G(z, psi 0.7) equals the official G's images to 1e-5, without and with the translate +
    rotate transform; ``synthesis(mapping(z))`` is the same function."""
    ref = reference()[cfg]
    G = build(cfg)
    d = reference()
    with torch.no_grad():
        img = G(ref["z"], labels_of(ref), truncation_psi=0.7, noise_mode="const")
        torch.testing.assert_close(img, ref["img"], atol=1e-5, rtol=0)
        torch.testing.assert_close(G.synthesis(G.mapping(ref["z"], labels_of(ref), 0.7)), img, atol=0, rtol=0)
        G.synthesis_network.input.transform.copy_(user_transform(tuple(d["translate"].tolist()), float(d["rotate"])))
        img_t = G(ref["z"], labels_of(ref), truncation_psi=0.7, noise_mode="const")
    torch.testing.assert_close(img_t, ref["img_transform"], atol=1e-5, rtol=0)
    assert (ref["img_transform"] - ref["img"]).abs().max() > 0.01


@pytest.mark.parametrize("cfg", CONFIGS)
def test_scaled_modconv_and_export_view_equal_official(cfg):
    """The "scaled" modulated convolution (what ``export_view`` switches every layer to, so the
    batch size stays free in ONNX) gives the official images to 1e-5, and the view is a copy."""
    ref = reference()[cfg]
    G = build(cfg)
    arch = StyleGAN3(StyleGAN3.Options(config=cfg), BuildContext())
    view = arch.export_view(G)
    assert all(layer.modconv == "scaled" for layer in view.synthesis_network.layers)
    assert all(layer.modconv == "grouped" for layer in G.synthesis_network.layers)
    with torch.no_grad():
        img = view(ref["z"], labels_of(ref), truncation_psi=0.7, noise_mode="const")
    torch.testing.assert_close(img, ref["img"], atol=1e-5, rtol=0)


@pytest.mark.parametrize("cfg", CONFIGS)
def test_training_forward_updates_emas_as_official(cfg):
    """A training-mode forward (update_emas) gives the official images and leaves the official
    w_avg and every layer's magnitude_ema (to 1e-6; each one moved)."""
    ref = reference()[cfg]
    tr = ref["train"]
    G = build(cfg).train()
    before = torch.stack([layer.magnitude_ema.clone() for layer in G.synthesis_network.layers])
    with torch.no_grad():
        img = G(tr["z"], labels_of(ref, tr))
    torch.testing.assert_close(img, tr["img"], atol=1e-5, rtol=0)
    torch.testing.assert_close(G.w_avg, tr["w_avg"], atol=1e-6, rtol=0)
    after = torch.stack([layer.magnitude_ema for layer in G.synthesis_network.layers])
    torch.testing.assert_close(after, tr["magnitude_ema"], atol=1e-6, rtol=0)
    assert ((after - before).abs() > 1e-4).all()


def test_importer_refuses_an_unknown_key():
    """A key networks_stylegan3.Generator does not have is refused, naming it."""
    state = dict(reference()["t"]["state_dict"])
    state["synthesis.b4.const"] = torch.zeros(1)
    with pytest.raises(GankitError, match="synthesis.b4.const"):
        stylegan3_state_dict(state)


def test_importer_options_refuse_what_gankit_does_not_compute():
    """Official arguments gankit cannot follow are refused, naming the argument; R's widths are
    the undoubled option values."""
    k = dict(reference()["r"]["kwargs"])
    assert stylegan3_options(k)["architecture"]["channel_base"] == k["channel_base"] // 2
    for change, key in [({"conv_kernel": 3}, "conv_kernel"), ({"first_cutoff": 3}, "first_cutoff"),
                        ({"channel_max": 33}, "channel_max"), ({"foo": 1}, "foo"),
                        ({"mapping_kwargs": {"num_layers": 2, "bar": 1}}, "mapping_kwargs.bar")]:
        with pytest.raises(GankitError, match=key):
            stylegan3_options({**k, **change})


def test_architecture_builds_a_trainable_pair():
    """The registered component's G and D run together on a small conditional batch: G's images
    ``[N, C, r, r]`` reach D, whose logits ``[N]`` give gradients to G's synthesis weights."""
    arch = StyleGAN3(StyleGAN3.Options(latent_dim=16, w_dim=16, channel_base=256, channel_max=8, num_layers=4),
                     BuildContext(resolution=16, channels=1, num_classes=2))
    G, D = arch.build(16, 1)
    labels = torch.tensor([0, 1, 1, 0])
    img = G(torch.randn(4, 16), labels)
    assert img.shape == (4, 1, 16, 16)
    D(img, labels).sum().backward()
    assert G.synthesis_network.layers[0].weight.grad.abs().sum() > 0
    assert np.isfinite(img.detach().numpy()).all()
