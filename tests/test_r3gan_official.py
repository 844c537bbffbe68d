"""Reading official R3GAN networks (github.com/brownvc/R3GAN) into gankit's ``r3gan``:
``gan_kit.builtin.importers.r3gan_official`` infers the options from the official tensors and
module attributes, renames the tensors, and the imported G and D compute the official images and
logits; whatever gankit would compute differently is refused in one line.

The official networks are the ones ``tests/data/r3gan_reference.pt`` recorded (their state dicts
and outputs; written by ``tests/data/make_r3gan_reference.py``), wrapped here as an official
snapshot holds them: the ``training.networks`` wrapper's ``Model.`` prefix, the resamplers'
``Kernel`` buffers (the official kernel, recorded), and the attributes an unpickled module tree
gives (``z_dim``, ``c_dim``, ``img_resolution``, each stage's ``DataType``, the convolutions'
``groups``, ``padding`` and ``kernel_size``). ``tests/data/official_snapshots.pt``, where present,
adds whole official module trees with bfloat16 stages (the presets' FP16Stages) and their outputs.
"""

from __future__ import annotations

import copy
from pathlib import Path

import numpy as np
import pytest
import torch

from gan_kit.base.errors import GankitError
from gan_kit.builtin.architectures.r3gan import R3GAN
from gan_kit.builtin.importers.r3gan_official import (OFFICIAL_FILTER, architecture_options, gankit_key,
                                                      r3gan_options, r3gan_state_dict, resampling_filter)
from gan_kit.plugin_api.components import BuildContext

DATA = Path(__file__).parent / "data"
REF = torch.load(DATA / "r3gan_reference.pt", weights_only=True)
SNAPSHOTS = DATA / "official_snapshots.pt"
CASES = ["unconditional", "conditional"]
ATOL = 1e-5


def official_kernel(taps: list[float]) -> torch.Tensor:
    """The official ``CreateLowpassKernel(taps, Inplace=False)``: ``taps`` convolved with [1, 1],
    its outer product, normalised to sum 1 (R3GAN/Resamplers.py)."""
    k = np.convolve(taps, [1, 1]).reshape(1, -1)
    k = torch.tensor(k.T @ k, dtype=torch.float32)
    return k / k.sum()


