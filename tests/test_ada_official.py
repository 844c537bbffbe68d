"""gankit's 'ada' against stylegan2-ada-pytorch's own ``AugmentPipe``, and the import of an official
snapshot's ``augment_pipe`` (its keyword arguments and p) as gankit's ``[augment]`` table.

``tests/data/ada_official_reference.pt`` holds what the official pipe output for fixed images and
seeds (``tests/data/make_ada_official_reference.py`` records it from the official code; the file
holds plain tensors only): the 'filter' and 'noise' presets alone, 'bgc', 'bgcf', 'bgcfn' (p above
1), 'bgcfnc' on RGB and grey, and a pipe no preset is (multipliers below and above 1, ops off,
custom band multipliers, filter std, noise std, cutout size). gankit's pipe is built from the same
keyword arguments by ``ada_options_from_official`` and run on the same images from the same RNG
state: the same number of draws (the RNG state after the call), and the outputs agree to float32
rounding. ``tests/test_ada.py`` checks every op against a float64 replay of the formulas.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from gan_kit import GankitError
from gan_kit.builtin.augment.ada import AdaptiveAugment
from gan_kit.builtin.augment.ada_pipeline import COLOUR, FILTER_BANK, GEOMETRIC, OPS, PRESETS
from gan_kit.builtin.importers.ada_official import ada_options_from_official

REFERENCE = torch.load(Path(__file__).parent / "data" / "ada_official_reference.pt", weights_only=True)
CASES = {case["name"]: case for case in REFERENCE["cases"]}
#: float32 rounding of the resampling and the 43-tap filter, on values up to ~6 (measured: 4.5e-6;
#: each side is up to 4.3e-5 from gankit's float64 result, hence ATOL_64).
ATOL = 2e-5
ATOL_64 = 1e-4

_BG = dict(xflip=1, rotate90=1, xint=1, scale=1, rotate=1, aniso=1, xfrac=1)
_C = dict(brightness=1, contrast=1, lumaflip=1, hue=1, saturation=1)
#: stylegan2-ada-pytorch's train.py ``augpipe_specs``, every one, as its snapshots store them.
AUGPIPE_SPECS = {
    "blit": dict(xflip=1, rotate90=1, xint=1),
    "geom": dict(scale=1, rotate=1, aniso=1, xfrac=1),
    "color": _C,
    "filter": dict(imgfilter=1),
    "noise": dict(noise=1),
    "cutout": dict(cutout=1),
    "bg": _BG,
    "bgc": {**_BG, **_C},
    "bgcf": {**_BG, **_C, "imgfilter": 1},
    "bgcfn": {**_BG, **_C, "imgfilter": 1, "noise": 1},
    "bgcfnc": {**_BG, **_C, "imgfilter": 1, "noise": 1, "cutout": 1},
}


def build(kwargs: dict, p: float) -> AdaptiveAugment:
    """gankit's 'ada' for an official pipe: the imported table, then the imported state."""
    imported = ada_options_from_official(kwargs, p)
    options = {k: v for k, v in imported["table"].items() if k != "name"}
    aug = AdaptiveAugment(AdaptiveAugment.Options(**options))
    aug.load_state_dict(imported["state"])
    return aug


def test_the_filter_bank_equals_the_official_one():
    torch.testing.assert_close(torch.tensor(FILTER_BANK, dtype=torch.float32), REFERENCE["filter_bank"], rtol=0, atol=1e-7)


@pytest.mark.parametrize("name", list(CASES))
def test_ada_equals_the_official_augment_pipe_on_the_same_seeds(name):
    """Same keyword arguments, p, images and RNG state: the same number of draws and the same
    output, to float32 rounding; and the pipe did something (some samples changed)."""
    case = CASES[name]
    aug = build(case["kwargs"], case["p"])
    assert float(aug.p) == pytest.approx(case["p"], abs=1e-7)
    torch.manual_seed(case["seed"])
    y = aug(case["x"])
    assert torch.equal(torch.rand(1), case["after"])
    torch.testing.assert_close(y, case["y"], rtol=0, atol=ATOL)
    assert (y - case["x"]).abs().amax() > 0.05
    torch.manual_seed(case["seed"])
    y64 = aug(case["x"].double())  # the same draws: the official pipe is float32 rounding off it
    torch.testing.assert_close(y64, case["y"].double(), rtol=0, atol=ATOL_64)


@pytest.mark.parametrize("preset", list(AUGPIPE_SPECS))
def test_every_augpipe_spec_imports_as_its_preset_at_the_files_p(preset):
    imported = ada_options_from_official(AUGPIPE_SPECS[preset], torch.tensor(0.25))
    assert imported["table"] == {"name": "ada", "pipeline": preset, "p_init": 0.25}
    assert set(PRESETS[preset]) == set(AUGPIPE_SPECS[preset])
    state = imported["state"]
    assert set(state) == {"p", "sign_sum", "sign_count"} and float(state["p"]) == 0.25
    aug = AdaptiveAugment(AdaptiveAugment.Options(pipeline=preset))
    aug.load_state_dict(state)
    assert float(aug.p) == 0.25 and aug.pipeline.multipliers == dict.fromkeys(AUGPIPE_SPECS[preset], 1.0)


