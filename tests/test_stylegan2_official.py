"""Official StyleGAN2 snapshots imported into gankit's stylegan2: the converted G_ema and D compute
the official networks' outputs (recorded in tests/data/official_snapshots.pt by
tests/data/make_official_snapshots.py from stylegan2-ada-pytorch's and StyleGAN3's own code), and
the conversion refuses what gankit does not implement, naming the argument or key."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import torch

from gan_kit import BuildContext, GankitError
from gan_kit.builtin.architectures.stylegan2 import StyleGAN2
from gan_kit.builtin.importers.stylegan2_official import stylegan2_options, stylegan2_state_dict

DATA = Path(__file__).parent / "data" / "official_snapshots.pt"
SOURCES = {"stylegan2-ada-pytorch": "stylegan2-ada-pytorch", "stylegan3-stylegan2": "stylegan3"}


def _cases() -> list[dict]:
    # No skip when the file is missing: the parity tests would then pass by not running.
    return [c for c in torch.load(DATA, weights_only=True)["cases"] if c["format"] in SOURCES]


CASES = {c["case"]: c for c in _cases()}


def _kwargs(case: dict, net: str) -> dict:
    return case["nets"][net]["modules"][""]["init_kwargs"]


def _official_state(case: dict, net: str) -> dict[str, torch.Tensor]:
    return dict(case["nets"][net]["tensors"])


def _imported(case: dict):
    """(options, G_ema, D) of gankit's stylegan2 filled from the case's official tensors."""
    options = stylegan2_options(_kwargs(case, "G_ema"), _kwargs(case, "D"))
    values = {k: (None if v == "none" else v) for k, v in options["architecture"].items()}
    arch = StyleGAN2(StyleGAN2.Options(**values),
                     BuildContext(resolution=options["resolution"], channels=options["channels"],
                                  num_classes=options["num_classes"]))
    G, D = arch.build(options["resolution"], options["channels"])
    G.load_state_dict(stylegan2_state_dict(_official_state(case, "G_ema"), "G", options))
    D.load_state_dict(stylegan2_state_dict(_official_state(case, "D"), "D", options))
    return options, G.eval(), D.eval()


def _labels(case: dict) -> torch.Tensor | None:
    c = case["c"]
    return c.argmax(dim=1) if c.shape[1] else None


def _fp16_blocks(case: dict) -> bool:
    """stylegan2-ada-pytorch computes its num_fp16_res top blocks in fp16 on the CPU too (the
    StyleGAN3 file forces fp32 off CUDA), so those recordings carry fp16 rounding."""
    g = _kwargs(case, "G_ema")
    return case["format"] == "stylegan2-ada-pytorch" and g["synthesis_kwargs"].get("num_fp16_res", 0) > 0


def _tol(case: dict) -> float:
    """Images: 1e-4 in float32. With fp16 blocks, drawn one seed at a time as recorded, gankit
    rounds as the official code (measured: bit-equal on the CPU); 1e-3 leaves room for other fp16
    kernels while staying far below one fp16 step at the images' magnitude (~8: 7.8e-3) and the
    float32 function's 9.3e-3, so a block computed in the wrong precision fails."""
    return 1e-3 if _fp16_blocks(case) else 1e-4


@pytest.mark.parametrize("name", sorted(CASES))
def test_options_name_the_source_and_the_data(name):
    """The options carry the snapshot's resolution, channels and classes, and which official file
    made it is read from the shape of G's kwargs (nested synthesis_kwargs or flat)."""
    case = CASES[name]
    g = _kwargs(case, "G_ema")
    options = stylegan2_options(g, _kwargs(case, "D"))
    assert (options["resolution"], options["channels"], options["num_classes"]) == (
        g["img_resolution"], g["img_channels"], g["c_dim"])
    explicit = stylegan2_options(g, _kwargs(case, "D"), source=SOURCES[case["format"]])
    assert explicit == options
    # stylegan2-ada-pytorch computes fp16 blocks on every device, the StyleGAN3 file on CUDA only
    want = "all" if case["format"] == "stylegan2-ada-pytorch" else "cuda"
    assert options["architecture"]["fp16_devices"] == want


@pytest.mark.parametrize("name", sorted(CASES))
def test_imported_g_ema_draws_the_official_ws_and_images(name):
    """For every recorded call (psi 1 and 0.7, truncation cutoff 2, noise const and none) the
    converted G_ema gives the official W and images, to 1e-4 in float32 (1e-3 where the official
    code ran blocks in fp16). One seed per call, as recorded (generate.py's batch of one), so
    the float32 rounding of W, which fp16 blocks would amplify, is the official one."""
    case = CASES[name]
    _, G, _ = _imported(case)
    z, labels = case["z"].float(), _labels(case)
    tol = _tol(case)
    with torch.no_grad():
        for gen in case["generations"]:
            G.truncation_cutoff = gen["truncation_cutoff"]
            ws = torch.cat([G.mapping(z[i:i + 1], None if labels is None else labels[i:i + 1],
                                      gen["truncation_psi"]) for i in range(len(z))])
            torch.testing.assert_close(ws, gen["ws"], rtol=0, atol=1e-5)
            img = torch.cat([G.synthesis(ws[i:i + 1], noise_mode=gen["noise_mode"]) for i in range(len(z))])
            err = (img - gen["img"]).abs().max().item()
            assert err <= tol, f"{name} psi={gen['truncation_psi']} cutoff={gen['truncation_cutoff']} " \
                               f"noise={gen['noise_mode']}: max |diff| {err:.3g}"


