"""Official StyleGAN3-T / -R network snapshots (the StyleGAN3 repository's alias-free networks),
end to end, and ``gankit generate --translate / --rotate``.

``tests/data/official_snapshots.pt``'s cases ``sg3-t`` (RGB, unconditional, with an ADA pipe at
p = 0.2) and ``sg3-r-conditional`` (grayscale, 3 classes, 1x1 convolutions, radial filters) hold
tiny networks the official code built and what it drew from them (written by
``tests/data/make_official_snapshots.py --sg3-alias-free``); ``official_pickles`` rebuilds the
snapshot pickle of the official layout (placeholder source text) from them. From that file:

* the Python API (``load_generator``) draws the official images of seeds 0-3 to 1e-5, with
  truncation, and the projector's W file; G, G_ema (magnitude EMAs, w_avg) and D come back;
* ``gankit generate --translate X,Y --rotate DEG`` draws gen_images.py's images with that
  transform (the PNG's levels; the matrix and float images to 1e-5 through the Python API);
  another architecture and malformed values are refused in one line;
* ``gankit import`` writes a folder whose recipe trains one step from the file's weights;
* what gankit's stylegan3 does not compute the same way is refused in one line naming it.
"""

from __future__ import annotations

import copy
import json
import tomllib
from pathlib import Path

import numpy as np
import pytest
import torch
from click.testing import CliRunner
from PIL import Image

from gan_kit.cli import cli
from gan_kit.plugin_api.foreign import import_file
from gan_kit.plugin_api.manager import build_plugins
from gan_kit.runs import checkpoint as ckpt
from gan_kit.runs.checkpoint import load_generator
from official_pickles import official_case, write_official_pickle

CASES = ("sg3-t", "sg3-r-conditional")
SEEDS = [0, 1, 2, 3]


def invoke(*args):
    return CliRunner().invoke(cli, [str(a) for a in args])


def _pickle(name: str, folder: Path, case: dict | None = None) -> Path:
    path = folder / f"network-snapshot-{name}.pkl"
    write_official_pickle(case or official_case(name), path)
    return path


def _z(case: dict) -> torch.Tensor:
    # the recorded z are the official scripts' np.random.RandomState(seed).randn rows
    return case["z"].float()


def _labels(case: dict):
    return torch.full((len(SEEDS),), case["class_idx"], dtype=torch.int64) if case["class_idx"] is not None else None


def _png(path: Path) -> np.ndarray:
    a = np.asarray(Image.open(path))
    return a[..., None] if a.ndim == 2 else a


@pytest.mark.parametrize("name", CASES)
def test_the_python_api_draws_the_official_images_to_1e5(name, tmp_path):
    """load_generator on the pickle: seeds 0-3 (numpy's rule) give the official G_ema images to
    1e-5, untruncated and at psi 0.7; the projector's W file gives its image."""
    case = official_case(name)
    G, _, recipe, _ = load_generator(_pickle(name, tmp_path))
    assert recipe.architecture.name == "stylegan3"
    assert recipe.architecture.options.config == ("r" if "-r" in name else "t")
    z, labels = _z(case), _labels(case)
    with torch.no_grad():
        for gen in case["generations"]:
            if gen["truncation_cutoff"] is not None:
                continue  # the cutoff is an architecture option in gankit, not a per-call argument
            img = torch.cat([G(z[i:i + 1], labels[i:i + 1] if labels is not None else None,
                               truncation_psi=gen["truncation_psi"]) for i in range(len(SEEDS))])
            torch.testing.assert_close(img, gen["img"], atol=1e-5, rtol=0)
            ws = G.mapping(z, labels, gen["truncation_psi"])
            torch.testing.assert_close(ws, gen["ws"].float(), atol=1e-5, rtol=0)
        img = G.synthesis(case["w_file"]["w"].float())
        torch.testing.assert_close(img, case["w_file"]["img"], atol=1e-5, rtol=0)


@pytest.mark.parametrize("name", CASES)
def test_g_g_ema_d_magnitude_emas_and_augment_p_come_back(name, tmp_path):
    """The imported checkpoint holds G and G_ema apart (each layer's magnitude EMA, w_avg, the
    input's transform), D's weights, and the ADA pipe's p; the seed rule is numpy's and the
    licence NVIDIA's non-commercial one."""
    case = official_case(name)
    state, importer = import_file(_pickle(name, tmp_path), build_plugins().registry)
    assert importer == "stylegan3"
    assert state["imported"]["seeds"] == "numpy" and "non-commercial" in state["imported"]["license"]
    for net in ("G", "G_ema"):
        official = case["nets"][net]["tensors"]
        layers = [k for k in official if k.endswith("magnitude_ema")]
        assert len(layers) == 5  # 4 layers + ToRGB
        for i, key in enumerate(layers):
            assert torch.equal(state[net][f"synthesis_network.layers.{i}.magnitude_ema"], official[key])
        assert torch.equal(state[net]["w_avg"], official["mapping.w_avg"])
    assert not torch.equal(state["G"]["w_avg"], state["G_ema"]["w_avg"])
    assert torch.equal(state["D"]["from_rgb.weight"], case["nets"]["D"]["tensors"]["b16.fromrgb.weight"])
    if "augment" in case:
        assert float(state["components"]["augment"]["p"]) == pytest.approx(case["augment"]["p"])
        assert "[augment]" in state["recipe"]
    else:
        assert "augment" not in state["components"]


