"""Models trained with the official codebases, end to end.

``tests/data/official_snapshots.pt`` holds tiny networks the official stylegan2-ada-pytorch,
StyleGAN3-repository (networks_stylegan2) and R3GAN code built, and what that code drew from them
(written by ``tests/data/make_official_snapshots.py``); ``official_pickles.write_official_pickle``
rebuilds the snapshot pickle of the official layout from it (placeholder source text). From that
file:

* ``gankit generate FILE --seeds 0-3`` writes the official scripts' pixels (at most 1 level in
  255 apart; float rounding can flip a level), with and without truncation, noise off, and from
  projector.py's W file;
* the imported D gives the official D's logits to 1e-4;
* ``gankit import`` writes a folder every command reads, ``list-plugins`` names the importers;
* ``run --init-from FILE`` trains and resumes bit-identically; the export of an imported model
  runs in onnxruntime as in TorchScript and its card names the source file, SHA-256 and licence;
* an official configuration gankit does not build is refused naming the setting.
"""

from __future__ import annotations

import copy
import hashlib
import json
import tomllib
from pathlib import Path

import numpy as np
import pytest
import torch
from click.testing import CliRunner
from PIL import Image

from gan_kit.cli import cli
from gan_kit.plugin_api.components import BuildContext
from gan_kit.plugin_api.foreign import import_file
from gan_kit.plugin_api.manager import build_plugins
from gan_kit.recipe import load_recipe
from gan_kit.runs import checkpoint as ckpt
from official_pickles import write_official_pickle

DATA = Path(__file__).parent / "data" / "official_snapshots.pt"
RECORD = torch.load(DATA, weights_only=True)
CASES = {case["case"]: case for case in RECORD["cases"]}
SEEDS = [0, 1, 2, 3]


def invoke(*args):
    return CliRunner().invoke(cli, [str(a) for a in args])


def _pickle(case_name: str, folder: Path) -> Path:
    path = folder / f"network-snapshot-{case_name}.pkl"
    if not path.exists():
        write_official_pickle(CASES[case_name], path)
    return path


def _png(path: Path) -> np.ndarray:
    a = np.asarray(Image.open(path))
    return a[..., None] if a.ndim == 2 else a


def _generate(path: Path, out: Path, case: dict, *args) -> np.ndarray:
    extra = ["--class", str(case["class_idx"])] if case.get("class_idx") is not None else []
    result = invoke("generate", path, "--seeds", "0-3", "--outdir", out, *extra, *args)
    assert result.exit_code == 0, result.output
    return np.stack([_png(out / f"seed{s:04d}.png") for s in SEEDS])


@pytest.mark.parametrize("case_name", sorted(CASES))
def test_generate_from_an_official_snapshot_writes_the_official_pixels(case_name, tmp_path):
    case = CASES[case_name]
    path = _pickle(case_name, tmp_path)
    for i, gen in enumerate(case["generations"]):
        if gen.get("truncation_cutoff") is not None:
            continue  # generate.py draws with psi alone; the cutoff is the architecture option's test
        args = []
        if gen.get("truncation_psi") not in (None, 1):
            args += ["--truncation", str(gen["truncation_psi"])]
        if gen.get("noise_mode") not in (None, "const"):
            args += ["--noise-mode", gen["noise_mode"]]
        ours = _generate(path, tmp_path / f"out{i}", case, *args)
        official = gen["uint8"].numpy()
        diff = np.abs(ours.astype(int) - official.astype(int))
        assert diff.max() <= 1, (case_name, gen.get("truncation_psi"), gen.get("noise_mode"), int(diff.max()))
        assert (diff > 0).mean() < 0.01  # a level off only where rounding sits on a boundary


