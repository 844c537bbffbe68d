"""Class-conditional StyleGAN2: the label embedded and joined to z in G's mapping
network, D's logit projected on a label mapping (stylegan2-ada-pytorch's cmap), path length with
the labels, training, resume and ``gankit sample --class``."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from PIL import Image

import gan_kit.builtin.architectures.stylegan2 as sg2
from gan_kit.runs import checkpoint as ckpt
from gan_kit.plugin_api.components import BuildContext
from gan_kit.runs.session import train
from gan_kit.testing import make_run

ROOT = Path(__file__).resolve().parent.parent
SG2_COND = ["architecture={name='stylegan2', latent_dim=8, w_dim=8, mapping_layers=2, channel_base=32, "
            "channel_max=8, d_mapping_layers=2, conditional=true}", "growth={name='static', batch_size=8}",
            "loss.name='bce'", "penalty=[{name='r1', weight=1.0, interval=2}, {name='path-length', weight=2.0, "
            "interval=2}]"]


def pair(num_classes=10, **kw):
    torch.manual_seed(0)
    o = dict(latent_dim=8, w_dim=6, mapping_layers=2, channel_base=32, channel_max=8, d_mapping_layers=2)
    o.update(kw)
    arch = sg2.StyleGAN2(sg2.StyleGAN2.Options(**o), BuildContext(num_classes=num_classes))
    G, D = arch.build(8, 1)
    return G, D


def normalize(x):
    return x / torch.sqrt(x.square().mean(dim=1, keepdim=True) + 1e-8)


def test_mapping_embeds_the_label_and_joins_it_to_z():
    G, _ = pair()
    m = G.mapping_network
    assert m.embed.weight.shape == (6, 10)  # one w_dim vector per class (a FC layer on the one-hot label)
    assert m.layers[0].weight.shape == (6, 8 + 6)  # first layer sees [z, embedding]
    z, labels = torch.randn(5, 8), torch.tensor([0, 3, 3, 9, 1])
    # the defining computation: normalised z and normalised embedded one-hot label, concatenated
    emb = F.linear(F.one_hot(labels, 10).float(), m.embed.effective_weight(), m.embed.bias * m.embed.lr_mult)
    x = torch.cat([normalize(z), normalize(emb)], dim=1)
    for layer in m.layers:
        x = layer(x)
    torch.testing.assert_close(m(z, labels), x)
    ws = G.mapping(z, labels)
    assert ws.shape == (5, G.num_ws, 6)
    other = G.mapping(z, torch.tensor([1, 3, 4, 9, 2]))
    moved = (ws - other).abs().amax(dim=(1, 2))
    assert (moved[[0, 2, 4]] > 1e-6).all() and (moved[[1, 3]] == 0).all()  # each sample follows its own label


def test_d_projects_its_last_features_on_the_label_mapping():
    _, D = pair()
    assert D.cmap_dim == 8 and D.out.weight.shape == (8, 8)  # cmap_dim features instead of one logit
    x, labels = torch.randn(4, 1, 8, 8), torch.tensor([2, 2, 7, 0])
    logits = D(x, labels)
    assert logits.shape == (4,)
    h = x
    h = D.from_rgb(h)
    for block in D.blocks:
        h = block(h)
    out = D.out(D.fc(D.conv(D.mbstd(h)).flatten(1)))  # [N, cmap_dim]
    cmap = D.mapping(None, labels)  # [N, cmap_dim]: the label alone through D's mapping network
    torch.testing.assert_close(logits, (out * cmap).sum(dim=1) / math.sqrt(8))
    other = D(x, torch.tensor([3, 2, 7, 1]))
    assert (logits - other).abs()[[0, 3]].min() > 1e-6 and torch.equal(logits[1:3], other[1:3])


def test_networks_name_a_missing_label_and_unconditional_ones_refuse_labels():
    G, D = pair()
    with pytest.raises(ValueError, match="needs labels"):
        G(torch.randn(2, 8))
    with pytest.raises(ValueError, match="needs labels"):
        D(torch.randn(2, 1, 8, 8))
    G0, D0 = pair(num_classes=0)
    assert G0.mapping_network.embed is None and D0.mapping is None and D0.out.weight.shape == (1, 8)
    with pytest.raises(ValueError, match="not class-conditional"):
        G0(torch.randn(2, 8), torch.zeros(2, dtype=torch.long))
    with pytest.raises(ValueError, match="not class-conditional"):
        D0(torch.randn(2, 1, 8, 8), torch.zeros(2, dtype=torch.long))


def test_conditional_stylegan2_trains_with_path_length_on_the_labels_resumes_and_samples_a_class(tmp_path):
    run = make_run(tmp_path, overrides=[*SG2_COND, "run.total_kimg=0.032", "run.snapshot_ticks=1"])
    seen = []
    mapping = type(run.G).mapping

    def spy(self, z, labels=None, *a, **k):
        if self.training:  # G, not G_ema's sample grids
            seen.append(labels)
        return mapping(self, z, labels, *a, **k)

    type(run.G).mapping = spy
    try:
        stats = train(run)
    finally:
        type(run.G).mapping = mapping
    assert math.isfinite(stats["Loss/G"]) and stats["Loss/G/path-length"] > 0
    # every mapping in training had labels: the strategy's G forwards, style mixing and path length
    # (batch 8 // batch_shrink 2 = 4 labels)
    assert seen and all(y is not None and y.dtype == torch.int64 for y in seen)
    assert {len(y) for y in seen} == {8, 4}
    latest = tmp_path / "run" / "checkpoints" / "latest.pt"
    state = ckpt.load(latest)
    assert state["num_classes"] == 10
    # stopped halfway and resumed: bit-identical (noise, mixing and path length with labels)
    half = make_run(tmp_path / "b", overrides=[*SG2_COND, "run.total_kimg=0.016"])
    train(half)
    resumed = make_run(tmp_path / "b", overrides=[*SG2_COND, "run.total_kimg=0.032"],
                       recipe=tmp_path / "b" / "tiny.toml")
    train(resumed, resume=True)
    other = ckpt.load(tmp_path / "b" / "run" / "checkpoints" / "latest.pt")
    for net in ("G", "D", "G_ema"):
        assert [k for k in state[net] if not torch.equal(state[net][k], other[net][k])] == [], net
    assert state["components"] == other["components"]
    from click.testing import CliRunner

    from gan_kit.cli import cli

    out = tmp_path / "three.png"
    r = CliRunner().invoke(cli, ["sample", str(latest), "--class", "3", "-n", "4", "--truncation", "0.7",
                                 "--out", str(out)])
    assert r.exit_code == 0 and "of class 3" in r.output, r.output
    assert Image.open(out).size[0] > 32


def test_the_conditional_recipe_is_the_stylegan2_recipe_with_labels():
    from gan_kit.recipe import load_recipe

    cond, _ = load_recipe(ROOT / "recipes" / "stylegan2-conditional.toml")
    plain, _ = load_recipe(ROOT / "recipes" / "stylegan2.toml")
    assert cond.architecture.slot.conditional and not plain.architecture.slot.conditional
    assert cond.architecture.options.resample == "fir" and cond.architecture.options.d_mapping_layers == 8
    assert (cond.loss, cond.penalties, cond.optim) == (plain.loss, plain.penalties, plain.optim)