@pytest.mark.parametrize("name", CASES)
def test_generate_translate_rotate_draws_gen_images_pixels(name, tmp_path):
    """`gankit generate --translate 0.3,-0.2 --rotate 25` writes gen_images.py's images of that
    transform (at most one level off where rounding sits on a boundary), and the matrix it sets is
    gen_images.py's inverse matrix (1e-6), whose float images equal the official ones to 1e-5."""
    case = official_case(name)
    rec = case["transform"]
    path = _pickle(name, tmp_path)
    extra = ["--class", str(case["class_idx"])] if case["class_idx"] is not None else []
    r = invoke("generate", path, "--seeds", "0-3", "--outdir", tmp_path / "out", "--translate",
               ",".join(str(v) for v in rec["translate"]), "--rotate", str(rec["rotate"]), *extra)
    assert r.exit_code == 0, r.output
    ours = np.stack([_png(tmp_path / "out" / f"seed{s:04d}.png") for s in SEEDS]).astype(int)
    diff = np.abs(ours - rec["uint8"].numpy().astype(int))
    assert diff.max() <= 1 and (diff > 0).mean() < 0.01
    untransformed = case["generations"][0]["uint8"].numpy().astype(int)
    assert np.abs(ours - untransformed).max() > 10  # the flags changed the images
    # the Python API: the same matrix and the float images
    from gan_kit.tools.trained import open_generator

    trained = open_generator(str(path), device="cpu")
    trained.set_output_transform(tuple(rec["translate"]), float(rec["rotate"]))
    torch.testing.assert_close(trained.G.synthesis_network.input.transform, rec["matrix"].float(), atol=1e-6, rtol=0)
    img = trained.draw(_z(case), _labels(case), batch_size=1)
    torch.testing.assert_close(img, rec["img"], atol=1e-5, rtol=0)


def test_translate_rotate_are_refused_in_one_line_for_other_architectures_and_bad_values(tmp_path):
    """A G without an input transform (stylegan2) is refused naming the architecture; a value
    that is not X,Y / one number is refused naming the flag; all in one line, exit 2."""
    sg2 = tmp_path / "sg2.pkl"
    write_official_pickle(official_case("sg3-skip-resnet"), sg2)
    sg3 = _pickle("sg3-t", tmp_path)
    for path, flags, words in (
            (sg2, ["--translate", "0.1,0"], ["stylegan2", "--translate"]),
            (sg2, ["--rotate", "10"], ["stylegan2", "--rotate"]),
            (sg3, ["--translate", "0.1"], ["--translate", "'0.1'", "X,Y"]),
            (sg3, ["--translate", "a,b"], ["--translate", "'a,b'"]),
            (sg3, ["--translate", "0,nan"], ["--translate", "nan"]),
            (sg3, ["--translate", "1e300,0"], ["--translate", "1e300"]),  # -inf in G's float32 transform
            (sg3, ["--rotate", "ten"], ["--rotate", "'ten'", "degrees"]),
            (sg3, ["--rotate", "1,2"], ["--rotate", "'1,2'"])):
        r = invoke("generate", path, "--seeds", "0", "--outdir", tmp_path / "out", *flags)
        lines = [line for line in r.output.splitlines() if line.strip()]
        assert r.exit_code == 2 and len(lines) == 1, (flags, r.output)
        assert all(w in lines[0] for w in words), (flags, lines)
    # negative values parse (click passes "-0.3,0.2" on as the value)
    r = invoke("generate", sg3, "--seeds", "0", "--outdir", tmp_path / "neg", "--translate", "-0.3,0.2",
               "--rotate", "-25")
    assert r.exit_code == 0, r.output


FINE_TUNE = ["run.total_kimg=0.016", "run.tick_kimg=0.008", "run.device='cpu'",
             "run.threads=1", "run.progress=false", "growth.batch_size=4", "run.sample_grid=4",
             "penalty=[{name='r1', weight=1.0, interval=4}]", "ema.half_life_kimg=0.01"]