def _imported_d(path: Path, folder: Path):
    """The imported checkpoint dict of ``path`` and D built from its recipe, with its weights."""
    state, _ = import_file(path, build_plugins().registry)
    recipe, plugins = load_recipe(folder / "imported.toml", text=state["recipe"])
    ctx = BuildContext(resolution=recipe.resolution, channels=state["channels"], recipe=recipe,
                       num_classes=state["num_classes"])
    arch = plugins.registry.get("architecture", recipe.architecture.name).factory(recipe.architecture.options, ctx)
    _, D = arch.build(recipe.resolution, state["channels"])
    D.load_state_dict(state["D"])
    return state, D.eval()


def _networks(case_name: str, folder: Path):
    return _imported_d(_pickle(case_name, folder), folder)


@pytest.mark.parametrize("case_name", sorted(CASES))
def test_the_imported_d_gives_the_official_logits(case_name, tmp_path):
    case = CASES[case_name]
    state, D = _networks(case_name, tmp_path)
    labels = case["d_c"].argmax(1) if case["d_c"].shape[1] else None
    with torch.no_grad():
        for images, official in ((case["d_inputs_random"], case["d_logits_random"]),
                                 (case["generations"][0]["img"], case["d_logits_fake"])):
            logits = D(images.float(), labels) if labels is not None else D(images.float())
            torch.testing.assert_close(logits.reshape(-1), official.reshape(-1).float(), atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("case_name", sorted(n for n, c in CASES.items() if "w_file" in c))
def test_a_projector_w_file_draws_the_official_image(case_name, tmp_path):
    case = CASES[case_name]
    w_path = tmp_path / "projected_w.npz"
    np.savez(w_path, w=case["w_file"]["w"].numpy())  # projector.py's layout: key w, [1, num_ws, w_dim]
    result = invoke("generate", _pickle(case_name, tmp_path), "--w", w_path, "--outdir", tmp_path / "out")
    assert result.exit_code == 0, result.output
    [png] = sorted((tmp_path / "out").glob("*.png"))
    diff = np.abs(_png(png).astype(int) - case["w_file"]["uint8"][0].numpy().astype(int))
    assert diff.max() <= 1


def test_gankit_import_writes_a_folder_every_command_reads(tmp_path):
    case = CASES["ada-skip-resnet"]
    path = _pickle("ada-skip-resnet", tmp_path)
    r = invoke("import", path, "--out", tmp_path / "model")
    assert r.exit_code == 0, r.output
    assert "stylegan2-ada-pytorch" in r.output and "SHA-256" in r.output
    recipe = tomllib.loads((tmp_path / "model" / "recipe.toml").read_text())
    assert recipe["architecture"]["name"] == "stylegan2" and recipe["data"]["path"] == "tiny.zip"  # no folder kept
    from_folder = _generate(tmp_path / "model", tmp_path / "a", case)
    from_file = _generate(path, tmp_path / "b", case)
    assert np.array_equal(from_folder, from_file)
    saved = ckpt.load(tmp_path / "model" / "checkpoints" / "latest.pt")
    assert saved["imported"]["sha256"] == hashlib.sha256(path.read_bytes()).hexdigest()
    assert saved["imported"]["file"] == path.name
    # an earlier import is replaced; a folder with other files is refused before the file is read
    assert invoke("import", path, "--out", tmp_path / "model").exit_code == 0
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "notes.txt").write_text("mine")
    r = invoke("import", path, "--out", tmp_path / "other")
    assert r.exit_code == 2 and "notes.txt" in r.output and not (tmp_path / "other" / "checkpoints").exists()
    # resume is refused in one line: an import holds no optimizer state
    r = invoke("run", "--resume", tmp_path / "model")
    assert r.exit_code == 2 and "--init-from" in r.output


def test_list_plugins_names_the_importers():
    r = invoke("list-plugins", "--kind", "importer")
    assert r.exit_code == 0, r.output
    for name in ("stylegan2-ada-pytorch", "stylegan3", "stylegan2-tf", "r3gan"):
        assert name in r.output


