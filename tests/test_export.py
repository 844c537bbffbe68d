"""``gankit export``: a checkpoint's G_ema as safetensors + config.json + model card, TorchScript
and ONNX, checked with the real clients (torch.jit and onnxruntime in a process that cannot import
gan_kit) for every built-in architecture, conditional ones included; and the exported folder read
back by ``gankit sample`` and ``--init-from`` without pickle."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch
from click.testing import CliRunner
from safetensors.torch import load_file

from gan_kit.runs.checkpoint import load_generator
from gan_kit.cli import cli
from gan_kit.runs.session import train
from gan_kit.base.errors import GankitError
from gan_kit.tools.export import export_model
from gan_kit.runs.exported import is_export_dir, load_exported_generator
from gan_kit.testing import make_run

SG2 = "architecture={name='stylegan2', latent_dim=8, w_dim=8, mapping_layers=2, channel_base=32, channel_max=8%s}"
ARCHS = {
    "pggan": [],
    "pggan-conditional": ["architecture.conditional=true"],
    "dcgan": ["architecture={name='dcgan', latent_dim=8, ngf=4, ndf=4}", "growth={name='static', batch_size=8}"],
    "stylegan2": [SG2 % "", "growth={name='static', batch_size=8}", "data.resolution=16"],
    "stylegan2-conditional": [SG2 % ", d_mapping_layers=2, conditional=true", "growth={name='static', batch_size=8}",
                              "data.resolution=16"],
    # A bound the trained layers exceed, so the traced and ONNX graphs must carry the clamp.
    "stylegan2-clamped": [SG2 % ", conv_clamp=0.5", "growth={name='static', batch_size=8}", "data.resolution=16"],
}

#: Run in a fresh interpreter: gan_kit cannot be imported there, so the files must stand alone.
CHILD = textwrap.dedent("""
    import sys, importlib.abc

    class NoGankit(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path, target=None):
            if name == "gan_kit" or name.startswith("gan_kit."):
                raise ImportError("gan_kit is not installed here")
            return None

    sys.meta_path.insert(0, NoGankit())
    import numpy as np, onnxruntime, torch
    folder, inputs = sys.argv[1], np.load(sys.argv[2])
    z = inputs["z"]
    labels = inputs["labels"] if "labels" in inputs.files else None
    model = torch.jit.load(folder + "/model.ts")
    args = (torch.from_numpy(z),) + ((torch.from_numpy(labels),) if labels is not None else ())
    ts = model(*args).numpy()
    session = onnxruntime.InferenceSession(folder + "/model.onnx")
    feeds = {"z": z} if labels is None else {"z": z, "labels": labels}
    onnx = session.run(None, feeds)[0]
    assert not any(m == "gan_kit" or m.startswith("gan_kit.") for m in sys.modules)
    np.savez(sys.argv[3], ts=ts, onnx=onnx)