@pytest.mark.parametrize("name", sorted(CASES))
def test_imported_g_ema_draws_the_official_image_of_a_w_file(name):
    """generate.py --projected-w: ``G.synthesis(w, noise_mode='const')`` of a recorded W."""
    case = CASES[name]
    _, G, _ = _imported(case)
    with torch.no_grad():
        img = G.synthesis(case["w_file"]["w"].float(), noise_mode="const")
    assert (img - case["w_file"]["img"]).abs().max().item() <= _tol(case)


@pytest.mark.parametrize("name", sorted(CASES))
def test_imported_d_gives_the_official_logits(name):
    """The converted D's logits equal the official D's on the official images and on noise, to
    1e-4 also where its top blocks ran in fp16 (measured 1.2e-7: the same roundings)."""
    case = CASES[name]
    _, _, D = _imported(case)
    labels = _labels(case)
    tol = 1e-4
    with torch.no_grad():
        fake = D(case["generations"][0]["img"], labels)
        rand = D(case["d_inputs_random"], labels)
    assert (fake - case["d_logits_fake"].reshape(-1)).abs().max().item() <= tol
    assert (rand - case["d_logits_random"].reshape(-1)).abs().max().item() <= tol


def test_the_recordings_cover_each_architecture_and_the_conditional_form():
    """The parity cases above span G orig/skip/resnet, D orig/skip/resnet, 2 mbstd maps, a
    conditional G and D, and both official files (so a term of each is checked)."""
    opts = [stylegan2_options(_kwargs(c, "G_ema"), _kwargs(c, "D")) for c in CASES.values()]
    arch = [o["architecture"] for o in opts]
    assert {a["g_architecture"] for a in arch} == {"skip", "orig", "resnet"}
    assert {a.get("d_architecture") for a in arch} == {"resnet", "orig", "skip"}
    assert any(a.get("mbstd_num_channels", 1) > 1 for a in arch)
    assert any(o["num_classes"] for o in opts) and {c["format"] for c in CASES.values()} == set(SOURCES)


# ------------------------------------------------------------------------------ refusals --


def _ada_case() -> dict:
    return CASES["ada-skip-resnet"]


@pytest.mark.parametrize("path, value, message", [
    (("synthesis_kwargs", "architecture"), "foo", "G.synthesis_kwargs.architecture = 'foo'"),
    (("synthesis_kwargs", "resample_filter"), [1, 2, 1], "G.synthesis_kwargs.resample_filter = [1, 2, 1]"),
    (("synthesis_kwargs", "use_noise"), False, "G.synthesis_kwargs.use_noise = False"),
    (("synthesis_kwargs", "kernel_size"), 5, "G.synthesis_kwargs.kernel_size = 5"),
    (("synthesis_kwargs", "activation"), "relu", "G.synthesis_kwargs.activation = 'relu'"),
    (("synthesis_kwargs", "frobnicate"), 1, "G.synthesis_kwargs.frobnicate = 1"),
    (("mapping_kwargs", "w_avg_beta"), None, "G.mapping_kwargs.w_avg_beta = None"),
    (("mapping_kwargs", "activation"), "linear", "G.mapping_kwargs.activation = 'linear'"),
    (("img_resolution",), 12, "G.img_resolution = 12"),
])
def test_options_refuse_what_gankit_does_not_implement_in_g(path, value, message):
    """A G argument gankit's stylegan2 does not compute is refused, naming its path and value."""
    g = copy.deepcopy(_kwargs(_ada_case(), "G_ema"))
    target = g
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = value
    with pytest.raises(GankitError) as err:
        stylegan2_options(g, None)
    assert str(err.value).startswith(message)


@pytest.mark.parametrize("path, value, message", [
    (("architecture",), "bar", "D.architecture = 'bar'"),
    (("conv_clamp",), 128, "D.conv_clamp = 128.0"),
    (("num_fp16_res",), 3, "D.num_fp16_res = 3"),
    (("img_channels",), 1, "D.img_channels = 1"),
    (("epilogue_kwargs", "mbstd_group_size"), None, "D.epilogue_kwargs.mbstd_group_size = None"),
    (("mapping_kwargs", "num_layers"), -1, "D.mapping_kwargs.num_layers = -1"),
    (("block_kwargs", "resample_filter"), [1, 1], "D.block_kwargs.resample_filter = [1, 1]"),
    (("block_kwargs", "activation"), "relu", "D.block_kwargs.activation = 'relu'"),
    (("epilogue_kwargs", "unknown"), 2, "D.epilogue_kwargs.unknown = 2"),
])
def test_options_refuse_what_gankit_does_not_implement_in_d(path, value, message):
    """A D argument gankit cannot build (or shares with G at another value) is refused by path."""
    case = _ada_case()
    d = copy.deepcopy(_kwargs(case, "D"))
    target = d
    for key in path[:-1]:
        target = target.setdefault(key, {})
    target[path[-1]] = value
    with pytest.raises(GankitError) as err:
        stylegan2_options(_kwargs(case, "G_ema"), d)
    assert str(err.value).startswith(message)