def test_an_official_configuration_gankit_does_not_build_is_refused_naming_it(tmp_path):
    case = copy.deepcopy(CASES["ada-skip-resnet"])
    for net in ("G", "G_ema"):
        case["nets"][net]["modules"][""]["init_kwargs"]["synthesis_kwargs"]["architecture"] = "fancy"
    path = tmp_path / "odd.pkl"
    write_official_pickle(case, path)
    r = invoke("generate", path, "--seeds", "0", "--outdir", tmp_path / "out")
    assert r.exit_code == 2, r.output
    lines = [line for line in r.output.splitlines() if line.strip()]
    assert len(lines) == 1 and "architecture" in lines[0] and "fancy" in lines[0], lines


def test_export_of_an_imported_model_runs_in_onnxruntime_as_in_torchscript(tmp_path):
    import onnxruntime  # the test extra installs it: missing is a failure
    path = _pickle("ada-conditional", tmp_path)
    r = invoke("export", path, "--out", tmp_path / "export")
    assert r.exit_code == 0, r.output
    config = json.loads((tmp_path / "export" / "config.json").read_text())
    card = (tmp_path / "export" / "README.md").read_text()
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    assert config["imported"]["sha256"] == digest and digest in card and path.name in card
    assert "non-commercial" in card and str(tmp_path) not in card
    z = torch.randn(3, config["latent_dim"], generator=torch.Generator().manual_seed(5))
    labels = torch.tensor([0, 1, 2])
    ts = torch.jit.load(str(tmp_path / "export" / "model.ts"))(z, labels).numpy()
    session = onnxruntime.InferenceSession(str(tmp_path / "export" / "model.onnx"))
    onnx = session.run(None, {"z": z.numpy(), "labels": labels.numpy()})[0]
    np.testing.assert_allclose(onnx, ts, atol=1e-4, rtol=1e-4)


FINE_TUNE = ["augment={name='none'}", "run.total_kimg=0.032", "run.tick_kimg=0.016",
             "run.snapshot_ticks=1", "run.device='cpu'", "run.threads=1", "run.progress=false", "growth.batch_size=8",
             "run.sample_grid=4", "penalty=[{name='r1', weight=1.0, interval=4}]", "ema.half_life_kimg=0.01"]


def test_init_from_an_official_snapshot_trains_and_resumes_bit_identically(tmp_path):
    from gan_kit.runs.resume import init_from
    from gan_kit.runs.run import build_run
    from gan_kit.runs.session import train

    path = _pickle("ada-grayscale", tmp_path)
    assert invoke("import", path, "--out", tmp_path / "model").exit_code == 0
    recipe_file = tmp_path / "model" / "recipe.toml"
    source = ckpt.load(path)
    # the imported recipe's own resolution; the digits stand in for the user's images
    data = f"data={{name='digits', resolution={source['phase']['resolution']}, upscale='allow'}}"

    def start(name):
        recipe, plugins = load_recipe(recipe_file, FINE_TUNE + [data, f"run.out_dir='{tmp_path / name}'"])
        run = build_run(recipe, plugins)
        init_from(run, path)
        return run

    run = start("check")
    for net in ("G", "D", "G_ema"):
        for key, value in getattr(run, net).state_dict().items():
            if key in source[net]:
                assert torch.equal(value, source[net][key]), (net, key)
    straight = start("straight")
    train(straight, max_steps=4)
    halves = start("halves")
    train(halves, max_steps=2)
    halves.save_checkpoint("latest")
    recipe, plugins = load_recipe(tmp_path / "halves" / "recipe.toml")
    resumed = build_run(recipe, plugins)
    train(resumed, max_steps=4, resume=tmp_path / "halves" / "checkpoints" / "latest.pt")
    for net in ("G", "D", "G_ema"):
        a, b = getattr(straight, net).state_dict(), getattr(resumed, net).state_dict()
        for key in a:
            assert torch.equal(a[key], b[key]), (net, key)
    moved = [k for k, v in straight.G.state_dict().items() if v.is_floating_point() and k in source["G"]
             and not torch.equal(v, source["G"][k])]
    assert moved