def snapshot(case: str):
    """The recorded official ``case`` as an unpickled snapshot gives it: (G_state, G_attributes,
    D_state, D_attributes)."""
    cfg = REF["config"]
    classes = REF["classes"] if case == "conditional" else None
    widths, cards, blocks = cfg["widths"], cfg["cardinalities"], cfg["blocks"]
    n, kernel = len(widths), REF["resampling"]["kernel"]
    g = {f"Model.{k}": v for k, v in REF[case]["G"].items()}
    d = {f"Model.{k}": v for k, v in REF[case]["D"].items()}
    g_attr = {"": {"z_dim": cfg["latent_dim"], "c_dim": classes["num_classes"] if classes else 0,
                   "img_resolution": cfg["resolution"]}, "Model": {}}
    d_attr: dict[str, dict] = {"": {}, "Model": {}}

    def conv(attr, path, groups, k):
        attr[path] = {"groups": groups, "kernel_size": (k, k), "padding": ((k - 1) // 2,) * 2, "stride": (1, 1)}

    def block(attr, path, card):
        for i, (groups, k) in enumerate(((1, 1), (card, cfg["kernel"]), (1, 1)), 1):
            conv(attr, f"{path}.LinearLayer{i}.Layer", groups, k)

    for s in range(n):
        g_attr[f"Model.MainLayers.{s}"] = {"DataType": "torch.float32"}
        if s:
            g[f"Model.MainLayers.{s}.Layers.0.Resampler.Kernel"] = kernel.clone()
        for b in range(blocks[s]):
            block(g_attr, f"Model.MainLayers.{s}.Layers.{b + 1}", cards[s])
        ds = n - 1 - s  # D's stage of this resolution (D runs from the top)
        d_attr[f"Model.MainLayers.{ds}"] = {"DataType": "torch.float32"}
        for b in range(blocks[s]):
            block(d_attr, f"Model.MainLayers.{ds}.Layers.{b}", cards[s])
        if ds < n - 1:
            d[f"Model.MainLayers.{ds}.Layers.{blocks[s]}.Resampler.Kernel"] = kernel.clone()
        else:
            d_attr[f"Model.MainLayers.{ds}.Layers.{blocks[s]}.Basis"] = {"groups": widths[0], "padding": (0, 0),
                                                                        "stride": (1, 1), "kernel_size": (4, 4)}
    conv(g_attr, "Model.AggregationLayer.Layer", 1, 1)
    conv(d_attr, "Model.ExtractionLayer.Layer", 1, 1)
    return g, g_attr, d, d_attr


def imported(g, g_attr, d, d_attr):
    """gankit's G and D built from what ``r3gan_options`` inferred, with the converted weights."""
    options = r3gan_options(g, g_attr, d, d_attr)
    arch = R3GAN(architecture_options(options), BuildContext(resolution=options["resolution"],
                                                             channels=options["channels"],
                                                             num_classes=options["num_classes"]))
    G, D = arch.build(options["resolution"], options["channels"])
    G.load_state_dict(r3gan_state_dict(g, "G", options))
    D.load_state_dict(r3gan_state_dict(d, "D", options))
    return options, G.eval(), D.eval()


# --------------------------------------------------------------------------- options --

@pytest.mark.parametrize("case", CASES)
def test_options_are_read_back_from_the_official_tensors_and_attributes(case):
    options = r3gan_options(*snapshot(case))
    cfg = REF["config"]
    conditional = case == "conditional"
    assert options == {
        "resolution": 16, "channels": 3, "num_classes": REF["classes"]["num_classes"] if conditional else 0,
        "architecture": {"latent_dim": 8, "width": 16, "width_by_resolution": {8: 8, 16: 8},
                         "cardinality": 4, "cardinality_by_resolution": {8: 2, 16: 2},
                         "blocks_per_stage": 1, "blocks_by_resolution": {16: 2}, "expansion": 2, "kernel_size": 3,
                         "bf16_resolutions": [],
                         **({"g_class_dim": 8, "d_class_dim": 16} if conditional else {})}}
    o = architecture_options(options)
    arch = R3GAN(o)
    assert (arch.widths(16), arch.cardinalities(16), arch.stage_blocks(16)) == (
        cfg["widths"], cfg["cardinalities"], cfg["blocks"])


def test_the_options_are_toml():
    """The architecture table survives TOML (int keys written as strings are read back)."""
    import tomllib

    from gan_kit.base.options import toml_value

    arch = r3gan_options(*snapshot("conditional"))["architecture"]
    text = "\n".join(f"{k} = {toml_value(v)}" for k, v in arch.items())
    back = dict(tomllib.loads(text))
    assert architecture_options({"resolution": 16, "architecture": back}) == architecture_options(
        {"resolution": 16, "architecture": arch})


def test_the_resampling_filter_is_read_back_from_the_kernel_buffer():
    assert resampling_filter(REF["resampling"]["kernel"]) == OFFICIAL_FILTER == [1, 2, 1]
    assert resampling_filter(official_kernel([1, 3, 3, 1])) == [1, 3, 3, 1]
    assert resampling_filter(official_kernel([1, 1])) == [1, 1]


# ----------------------------------------------------------------------- conversion --

@pytest.mark.parametrize("case", CASES)
def test_imported_g_and_d_compute_the_official_images_and_logits(case):
    _, G, D = imported(*snapshot(case))
    ref = REF[case]
    y = ref["labels"]
    with torch.no_grad():
        fake = G(ref["z_d"]) if y is None else G(ref["z_d"], y)
        assert (fake - ref["forward"]["fake"]).abs().max() < ATOL
        for images, key in ((ref["real"], "real_logits"), (ref["forward"]["fake"], "fake_logits")):
            logits = D(images) if y is None else D(images, y)
            assert (logits - ref["forward"][key]).abs().max() < ATOL, key


@pytest.mark.parametrize("case", CASES)
def test_every_official_tensor_is_used_once_and_every_gankit_parameter_filled(case):
    g, g_attr, d, d_attr = snapshot(case)
    options = r3gan_options(g, g_attr, d, d_attr)
    for net, state in (("G", g), ("D", d)):
        out = r3gan_state_dict(state, net, options)
        kernels = [k for k in state if k.endswith("Resampler.Kernel")]
        assert len(out) == len(state) - len(kernels) == len(REF[case][net])
        for name, tensor in state.items():  # the same numbers under gankit's names
            if name not in kernels:
                d_blocks = list(reversed(REF["config"]["blocks"]))
                assert torch.equal(out[gankit_key(name, net, d_blocks)], tensor)


# -------------------------------------------------------------------------- refusals --

def refused(case: str, edit, match: str):
    """``edit(g, g_attr, d, d_attr)`` applied to the snapshot makes the import fail with one line
    matching ``match``."""
    parts = list(copy.deepcopy(snapshot(case)))
    edit(*parts)
    with pytest.raises(GankitError, match=match) as e:
        imported(*parts)
    assert "\n" not in str(e.value)


def _set_kernel(taps):
    def edit(g, ga, d, da):
        g["Model.MainLayers.2.Layers.0.Resampler.Kernel"] = official_kernel(taps)
    return edit


REFUSALS = {
    "another filter": (_set_kernel([1, 3, 3, 1]),
                       r"^G Model\.MainLayers\.2\.Layers\.0\.Resampler\.Kernel: resampling filter \[1, 3, 3, 1\] .*"
                       r"\[1, 2, 1\] only"),
    "a box filter": (_set_kernel([1, 1]), r"resampling filter \[1, 1\]"),
    "no separable kernel": (lambda g, ga, d, da: g["Model.MainLayers.1.Layers.0.Resampler.Kernel"].__setitem__(
        (0, 0), 0.5), r"^G .*Resampler\.Kernel: the resampling kernel is no separable outer product"),
    "groups disagree": (lambda g, ga, d, da: ga["Model.MainLayers.2.Layers.1.LinearLayer2.Layer"].__setitem__(
        "groups", 4), r"^G Model\.MainLayers\.2\.Layers\.1\.LinearLayer2\.Layer\.groups: 4, but the weight's shape "
                      r"gives 2"),
    "padding": (lambda g, ga, d, da: da["Model.MainLayers.0.Layers.0.LinearLayer2.Layer"].__setitem__(
        "padding", (0, 0)), r"^D Model\.MainLayers\.0\.Layers\.0\.LinearLayer2\.Layer\.padding: \[0, 0\], but a 3x3 "
                            r"official Convolution gives \[1, 1\]"),
    "float16 stage": (lambda g, ga, d, da: ga["Model.MainLayers.1"].__setitem__("DataType", "torch.float16"),
                      r"^G Model\.MainLayers\.1\.DataType: torch\.float16; gankit's r3gan computes a stage in "
                      r"torch\.float32 or torch\.bfloat16"),
    "bf16 in G only": (lambda g, ga, d, da: ga["Model.MainLayers.2"].__setitem__("DataType", "torch.bfloat16"),
                       r"^D stage 0 \(16 px\): bfloat16 False, but G's 16 px stage True; gankit's r3gan builds D as "
                       r"G's mirror"),
    "bf16 at 4 px": (lambda g, ga, d, da: (ga["Model.MainLayers.0"].__setitem__("DataType", "torch.bfloat16"),
                                           da["Model.MainLayers.2"].__setitem__("DataType", "torch.bfloat16")),
                     r"^G Model\.MainLayers\.0\.DataType: torch\.bfloat16 at 4 px"),
    "no DataType": (lambda g, ga, d, da: ga.pop("Model.MainLayers.1"),
                    r"^G Model\.MainLayers\.1: attribute 'DataType' missing"),
    "img_resolution": (lambda g, ga, d, da: ga[""].__setitem__("img_resolution", 32),
                       r"^G img_resolution: 32, but G's 3 stages \(4 px to 16 px\) gives 16"),
    "z_dim": (lambda g, ga, d, da: ga[""].__setitem__("z_dim", 6),
              r"^G Model\.MainLayers\.0\.Layers\.0\.LinearLayer\.weight: 8 inputs, but z_dim 6"),
    "c_dim": (lambda g, ga, d, da: ga[""].__setitem__("c_dim", 3),
              r"^G and D: c_dim 3, but G embeds 0 classes and D 0"),
    "D width": (lambda g, ga, d, da: d.__setitem__("Model.MainLayers.1.Layers.1.LinearLayer.Layer.weight",
                                                   torch.zeros(12, 8, 1, 1)),
                r"^D Model\.MainLayers\.2\.Layers\.0\.LinearLayer1\.Layer\.weight: shape \[32, 16, 1, 1\]; gankit's "
                r"r3gan expands the stage's 12 channels"),
    "D blocks": (lambda g, ga, d, da: [d.pop(k) for k in list(d) if k.startswith("Model.MainLayers.0.Layers.1.")]
                 and [d.__setitem__(k.replace("Layers.2.", "Layers.1."), d.pop(k)) for k in list(d)
                      if k.startswith("Model.MainLayers.0.Layers.2.")],
                 r"^D stage 0 \(16 px\): residual blocks 1, but G's 16 px stage 2; gankit's r3gan builds D as G's "
                 r"mirror"),
    "expansion": (lambda g, ga, d, da: [g.__setitem__(f"Model.MainLayers.2.Layers.2.{k}", v) for k, v in (
        ("LinearLayer1.Layer.weight", torch.zeros(24, 8, 1, 1)), ("LinearLayer2.Layer.weight", torch.zeros(24, 12, 3, 3)),
        ("LinearLayer3.Layer.weight", torch.zeros(8, 24, 1, 1)), ("NonLinearity1.Bias", torch.zeros(24)),
        ("NonLinearity2.Bias", torch.zeros(24)))],
                  r"^G and D: expansion factors \[2, 3\] across the blocks; gankit's r3gan has one expansion"),
    "cardinality per block": (lambda g, ga, d, da: (
        g.__setitem__("Model.MainLayers.2.Layers.2.LinearLayer2.Layer.weight", torch.zeros(16, 16, 3, 3)),
        ga["Model.MainLayers.2.Layers.2.LinearLayer2.Layer"].__setitem__("groups", 1)),
        r"^G stage 2 \(16 px\): blocks with cardinalities \[1, 2\]; gankit's r3gan has one cardinality per stage"),
    "kernel size": (lambda g, ga, d, da: (
        g.__setitem__("Model.MainLayers.1.Layers.1.LinearLayer2.Layer.weight", torch.zeros(16, 8, 5, 5)),
        ga["Model.MainLayers.1.Layers.1.LinearLayer2.Layer"].update(kernel_size=(5, 5), padding=(2, 2))),
        r"^G and D: kernel sizes \[3, 5\] across the blocks; gankit's r3gan has one kernel_size"),
    "a foreign tensor": (lambda g, ga, d, da: g.__setitem__("mapping.fc0.weight", torch.zeros(1)),
                         r"^G mapping\.fc0\.weight: not a tensor of the official wrapper's Model"),
    "an unknown layer": (lambda g, ga, d, da: g.__setitem__("Model.MainLayers.1.Layers.1.Gamma", torch.zeros(1)),
                         r"^G Model\.MainLayers\.1\.Layers\.1\.Gamma: no tensor of the official R3GAN G has this "
                         r"name"),
    "a missing tensor": (lambda g, ga, d, da: d.pop("Model.MainLayers.2.Layers.1.Basis.weight"),
                         r"^D Model\.MainLayers\.2\.Layers\.1\.Basis\.weight: missing from the state dict"),
    "D's logit layer": (lambda g, ga, d, da: d.__setitem__("Model.MainLayers.2.Layers.1.LinearLayer.weight",
                                                           torch.zeros(2, 16)),
                        r"^D Model\.MainLayers\.2\.Layers\.1\.LinearLayer\.weight: 2 outputs; gankit's r3gan gives 1 "
                        r"\(the logit\)"),
    "channels": (lambda g, ga, d, da: d.__setitem__("Model.ExtractionLayer.Layer.weight", torch.zeros(8, 1, 1, 1)),
                 r"^G makes 3-channel images, D reads 1"),
}


@pytest.mark.parametrize("what", sorted(REFUSALS))
def test_what_gankit_would_compute_differently_is_refused_in_one_line(what):
    edit, match = REFUSALS[what]
    refused("unconditional", edit, match)


def test_d_s_class_projection_must_match_its_embedding():
    def edit(g, ga, d, da):
        d["Model.EmbeddingLayer.weight"] = torch.zeros(12, REF["classes"]["num_classes"])
    refused("conditional", edit, r"^D Model\.MainLayers\.2\.Layers\.1\.LinearLayer\.weight: 16 outputs; gankit's "
                                 r"r3gan gives 12 \(the class projection\)")


def test_state_dict_refuses_options_of_another_snapshot_a_missing_tensor_and_the_other_network():
    g, g_attr, d, d_attr = snapshot("unconditional")
    options = r3gan_options(g, g_attr, d, d_attr)
    other = copy.deepcopy(options)
    other["architecture"]["width_by_resolution"][8] = 12
    with pytest.raises(GankitError, match=r"^G Model\.MainLayers\.1\.Layers\.0\.LinearLayer\.Layer\.weight: shape "
                                          r"\[8, 16, 1, 1\], gankit's stages\.1\.0\.conv\.weight has \[12, 16, 1, 1\]$"):
        r3gan_state_dict(g, "G", other)
    fewer = copy.deepcopy(options)
    fewer["architecture"]["blocks_by_resolution"] = {}
    with pytest.raises(GankitError, match=r"^G Model\.MainLayers\.2\.Layers\.2\.LinearLayer1\.Layer\.weight: gankit's "
                                          r"r3gan built from these options has no stages\.2\.2\.conv1\.weight"):
        r3gan_state_dict(g, "G", fewer)
    with pytest.raises(GankitError, match=r"^D blocks\.2\.1\.linear\.weight: no official tensor fills it \(1 "
                                          r"gankit tensors empty"):
        r3gan_state_dict({k: v for k, v in d.items() if k != "Model.MainLayers.2.Layers.1.LinearLayer.weight"}, "D",
                         options)
    with pytest.raises(GankitError, match=r"^D Model\.MainLayers\.0\.Layers\.0\.Basis: no tensor of the official "
                                          r"R3GAN D has this name"):
        r3gan_state_dict(g, "D", options)


# ------------------------------------------------------------- whole official snapshots --
# tests/data/official_snapshots.pt (written by tests/data/make_official_snapshots.py from the
# official code): module trees of official snapshots' G, D and G_ema, and what R3GAN's
# gen_images.py draws from G_ema for seeds 0-3 (z = np.random.RandomState(seed).randn(1, z_dim),
# float64; the one-hot class) and D's logits on those images.

def _decode(value):
    """An attribute value of the recorded trees as an unpickler gives it (a dtype as its name)."""
    if isinstance(value, dict) and value.get("__type__") == "torch.dtype":
        return value["value"]
    return value


def _plain(tree: dict) -> tuple[dict, dict]:
    """(state, attributes) of a recorded module tree."""
    attributes = {path: {k: _decode(v) for k, v in m["attributes"].items()} for path, m in tree["modules"].items()}
    return dict(tree["tensors"]), attributes


def _r3gan_cases() -> list[dict]:
    # No skip when the file is missing: the parity tests would then pass by not running.
    return [c for c in torch.load(SNAPSHOTS, weights_only=True)["cases"] if c["format"] == "r3gan"]


R3GAN_CASES = _r3gan_cases()


def _gen_images_uint8(img: torch.Tensor) -> torch.Tensor:
    """gen_images.py's pixels: ``(img.permute(0, 2, 3, 1) * 127.5 + 128).clamp(0, 255).to(uint8)``
    in the image's own dtype - bfloat16 where G's last stage is (FP16Stages), so the arithmetic
    rounds to bfloat16 before the cast truncates."""
    return (img.permute(0, 2, 3, 1) * 127.5 + 128).clamp(0, 255).to(torch.uint8)


def _import_case(case: dict, bf16: bool = True):
    """(options, G_ema, D) of gankit from ``case``'s trees; ``bf16=False``: the same weights with
    every stage in float32 (to measure the official bfloat16's own rounding)."""
    g, g_attr = _plain(case["nets"]["G_ema"])
    d, d_attr = _plain(case["nets"]["D"])
    options = r3gan_options(g, g_attr, d, d_attr)
    if not bf16:
        options = {**options, "architecture": {**options["architecture"], "bf16_resolutions": []}}
    arch = R3GAN(architecture_options(options), BuildContext(resolution=options["resolution"], channels=3,
                                                             num_classes=options["num_classes"]))
    G, D = arch.build(options["resolution"], options["channels"])
    G.load_state_dict(r3gan_state_dict(g, "G", options))
    D.load_state_dict(r3gan_state_dict(d, "D", options))
    return options, G.eval(), D.eval()


def _outputs(case: dict, G, D):
    labels = case["c"].argmax(dim=1) if case["c"].shape[1] else None
    with torch.no_grad():
        # gen_images.py's z is float64; the official first stage casts it to float32.
        z = case["z"].float()
        img = G(z) if labels is None else G(z, labels)
        fake = case["generations"][0]["img"]
        d_fake = D(fake) if labels is None else D(fake, labels)
        rand = case["d_inputs_random"]
        d_rand = D(rand) if labels is None else D(rand, labels)
    return img, d_fake, d_rand


@pytest.mark.parametrize("name", [c["case"] for c in R3GAN_CASES] or ["none"])
def test_official_snapshot_trees_import_with_the_options_they_were_built_with(name):
    case = next(c for c in R3GAN_CASES if c["case"] == name)
    g, g_attr = _plain(case["nets"]["G"])
    d, d_attr = _plain(case["nets"]["D"])
    options = r3gan_options(g, g_attr, d, d_attr)
    expected = {  # make_official_snapshots.py's train.py kwargs, in gankit's terms
        "r3gan-unconditional": (16, 0, {"latent_dim": 16, "width": 16, "width_by_resolution": {8: 8, 16: 8},
                                        "cardinality": 4, "cardinality_by_resolution": {8: 2, 16: 2},
                                        "blocks_per_stage": 1, "blocks_by_resolution": {16: 2},
                                        "bf16_resolutions": []}),
        "r3gan-conditional": (8, 4, {"latent_dim": 16, "width": 16, "width_by_resolution": {}, "cardinality": 2,
                                     "cardinality_by_resolution": {}, "blocks_per_stage": 1,
                                     "blocks_by_resolution": {}, "bf16_resolutions": [], "g_class_dim": 16,
                                     "d_class_dim": 16}),
        "r3gan-bf16": (8, 0, {"latent_dim": 16, "width": 16, "width_by_resolution": {8: 8}, "cardinality": 2,
                              "cardinality_by_resolution": {}, "blocks_per_stage": 1, "blocks_by_resolution": {},
                              "bf16_resolutions": [8]}),
    }[name]
    assert options == {"resolution": expected[0], "channels": 3, "num_classes": expected[1],
                       "architecture": {**expected[2], "expansion": 2, "kernel_size": 3}}
    g_ema, g_ema_attr = _plain(case["nets"]["G_ema"])
    assert r3gan_options(g_ema, g_ema_attr, d, d_attr) == options
    # G and G_ema hold other weights, each converted as it is.
    ours, ours_ema = r3gan_state_dict(g, "G", options), r3gan_state_dict(g_ema, "G", options)
    assert any(not torch.equal(ours[k], ours_ema[k]) for k in ours)
    assert torch.equal(ours["to_rgb.weight"], g["Model.AggregationLayer.Layer.weight"])


@pytest.mark.parametrize("name", [c["case"] for c in R3GAN_CASES if not c["case"].endswith("bf16")] or ["none"])
def test_imported_snapshots_draw_the_official_images_pixels_and_logits(name):
    """float32 networks: G_ema's images for seeds 0-3 (gen_images.py's z and class) and D's logits
    equal the official ones to 1e-5, and gen_images.py's uint8 pixels exactly."""
    case = next(c for c in R3GAN_CASES if c["case"] == name)
    _, G, D = _import_case(case)
    img, d_fake, d_rand = _outputs(case, G, D)
    run = case["generations"][0]
    assert (img - run["img"]).abs().max() < ATOL
    assert torch.equal(_gen_images_uint8(img), run["uint8"])
    assert (d_fake - case["d_logits_fake"]).abs().max() < ATOL
    assert (d_rand - case["d_logits_random"]).abs().max() < ATOL


def test_an_imported_bf16_snapshot_rounds_as_the_official_bf16_stages():
    """FP16Stages: gankit's bf16 stages give the official bfloat16 images and logits, far closer
    than the official bfloat16 is to the same networks in float32 (its own rounding error), and
    gen_images.py's pixels (computed in bfloat16) within one level."""
    case = next(c for c in R3GAN_CASES if c["case"] == "r3gan-bf16")
    _, G, D = _import_case(case)
    _, G32, D32 = _import_case(case, bf16=False)
    img, d_fake, d_rand = _outputs(case, G, D)
    img32, d_fake32, d_rand32 = _outputs(case, G32, D32)
    official = case["generations"][0]["img"]
    own = (img32 - official).abs().max()  # the official bfloat16's rounding error
    assert own > 1e-3
    assert (img - official).abs().max() <= 0.05 * own
    for ours, ours32, key in ((d_fake, d_fake32, "d_logits_fake"), (d_rand, d_rand32, "d_logits_random")):
        own = (ours32 - case[key]).abs().max()
        assert own > 1e-5, key
        assert (ours - case[key]).abs().max() <= 0.05 * own, key
    ours_u8 = _gen_images_uint8(img.bfloat16())
    official_u8 = _gen_images_uint8(official.bfloat16())
    assert (ours_u8.int() - official_u8.int()).abs().max() <= 1
