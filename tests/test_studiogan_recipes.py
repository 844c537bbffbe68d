"""recipes/sngan.toml and recipes/biggan.toml: they load and train a couple of steps at tiny
sizes; the 16 px form of StudioGAN's ResNets they use (its 32 px networks less one block); and
the G_ema of their batch-norm G: its statistics are recomputed from its own forwards without
stepping spectral norm's power iteration."""

from __future__ import annotations

import copy
import math
from pathlib import Path

import pytest
import torch
from torch import nn

from gan_kit.base.errors import RecipeError
from gan_kit.builtin.architectures.studiogan import BigGANGenerator, DBlock, Discriminator, GBlock
from gan_kit.builtin.architectures.studiogan.layers import D_DOWNSAMPLE
from gan_kit.testing import make_run, train_steps
from gan_kit.training.ema import refresh_batchnorm

RECIPES = Path(__file__).resolve().parents[1] / "recipes"
TINY = ["run.device=cpu", "run.progress=false", "run.sample_grid=4", "run.snapshot_ticks=0", "metric=[]",
        "growth.batch_size=4", "update.d_steps=2", "architecture.g_conv_dim=4", "architecture.d_conv_dim=8",
        "run.tick_kimg=0.004", "run.total_kimg=0.008"]


@pytest.mark.parametrize("name", ["sngan", "biggan"])
def test_the_recipe_loads_and_trains_two_steps(tmp_path, name):
    extra = ["architecture.shared_dim=8"] if name == "biggan" else []
    run = make_run(tmp_path, recipe=RECIPES / f"{name}.toml", overrides=[*TINY, *extra,
                                                                        f"run.out_dir={tmp_path / 'run'}"])
    assert run.num_classes == 10 and run.recipe.resolution == 16
    assert run.recipe.loss.name == "hinge" and run.recipe.init.name == "orthogonal"
    before = {k: v.clone() for k, v in run.G.state_dict().items()}
    stats = train_steps(run, 2)
    assert math.isfinite(stats["Loss/D"]) and math.isfinite(stats["Loss/G"])
    assert any(not torch.equal(before[k], v) for k, v in run.G.state_dict().items())
    with torch.no_grad():
        images = run.G_ema(torch.randn(3, run.latent_dim), torch.tensor([0, 1, 2]))
    assert images.shape == (3, 1, 16, 16) and torch.isfinite(images).all()
    assert (tmp_path / "run" / "checkpoints" / "latest.pt").is_file()


def test_16px_networks_are_the_32px_ones_less_one_block():
    G = BigGANGenerator(16, 1, latent_dim=30, shared_dim=8, widths=[16, 16, 16], attention=(2,), num_classes=10)
    assert sum(isinstance(b, GBlock) for b in G.blocks) == 2 and G.chunk == 10  # 4 -> 8 -> 16, z in 3 chunks
    D = Discriminator(16, 1, [8, 8, 8], D_DOWNSAMPLE[16], attention=(1,), sn=True, num_classes=10)
    blocks = [b for b in D.blocks if isinstance(b, DBlock)]
    assert [b.downsample for b in blocks] == [True, False, False]  # 16 -> 8, then 8 px as at 32 px
    x = G(torch.randn(5, 30), torch.arange(5))
    assert x.shape == (5, 1, 16, 16)
    h = x
    for b in D.blocks:
        h = b(h)
    assert h.shape == (5, 8, 8, 8)
    assert D(x, torch.arange(5)).shape == (5,)


def test_a_resolution_below_16_is_refused():
    with pytest.raises(RecipeError) as e:
        make_run(".", recipe=RECIPES / "sngan.toml", overrides=["data.resolution=8"])
    assert any("sngan-resnet is defined for data.resolution 16, 32, 64, 128, 256, 512" in p and "got 8" in p
               for p in e.value.problems), e.value.problems


def test_g_ema_refresh_recomputes_bn_statistics_and_leaves_spectral_norm_vectors_alone():
    """G_ema's weights are an average of G's, so its BN statistics are recomputed from its own
    forwards; the refresh must not run the power iteration of spectral norm (a train-mode forward
    would step ``u``, ``v`` 16 times on the averaged weights, and the statistics would then belong
    to sigmas the sampling network no longer has)."""
    torch.manual_seed(0)
    G = BigGANGenerator(16, 1, latent_dim=30, shared_dim=8, widths=[16, 16, 16], attention=(2,), num_classes=10)
    with torch.no_grad():
        for _ in range(20):  # a trained G's SN vectors: the power iteration run in, G's statistics moved
            G(torch.randn(16, 30), torch.randint(10, (16,)))
    G_ema = copy.deepcopy(G).eval()
    with torch.no_grad():
        for p in G_ema.parameters():  # averaged weights differ from G's
            p.mul_(1.1)
    sn_before = {k: v.clone() for k, v in G_ema.state_dict().items() if k.endswith((".u", ".v"))}
    assert sn_before
    gen = torch.Generator().manual_seed(1)
    draws = []

    def latent(n):
        z, y = torch.randn(n, 30, generator=gen), torch.randint(10, (n,), generator=gen)
        draws.append((z, y))
        return z, y

    refresh_batchnorm(G_ema, latent, _no_autocast, batches=3, batch_size=16)
    after = G_ema.state_dict()
    assert all(torch.equal(after[k], v) for k, v in sn_before.items())  # SN's vectors did not move
    assert not any(m.training for m in G_ema.modules())
    # By hand: the last BN's input, every BN on batch statistics and spectral norm as stored, has
    # the batch means whose average is now its running mean.
    by_hand = copy.deepcopy(G_ema)
    norms = [m for m in by_hand.modules() if isinstance(m, nn.modules.batchnorm._BatchNorm)]
    for m in norms:
        m.train()
    seen = []
    by_hand.bn.register_forward_hook(lambda m, i, o: seen.append(i[0].mean(dim=(0, 2, 3))))
    with torch.no_grad():
        for z, y in draws:
            by_hand(z, y)
    assert torch.allclose(G_ema.bn.running_mean, torch.stack(seen).mean(0), rtol=1e-4, atol=1e-5)
    # So the eval-mode G_ema is the network whose statistics those are: near its batch-stats output.
    z, y = torch.randn(64, 30, generator=gen), torch.arange(64) % 10
    with torch.no_grad():
        ev, bs = G_ema(z, y), by_hand(z, y)
    assert (ev - bs).abs().mean() < 0.05, (ev - bs).abs().mean()


def _no_autocast():
    return torch.autocast("cpu", enabled=False)