TF = torch.load(Path(__file__).parent / "data" / "tf_reference.pt", weights_only=True)
TF_CASES = ["config_f", "ada_conditional", "ada_gorig_dorig"]  # the TF configurations gankit builds


@pytest.mark.parametrize("case_name", TF_CASES)
def test_a_tf_era_pickle_draws_legacy_pys_pixels_and_logits(case_name, tmp_path):
    from tf_pickles import write_tf_pickle

    case = TF["cases"][case_name]
    path = tmp_path / f"{case_name}.pkl"
    write_tf_pickle(case, path)
    out = case["outputs"]
    c_dim = out["c"].shape[1]
    for k, psi in enumerate(out["psi"]):
        official = (out["images"][k].float().permute(0, 2, 3, 1) * 127.5 + 128).clamp(0, 255).to(torch.uint8).numpy()
        for i, seed in enumerate(out["seeds"]):
            args = ["--class", str(seed % c_dim)] if c_dim else []
            r = invoke("generate", path, "--seeds", str(seed), "--truncation", str(psi), "--outdir", tmp_path / "o",
                       *args)
            assert r.exit_code == 0, r.output
            ours = _png(tmp_path / "o" / f"seed{seed:04d}.png")
            assert np.abs(ours.astype(int) - official[i].astype(int)).max() <= 1, (case_name, psi, seed)
    state, D = _imported_d(path, tmp_path)
    assert state["imported"]["format"] == "stylegan2-tf"
    labels = out["c"].argmax(1) if c_dim else None
    with torch.no_grad():
        images = out["images"][0].float()
        logits = D(images, labels) if c_dim else D(images)
    torch.testing.assert_close(logits.reshape(-1), out["d_logits"].reshape(-1).float(), atol=1e-4, rtol=1e-4)


def test_init_from_a_snapshot_with_an_augment_pipe_starts_at_its_p(tmp_path):
    """The snapshot's ADA pipeline comes into the recipe gankit import writes (the same ops) and
    its p into the run --init-from starts, so the fine-tune continues the file's augmentation."""
    from gan_kit.runs.resume import init_from
    from gan_kit.runs.run import build_run

    case = CASES["ada-skip-resnet"]
    path = _pickle("ada-skip-resnet", tmp_path)
    assert invoke("import", path, "--out", tmp_path / "model").exit_code == 0
    table = tomllib.loads((tmp_path / "model" / "recipe.toml").read_text())["augment"]
    assert table["name"] == "ada" and table["pipeline"] == "bgcfnc"
    images = tmp_path / "images"  # the user's own RGB images, at the file's 16 px
    images.mkdir()
    rng = np.random.default_rng(0)
    for i in range(8):
        Image.fromarray(rng.integers(0, 255, (16, 16, 3), dtype=np.uint8)).save(images / f"{i}.png")
    assert table["p_init"] == pytest.approx(float(case["augment"]["p"]))
    # p is the adapted state: the file's value wins over the recipe's start value
    recipe, plugins = load_recipe(tmp_path / "model" / "recipe.toml",
                                  [f"data.path='{images}'", f"run.out_dir='{tmp_path / 'tuned'}'", "run.device='cpu'",
                                   "augment.p_init=0.0"])
    run = build_run(recipe, plugins)
    assert float(run.augment.p) == 0.0
    init_from(run, path)
    assert float(run.augment.p) == pytest.approx(float(case["augment"]["p"]))
    # the origin and licence follow the weights into the run's checkpoints (and so its exports)
    assert run.derived_from["sha256"] == hashlib.sha256(path.read_bytes()).hexdigest()
    assert "non-commercial" in run.derived_from["license"]
    from gan_kit.runs.run.state import state_dict
    assert state_dict(run)["derived_from"] == run.derived_from