@pytest.mark.parametrize("name", CASES)
def test_gankit_import_writes_a_recipe_that_trains_from_the_files_weights(name, tmp_path):
    """`gankit import` writes a stylegan3 folder; its recipe (data.channels the file's: 1 for the
    grey R) with --init-from the file starts from the file's G, D and G_ema and takes a training
    step that moves G."""
    from gan_kit.recipe import load_recipe
    from gan_kit.runs.resume import init_from
    from gan_kit.runs.run import build_run
    from gan_kit.runs.session import train

    path = _pickle(name, tmp_path)
    r = invoke("import", path, "--out", tmp_path / "model")
    assert r.exit_code == 0, r.output
    recipe_file = tmp_path / "model" / "recipe.toml"
    table = tomllib.loads(recipe_file.read_text())
    assert table["architecture"]["name"] == "stylegan3"
    assert [p["name"] for p in table["penalty"]] == ["r1"]  # StyleGAN3's train.py: no path length
    source = ckpt.load(path)
    # the user's images: 8 of the file's size and channels (and classes, dataset.json's layout)
    images = tmp_path / "images"
    images.mkdir()
    gen = np.random.default_rng(0)
    labels = []
    for i in range(8):
        pixels = gen.integers(0, 256, (16, 16, source["channels"]), dtype=np.uint8)
        Image.fromarray(pixels[..., 0] if source["channels"] == 1 else pixels).save(images / f"img{i}.png")
        labels.append([f"img{i}.png", i % max(1, source["num_classes"])])
    if source["num_classes"]:
        (images / "dataset.json").write_text(json.dumps({"labels": labels}))
    # a grey file's recipe reads its images grey (image-folder reads RGB unless told)
    assert table["data"]["channels"] == source["channels"]
    recipe, plugins = load_recipe(recipe_file, FINE_TUNE + [f"data.path='{images}'", f"run.out_dir='{tmp_path / 'tune'}'"])
    run = build_run(recipe, plugins)
    init_from(run, path)
    for net in ("G", "D", "G_ema"):
        for key, value in getattr(run, net).state_dict().items():
            if key in source[net]:
                assert torch.equal(value, source[net][key]), (net, key)
    train(run, max_steps=1)
    moved = [k for k, v in run.G.state_dict().items() if v.is_floating_point() and k in source["G"]
             and not torch.equal(v, source["G"][k])]
    assert moved


def _edited(name: str, net: str, change) -> dict:
    case = copy.deepcopy(official_case(name))
    nets = ("G", "G_ema") if net == "G" else (net,)
    for n in nets:
        change(case["nets"][n])
    return case


@pytest.mark.parametrize("net,edit,words", [
    ("G", lambda t: t["modules"][""]["init_kwargs"].__setitem__("filter_size", 4), ["filter_size", "4"]),
    ("G", lambda t: t["modules"][""]["init_kwargs"].__setitem__("conv_kernel", 5), ["conv_kernel", "5"]),
    ("G", lambda t: t["tensors"]["synthesis.L0_36_16.down_filter"].mul_(1.01), ["layer 0", "down_filter"]),
    ("D", lambda t: t["modules"][""]["init_kwargs"].__setitem__("architecture", "skip"), ["architecture", "skip"]),
    ("D", lambda t: t["modules"][""]["init_kwargs"].__setitem__("channel_base", 512), ["channel_base", "512"]),
    ("D", lambda t: t["modules"][""]["init_kwargs"]["epilogue_kwargs"].__setitem__("mbstd_num_channels", 2),
     ["mbstd_num_channels", "2"]),
    ("D", lambda t: t["modules"][""]["init_kwargs"].__setitem__("img_channels", 1), ["img_channels", "1", "G has 3"]),
    ("D", lambda t: t["modules"][""]["init_kwargs"].__setitem__("conv_clamp", None), ["conv_clamp", "None"]),
])
def test_what_gankit_does_not_compute_the_same_way_is_refused_in_one_line(net, edit, words, tmp_path):
    """Another filter size or kernel, a layer filter that is not gankit's design, a D that is not
    the residual D of G's widths, data shape and clamp, or with more stddev channels: one line
    naming the file, the argument and the value."""
    case = _edited("sg3-t", net, edit)
    path = _pickle("odd", tmp_path, case)
    r = invoke("generate", path, "--seeds", "0", "--outdir", tmp_path / "out")
    lines = [line for line in r.output.splitlines() if line.strip()]
    assert r.exit_code == 2 and len(lines) == 1, r.output
    assert all(w in lines[0] for w in words) and str(path) in lines[0], lines


@pytest.mark.parametrize("channels, data", [(1, {"channels": 1}), (3, {"channels": 3}),
                                            (4, {"channels": 3, "alpha": "keep"})])
@pytest.mark.parametrize("family", ["stylegan2", "stylegan3", "r3gan"])
def test_an_imported_recipe_reads_the_images_with_the_models_channels(channels, data, family):
    """Grey (1), RGB (3) and RGBA (4: RGB with alpha kept) networks get an image folder that
    reads that many channels, whatever the codebase."""
    from gan_kit.builtin.importers.snapshots import imported_recipe

    text = imported_recipe({"latent_dim": 8}, resolution=16, num_classes=0, data="digits", family=family,
                           channels=channels)
    table = tomllib.loads(text)["data"]
    assert {k: table[k] for k in table if k in ("channels", "alpha")} == data
