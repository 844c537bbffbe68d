"""BigGAN's sampling tricks: the truncated-normal z (``--truncation-normal``: entries beyond the
threshold redrawn, the same per seed) and standing statistics (``--standing-stats``: G's
BatchNorm running statistics recomputed from its own batches, only BN buffers changed), in the
library and through ``gankit generate``, ``sample``, ``eval`` and ``export``."""

from __future__ import annotations

import json
import math

import pytest
import torch
from click.testing import CliRunner
from torch import nn
from torch.nn.utils.parametrizations import spectral_norm

from gan_kit import GankitError
from gan_kit.cli import cli
from gan_kit.tools.seeds import check_truncation, latent_rows, resample_beyond, seed_latents, truncated_randn
from gan_kit.tools.standing import standing_statistics


def invoke(*args):
    return CliRunner().invoke(cli, [str(a) for a in args])


def truncated_variance(t: float) -> float:
    """Variance of the standard normal truncated to [-t, t]: 1 - 2 t phi(t) / (2 Phi(t) - 1)."""
    phi = math.exp(-t * t / 2) / math.sqrt(2 * math.pi)
    return 1 - 2 * t * phi / math.erf(t / math.sqrt(2))


@pytest.mark.parametrize("t", [0.5, 1.5])
def test_truncated_normal_stays_within_the_threshold_with_the_truncated_normals_moments(t):
    z = truncated_randn(40000, 4, torch.Generator().manual_seed(0), t)
    assert z.abs().max().item() <= t
    assert abs(z.mean().item()) < 0.01
    assert z.var().item() == pytest.approx(truncated_variance(t), rel=0.02)
    # Flat-ish inside: the share within t/2 is the normal's mass there over its mass within t.
    inner = (z.abs() <= t / 2).double().mean().item()
    assert inner == pytest.approx(math.erf(t / 2 / math.sqrt(2)) / math.erf(t / math.sqrt(2)), abs=0.01)


def test_truncated_seed_latents_are_the_same_per_seed_and_keep_entries_within_the_threshold():
    a = seed_latents([3, 7], 16, truncation=0.5)
    assert torch.equal(a, seed_latents([3, 7], 16, truncation=0.5))
    assert torch.equal(a[1:], seed_latents([7], 16, truncation=0.5))  # a seed's z whatever the other seeds
    assert torch.equal(latent_rows(3, 4, 16, truncation=0.5)[:1], a[:1])  # row 0 of --seed 3 is seed 3's z
    plain = seed_latents([3], 16)
    inside = plain.abs() <= 0.5
    assert torch.equal(a[0:1][inside], plain[inside])  # only entries beyond it are redrawn
    assert torch.equal(seed_latents([3], 16, truncation=100.0), plain)  # a threshold nothing passes: none
    assert seed_latents([3], 16, "numpy", truncation=0.5).abs().max() <= 0.5


def test_resample_beyond_without_threshold_is_the_input_and_bad_thresholds_are_refused():
    z = torch.randn(3, 4)
    assert resample_beyond(z, None, lambda k: torch.zeros(k)) is z
    for bad in (0.0, -1.0, float("nan"), float("inf"), 0.001):
        with pytest.raises(GankitError, match="--truncation-normal"):
            check_truncation(bad)


class TinyBNG(nn.Module):
    """G(z, labels) = bn(sn(linear)(z) + embed(labels)), then a linear layer."""

    def __init__(self):
        super().__init__()
        self.linear = spectral_norm(nn.Linear(3, 5))
        self.embed = nn.Embedding(4, 5)
        self.bn = nn.BatchNorm1d(5)
        self.out = nn.Linear(5, 2)

    def pre_bn(self, z, labels):
        return self.linear(z) + self.embed(labels)

    def forward(self, z, labels):
        return self.out(self.bn(self.pre_bn(z, labels)))


def test_standing_statistics_average_the_batch_statistics_and_change_only_bn_buffers():
    torch.manual_seed(0)
    G = TinyBNG().eval()
    with torch.no_grad():
        G.bn.running_mean.fill_(3.0)  # a trained G's statistics, after 500 batches
        G.bn.num_batches_tracked.fill_(500)
        G(torch.randn(4, 3), torch.arange(4))  # eval: a forward moves nothing
    before = {k: v.clone() for k, v in G.state_dict().items()}
    assert standing_statistics(G, 3, 6, latent_dim=3, num_classes=4, seed=11) == 1
    # By hand: the same draws, each batch's mean and unbiased variance of BN's input, averaged.
    gen = torch.Generator().manual_seed(11)
    means, variances = [], []
    with torch.no_grad():
        for _ in range(3):
            z = torch.randn(6, 3, generator=gen)
            labels = torch.randint(4, (6,), generator=gen)
            x = G.pre_bn(z, labels)
            means.append(x.mean(0))
            variances.append(x.var(0, unbiased=True))
    assert torch.allclose(G.bn.running_mean, torch.stack(means).mean(0), atol=1e-6)
    assert torch.allclose(G.bn.running_var, torch.stack(variances).mean(0), atol=1e-6)
    assert G.bn.momentum == 0.1 and not G.bn.training and not G.training
    after = G.state_dict()
    changed = {k for k in after if not torch.equal(after[k], before[k])}
    assert changed == {"bn.running_mean", "bn.running_var", "bn.num_batches_tracked"}  # SN's u, v did not move
    # Reproducible per seed.
    again = TinyBNG().eval()
    again.load_state_dict(before)
    standing_statistics(again, 3, 6, latent_dim=3, num_classes=4, seed=11)
    assert torch.equal(again.bn.running_var, G.bn.running_var)