def test_options_map_per_network_widths_cutoff_free_arguments_and_defaults():
    """D's own channel_base becomes d_channel_base; memory-format and FreezeD arguments are
    accepted; an argument left out takes its official file's default (conv_clamp: None in
    stylegan2-ada-pytorch, 256 in StyleGAN3); mbstd_num_channels 0 turns the layer off."""
    case = _ada_case()
    g = copy.deepcopy(_kwargs(case, "G_ema"))
    d = copy.deepcopy(_kwargs(case, "D"))
    d["channel_base"] = 1024
    d["block_kwargs"] = {"freeze_layers": 2, "fp16_channels_last": True}
    d["epilogue_kwargs"]["mbstd_num_channels"] = 0
    a = stylegan2_options(g, d)["architecture"]
    assert a["d_channel_base"] == 1024 and "d_channel_max" not in a and a["mbstd_group_size"] == 0
    flat = {k: v for k, v in g.items() if k != "synthesis_kwargs"}
    flat.update({k: v for k, v in g["synthesis_kwargs"].items() if k != "conv_clamp"})
    assert stylegan2_options(flat, None)["architecture"]["conv_clamp"] == 256
    g["synthesis_kwargs"].pop("conv_clamp")
    assert stylegan2_options(g, None)["architecture"]["conv_clamp"] == "none"
    with pytest.raises(GankitError, match="source="):
        stylegan2_options({k: v for k, v in flat.items() if k in ("z_dim", "w_dim", "c_dim", "img_resolution",
                                                                 "img_channels", "mapping_kwargs")}, None)


def test_state_dict_refuses_an_unused_or_missing_tensor_and_another_filter():
    """Every official tensor must find its gankit key and every gankit key a tensor; a resampling
    filter other than [1, 3, 3, 1] is refused; each names the key."""
    case = _ada_case()
    options = stylegan2_options(_kwargs(case, "G_ema"), _kwargs(case, "D"))
    g = _official_state(case, "G_ema")
    extra = dict(g, **{"synthesis.b8.conv0.magnitude": torch.zeros(())})
    with pytest.raises(GankitError, match=r"synthesis\.b8\.conv0\.magnitude"):
        stylegan2_state_dict(extra, "G", options)
    missing = {k: v for k, v in g.items() if k != "synthesis.b16.torgb.bias"}
    with pytest.raises(GankitError, match=r"to_rgb\.16\.bias has no official tensor"):
        stylegan2_state_dict(missing, "G", options)
    box = dict(g, **{"synthesis.b8.resample_filter": torch.full((4, 4), 1 / 16)})
    with pytest.raises(GankitError, match=r"synthesis\.b8\.resample_filter"):
        stylegan2_state_dict(box, "G", options)
    d = _official_state(case, "D")
    wrong = dict(d, **{"b4.out.weight": torch.zeros(2, 3)})
    with pytest.raises(GankitError, match=r"b4\.out\.weight: shape"):
        stylegan2_state_dict(wrong, "D", options)


@pytest.mark.parametrize("name", ["ada-conditional", "ada-fp16-clamp", "sg3-skip-resnet", "ada-resnet-skip"])
def test_the_options_load_as_a_recipe_and_build_the_imported_networks(tmp_path, name):
    """The architecture table the options give is a valid recipe table: loaded with the data's
    resolution, it holds the same values and builds networks the converted tensors fill."""
    import json

    from gan_kit.recipe import load_recipe
    from gan_kit.testing import write_tiny_recipe

    case = CASES[name]
    options = stylegan2_options(_kwargs(case, "G_ema"), _kwargs(case, "D"))
    table = ", ".join(f"{k}={json.dumps(v)}" for k, v in options["architecture"].items())
    conditional = ", conditional=true" if options["num_classes"] else ""
    recipe, _ = load_recipe(write_tiny_recipe(tmp_path), [
        f"architecture={{name='stylegan2', {table}{conditional}}}", f"data.resolution={options['resolution']}",
        "growth={name='static', batch_size=4}", "penalty=[]"])
    built = recipe.architecture.options
    for key, value in options["architecture"].items():
        assert getattr(built, key) == (None if value == "none" else value), key
    arch = StyleGAN2(built, BuildContext(resolution=options["resolution"], channels=options["channels"],
                                         num_classes=options["num_classes"]))
    G, D = arch.build(options["resolution"], options["channels"])
    G.load_state_dict(stylegan2_state_dict(_official_state(case, "G"), "G", options))
    D.load_state_dict(stylegan2_state_dict(_official_state(case, "D"), "D", options))