def test_r3gans_augment_pipe_imports_as_r3gan_and_half_colour_bgcfnc_as_multipliers():
    r3gan = {**_BG, **dict.fromkeys(COLOUR, 0.5), "cutout": 1}
    assert ada_options_from_official(r3gan, 0.1)["table"] == {"name": "ada", "pipeline": "r3gan", "p_init": 0.1}
    half = {**AUGPIPE_SPECS["bgcfnc"], **dict.fromkeys(COLOUR, 0.5)}
    assert ada_options_from_official(half, 0.1)["table"]["multipliers"] == dict.fromkeys(COLOUR, 0.5)


def test_a_custom_pipe_imports_as_the_closest_preset_with_multipliers_and_ranges():
    """Ops on: xflip, scale, hue, saturation, imgfilter, noise, cutout - only 'bgcfnc' holds them
    all, so the others of it are set to 0; the ranges of ops that are on are kept, xint_max (xint
    off, no effect there either) is left out; a negative multiplier is off, as AugmentPipe's
    ``> 0`` test makes it; p above 1 is the state's (p_init cannot hold it)."""
    kwargs = {**CASES["custom-rgb"]["kwargs"], "contrast": -1}
    imported = ada_options_from_official(kwargs, 1.5)
    off = dict.fromkeys([op for op in OPS if op not in kwargs or op == "contrast"], 0.0)
    assert imported["table"] == {
        "name": "ada", "pipeline": "bgcfnc",
        "multipliers": {op: m for op, m in {**off, "scale": 0.5, "hue": 2.0, "saturation": 0.5, "imgfilter": 0.7,
                                            "noise": 1.5, "cutout": 0.5}.items()},
        "imgfilter_bands": (1.0, 0.0, 2.0, 0.5), "imgfilter_std": 0.5, "noise_std": 0.3, "cutout_size": 0.3}
    assert set(imported["table"]["multipliers"]) == set(OPS) - {"xflip"}
    assert float(imported["state"]["p"]) == 1.5
    assert ada_options_from_official({"xflip": 1, "xint": 1, "xint_max": 0.25}, 0.5)["table"] == {
        "name": "ada", "pipeline": "blit", "multipliers": {"rotate90": 0.0}, "translate_ratio": 0.25, "p_init": 0.5}
    assert ada_options_from_official({**AUGPIPE_SPECS["bgc"], "hue_max": 0.5}, 0)["table"] == {
        "name": "ada", "pipeline": "bgc", "hue_max": 0.5, "p_init": 0.0}


def _inline(value) -> str:
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k} = {_inline(v)}" for k, v in value.items()) + "}"
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_inline(v) for v in value) + "]"
    return f"'{value}'" if isinstance(value, str) else repr(float(value))


def test_the_imported_table_is_a_valid_recipe_table(tmp_path):
    from gan_kit.recipe import load_recipe
    from gan_kit.testing import write_tiny_recipe

    table = ada_options_from_official(CASES["custom-rgb"]["kwargs"], 0.6)["table"]
    recipe, _ = load_recipe(write_tiny_recipe(tmp_path), [f"augment={_inline(table)}"])
    options = recipe.augment.options
    assert options.pipeline == "bgcfnc" and options.imgfilter_bands == (1.0, 0.0, 2.0, 0.5)
    assert options.multipliers == table["multipliers"] and options.p_init == 0.6


@pytest.mark.parametrize("kwargs,p,message", [
    ({"xflip": 1, "xint": 1, "xint_max": 0.7}, 0.2,
     "augment_pipe.xint_max: xint_max = 0.7 is outside what gankit's 'ada' takes (must be in [0, 0.5], got 0.7); "
     "gankit cannot express this pipe"),
    ({"scale": 1, "scale_std": -0.2}, 0.2,
     "augment_pipe.scale_std: scale_std = -0.2 is outside what gankit's 'ada' takes (must be >= 0, got -0.2); "
     "gankit cannot express this pipe"),
    ({"xflip": 1, "shear": 1}, 0.2, "augment_pipe.shear: unknown AugmentPipe keyword argument 'shear' = 1; gankit's "
                                    "'ada' takes the ops xflip,"),
    ({"imgfilter": 1, "imgfilter_bands": [1, 1, 1]}, 0.2,
     "augment_pipe.imgfilter_bands: expected 4 band multipliers (lowest band first), got [1, 1, 1]"),
    ({"noise": "1"}, 0.2, "augment_pipe.noise: expected a finite number, got '1'"),
    ({"xflip": 0, "cutout": 0}, 0.2, "augment_pipe: every op is off"),
    ({"xflip": 1}, -0.1, "augment_pipe.p: p = -0.1 is negative"),
    ({"xflip": 1}, float("nan"), "augment_pipe.p: expected a finite number, got nan"),
])
def test_what_gankit_cannot_express_is_refused_in_one_line_naming_the_kwarg(kwargs, p, message):
    with pytest.raises(GankitError) as e:
        ada_options_from_official(kwargs, p)
    assert str(e.value).startswith(message) and "\n" not in str(e.value)


def test_the_errors_name_the_file_when_told():
    with pytest.raises(GankitError, match=r"^snap\.pkl: augment_pipe\.shear: "):
        ada_options_from_official({"shear": 1}, 0.2, where="snap.pkl: augment_pipe")


def test_every_op_of_the_presets_is_an_official_op():
    assert set(OPS) == set(GEOMETRIC) | set(COLOUR) | {"imgfilter", "noise", "cutout"}
    assert set().union(*AUGPIPE_SPECS.values()) == set(OPS)