""")


def trained_checkpoint(folder: Path, overrides: list[str]) -> Path:
    """A checkpoint after a few real training steps (StyleGAN2's w_avg has moved off zero)."""
    run = make_run(folder, overrides=overrides)
    train(run, max_steps=3)
    return run.save_checkpoint("latest")


@pytest.mark.parametrize("arch", sorted(ARCHS))
def test_torchscript_and_onnx_reproduce_g_ema_without_gan_kit(tmp_path, arch):
    checkpoint = trained_checkpoint(tmp_path, ARCHS[arch])
    psi = 0.7 if arch.startswith("stylegan2") else 1.0
    config = export_model(checkpoint, tmp_path / "export", truncation_psi=psi)
    G, _, _, built = load_generator(checkpoint)
    k = config["num_classes"]
    gen = torch.Generator().manual_seed(1)
    z = torch.randn(5, config["latent_dim"], generator=gen)  # a batch size the trace never saw
    labels = torch.tensor([0, 3, 9, 1, 2]) if k else None
    assert (k == 10) == arch.endswith("conditional")
    kwargs = {"truncation_psi": psi, "noise_mode": "const"} if built.supports_truncation else {}
    with torch.no_grad():
        expected = G(z, labels, **kwargs) if k else G(z, **kwargs)
    import numpy as np

    np.savez(tmp_path / "in.npz", **({"z": z.numpy(), "labels": labels.numpy()} if k else {"z": z.numpy()}))
    subprocess.run([sys.executable, "-c", CHILD, str(tmp_path / "export"), str(tmp_path / "in.npz"),
                    str(tmp_path / "out.npz")], check=True, timeout=300)
    out = np.load(tmp_path / "out.npz")
    assert out["ts"].shape == tuple(expected.shape) == (5, config["channels"], config["resolution"], config["resolution"])
    assert np.abs(out["ts"] - expected.numpy()).max() <= 1e-4
    assert np.abs(out["onnx"] - expected.numpy()).max() <= 1e-4
    if psi != 1.0:  # truncation is baked in: without it the images differ
        with torch.no_grad():
            plain = G(z, labels, truncation_psi=1.0, noise_mode="const") if k else G(z, noise_mode="const")
        assert (plain - expected).abs().max() > 1e-3


@pytest.mark.parametrize("arch", ["pggan", "stylegan2-conditional"])
def test_safetensors_load_into_a_freshly_built_g_bit_identically(tmp_path, arch):
    checkpoint = trained_checkpoint(tmp_path, ARCHS[arch])
    export_model(checkpoint, tmp_path / "export", formats=["safetensors"])
    assert not (tmp_path / "export" / "model.onnx").exists() and not (tmp_path / "export" / "model.ts").exists()
    saved, _, _, _ = load_generator(checkpoint)
    loaded, _, _, _, config = load_exported_generator(tmp_path / "export")
    a, b = saved.state_dict(), loaded.state_dict()
    assert a.keys() == b.keys() and all(torch.equal(a[key], b[key]) for key in a)
    assert set(load_file(str(tmp_path / "export" / "model.safetensors"))) == set(a)
    z = torch.randn(3, config["latent_dim"])
    args = (z, torch.tensor([1, 2, 3])) if config["num_classes"] else (z,)
    with torch.no_grad():
        assert torch.equal(saved(*args, noise_mode="const") if config["supports_truncation"] else saved(*args),
                           loaded(*args, noise_mode="const") if config["supports_truncation"] else loaded(*args))


def test_exporting_a_subset_into_an_earlier_export_leaves_no_stale_model_file(tmp_path):
    # An export folder exported again with fewer formats kept the earlier model.ts and
    # model.safetensors, another checkpoint's G, beside the new config.json.
    export_model(trained_checkpoint(tmp_path / "a", ARCHS["dcgan"]), tmp_path / "export")
    assert (tmp_path / "export" / "model.ts").exists() and (tmp_path / "export" / "model.safetensors").exists()
    export_model(trained_checkpoint(tmp_path / "b", ARCHS["pggan"]), tmp_path / "export", formats=["onnx"])
    assert sorted(p.name for p in (tmp_path / "export").iterdir()) == [
        "README.md", "config.json", "model.onnx", "samples.png"]


def test_config_and_model_card_say_what_the_model_is(tmp_path):
    run = make_run(tmp_path, overrides=["run.total_kimg=0.1", "metric=[{name='swd', num_images=64, every_kimg=0.1}]"])
    train(run)
    checkpoint = run.out_dir / "checkpoints" / "latest.pt"
    config = export_model(checkpoint, tmp_path / "export")
    on_disk = json.loads((tmp_path / "export" / "config.json").read_text())
    assert on_disk == config
    assert config["architecture"] == "pggan" and config["latent_dim"] == 8 and config["channels"] == 1
    assert config["resolution"] == run.phase.resolution and config["num_classes"] == 0
    assert config["kimg"] == pytest.approx(run.cur_nimg / 1000)
    recorded = torch.load(checkpoint, weights_only=True)["recipe"]
    assert config["recipe"] == recorded.replace(f'out_dir = "{run.out_dir.as_posix()}"', 'out_dir = "run"')
    assert config["source_checkpoint"] == "run/checkpoints/latest.pt"
    card = (tmp_path / "export" / "README.md").read_text()
    front, body = card.split("---\n")[1], card.split("---\n", 2)[2]
    assert "library_name: gankit" in front and "- pggan" in front
    rows = [json.loads(line) for line in (run.out_dir / "metrics.jsonl").read_text().splitlines()]
    swd = [r["Metrics/swd"] for r in rows if "Metrics/swd" in r][-1]
    assert f"| swd | {swd:.4g} |" in body
    assert "![samples](samples.png)" in body and (tmp_path / "export" / "samples.png").stat().st_size > 0
    assert 'torch.jit.load("model.ts")' in body and "onnxruntime.InferenceSession" in body
    assert "[loss]" in body and 'name = "hinge"' in body  # the recipe, whole
    export_model(checkpoint, tmp_path / "weights-only", formats=["safetensors"])
    card = (tmp_path / "weights-only" / "README.md").read_text()
    assert "model.ts" not in card and "model.onnx" not in card and "gankit sample ." in card  # the files it has


def test_no_folder_user_or_host_of_this_machine_leaves_in_an_export(tmp_path):
    """An export folder is meant to be uploaded as it is: no file of it - config.json, the card,
    the weights, model.ts (torch records source paths in it), model.onnx (torch.onnx records stack
    traces) - holds the run's folder, gankit's or torch's install folder, the home folder or the
    host name; the export still runs (the TorchScript and ONNX parity is test_torchscript_and_onnx_...)."""
    import getpass
    import socket
    import zipfile

    import gan_kit
    from gan_kit.tools.shareable import shareable_recipe, shareable_value

    from PIL import Image

    (tmp_path / "my photos").mkdir()
    for i in range(8):
        Image.new("L", (8, 8), i * 30).save(tmp_path / "my photos" / f"{i}.png")
    run = make_run(tmp_path / "deep" / "folders", overrides=[
        "run.total_kimg=0.1", f"data={{name='image-folder', path='{(tmp_path / 'my photos').as_posix()}'}}"])
    train(run, max_steps=2)
    export_model(run.save_checkpoint("latest"), tmp_path / "export")
    local = [str(tmp_path), tmp_path.as_posix(), str(Path(gan_kit.__file__).parent.parent), str(Path(torch.__file__).parent),
             str(Path.home()), getpass.getuser() + "/", socket.gethostname()]
    local = [s.encode() for s in local if len(s) >= 6]
    files = sorted(p.name for p in (tmp_path / "export").iterdir())
    assert files == ["README.md", "config.json", "model.onnx", "model.safetensors", "model.ts", "samples.png"]
    for name in files:
        data = (tmp_path / "export" / name).read_bytes()
        if name == "model.ts":  # a zip archive: its entries as stored and as read (torch compresses some)
            with zipfile.ZipFile(tmp_path / "export" / name) as archive:
                data += b"".join(archive.read(entry) for entry in archive.namelist())
        assert not [s for s in local if s in data], name
    config = json.loads((tmp_path / "export" / "config.json").read_text())
    assert "path = \"my photos\"" in config["recipe"] and config["source_checkpoint"] == "run/checkpoints/latest.pt"
    assert torch.jit.load(tmp_path / "export" / "model.ts")(torch.zeros(1, 8)).shape == (1, 3, 4, 4)  # 2 steps: 4 px
    # the rule on its own: absolute and climbing paths to their last part, URLs to their scheme
    assert [shareable_value(v) for v in ["/home/ann/data/", "~/x.pt", "C:\\Users\\ann\\p.png", "../up/w.pt",
                                         "runs/pggan", "http://gpu7.lab:5000/mlruns", "digits"]] == [
        "data", "x.pt", "p.png", "w.pt", "runs/pggan", "http://...", "digits"]
    assert shareable_recipe("a = '/srv/x'\nb = \"ok\"\n") == 'a = "x"\nb = "ok"\n'


def test_an_exported_folder_samples_and_starts_a_new_run(tmp_path):
    checkpoint = trained_checkpoint(tmp_path / "a", [])
    export_model(checkpoint, tmp_path / "export", formats=["safetensors"])
    assert is_export_dir(tmp_path / "export") and not is_export_dir(tmp_path / "a" / "run")
    runner = CliRunner()
    result = runner.invoke(cli, ["sample", str(tmp_path / "export"), "-n", "4", "--out", str(tmp_path / "g.png")])
    assert result.exit_code == 0, result.output
    exported, _, _, _, config = load_exported_generator(tmp_path / "export")
    assert f"at {config['resolution']}px" in result.output and (tmp_path / "g.png").is_file()
    run = make_run(tmp_path / "b")
    D0 = {k: v.clone() for k, v in run.D.state_dict().items()}
    from gan_kit.runs.resume import init_from

    init_from(run, tmp_path / "export")
    for name in ("G", "G_ema"):
        assert all(torch.equal(v, exported.state_dict()[k]) for k, v in getattr(run, name).state_dict().items())
    assert all(torch.equal(v, D0[k]) for k, v in run.D.state_dict().items())  # no D in an export: D stays fresh
    train(run, max_steps=2)
    assert any(not torch.equal(p, exported.state_dict()[k]) for k, p in run.G.state_dict().items())
    assert all(torch.isfinite(p).all() for p in run.G.parameters())


def test_init_from_an_export_of_another_architecture_is_one_line(tmp_path):
    checkpoint = trained_checkpoint(tmp_path / "a", [])
    export_model(checkpoint, tmp_path / "export", formats=["safetensors"])
    recipe = tmp_path / "b" / "tiny.toml"
    make_run(tmp_path / "b")  # writes the tiny recipe
    result = CliRunner().invoke(cli, ["run", str(recipe), "--init-from", str(tmp_path / "export"), "--set",
                                      "architecture={name='dcgan', latent_dim=8, ngf=4, ndf=4}", "--set",
                                      "growth={name='static', batch_size=8}"])
    assert result.exit_code == 2
    assert "--init-from" in result.output and 'architecture "pggan"' in result.output
    assert "Traceback" not in result.output


def test_export_refuses_what_it_cannot_do_in_one_line(tmp_path):
    checkpoint = trained_checkpoint(tmp_path, [])
    with pytest.raises(GankitError, match="no mapping network"):
        export_model(checkpoint, tmp_path / "e", truncation_psi=0.5)
    result = CliRunner().invoke(cli, ["export", str(checkpoint), "--out", str(tmp_path / "e"), "--format", "onnx,pt"])
    assert result.exit_code == 2 and "unknown format 'pt'" in result.output
    result = CliRunner().invoke(cli, ["sample", str(tmp_path), "--out", str(tmp_path / "g.png")])
    assert result.exit_code == 2 and "gankit export did not write" in result.output
    with pytest.raises(GankitError, match="no format named"):
        export_model(checkpoint, tmp_path / "e", formats=[])
    (tmp_path / "empty").mkdir()
    from gan_kit.runs.resume import init_source

    with pytest.raises(GankitError, match="neither a run .* nor a gankit export"):
        init_source(tmp_path / "empty")