def test_sample_draws_an_imported_models_seed_as_generate_does(tmp_path):
    """``gankit sample --seed S`` starts its grid with seed S's image by the model's own seed rule
    (numpy's RandomState for an official snapshot), the image ``generate --seeds S`` writes."""
    from gan_kit.tools.trained import open_generator

    case = CASES["ada-skip-resnet"]
    trained = open_generator(_pickle("ada-skip-resnet", tmp_path))
    rows = trained.latent_rows(2, 5)  # what sample --seed 2 -n 5 draws
    assert torch.equal(rows[0], trained.seed_latents([2])[0])
    torch.testing.assert_close(rows[0], case["z"][2].float())  # the official generate.py's z of seed 2
    r = invoke("sample", _pickle("ada-skip-resnet", tmp_path), "--seed", "2", "-n", "1", "--out", tmp_path / "one.png")
    assert r.exit_code == 0, r.output


def test_an_import_with_non_finite_weights_is_refused_and_leaves_no_folder(tmp_path):
    case = copy.deepcopy(CASES["ada-grayscale"])
    tensors = case["nets"]["G_ema"]["tensors"]
    key = next(k for k, v in tensors.items() if v.is_floating_point() and v.numel() > 1)
    tensors[key] = tensors[key].clone()
    tensors[key].view(-1)[0] = float("nan")
    path = tmp_path / "nan.pkl"
    write_official_pickle(case, path)
    r = invoke("import", path, "--out", tmp_path / "model")
    assert r.exit_code == 2 and "NaN or infinite" in r.output and "G_ema." in r.output, r.output
    assert not (tmp_path / "model").exists()  # the destination check made and removed its folders
    r = invoke("generate", path, "--seeds", "0", "--outdir", tmp_path / "out")
    assert r.exit_code == 2 and not (tmp_path / "out").exists()


def test_the_card_and_config_of_an_imported_model_say_where_it_came_from(tmp_path):
    path = _pickle("ada-grayscale", tmp_path)
    assert invoke("export", path, "--out", tmp_path / "e", "--format", "safetensors").exit_code == 0
    text = (tmp_path / "e" / "config.json").read_text()
    json.loads(text, parse_constant=lambda c: pytest.fail(f"config.json holds {c}, not strict JSON"))
    card = (tmp_path / "e" / "README.md").read_text()
    assert "imported into gankit without retraining" in card and "license: other" in card
    assert "trained with [gankit]" not in card


def test_a_tf_era_pickle_gankit_cannot_build_is_refused_naming_the_setting(tmp_path):
    from tf_pickles import write_tf_pickle

    path = tmp_path / "config_e.pkl"
    write_tf_pickle(TF["cases"]["config_e_gresnet_dskip"], path)
    r = invoke("generate", path, "--seeds", "0", "--outdir", tmp_path / "out")
    lines = [line for line in r.output.splitlines() if line.strip()]
    assert r.exit_code == 2 and len(lines) == 1 and "resample_filter = [1, 2, 1]" in lines[0] and str(path) in lines[0]


def test_init_from_a_snapshot_without_d_says_d_starts_fresh(tmp_path):
    case = copy.deepcopy(CASES["ada-grayscale"])
    for key in ("G", "D"):
        del case["nets"][key]
        case["snapshot_keys"].remove(key)
    path = tmp_path / "gema-only.pkl"
    write_official_pickle(case, path)
    assert invoke("import", path, "--out", tmp_path / "model").exit_code == 0
    data = f"data={{name='digits', resolution={case['generations'][0]['img'].shape[-1]}, upscale='allow'}}"
    r = invoke("run", tmp_path / "model" / "recipe.toml", "--init-from", path, "--out", tmp_path / "tuned",
               "--set", data, "--set", "augment={name='none'}", "--set", "run.total_kimg=0.016",
               "--set", "growth.batch_size=8", "--set", "run.device='cpu'", "--set", "metric=[]")
    assert r.exit_code == 0, r.output
    assert f"from the weights of {path} (D fresh: the source holds none)" in " ".join(r.output.split())