def test_standing_statistics_refuse_a_g_without_batchnorm():
    with pytest.raises(GankitError, match="no BatchNorm layer"):
        standing_statistics(nn.Linear(3, 2), 2, 4, latent_dim=3)


@pytest.fixture(scope="module")
def trained_dcgan(tmp_path_factory):
    """A tiny DCGAN (BatchNorm in G) trained 2 steps on 8 px digits."""
    from gan_kit.runs.session import train
    from gan_kit.testing import make_run

    folder = tmp_path_factory.mktemp("dcgan")
    run = make_run(folder, overrides=["architecture={name='dcgan', latent_dim=8, ngf=4, ndf=4}",
                                      "growth={name='static', batch_size=8}", "init.name='normal'", "penalty=[]"])
    train(run, max_steps=2)
    run.save_checkpoint("latest")
    return run.out_dir / "checkpoints" / "latest.pt"


def read_pngs(folder):
    return {p.name: p.read_bytes() for p in sorted(folder.glob("*.png"))}


def test_generate_and_sample_draw_with_the_tricks_reproducibly(trained_dcgan, tmp_path):
    base = ("generate", trained_dcgan, "--seeds", "0-1", "--device", "cpu", "--outdir")
    assert invoke(*base, tmp_path / "plain").exit_code == 0
    assert invoke(*base, tmp_path / "wide", "--truncation-normal", "100").exit_code == 0
    for name in ("t1", "t2"):
        result = invoke(*base, tmp_path / name, "--truncation-normal", "0.3", "--standing-stats", "2",
                        "--standing-batch", "8")
        assert result.exit_code == 0, result.output
    assert read_pngs(tmp_path / "wide") == read_pngs(tmp_path / "plain")
    assert read_pngs(tmp_path / "t1") == read_pngs(tmp_path / "t2") != read_pngs(tmp_path / "plain")
    out = tmp_path / "grid.png"
    result = invoke("sample", trained_dcgan, "-n", "4", "--device", "cpu", "--out", out, "--truncation-normal", "0.5",
                    "--standing-stats", "1")
    assert result.exit_code == 0, result.output and out.is_file()


def test_eval_and_export_take_the_tricks(trained_dcgan, tmp_path):
    result = invoke("eval", trained_dcgan, "--metric", "swd", "--n", "16", "--device", "cpu", "--json",
                    "--truncation-normal", "0.5", "--standing-stats", "2", "--standing-batch", "8")
    assert result.exit_code == 0, result.output
    assert math.isfinite(json.loads(result.output)["results"]["swd"]["trained"]["Metrics/swd"])
    out = tmp_path / "export"
    result = invoke("export", trained_dcgan, "--out", out, "--format", "safetensors", "--truncation-normal", "0.5",
                    "--standing-stats", "2", "--standing-batch", "8")
    assert result.exit_code == 0, result.output
    config = json.loads((out / "config.json").read_text())
    assert config["truncation_normal"] == 0.5
    assert config["standing_stats"] == {"batches": 2, "batch_size": 8, "seed": 0}
    assert "truncated to [-0.5, 0.5]" in config["inputs"][0]["distribution"]
    from safetensors.torch import load_file

    from gan_kit.runs.checkpoint import load

    exported = load_file(str(out / "model.safetensors"))
    trained = load(trained_dcgan)["G_ema"]
    bn = [k for k in exported if k.endswith("running_var")]
    assert bn and all(not torch.equal(exported[k], trained[k]) for k in bn)
    assert all(torch.equal(exported[k], trained[k]) for k in exported if "running" not in k and "num_batches" not in k)


def test_standing_stats_of_a_g_without_batchnorm_is_one_line(trained_pggan, tmp_path):
    result = invoke("generate", trained_pggan, "--seeds", "0", "--device", "cpu", "--outdir", tmp_path,
                    "--standing-stats", "2")
    assert result.exit_code == 2 and "no BatchNorm layer" in result.output and "Traceback" not in result.output
    result = invoke("generate", trained_pggan, "--seeds", "0", "--device", "cpu", "--outdir", tmp_path,
                    "--truncation-normal", "0")
    assert result.exit_code == 2 and "--truncation-normal: 0.0" in result.output
    result = invoke("generate", trained_pggan, "--seeds", "0", "--device", "cpu", "--outdir", tmp_path,
                    "--standing-batch", "4")  # alone it would do nothing: refused, not ignored
    assert result.exit_code == 2 and "--standing-batch goes with --standing-stats" in result.output
    assert not list(tmp_path.glob("*.png"))
