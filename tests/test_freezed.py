"""FreezeD (Mo et al. 2020): ``architecture.freeze_d_blocks = N`` freezes D's first N blocks from
the input side; they stay bit-identical through training (from --init-from weights too) while the
rest of D and G train, and a recipe asking for more blocks than D has gets one line."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from gan_kit.runs.run import build_run
from gan_kit.runs.session import train
from gan_kit.base.errors import GankitError
from gan_kit.recipe import load_recipe
from gan_kit.runs.resume import init_from

RECIPE = Path(__file__).resolve().parents[1] / "recipes" / "r3gan.toml"
TINY = ["architecture.width=8", "architecture.cardinality=2", "architecture.blocks_per_stage=1",
        "growth.batch_size=4", "metric=[]", "run.tick_kimg=0.008", "run.total_kimg=0.1"]


def snapshot(module):
    return [p.detach().clone() for p in module.parameters()]


def test_frozen_blocks_stay_bit_identical_from_init_from_weights(tmp_path):
    base, plugins = load_recipe(RECIPE, [*TINY, f"run.out_dir={tmp_path / 'pre'}"])
    pre = build_run(base, plugins)
    train(pre, max_steps=2)
    ckpt = pre.save_checkpoint("latest")
    recipe, plugins = load_recipe(RECIPE, [*TINY, f"run.out_dir={tmp_path / 'fine'}",
                                           "architecture.freeze_d_blocks=2"])
    run = build_run(recipe, plugins)
    init_from(run, ckpt)
    blocks = run.arch.d_blocks(run.D)
    assert len(blocks) == 3
    frozen = [snapshot(b) for b in blocks[:2]]
    assert all(torch.equal(a, b) for a, b in zip(frozen[0], snapshot(pre.arch.d_blocks(pre.D)[0])))
    last, g0 = snapshot(blocks[2]), snapshot(run.G)
    train(run, max_steps=3)
    for before, block in zip(frozen, blocks[:2]):
        assert all(torch.equal(a, b) for a, b in zip(before, block.parameters()))
        assert all(p.grad is None and not p.requires_grad for p in block.parameters())
    assert any(not torch.equal(a, b) for a, b in zip(last, blocks[2].parameters()))  # the rest of D trains
    assert any(not torch.equal(a, b) for a, b in zip(g0, run.G.parameters()))


def test_pggan_names_its_blocks_from_the_input(tiny_recipe):
    recipe, plugins = load_recipe(tiny_recipe, ["architecture.freeze_d_blocks=1"])
    run = build_run(recipe, plugins)  # pggan, 8 px: [fromRGB + 8 px block, 4x4 epilogue]
    first = run.arch.d_blocks(run.D)[0]
    assert {id(p) for p in run.D.from_rgb.parameters()} <= {id(p) for p in first.parameters()}
    assert not any(p.requires_grad for p in first.parameters())
    assert all(p.requires_grad for p in run.D.dense.parameters())


def test_more_blocks_than_d_has_is_one_line(tiny_recipe):
    recipe, plugins = load_recipe(tiny_recipe, ["architecture.freeze_d_blocks=3"])
    with pytest.raises(GankitError, match=r"architecture\.freeze_d_blocks: 3, but 'pggan''s D has 2 blocks; "
                                          r"freeze at most 2"):
        build_run(recipe, plugins)


def test_an_architecture_naming_no_blocks_is_refused(tmp_path):
    dcgan = Path(__file__).resolve().parents[1] / "recipes" / "dcgan.toml"
    recipe, plugins = load_recipe(dcgan, [f"run.out_dir={tmp_path / 'run'}", "architecture.freeze_d_blocks=1",
                                          "metric=[]"])
    with pytest.raises(GankitError, match=r"'dcgan''s D names no blocks \(Architecture\.d_blocks\); freeze at most "
                                          r"0 \(set it to 0\)"):
        build_run(recipe, plugins)
